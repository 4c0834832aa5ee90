//! `simba doctor`: a preflight of the server behind a URL. Each check says what it found;
//! a trap names its fix. Exit code 1 when a trap was found.

use serde_json::json;
use simba_lease::backends::redis::{
    ConnectOptions, RedisBackend, RedisScripting, Reply, Role, StandaloneScripting,
};
use simba_lease::backends::zookeeper::{Acl, ZooKeeperBackend};
use simba_lease::backends::{BackendUrl, SqlBackend};
use simba_lease::spi::LeaseBackend;
use simba_lease::{Config, Error, Result, TlsFailure};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend URL.
    url: String,
    /// The session lease your services use (checked against the server's limits); default:
    /// the library's (`Config::default().lease()`, 15s).
    #[arg(long, value_parser = crate::duration)]
    lease: Option<Duration>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl Args {
    fn lease(&self) -> Duration {
        self.lease.unwrap_or_else(|| Config::default().lease())
    }
}

/// What one check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Ok,
    Info,
    /// Worth a look, but no trap: leases do not depend on it.
    Warn,
    /// The check could not run (no permission, command disabled).
    Unknown,
    Trap,
}

pub(crate) struct Finding {
    level: Level,
    check: &'static str,
    text: String,
}

#[derive(Default)]
pub(crate) struct Findings(Vec<Finding>);

impl Findings {
    /// How many findings are at one of `levels`.
    pub(crate) fn count(&self, levels: &[Level]) -> usize {
        self.0.iter().filter(|x| levels.contains(&x.level)).count()
    }

    /// The findings as JSON objects (`level`, `check`, `text`).
    pub(crate) fn json(&self) -> Vec<serde_json::Value> {
        self.0
            .iter()
            .map(|x| json!({"level": format!("{:?}", x.level).to_lowercase(), "check": x.check, "text": x.text}))
            .collect()
    }

    /// The findings as text lines, one per finding.
    pub(crate) fn print(&self) {
        for x in &self.0 {
            let tag = match x.level {
                Level::Ok => "ok     ",
                Level::Info => "info   ",
                Level::Warn => "warn   ",
                Level::Unknown => "unknown",
                Level::Trap => "TRAP   ",
            };
            println!("{tag} {:<22} {}", x.check, x.text);
        }
    }

    pub(crate) fn add(&mut self, level: Level, check: &'static str, text: impl Into<String>) {
        self.0.push(Finding {
            level,
            check,
            text: text.into(),
        });
    }
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let mut f = Findings::default();
    let scheme = a.url.split("://").next().unwrap_or_default().to_owned();
    let pb = crate::progress::spinner(a.json, None, "checking the server");
    let checked = match scheme.as_str() {
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => redis(&a, &mut f),
        "postgres" | "postgresql" => sql(&a, &mut f, true),
        "mysql" | "mariadb" => sql(&a, &mut f, false),
        "zookeeper" | "zk" | "zookeeper+tls" | "zk+tls" => zookeeper(&a, &mut f),
        "memory" => {
            f.add(Level::Info, "backend", "in-memory: nothing to check");
            Ok(())
        }
        other => Err(unknown_scheme(&a.url, other)),
    };
    pb.finish_and_clear();
    if let Err(e) = checked {
        refused(&mut f, e)?;
    }
    let traps = f.count(&[Level::Trap]);
    if a.json {
        println!(
            "{}",
            json!({"url": crate::bench::redacted(&a.url), "lease_ms": a.lease().as_millis() as u64,
                   "traps": traps, "findings": f.json()})
        );
    } else {
        println!("simba doctor {}", crate::bench::redacted(&a.url));
        f.print();
        println!("{traps} trap(s) found");
    }
    Ok(if traps > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A scheme no backend has (exit code 2).
pub(crate) fn unknown_scheme(url: &str, scheme: &str) -> Error {
    Error::InvalidUrl {
        url: crate::bench::redacted(url),
        reason: format!(
            "unknown scheme {scheme:?} (known: memory, postgres, postgresql, mysql, mariadb, \
             redis, rediss, redis+cluster, rediss+cluster, zookeeper, zookeeper+tls)"
        ),
    }
}

/// A connection the server refused (TLS or credentials) is a trap with its fix; any other
/// failure ends the run as before.
fn refused(f: &mut Findings, e: Error) -> Result<()> {
    let fix = match &e {
        Error::Tls { failure, .. } => match failure {
            TlsFailure::UnknownIssuer => {
                "give the CA that signed the server's certificate with `ca=/path/ca.pem`"
            }
            TlsFailure::Expired => "renew the server's certificate (or check this host's clock)",
            TlsFailure::NameMismatch => {
                "connect by a host name the certificate lists (SQL: `sslmode=verify-ca` checks \
                 the chain only)"
            }
            TlsFailure::ClientCertificate => {
                "give a client certificate the server trusts with `cert=` and `key=`"
            }
            TlsFailure::NotOffered => {
                "this port has no TLS: turn TLS on in the server, or use a plaintext URL \
                 (`redis://`, `zookeeper://`, `sslmode=disable`)"
            }
            _ => "check the certificate and the TLS versions the server allows",
        },
        Error::Authentication { .. } => {
            "check the user and password of the URL and what the server grants them, or \
             whether its host rules (pg_hba.conf, `REQUIRE SSL`, `require_secure_transport`) \
             ask for TLS (`sslmode=verify-full&ca=…`) or a client certificate"
        }
        _ => return Err(e),
    };
    let check = if matches!(e, Error::Tls { .. }) {
        "tls"
    } else {
        "authentication"
    };
    f.add(Level::Trap, check, format!("{}; fix: {fix}", e.report()));
    Ok(())
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// An offset beyond which the clock finding is a warning (still no trap).
const CLOCK_WARN_MS: i64 = 60_000;

/// The server clock against the local one, read in a round trip that started at `sent_ms`:
/// compared with the midpoint of the round trip.
fn clock(f: &mut Findings, server_ms: Option<i64>, sent_ms: i64) {
    clock_at(f, server_ms.map(|ms| (ms, (sent_ms + unix_ms()) / 2)));
}

/// The server clock `(server_ms, local_ms)` against the local one: reported, leases never
/// depend on it; more than a minute apart is a warning (logs and metrics of the two hosts
/// will not line up), never a trap.
fn clock_at(f: &mut Findings, reading: Option<(i64, i64)>) {
    match reading {
        Some((server, local)) => {
            let offset = server - local;
            let text = format!(
                "server clock {offset:+} ms from this host (leases are measured by the server's \
                 clock alone)"
            );
            if offset.abs() > CLOCK_WARN_MS {
                f.add(
                    Level::Warn,
                    "clock",
                    format!("{text}; over a minute apart: check NTP on both hosts"),
                );
            } else {
                f.add(Level::Info, "clock", text);
            }
        }
        None => f.add(Level::Unknown, "clock", "could not read the server's clock"),
    }
}

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

fn redis(a: &Args, f: &mut Findings) -> Result<()> {
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

fn sql(a: &Args, f: &mut Findings, postgres: bool) -> Result<()> {
    let b = if postgres {
        SqlBackend::postgres(&a.url)?
    } else {
        SqlBackend::mysql(&a.url)?
    };
    // The pooler first (simple query protocol): the checks after it use prepared statements,
    // which a transaction-mode pooler can break, so their failures are reported, not fatal.
    // Its two connections are the first: a server that cannot be reached ends the run.
    let probe = b.probe_connections()?;
    f.add(Level::Ok, "connect", "the server answers");
    let pooled = pooler(&b, f, postgres, probe);
    if let Err(e) = sql_checks(&b, f, postgres, pooled) {
        f.add(
            Level::Unknown,
            "checks",
            format!(
                "the remaining checks failed: {}{}",
                e.report(),
                if pooled {
                    " (prepared statements through the pooler above)"
                } else {
                    ""
                }
            ),
        );
    }
    let sent = unix_ms();
    clock(f, b.server_clock_ms().ok(), sent);
    Ok(())
}

fn sql_checks(b: &SqlBackend, f: &mut Findings, postgres: bool, pooled: bool) -> Result<()> {
    crate::schema::tables(b, f, postgres, pooled)?;
    if postgres {
        postgres_checks(b, f)?;
    } else {
        mysql_checks(b, f)?;
    }
    Ok(())
}

/// A transaction-mode pooler between the backend and the database (PgBouncer, pgcat,
/// Supavisor; ProxySQL multiplexing on MySQL), seen from two connections of the doctor's own:
/// impossible ids on a direct connection. On PostgreSQL also the statement timeout the backend
/// asks for in the startup options, which such poolers drop. Returns whether one was found.
fn pooler(
    b: &SqlBackend,
    f: &mut Findings,
    postgres: bool,
    p: simba_lease::backends::ConnectionProbe,
) -> bool {
    let id = if postgres {
        "backend pid"
    } else {
        "connection id"
    };
    if p.pooled() {
        let seen = if p.own.windows(2).any(|w| w[0] != w[1]) {
            format!(
                "one client connection ran its transactions on several server connections \
                 ({id}s {:?})",
                p.own
            )
        } else {
            format!(
                "a second client connection ran on the first one's server connection ({id} {})",
                p.other
            )
        };
        let fix = if postgres {
            "connect to PostgreSQL directly, or through a session-mode pool (PgBouncer \
             `pool_mode = session`)"
        } else {
            "connect to the server directly, or turn multiplexing off for this user (ProxySQL \
             `mysql_users.transaction_persistent`/`multiplex=0`)"
        };
        let breaks = if postgres {
            "prepared statements the backend keeps per connection fail or run in another \
             session, and LISTEN (release notifications) and advisory locks are lost"
        } else {
            "prepared statements and the session settings that bound every statement \
             (max_execution_time, lock waits) are lost"
        };
        f.add(
            Level::Trap,
            "pooler",
            format!("a transaction-mode pooler is in front: {seen}; {breaks}; fix: {fix}"),
        );
    } else {
        f.add(
            Level::Ok,
            "pooler",
            format!(
                "each connection keeps its server session ({id}s {} and {})",
                p.own[0], p.other
            ),
        );
    }
    if let Some(t) = p.statement_timeout {
        let want = b.query_timeout().as_millis().max(1);
        let shown = if t.is_zero() {
            "no limit (0)".to_owned()
        } else {
            format!("{} ms", t.as_millis())
        };
        if t.as_millis() != want {
            f.add(
                Level::Trap,
                "statement_timeout",
                format!(
                    "the server applies {shown}, not the {want} ms the backend asks for in its \
                     startup options: something in between dropped them (PgBouncer \
                     `ignore_startup_parameters = options`), so the server no longer bounds \
                     a statement; fix: connect directly, or set statement_timeout for the \
                     role (`ALTER ROLE … SET statement_timeout = '{want}ms'`)"
                ),
            );
        } else {
            f.add(
                Level::Ok,
                "statement_timeout",
                format!("{t:?}, as the backend asks"),
            );
        }
    }
    p.pooled()
}

fn postgres_checks(b: &SqlBackend, f: &mut Findings) -> Result<()> {
    let num = b
        .setting("server_version_num")?
        .and_then(|v| v.parse::<u32>().ok());
    let version = b.setting("server_version")?.unwrap_or_default();
    match num {
        Some(n) if n >= 140_000 => f.add(Level::Ok, "version", format!("PostgreSQL {version}")),
        Some(_) => f.add(
            Level::Trap,
            "version",
            format!("PostgreSQL {version} is older than 14; fix: upgrade"),
        ),
        None => f.add(Level::Unknown, "version", "server_version_num unreadable"),
    }
    let sync = b.setting("synchronous_commit")?.unwrap_or_default();
    let standbys = b.setting("synchronous_standby_names")?.unwrap_or_default();
    if standbys.trim().is_empty() {
        f.add(
            Level::Info,
            "replication",
            "no synchronous standby (synchronous_standby_names empty): a failover to an \
             asynchronous standby can lose recent tokens; use synchronous replication where \
             fencing must survive failovers",
        );
    } else if sync == "off" || sync == "local" {
        f.add(
            Level::Trap,
            "replication",
            format!(
                "synchronous_commit={sync} with synchronous standbys `{standbys}`: commits do not \
                 wait for them; fix: synchronous_commit=on (or remote_apply)"
            ),
        );
    } else {
        f.add(
            Level::Ok,
            "replication",
            format!("synchronous standbys `{standbys}`, synchronous_commit={sync}"),
        );
    }
    Ok(())
}

fn mysql_checks(b: &SqlBackend, f: &mut Findings) -> Result<()> {
    match b.server() {
        Some(s) => f.add(
            Level::Ok,
            "version",
            format!("{:?} {} ({})", s.flavor, version(s.version), s.reported),
        ),
        None => f.add(Level::Unknown, "version", "not detected"),
    }
    let semi = b
        .setting("rpl_semi_sync_master_enabled")?
        .or(b.setting("rpl_semi_sync_source_enabled")?);
    let binlog = b.setting("log_bin")?.unwrap_or_default();
    match semi.as_deref() {
        Some("ON") => f.add(Level::Ok, "replication", "semi-synchronous replication on"),
        _ if binlog == "ON" => f.add(
            Level::Info,
            "replication",
            "binary log on without semi-synchronous replication: a failover to an \
             asynchronous replica can lose recent tokens",
        ),
        _ => f.add(Level::Info, "replication", "no binary log: a single server"),
    }
    Ok(())
}

/// The first `host:port` of a `zookeeper://` URL.
fn first_zk_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let hosts = rest.split(['/', '?']).next()?;
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    let first = hosts.split(',').next()?;
    Some(if first.contains(':') {
        first.to_owned()
    } else {
        format!("{first}:2181")
    })
}

/// The `conf` four-letter word of the first server (it must be whitelisted:
/// `4lw.commands.whitelist=...,conf`): session timeouts against the lease, `maxClientCnxns`.
fn four_letter_conf(a: &Args, f: &mut Findings) {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    let Some(host) = first_zk_host(&a.url) else {
        return;
    };
    let conf = (|| -> std::io::Result<String> {
        let addr = host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"conf")?;
        let mut out = String::new();
        s.take(64 * 1024).read_to_string(&mut out)?;
        Ok(out)
    })();
    let conf = match conf {
        Ok(c) if c.contains("maxSessionTimeout") => c,
        Ok(_) | Err(_) => {
            f.add(
                Level::Unknown,
                "server conf",
                format!(
                    "`conf` four-letter word refused by {host} (add it to 4lw.commands.whitelist)"
                ),
            );
            return;
        }
    };
    let field = |k: &str| -> Option<u64> {
        conf.lines()
            .find_map(|l| l.trim().strip_prefix(k)?.strip_prefix('='))
            .and_then(|v| v.trim().parse().ok())
    };
    if let Some(min) = field("minSessionTimeout") {
        let min = Duration::from_millis(min);
        if a.lease() < min {
            f.add(
                Level::Trap,
                "minSessionTimeout",
                format!(
                    "{min:?} is longer than the lease {:?}: the server keeps a crashed holder's \
                     session (and its leases) for {min:?}; fix: lower minSessionTimeout or use a \
                     longer lease",
                    a.lease()
                ),
            );
        } else {
            f.add(
                Level::Ok,
                "minSessionTimeout",
                format!("{min:?} ≤ lease {:?}", a.lease()),
            );
        }
    }
    match field("maxClientCnxns") {
        Some(0) => f.add(Level::Ok, "maxClientCnxns", "unlimited"),
        Some(n) if n < 60 => f.add(
            Level::Info,
            "maxClientCnxns",
            format!(
                "{n} connections per client address: each backend in a process holds one \
                 connection per session; more sessions from one host are refused"
            ),
        ),
        Some(n) => f.add(Level::Ok, "maxClientCnxns", format!("{n}")),
        None => {}
    }
}

fn version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

/// `scheme:id` of an ACL entry without secrets (a digest id is `user:hash`: the user only).
fn acl_identity(acl: &Acl) -> String {
    let id = if acl.scheme == "digest" {
        acl.id.split(':').next().unwrap_or_default()
    } else {
        acl.id.as_str()
    };
    format!("{}:{id}", acl.scheme)
}

/// Whether the nodes the backend of `a.url` creates get the open ACL: no credentials in the
/// URL (or `acl=open`), unless `acl=creator`.
fn creates_open(a: &Args) -> bool {
    let Ok(u) = BackendUrl::parse(&a.url) else {
        return true;
    };
    match u.param("acl") {
        Some("open") => true,
        Some(_) => false,
        None => u.user.is_none(),
    }
}

/// `world:anyone` allowed to create or delete under the root, `leases` or `groups`; the
/// nodes that do not exist are reported (doctor never creates them): the first session
/// creates them, with the open ACL when the URL has no credentials (a trap).
fn zk_acls(a: &Args, b: &ZooKeeperBackend, f: &mut Findings) {
    let acls = match b.acls() {
        Ok(a) => a,
        Err(e) => {
            f.add(
                Level::Unknown,
                "acl",
                format!("could not read the ACLs: {}", e.report()),
            );
            return;
        }
    };
    let root = b.root();
    let missing: Vec<String> = [
        root.to_owned(),
        format!("{root}/leases"),
        format!("{root}/groups"),
    ]
    .into_iter()
    .filter(|p| !acls.iter().any(|(path, _)| path == p))
    .collect();
    if !missing.is_empty() {
        let missing = missing.join(", ");
        if creates_open(a) {
            f.add(
                Level::Trap,
                "root",
                format!(
                    "{missing} missing (not created by doctor): the first session creates them \
                     open to world:anyone, as this URL has no credentials, and any client could \
                     then delete lease nodes (ending their terms) or forge group members; fix: \
                     digest credentials in the URL (`zookeeper://user:password@hosts{root}`: the \
                     nodes are then creator-only), or create them with a restricted ACL"
                ),
            );
        } else {
            f.add(
                Level::Info,
                "root",
                format!(
                    "{missing} missing (not created by doctor): the first session creates them, \
                     readable and writable by this URL's identity only"
                ),
            );
        }
    }
    if acls.is_empty() {
        return;
    }
    let open: Vec<&str> = acls
        .iter()
        .filter(|(_, entries)| entries.iter().any(Acl::is_open))
        .map(|(path, _)| path.as_str())
        .collect();
    if open.is_empty() {
        let mut who: Vec<String> = acls
            .iter()
            .flat_map(|(_, e)| e.iter().map(acl_identity))
            .collect();
        who.sort();
        who.dedup();
        f.add(
            Level::Ok,
            "acl",
            format!("{} restricted to {}", root, who.join(", ")),
        );
    } else {
        f.add(
            Level::Trap,
            "acl",
            format!(
                "{} open to world:anyone: any client can delete lease nodes (ending their terms), \
                 create them or forge group members; fix: digest credentials in the URL \
                 (`zookeeper://user:password@hosts{root}`: the nodes it creates are then \
                 creator-only), and for existing nodes in zkCli: `addauth digest user:password` \
                 then `setAcl -R {root} auth::cdrwa`",
                open.join(", "),
            ),
        );
    }
}

/// Read only: the backend is built without creating the root
/// ([`create_root(false)`](simba_lease::backends::zookeeper::ZooKeeperBuilder::create_root)),
/// and the server's clock (which ZooKeeper shows only in the `mtime` of a write) is not read.
fn zookeeper(a: &Args, f: &mut Findings) -> Result<()> {
    let b = ZooKeeperBackend::builder_from_url(&a.url)?
        .create_root(false)
        .build()?;
    b.ping()?;
    f.add(Level::Ok, "connect", "the ensemble answers");
    four_letter_conf(a, f);
    zk_acls(a, &b, f);
    f.add(
        Level::Info,
        "clock",
        "not read: ZooKeeper shows its clock only in a write, and doctor writes nothing \
         (leases are measured by the ensemble's session timeouts, not by clocks)",
    );
    // A session with the lease (a connection: no node is written) checks the server's
    // maxSessionTimeout.
    let lease = a.lease();
    match b.open_session(lease, &Default::default()) {
        Ok(g) => {
            f.add(
                Level::Ok,
                "session timeout",
                format!("a {lease:?} lease fits the server's session timeouts"),
            );
            let _ = b.close_session(&g.id);
        }
        Err(e) => f.add(
            Level::Trap,
            "session timeout",
            format!(
                "{}; fix: raise maxSessionTimeout or shorten the lease",
                e.report()
            ),
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_offset_is_reported_and_over_a_minute_only_warned() {
        let mut f = Findings::default();
        clock_at(&mut f, Some((1_000_000, 1_000_250)));
        clock_at(&mut f, Some((1_000_000 + CLOCK_WARN_MS + 1, 1_000_000)));
        clock_at(&mut f, None);
        let levels: Vec<Level> = f.0.iter().map(|x| x.level).collect();
        assert_eq!(levels, [Level::Info, Level::Warn, Level::Unknown]);
        assert!(f.0[0].text.contains("-250 ms"), "{}", f.0[0].text);
        assert!(f.0[1].text.contains("over a minute"), "{}", f.0[1].text);
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

    #[test]
    fn acl_identities_never_show_a_digest_hash() {
        let digest = Acl::new(
            simba_lease::backends::zookeeper::Perms::ALL,
            "digest",
            "app:F6Y+U5gIoCbNNoLQExmvxRFeatA=",
        );
        assert_eq!(acl_identity(&digest), "digest:app");
        let world = Acl::new(
            simba_lease::backends::zookeeper::Perms::READ,
            "world",
            "anyone",
        );
        assert_eq!(acl_identity(&world), "world:anyone");
        assert!(!world.is_open());
    }
}
