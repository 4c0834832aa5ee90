//! The driver-neutral scripting port ([`RedisScripting`]) and its two implementations on the
//! blocking `redis` client: one server ([`StandaloneScripting`]) and a Redis Cluster
//! ([`ClusterScripting`]).

use super::cluster_node::ClusterNode;
use super::cluster_nodes::Nodes;
use super::node::NodeConnection;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A Lua script of the backend: its name (for messages) and full source.
#[derive(Clone)]
pub struct LuaScript {
    name: &'static str,
    source: String,
    compiled: redis::Script,
}

impl LuaScript {
    /// A script from its source.
    pub fn new(name: &'static str, source: String) -> Self {
        let compiled = redis::Script::new(&source);
        LuaScript {
            name,
            source,
            compiled,
        }
    }

    /// The script's name (its file name without `.lua`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source sent with `SCRIPT LOAD`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The SHA1 used with `EVALSHA`.
    pub fn sha1(&self) -> &str {
        self.compiled.get_hash()
    }
}

impl std::fmt::Debug for LuaScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LuaScript({})", self.name)
    }
}

/// A reply, independent of the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nil (or Lua `false`).
    Nil,
    /// An integer.
    Int(i64),
    /// A string.
    Data(Vec<u8>),
    /// An array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The integer, if this is one (or a string holding one).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            Reply::Data(d) => std::str::from_utf8(d).ok()?.parse().ok(),
            _ => None,
        }
    }

    /// The string, if this is a UTF-8 string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Data(d) => std::str::from_utf8(d).ok(),
            _ => None,
        }
    }

    /// The elements, if this is an array (nil is the empty array).
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(a) => Some(a),
            Reply::Nil => Some(&[]),
            _ => None,
        }
    }

    /// The reply of `v`; a server error anywhere in it (e.g. inside an array) is an error,
    /// and so is a kind of value no script returns (a push, a big number).
    pub(super) fn from_value(v: redis::Value) -> redis::RedisResult<Reply> {
        use redis::Value as V;
        Ok(match v.extract_error()? {
            V::Nil => Reply::Nil,
            V::Int(i) => Reply::Int(i),
            V::BulkString(b) => Reply::Data(b),
            V::SimpleString(s) => Reply::Data(s.into_bytes()),
            V::Okay => Reply::Data(b"OK".to_vec()),
            V::Boolean(b) => Reply::Int(b as i64),
            V::VerbatimString { text, .. } => Reply::Data(text.into_bytes()),
            V::Array(a) | V::Set(a) => Reply::Array(
                a.into_iter()
                    .map(Reply::from_value)
                    .collect::<redis::RedisResult<_>>()?,
            ),
            V::Map(m) => {
                let mut out = Vec::with_capacity(m.len().saturating_mul(2));
                for (k, v) in m {
                    out.push(Reply::from_value(k)?);
                    out.push(Reply::from_value(v)?);
                }
                Reply::Array(out)
            }
            V::Attribute { data, .. } => Reply::from_value(*data)?,
            other => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "unexpected kind of reply from Redis",
                    shorten(format!("{other:?}")),
                )));
            }
        })
    }
}

/// `s` cut to at most 200 bytes (on a character boundary), for messages about replies.
pub(crate) fn shorten(mut s: String) -> String {
    const MAX: usize = 200;
    if s.len() > MAX {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// One script call of a batch ([`RedisScripting::eval_many`]).
#[derive(Debug)]
pub struct ScriptCall<'a> {
    /// The script.
    pub script: &'a LuaScript,
    /// Its keys (all in one slot).
    pub keys: Vec<String>,
    /// Its arguments.
    pub args: Vec<String>,
}

impl ScriptCall<'_> {
    pub(super) fn eval(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.script.source())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    pub(super) fn evalsha(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.sha1())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

/// Loads every distinct script of `calls` (after a `NOSCRIPT`).
fn load_all(
    con: &mut dyn redis::ConnectionLike,
    calls: &[ScriptCall<'_>],
) -> redis::RedisResult<()> {
    let mut done: Vec<&str> = Vec::new();
    for c in calls {
        if !done.contains(&c.script.sha1()) {
            load(con, c.script)?;
            done.push(c.script.sha1());
        }
    }
    Ok(())
}

/// `SCRIPT LOAD`; a server answering another SHA1 than the script's is an error (the `redis`
/// crate's own `Script::load` asserts instead, a panic in debug builds).
fn load(con: &mut dyn redis::ConnectionLike, script: &LuaScript) -> redis::RedisResult<()> {
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script.source())
        .query(con)?;
    if sha != script.sha1() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "SCRIPT LOAD answered another SHA1",
            shorten(format!("{sha:?} for {} ({})", script.name, script.sha1())),
        )));
    }
    Ok(())
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Which connections a call uses: keep-alives never queue behind other traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Session keep-alives.
    KeepAlive,
    /// Everything else.
    Other,
}

/// Receives pub/sub events from [`RedisScripting::listen`].
#[derive(Debug)]
pub enum PubSubEvent<'a> {
    /// The patterns are subscribed.
    Subscribed,
    /// A message arrived.
    Message {
        /// Its channel.
        channel: &'a str,
        /// Its payload.
        payload: &'a [u8],
    },
    /// Nothing arrived for a while (a chance to stop).
    Idle,
}

/// The scripting port the Redis backend runs on: script calls, a few plain commands, `WAIT`
/// and a pub/sub listener. Implement it to run the backend over another client.
///
/// On a cluster ([`RedisScripting::clustered`]) every call must keep to one hash slot; the
/// backend then splits its operations by slot itself.
pub trait RedisScripting: Send + Sync {
    /// Whether this is a Redis Cluster (calls are routed by slot).
    fn clustered(&self) -> bool;

    /// Runs `script` (`EVALSHA`, loading it on `NOSCRIPT`).
    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply>;

    /// Runs `script`, then, if `wait_if` says so for its reply, `WAIT replicas timeout` on
    /// the same connection; returns the reply and the number of replicas that acknowledged
    /// (`None` when `WAIT` was not sent or its count is not asked for). On a cluster `WAIT`
    /// must run on the connection to the master that ran the script.
    fn eval_then_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        wait_if: &dyn Fn(&Reply) -> bool,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Reply, Option<u32>)>;

    /// Runs several script calls (each within one slot) as one batch: pipelined per node
    /// where the client can; replies in order. The default runs them one after another.
    /// After a `NOSCRIPT` the batch may run again, so batched scripts must be idempotent.
    fn eval_many(&self, role: Role, calls: &[ScriptCall<'_>]) -> Result<Vec<Reply>> {
        calls
            .iter()
            .map(|c| self.eval(role, c.script, &c.keys, &c.args))
            .collect()
    }

    /// Runs a plain command whose keys are in one slot.
    fn command(&self, role: Role, args: &[&str]) -> Result<Reply>;

    /// Keys matching `pattern` (a `SCAN` of every primary), at most `limit`.
    fn scan(&self, pattern: &str, limit: usize) -> Result<Vec<String>>;

    /// Pattern-subscribes on a dedicated connection named `name` (`CLIENT SETNAME`) and
    /// reports events to `on_event` until it returns `false` (then `Ok`) or the connection
    /// fails (then `Err`). `Idle` comes at least every `idle`.
    fn listen(
        &self,
        name: &str,
        patterns: &[String],
        idle: Duration,
        on_event: &mut dyn FnMut(PubSubEvent<'_>) -> bool,
    ) -> Result<()>;
}

/// Connection settings shared by both implementations.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Bound of every reply (also the read and write timeout of connections).
    pub query_timeout: Duration,
    /// Bound of opening a connection.
    pub connect_timeout: Duration,
    /// Idle connections kept per role.
    pub pool_size: usize,
    /// TLS material of a `rediss://` URL (feature `tls`).
    pub tls: RedisTls,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            query_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            pool_size: 4,
            tls: RedisTls::default(),
        }
    }
}

/// TLS material for `rediss://` URLs, in PEM (read from the URL's `ca`, `cert` and `key`
/// files). Empty, a `rediss://` URL trusts the platform's root certificates and sends no
/// client certificate. Its `Debug` never prints the contents.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA certificates to trust instead of the platform's.
    pub ca: Option<Vec<u8>>,
    /// A client certificate (chain) and its private key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisTls {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

/// Makes rustls's `ring` provider the process default unless one is installed already (the
/// redis crate builds its TLS configuration with the default provider).
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The redis crate's form of `tls`.
#[cfg(feature = "tls")]
fn tls_certificates(tls: &RedisTls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.ca.clone(),
    }
}

/// The certificates of `tls` were refused by the driver.
#[cfg(feature = "tls")]
fn tls_refused(tls: &RedisTls, e: redis::RedisError) -> Error {
    let setting = if tls.client.is_some() { "cert" } else { "ca" };
    Error::config(setting, format!("the TLS certificates were refused: {e}"))
}

/// A client for `url` (`redis://` or `rediss://`) with the TLS material `tls`.
fn open_client(url: &str, tls: &RedisTls) -> Result<redis::Client> {
    const OP: &str = "parsing the Redis URL";
    #[cfg(feature = "tls")]
    install_crypto_provider();
    if tls.is_empty() {
        return redis::Client::open(url).map_err(|e| super::failure::error(OP, e));
    }
    #[cfg(feature = "tls")]
    {
        redis::Client::build_with_tls(url, tls_certificates(tls)).map_err(|e| tls_refused(tls, e))
    }
    #[cfg(not(feature = "tls"))]
    Err(Error::config(
        "ca",
        "TLS certificates need the `tls` feature of simba-lease",
    ))
}

pub(crate) fn map_err(
    operation: &'static str,
    timeout: Duration,
) -> impl Fn(redis::RedisError) -> Error {
    move |e| {
        if e.is_timeout() || super::cluster_node::lost_by_timeout(&e) {
            Error::Timeout {
                operation,
                after: timeout,
                source: Some(Box::new(e)),
            }
        } else {
            super::failure::error(operation, e)
        }
    }
}

fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

type Factory<C> = Box<dyn Fn() -> redis::RedisResult<C> + Send + Sync>;

/// A connection pool that never waits: a caller takes an idle connection or opens one, and a
/// broken connection is dropped instead of returned.
struct Pool<C> {
    idle: Mutex<Vec<C>>,
    max_idle: usize,
    open: Factory<C>,
}

impl<C: redis::ConnectionLike> Pool<C> {
    fn new(max_idle: usize, open: Factory<C>) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
            open,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut C) -> redis::RedisResult<R>) -> redis::RedisResult<R> {
        let pooled = self.idle.lock().pop();
        let mut con = match pooled {
            Some(c) => c,
            None => (self.open)()?,
        };
        let r = f(&mut con);
        if con.is_open() && !matches!(&r, Err(e) if broken(e)) {
            let mut idle = self.idle.lock();
            if idle.len() < self.max_idle {
                idle.push(con);
            }
        }
        r
    }
}

/// `EVALSHA`; on `NOSCRIPT` (a restarted server, a `SCRIPT FLUSH`) the script is sent whole
/// with `EVAL`, which also caches it for the next `EVALSHA`.
pub(super) fn invoke(
    con: &mut dyn redis::ConnectionLike,
    script: &LuaScript,
    keys: &[String],
    args: &[String],
) -> redis::RedisResult<redis::Value> {
    let call = ScriptCall {
        script,
        keys: keys.to_vec(),
        args: args.to_vec(),
    };
    match call.evalsha().query(con) {
        Err(e) if is_noscript(&e) => call.eval().query(con),
        r => r,
    }
}

/// The command `args` (name first); an empty one is a client error, not a panic.
fn plain(args: &[&str]) -> redis::RedisResult<redis::Cmd> {
    let Some((name, rest)) = args.split_first() else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "empty Redis command",
        )));
    };
    let mut cmd = redis::cmd(name);
    for a in rest {
        cmd.arg(*a);
    }
    Ok(cmd)
}

/// A connection to one server with the read and write timeouts of `opts`.
fn connect(client: &redis::Client, opts: &ConnectOptions) -> redis::RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(opts.connect_timeout)?;
    con.set_read_timeout(Some(opts.query_timeout))?;
    con.set_write_timeout(Some(opts.query_timeout))?;
    Ok(con)
}

/// A command-path connection to one server (see [`NodeConnection`]: interrupted reads are
/// read again, and the connect keeps to one deadline) with the read and write timeouts of
/// `opts`.
fn connect_node(
    client: &redis::Client,
    opts: &ConnectOptions,
) -> redis::RedisResult<NodeConnection> {
    use redis::cluster::Connect as _;
    let con = NodeConnection::open(client.get_connection_info(), Some(opts.connect_timeout))?;
    con.set_read_timeout(Some(opts.query_timeout))?;
    con.set_write_timeout(Some(opts.query_timeout))?;
    Ok(con)
}

/// How many query timeouts a whole [`RedisScripting::scan`] may take: a server that never
/// returns the cursor to 0 must not keep the caller forever.
const SCAN_BUDGET: u32 = 4;

/// The bound of one whole scan.
fn scan_budget(opts: &ConnectOptions) -> Duration {
    opts.query_timeout.saturating_mul(SCAN_BUDGET)
}

/// The error of a scan that did not finish by its deadline.
fn scan_timeout(opts: &ConnectOptions) -> Error {
    Error::Timeout {
        operation: "scanning keys (the cursor did not come back)",
        after: scan_budget(opts),
        source: None,
    }
}

/// `SCAN`s one node for `pattern` into `out` until the cursor comes back or `out` holds
/// `limit` keys (then `true`), or `deadline` passed (then `false`).
fn scan_node(
    con: &mut dyn redis::ConnectionLike,
    pattern: &str,
    limit: usize,
    out: &mut Vec<String>,
    deadline: Instant,
) -> redis::RedisResult<bool> {
    let mut cursor = 0u64;
    loop {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        out.extend(keys);
        cursor = next;
        if cursor == 0 || out.len() >= limit {
            return Ok(true);
        }
    }
}

/// What differs between the connection types of the two implementations.
trait ScriptConnection: redis::ConnectionLike {
    /// Whether a new backend sends `PING` on its first connection. A cluster connection
    /// does not: opening it already read the slot map from a seed that answered, and the
    /// driver sends a `PING` to *every* master, which fails while one is down although the
    /// others serve their slots (issue 21.8).
    const CONNECT_PING: bool;

    /// Sets the bound of every reply on this connection.
    fn set_reply_timeout(&self, d: Duration) -> redis::RedisResult<()>;
}

impl ScriptConnection for NodeConnection {
    const CONNECT_PING: bool = true;

    fn set_reply_timeout(&self, d: Duration) -> redis::RedisResult<()> {
        redis::cluster::Connect::set_read_timeout(self, Some(d))
    }
}

impl<N> ScriptConnection for redis::cluster::ClusterConnection<N>
where
    N: redis::cluster::Connect + redis::ConnectionLike,
{
    const CONNECT_PING: bool = false;

    fn set_reply_timeout(&self, d: Duration) -> redis::RedisResult<()> {
        self.set_read_timeout(Some(d))
    }
}

/// The shortest wait of the cluster client before it retries a `TRYAGAIN`, in ms.
const TRY_AGAIN_MIN_WAIT_MS: u64 = 5;
/// The longest wait of the cluster client before it retries a `TRYAGAIN`, in ms.
const TRY_AGAIN_MAX_WAIT_MS: u64 = 40;
/// The wait of [`Pools::within_time`] before it sends a call refused with `TRYAGAIN` again.
const TRY_AGAIN_WAIT: Duration = Duration::from_millis(20);

/// Whether a cluster node refused a call before running it, in a way that passes as a slot
/// migration goes on: `TRYAGAIN`, and for a call of one slot (`single`) also a redirection
/// (`ASK`, `MOVED`) or `CLUSTERDOWN` left after the cluster client's own retries. A batch's
/// redirections are its caller's (a keep-alive's anchor script reading a term whose slot
/// moved away is refused for good, and falls back to scripts per slot).
fn is_try_again(e: &redis::RedisError, single: bool) -> bool {
    if single {
        e.is_cluster_error()
    } else {
        e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
    }
}

/// A pool of connections per [`Role`], so keep-alives never wait behind acquires, and the
/// calls both implementations make the same way on their connection type.
struct Pools<C> {
    opts: ConnectOptions,
    keep_alive: Pool<C>,
    other: Pool<C>,
}

impl<C: ScriptConnection> Pools<C> {
    /// Pools of connections from `open()`; one connection is opened (and sent `PING`) now
    /// so a bad address fails here, as `operation`.
    fn connect(
        opts: ConnectOptions,
        open: impl Fn() -> Factory<C>,
        operation: &'static str,
    ) -> Result<Self> {
        let pools = Pools {
            keep_alive: Pool::new(opts.pool_size, open()),
            other: Pool::new(opts.pool_size, open()),
            opts,
        };
        let deadline = Instant::now() + pools.opts.connect_timeout;
        let query_timeout = pools.opts.query_timeout;
        pools
            .other
            .with(|c| {
                // The first reply is part of the connect: within what is left of its time.
                let left = deadline.saturating_duration_since(Instant::now());
                if !C::CONNECT_PING {
                    return Ok(());
                }
                c.set_reply_timeout(left.max(Duration::from_millis(1)))?;
                redis::cmd("PING").query::<redis::Value>(c)?;
                c.set_reply_timeout(query_timeout)
            })
            .map_err(map_err(operation, pools.opts.connect_timeout))?;
        Ok(pools)
    }

    /// Runs `f` on a connection of `role`; while it fails with `TRYAGAIN` (a slot being
    /// migrated) or another refusal of [`is_try_again`] (the server refused the command
    /// before running it, so sending it again is safe, even for a batch whose other calls ran, batched scripts being idempotent), it
    /// runs again after a short wait, each time with what is left of one query timeout as
    /// the bound of its replies, until that time is spent: a call ends within its timeout,
    /// retries included.
    fn within_time<R>(
        &self,
        role: Role,
        single: bool,
        mut f: impl FnMut(&mut C) -> redis::RedisResult<R>,
    ) -> redis::RedisResult<R> {
        let deadline = Instant::now() + self.opts.query_timeout;
        let mut r = self.pool(role).with(&mut f);
        while matches!(&r, Err(e) if is_try_again(e, single)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left <= TRY_AGAIN_WAIT * 2 {
                break;
            }
            std::thread::sleep(TRY_AGAIN_WAIT);
            let left = deadline.saturating_duration_since(Instant::now());
            let query_timeout = self.opts.query_timeout;
            r = self.pool(role).with(|c| {
                c.set_reply_timeout(left)?;
                let r = f(c);
                c.set_reply_timeout(query_timeout)?;
                r
            });
        }
        r
    }

    fn pool(&self, role: Role) -> &Pool<C> {
        match role {
            Role::KeepAlive => &self.keep_alive,
            Role::Other => &self.other,
        }
    }

    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        self.within_time(role, true, |c| {
            Reply::from_value(invoke(c, script, keys, args)?)
        })
        .map_err(map_err(script.name, self.opts.query_timeout))
    }

    fn command(&self, role: Role, args: &[&str]) -> Result<Reply> {
        self.within_time(role, true, |c| {
            Reply::from_value(plain(args)?.query::<redis::Value>(c)?)
        })
        .map_err(map_err("running a Redis command", self.opts.query_timeout))
    }
}

impl Pools<NodeConnection> {
    /// The batch as one pipeline; on `NOSCRIPT` every script is loaded and the pipeline
    /// sent again, and on a second `NOSCRIPT` the calls run one by one.
    fn eval_many(&self, role: Role, calls: &[ScriptCall<'_>]) -> Result<Vec<Reply>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for c in calls {
            pipe.add_command(c.evalsha());
        }
        let query = |con: &mut NodeConnection| pipe.query::<Vec<redis::Value>>(con);
        self.within_time(role, false, |con| match query(con) {
            Err(e) if is_noscript(&e) => {
                load_all(con, calls)?;
                match query(con) {
                    Err(e) if is_noscript(&e) => calls
                        .iter()
                        .map(|c| invoke(con, c.script, &c.keys, &c.args))
                        .collect(),
                    r => r,
                }
            }
            r => r,
        })
        .and_then(|v| {
            if v.len() != calls.len() {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "wrong number of replies from Redis",
                    format!("{} for {} scripts", v.len(), calls.len()),
                )));
            }
            v.into_iter().map(Reply::from_value).collect()
        })
        .map_err(map_err("running scripts", self.opts.query_timeout))
    }
}

/// Listens on one plain connection (used by both implementations: classic pub/sub messages
/// reach every node of a cluster).
///
/// The connection speaks RESP3 (Redis 6 or later), where messages are pushes, and is read one
/// value at a time: whatever a server sends, `on_event` is called after every value (a value
/// that is no message counts as [`PubSubEvent::Idle`]), so a stream of other values never
/// keeps the listener from noticing it should stop. The connection is simply dropped at the
/// end (no unsubscribe round trip). (The `redis` crate's `PubSub` reads until a message comes,
/// and, with RESP2 replies, a read timeout makes the next reply be skipped.)
fn listen_on(
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

/// One Redis server (a primary, with or without replicas): a pool of connections per
/// [`Role`], so keep-alives never wait behind acquires.
#[allow(missing_debug_implementations)] // the driver's client and pools print nothing useful
pub struct StandaloneScripting {
    client: redis::Client,
    pools: Pools<NodeConnection>,
}

impl StandaloneScripting {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`); the first connection is
    /// opened now so a bad address fails here.
    pub fn new(url: &str, opts: ConnectOptions) -> Result<Self> {
        let client = open_client(url, &opts.tls)?;
        let open = || -> Factory<NodeConnection> {
            let (client, opts) = (client.clone(), opts.clone());
            Box::new(move || connect_node(&client, &opts))
        };
        const OP: &str = "connecting to Redis";
        let started = Instant::now();
        let pools = Pools::connect(opts.clone(), open, OP).map_err(|e| match e {
            Error::Timeout { .. } | Error::Backend { .. } => {
                plaintext_server(&client, &diagnosis(&opts, started), OP).unwrap_or(e)
            }
            e => e,
        })?;
        Ok(StandaloneScripting { client, pools })
    }
}

/// The settings of the diagnosis after a failed connect (the plaintext probe, the seeds one
/// by one): the connect timeout is what is left of it since `started`, but at least a quarter
/// of it, so a connect that failed takes at most 1¼ connect timeouts in all (a diagnosis with
/// the whole timeout again made an unanswering address take twice the timeout).
fn diagnosis(opts: &ConnectOptions, started: Instant) -> ConnectOptions {
    let left = opts.connect_timeout.saturating_sub(started.elapsed());
    ConnectOptions {
        connect_timeout: left.max(opts.connect_timeout / 4),
        ..opts.clone()
    }
}

/// After a TLS connect failed: [`TlsFailure::NotOffered`](crate::TlsFailure) if the server
/// answers a plaintext `PING` (a plaintext server may wait for the end of a line the TLS
/// handshake never sends, so the handshake itself can only time out).
fn plaintext_server(
    client: &redis::Client,
    opts: &ConnectOptions,
    operation: &'static str,
) -> Option<Error> {
    use std::io::{Read, Write};
    let redis::ConnectionAddr::TcpTls { host, port, .. } = client.get_connection_info().addr()
    else {
        return None;
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), *port))
        .ok()?
        .next()?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, opts.connect_timeout).ok()?;
    sock.set_read_timeout(Some(opts.connect_timeout)).ok()?;
    sock.set_write_timeout(Some(opts.connect_timeout)).ok()?;
    sock.write_all(b"PING\r\n").ok()?;
    let mut first = [0u8; 1];
    sock.read_exact(&mut first).ok()?;
    // A RESP reply: `+PONG`, or an error such as `-NOAUTH`.
    matches!(first[0], b'+' | b'-').then(|| Error::Tls {
        operation,
        failure: crate::TlsFailure::NotOffered,
        source: format!("{host}:{port} answers plaintext Redis, not TLS (use redis://)").into(),
    })
}

impl RedisScripting for StandaloneScripting {
    fn clustered(&self) -> bool {
        false
    }

    fn eval_many(&self, role: Role, calls: &[ScriptCall<'_>]) -> Result<Vec<Reply>> {
        self.pools.eval_many(role, calls)
    }

    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        self.pools.eval(role, script, keys, args)
    }

    fn eval_then_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        wait_if: &dyn Fn(&Reply) -> bool,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Reply, Option<u32>)> {
        let mut reply = None;
        let r = self.pools.other.with(|c| {
            let r = Reply::from_value(invoke(c, script, keys, args)?)?;
            reply = Some(r.clone());
            if !wait_if(&r) {
                return Ok((r, None));
            }
            let acked: i64 = redis::cmd("WAIT")
                .arg(replicas)
                .arg(
                    u64::try_from(timeout.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1),
                )
                .query(c)?;
            // A negative count is nonsense: counted as no acknowledgement (the term is then
            // released); more than u32::MAX is at least all of them.
            Ok((r, Some(u32::try_from(acked.max(0)).unwrap_or(u32::MAX))))
        });
        match (r, reply) {
            (Ok(r), _) => Ok(r),
            // The script ran but WAIT failed: no replica acknowledged in time.
            (Err(e), Some(reply)) if wait_if(&reply) => {
                log::warn!("WAIT after {} failed: {e}", script.name);
                Ok((reply, Some(0)))
            }
            (Err(e), _) => Err(map_err(script.name, self.pools.opts.query_timeout)(e)),
        }
    }

    fn command(&self, role: Role, args: &[&str]) -> Result<Reply> {
        self.pools.command(role, args)
    }

    fn scan(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let deadline = Instant::now() + scan_budget(&self.pools.opts);
        let done = self
            .pools
            .other
            .with(|c| scan_node(c, pattern, limit, &mut out, deadline))
            .map_err(map_err("scanning keys", self.pools.opts.query_timeout))?;
        if !done {
            return Err(scan_timeout(&self.pools.opts));
        }
        out.truncate(limit);
        Ok(out)
    }

    fn listen(
        &self,
        name: &str,
        patterns: &[String],
        idle: Duration,
        on_event: &mut dyn FnMut(PubSubEvent<'_>) -> bool,
    ) -> Result<()> {
        listen_on(
            &self.client,
            &self.pools.opts,
            name,
            patterns,
            idle,
            on_event,
        )
    }
}

/// A Redis Cluster through the `redis` crate's blocking cluster client: commands are routed
/// by the slot of their first key. Every call must keep to one slot.
///
/// Every node is reached on our connections (issue 21.6: an interrupted read is read again,
/// and a command is never sent twice): single calls through the crate's cluster client on
/// node connections of ours whose lost replies it never resends, batches and a script
/// followed by `WAIT` on our connections to the masters by address.
#[allow(missing_debug_implementations)] // the driver's clients and pools print nothing useful
pub struct ClusterScripting {
    seeds: Vec<redis::Client>,
    pools: Pools<redis::cluster::ClusterConnection<ClusterNode>>,
    nodes: Nodes,
    hints: super::cluster_wait::WaitHints,
}

impl ClusterScripting {
    /// Connects to the cluster through the seed nodes `urls` (`redis://host:port`).
    pub fn new(urls: &[String], opts: ConnectOptions) -> Result<Self> {
        const OP: &str = "connecting to the Redis Cluster";
        let err = |e| super::failure::error(OP, e);
        let builder = redis::cluster::ClusterClient::builder(urls.to_vec())
            .connection_timeout(opts.connect_timeout)
            .response_timeout(opts.query_timeout)
            .retries(2)
            // A `TRYAGAIN` (a slot being migrated) waits 5–20 ms, then 5–40 ms, not the
            // driver's default of at least 1.28 s each (issue 21.7): further ones are retried
            // by `Pools::within_time`, within the query timeout.
            .min_retry_wait(TRY_AGAIN_MIN_WAIT_MS)
            .max_retry_wait(TRY_AGAIN_MAX_WAIT_MS)
            .retry_wait_formula(10, 2);
        #[cfg(feature = "tls")]
        let builder = if opts.tls.is_empty() {
            builder
        } else {
            install_crypto_provider();
            builder.certs(tls_certificates(&opts.tls))
        };
        #[cfg(feature = "tls")]
        let client = builder.build().map_err(|e| {
            if opts.tls.is_empty() {
                err(e)
            } else {
                tls_refused(&opts.tls, e)
            }
        })?;
        #[cfg(not(feature = "tls"))]
        let client = builder.build().map_err(err)?;
        let started = Instant::now();
        let client = Arc::new(client);
        let query_timeout = opts.query_timeout;
        // The seeds and nodes are reached through connections of ours (one deadline per
        // seed, handshake included; see `NodeConnection`): the driver's give each reply of
        // their handshake the whole timeout, so a seed that never answers took twice the
        // timeout. The first connection, opened now, reads the slot map from the first seed
        // that answers.
        let open = || -> Factory<redis::cluster::ClusterConnection<ClusterNode>> {
            let client = client.clone();
            Box::new(move || {
                let con = client.get_generic_connection::<ClusterNode>()?;
                con.set_write_timeout(Some(query_timeout))?;
                Ok(con)
            })
        };
        let seeds = urls
            .iter()
            .map(|u| open_client(u, &opts.tls))
            .collect::<Result<Vec<_>>>()?;
        let diagnose = opts.clone();
        let Some(seed) = seeds.first() else {
            return Err(Error::config("hosts", "no seed node"));
        };
        let nodes = Nodes::new(seed.get_connection_info().clone(), opts.clone());
        let pools = Pools::connect(opts, open, OP).map_err(|e| match e {
            Error::Backend { .. } | Error::Timeout { .. } => {
                seed_failure(&seeds, &diagnosis(&diagnose, started), OP).unwrap_or(e)
            }
            e => e,
        })?;
        Ok(ClusterScripting {
            seeds,
            pools,
            nodes,
            hints: Default::default(),
        })
    }
}

/// The cluster client keeps each seed's failure as text only: after it failed, the seeds are
/// tried one by one alone, so that a TLS or authentication failure is reported as such (a
/// TLS seed that answers plaintext as `NotOffered`, see [`plaintext_server`]).
fn seed_failure(
    seeds: &[redis::Client],
    opts: &ConnectOptions,
    operation: &'static str,
) -> Option<Error> {
    // One budget for all the seeds: each gets what is left of it.
    let deadline = Instant::now() + opts.connect_timeout;
    seeds.iter().find_map(|seed| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let opts = &ConnectOptions {
            connect_timeout: left,
            query_timeout: left,
            ..opts.clone()
        };
        let e = connect_node(seed, opts)
            .and_then(|mut con| redis::cmd("PING").query::<redis::Value>(&mut con))
            .err()?;
        let e = super::failure::error(operation, e);
        match e {
            Error::Tls { .. } | Error::Authentication { .. } => Some(e),
            _ => plaintext_server(seed, opts, operation),
        }
    })
}

impl RedisScripting for ClusterScripting {
    fn clustered(&self) -> bool {
        true
    }

    /// One pipeline per node, sent to every node before any reply is read.
    fn eval_many(&self, role: Role, calls: &[ScriptCall<'_>]) -> Result<Vec<Reply>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        self.pools
            .within_time(role, false, |c| {
                super::cluster_pipeline::run(&self.nodes, c, calls)
            })
            .and_then(|v| v.into_iter().map(Reply::from_value).collect())
            .map_err(map_err("running scripts", self.pools.opts.query_timeout))
    }

    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        self.pools.eval(role, script, keys, args)
    }

    /// The script, then `WAIT`, on one of our connections to the master of the script's slot
    /// (see the module `cluster_wait`: the script's reply is never lost, and `WAIT` follows a
    /// grant without a second round trip). Where no address is known for the slot, the two
    /// go as one pipeline through the cluster client, which routes a pipeline by its first
    /// command and sends it whole to that node.
    fn eval_then_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        wait_if: &dyn Fn(&Reply) -> bool,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Reply, Option<u32>)> {
        use super::cluster_wait::{eval_then_wait, Outcome};
        let call = ScriptCall {
            script,
            keys: keys.to_vec(),
            args: args.to_vec(),
        };
        let query_timeout = self.pools.opts.query_timeout;
        let deadline = Instant::now() + query_timeout;
        let r = self.pools.within_time(Role::Other, true, |c| {
            let routed = eval_then_wait(
                &self.nodes,
                &self.hints,
                c,
                &call,
                wait_if,
                replicas,
                timeout,
                deadline,
            )?;
            if let Outcome::Done(value, acked) = routed {
                return Ok((value, acked));
            }
            // Within what is left of the call's time (a retry after `TRYAGAIN` has less), so
            // the reply of `WAIT` comes before the connection's read timeout.
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = timeout.min(left * 2 / 3);
            let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
            let send = |c: &mut redis::cluster::ClusterConnection<ClusterNode>, cmd: redis::Cmd| {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd).cmd("WAIT").arg(replicas).arg(wait_ms);
                redis::ConnectionLike::req_packed_commands(c, &pipe.get_packed_pipeline(), 0, 2)
            };
            let values = match send(c, call.evalsha()) {
                Err(e) if is_noscript(&e) => send(c, call.eval()),
                r => r,
            }?;
            let mut values = values.into_iter();
            let (Some(value), Some(acked)) = (values.next(), values.next()) else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "wrong number of replies from Redis",
                    "a script and WAIT".to_owned(),
                )));
            };
            // As on one server: a negative or unreadable count is no acknowledgement.
            let acked = match acked {
                redis::Value::Int(n) => u32::try_from(n.max(0)).unwrap_or(u32::MAX),
                _ => 0,
            };
            Ok((value, Some(acked)))
        });
        let err = map_err(script.name, query_timeout);
        let (value, acked) = r.map_err(&err)?;
        let reply = Reply::from_value(value).map_err(&err)?;
        if !wait_if(&reply) {
            return Ok((reply, None));
        }
        Ok((reply, Some(acked.unwrap_or(0))))
    }

    fn command(&self, role: Role, args: &[&str]) -> Result<Reply> {
        self.pools.command(role, args)
    }

    /// Scans every primary (found with `CLUSTER SLOTS` through the first seed that answers).
    fn scan(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        let opts = &self.pools.opts;
        let deadline = Instant::now() + scan_budget(opts);
        let err = map_err("scanning keys", opts.query_timeout);
        let mut masters: Vec<redis::Client> = Vec::new();
        let mut last = None;
        for seed in &self.seeds {
            let slots = connect(seed, opts).and_then(|mut c| {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Vec<Vec<redis::Value>>>(&mut c)
            });
            match slots {
                Ok(ranges) => {
                    let mut seen = Vec::new();
                    for r in ranges {
                        let Some(redis::Value::Array(node)) = r.get(2) else {
                            continue;
                        };
                        let host = match node.first() {
                            Some(redis::Value::BulkString(h)) => {
                                String::from_utf8_lossy(h).into_owned()
                            }
                            _ => continue,
                        };
                        let Some(&redis::Value::Int(port)) = node.get(1) else {
                            continue;
                        };
                        let Ok(port) = u16::try_from(port) else {
                            continue;
                        };
                        let host = if host.is_empty() {
                            match seed.get_connection_info().addr() {
                                redis::ConnectionAddr::Tcp(h, _)
                                | redis::ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                                _ => continue,
                            }
                        } else {
                            host
                        };
                        if seen.contains(&(host.clone(), port)) {
                            continue;
                        }
                        seen.push((host.clone(), port));
                        // The seed's TLS settings (CA, client certificate) for every node.
                        let addr = match seed.get_connection_info().addr().clone() {
                            redis::ConnectionAddr::TcpTls {
                                insecure,
                                tls_params,
                                ..
                            } => redis::ConnectionAddr::TcpTls {
                                host,
                                port,
                                insecure,
                                tls_params,
                            },
                            _ => redis::ConnectionAddr::Tcp(host, port),
                        };
                        let info = seed.get_connection_info().clone().set_addr(addr);
                        masters.push(redis::Client::open(info).map_err(&err)?);
                    }
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if masters.is_empty() {
            return Err(err(last.unwrap_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "no seed node"))
            })));
        }
        let mut out = Vec::new();
        for m in &masters {
            let mut con = connect(m, opts).map_err(&err)?;
            if !scan_node(&mut con, pattern, limit, &mut out, deadline).map_err(&err)? {
                return Err(scan_timeout(opts));
            }
            if out.len() >= limit {
                break;
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    fn listen(
        &self,
        name: &str,
        patterns: &[String],
        idle: Duration,
        on_event: &mut dyn FnMut(PubSubEvent<'_>) -> bool,
    ) -> Result<()> {
        let mut last = Err(Error::config("hosts", "no seed node"));
        for seed in &self.seeds {
            last = listen_on(seed, &self.pools.opts, name, patterns, idle, on_event);
            if last.is_ok() {
                return last;
            }
        }
        last
    }
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
