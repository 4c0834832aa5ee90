//! Backends: the in-memory one here, the others behind their Cargo features.

mod memory;
#[cfg(feature = "redis")]
pub mod redis;
mod url;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use memory::MemoryBackend;
pub use url::{connect, BackendUrl};
#[cfg(feature = "zookeeper")]
pub use zookeeper::ZooKeeperBackend;
