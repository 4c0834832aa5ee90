//! A script and then `WAIT`, on one of our connections to the master of the script's slot
//! ([`Nodes`]; issue 21.9): `WAIT` counts the replicas that acknowledged what *this
//! connection* wrote, so it must follow the script on the connection that ran it.
//!
//! * **The script's reply is never lost.** It is read before anything of `WAIT`; a `WAIT`
//!   that fails (an error, a timeout, a cut connection) after a reply that asks for it
//!   counts as no acknowledgement, so a new term is released and the acquire fails, as on
//!   one server.
//! * **`WAIT` only after a new grant, without a second round trip on the grant path.** A
//!   pipeline cannot make `WAIT` depend on the script's reply (Redis refuses `WAIT` inside
//!   scripts and does not block on it inside `MULTI`), and an unneeded `WAIT` costs up to its
//!   whole timeout while fewer replicas than asked are connected (nothing then answers it
//!   sooner). So the script and `WAIT` go as one pipeline (one round trip) unless this
//!   backend's last script on the same key granted nothing (the name was held: a waiter
//!   polling it); then the script goes alone, and `WAIT` follows on the same connection
//!   only if this time it granted (one more round trip, on the grant that ends a wait).
//! * **Redirections** (`MOVED`, `ASK`: the script did not run) are followed here, to the
//!   node they name (`ASK` with `ASKING` first on the same connection), and the slot map is
//!   read again next time; `NOSCRIPT` sends the script whole; `TRYAGAIN` and `CLUSTERDOWN`
//!   are returned for the caller's retry within its timeout.

use super::super::keys::key_slot;
use super::cluster_node::{not_delivered, ClusterNode};
use super::cluster_nodes::{left, node_of, Addr, Nodes};
use super::node::NodeConnection;
use super::pool::{acknowledged, wait_ms};
use super::{Reply, ScriptCall};
use parking_lot::Mutex;
use redis::cluster::{ClusterConnection, Connect as _};
use redis::{RedisError, RedisResult, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How many redirections one call follows.
const MAX_REDIRECTS: usize = 4;

/// How many keys [`WaitHints`] remembers before it starts again.
const MAX_HINTS: usize = 4096;

/// The keys whose last script through this backend granted nothing (see the
/// [module documentation](self)).
#[derive(Default)]
pub(super) struct WaitHints(Mutex<HashSet<String>>);

impl WaitHints {
    fn held(&self, key: &str) -> bool {
        self.0.lock().contains(key)
    }

    fn record(&self, key: &str, granted: bool) {
        let mut held = self.0.lock();
        if granted {
            held.remove(key);
        } else if !held.contains(key) {
            if held.len() >= MAX_HINTS {
                held.clear();
            }
            held.insert(key.to_owned());
        }
    }
}

/// What [`eval_then_wait`] found: the script's reply, and the count of replicas that
/// acknowledged (`None`: `WAIT` is not asked for, or the master of the slot is unknown, see
/// [`Outcome::Unrouted`]).
pub(super) enum Outcome {
    /// The script ran on its master (or was refused there).
    Done(Value, Option<u32>),
    /// No address is known for the script's slot: the caller takes the cluster client's way.
    Unrouted,
}

/// Runs `call` on the master of its slot, then `WAIT replicas` (at most `timeout`, and
/// two thirds of what is left until `deadline`) on the same connection when `wait_if` says
/// so for its reply; see the [module documentation](self).
#[allow(clippy::too_many_arguments)] // one call's parts, all needed
pub(super) fn eval_then_wait(
    nodes: &Nodes,
    hints: &WaitHints,
    cluster: &mut ClusterConnection<ClusterNode>,
    call: &ScriptCall<'_>,
    wait_if: &dyn Fn(&Reply) -> bool,
    replicas: u32,
    timeout: Duration,
    deadline: Instant,
) -> RedisResult<Outcome> {
    let Some(key) = call.keys.first() else {
        return Ok(Outcome::Unrouted);
    };
    let slot = key_slot(key);
    let Some(mut addr) = node_of(&nodes.routes(cluster), slot).cloned() else {
        return Ok(Outcome::Unrouted);
    };
    let mut asking = false;
    let mut whole = false;
    let mut fresh = false;
    for _ in 0..MAX_REDIRECTS {
        let mut con = match nodes.take(&addr) {
            Ok(c) => c,
            // Nothing was sent: once with the slot map read again (a failover may have
            // moved the slot to a node that answers).
            Err(e) => {
                nodes.forget();
                match node_of(&nodes.routes(cluster), slot) {
                    Some(a) if *a != addr && !fresh => {
                        addr = a.clone();
                        fresh = true;
                        continue;
                    }
                    _ => return Err(e),
                }
            }
        };
        let pipelined = !hints.held(key);
        let wait_ms = || {
            let left = deadline.saturating_duration_since(Instant::now());
            wait_ms(timeout.min(left * 2 / 3))
        };
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(if whole { call.eval() } else { call.evalsha() });
        if pipelined {
            pipe.cmd("WAIT").arg(replicas).arg(wait_ms());
        }
        if let Err(e) = con.send_packed_command(&pipe.get_packed_pipeline()) {
            if not_delivered(&e) && !fresh {
                // A pooled connection the node had closed: nothing ran.
                fresh = true;
                continue;
            }
            return Err(e);
        }
        let recv = |con: &mut NodeConnection| {
            left(deadline)
                .and_then(|t| con.set_read_timeout(Some(t)))
                .and_then(|()| con.recv_response())
        };
        if asking {
            // An `ASKING` refused shows as the script's refusal next.
            recv(&mut con)?;
        }
        let value = recv(&mut con)?;
        if let Value::ServerError(e) = &value {
            let e = RedisError::from(e.clone());
            // The script did not run: `WAIT`'s reply, if sent, is read and dropped.
            if pipelined {
                recv(&mut con)?;
            }
            nodes.put(addr.clone(), con);
            if let Some(to) = e.redirect_node().and_then(|(a, _)| parse_addr(a)) {
                nodes.forget();
                asking = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask);
                addr = to;
                continue;
            }
            if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) && !whole {
                whole = true;
                asking = false;
                continue;
            }
            if e.is_cluster_error() {
                return Err(e);
            }
            return Ok(Outcome::Done(value, None));
        }
        let granted = Reply::from_value(value.clone()).is_ok_and(|r| wait_if(&r));
        hints.record(key, granted);
        let acked = if pipelined || granted {
            let r = if pipelined {
                recv(&mut con)
            } else {
                let mut wait = redis::cmd("WAIT");
                wait.arg(replicas).arg(wait_ms());
                con.send_packed_command(&wait.get_packed_command())
                    .and_then(|()| recv(&mut con))
            };
            match r {
                Ok(Value::Int(n)) => {
                    nodes.put(addr, con);
                    Some(acknowledged(n))
                }
                Ok(other) => {
                    if granted {
                        log::warn!("WAIT after {} answered {other:?}", call.script.name());
                    }
                    nodes.put(addr, con);
                    Some(0)
                }
                Err(e) => {
                    if granted {
                        log::warn!("WAIT after {} failed: {e}", call.script.name());
                    }
                    Some(0)
                }
            }
        } else {
            nodes.put(addr, con);
            None
        };
        return Ok(Outcome::Done(value, acked.filter(|_| granted)));
    }
    Err(RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain),
        "too many redirections",
        format!("slot {slot}"),
    )))
}

/// `host:port` of a redirection (the host may be an IPv6 address, colons included).
fn parse_addr(a: &str) -> Option<Addr> {
    let (host, port) = a.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirection_addresses() {
        assert_eq!(parse_addr("10.0.0.1:7000"), Some(("10.0.0.1".into(), 7000)));
        assert_eq!(parse_addr("::1:7000"), Some(("::1".into(), 7000)));
        assert_eq!(parse_addr("[::1]:7000"), Some(("::1".into(), 7000)));
        assert_eq!(parse_addr("nohost"), None);
        assert_eq!(parse_addr("h:port"), None);
    }

    #[test]
    fn hints_remember_keys_that_granted_nothing() {
        let h = WaitHints::default();
        assert!(!h.held("a"));
        h.record("a", false);
        assert!(h.held("a"));
        h.record("a", true);
        assert!(!h.held("a"));
        for i in 0..MAX_HINTS + 1 {
            h.record(&i.to_string(), false);
        }
        assert!(h.0.lock().len() <= MAX_HINTS);
    }
}
