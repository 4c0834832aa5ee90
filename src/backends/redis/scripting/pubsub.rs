//! The pub/sub reader both implementations listen with: one plain RESP3 connection,
//! pattern-subscribed, read one value at a time.

use super::error::map_err;
use super::pool::connect;
use super::{ConnectOptions, PubSubEvent};
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Listens on one plain connection (used by both implementations: classic pub/sub messages
/// reach every node of a cluster).
///
/// The connection speaks RESP3 (Redis 6 or later), where messages are pushes, and is read one
/// value at a time: whatever a server sends, `on_event` is called after every value (a value
/// that is no message counts as [`PubSubEvent::Idle`]), so a stream of other values never
/// keeps the listener from noticing it should stop. The connection is simply dropped at the
/// end (no unsubscribe round trip). (The `redis` crate's `PubSub` reads until a message comes,
/// and, with RESP2 replies, a read timeout makes the next reply be skipped.)
pub(super) fn listen_on(
    client: &redis::Client,
    opts: &ConnectOptions,
    name: &str,
    patterns: &[String],
    idle: Duration,
    on_event: &mut dyn FnMut(PubSubEvent<'_>) -> bool,
) -> Result<()> {
    let err = map_err("listening for notifications", opts.connect_timeout);
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(resp3)).map_err(&err)?;
    let mut con = connect(&client, opts).map_err(&err)?;
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query::<()>(&mut con)
        .map_err(&err)?;
    let mut subscribe = redis::cmd("PSUBSCRIBE");
    for p in patterns {
        subscribe.arg(p);
    }
    con.send_packed_command(&subscribe.get_packed_command())
        .map_err(&err)?;
    // One confirmation per pattern, all within the query timeout.
    let deadline = Instant::now() + opts.query_timeout;
    let mut confirmed = 0;
    while confirmed < patterns.len() {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                operation: "subscribing to notifications",
                after: opts.query_timeout,
                source: None,
            });
        }
        match con.recv_response().and_then(redis::Value::extract_error) {
            Ok(redis::Value::Push {
                kind: redis::PushKind::PSubscribe,
                ..
            }) => confirmed += 1,
            Ok(_) => {}
            Err(e) => return Err(err(e)),
        }
    }
    con.set_read_timeout(Some(idle)).map_err(&err)?;
    if !on_event(PubSubEvent::Subscribed) {
        return Ok(());
    }
    loop {
        let go_on = match con.recv_response() {
            Ok(v) => match redis::Msg::from_owned_value(v) {
                Some(msg) => on_event(PubSubEvent::Message {
                    channel: msg.get_channel_name(),
                    payload: msg.get_payload_bytes(),
                }),
                None => on_event(PubSubEvent::Idle),
            },
            Err(e) if read_again(&e) => on_event(PubSubEvent::Idle),
            Err(e) => return Err(err(e)),
        };
        if !go_on {
            return Ok(());
        }
    }
}

/// Whether a pub/sub read that failed with `e` should simply be read again: nothing arrived
/// in time, or the read was interrupted (`EINTR`: Linux fails a socket read with a timeout
/// that way after the process was stopped and continued, even without signal handlers).
fn read_again(e: &redis::RedisError) -> bool {
    e.is_timeout() || io_kind(e) == Some(std::io::ErrorKind::Interrupted)
}

/// The kind of the I/O error behind `e`, if it is one (the `redis` crate keeps it as the
/// error's source, behind an `Arc`).
fn io_kind(e: &redis::RedisError) -> Option<std::io::ErrorKind> {
    use std::error::Error as _;
    if !e.is_io_error() {
        return None;
    }
    let source = e.source()?;
    if let Some(io) = source.downcast_ref::<std::io::Error>() {
        return Some(io.kind());
    }
    source
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()
        .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn interrupted_and_timed_out_reads_are_read_again() {
        let io_err = |k: io::ErrorKind| redis::RedisError::from(io::Error::from(k));
        // Issue 9.10: EINTR (e.g. after SIGSTOP/SIGCONT on a socket with a read timeout).
        assert!(read_again(&io_err(io::ErrorKind::Interrupted)));
        assert!(read_again(&redis::RedisError::from(
            io::Error::from_raw_os_error(4)
        )));
        assert!(read_again(&io_err(io::ErrorKind::WouldBlock)));
        assert!(read_again(&io_err(io::ErrorKind::TimedOut)));
        for k in [
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
        ] {
            assert!(!read_again(&io_err(k)), "{k:?}");
        }
        assert!(!read_again(&redis::RedisError::from((
            redis::ErrorKind::Client,
            "other"
        ))));
    }
}
