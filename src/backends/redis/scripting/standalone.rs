//! The scripting port on one Redis server (a primary, with or without replicas):
//! [`StandaloneScripting`].

use super::error::map_err;
use super::node::NodeConnection;
use super::pool::{acknowledged, connect_node, invoke, wait_ms, Factory, Pools, ScriptConnection};
use super::pubsub::listen_on;
use super::scan::{scan_budget, scan_node, scan_timeout};
use super::tls::{diagnosis, open_client, plaintext_server};
use super::{ConnectOptions, LuaScript, PubSubEvent, RedisScripting, Reply, Role, ScriptCall};
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

impl ScriptConnection for NodeConnection {
    const CONNECT_PING: bool = true;

    fn set_reply_timeout(&self, d: Duration) -> redis::RedisResult<()> {
        redis::cluster::Connect::set_read_timeout(self, Some(d))
    }
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
                .arg(wait_ms(timeout))
                .query(c)?;
            Ok((r, Some(acknowledged(acked))))
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
