//! What both scripting implementations do the same way on their connection type: a pool of
//! connections per [`Role`] that never waits, script calls (`EVALSHA`, loading on
//! `NOSCRIPT`) and plain commands on a connection, batches, and the retry of a call a
//! cluster node refused before running it, all within one query timeout.

use super::error::{broken, is_noscript, is_try_again, map_err};
use super::node::NodeConnection;
use super::{shorten, ConnectOptions, LuaScript, Reply, Role, ScriptCall};
use crate::error::Result;
use parking_lot::Mutex;
use std::time::{Duration, Instant};

impl ScriptCall<'_> {
    /// The call as `EVAL`, with the script's whole source.
    pub(super) fn eval(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.script.source())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    /// The call as `EVALSHA`, with the script's SHA1.
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

pub(super) type Factory<C> = Box<dyn Fn() -> redis::RedisResult<C> + Send + Sync>;

/// A connection pool that never waits: a caller takes an idle connection or opens one, and a
/// broken connection is dropped instead of returned.
pub(super) struct Pool<C> {
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

    pub(super) fn with<R>(
        &self,
        f: impl FnOnce(&mut C) -> redis::RedisResult<R>,
    ) -> redis::RedisResult<R> {
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

/// `WAIT`'s timeout argument for `d`: whole ms, at least 1 (`WAIT` with 0 blocks for ever).
pub(super) fn wait_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The replica count `WAIT` answered: a negative count is nonsense and counts as no
/// acknowledgement (the term is then released); more than `u32::MAX` is at least all of them.
pub(super) fn acknowledged(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// A connection to one server with the read and write timeouts of `opts`.
pub(super) fn connect(
    client: &redis::Client,
    opts: &ConnectOptions,
) -> redis::RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(opts.connect_timeout)?;
    con.set_read_timeout(Some(opts.query_timeout))?;
    con.set_write_timeout(Some(opts.query_timeout))?;
    Ok(con)
}

/// A command-path connection to one server (see [`NodeConnection`]: interrupted reads are
/// read again, and the connect keeps to one deadline) with the read and write timeouts of
/// `opts`.
pub(super) fn connect_node(
    client: &redis::Client,
    opts: &ConnectOptions,
) -> redis::RedisResult<NodeConnection> {
    use redis::cluster::Connect as _;
    let con = NodeConnection::open(client.get_connection_info(), Some(opts.connect_timeout))?;
    con.set_read_timeout(Some(opts.query_timeout))?;
    con.set_write_timeout(Some(opts.query_timeout))?;
    Ok(con)
}

/// What differs between the connection types of the two implementations.
pub(super) trait ScriptConnection: redis::ConnectionLike {
    /// Whether a new backend sends `PING` on its first connection. A cluster connection
    /// does not: opening it already read the slot map from a seed that answered, and the
    /// driver sends a `PING` to *every* master, which fails while one is down although the
    /// others serve their slots (issue 21.8).
    const CONNECT_PING: bool;

    /// Sets the bound of every reply on this connection.
    fn set_reply_timeout(&self, d: Duration) -> redis::RedisResult<()>;
}

/// The wait of [`Pools::within_time`] before it sends a call refused with `TRYAGAIN` again.
const TRY_AGAIN_WAIT: Duration = Duration::from_millis(20);

/// A pool of connections per [`Role`], so keep-alives never wait behind acquires, and the
/// calls both implementations make the same way on their connection type.
pub(super) struct Pools<C> {
    pub(super) opts: ConnectOptions,
    keep_alive: Pool<C>,
    pub(super) other: Pool<C>,
}

impl<C: ScriptConnection> Pools<C> {
    /// Pools of connections from `open()`; one connection is opened (and sent `PING`) now
    /// so a bad address fails here, as `operation`.
    pub(super) fn connect(
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
    pub(super) fn within_time<R>(
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

    pub(super) fn eval(
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

    pub(super) fn command(&self, role: Role, args: &[&str]) -> Result<Reply> {
        self.within_time(role, true, |c| {
            Reply::from_value(plain(args)?.query::<redis::Value>(c)?)
        })
        .map_err(map_err("running a Redis command", self.opts.query_timeout))
    }
}

/// One server's batch (a cluster's goes one pipeline per node on our own connections, see
/// `cluster_pipeline`).
impl Pools<NodeConnection> {
    /// The batch as one pipeline; on `NOSCRIPT` every script is loaded and the pipeline
    /// sent again, and on a second `NOSCRIPT` the calls run one by one.
    pub(super) fn eval_many(&self, role: Role, calls: &[ScriptCall<'_>]) -> Result<Vec<Reply>> {
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
