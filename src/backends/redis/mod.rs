//! The Redis 7 backend (feature `redis`): Lua scripts over one server, a primary with
//! replicas (`WAIT`), or a Redis Cluster routed by slot.
//!
//! # Keys
//!
//! | key | type | content |
//! |---|---|---|
//! | `{prefix}:lease:{name}` | hash, never expires | `session`, `token`, `expires` (Redis `TIME`, ms, or the mark `9000000000000000`: bound to the session); on a cluster `anchor`, `epoch` (bound to that anchor); `value`, `vtoken` (a term value and the token of the term it was set for: shown only while that term lasts) |
//! | `{prefix}:session:{sid}` | hash with `PX` = lease | `metadata`, `lease`, `v` (version of its set of leases) |
//! | `{prefix}:anchor:{tag}:{sid}` | string with `PX`, cluster only | an epoch; one per session and node (`tag` picks a slot of that node) |
//! | `{prefix}:session:{sid}:leases` | set, same slot | leases of the session |
//! | `{prefix}:session:{sid}:groups` | set, same slot | groups the session joined |
//! | `{prefix}:group:{group}` | sorted set | member session ids scored by expiry |
//!
//! The braces are literal: they are the Redis Cluster hash tags, so a session's three keys
//! share a slot. Names cannot contain braces, spaces or glob characters (the name rules reject
//! them before any I/O). `prefix` defaults to `simba`.
//!
//! On one server a new term is *bound* to its session: its `expires` holds a mark instead of
//! a time, and it is held exactly while its `session` field names a live session hash (the
//! same for memberships, scored with the mark). A keep-alive then renews the session hash
//! alone, whatever the session holds: acquire and release bump the session's version `v`,
//! and the keep-alive lists the leases only when `v` differs from the version of the last
//! list this backend kept (a sample of two indexed leases per renewal also catches a lease
//! hash rewritten or deleted behind the library's back). Deleting (or evicting) a session
//! hash therefore ends its terms at once, while the holder learns it at its next keep-alive:
//! run with `maxmemory-policy noeviction` (see the operating notes). Routed by slot (a
//! cluster), a term is bound to the session's *anchor* on the lease's node instead (see
//! [Redis Cluster](#redis-cluster)); clients with and without `route_by_slot` on one server
//! and prefix read each other's terms correctly. Earlier
//! versions of this library read the mark as a far-future expiry: they never take a bound
//! term over, but take over a dead one only after an upgrade. Release clears only the
//! `session` field (the token stays) and publishes `released` on the lease key's channel;
//! the script that grants a new term publishes `acquired` there (a re-acquire by the holder
//! publishes nothing), and so does one that sets a term's value; joins and leaves publish on
//! the group key's channel. One pub/sub connection per backend (on its own thread, speaking
//! RESP3, so Redis 6 or later) turns those into [`Notification`]s and skips anything else the server sends; when it drops,
//! subscribers get [`Notification::Resync`] and it resubscribes with backoff (a read
//! interrupted by a stop and continue of the process is simply read again). Every time
//! decision uses Redis `TIME` inside the scripts; remaining times are rounded down to whole
//! ms (never more than the server has left) and new expiries up.
//!
//! # URL
//!
//! `redis://[user[:password]@]host:port[/db][?options]` (one server) or
//! `redis+cluster://[user[:password]@]h1:7000,h2:7001[?options]` (a Redis Cluster, seed nodes).
//! Options:
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `prefix` | `simba` | key prefix, `[A-Za-z0-9._:-]`, 1–64 characters |
//! | `wait_replicas` | `0` | a new term counts only once this many replicas acknowledged it (`WAIT`; on a cluster, the replicas of the lease's master) |
//! | `query_timeout` | `5s` | bound of every reply, and of `WAIT` (it waits two thirds of it) |
//! | `connect_timeout` | `5s` | bound of opening a connection |
//! | `route_by_slot` | `false`, `true` on `redis+cluster://` | keep every script call to one hash slot (required on a cluster) |
//! | `pool_size` | `4` | idle connections kept per role (keep-alives have their own) |
//!
//! Durations are written `250ms`, `5s`, `1m`, `1h` or plain milliseconds; timeouts are at most
//! one hour. `pool_size` and `wait_replicas` are at most 1000; booleans are `true`/`false`
//! (also `1`/`0`, `yes`/`no`). Hosts are `host[:port]` (default port 6379) or `[v6][:port]`.
//! A bad option fails with [`Error::InvalidConfig`] naming it (see
//! [`backends::options`](crate::backends::options)).
//!
//! TLS (feature `tls`, rustls): `rediss://[user[:password]@]host:port[/db]` (one server) or
//! `rediss+cluster://h1:7000,h2:7001` (a Redis Cluster; every node with the same settings); the
//! host name or IP address must match the server's certificate. Options: `ca` (PEM file of
//! the CA certificates to trust; default: the platform's roots), `cert` and `key` (PEM files
//! of a client certificate and its key, both or neither). A file that cannot be read or holds
//! no certificate/key fails with [`Error::InvalidConfig`] naming the option; a failed handshake
//! (unknown CA, wrong host name, expired certificate) fails `connect` with [`Error::Tls`], a
//! refused ACL user or password with [`Error::Authentication`].
//! When a TLS connect fails or times out, the backend sends a plaintext `PING` (nothing
//! else, no credentials) to the same address: a server that answers it does not speak TLS
//! there, and `connect` fails with [`TlsFailure::NotOffered`](crate::TlsFailure).
//! These options on a `redis://` URL are refused (never a plaintext fallback). Without the
//! feature, `rediss://` is refused. [`RedisBackend::builder`] takes a URL and has a method for
//! each option, of the same name and meaning, which overrides the URL's.
//!
//! ```no_run
//! use simba_lease::{connect, Config, Session};
//! let backend = connect("redis://127.0.0.1:6379/0?prefix=myapp&query_timeout=2s")?;
//! let session = Session::open(backend, Config::default())?;
//! let cluster = connect("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?;
//! # Ok::<(), simba_lease::Error>(())
//! ```
//!
//! # Redis Cluster
//!
//! With `route_by_slot`, every script call keeps to one hash slot: an operation first runs a
//! script on its session's slot, then one script per slot of the remaining keys. Only
//! durations cross nodes, so a fixed skew between node clocks changes nothing:
//!
//! * acquire and join grant one full session lease on the lease (group) node's own clock;
//! * keep-alive's later scripts carry the session's new remaining time minus the time measured
//!   since the session call answered, and extend nothing beyond their node's now plus that;
//! * acquire and join send nothing once the session's remaining time passed since the session
//!   call was sent; an acquire (join) answering later than that releases (leaves) what it
//!   began and fails with [`Error::Timeout`].
//!
//! The price is liveness: a term can outlast its session by the delay between the session
//! call and the later script, and a fresh grant by up to one lease, blocking the name (or
//! keeping a stale member) that long.
//!
//! **Anchors.** A lease node cannot read the session hash (another slot, often another node),
//! so each session keeps one *anchor* per node: a string key with an expiry, in a slot of that
//! node, holding an epoch (the server's `TIME` when it was created). A new term is bound to
//! the anchor of its node: it records the anchor's key and epoch, and its own `expires` is set
//! 16 session leases ahead. It is live while that own deadline is ahead and the anchor lives
//! with the recorded epoch (scripts read it with the flag `allow-cross-slot-keys`, Redis 7,
//! together with a key of its slot that never exists, so that a slot being migrated or
//! imported reads as "not here" rather than as "gone"). A grant keeps the anchor for at least
//! one full session lease on its node, so a late grant to a session that died meanwhile keeps
//! every term of that session on that node, not only the new one, up to one lease longer.
//! A keep-alive then sends one script per node that renews the anchor (or creates it with a
//! new epoch when it had ended, which ends every term bound to the old one) and rebinds only
//! the terms this backend does not know bound there (every new term once: a binding is
//! trusted only after a keep-alive made it), those whose own deadline is less than
//! 8 leases ahead (at most an eighth of the node's terms per keep-alive, plus all under 4
//! leases), and a random sample of two (a term found lost in the sample makes the keep-alive
//! check every term once more, trusting none). The session call lists the lease names only when the
//! index's version changed. The cost of a keep-alive is therefore one anchor per node, plus
//! on average `leases × interval ÷ 8 leases` rebinds (about 1 in 24 per keep-alive at the
//! default interval of a third of the lease), not one write per term.
//!
//! After a resharding a term's node may no longer serve its anchor's slot (a script reading
//! it gets "non local key", or an `ASK` for a slot being migrated): such a term then lives by
//! its own deadline alone, and the holder counts on no more than that deadline either (it
//! keeps, per term, an `Instant` no later than it). The next keep-alive after the slot map
//! was read again (every 30 s) binds it to the anchor of its new node. The cost is liveness
//! only: a holder that crashes while its term's anchor is elsewhere blocks that name until the
//! term's own deadline, up to 16 leases: in that window a term outlasts its session by more
//! than the reference's cluster rule allows (one lease at most), the price of keep-alives
//! that do not rewrite every term. A keep-alive that falls back to one script per slot
//! (a node refused) unbinds what it renews: those terms end one session lease ahead again.
//!
//! While a slot is being migrated, a script whose keys are only partly on a node is refused
//! with `TRYAGAIN` (a session's index sets are often empty, so its keep-alive is refused for
//! the whole migration). The cluster client retries after 5–40 ms (not its default of at
//! least 1.28 s), and a call still refused is sent again every 20 ms within what is left of
//! one `query_timeout`: a refused command did not run, so this never runs a script twice.
//!
//! # Round trips
//!
//! | operation | one server | cluster (`route_by_slot`) |
//! |---|---|---|
//! | open, owner, set a term value | 1 | 1 |
//! | acquire with a term value | 1 (the same script) | 3 (4): the acquire, then the value |
//! | keep-alive | 1, of constant cost (leases listed only after a change) | 1 + one batch: a script per node renewing its anchor (per slot after a node refused: a slot moved), pipelined to every node at once; rebinds a few terms (see anchors above) |
//! | acquire | 1 (+1 `WAIT` for a new term with `wait_replicas`) | 2 (3 when held by another: the name leaves the index); with `wait_replicas` the lease's script and `WAIT` go as one pipeline to the lease's master (the script alone, then `WAIT` only after a grant, once this backend saw the name held) |
//! | release, leave | 1 | 3 (a PTTL of the session first: an expired session changes nothing) |
//! | join | 1 | 2 |
//! | members | 1 | 1 + one script per member (its session's metadata) |
//! | close | 1 | 2 + one batch |
//!
//! Keep-alives use their own connections, so they never wait behind other calls.
//!
//! # Operating notes
//!
//! **Memory eviction.** Lease hashes never expire, and their `token` field is the only
//! thing that keeps tokens increasing. Under an `allkeys-*` `maxmemory-policy` Redis may
//! evict a lease hash when memory runs short, and that lease's next term starts again at
//! token 1; `volatile-*` policies may evict session hashes, ending sessions (and, on one
//! server, their terms) before their holders learn it, and may evict cluster anchors (keys
//! with an expiry), ending every term of a session on that node before its holder learns
//! it. Run the Redis that holds these keys
//! with `maxmemory-policy noeviction` (the Redis default): a full instance then refuses
//! writes, calls fail and terms end at their deadlines, but no token goes back. A separate
//! logical database does not help, the policy is per instance.
//!
//! **Signals.** A signal delivered to a thread blocked in a call (a handler, even with
//! `SA_RESTART`, or a stop and continue) interrupts its socket read (`EINTR`). The read is
//! issued again within the rest of the reply's timeout, on one server and on every node of a
//! cluster (single calls and the batches sent one pipeline per node): no call fails and no
//! command is sent twice. On a cluster, a command whose reply is lost (timed out, cut off)
//! is not sent again either: the call fails, as on one server. Over TLS an interrupted read
//! still fails the call (never resent).
//!
//! **Persistence.** Without persistence a restart empties the instance and every token starts
//! again at 1. Enable AOF (`appendonly yes`, ideally `appendfsync always` or `everysec`) so a
//! restarted node keeps its tokens.
//!
//! **Failover.** Replication is asynchronous: a replica promoted before it received the latest
//! token increment can hand out a token that was already used, or a lower one, so a fenced
//! resource may accept a stale writer or reject the new one. `wait_replicas` narrows that
//! window (a new term counts only once that many replicas have it) but cannot close it. On a
//! cluster `WAIT` runs on the lease's master right after its script, on the connection that
//! ran it, so it counts that master's replicas; a `WAIT` that fails after a grant counts as
//! no acknowledgement (the term is released), as on one server; a master restarted empty
//! still resets its tokens. Where fencing must survive failovers, use a backend with
//! quorum or synchronous commits (ZooKeeper, or SQL on synchronous replication). A step of the
//! Redis hosts' clocks shortens or lengthens every lease at once.

mod anchors;
mod builder;
mod cluster_keep_alive;
mod cluster_node;
mod cluster_nodes;
mod cluster_pipeline;
mod cluster_wait;
mod failure;
mod jobs;
mod node;
mod scripting;
mod scripts;

pub use builder::RedisBackendBuilder;
pub use scripting::{
    ClusterScripting, ConnectOptions, LuaScript, PubSubEvent, RedisScripting, RedisTls, Reply,
    Role, ScriptCall, StandaloneScripting,
};

use super::options;
use crate::error::{Error, Result};
use crate::spi::url::BackendUrl;
use crate::spi::{
    Acquire, GroupInfo, HeldLease, KeepAlive, LeaseBackend, LeaseInfo, Listing, Notification,
    NotifySink, Queued, SessionGrant, SessionInfo, Subscribers, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use parking_lot::{Condvar, Mutex};
use scripts::scripts;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest `pool_size` and `wait_replicas` accepted in a URL.
const MAX_COUNT: usize = 1000;

/// Settings of a [`RedisBackend`]; the URL options of the same names.
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
    fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            query_timeout: self.query_timeout,
            connect_timeout: self.connect_timeout,
            pool_size: self.pool_size,
            tls: self.tls.clone(),
        }
    }

    fn validate(&self, clustered: bool) -> Result<()> {
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

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, mod 16384).
///
/// ```
/// use simba_lease::backends::redis::key_slot;
/// assert_eq!(key_slot("foo"), 12182);
/// assert_eq!(key_slot("simba:lease:{foo}"), key_slot("other:{foo}:x"));
/// ```
pub fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tag = match b.iter().position(|&c| c == b'{') {
        Some(open) => match b[open + 1..].iter().position(|&c| c == b'}') {
            Some(len) if len > 0 => &b[open + 1..open + 1 + len],
            _ => b,
        },
        None => b,
    };
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= (byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The notification thread's state, shared with the backend.
#[derive(Default)]
struct NotifierState {
    stop: AtomicBool,
    /// Whether the first subscription attempt finished (subscribed or failed).
    started: Mutex<bool>,
    cv: Condvar,
}

impl NotifierState {
    fn mark_started(&self) {
        *self.started.lock() = true;
        self.cv.notify_all();
    }
}

/// The most keys of each kind (sessions, leases, groups) [`LeaseBackend::list`] reads.
pub const LIST_LIMIT: usize = 100_000;

/// Key names under a prefix.
#[derive(Clone, Debug)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn lease_prefix(&self) -> String {
        format!("{}:lease:", self.prefix)
    }
    fn group_prefix(&self) -> String {
        format!("{}:group:", self.prefix)
    }
    fn session_prefix(&self) -> String {
        format!("{}:session:", self.prefix)
    }
    fn lease(&self, name: &str) -> String {
        format!("{}:lease:{{{name}}}", self.prefix)
    }
    fn group(&self, name: &str) -> String {
        format!("{}:group:{{{name}}}", self.prefix)
    }
    /// A lease's fair-lock queue (same slot as the lease).
    fn queue(&self, name: &str) -> String {
        format!("{}:queue:{{{name}}}", self.prefix)
    }
    /// The deadlines of the places in a lease's queue (same slot as the lease).
    fn queue_deadlines(&self, name: &str) -> String {
        format!("{}:deadlines", self.queue(name))
    }
    fn session(&self, sid: &SessionId) -> String {
        format!("{}:session:{{{sid}}}", self.prefix)
    }
    fn leases_index(&self, sid: &SessionId) -> String {
        format!("{}:leases", self.session(sid))
    }
    fn groups_index(&self, sid: &SessionId) -> String {
        format!("{}:groups", self.session(sid))
    }
    /// Cluster: the session's anchor on the node serving the slot of hash tag `tag`.
    fn anchor(&self, tag: &str, sid: &SessionId) -> String {
        format!("{}:anchor:{{{tag}}}:{sid}", self.prefix)
    }

    /// The notification a message `payload` on `channel` means, if any.
    /// A lease channel carries `acquired` (a new term) or `released`; a group channel
    /// `joined` or `left`.
    fn notification(&self, channel: &str, payload: &[u8]) -> Option<Notification> {
        let inner = |p: String| {
            channel
                .strip_prefix(&p)?
                .strip_prefix('{')?
                .strip_suffix('}')
                .map(str::to_owned)
        };
        if let Some(n) = inner(self.lease_prefix()) {
            let name = LeaseName::new(n).ok()?;
            return Some(match payload {
                b"acquired" => Notification::Acquired(name),
                _ => Notification::Released(name),
            });
        }
        inner(self.group_prefix())
            .and_then(|g| GroupName::new(g).ok())
            .map(Notification::GroupChanged)
    }
}

/// Leases, sessions and groups in Redis 7, standalone, with replicas or as a Cluster.
///
/// See the [module documentation](self) for keys, URL options, the Cluster rules and the
/// operating notes (eviction, persistence, failover).
///
/// ```no_run
/// use simba_lease::backends::redis::{RedisBackend, RedisConfig};
/// use simba_lease::spi::LeaseBackend;
/// let backend = RedisBackend::standalone(
///     "redis://127.0.0.1:6380",
///     RedisConfig { wait_replicas: 1, ..RedisConfig::default() },
/// )?;
/// assert_eq!(backend.kind(), "redis");
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub struct RedisBackend {
    scripting: Arc<dyn RedisScripting>,
    cfg: RedisConfig,
    keys: Keys,
    routed: bool,
    subscribers: Arc<Subscribers>,
    notifier: Mutex<Option<Arc<NotifierState>>>,
    /// By slot: indexed names a keep-alive found not held, since when (dropped from the
    /// index once that lasted a lease).
    stale: Mutex<HashMap<SessionId, HashMap<String, Instant>>>,
    /// One node: per session, the version of its leases the last full keep-alive reply
    /// listed, and that list (a keep-alive answering "same version" reuses it).
    known: Mutex<HashMap<SessionId, KnownLeases>>,
    /// Cluster: which node serves each slot, and when that was read.
    slot_map: Mutex<Option<(Instant, Arc<SlotMap>)>>,
    /// Routed: per session, its index and its terms bound to anchors, as last seen.
    anchored: Mutex<HashMap<SessionId, anchors::Anchored>>,
    /// Cluster keep-alives sent one script per node (for tests).
    by_node: std::sync::atomic::AtomicU64,
}

/// How long a cluster's slot map is trusted before a keep-alive reads it again.
const SLOT_MAP_TTL: Duration = Duration::from_secs(30);

/// Which node (an index) serves each hash slot, from `CLUSTER SLOTS`.
#[derive(Debug, Default)]
struct SlotMap {
    /// Slot ranges (first, last) with their node.
    ranges: Vec<(u16, u16, usize)>,
    /// Per node, a hash tag of one of its slots (where its anchors live).
    tags: Vec<String>,
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

    fn node_of(&self, slot: u16) -> Option<usize> {
        self.ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, n)| *n)
    }
}

/// The leases of a session at one version of its lease set (one node).
#[derive(Debug)]
struct KnownLeases {
    version: i64,
    leases: Vec<(LeaseName, Token)>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("clustered", &self.scripting.clustered())
            .field("config", &self.cfg)
            .finish()
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        if let Some(n) = self.notifier.lock().take() {
            n.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// A requested lease in whole ms, at least 1 (`PEXPIRE 0` would delete the session). Only
/// for durations the caller asks for: remaining times are rounded down, never up.
fn lease_ms(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

/// What a later keep-alive script may grant of the session's `remaining` time once `elapsed`
/// passed since the session call answered, in whole ms; `None` once nothing is left.
fn slot_left(remaining: Duration, elapsed: Duration) -> Option<u64> {
    remaining
        .checked_sub(elapsed)
        .map(|d| d.as_millis() as u64)
        .filter(|&ms| ms > 0)
}

fn bad_reply(op: &'static str, r: &Reply) -> Error {
    let mut shown = String::new();
    show(r, &mut shown);
    failure::error(
        op,
        scripting::shorten(format!("unexpected reply from Redis: {shown}")),
    )
}

/// `r` for a message: strings quoted (lossy UTF-8), arrays in brackets; stops growing past a
/// few hundred bytes.
fn show(r: &Reply, out: &mut String) {
    if out.len() > 300 {
        return;
    }
    match r {
        Reply::Nil => out.push_str("nil"),
        Reply::Int(i) => out.push_str(&i.to_string()),
        Reply::Data(d) => {
            let head = &d[..d.len().min(100)];
            out.push_str(&format!("{:?}", String::from_utf8_lossy(head)));
        }
        Reply::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                show(x, out);
            }
            out.push(']');
        }
    }
}

/// The elements of `r`, which must be an array of `len` elements.
fn array_of<'a>(op: &'static str, r: &'a Reply, len: usize) -> Result<&'a [Reply]> {
    match r {
        Reply::Array(a) if a.len() == len => Ok(a),
        _ => Err(bad_reply(op, r)),
    }
}

fn int_at(op: &'static str, r: &Reply, i: usize) -> Result<i64> {
    r.as_array()
        .and_then(|a| a.get(i))
        .and_then(Reply::as_int)
        .ok_or_else(|| bad_reply(op, r))
}

/// Whether `r` is the `{-1}` of a script that found its session gone.
fn gone(r: &Reply) -> bool {
    matches!(r.as_array(), Some([x]) if x.as_int() == Some(-1))
}

/// An integer reply that must be 0 or 1.
fn flag(op: &'static str, r: &Reply) -> Result<bool> {
    match r.as_int() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(bad_reply(op, r)),
    }
}

fn token(op: &'static str, v: i64) -> Result<Token> {
    u64::try_from(v)
        .ok()
        .and_then(|v| Token::new(v).ok())
        .ok_or_else(|| failure::error(op, format!("token {v} from Redis")))
}

/// A remaining time in ms from a reply: never negative.
fn millis(op: &'static str, r: &Reply, v: i64) -> Result<Duration> {
    u64::try_from(v)
        .map(Duration::from_millis)
        .map_err(|_| bad_reply(op, r))
}

/// The token (element 1) and the remaining time (element 2) of a reply about a term.
fn term_at(op: &'static str, r: &Reply) -> Result<(Token, Duration)> {
    let token = token(op, int_at(op, r, 1)?)?;
    let remaining = millis(op, r, int_at(op, r, 2)?)?;
    Ok((token, remaining))
}

/// The remaining time a keep-alive script answers first: the lease it set, more than 0 and
/// never more than `lease_ms` (the lease asked for).
fn renewed(op: &'static str, r: &Reply, lease_ms: u64) -> Result<Duration> {
    int_at(op, r, 0)
        .ok()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| (1..=lease_ms).contains(v))
        .map(Duration::from_millis)
        .ok_or_else(|| bad_reply(op, r))
}

/// A session id in a reply.
fn session_in(op: &'static str, r: &Reply, s: &str) -> Result<SessionId> {
    SessionId::parse(s).map_err(|_| bad_reply(op, r))
}

/// A lease name in a reply.
fn lease_in(op: &'static str, r: &Reply, s: &str) -> Result<LeaseName> {
    LeaseName::new(s).map_err(|_| bad_reply(op, r))
}

/// A group name in a reply.
fn group_in(op: &'static str, r: &Reply, s: &str) -> Result<GroupName> {
    GroupName::new(s).map_err(|_| bad_reply(op, r))
}

/// Session metadata in a reply.
fn metadata_in(op: &'static str, r: &Reply, s: &str) -> Result<Metadata> {
    Metadata::new(s).map_err(|_| bad_reply(op, r))
}

/// The owner of the term of a reply about a term: session `holder`.
fn owner_at(op: &'static str, r: &Reply, holder: &str) -> Result<Owner> {
    let session = session_in(op, r, holder)?;
    let (token, remaining) = term_at(op, r)?;
    Ok(Owner {
        session,
        token,
        remaining,
        value: String::new(),
    })
}

fn strings(op: &'static str, r: &Reply) -> Result<Vec<String>> {
    r.as_array()
        .ok_or_else(|| bad_reply(op, r))?
        .iter()
        .map(|x| {
            x.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad_reply(op, r))
        })
        .collect()
}

/// What an acquire script answered (`lease_acquire` in `lua/common.lua`, or `{-1}`).
#[derive(Debug)]
enum Acquired {
    /// The acquirer's session is gone.
    Expired,
    /// The acquirer holds the lease; `new` for a new term.
    Term {
        token: Token,
        remaining: Duration,
        new: bool,
    },
    /// Another session holds it.
    Held(Owner),
    /// Queued (fair locks) behind `ahead` live waiters, or next while another session holds it.
    Queued { ahead: usize, owner: Option<Owner> },
}

/// Decodes an acquire reply for session `sid`: `{-1}`, `{1, token, remaining, new}` or
/// `{0, token, remaining, holder}` with a positive token, a remaining time of at least 0 and
/// a holder other than `sid`; anything else is an error.
fn acquired(op: &'static str, r: &Reply, sid: &SessionId) -> Result<Acquired> {
    if gone(r) {
        return Ok(Acquired::Expired);
    }
    if let Some([tag, rest @ ..]) = r.as_array() {
        if tag.as_int() == Some(2) {
            return queued(op, r, rest, sid);
        }
    }
    let a = array_of(op, r, 4)?;
    match a[0].as_int() {
        Some(1) => {
            let (token, remaining) = term_at(op, r)?;
            let new = flag(op, &a[3]).map_err(|_| bad_reply(op, r))?;
            Ok(Acquired::Term {
                token,
                remaining,
                new,
            })
        }
        Some(0) => {
            let holder = a[3].as_str().ok_or_else(|| bad_reply(op, r))?;
            let owner = owner_at(op, r, holder)?;
            if owner.session == *sid {
                return Err(bad_reply(op, r));
            }
            Ok(Acquired::Held(owner))
        }
        _ => Err(bad_reply(op, r)),
    }
}

/// Decodes the rest of a queued acquire's reply (`queue_waiting` in `lua/common.lua`):
/// `{ahead}` or `{ahead, token, remaining, holder}` with a holder other than `sid`.
fn queued(op: &'static str, r: &Reply, rest: &[Reply], sid: &SessionId) -> Result<Acquired> {
    let ahead = |x: &Reply| {
        x.as_int()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| bad_reply(op, r))
    };
    match rest {
        [a] => Ok(Acquired::Queued {
            ahead: ahead(a)?,
            owner: None,
        }),
        [a, t, left, holder] => {
            let holder = holder.as_str().ok_or_else(|| bad_reply(op, r))?;
            let owner = Owner {
                session: session_in(op, r, holder)?,
                token: token(op, t.as_int().ok_or_else(|| bad_reply(op, r))?)?,
                remaining: millis(op, r, left.as_int().ok_or_else(|| bad_reply(op, r))?)?,
                value: String::new(),
            };
            if owner.session == *sid {
                return Err(bad_reply(op, r));
            }
            Ok(Acquired::Queued {
                ahead: ahead(a)?,
                owner: Some(owner),
            })
        }
        _ => Err(bad_reply(op, r)),
    }
}

/// Decodes the session call of a routed acquire or join (`acquire_session.lua`): `None`
/// when the session is gone, else its remaining ms and its lease ms, both positive.
fn session_call(op: &'static str, r: &Reply) -> Result<Option<(u64, u64)>> {
    if gone(r) {
        return Ok(None);
    }
    let a = array_of(op, r, 2)?;
    let positive = |x: &Reply| {
        x.as_int()
            .and_then(|v| u64::try_from(v).ok())
            .filter(|v| *v > 0)
            .ok_or_else(|| bad_reply(op, r))
    };
    Ok(Some((positive(&a[0])?, positive(&a[1])?)))
}

/// Groups lease and group keys by their hash slot.
fn by_slot(leases: &[String], groups: &[String]) -> BTreeMap<u16, (Vec<String>, Vec<String>)> {
    let mut m: BTreeMap<u16, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for k in leases {
        m.entry(key_slot(k)).or_default().0.push(k.clone());
    }
    for k in groups {
        m.entry(key_slot(k)).or_default().1.push(k.clone());
    }
    m
}

impl RedisBackend {
    /// A backend over any [`RedisScripting`] implementation.
    ///
    /// Fails with [`Error::InvalidConfig`] on a bad prefix or timeout, on `wait_replicas > 0`
    /// over a cluster, and on a cluster without `route_by_slot`.
    pub fn new(scripting: Arc<dyn RedisScripting>, cfg: RedisConfig) -> Result<Self> {
        cfg.validate(scripting.clustered())?;
        Ok(RedisBackend {
            routed: cfg.route_by_slot || scripting.clustered(),
            keys: Keys {
                prefix: cfg.prefix.clone(),
            },
            scripting,
            cfg,
            subscribers: Arc::new(Subscribers::default()),
            notifier: Mutex::new(None),
            stale: Mutex::new(HashMap::new()),
            known: Mutex::new(HashMap::new()),
            slot_map: Mutex::new(None),
            anchored: Mutex::new(HashMap::new()),
            by_node: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// One server at `url` (`redis://[user:password@]host:port[/db]`, no options).
    pub fn standalone(url: &str, cfg: RedisConfig) -> Result<Self> {
        cfg.validate(false)?;
        let s = StandaloneScripting::new(url, cfg.connect_options())?;
        Self::new(Arc::new(s), cfg)
    }

    /// A Redis Cluster through the seed nodes `urls` (`redis://host:port` each);
    /// `route_by_slot` is turned on.
    pub fn cluster(urls: &[String], cfg: RedisConfig) -> Result<Self> {
        let cfg = RedisConfig {
            route_by_slot: true,
            ..cfg
        };
        cfg.validate(true)?;
        let s = ClusterScripting::new(urls, cfg.connect_options())?;
        Self::new(Arc::new(s), cfg)
    }

    /// A backend from a `redis://`, `redis+cluster://`, `rediss://` or `rediss+cluster://` URL
    /// (see the module documentation).
    pub fn connect(url: &str) -> Result<Self> {
        Self::from_url(&BackendUrl::parse(url)?)
    }

    /// A backend from a parsed URL.
    pub fn from_url(u: &BackendUrl) -> Result<Self> {
        builder::from_url(u)
    }

    /// A builder from a URL whose options its methods of the same names override, e.g.
    /// `RedisBackend::builder("rediss://db:6390").ca("/etc/ssl/ca.pem").build()`.
    pub fn builder(url: impl Into<String>) -> RedisBackendBuilder {
        RedisBackendBuilder::new(url)
    }

    /// The settings in use.
    pub fn config(&self) -> &RedisConfig {
        &self.cfg
    }

    /// The scripting port in use.
    pub fn scripting(&self) -> &Arc<dyn RedisScripting> {
        &self.scripting
    }

    /// Runs a trivial script (`return 1`) on the connections other calls use: the floor a
    /// benchmark compares operations with.
    pub fn ping_script(&self) -> Result<()> {
        let key = self.keys.lease("ping");
        let r = self
            .scripting
            .eval(Role::Other, &scripts().ping, &[key], &[])?;
        match r.as_int() {
            Some(1) => Ok(()),
            _ => Err(bad_reply("pinging", &r)),
        }
    }

    fn eval(&self, role: Role, s: &LuaScript, keys: &[String], args: &[String]) -> Result<Reply> {
        self.scripting.eval(role, s, keys, args)
    }

    /// The keys of a call on `key` that, on one node, also keeps the session's `index` set
    /// (routed, the caller keeps it with [`Self::unindex`]).
    fn with_index(&self, key: String, index: &str) -> Vec<String> {
        let mut keys = vec![key];
        if !self.routed {
            keys.push(index.to_owned());
        }
        keys
    }

    /// [`Self::with_index`], plus (one node) the session key, so that the script can check
    /// the session is live.
    fn with_session(&self, key: String, index: &str, sid: &SessionId) -> Vec<String> {
        let mut keys = self.with_index(key, index);
        if !self.routed {
            keys.push(self.keys.session(sid));
        }
        keys
    }

    /// Routed: whether `sid` is still live on its session's node, checked before a release
    /// or leave (one more round trip): an expired session changes nothing, and a lease or
    /// membership node may still count it live for the cross-node delay. One node: the
    /// script checks it itself, so always true here.
    fn live_before_routed_change(&self, sid: &SessionId) -> Result<bool> {
        if !self.routed {
            return Ok(true);
        }
        let key = self.keys.session(sid);
        let r = self.scripting.command(Role::Other, &["PTTL", &key])?;
        match r.as_int() {
            // -2: no such key, -1: no expiry (not a session hash of this backend)
            Some(ms) if ms >= -2 => Ok(ms > 0),
            _ => Err(bad_reply("reading a session's time to live", &r)),
        }
    }

    /// Removes `member` from a session's `index` set (routed: the scripts of a slot
    /// cannot); with the session's key, a removal counts as a change of its leases.
    fn unindex(&self, index: &str, member: &str, session: Option<&SessionId>) -> Result<()> {
        let mut keys = vec![index.to_owned()];
        keys.extend(session.map(|s| self.keys.session(s)));
        self.eval(Role::Other, &scripts().unindex, &keys, &[member.to_owned()])?;
        Ok(())
    }

    fn expired(&self, sid: &SessionId) -> Error {
        Error::SessionExpired {
            session: sid.clone(),
        }
    }

    /// The `CLIENT SETNAME` of this backend's notification connection:
    /// `simba-notify-{prefix}`.
    pub fn notifier_name(&self) -> String {
        format!("simba-notify-{}", self.cfg.prefix)
    }

    /// Starts the notification thread once; every caller waits (bounded by the connect and
    /// query timeouts) until its first subscription attempt finished, so a sink registered
    /// before sees every later release.
    fn start_notifier(&self) {
        let state = {
            let mut guard = self.notifier.lock();
            match &*guard {
                Some(st) => st.clone(),
                None => {
                    let st = Arc::new(NotifierState::default());
                    *guard = Some(st.clone());
                    self.spawn_notifier(st.clone());
                    st
                }
            }
        };
        let bound = self
            .cfg
            .connect_timeout
            .saturating_add(self.cfg.query_timeout);
        let mut started = state.started.lock();
        let end = options::deadline(bound);
        while !*started {
            if state.cv.wait_until(&mut started, end).timed_out() {
                log::warn!(
                    "Redis notifications not subscribed within {bound:?}; candidates poll until they are"
                );
                break;
            }
        }
    }

    fn spawn_notifier(&self, st: Arc<NotifierState>) {
        let scripting = self.scripting.clone();
        let keys = self.keys.clone();
        let subs = self.subscribers.clone();
        let patterns = vec![
            format!("{}*", keys.lease_prefix()),
            format!("{}*", keys.group_prefix()),
        ];
        let conn_name = self.notifier_name();
        let thread_st = st.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("simba-redis-pubsub-{}", keys.prefix))
            .spawn(move || {
                let st = thread_st;
                let stopped = || st.stop.load(Ordering::SeqCst);
                let mut backoff = Duration::from_millis(100);
                let mut subscribed_before = false;
                while !stopped() {
                    let r = scripting.listen(
                        &conn_name,
                        &patterns,
                        Duration::from_millis(200),
                        &mut |ev| {
                            if stopped() {
                                return false;
                            }
                            match ev {
                                PubSubEvent::Subscribed => {
                                    if subscribed_before {
                                        subs.publish(&Notification::Resync);
                                    }
                                    subscribed_before = true;
                                    backoff = Duration::from_millis(100);
                                    st.mark_started();
                                }
                                PubSubEvent::Message { channel, payload } => {
                                    if let Some(n) = keys.notification(channel, payload) {
                                        subs.publish(&n);
                                    }
                                }
                                PubSubEvent::Idle => {}
                            }
                            true
                        },
                    );
                    st.mark_started();
                    if stopped() {
                        break;
                    }
                    if let Err(e) = r {
                        log::warn!(
                            "Redis notifications dropped ({}); resubscribing in {backoff:?}",
                            e.report()
                        );
                    }
                    subs.publish(&Notification::Resync);
                    let until = Instant::now() + backoff;
                    while Instant::now() < until && !stopped() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            });
        if let Err(e) = spawned {
            log::warn!("no Redis notification thread ({e}); candidates poll");
            st.mark_started();
        }
    }

    /// One node: `acquire.lua` (with `value`, the term's value is set in the same script),
    /// or with `patience` (fair locks) `acquire_queued.lua`.
    fn acquire_one_node(
        &self,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        value: Option<&str>,
    ) -> Result<Acquired> {
        const OP: &str = "acquiring";
        let mut keys = vec![
            self.keys.session(sid),
            self.keys.leases_index(sid),
            self.keys.lease(name.as_str()),
        ];
        let mut args = vec![
            sid.to_string(),
            name.to_string(),
            self.keys.session_prefix(),
        ];
        let s = match patience {
            None => {
                args.extend(value.map(str::to_owned));
                &scripts().acquire
            }
            Some(p) => {
                keys.push(self.keys.queue(name.as_str()));
                keys.push(self.keys.queue_deadlines(name.as_str()));
                args.push(lease_ms(p).to_string());
                &scripts().acquire_queued
            }
        };
        if self.cfg.wait_replicas == 0 {
            return acquired(OP, &self.eval(Role::Other, s, &keys, &args)?, sid);
        }
        let new_term =
            |r: &Reply| matches!(acquired(OP, r, sid), Ok(Acquired::Term { new: true, .. }));
        let n = self.cfg.wait_replicas;
        let wait = self.cfg.query_timeout * 2 / 3;
        let (r, acked) = self
            .scripting
            .eval_then_wait(s, &keys, &args, &new_term, n, wait)?;
        let r = acquired(OP, &r, sid)?;
        match (acked, &r) {
            (Some(acked), Acquired::Term { token: t, .. }) if acked < n => {
                Err(self.unacknowledged(sid, name, *t, acked))
            }
            _ => Ok(r),
        }
    }

    /// A new term that fewer than `wait_replicas` replicas acknowledged: it is released, and
    /// the acquire fails with this error (one server and cluster alike).
    fn unacknowledged(&self, sid: &SessionId, name: &LeaseName, t: Token, acked: u32) -> Error {
        let n = self.cfg.wait_replicas;
        let wait = self.cfg.query_timeout * 2 / 3;
        let released = self.release_term(sid, name, t);
        failure::error(
            "acquiring",
            format!(
                "only {acked} of {n} replicas acknowledged the new term of {name:?} (token {t}) within {wait:?}; \
                 the term was released{}",
                match released {
                    Ok(_) => String::new(),
                    Err(e) => format!(" (the release failed too: {e}; it ends with its session)"),
                }
            ),
        )
    }

    /// A plain acquire; on one node with `value`, the term's value is set by the same script.
    fn acquire_valued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: Option<&str>,
    ) -> Result<Acquire> {
        let r = if self.routed {
            self.acquire_routed(session, name, None)?
        } else {
            self.acquire_one_node(session, name, None, value)?
        };
        match r {
            Acquired::Term {
                token, remaining, ..
            } => Ok(Acquire::Acquired(Term {
                name: name.clone(),
                token,
                remaining,
            })),
            Acquired::Held(owner) => Ok(Acquire::Held(owner)),
            // Only queued acquires answer so.
            Acquired::Queued { owner, .. } => owner
                .map(Acquire::Held)
                .ok_or_else(|| failure::error("acquiring", "a queue reply to a plain acquire")),
            Acquired::Expired => Err(self.expired(session)),
        }
    }

    /// Routed: the session call, then `acquire_lease.lua` on the lease's slot, or with
    /// `patience` (fair locks) `acquire_lease_queued.lua`.
    fn acquire_routed(
        &self,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
    ) -> Result<Acquired> {
        const OP: &str = "acquiring";
        let lease_key = self.keys.lease(name.as_str());
        let sent = Instant::now();
        let r = self.eval(
            Role::Other,
            &scripts().acquire_session,
            &[self.keys.session(sid), self.keys.leases_index(sid)],
            &[name.to_string()],
        )?;
        let Some((left, lease)) = session_call(OP, &r)? else {
            return Ok(Acquired::Expired);
        };
        let left = Duration::from_millis(left);
        if sent.elapsed() >= left {
            return Err(Error::Timeout {
                operation: "acquiring (the session's time ran out before the lease call)",
                after: left,
                source: None,
            });
        }
        // The session's anchor on the lease's node, by the slot map last read (none before
        // the first keep-alive read one: the term is then bound by that keep-alive).
        let anchor = self
            .cached_slot_map()
            .and_then(|m| Some(m.tags.get(m.node_of(key_slot(&lease_key))?)?.clone()))
            .map(|tag| self.keys.anchor(&tag, sid));
        let horizon = lease.saturating_mul(u64::from(anchors::HORIZON_LEASES));
        let mut keys = vec![lease_key];
        let mut args = vec![
            sid.to_string(),
            lease.to_string(),
            self.keys.session_prefix(),
            anchor.clone().unwrap_or_default(),
            horizon.to_string(),
        ];
        let script = match patience {
            None => &scripts().acquire_lease,
            Some(p) => {
                keys.push(self.keys.queue(name.as_str()));
                keys.push(self.keys.queue_deadlines(name.as_str()));
                args.push(lease_ms(p).to_string());
                &scripts().acquire_lease_queued
            }
        };
        let (r, acked) = if self.cfg.wait_replicas == 0 {
            (self.eval(Role::Other, script, &keys, &args)?, None)
        } else {
            // `WAIT` on the lease's master, right after the script (one pipeline there).
            let new_term = |r: &Reply| {
                matches!(r.as_array(), Some(a) if a.len() >= 4
                    && a[0].as_int() == Some(1)
                    && flag(OP, &a[3]).unwrap_or(false))
            };
            let wait = self.cfg.query_timeout * 2 / 3;
            self.scripting.eval_then_wait(
                script,
                &keys,
                &args,
                &new_term,
                self.cfg.wait_replicas,
                wait,
            )?
        };
        // A new term bound to the anchor: the reply ends with the anchor's epoch.
        let (r, epoch) = match r {
            Reply::Array(mut a) if a.len() == 5 && a[0].as_int() == Some(1) => {
                let epoch = a.pop().and_then(|e| e.as_str().map(str::to_owned));
                match epoch {
                    Some(e) if !e.is_empty() && anchor.is_some() => (Reply::Array(a), Some(e)),
                    _ => return Err(bad_reply(OP, &Reply::Array(a))),
                }
            }
            r => (r, None),
        };
        // The lease node answers about the lease only: a "gone" reply is not one of its.
        let r = match acquired(OP, &r, sid)? {
            Acquired::Expired => return Err(bad_reply(OP, &r)),
            other => other,
        };
        if let (Some(acked), Acquired::Term { token, .. }) = (acked, &r) {
            if acked < self.cfg.wait_replicas {
                return Err(self.unacknowledged(sid, name, *token, acked));
            }
        }
        match r {
            Acquired::Term { token, new, .. } if sent.elapsed() > left => {
                if new {
                    if let Err(e) = self.release_term(sid, name, token) {
                        log::warn!(
                            "releasing the late term {token} of {name:?} failed: {}",
                            e.report()
                        );
                    }
                }
                Err(Error::Timeout {
                    operation: "acquiring (the lease call answered after the session's time)",
                    after: left,
                    source: None,
                })
            }
            Acquired::Term {
                token,
                remaining,
                new,
            } => {
                // A term of the name now: whatever a keep-alive found before is history.
                if let Some(m) = self.stale.lock().get_mut(sid) {
                    m.remove(name.as_str());
                }
                // The anchor's epoch only: the term itself is trusted once a keep-alive bound
                // it again (one rebind per new term). A binding recorded here could outlive
                // a slot-by-slot keep-alive running meanwhile, which unbinds it on the server.
                if let (Some(anchor), Some(epoch)) = (anchor, epoch) {
                    let mut st = self.anchored.lock();
                    let st = st.entry(sid.clone()).or_default();
                    st.epochs.insert(anchor.into(), epoch.into());
                }
                // The term is adopted with the session's remaining time (a full lease covers
                // a new term), or with what the lease node has left of a term the session
                // already held, whichever is less.
                Ok(Acquired::Term {
                    token,
                    remaining: remaining.min(left),
                    new,
                })
            }
            held => {
                self.unindex(&self.keys.leases_index(sid), name.as_str(), Some(sid))?;
                Ok(held)
            }
        }
    }

    /// How many cluster keep-alives went one script per node (not slot by slot).
    #[doc(hidden)]
    pub fn keep_alives_by_node(&self) -> u64 {
        self.by_node.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forgets the cluster's slot map: the next keep-alive reads it again (for tests that
    /// move slots).
    #[doc(hidden)]
    pub fn forget_slot_map(&self) {
        *self.slot_map.lock() = None;
    }

    /// The slot map last read, however old (never reads it); one node on one server.
    fn cached_slot_map(&self) -> Option<Arc<SlotMap>> {
        if !self.scripting.clustered() {
            return Some(SlotMap::one_node());
        }
        self.slot_map.lock().as_ref().map(|(_, m)| m.clone())
    }

    /// The cluster's slot map, read again when older than 30 s; one node on one server.
    fn slot_map(&self) -> Option<Arc<SlotMap>> {
        if !self.scripting.clustered() {
            return Some(SlotMap::one_node());
        }
        if let Some((at, m)) = &*self.slot_map.lock() {
            if at.elapsed() < SLOT_MAP_TTL {
                return Some(m.clone());
            }
        }
        let r = self
            .scripting
            .command(Role::KeepAlive, &["CLUSTER", "SLOTS"])
            .map_err(|e| log::debug!("CLUSTER SLOTS failed: {}", e.report()))
            .ok()?;
        let m = Arc::new(SlotMap::parse(&r)?);
        *self.slot_map.lock() = Some((Instant::now(), m.clone()));
        Some(m)
    }

    /// One node: renews the session, which renews every term and membership bound to it,
    /// in one script whose cost does not depend on what the session holds. The reply lists
    /// the leases only when their version changed since the list this backend kept.
    fn keep_alive_one_node(
        &self,
        session: &SessionId,
        lease_ms: u64,
        index: &[String; 3],
    ) -> Result<KeepAlive> {
        const OP: &str = "keeping a session alive";
        let known = self.known.lock().get(session).map(|k| k.version);
        let r = self.eval(
            Role::KeepAlive,
            &scripts().keep_alive,
            index,
            &[
                session.to_string(),
                lease_ms.to_string(),
                self.keys.lease_prefix(),
                self.keys.group_prefix(),
                self.keys.session_prefix(),
                known.map(|v| v.to_string()).unwrap_or_default(),
            ],
        )?;
        if gone(&r) {
            self.known.lock().remove(session);
            return Err(self.expired(session));
        }
        let remaining = renewed(OP, &r, lease_ms)?;
        let (version, listed, rest) = match r.as_array() {
            Some([_, v, listed, rest @ ..]) if rest.len() % 2 == 0 => (
                v.as_int().filter(|v| *v >= 0),
                listed.as_int().filter(|l| *l == 0 || *l == 1),
                rest,
            ),
            _ => return Err(bad_reply(OP, &r)),
        };
        let (Some(version), Some(listed)) = (version, listed) else {
            return Err(bad_reply(OP, &r));
        };
        let held = |leases: &[(LeaseName, Token)]| KeepAlive {
            remaining,
            leases: leases
                .iter()
                .map(|(name, token)| HeldLease {
                    name: name.clone(),
                    token: *token,
                    remaining,
                })
                .collect(),
        };
        if listed == 0 {
            if !rest.is_empty() {
                return Err(bad_reply(OP, &r));
            }
            let known = self.known.lock();
            return match known.get(session) {
                Some(k) if k.version == version => Ok(held(&k.leases)),
                // "Unchanged" from a version this backend no longer keeps (a concurrent
                // keep-alive replaced it): ask again for the full list.
                _ => {
                    drop(known);
                    self.known.lock().remove(session);
                    self.keep_alive_one_node(session, lease_ms, index)
                }
            };
        }
        let leases = rest
            .chunks_exact(2)
            .map(|c| {
                let name = c[0].as_str().ok_or_else(|| bad_reply(OP, &r))?;
                let t = c[1].as_int().ok_or_else(|| bad_reply(OP, &r))?;
                Ok((lease_in(OP, &r, name)?, token(OP, t)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let reply = held(&leases);
        self.known
            .lock()
            .insert(session.clone(), KnownLeases { version, leases });
        Ok(reply)
    }

    /// Releases a term on its node, without the routed session check (also the undo of a
    /// late or unacknowledged grant, whose session may be gone).
    fn release_term(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        let index = self.keys.leases_index(session);
        let r = self.eval(
            Role::Other,
            &scripts().release,
            &self.with_session(self.keys.lease(name.as_str()), &index, session),
            &[
                session.to_string(),
                token.to_string(),
                name.to_string(),
                self.keys.session_prefix(),
            ],
        )?;
        let freed = flag("releasing", &r)?;
        if self.routed {
            if let Some(s) = self.anchored.lock().get_mut(session) {
                s.bound.remove(name);
            }
        }
        if freed && self.routed {
            self.unindex(&index, name.as_str(), Some(session))?;
        }
        Ok(freed)
    }

    /// Leaves a group on its node, without the routed session check (also the undo of a
    /// late join).
    fn leave_group(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        let index = self.keys.groups_index(session);
        let r = self.eval(
            Role::Other,
            &scripts().leave,
            &self.with_session(self.keys.group(group.as_str()), &index, session),
            &[session.to_string(), group.to_string()],
        )?;
        let was = flag("leaving a group", &r)?;
        if self.routed {
            self.unindex(&index, group.as_str(), None)?;
        }
        Ok(was)
    }
}

impl LeaseBackend for RedisBackend {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        crate::backends::options::check_lease(lease)?;
        let id = SessionId::random();
        let r = self.eval(
            Role::Other,
            &scripts().open,
            &[self.keys.session(&id)],
            &[metadata.as_str().to_owned(), lease_ms(lease).to_string()],
        )?;
        // The script answers the lease it set: more than 0 and never more than asked for.
        let left = r
            .as_int()
            .and_then(|v| u64::try_from(v).ok())
            .filter(|v| (1..=lease_ms(lease)).contains(v))
            .ok_or_else(|| bad_reply("opening a session", &r))?;
        Ok(SessionGrant {
            id,
            remaining: Duration::from_millis(left),
        })
    }

    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        crate::backends::options::check_lease(lease)?;
        let lease_ms = lease_ms(lease);
        let index = [
            self.keys.session(session),
            self.keys.leases_index(session),
            self.keys.groups_index(session),
        ];
        if !self.routed {
            return self.keep_alive_one_node(session, lease_ms, &index);
        }
        self.keep_alive_routed(session, lease, lease_ms, &index)
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        let index = [
            self.keys.session(session),
            self.keys.leases_index(session),
            self.keys.groups_index(session),
        ];
        const OP: &str = "closing a session";
        if !self.routed {
            self.known.lock().remove(session);
            let r = self.eval(
                Role::Other,
                &scripts().close,
                &index,
                &[
                    session.to_string(),
                    self.keys.lease_prefix(),
                    self.keys.group_prefix(),
                ],
            )?;
            return match r.as_int() {
                Some(1) => Ok(()),
                _ => Err(bad_reply(OP, &r)),
            };
        }
        self.forget(session);
        let r = self.eval(Role::Other, &scripts().close_session, &index, &[])?;
        let a = array_of(OP, &r, 2)?;
        let names = strings(OP, &a[0])?;
        let groups = strings(OP, &a[1])?;
        for n in &names {
            lease_in(OP, &r, n)?;
        }
        for g in &groups {
            group_in(OP, &r, g)?;
        }
        let lease_keys: Vec<String> = names.iter().map(|n| self.keys.lease(n)).collect();
        let group_keys: Vec<String> = groups.iter().map(|g| self.keys.group(g)).collect();
        let calls: Vec<ScriptCall<'_>> = by_slot(&lease_keys, &group_keys)
            .into_values()
            .map(|(lk, gk)| ScriptCall {
                script: &scripts().close_slot,
                args: vec![session.to_string(), lk.len().to_string()],
                keys: lk.into_iter().chain(gk).collect(),
            })
            .collect();
        self.scripting.eval_many(Role::Other, &calls)?;
        self.scripting
            .command(Role::Other, &["DEL", &index[1], &index[2]])?;
        Ok(())
    }

    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.acquire_valued(session, name, None)
    }

    /// One node: one script takes the term and sets its value. Routed (a cluster): the
    /// acquire, then `set_value.lua` (the default).
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        crate::types::check_value(value)?;
        if !self.routed {
            return self.acquire_valued(session, name, Some(value).filter(|v| !v.is_empty()));
        }
        let reply = self.acquire_valued(session, name, None)?;
        if let Acquire::Acquired(term) = &reply {
            if !value.is_empty() {
                self.set_value(session, name, term.token, value)?;
            }
        }
        Ok(reply)
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn job_claims_end_with_session(&self) -> bool {
        !self.routed
    }

    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<crate::spi::JobClaim> {
        self.claim_job_script(session, name, at_most)
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        self.finish_job_script(session, name, token, at_least)
    }

    fn supports_queues(&self) -> bool {
        true
    }

    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        crate::backends::options::check_lease(patience)?;
        let r = if self.routed {
            self.acquire_routed(session, name, Some(patience))?
        } else {
            self.acquire_one_node(session, name, Some(patience), None)?
        };
        match r {
            Acquired::Term {
                token, remaining, ..
            } => Ok(Queued::Acquired(Term {
                name: name.clone(),
                token,
                remaining,
            })),
            Acquired::Held(owner) => Ok(Queued::Waiting {
                ahead: 0,
                owner: Some(owner),
            }),
            Acquired::Queued { ahead, owner } => Ok(Queued::Waiting { ahead, owner }),
            Acquired::Expired => Err(self.expired(session)),
        }
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        const OP: &str = "leaving a queue";
        let r = self.eval(
            Role::Other,
            &scripts().leave_queue,
            &[
                self.keys.queue(name.as_str()),
                self.keys.queue_deadlines(name.as_str()),
                self.keys.lease(name.as_str()),
            ],
            &[session.to_string(), self.keys.session_prefix()],
        )?;
        flag(OP, &r)
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        const OP: &str = "reading a queue";
        // Routed, session hashes live on other slots: places live by their deadlines only.
        let sprefix = if self.routed {
            String::new()
        } else {
            self.keys.session_prefix()
        };
        let r = self.eval(
            Role::Other,
            &scripts().queue,
            &[
                self.keys.queue(name.as_str()),
                self.keys.queue_deadlines(name.as_str()),
            ],
            &[sprefix],
        )?;
        strings(OP, &r)?
            .iter()
            .map(|id| session_in(OP, &r, id))
            .collect()
    }

    fn supports_values(&self) -> bool {
        true
    }

    /// One script on the lease's node (`set_value.lua`), on every layout: the term's own
    /// expiry (or, bound to its session on one node, the session hash) decides whether it
    /// still lasts. Not waited for by replicas (`wait_replicas`): a value is no fence.
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        crate::types::check_value(value)?;
        let r = self.eval(
            Role::Other,
            &scripts().set_value,
            &[self.keys.lease(name.as_str())],
            &[
                session.to_string(),
                token.to_string(),
                value.to_owned(),
                self.keys.session_prefix(),
            ],
        )?;
        flag("setting a term value", &r)
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        if !self.live_before_routed_change(session)? {
            return Ok(false);
        }
        self.release_term(session, name, token)
    }

    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        const OP: &str = "reading an owner";
        let r = self.eval(
            Role::Other,
            &scripts().owner,
            &[self.keys.lease(name.as_str())],
            &[self.keys.session_prefix()],
        )?;
        match r.as_array() {
            Some([]) => Ok(None),
            Some([holder, _, _, value]) => {
                let holder = holder.as_str().ok_or_else(|| bad_reply(OP, &r))?;
                let value = value.as_str().ok_or_else(|| bad_reply(OP, &r))?;
                let mut owner = owner_at(OP, &r, holder)?;
                value.clone_into(&mut owner.value);
                Ok(Some(owner))
            }
            _ => Err(bad_reply(OP, &r)),
        }
    }

    /// A `SCAN` of every primary for the prefix's session, lease and group keys (at most
    /// [`LIST_LIMIT`] of each), then per key: `PTTL` and `HGET metadata` of a session, the
    /// owner of a lease, the members of a group. Not atomic: a key that changes meanwhile is
    /// read as it is then.
    fn list(&self) -> Result<Listing> {
        const OP: &str = "listing sessions, leases and groups";
        let sc = &self.scripting;
        // The text between the braces of `{prefix}:kind:{x}` (suffixed keys are skipped).
        let inner = |key: &str, prefix: &str| -> Option<String> {
            key.strip_prefix(prefix)?
                .strip_prefix('{')?
                .strip_suffix('}')
                .map(str::to_owned)
        };
        let mut out = Listing::default();
        let sp = self.keys.session_prefix();
        for key in sc.scan(&format!("{sp}*"), LIST_LIMIT)? {
            let Some(id) = inner(&key, &sp).and_then(|id| SessionId::parse(&id).ok()) else {
                continue;
            };
            let ttl = sc.command(Role::Other, &["PTTL", &key])?;
            let Some(ms) = ttl.as_int().and_then(|ms| u64::try_from(ms).ok()) else {
                continue; // gone meanwhile (-2), or no expiry (-1: not a session of ours)
            };
            let meta = sc.command(Role::Other, &["HGET", &key, "metadata"])?;
            let metadata = match meta.as_str() {
                Some(m) => metadata_in(OP, &meta, m)?,
                None => Metadata::default(),
            };
            out.sessions.push(SessionInfo {
                id,
                remaining: Duration::from_millis(ms),
                metadata,
            });
        }
        let lp = self.keys.lease_prefix();
        for key in sc.scan(&format!("{lp}*"), LIST_LIMIT)? {
            let Some(name) = inner(&key, &lp).and_then(|n| LeaseName::new(n).ok()) else {
                continue;
            };
            if let Some(owner) = self.owner(&name)? {
                out.leases.push(LeaseInfo { name, owner });
            }
        }
        let gp = self.keys.group_prefix();
        for key in sc.scan(&format!("{gp}*"), LIST_LIMIT)? {
            let Some(name) = inner(&key, &gp).and_then(|n| GroupName::new(n).ok()) else {
                continue;
            };
            let members = self.members(&name)?;
            if !members.is_empty() {
                out.groups.push(GroupInfo { name, members });
            }
        }
        out.sessions.sort_by(|a, b| a.id.cmp(&b.id));
        out.leases.sort_by(|a, b| a.name.cmp(&b.name));
        out.groups.sort_by(|a, b| a.name.cmp(&b.name));
        for g in &mut out.groups {
            g.members.sort();
        }
        Ok(out)
    }

    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        const OP: &str = "joining a group";
        let gkey = self.keys.group(group.as_str());
        if !self.routed {
            let r = self.eval(
                Role::Other,
                &scripts().join,
                &[
                    self.keys.session(session),
                    self.keys.groups_index(session),
                    gkey,
                ],
                &[session.to_string(), group.to_string()],
            )?;
            if gone(&r) {
                return Err(self.expired(session));
            }
            return match array_of(OP, &r, 1)?[0].as_int() {
                Some(1) => Ok(()),
                _ => Err(bad_reply(OP, &r)),
            };
        }
        let sent = Instant::now();
        let r = self.eval(
            Role::Other,
            &scripts().acquire_session,
            &[self.keys.session(session), self.keys.groups_index(session)],
            &[group.to_string()],
        )?;
        let Some((left, lease)) = session_call(OP, &r)? else {
            return Err(self.expired(session));
        };
        let left = Duration::from_millis(left);
        if sent.elapsed() >= left {
            return Err(Error::Timeout {
                operation: "joining (the session's time ran out before the group call)",
                after: left,
                source: None,
            });
        }
        let created = flag(
            OP,
            &self.eval(
                Role::Other,
                &scripts().join_group,
                std::slice::from_ref(&gkey),
                &[session.to_string(), lease.to_string()],
            )?,
        )?;
        if sent.elapsed() > left {
            // Leave only a membership this call created: one from an earlier join stays.
            if created {
                if let Err(e) = self.leave_group(session, group) {
                    log::warn!("leaving {group:?} after a late join failed: {}", e.report());
                }
            }
            return Err(Error::Timeout {
                operation: "joining (the group call answered after the session's time)",
                after: left,
                source: None,
            });
        }
        Ok(())
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        if !self.live_before_routed_change(session)? {
            return Ok(false);
        }
        self.leave_group(session, group)
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        const OP: &str = "reading members";
        let r = self.eval(
            Role::Other,
            &scripts().members,
            &[self.keys.group(group.as_str())],
            &[
                self.keys.session_prefix(),
                if self.routed { "0" } else { "1" }.to_owned(),
            ],
        )?;
        let items = strings(OP, &r)?;
        let mut out = Vec::new();
        if !self.routed {
            if items.len() % 2 != 0 {
                return Err(bad_reply(OP, &r));
            }
            for c in items.chunks_exact(2) {
                out.push(Member {
                    session: session_in(OP, &r, &c[0])?,
                    metadata: metadata_in(OP, &r, &c[1])?,
                });
            }
            return Ok(out);
        }
        let ids = items
            .iter()
            .map(|id| session_in(OP, &r, id))
            .collect::<Result<Vec<_>>>()?;
        for sid in ids {
            let m = self.eval(
                Role::Other,
                &scripts().session_metadata,
                &[self.keys.session(&sid)],
                &[],
            )?;
            // Nil: the session ended meanwhile.
            match &m {
                Reply::Nil => {}
                Reply::Data(_) => {
                    let text = m.as_str().ok_or_else(|| bad_reply(OP, &m))?;
                    out.push(Member {
                        session: sid,
                        metadata: metadata_in(OP, &m, text)?,
                    });
                }
                _ => return Err(bad_reply(OP, &m)),
            }
        }
        Ok(out)
    }

    fn purge_expired(&self) -> Result<usize> {
        let pattern = format!("{}*", self.keys.group_prefix());
        let mut removed = HashSet::new();
        for key in self.scripting.scan(&pattern, 10_000)? {
            let r = self.eval(
                Role::Other,
                &scripts().purge_group,
                &[key],
                &[self.keys.session_prefix()],
            )?;
            removed.extend(strings("purging", &r)?);
        }
        Ok(removed.len())
    }

    /// `EVALSHA` of a trivial script (`return 1`): the floor of the backend's script calls.
    fn ping(&self) -> Result<()> {
        self.ping_script()
    }

    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        let sub = self.subscribers.add(sink);
        self.start_notifier();
        Ok(Some(sub))
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

    #[test]
    fn slots_follow_hash_tags() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), 8363); // an empty tag hashes the whole key
        let k = Keys {
            prefix: "simba".into(),
        };
        let sid = SessionId::random();
        assert_eq!(key_slot(&k.session(&sid)), key_slot(&k.leases_index(&sid)));
        assert_eq!(key_slot(&k.session(&sid)), key_slot(&k.groups_index(&sid)));
        assert_eq!(key_slot(&k.lease("job")), key_slot("job"));
    }

    #[test]
    fn channels_map_to_notifications() {
        let k = Keys {
            prefix: "app".into(),
        };
        let job = LeaseName::new("job").unwrap();
        assert_eq!(
            k.notification("app:lease:{job}", b"released"),
            Some(Notification::Released(job.clone()))
        );
        assert_eq!(
            k.notification("app:lease:{job}", b"acquired"),
            Some(Notification::Acquired(job))
        );
        for payload in [&b"joined"[..], b"left"] {
            assert_eq!(
                k.notification("app:group:{workers}", payload),
                Some(Notification::GroupChanged(
                    GroupName::new("workers").unwrap()
                ))
            );
        }
        assert_eq!(k.notification("other:lease:{job}", b"released"), None);
        assert_eq!(k.notification("app:lease:job", b"released"), None);
    }

    #[test]
    fn slot_times_round_down() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        assert_eq!(slot_left(ms(5), us(3_500)), Some(1));
        assert_eq!(slot_left(ms(5000), us(1_999)), Some(4998));
        // Less than a whole ms left: nothing to grant (not 1 ms).
        assert_eq!(slot_left(ms(5), us(4_500)), None);
        assert_eq!(slot_left(ms(5), ms(5)), None);
        assert_eq!(slot_left(ms(5), ms(6)), None);
    }

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
