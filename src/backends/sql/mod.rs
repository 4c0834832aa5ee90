//! The SQL backends: PostgreSQL 14+ (feature `postgres`) and MySQL 8.0+ / MariaDB 10.6+
//! (feature `mysql`), one [`SqlBackend`] type with a [`Dialect`].
//!
#![doc = include_str!("design.md")]
//!
//! # Files
//!
//! One backend type over one driver trait, a dialect per folder (the flavors pattern):
//!
//! * [`driver`]: the [`Driver`](driver::Driver) trait both dialects implement, its rows,
//!   [`DbError`](driver::DbError) and the retry loop [`with_conn`](driver::with_conn);
//! * [`backend`]: [`SqlBackend`] and its `LeaseBackend` impl; [`admin`]: its calls beyond the
//!   SPI (schema, `simba doctor`); [`builder`]: [`SqlBackendBuilder`] and the options;
//! * [`tables`]: table names under a prefix; [`jobs`]: run-once jobs; [`rw`]: read-write
//!   locks; [`pool`]: the
//!   connection pool; [`tls`]: the TLS options of both dialects; [`failure`]: every error;
//! * `postgres/` and `mysql/`: each dialect's statements, connections, row decoding and
//!   schema migration (and PostgreSQL's `LISTEN` connection).

mod admin;
mod backend;
mod builder;
mod driver;
mod failure;
mod jobs;
mod known;
#[cfg(feature = "mysql")]
mod mysql;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod rw;
mod tables;
mod tls;

use crate::error::Result;
use crate::spi::LeaseBackend;
use std::sync::Arc;
use std::time::Duration;

pub use backend::SqlBackend;
pub use builder::SqlBackendBuilder;
pub use driver::{ConnectionProbe, Flavor, ServerVersion};

/// The SQL dialect of a [`SqlBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL 14 or later.
    Postgres,
    /// MySQL 8.0+ or MariaDB 10.6+ (the SQL is the subset both accept).
    Mysql,
}

/// Default statement timeout: the default renew interval.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Default interval between two automatic purges of expired sessions.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of pooled connections.
pub const DEFAULT_POOL_SIZE: usize = 4;
/// The most expired sessions one [`LeaseBackend::purge_expired`] call removes.
pub const PURGE_LIMIT: usize = 1000;

/// Builds the backend for a `postgres://`/`mysql://` URL (the [`crate::connect`] arm).
pub(crate) fn connect_url(url: &str) -> Result<Arc<dyn LeaseBackend>> {
    Ok(Arc::new(SqlBackend::builder(url).build()?))
}
