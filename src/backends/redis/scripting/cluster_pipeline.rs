//! The cluster's batches (keep-alives, a session's close) on our node connections
//! ([`Nodes`]): one pipeline per node, sent to every node before any reply is read, as the
//! `redis` crate's cluster pipeline does (the crate offers it on its own node connections
//! only, where an interrupted read fails the batch, issue 21.6).
//!
//! No call is sent twice: a call a node refused without running it (`MOVED`, `ASK`,
//! `TRYAGAIN`, `CLUSTERDOWN`, `NOSCRIPT`), or one not sent (no address for its slot, the node
//! could not be reached, its connection was found gone), then runs alone through the cluster
//! client, which follows redirections; an I/O failure once a pipeline was sent fails the
//! batch, after the other nodes' replies were read.

use super::super::keys::key_slot;
use super::cluster_node::{not_delivered, ClusterNode};
use super::cluster_nodes::{left, node_of, Addr, Nodes};
use super::node::NodeConnection;
use super::pool::invoke;
use super::ScriptCall;
use redis::cluster::{ClusterConnection, Connect as _};
use redis::{RedisError, RedisResult, Value};
use std::time::Instant;

/// One node's share of a batch, sent.
struct Sent {
    addr: Addr,
    calls: Vec<usize>,
    con: NodeConnection,
}

/// Runs `calls` (each on one slot), one pipeline per node; the replies in order. The
/// cluster connection `cluster` reads the slot map and runs the calls that go alone.
pub(super) fn run(
    nodes: &Nodes,
    cluster: &mut ClusterConnection<ClusterNode>,
    calls: &[ScriptCall<'_>],
) -> RedisResult<Vec<Value>> {
    let routes = nodes.routes(cluster);
    let mut by_node: Vec<(Addr, Vec<usize>)> = Vec::new();
    let mut alone = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let slot = c.keys.first().map(|k| key_slot(k));
        match slot.and_then(|s| node_of(&routes, s)) {
            Some(addr) => match by_node.iter_mut().find(|(a, _)| a == addr) {
                Some((_, v)) => v.push(i),
                None => by_node.push((addr.clone(), vec![i])),
            },
            None => alone.push(i),
        }
    }
    let deadline = Instant::now() + nodes.opts.query_timeout;
    let mut first_err: Option<RedisError> = None;
    let mut sent = Vec::with_capacity(by_node.len());
    for (addr, idx) in by_node {
        let mut con = match nodes.take(&addr) {
            Ok(c) => c,
            Err(e) => {
                log::debug!("batch: node {}:{} not reached ({e}); alone", addr.0, addr.1);
                nodes.forget();
                alone.extend(idx);
                continue;
            }
        };
        let mut pipe = redis::pipe();
        for &i in &idx {
            pipe.add_command(calls[i].evalsha());
        }
        match con.send_packed_command(&pipe.get_packed_pipeline()) {
            Ok(()) => sent.push(Sent {
                addr,
                calls: idx,
                con,
            }),
            // A pooled connection the node had closed: nothing arrived, so nothing ran.
            Err(e) if not_delivered(&e) => alone.extend(idx),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let mut replies: Vec<Value> = vec![Value::Nil; calls.len()];
    for Sent {
        addr,
        calls: idx,
        mut con,
    } in sent
    {
        let mut intact = true;
        for &i in &idx {
            let v = left(deadline)
                .and_then(|t| con.set_read_timeout(Some(t)))
                .and_then(|()| con.recv_response());
            match v {
                Ok(Value::ServerError(e)) if refused(&RedisError::from(e.clone())) => {
                    if RedisError::from(e).is_cluster_error() {
                        nodes.forget();
                    }
                    alone.push(i);
                }
                Ok(v) => replies[i] = v,
                Err(e) => {
                    first_err.get_or_insert(e);
                    intact = false;
                    break;
                }
            }
        }
        if intact {
            nodes.put(addr, con);
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    alone.sort_unstable();
    for i in alone {
        let c = &calls[i];
        replies[i] = invoke(cluster, c.script, &c.keys, &c.args)?;
    }
    Ok(replies)
}

/// Whether a node refused a call without running it: a redirection, `TRYAGAIN`,
/// `CLUSTERDOWN`, or `NOSCRIPT` (the call then goes alone, which sends the script whole).
fn refused(e: &RedisError) -> bool {
    e.is_cluster_error() || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}
