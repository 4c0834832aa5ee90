//! The settings of a [`RedisBackend`](super::RedisBackend) ([`RedisConfig`], the URL options of
//! the same names) and their validation.

use super::scripting::{ConnectOptions, RedisTls};
use crate::backends::options;
use crate::error::{Error, Result};
use std::time::Duration;

/// The largest `pool_size` and `wait_replicas` accepted in a URL.
pub(super) const MAX_COUNT: usize = 1000;

/// Settings of a [`RedisBackend`](super::RedisBackend); the URL options of the same names.
///
/// Timeouts must be more than zero and at most one hour
/// ([`MAX_TIMEOUT`](crate::backends::options::MAX_TIMEOUT)), or the backend is refused with
/// [`Error::InvalidConfig`] naming the setting.
///
/// `purge_expired` drops group members whose expiry passed (members are also dropped lazily
/// whenever a group is read; sessions expire on their own through their TTL). On a cluster it
/// scans every primary listed by `CLUSTER SLOTS`.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// Key prefix (default `simba`).
    pub prefix: String,
    /// Replicas that must acknowledge a new term with `WAIT` (default 0; on a cluster, the
    /// replicas of the lease's master).
    pub wait_replicas: u32,
    /// Bound of every reply (default 5 s); `WAIT` waits two thirds of it.
    pub query_timeout: Duration,
    /// Bound of opening a connection (default 5 s).
    pub connect_timeout: Duration,
    /// Keep every script call to one hash slot (required on a cluster; allowed on one server).
    pub route_by_slot: bool,
    /// Idle connections kept per role (default 4).
    pub pool_size: usize,
    /// TLS material of a `rediss://` URL (feature `tls`; default: none).
    pub tls: RedisTls,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            prefix: "simba".into(),
            wait_replicas: 0,
            query_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            route_by_slot: false,
            pool_size: 4,
            tls: RedisTls::default(),
        }
    }
}

impl RedisConfig {
    pub(super) fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            query_timeout: self.query_timeout,
            connect_timeout: self.connect_timeout,
            pool_size: self.pool_size,
            tls: self.tls.clone(),
        }
    }

    pub(super) fn validate(&self, clustered: bool) -> Result<()> {
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 64
            || !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        {
            return Err(Error::config(
                "prefix",
                format!("{p:?}: 1–64 characters of [A-Za-z0-9._:-]"),
            ));
        }
        options::check_timeout("query_timeout", self.query_timeout)?;
        options::check_timeout("connect_timeout", self.connect_timeout)?;
        if clustered && !self.route_by_slot {
            return Err(Error::config(
                "route_by_slot",
                "a Redis Cluster needs route_by_slot = true",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_validated() {
        let bad_prefix = RedisConfig {
            prefix: "a b".into(),
            ..RedisConfig::default()
        };
        assert!(matches!(
            bad_prefix.validate(false),
            Err(Error::InvalidConfig { setting, .. }) if setting == "prefix"
        ));
        let wait_on_cluster = RedisConfig {
            wait_replicas: 1,
            route_by_slot: true,
            ..RedisConfig::default()
        };
        // Issue 21.9: `WAIT` runs on the master of each script's slot.
        assert!(wait_on_cluster.validate(true).is_ok());
        assert!(wait_on_cluster.validate(false).is_ok());
        assert!(RedisConfig::default().validate(false).is_ok());
    }
}
