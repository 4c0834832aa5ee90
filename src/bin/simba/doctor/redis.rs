//! Redis checks: a standalone server, or every master and replica of a Cluster (eviction
//! policy, persistence, replicas, the server clock), and a Cluster node given by a
//! `redis://` URL.

use super::clock::{clock, unix_ms};
use super::{Args, Findings, Level};
use simba_lease::backends::redis::{
    ConnectOptions, RedisBackend, RedisScripting, Reply, Role, StandaloneScripting,
};
use simba_lease::backends::BackendUrl;
use simba_lease::spi::LeaseBackend;
use simba_lease::{Error, Result};

fn text(r: &Reply) -> Option<String> {
    r.as_str().map(str::to_owned)
}

/// `CONFIG GET name` → its value.
fn config_get(s: &dyn RedisScripting, name: &str) -> Option<String> {
    let r = s.command(Role::Other, &["CONFIG", "GET", name]).ok()?;
    match r.as_array() {
        Some([_, v]) => text(v),
        _ => None,
    }
}

/// The `key:value` lines of the reply to `command` (`INFO replication`, `CLUSTER INFO`).
fn fields(s: &dyn RedisScripting, command: &[&str]) -> Option<Vec<(String, String)>> {
    let r = s.command(Role::Other, command).ok()?;
    Some(
        text(&r)?
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect(),
    )
}

fn field(fields: &[(String, String)], key: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

/// `INFO cluster` says `cluster_enabled:1`.
fn cluster_enabled(s: &dyn RedisScripting) -> bool {
    fields(s, &["INFO", "cluster"])
        .and_then(|i| field(&i, "cluster_enabled"))
        .is_some_and(|v| v == "1")
}

/// A `redis://` (or `rediss://`) URL that names one node of a Redis Cluster: most keys live
/// on other nodes, which that node answers with `MOVED`. The advice: the same URL as
/// `redis+cluster://`.
fn cluster_node_given(a: &Args, f: &mut Findings) {
    let shown = crate::bench::redacted(&a.url);
    let fixed = match shown.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}+cluster://{rest}"),
        None => shown.clone(),
    };
    let node = BackendUrl::parse(&a.url)
        .ok()
        .and_then(|u| u.hosts.first().cloned())
        .unwrap_or_default();
    f.add(
        Level::Trap,
        "cluster",
        format!(
            "{node} is a Redis Cluster node (cluster_enabled:1): through a `redis://` URL the \
             backend sends every key to this node alone, which answers MOVED for the slots of \
             the others; fix: use `{fixed}` (add more nodes as seeds, comma-separated)"
        ),
    );
}

/// Whether `e` is a cluster redirection (`MOVED`/`ASK`) from a server.
fn is_redirect(e: &Error) -> bool {
    let r = e.report().to_string();
    r.contains("Moved") || r.contains("MOVED") || r.contains("Ask: ") || r.contains("ASK ")
}

pub(super) fn check(a: &Args, f: &mut Findings) -> Result<()> {
    let b = RedisBackend::connect(&a.url)?;
    let clustered = b.scripting().clustered();
    if !clustered && cluster_enabled(b.scripting().as_ref()) {
        cluster_node_given(a, f);
        return Ok(());
    }
    match b.ping() {
        Ok(()) => {}
        Err(e) if !clustered && is_redirect(&e) => {
            cluster_node_given(a, f);
            return Ok(());
        }
        Err(e) => return Err(e),
    }
    f.add(Level::Ok, "connect", "the server answers");
    if clustered {
        return cluster(a, &b, f);
    }
    node_checks(b.scripting().as_ref(), "", f);
    let want = b.config().wait_replicas;
    let replicas = fields(b.scripting().as_ref(), &["INFO", "replication"])
        .and_then(|i| field(&i, "connected_slaves"))
        .and_then(|v| v.parse::<u32>().ok());
    match replicas {
        Some(n) if n < want => f.add(
            Level::Trap,
            "replicas",
            format!(
                "{n} connected replica(s), fewer than wait_replicas={want}: every new term \
                 fails; fix: add replicas or lower wait_replicas"
            ),
        ),
        Some(n) if want == 0 && n > 0 => f.add(
            Level::Info,
            "replicas",
            format!(
                "{n} replica(s) but wait_replicas=0: a failover can hand out a token again; \
                 set wait_replicas to narrow that window"
            ),
        ),
        Some(n) => f.add(
            Level::Ok,
            "replicas",
            format!("{n} connected, wait_replicas={want}"),
        ),
        None => f.add(Level::Unknown, "replicas", "INFO replication refused"),
    }
    server_clock(b.scripting().as_ref(), "", f);
    Ok(())
}

/// The checks every data node needs (each master, and each replica, which a failover
/// promotes): eviction policy and persistence. `node` prefixes each finding (empty for a
/// standalone server).
fn node_checks(s: &dyn RedisScripting, node: &str, f: &mut Findings) {
    match config_get(s, "maxmemory-policy") {
        Some(p) if p == "noeviction" => {
            f.add(Level::Ok, "maxmemory-policy", format!("{node}noeviction"))
        }
        Some(p) => f.add(
            Level::Trap,
            "maxmemory-policy",
            format!(
                "{node}`{p}`: Redis may evict lease hashes (tokens restart at 1) or sessions; \
                 fix: `CONFIG SET maxmemory-policy noeviction` and the same in redis.conf"
            ),
        ),
        None => f.add(
            Level::Unknown,
            "maxmemory-policy",
            format!("{node}CONFIG GET refused"),
        ),
    }
    match config_get(s, "appendonly") {
        Some(v) if v == "yes" => {
            let fsync = config_get(s, "appendfsync").unwrap_or_default();
            f.add(
                Level::Ok,
                "persistence",
                format!("{node}AOF on (appendfsync {fsync})"),
            );
        }
        Some(_) => f.add(
            Level::Trap,
            "persistence",
            format!(
                "{node}no AOF: a restart empties the instance and tokens start again at 1; \
                 fix: `appendonly yes` with `appendfsync everysec` (or `always`)"
            ),
        ),
        None => f.add(
            Level::Unknown,
            "persistence",
            format!("{node}CONFIG GET refused"),
        ),
    }
}

/// The server clock of `s` (`TIME`) against this host's.
fn server_clock(s: &dyn RedisScripting, node: &str, f: &mut Findings) {
    let sent = unix_ms();
    let server = s
        .command(Role::Other, &["TIME"])
        .ok()
        .and_then(|r| match r.as_array() {
            Some([s, us]) => {
                let s: i64 = text(s)?.parse().ok().or_else(|| s.as_int())?;
                let us: i64 = text(us)?.parse().ok().or_else(|| us.as_int())?;
                Some(s * 1000 + us / 1000)
            }
            _ => None,
        });
    let mut one = Findings::default();
    clock(&mut one, server, sent);
    for x in one.0 {
        f.add(x.level, x.check, format!("{node}{}", x.text));
    }
}

/// One node of a cluster, from `CLUSTER NODES`.
#[derive(Debug, PartialEq, Eq)]
struct ClusterNode {
    id: String,
    /// `host:port` (IPv6 hosts in brackets).
    addr: String,
    master: bool,
    /// The master's id, for a replica.
    master_id: Option<String>,
    /// `fail`, `fail?`, `handshake` or `noaddr`: not checked, reported.
    unhealthy: Option<String>,
}

/// Parses a `CLUSTER NODES` reply: `<id> <ip:port@cport[,hostname]> <flags> <master> …`.
fn parse_cluster_nodes(reply: &str) -> Vec<ClusterNode> {
    reply
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let id = parts.next()?.to_owned();
            let addr = parts.next()?;
            let flags: Vec<&str> = parts.next()?.split(',').collect();
            let master = parts.next()?;
            let hostport = addr.split(['@', ',']).next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            let addr = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            let unhealthy = flags
                .iter()
                .find(|f| matches!(**f, "fail" | "fail?" | "handshake" | "noaddr"))
                .map(|f| (*f).to_owned())
                .or_else(|| host.is_empty().then(|| "noaddr".to_owned()));
            Some(ClusterNode {
                id,
                addr,
                master: flags.contains(&"master"),
                master_id: (master != "-").then(|| master.to_owned()),
                unhealthy,
            })
        })
        .collect()
}

/// A standalone connection to one node of the cluster `b` was built from: the URL's scheme
/// (TLS or not) and credentials, the backend's timeouts and TLS material.
fn node_connection(a: &Args, b: &RedisBackend, addr: &str) -> Result<StandaloneScripting> {
    let u = BackendUrl::parse(&a.url)?;
    let scheme = if u.scheme.starts_with("rediss") {
        "rediss"
    } else {
        "redis"
    };
    let auth = match (&u.user, &u.password) {
        (Some(user), Some(pw)) => format!("{}:{}@", encode(user), encode(pw)),
        (None, Some(pw)) => format!(":{}@", encode(pw)),
        (Some(user), None) => format!("{}@", encode(user)),
        (None, None) => String::new(),
    };
    let c = b.config();
    let opts = ConnectOptions {
        query_timeout: c.query_timeout,
        connect_timeout: c.connect_timeout,
        pool_size: 1,
        tls: c.tls.clone(),
    };
    StandaloneScripting::new(&format!("{scheme}://{auth}{addr}"), opts)
}

/// Percent-encodes a user name or password for the driver's URL.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A cluster: the cluster state, then every master and every replica (found with
/// `CLUSTER NODES`) checked on a connection of its own, each finding naming its node.
fn cluster(a: &Args, b: &RedisBackend, f: &mut Findings) -> Result<()> {
    let info = fields(b.scripting().as_ref(), &["CLUSTER", "INFO"]);
    let state = info.as_deref().and_then(|i| {
        let slots = field(i, "cluster_slots_assigned")?.parse::<u32>().ok()?;
        Some((field(i, "cluster_state")?, slots))
    });
    match state {
        Some((s, slots)) if s == "ok" && slots == 16384 => {
            f.add(Level::Ok, "cluster", "state ok, all 16384 slots assigned")
        }
        Some((s, slots)) => f.add(
            Level::Trap,
            "cluster",
            format!(
                "state `{s}`, {slots} of 16384 slots assigned: operations on the others fail; \
                 fix: assign every slot (`redis-cli --cluster fix`)"
            ),
        ),
        None => f.add(Level::Unknown, "cluster", "CLUSTER INFO refused"),
    }
    let nodes = b
        .scripting()
        .command(Role::Other, &["CLUSTER", "NODES"])
        .ok()
        .and_then(|r| text(&r))
        .map(|r| parse_cluster_nodes(&r))
        .unwrap_or_default();
    if nodes.is_empty() {
        f.add(
            Level::Unknown,
            "nodes",
            "CLUSTER NODES refused: no node was checked",
        );
        return Ok(());
    }
    let addr_of = |id: &str| {
        nodes
            .iter()
            .find(|n| n.id == id)
            .map_or_else(|| id.to_owned(), |n| n.addr.clone())
    };
    // Masters first (by address), each followed by its replicas.
    let mut masters_by_addr: Vec<&ClusterNode> = nodes.iter().filter(|n| n.master).collect();
    masters_by_addr.sort_by(|x, y| x.addr.cmp(&y.addr));
    let mut order: Vec<&ClusterNode> = Vec::new();
    for m in masters_by_addr {
        order.push(m);
        order.extend(
            nodes
                .iter()
                .filter(|n| !n.master && n.master_id.as_deref() == Some(m.id.as_str())),
        );
    }
    let rest: Vec<&ClusterNode> = nodes.iter().filter(|n| !order.contains(n)).collect();
    order.extend(rest);
    let masters = nodes.iter().filter(|n| n.master).count();
    f.add(
        Level::Info,
        "nodes",
        format!(
            "{masters} master(s), {} replica(s): each is checked",
            nodes.len() - masters
        ),
    );
    let want = b.config().wait_replicas;
    let counts: Vec<usize> = (nodes.iter().filter(|n| n.master))
        .map(|m| {
            let of_m = |r: &&ClusterNode| r.master_id.as_deref() == Some(m.id.as_str());
            nodes.iter().filter(of_m).count()
        })
        .collect();
    if let Some((level, finding)) = replicas_against_wait(&counts, want) {
        f.add(level, "wait_replicas", finding);
    }
    for n in order {
        let label = match (&n.master, &n.master_id) {
            (true, _) => format!("{} (master): ", n.addr),
            (false, Some(m)) => format!("{} (replica of {}): ", n.addr, addr_of(m)),
            (false, None) => format!("{} (replica): ", n.addr),
        };
        if let Some(flag) = &n.unhealthy {
            f.add(
                Level::Warn,
                "nodes",
                format!("{label}flagged `{flag}` by the cluster: not checked"),
            );
            continue;
        }
        let s = match node_connection(a, b, &n.addr) {
            Ok(s) => s,
            Err(e) => {
                f.add(
                    Level::Unknown,
                    "nodes",
                    format!("{label}not reachable from here: {}", e.report()),
                );
                continue;
            }
        };
        node_checks(&s, &label, f);
        if n.master {
            let replicas = nodes
                .iter()
                .filter(|r| r.master_id.as_deref() == Some(n.id.as_str()))
                .count();
            if replicas == 0 {
                f.add(
                    Level::Info,
                    "replicas",
                    format!(
                        "{label}no replica: while it is down its slots fail (sessions and \
                         leases there expire)"
                    ),
                );
            }
            server_clock(&s, &label, f);
        }
    }
    Ok(())
}

/// What the replicas of a Cluster's masters (`counts`, one per master) mean for
/// `wait_replicas` (`want`): replicas everywhere but no wait is the unsafe default (a forced
/// failover hands a term out again), a master with fewer replicas than the wait fails every
/// new term on its slots.
fn replicas_against_wait(counts: &[usize], want: u32) -> Option<(Level, String)> {
    let fewest = *counts.iter().min()?;
    let want = want as usize;
    if want == 0 && fewest > 0 {
        return Some((
            Level::Warn,
            "every master has a replica but wait_replicas=0: a forced failover \
             (`CLUSTER FAILOVER FORCE`, or a master lost before its replica copied a grant) \
             can grant a term's token again and let two processes believe they hold one lock \
             (measured here: with failovers every 6-8 s for 60 s, a token granted twice and \
             a 307 ms double belief; none with wait_replicas=1); fix: `?wait_replicas=1`"
                .to_owned(),
        ));
    }
    if want > fewest {
        return Some((
            Level::Trap,
            format!(
                "a master has {fewest} replica(s), fewer than wait_replicas={want}: every new \
                 term on its slots fails; fix: add replicas or lower wait_replicas"
            ),
        ));
    }
    (want > 0).then(|| {
        let finding =
            format!("every master has at least {fewest} replica(s); wait_replicas={want}");
        (Level::Ok, finding)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_judged_against_wait_replicas() {
        let level = |counts: &[usize], want| replicas_against_wait(counts, want).map(|(l, _)| l);
        assert_eq!(
            level(&[1, 1, 1], 0),
            Some(Level::Warn),
            "the unsafe default"
        );
        assert_eq!(
            level(&[1, 0, 1], 0),
            None,
            "a master without replica: said per node"
        );
        assert_eq!(level(&[0, 0, 0], 0), None);
        assert_eq!(level(&[1, 1, 1], 1), Some(Level::Ok));
        assert_eq!(
            level(&[1, 2, 1], 2),
            Some(Level::Trap),
            "a master short of the wait"
        );
        assert_eq!(level(&[], 1), None);
        let (_, text) = replicas_against_wait(&[1, 1], 0).unwrap();
        assert!(text.contains("wait_replicas=1"), "{text}");
    }

    #[test]
    fn cluster_nodes_are_parsed_with_roles_and_flags() {
        let reply = "\
07c3 10.0.0.1:6379@16379,host-a myself,master - 0 0 1 connected 0-5460
67ed 10.0.0.2:6380@16380 slave 07c3 0 1 1 connected
292f ::1:7000@17000 master - 0 1 2 connected 5461-16383
e7d1 10.0.0.3:6381@16381 slave,fail 292f 0 1 2 disconnected
6ec2 :0@0 master,noaddr - 0 1 3 disconnected
";
        let nodes = parse_cluster_nodes(reply);
        assert_eq!(nodes.len(), 5);
        assert_eq!(nodes[0].addr, "10.0.0.1:6379");
        assert!(nodes[0].master && nodes[0].master_id.is_none());
        assert_eq!(nodes[1].addr, "10.0.0.2:6380");
        assert!(!nodes[1].master);
        assert_eq!(nodes[1].master_id.as_deref(), Some("07c3"));
        assert_eq!(nodes[1].unhealthy, None);
        assert_eq!(nodes[2].addr, "[::1]:7000");
        assert_eq!(nodes[3].unhealthy.as_deref(), Some("fail"));
        assert_eq!(nodes[4].unhealthy.as_deref(), Some("noaddr"));
    }
}
