//! The cluster client's connection to one node ([`ClusterNode`]): a [`NodeConnection`]
//! (interrupted reads are read again) whose failures after a command was sent are never
//! sent again by the cluster client (issue 21.6).
//!
//! The `redis` crate's cluster client sends a command again after any I/O or parse error of
//! its reply (`RetryImmediately`, or `Reconnect` then again): a reply that timed out, was
//! interrupted or cut off, for a command that ran, made the command run twice (a resent
//! release answered "not held" for the lock it had just released). Here a failure once the
//! command was handed to the socket whole is reported as [`ReplyLost`], inside an I/O error of
//! kind `Unsupported`, the kind the client never resends ([`redis::RetryMethod::NoRetry`];
//! checked by a unit test). Failures before that stay as they are, so the client still
//! reconnects and resends after them, which is safe: a connect that failed sent nothing, and
//! a send that found its connection gone (reset, broken pipe, closed after an earlier failure)
//! never delivered the command whole. Other send failures (a write timeout) are ambiguous
//! and reported as lost too. Server replies (`MOVED`, `ASK`, `TRYAGAIN`: the command did not
//! run) pass through, and the client follows them as before.

use super::node::NodeConnection;
use redis::{ConnectionLike, RedisError, RedisResult, Value};
use std::io;
use std::time::Duration;

/// A node connection of the cluster client (see the [module documentation](self)).
pub(super) struct ClusterNode(NodeConnection);

/// The reply to a command sent whole was lost (timed out, cut off, unreadable): the command
/// may have run, so it is not sent again.
#[derive(Debug)]
pub(super) struct ReplyLost(RedisError);

impl std::fmt::Display for ReplyLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The cause is the source: a report of the chain says it once.
        f.write_str("the reply to a command sent to a cluster node was lost")
    }
}

impl std::error::Error for ReplyLost {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// `e`, a failure after a command was sent, as an error the cluster client does not resend
/// after (a server error, whose command did not run or ran once, stays as it is).
fn lost(e: RedisError) -> RedisError {
    if matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    ) {
        return e;
    }
    RedisError::from(io::Error::new(io::ErrorKind::Unsupported, ReplyLost(e)))
}

/// Whether a send that failed with `e` surely did not deliver its command whole: its
/// connection is gone (so the server drops what it got of it).
pub(super) fn not_delivered(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal()
}

/// The [`ReplyLost`] inside `e`, if it is one.
fn reply_lost(e: &RedisError) -> Option<&ReplyLost> {
    use std::error::Error as _;
    let source = e.source()?;
    let io = source.downcast_ref::<io::Error>().or_else(|| {
        source
            .downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>()
            .and_then(|inner| inner.downcast_ref::<io::Error>())
    })?;
    io.get_ref()?.downcast_ref::<ReplyLost>()
}

/// Whether `e` is a lost reply that timed out (so the call reports a timeout).
pub(super) fn lost_by_timeout(e: &RedisError) -> bool {
    reply_lost(e).is_some_and(|l| l.0.is_timeout())
}

impl ClusterNode {
    fn send(&mut self, cmd: &[u8]) -> RedisResult<()> {
        redis::cluster::Connect::send_packed_command(&mut self.0, cmd).map_err(|e| {
            if not_delivered(&e) {
                e
            } else {
                lost(e)
            }
        })
    }

    fn recv(&mut self) -> RedisResult<Value> {
        redis::cluster::Connect::recv_response(&mut self.0).map_err(lost)
    }
}

impl ConnectionLike for ClusterNode {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send(cmd)?;
        self.recv()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send(cmd)?;
        let mut out = Vec::with_capacity(count);
        let mut skipped_error = None;
        for i in 0..offset.saturating_add(count) {
            let v = self.recv()?;
            if i >= offset {
                out.push(v);
            } else if let Value::ServerError(e) = v {
                skipped_error.get_or_insert(e);
            }
        }
        match skipped_error {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

/// Every node of the cluster is connected this way (see [`NodeConnection::open`]).
impl redis::cluster::Connect for ClusterNode {
    fn connect<T>(info: T, timeout: Option<Duration>) -> RedisResult<Self>
    where
        T: redis::IntoConnectionInfo,
    {
        NodeConnection::open(&info.into_connection_info()?, timeout).map(ClusterNode)
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        self.send(cmd)
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        redis::cluster::Connect::set_write_timeout(&self.0, dur)
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        redis::cluster::Connect::set_read_timeout(&self.0, dur)
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        self.recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::RetryMethod::NoRetry;

    fn io_err(k: io::ErrorKind) -> RedisError {
        RedisError::from(io::Error::from(k))
    }

    #[test]
    fn a_lost_reply_is_never_resent_by_the_cluster_client() {
        for e in [
            io_err(io::ErrorKind::Interrupted),
            io_err(io::ErrorKind::TimedOut),
            io_err(io::ErrorKind::WouldBlock),
            io_err(io::ErrorKind::ConnectionReset),
            io_err(io::ErrorKind::UnexpectedEof),
            RedisError::from((redis::ErrorKind::Parse, "garbage")),
        ] {
            // Each of these made the client send the command again.
            assert!(!matches!(e.retry_method(), NoRetry), "{e}");
            let text = e.to_string();
            let l = lost(e);
            assert!(matches!(l.retry_method(), NoRetry), "{l}");
            assert!(!l.is_cluster_error() && !l.is_connection_dropped(), "{l}");
            let lost = reply_lost(&l).expect("a lost reply");
            assert_eq!(std::error::Error::source(lost).unwrap().to_string(), text);
        }
        assert!(lost_by_timeout(&lost(io_err(io::ErrorKind::WouldBlock))));
        assert!(!lost_by_timeout(&lost(io_err(
            io::ErrorKind::ConnectionReset
        ))));
        assert!(!lost_by_timeout(&io_err(io::ErrorKind::TimedOut)));
    }

    #[test]
    fn a_lost_reply_is_reported_with_its_cause() {
        let to_error = super::super::error::map_err("acquiring", Duration::from_secs(1));
        let e = to_error(lost(io_err(io::ErrorKind::WouldBlock)));
        assert!(matches!(e, crate::Error::Timeout { .. }), "{e:?}");
        let e = to_error(lost(io_err(io::ErrorKind::UnexpectedEof)));
        assert!(matches!(e, crate::Error::Backend { .. }), "{e:?}");
        let report = e.report().to_string();
        assert!(
            report.contains("was lost: unexpected end of file"),
            "{report}"
        );
        assert_eq!(report.matches("end of file").count(), 1, "{report}");
    }

    #[test]
    fn server_replies_pass_through() {
        let moved = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
            "moved",
        ));
        assert!(matches!(
            lost(moved).retry_method(),
            redis::RetryMethod::MovedRedirect
        ));
    }

    #[test]
    fn a_send_on_a_gone_connection_is_still_retried() {
        for k in [
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::NotConnected,
        ] {
            assert!(not_delivered(&io_err(k)), "{k:?}");
        }
        assert!(!not_delivered(&io_err(io::ErrorKind::TimedOut)));
        assert!(!not_delivered(&io_err(io::ErrorKind::WouldBlock)));
    }
}
