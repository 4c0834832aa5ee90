//! The mapping of `redis` crate errors for the scripting implementations: into the
//! library's [`Error`] (timeouts as [`Error::Timeout`], the rest through the backend's
//! `failure` module), and the tests of what an error means for the call (`NOSCRIPT`, a
//! broken connection, a refusal that is safe to send again).

use crate::error::Error;
use std::time::Duration;

pub(super) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

pub(super) fn map_err(
    operation: &'static str,
    timeout: Duration,
) -> impl Fn(redis::RedisError) -> Error {
    move |e| {
        if e.is_timeout() || super::cluster_node::lost_by_timeout(&e) {
            Error::Timeout {
                operation,
                after: timeout,
                source: Some(Box::new(e)),
            }
        } else {
            super::super::failure::error(operation, e)
        }
    }
}

pub(super) fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// Whether a cluster node refused a call before running it, in a way that passes as a slot
/// migration goes on: `TRYAGAIN`, and for a call of one slot (`single`) also a redirection
/// (`ASK`, `MOVED`) or `CLUSTERDOWN` left after the cluster client's own retries. A batch's
/// redirections are its caller's (a keep-alive's anchor script reading a term whose slot
/// moved away is refused for good, and falls back to scripts per slot).
pub(super) fn is_try_again(e: &redis::RedisError, single: bool) -> bool {
    if single {
        e.is_cluster_error()
    } else {
        e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
    }
}
