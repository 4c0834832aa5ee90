//! Our own connections to a cluster's masters, by address ([`Nodes`]), for the two paths the
//! `redis` crate's cluster client cannot serve on our node connections: batches, one pipeline
//! per node ([`super::cluster_pipeline`]), and a script followed by `WAIT` on the connection
//! that ran it ([`super::cluster_wait`]). Calls are routed by a map of slot ranges to master
//! addresses, read with `CLUSTER SLOTS` through the cluster client (again after 30 s, or once
//! forgotten after a redirection or an unreachable node). Every connection is a
//! [`NodeConnection`]: interrupted reads are read again.

use super::cluster_node::ClusterNode;
use super::node::NodeConnection;
use super::ConnectOptions;
use parking_lot::Mutex;
use redis::cluster::{ClusterConnection, Connect as _};
use redis::{ConnectionAddr, ConnectionInfo, RedisResult, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A node's address, as `CLUSTER SLOTS` gives it.
pub(super) type Addr = (String, u16);

/// Slot ranges (first, last) and the address of the master serving them (`None`: unknown).
type Routes = Vec<(u16, u16, Option<Addr>)>;

/// How long a slot map is trusted, as the keep-alive's own.
const MAP_TTL: Duration = Duration::from_secs(30);

/// Connections to the masters of one cluster (see the [module documentation](self)).
pub(super) struct Nodes {
    /// A seed's settings (user, password, TLS), used for every node.
    info: ConnectionInfo,
    pub(super) opts: ConnectOptions,
    routes: Mutex<Option<(Instant, Arc<Routes>)>>,
    idle: Mutex<HashMap<Addr, Vec<NodeConnection>>>,
}

impl Nodes {
    /// Connections to the nodes of the cluster whose seed `info` is (none opened yet).
    pub(super) fn new(info: ConnectionInfo, opts: ConnectOptions) -> Self {
        Nodes {
            info,
            opts,
            routes: Mutex::new(None),
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// The slot map, read through `cluster` when older than [`MAP_TTL`] or forgotten; empty
    /// when it cannot be read (calls then take the cluster client's way).
    pub(super) fn routes(&self, cluster: &mut ClusterConnection<ClusterNode>) -> Arc<Routes> {
        if let Some((at, r)) = &*self.routes.lock() {
            if at.elapsed() < MAP_TTL {
                return r.clone();
            }
        }
        let read = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Value>(cluster)
            .map_err(|e| log::debug!("CLUSTER SLOTS failed: {e}"))
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

    /// Forgets the slot map (a redirection, a node not reached): the next call reads it.
    pub(super) fn forget(&self) {
        *self.routes.lock() = None;
    }

    /// An idle connection to `addr`, or a new one, with the reply timeout of the options.
    pub(super) fn take(&self, addr: &Addr) -> RedisResult<NodeConnection> {
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

    /// Keeps `con`, whose replies were all read, for the next call.
    pub(super) fn put(&self, addr: Addr, con: NodeConnection) {
        // Restore the read timeout a call shortened (a failure drops the connection).
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

/// The master serving `slot` in `routes`, if known.
pub(super) fn node_of(routes: &Routes, slot: u16) -> Option<&Addr> {
    routes
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .and_then(|(_, _, n)| n.as_ref())
}

/// The time left until `deadline`, or a timeout error.
pub(super) fn left(deadline: Instant) -> RedisResult<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(
            std::io::Error::new(std::io::ErrorKind::TimedOut, "Redis reply timed out").into(),
        );
    }
    Ok(left)
}

/// Decodes a `CLUSTER SLOTS` reply (`[[first, last, [host, port, …], replicas…], …]`); a
/// master without a usable address (empty or `?`) is unknown.
fn parse_slots(v: &Value) -> Option<Routes> {
    let Value::Array(ranges) = v else {
        return None;
    };
    let int = |v: Option<&Value>| match v {
        Some(Value::Int(i)) => Some(*i),
        _ => None,
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let Value::Array(r) = r else {
            return None;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slot_maps_are_read_with_unknown_masters() {
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.4"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk("?"), Value::Int(7001)]),
            ]),
        ]);
        let r = parse_slots(&v).unwrap();
        assert_eq!(node_of(&r, 0), Some(&("10.0.0.1".to_owned(), 7000)));
        assert_eq!(node_of(&r, 5460), Some(&("10.0.0.1".to_owned(), 7000)));
        assert_eq!(node_of(&r, 5461), None);
        assert!(parse_slots(&Value::Int(1)).is_none());
        assert!(parse_slots(&Value::Array(vec![Value::Array(vec![Value::Int(-1)])])).is_none());
    }
}
