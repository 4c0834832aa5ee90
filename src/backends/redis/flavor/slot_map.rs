//! Which node serves each hash slot of a Redis Cluster ([`SlotMap`], from `CLUSTER SLOTS`),
//! and the map a routed backend last read ([`SlotMaps`]).

use super::super::scripting::{RedisScripting, Reply, Role};
use super::anchors;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a cluster's slot map is trusted before a keep-alive reads it again.
const SLOT_MAP_TTL: Duration = Duration::from_secs(30);

/// Which node (an index) serves each hash slot, from `CLUSTER SLOTS`.
#[derive(Debug, Default)]
pub(super) struct SlotMap {
    /// Slot ranges (first, last) with their node.
    ranges: Vec<(u16, u16, usize)>,
    /// Per node, a hash tag of one of its slots (where its anchors live).
    pub(super) tags: Vec<String>,
}

impl SlotMap {
    /// Every slot on one node (one server), built once.
    fn one_node() -> Arc<Self> {
        static ONE: std::sync::OnceLock<Arc<SlotMap>> = std::sync::OnceLock::new();
        ONE.get_or_init(|| {
            Arc::new(SlotMap {
                ranges: vec![(0, 16383, 0)],
                tags: vec![anchors::tag_for_slot(0)],
            })
        })
        .clone()
    }

    /// Decodes a `CLUSTER SLOTS` reply (`[[first, last, [host, port, …], replicas…], …]`);
    /// `None` if it is not one.
    fn parse(r: &Reply) -> Option<Self> {
        let mut nodes: Vec<String> = Vec::new();
        let mut ranges = Vec::new();
        for e in r.as_array()? {
            let e = e.as_array()?;
            let first = u16::try_from(e.first()?.as_int()?).ok()?;
            let last = u16::try_from(e.get(1)?.as_int()?).ok()?;
            let master = e.get(2)?.as_array()?;
            // The node id where the reply has one (Redis 4+); the endpoint otherwise.
            let node = match master.get(2).and_then(Reply::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => format!("{}:{}", master.first()?.as_str()?, master.get(1)?.as_int()?),
            };
            let i = match nodes.iter().position(|n| *n == node) {
                Some(i) => i,
                None => {
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            ranges.push((first, last, i));
        }
        let tags = (0..nodes.len())
            .map(|n| {
                let first = ranges.iter().filter(|r| r.2 == n).map(|r| r.0).min();
                anchors::tag_for_slot(first.unwrap_or_default())
            })
            .collect();
        Some(SlotMap { ranges, tags })
    }

    pub(super) fn node_of(&self, slot: u16) -> Option<usize> {
        self.ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, n)| *n)
    }
}

/// The slot map a routed backend last read, and when (one node on one server, never read).
#[derive(Default)]
pub(super) struct SlotMaps {
    last: Mutex<Option<(Instant, Arc<SlotMap>)>>,
}

impl SlotMaps {
    /// The slot map last read, however old (never reads it); one node on one server.
    pub(super) fn cached(&self, scripting: &dyn RedisScripting) -> Option<Arc<SlotMap>> {
        if !scripting.clustered() {
            return Some(SlotMap::one_node());
        }
        self.last.lock().as_ref().map(|(_, m)| m.clone())
    }

    /// The cluster's slot map, read again when older than 30 s; one node on one server.
    pub(super) fn get(&self, scripting: &dyn RedisScripting) -> Option<Arc<SlotMap>> {
        if !scripting.clustered() {
            return Some(SlotMap::one_node());
        }
        if let Some((at, m)) = &*self.last.lock() {
            if at.elapsed() < SLOT_MAP_TTL {
                return Some(m.clone());
            }
        }
        let r = scripting
            .command(Role::KeepAlive, &["CLUSTER", "SLOTS"])
            .map_err(|e| log::debug!("CLUSTER SLOTS failed: {}", e.report()))
            .ok()?;
        let m = Arc::new(SlotMap::parse(&r)?);
        *self.last.lock() = Some((Instant::now(), m.clone()));
        Some(m)
    }

    /// Forgets the map: the next [`Self::get`] reads it again.
    pub(super) fn forget(&self) {
        *self.last.lock() = None;
    }

    /// Places no slot for a while (until the map is read again, after 30 s): every caller
    /// then falls back to what it does without a map.
    pub(super) fn place_none(&self) {
        *self.last.lock() = Some((Instant::now(), Arc::new(SlotMap::default())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_maps_come_from_cluster_slots() {
        let node = |port: i64| {
            Reply::Array(vec![
                Reply::Data(b"127.0.0.1".to_vec()),
                Reply::Int(port),
                Reply::Data(format!("id-{port}").into_bytes()),
            ])
        };
        let range = |a: i64, b: i64, port: i64| {
            Reply::Array(vec![
                Reply::Int(a),
                Reply::Int(b),
                node(port),
                node(port + 3),
            ])
        };
        let r = Reply::Array(vec![
            range(0, 5460, 7000),
            range(5461, 10922, 7001),
            range(10923, 16383, 7002),
            range(100, 100, 7000),
        ]);
        let m = SlotMap::parse(&r).unwrap();
        assert_eq!(m.node_of(0), Some(0));
        assert_eq!(m.node_of(5461), Some(1));
        assert_eq!(m.node_of(16383), Some(2));
        assert_eq!(m.node_of(16384), None);
        // Without ids (or with empty ones) the endpoint names the node.
        let bare = |port: i64| Reply::Array(vec![Reply::Data(b"h".to_vec()), Reply::Int(port)]);
        let r = Reply::Array(vec![
            Reply::Array(vec![Reply::Int(0), Reply::Int(9), bare(1)]),
            Reply::Array(vec![Reply::Int(10), Reply::Int(19), bare(2)]),
        ]);
        let m = SlotMap::parse(&r).unwrap();
        assert_ne!(m.node_of(0), m.node_of(10));
        assert!(SlotMap::parse(&Reply::Int(1)).is_none());
        assert!(SlotMap::parse(&Reply::Array(vec![Reply::Array(vec![Reply::Int(-1)])])).is_none());
    }
}
