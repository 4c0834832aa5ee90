//! The scripting port on a Redis Cluster, through the `redis` crate's blocking cluster
//! client on our node connections: [`ClusterScripting`].

use super::cluster_node::ClusterNode;
use super::cluster_nodes::Nodes;
use super::cluster_wait::{eval_then_wait, Outcome, WaitHints};
use super::error::{is_noscript, map_err};
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

/// A Redis Cluster through the `redis` crate's blocking cluster client: commands are routed
/// by the slot of their first key. Every call must keep to one slot.
///
/// Every node is reached on our connections (issue 21.6: an interrupted read is read again,
/// and a command is never sent twice): single calls through the crate's cluster client on
/// `ClusterNode`s, batches and a script followed by `WAIT` on our connections by address
/// (`Nodes`).
#[allow(missing_debug_implementations)] // the driver's clients and pools print nothing useful
pub struct ClusterScripting {
    seeds: Vec<redis::Client>,
    pools: Pools<redis::cluster::ClusterConnection<ClusterNode>>,
    nodes: Nodes,
    hints: WaitHints,
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
            hints: WaitHints::default(),
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
    /// (see `cluster_wait`: the script's reply is never lost, and `WAIT` follows a grant
    /// without a second round trip). Where no address is known for the slot, the two go as
    /// one pipeline through the cluster client, which routes a pipeline by its first command
    /// and sends it whole to that node.
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
            let wait_ms = wait_ms(timeout.min(left * 2 / 3));
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
                redis::Value::Int(n) => acknowledged(n),
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
