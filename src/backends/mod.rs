//! Backends: the in-memory one here, the others behind their Cargo features.

pub(crate) mod failure;
pub(crate) mod jobs;
mod memory;
pub mod options;
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    all(feature = "zookeeper", feature = "tls")
))]
mod pem;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql;
mod url;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use memory::MemoryBackend;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use sql::{
    ConnectionProbe, Dialect, Flavor, ServerVersion, SqlBackend, SqlBackendBuilder,
    DEFAULT_POOL_SIZE, DEFAULT_PURGE_INTERVAL, DEFAULT_QUERY_TIMEOUT, PURGE_LIMIT,
};
pub use url::{connect, BackendUrl};
#[cfg(feature = "zookeeper")]
pub use zookeeper::ZooKeeperBackend;
