//! The scripting port on a Redis Cluster, through the `redis` crate's blocking cluster
//! client: [`ClusterScripting`].

use super::error::{is_noscript, map_err};
use super::node::NodeConnection;
use super::pool::{acknowledged, connect, connect_node, wait_ms, Factory, Pools, ScriptConnection};
use super::pubsub::listen_on;
use super::scan::{scan_budget, scan_node, scan_timeout};
use super::tls::{diagnosis, open_client, plaintext_server};
#[cfg(feature = "tls")]
use super::tls::{install_crypto_provider, tls_certificates, tls_refused};
use super::{ConnectOptions, LuaScript, PubSubEvent, RedisScripting, Reply, Role, ScriptCall};
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl ScriptConnection for redis::cluster::ClusterConnection {
    type Pipeline = redis::cluster::ClusterPipeline;

    fn evalsha_pipeline(calls: &[ScriptCall<'_>]) -> redis::cluster::ClusterPipeline {
        let mut pipe = redis::cluster::cluster_pipe();
        for c in calls {
            pipe.add_command(c.evalsha());
        }
        pipe
    }

    fn query_pipeline(
        &mut self,
        pipe: &redis::cluster::ClusterPipeline,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        pipe.query(self)
    }

    const CONNECT_PING: bool = false;

    fn set_reply_timeout(&self, d: Duration) -> redis::RedisResult<()> {
        self.set_read_timeout(Some(d))
    }
}

/// The shortest wait of the cluster client before it retries a `TRYAGAIN`, in ms.
const TRY_AGAIN_MIN_WAIT_MS: u64 = 5;

/// The longest wait of the cluster client before it retries a `TRYAGAIN`, in ms.
const TRY_AGAIN_MAX_WAIT_MS: u64 = 40;

/// A Redis Cluster through the `redis` crate's blocking cluster client: commands are routed
/// by the slot of their first key. Every call must keep to one slot.
#[allow(missing_debug_implementations)] // the driver's clients and pools print nothing useful
pub struct ClusterScripting {
    seeds: Vec<redis::Client>,
    pools: Pools<redis::cluster::ClusterConnection>,
}

impl ClusterScripting {
    /// Connects to the cluster through the seed nodes `urls` (`redis://host:port`).
    pub fn new(urls: &[String], opts: ConnectOptions) -> Result<Self> {
        const OP: &str = "connecting to the Redis Cluster";
        let err = |e| super::super::failure::error(OP, e);
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
        // The seeds are first reached through connections of ours (one deadline per seed,
        // handshake included; see `NodeConnection`): the driver's give each reply of their
        // handshake the whole timeout, so a seed that never answers took twice the timeout.
        // The check reads the slot map from the first seed that answers.
        let checked = client
            .get_generic_connection::<NodeConnection>()
            .map(drop)
            .map_err(map_err(OP, opts.connect_timeout));
        let client = Arc::new(client);
        let open = || -> Factory<redis::cluster::ClusterConnection> {
            let client = client.clone();
            Box::new(move || client.get_connection())
        };
        let seeds = urls
            .iter()
            .map(|u| open_client(u, &opts.tls))
            .collect::<Result<Vec<_>>>()?;
        let diagnose = opts.clone();
        let pools = checked
            .and_then(|()| Pools::connect(opts, open, OP))
            .map_err(|e| match e {
                Error::Backend { .. } | Error::Timeout { .. } => {
                    seed_failure(&seeds, &diagnosis(&diagnose, started), OP).unwrap_or(e)
                }
                e => e,
            })?;
        Ok(ClusterScripting { seeds, pools })
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
        let e = super::super::failure::error(operation, e);
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

    /// The script and `WAIT` as one pipeline on the connection to the master of the script's
    /// first key (the cluster client routes a pipeline by its first command and sends it whole
    /// to that node, redirections included), so `WAIT` counts the replicas of the master that
    /// ran the script, right after it. `WAIT` is sent whatever the script answers (a pipeline
    /// cannot depend on a reply); its count is used only when `wait_if` says so.
    fn eval_then_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        wait_if: &dyn Fn(&Reply) -> bool,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Reply, Option<u32>)> {
        let call = ScriptCall {
            script,
            keys: keys.to_vec(),
            args: args.to_vec(),
        };
        let query_timeout = self.pools.opts.query_timeout;
        let deadline = Instant::now() + query_timeout;
        let values = self.pools.within_time(Role::Other, true, |c| {
            // Within what is left of the call's time (a retry after `TRYAGAIN` has less), so
            // the reply of `WAIT` comes before the connection's read timeout.
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = timeout.min(left * 2 / 3);
            let wait_ms = wait_ms(wait);
            let send = |c: &mut redis::cluster::ClusterConnection, cmd: redis::Cmd| {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd).cmd("WAIT").arg(replicas).arg(wait_ms);
                redis::ConnectionLike::req_packed_commands(c, &pipe.get_packed_pipeline(), 0, 2)
            };
            match send(c, call.evalsha()) {
                Err(e) if is_noscript(&e) => send(c, call.eval()),
                r => r,
            }
        });
        let err = map_err(script.name, query_timeout);
        let mut values = values.map_err(&err)?.into_iter();
        let (Some(reply), Some(acked)) = (values.next(), values.next()) else {
            return Err(err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "wrong number of replies from Redis",
                "a script and WAIT".to_owned(),
            ))));
        };
        let reply = Reply::from_value(reply).map_err(&err)?;
        if !wait_if(&reply) {
            return Ok((reply, None));
        }
        // As on one server: a negative or unreadable count is no acknowledgement.
        let acked = match acked {
            redis::Value::Int(n) => acknowledged(n),
            other => {
                log::warn!("WAIT after {} answered {other:?}", script.name);
                0
            }
        };
        Ok((reply, Some(acked)))
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
