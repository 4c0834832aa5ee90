//! Backends: the in-memory one here, the others behind their Cargo features.

pub(crate) mod jobs;
mod memory;
pub use crate::spi::options;
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
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use crate::spi::url::BackendUrl;
pub use memory::MemoryBackend;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use sql::connect_url as sql_connect_url;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use sql::{
    ConnectionProbe, Dialect, Flavor, ServerVersion, SqlBackend, SqlBackendBuilder,
    DEFAULT_POOL_SIZE, DEFAULT_PURGE_INTERVAL, DEFAULT_QUERY_TIMEOUT, PURGE_LIMIT,
};
#[cfg(feature = "zookeeper")]
pub use zookeeper::ZooKeeperBackend;
