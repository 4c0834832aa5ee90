//! Backends: the in-memory one here, the others behind their Cargo features.

mod memory;
mod url;

pub use memory::MemoryBackend;
pub use url::{connect, BackendUrl};
