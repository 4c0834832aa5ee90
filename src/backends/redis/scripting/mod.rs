//! The driver-neutral scripting port ([`RedisScripting`]) and its two implementations on the
//! blocking `redis` client: one server ([`StandaloneScripting`]) and a Redis Cluster
//! ([`ClusterScripting`]).
//!
//! This file is the port: the trait, the scripts, replies and calls it speaks in, and the
//! connection settings. Each implementation has its own file (`standalone`, `cluster`); what
//! both share is beside them: the connection pools per role and the script calls on a
//! connection (`pool`), TLS and the plaintext probe (`tls`), the pub/sub reader (`pubsub`),
//! a `SCAN` within a budget (`scan`), the mapping of driver errors (`error`) and the
//! command-path connection to one node (`node`). The cluster's own parts (issue 21.6, 21.9)
//! are beside `node`: the cluster client's node connection that never resends a command
//! whose reply was lost (`cluster_node`), our connections to the masters by address and the
//! slot map (`cluster_nodes`), batches one pipeline per node (`cluster_pipeline`), and a
//! script followed by `WAIT` on the connection that ran it (`cluster_wait`).

mod cluster;
mod cluster_node;
mod cluster_nodes;
mod cluster_pipeline;
mod cluster_wait;
mod error;
mod node;
mod pool;
mod pubsub;
mod scan;
mod standalone;
mod tls;

pub use cluster::ClusterScripting;
pub use standalone::StandaloneScripting;
pub use tls::RedisTls;

use crate::error::Result;
use std::time::Duration;

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
    fn from_value(v: redis::Value) -> redis::RedisResult<Reply> {
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
