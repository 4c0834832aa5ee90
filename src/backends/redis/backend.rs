//! [`RedisBackend`] and its [`LeaseBackend`] implementation: what both topologies do alike
//! (open, owner, values, queues, listing, purge, notifications) is here, and each operation
//! that differs goes through one dispatch on the [`Flavor`].

use super::builder::{self, RedisBackendBuilder};
use super::config::RedisConfig;
use super::failure;
use super::flavor::Flavor;
use super::keys::Keys;
use super::notifier::{self, Notifier};
use super::reply::{
    bad_reply, expired, flag, metadata_in, owner_at, session_in, strings, Acquired,
};
use super::scripting::{
    ClusterScripting, LuaScript, RedisScripting, Reply, Role, StandaloneScripting,
};
use super::scripts::scripts;
use crate::error::{Error, Result};
use crate::spi::url::BackendUrl;
use crate::spi::{
    Acquire, GroupInfo, KeepAlive, LeaseBackend, LeaseInfo, Listing, NotifySink, Queued, RwAcquire,
    RwMode, RwState, SessionGrant, SessionInfo, SessionSpec, Subscribers, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The most keys of each kind (sessions, leases, groups) [`LeaseBackend::list`] reads.
pub const LIST_LIMIT: usize = 100_000;

/// Leases, sessions and groups in Redis 7, standalone, with replicas or as a Cluster.
///
/// See the [module documentation](super) for keys, URL options, the Cluster rules and the
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
    pub(super) base: Base,
    /// One node, or routed by slot: what the operations that differ keep and do.
    pub(super) flavor: Flavor,
    subscribers: Arc<Subscribers>,
    notifier: Notifier,
}

/// What both flavors use: the scripting port, the settings and the key names.
pub(super) struct Base {
    pub(super) scripting: Arc<dyn RedisScripting>,
    pub(super) cfg: RedisConfig,
    pub(super) keys: Keys,
}

impl Base {
    pub(super) fn eval(
        &self,
        role: Role,
        s: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        self.scripting.eval(role, s, keys, args)
    }

    /// `leave_queue.lua`: takes `sid`'s place out of `name`'s fair-lock queue (one script on
    /// the name's slot); the reply is whether it had one.
    pub(super) fn leave_queue(&self, sid: &SessionId, name: &LeaseName) -> Result<Reply> {
        let keys = &self.keys;
        self.eval(
            Role::Other,
            &scripts().leave_queue,
            &[
                keys.queue(name.as_str()),
                keys.queue_deadlines(name.as_str()),
                keys.lease(name.as_str()),
            ],
            &[sid.to_string(), keys.session_prefix()],
        )
    }

    /// How long `WAIT` waits for `wait_replicas`: two thirds of the query timeout.
    pub(super) fn wait_timeout(&self) -> Duration {
        self.cfg.query_timeout * 2 / 3
    }

    /// A new term that fewer than `wait_replicas` replicas acknowledged: it was released
    /// (`released`, the outcome of that), and the acquire fails with this error (one server
    /// and cluster alike).
    pub(super) fn unacknowledged(
        &self,
        name: &LeaseName,
        t: Token,
        acked: u32,
        released: Result<bool>,
    ) -> Error {
        let n = self.cfg.wait_replicas;
        let wait = self.wait_timeout();
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

    /// `release.lua` on `keys` (the lease's, then on one node the session's index and hash).
    pub(super) fn release_script(
        &self,
        keys: &[String],
        session: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        let r = self.eval(
            Role::Other,
            &scripts().release,
            keys,
            &[
                session.to_string(),
                token.to_string(),
                name.to_string(),
                self.keys.session_prefix(),
            ],
        )?;
        flag("releasing", &r)
    }

    /// `leave.lua` on `keys` (the group's, then on one node the session's index and hash).
    pub(super) fn leave_script(
        &self,
        keys: &[String],
        session: &SessionId,
        group: &GroupName,
    ) -> Result<bool> {
        let r = self.eval(
            Role::Other,
            &scripts().leave,
            keys,
            &[session.to_string(), group.to_string()],
        )?;
        flag("leaving a group", &r)
    }

    /// `members.lua` on the group's key: with `metadata` (one node) the members' ids and
    /// metadata in turn, else their ids only.
    pub(super) fn members_script(
        &self,
        group: &GroupName,
        metadata: bool,
    ) -> Result<(Reply, Vec<String>)> {
        let r = self.eval(
            Role::Other,
            &scripts().members,
            &[self.keys.group(group.as_str())],
            &[
                self.keys.session_prefix(),
                if metadata { "1" } else { "0" }.to_owned(),
            ],
        )?;
        let items = strings("reading members", &r)?;
        Ok((r, items))
    }

    /// `set_value.lua` on the lease's node.
    pub(super) fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
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
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("clustered", &self.base.scripting.clustered())
            .field("config", &self.base.cfg)
            .finish()
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        self.notifier.stop();
    }
}

/// A requested lease in whole ms, at least 1 (`PEXPIRE 0` would delete the session). Only
/// for durations the caller asks for: remaining times are rounded down, never up.
pub(super) fn lease_ms(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

/// A lock-delay in whole ms, rounded up (a delay is never kept shorter than asked; zero
/// stays zero).
fn delay_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

impl RedisBackend {
    /// `owner.lua`: the live holder, or (unless `live_only`) the holder of a term in its
    /// lock-delay, with the delay left.
    fn owner_of(&self, name: &LeaseName, live_only: bool) -> Result<Option<Owner>> {
        const OP: &str = "reading an owner";
        let mut args = vec![self.base.keys.session_prefix()];
        if live_only {
            args.push("1".to_owned());
        }
        let r = self.base.eval(
            Role::Other,
            &scripts().owner,
            &[self.base.keys.lease(name.as_str())],
            &args,
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

    /// A backend over any [`RedisScripting`] implementation.
    ///
    /// Fails with [`Error::InvalidConfig`] on a bad prefix or timeout, on `wait_replicas > 0`
    /// over a cluster, and on a cluster without `route_by_slot`.
    pub fn new(scripting: Arc<dyn RedisScripting>, cfg: RedisConfig) -> Result<Self> {
        cfg.validate(scripting.clustered())?;
        Ok(RedisBackend {
            flavor: Flavor::new(cfg.route_by_slot || scripting.clustered()),
            base: Base {
                keys: Keys {
                    prefix: cfg.prefix.clone(),
                },
                scripting,
                cfg,
            },
            subscribers: Arc::new(Subscribers::default()),
            notifier: Notifier::default(),
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
        &self.base.cfg
    }

    /// The scripting port in use.
    pub fn scripting(&self) -> &Arc<dyn RedisScripting> {
        &self.base.scripting
    }

    /// Runs a trivial script (`return 1`) on the connections other calls use: the floor a
    /// benchmark compares operations with.
    pub fn ping_script(&self) -> Result<()> {
        let key = self.base.keys.lease("ping");
        let r = self.base.eval(Role::Other, &scripts().ping, &[key], &[])?;
        match r.as_int() {
            Some(1) => Ok(()),
            _ => Err(bad_reply("pinging", &r)),
        }
    }

    /// The `CLIENT SETNAME` of this backend's notification connection:
    /// `simba-notify-{prefix}`.
    pub fn notifier_name(&self) -> String {
        notifier::connection_name(&self.base.cfg.prefix)
    }

    /// How many cluster keep-alives went one script per node (not slot by slot).
    #[doc(hidden)]
    pub fn keep_alives_by_node(&self) -> u64 {
        self.flavor.keep_alives_by_node()
    }

    /// Forgets the cluster's slot map: the next keep-alive reads it again (for tests that
    /// move slots).
    #[doc(hidden)]
    pub fn forget_slot_map(&self) {
        self.flavor.forget_slot_map();
    }

    /// A plain acquire; with `value`, the term's value is set with it (one node: by the same
    /// script).
    fn acquire_valued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: Option<&str>,
    ) -> Result<Acquire> {
        match self
            .flavor
            .acquire(&self.base, session, name, None, value)?
        {
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
            Acquired::Expired => Err(expired(session)),
        }
    }
}

impl LeaseBackend for RedisBackend {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn supports_lock_delay(&self) -> bool {
        true
    }

    /// The same one script: the session hash keeps the delay, and a record beside it
    /// expires the delay after the session (see lock-delay in `lua/common.lua`).
    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
        let SessionSpec {
            lease,
            metadata,
            lock_delay,
        } = *spec;
        crate::backends::options::check_lease(lease)?;
        crate::types::limits::check_lock_delay(lock_delay)?;
        let id = SessionId::random();
        let sent = std::time::Instant::now();
        let r = self.base.eval(
            Role::Other,
            &scripts().open,
            &[
                self.base.keys.session(&id),
                self.base.keys.session_delay(&id),
            ],
            &[
                metadata.as_str().to_owned(),
                lease_ms(lease).to_string(),
                delay_ms(lock_delay).to_string(),
            ],
        )?;
        // The script answers the lease it set: more than 0 and never more than asked for.
        let left = r
            .as_int()
            .and_then(|v| u64::try_from(v).ok())
            .filter(|v| (1..=lease_ms(lease)).contains(v))
            .ok_or_else(|| bad_reply("opening a session", &r))?;
        let remaining = Duration::from_millis(left);
        self.flavor
            .session_opened(&id, sent + remaining, Some(lease), delay_ms(lock_delay));
        Ok(SessionGrant { id, remaining })
    }

    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        crate::backends::options::check_lease(lease)?;
        self.flavor.keep_alive(&self.base, session, lease)
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.flavor.close(&self.base, session)
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
        self.acquire_valued(session, name, Some(value).filter(|v| !v.is_empty()))
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn job_claims_end_with_session(&self) -> bool {
        self.flavor.is_one_node()
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

    fn supports_rw_locks(&self) -> bool {
        true
    }

    /// One script on the lock's slot (`rw_acquire.lua`; see "Read-write locks" in the module
    /// documentation).
    fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        if !patience.is_zero() {
            crate::backends::options::check_lease(patience)?;
        }
        self.flavor
            .acquire_rw(&self.base, session, name, mode, patience)
    }

    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        self.flavor
            .release_rw(&self.base, session, name, mode, token)
    }

    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.flavor.leave_rw(&self.base, session, name)
    }

    /// `rw_state.lua`, a read of the lock's hash.
    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        let r = self.base.eval(
            Role::Other,
            &scripts().rw_state,
            &[self.base.keys.rw(name.as_str())],
            &self.flavor.rw_state_args(&self.base, name),
        )?;
        super::rw::rw_state_reply(&r)
    }

    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        crate::backends::options::check_lease(patience)?;
        match self
            .flavor
            .acquire(&self.base, session, name, Some(patience), None)?
        {
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
            Acquired::Expired => Err(expired(session)),
        }
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        const OP: &str = "leaving a queue";
        let r = self.base.leave_queue(session, name)?;
        flag(OP, &r)
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        const OP: &str = "reading a queue";
        let keys = &self.base.keys;
        // Routed, session hashes live on other slots: places live by their deadlines only.
        let r = self.base.eval(
            Role::Other,
            &scripts().queue,
            &[
                keys.queue(name.as_str()),
                keys.queue_deadlines(name.as_str()),
            ],
            &[self.flavor.live_sessions_prefix(keys)],
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
        self.base.set_value(session, name, token, value)
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        self.flavor.release(&self.base, session, name, token)
    }

    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.owner_of(name, false)
    }

    /// A `SCAN` of every primary for the prefix's session, lease and group keys (at most
    /// [`LIST_LIMIT`] of each), then per key: `PTTL` and `HGET metadata` of a session, the
    /// owner of a lease, the members of a group. Not atomic: a key that changes meanwhile is
    /// read as it is then.
    fn list(&self) -> Result<Listing> {
        const OP: &str = "listing sessions, leases and groups";
        let sc = &self.base.scripting;
        // The text between the braces of `{prefix}:kind:{x}` (suffixed keys are skipped).
        let inner = |key: &str, prefix: &str| -> Option<String> {
            key.strip_prefix(prefix)?
                .strip_prefix('{')?
                .strip_suffix('}')
                .map(str::to_owned)
        };
        let mut out = Listing::default();
        let sp = self.base.keys.session_prefix();
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
        let lp = self.base.keys.lease_prefix();
        for key in sc.scan(&format!("{lp}*"), LIST_LIMIT)? {
            let Some(name) = inner(&key, &lp).and_then(|n| LeaseName::new(n).ok()) else {
                continue;
            };
            if let Some(owner) = self.owner_of(&name, true)? {
                out.leases.push(LeaseInfo { name, owner });
            }
        }
        let gp = self.base.keys.group_prefix();
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
        self.flavor.join(&self.base, session, group)
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.flavor.leave(&self.base, session, group)
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        self.flavor.members(&self.base, group)
    }

    fn purge_expired(&self) -> Result<usize> {
        let pattern = format!("{}*", self.base.keys.group_prefix());
        let mut removed = HashSet::new();
        for key in self.base.scripting.scan(&pattern, 10_000)? {
            let r = self.base.eval(
                Role::Other,
                &scripts().purge_group,
                &[key],
                &[self.base.keys.session_prefix()],
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
        self.notifier
            .start(&self.base, &self.subscribers, self.notifier_name());
        Ok(Some(sub))
    }
}
