//! The cluster's batches (keep-alives, a session's close) on our node connections: one
//! pipeline per node, sent to every node before any reply is read, as the `redis` crate's
//! cluster pipeline does (the crate offers it on its own node connections only, where an
//! interrupted read fails the batch, issue 21.6). Calls are routed by a map of slot ranges to
//! node addresses, read with `CLUSTER SLOTS` (again after 30 s, or after a redirection).
//!
//! Interrupted reads are read again (see [`NodeConnection`]) and no call is sent twice: a
//! call a node refused without running it (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`,
//! `NOSCRIPT`), or one not sent (no address for its slot, the node could not be reached, its
//! connection was found gone), then runs alone through the cluster client, which follows
//! redirections; an I/O failure once a pipeline was sent fails the batch, after the other
//! nodes' replies were read.

use super::cluster_node::{not_delivered, ClusterNode};
use super::key_slot;
use super::node::NodeConnection;
use super::scripting::{invoke, ConnectOptions, ScriptCall};
use parking_lot::Mutex;
use redis::cluster::{ClusterConnection, Connect as _};
use redis::{ConnectionAddr, ConnectionInfo, RedisError, RedisResult, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A node's address, as `CLUSTER SLOTS` gives it.
type Addr = (String, u16);

/// Slot ranges (first, last) and the address of the master serving them (`None`: unknown).
type Routes = Vec<(u16, u16, Option<Addr>)>;

/// How long a slot map is trusted, as the keep-alive's own.
const MAP_TTL: Duration = Duration::from_secs(30);

/// The batches of one cluster backend (see the [module documentation](self)).
pub(super) struct NodePipelines {
    /// A seed's settings (user, password, TLS), used for every node.
    info: ConnectionInfo,
    opts: ConnectOptions,
    routes: Mutex<Option<(Instant, Arc<Routes>)>>,
    idle: Mutex<HashMap<Addr, Vec<NodeConnection>>>,
}

/// One node's share of a batch, sent.
struct Sent {
    addr: Addr,
    calls: Vec<usize>,
    con: NodeConnection,
}

impl NodePipelines {
    /// Batches to the nodes of the cluster whose seed `info` is.
    pub(super) fn new(info: ConnectionInfo, opts: ConnectOptions) -> Self {
        NodePipelines {
            info,
            opts,
            routes: Mutex::new(None),
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `calls` (each on one slot), one pipeline per node; the replies in order. The
    /// cluster connection `cluster` reads the slot map and runs the calls that go alone.
    pub(super) fn run(
        &self,
        cluster: &mut ClusterConnection<ClusterNode>,
        calls: &[ScriptCall<'_>],
    ) -> RedisResult<Vec<Value>> {
        let routes = self.routes(cluster);
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
        let deadline = Instant::now() + self.opts.query_timeout;
        let mut first_err: Option<RedisError> = None;
        let mut sent = Vec::with_capacity(by_node.len());
        for (addr, idx) in by_node {
            let mut con = match self.take(&addr) {
                Ok(c) => c,
                Err(e) => {
                    log::debug!("batch: node {}:{} not reached ({e}); alone", addr.0, addr.1);
                    self.forget();
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
                            self.forget();
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
                self.put(addr, con);
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

    /// The slot map, read again when older than [`MAP_TTL`] or forgotten; empty when it
    /// cannot be read (every call then goes alone).
    fn routes(&self, cluster: &mut ClusterConnection<ClusterNode>) -> Arc<Routes> {
        if let Some((at, r)) = &*self.routes.lock() {
            if at.elapsed() < MAP_TTL {
                return r.clone();
            }
        }
        let read = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Value>(cluster)
            .map_err(|e| log::debug!("batch: CLUSTER SLOTS failed: {e}"))
            .ok()
            .and_then(|v| parse_slots(&v));
        match read {
            Some(r) => {
                let r = Arc::new(r);
                *self.routes.lock() = Some((Instant::now(), r.clone()));
                r
            }
            None => Arc::new(Routes::new()),
        }
    }

    fn forget(&self) {
        *self.routes.lock() = None;
    }

    /// An idle connection to `addr`, or a new one.
    fn take(&self, addr: &Addr) -> RedisResult<NodeConnection> {
        if let Some(c) = self.idle.lock().get_mut(addr).and_then(Vec::pop) {
            return Ok(c);
        }
        let addr = match self.info.addr().clone() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: addr.0.clone(),
                port: addr.1,
                insecure,
                tls_params,
            },
            _ => ConnectionAddr::Tcp(addr.0.clone(), addr.1),
        };
        let info = self.info.clone().set_addr(addr);
        let con = NodeConnection::open(&info, Some(self.opts.connect_timeout))?;
        con.set_read_timeout(Some(self.opts.query_timeout))?;
        con.set_write_timeout(Some(self.opts.query_timeout))?;
        Ok(con)
    }

    /// Keeps `con`, whose replies were all read, for the next batch.
    fn put(&self, addr: Addr, con: NodeConnection) {
        // Restore the read timeout a batch shortened (a failure drops the connection).
        if con.set_read_timeout(Some(self.opts.query_timeout)).is_err() {
            return;
        }
        let mut idle = self.idle.lock();
        let v = idle.entry(addr).or_default();
        if v.len() < self.opts.pool_size.max(1) {
            v.push(con);
        }
    }
}

/// Whether a node refused a call without running it: a redirection, `TRYAGAIN`,
/// `CLUSTERDOWN`, or `NOSCRIPT` (the call then goes alone, which sends the script whole).
fn refused(e: &RedisError) -> bool {
    e.is_cluster_error() || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

fn left(deadline: Instant) -> RedisResult<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(
            std::io::Error::new(std::io::ErrorKind::TimedOut, "Redis reply timed out").into(),
        );
    }
    Ok(left)
}

fn node_of(routes: &Routes, slot: u16) -> Option<&Addr> {
    routes
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .and_then(|(_, _, n)| n.as_ref())
}

/// Decodes a `CLUSTER SLOTS` reply (`[[first, last, [host, port, …], replicas…], …]`); a
/// master without a usable address (empty or `?`) is unknown, so its calls go alone.
fn parse_slots(v: &Value) -> Option<Routes> {
    let Value::Array(ranges) = v else {
        return None;
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let Value::Array(r) = r else {
            return None;
        };
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        };
        let first = u16::try_from(int(r.first())?).ok()?;
        let last = u16::try_from(int(r.get(1))?).ok()?;
        let Some(Value::Array(master)) = r.get(2) else {
            return None;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) => String::from_utf8(h.clone()).ok(),
            Some(Value::SimpleString(h)) => Some(h.clone()),
            _ => None,
        };
        let port = int(master.get(1)).and_then(|p| u16::try_from(p).ok());
        let addr = match (host, port) {
            (Some(h), Some(p)) if !h.is_empty() && h != "?" => Some((h, p)),
            _ => None,
        };
        out.push((first, last, addr));
    }
    Some(out)
}
