//! [`ZooKeeperBackend`] and its [`LeaseBackend`] impl: sessions as ZooKeeper sessions, leases
//! as ephemeral nodes whose `czxid` is the token, groups as ephemeral children, with the
//! admin calls `simba doctor` uses (ACLs, the ensemble's clock). The parts it stands on are
//! beside it: `session`, `connect`, `codec`, `watch`, `lease`, `queue`, `rw`, `jobs`.

use super::acl::Acl;
use super::codec::read_nodes;
use super::connect::Cfg;
use super::facade::{backend as zk_err, call};
use super::rw::TermNode;
use super::session::{Sessions, ZkSession};
use super::{failure, held};
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::{
    Acquire, GroupInfo, HeldLease, HeldRw, KeepAlive, LeaseBackend, LeaseInfo, Listing, NotifySink,
    Queued, RwAcquire, RwMode, RwState, SessionGrant, SessionInfo, SessionSpec, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Token};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// Leases, sessions and groups in ZooKeeper: see the [module docs](super).
///
/// ```no_run
/// use simba_lease::backends::zookeeper::{AclPolicy, ZooKeeperBackend};
/// use simba_lease::{Config, Session};
/// use std::{sync::Arc, time::Duration};
/// let backend = ZooKeeperBackend::builder("zk1:2181,zk2:2181,zk3:2181")
///     .root("/simba")
///     .digest("simba", "secret")
///     .acl(AclPolicy::creator_all())
///     .connection_timeout(Duration::from_secs(10))
///     .build()?;
/// let session = Session::open(Arc::new(backend), Config::default())?;
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub struct ZooKeeperBackend {
    pub(super) inner: Arc<Sessions>,
}

impl std::fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("connect", &self.inner.cfg.connect)
            .field("root", &self.inner.cfg.root)
            .finish()
    }
}

impl ZooKeeperBackend {
    /// The root path.
    pub fn root(&self) -> &str {
        &self.inner.cfg.root
    }

    /// Makes the next `n` deletes of queue places fail as a lost connection would (for tests
    /// of the retry).
    #[doc(hidden)]
    pub fn fail_place_deletes(&self, n: u32) {
        self.inner.fail_place_deletes(n);
    }

    /// Makes the replies of the next `n` read-write lock grants get lost after the server ran
    /// them, as a timeout would (for tests of the stray terms left behind).
    #[doc(hidden)]
    pub fn lose_rw_grant_replies(&self, n: u32) {
        self.inner
            .rw_reply_faults
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes the next `n` read-write lock grants fail before they are sent, as a connection
    /// lost before the send would: the backend cannot tell them from a grant whose reply was
    /// lost (for tests of a retry that gets the same token).
    #[doc(hidden)]
    pub fn lose_rw_grants_unsent(&self, n: u32) {
        self.inner
            .rw_unsent_faults
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// The ACLs of the root and of its `leases`, `groups`, `delays` and `rw` nodes, as
    /// `(path, entries)` (read by the backend's reader with its auth infos); a node that does
    /// not exist (see [`ZooKeeperBuilder::create_root`](super::ZooKeeperBuilder::create_root))
    /// is left out. Used by `simba doctor`.
    pub fn acls(&self) -> Result<Vec<(String, Vec<Acl>)>> {
        const OP: &str = "reading ACLs";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        let mut out = Vec::new();
        let cfg = &inner.cfg;
        for path in [&cfg.root, &cfg.leases, &cfg.groups, &cfg.delays, &cfg.rw] {
            let (acl, _) = match call(OP, inner.cfg.request_timeout, client.get_acl(path))? {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(zk_err(OP, e)),
            };
            out.push((path.clone(), acl.iter().map(Acl::from_zk).collect()));
        }
        Ok(out)
    }

    /// The ensemble's clock: creates an ephemeral node under the root (with the ACL policy)
    /// and deletes it. Returns its `mtime` (UTC epoch ms, set by the server that ordered the
    /// write) and this host's wall clock at the midpoint of the create's round trip (UTC
    /// epoch ms). Leases never depend on it; `simba doctor` reports the difference.
    pub fn server_clock_ms(&self) -> Result<(i64, i64)> {
        const OP: &str = "reading the server's clock";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        let path = format!(
            "{}/simba-clock-{}",
            inner.cfg.root,
            &SessionId::random().as_str()[..16]
        );
        let acl = inner.cfg.acl.for_path(&path);
        let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
        let sent = unix_ms();
        let created = call(
            OP,
            inner.cfg.request_timeout,
            client.create(&path, &[], &opts),
        )?;
        let local = (sent + unix_ms()) / 2;
        let (stat, _) = created.map_err(|e| zk_err(OP, e))?;
        match call(OP, inner.cfg.request_timeout, client.delete(&path, None))? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_err(OP, e)),
        }
        Ok((stat.mtime, local))
    }
}

/// The paths of the lease nodes `leases`, then of the read-write term nodes `terms`.
fn paths(
    cfg: &Cfg,
    leases: &held::Numbered<LeaseName>,
    terms: &held::Numbered<TermNode>,
) -> Vec<String> {
    let leases = leases.iter().map(|(n, _)| cfg.lease_path(n));
    leases
        .chain(terms.iter().map(|(t, _)| t.path.clone()))
        .collect()
}

/// This host's wall clock as UTC epoch ms.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

impl Drop for ZooKeeperBackend {
    fn drop(&mut self) {
        self.inner.reader.stopped.store(true, Ordering::SeqCst);
        self.inner.reader.client.write().take();
        let sessions: Vec<_> = self.inner.sessions.lock().drain().map(|(_, s)| s).collect();
        // Close all at once, then wait for the confirmations under one deadline.
        sessions.iter().for_each(|s| s.begin_close());
        let end = options::deadline(self.inner.cfg.request_timeout);
        for s in sessions {
            s.shutdown_until(end, false);
        }
    }
}

impl LeaseBackend for ZooKeeperBackend {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn supports_lock_delay(&self) -> bool {
        true
    }

    /// As [`open_session`](LeaseBackend::open_session): the delay is kept by this backend
    /// and written into the gate of every term the session begins (see `delay`).
    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
        let SessionSpec {
            lease,
            metadata,
            lock_delay,
        } = *spec;
        crate::backends::options::check_lease(lease)?;
        crate::types::limits::check_lock_delay(lock_delay)?;
        let lock_delay_ms =
            i64::try_from(lock_delay.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX);
        let inner = &self.inner;
        let sent = Instant::now();
        let client = inner.cfg.connect(lease)?;
        let raw = client.session_id().0;
        let negotiated = client.session_timeout();
        let id = SessionId::from_u64(raw as u64);
        // ZooKeeper gets the lease in whole milliseconds and clamps it into the servers'
        // [minSessionTimeout, maxSessionTimeout]. Clamped down, the session would live less
        // than the lease, and a renew interval valid for the lease could exceed it: every
        // session would then expire between keep-alives.
        if negotiated.as_millis() < lease.as_millis() {
            drop(client); // closes the ZooKeeper session in the background
            return Err(Error::config(
                "lease",
                format!(
                    "ZooKeeper granted a session timeout of {negotiated:?}, shorter than the \
                     lease {lease:?} (the servers' maxSessionTimeout): sessions would expire \
                     between keep-alives; use a lease of at most {negotiated:?} or raise \
                     maxSessionTimeout"
                ),
            ));
        }
        let s = Arc::new(ZkSession {
            id: id.clone(),
            raw,
            negotiated,
            lock_delay_ms,
            metadata: metadata.clone(),
            states: client.state_watcher(),
            client: Mutex::new(Some(client)),
            deadline: Mutex::new(sent + lease),
            lease: Mutex::new(lease),
            possibly: Mutex::new(held::Leases::default()),
            releasing: Mutex::new(()),
            closed: Mutex::new(false),
            orphans: Mutex::new(Vec::new()),
            terms: Mutex::new(Default::default()),
        });
        let remaining = s.remaining_at(sent);
        inner.sessions.lock().insert(id.clone(), s);
        let _ = inner.wake.send(());
        Ok(SessionGrant { id, remaining })
    }

    /// One `exists` (of `{root}/leases`, or of the few lease and read-write term nodes whose
    /// create's outcome is unknown), plus one round trip when the watch of a held lease or
    /// term fired: the held ones are listed from their watches (see `held`).
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        crate::backends::options::check_lease(lease)?;
        const OP: &str = "keep-alive";
        let inner = &self.inner;
        let s = inner.live(session)?;
        s.check_connected(OP)?;
        let client = s.client()?;
        let sent = Instant::now();
        let limit = s.limit(&inner.cfg);
        // The nodes to read are chosen and their reads (or the one `exists`) sent under the
        // locks creates are sent under, so every create counted was queued before them: see
        // `held` for why the watches of the other held leases and read-write terms make
        // reading them unnecessary.
        let (reads, mark, term_reads, term_mark, fut) = {
            let mut p = s.possibly.lock();
            let mut t = s.terms.lock();
            let (reads, mark) = p.unsure();
            let (term_reads, term_mark) = t.unsure();
            let paths = paths(&inner.cfg, &reads, &term_reads);
            let fut = read_nodes(&client, &inner.cfg, &paths);
            (reads, mark, term_reads, term_mark, fut)
        };
        let mut seen = match call(OP, limit, fut)? {
            Ok(r) => r,
            Err(e) => return Err(inner.fail(&s, OP, e)),
        };
        if !s.renew(sent + lease, lease) {
            // The watchdog (or a close) won the race: the nodes may be gone already.
            return Err(s.expired());
        }
        let term_seen = seen.split_off(reads.len().min(seen.len()));
        let (mut held, again) = s.possibly.lock().after_reads(&reads, seen, mark, s.raw)?;
        let (mut terms, terms_again) =
            (s.terms.lock()).after_reads(&term_reads, term_seen, term_mark, s.raw)?;
        if !again.is_empty() || !terms_again.is_empty() {
            // Watches fired (those nodes changed, maybe after the requests), or a grant's
            // `exists` failed: read them again.
            let paths = paths(&inner.cfg, &again, &terms_again);
            let fut = read_nodes(&client, &inner.cfg, &paths);
            let mut seen = match call(OP, limit, fut)? {
                Ok(r) => r,
                Err(e) => return Err(inner.fail(&s, OP, e)),
            };
            let term_seen = seen.split_off(again.len().min(seen.len()));
            (s.possibly.lock()).after_rereads(again, seen, s.raw, &mut held)?;
            (s.terms.lock()).after_rereads(terms_again, term_seen, s.raw, &mut terms)?;
        }
        inner.delete_orphans(&s, &client);
        let remaining = lease.min(s.negotiated);
        let leases = held
            .into_iter()
            .map(|(name, token)| HeldLease {
                name,
                token,
                remaining,
            })
            .collect();
        let rw = terms
            .into_iter()
            .map(|(t, token)| HeldRw {
                name: t.name,
                mode: t.mode,
                token,
            })
            .collect();
        Ok(KeepAlive {
            remaining,
            leases,
            rw,
        })
    }

    /// Closing a live session with a lock-delay first deletes its lease nodes and read-write
    /// terms with their gates (one multi per possibly held lease or term, sent at once): a
    /// clean end, without the delay. An expired session, or one the watchdog closes, leaves
    /// its gates.
    fn close_session(&self, session: &SessionId) -> Result<()> {
        let s = self.inner.sessions.lock().get(session).cloned();
        if let Some(s) = s {
            if s.lock_delay_ms > 0 && !s.gone() {
                self.inner.end_gates(&s);
            }
            self.inner.expire(&s);
        }
        Ok(())
    }

    /// One multi, with an `exists` with a watch queued behind it (not waited for): the lease
    /// node's create, with the gate's create, `setData` (its stat carries the token: see the
    /// code) and delete (no gate may stand: see `delay`), or with the gate, its `setData` and
    /// its holder's child for a session with a lock-delay. A name in its delay adds a read and
    /// a stamp write per attempt, and the take one more multi.
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.inner.acquire(session, name)
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        self.inner.release(session, name, token)
    }

    /// One multi read of the lease node and its gate on the reader; a name in its delay adds
    /// the stamp's write (see `delay`), which times the delay left.
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.inner.owner(name)
    }

    fn supports_values(&self) -> bool {
        true
    }

    /// Two round trips on the session's own client: the node's stat (its owner and czxid
    /// must be the session and the token), then a `setData` of that node version. The data
    /// change fires the holder's watch (its next keep-alive reads the node once) and the
    /// readers' recursive watch ([`Notification::Acquired`](crate::spi::Notification::Acquired)).
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        self.inner.set_value(session, name, token, value)
    }

    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        const OP: &str = "joining a group";
        let inner = &self.inner;
        let s = inner.live(session)?;
        let gpath = inner.cfg.group_path(group);
        let mpath = format!("{gpath}/{}", s.id);
        let acl = inner.cfg.acl.for_path(&mpath);
        let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
        let limit = s.limit(&inner.cfg);
        for _ in 0..8 {
            s.check_connected(OP)?;
            let client = s.client()?;
            let data = s.metadata.as_str().as_bytes();
            match call(OP, limit, client.create(&mpath, data, &opts))? {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) => {
                    let gacl = inner.cfg.acl.for_path(&gpath);
                    let gopts = zk::CreateMode::Container.with_acls(zk::Acls::new(&gacl));
                    match call(OP, limit, client.create(&gpath, &[], &gopts))? {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(zk::Error::NoNode) => {
                            inner.cfg.mkdirs(&client, &inner.cfg.groups, limit)?
                        }
                        Err(e) => return Err(inner.fail(&s, OP, e)),
                    }
                }
                Err(e) => return Err(inner.fail(&s, OP, e)),
            }
        }
        Err(failure::error(
            OP,
            format!("group node {gpath} kept vanishing"),
        ))
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        const OP: &str = "leaving a group";
        let inner = &self.inner;
        let Some(s) = inner.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let mpath = format!("{}/{}", inner.cfg.group_path(group), s.id);
        match call(OP, s.limit(&inner.cfg), client.delete(&mpath, None))? {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => inner.fail_unchanged(&s, OP, e),
        }
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        const OP: &str = "reading group members";
        let inner = &self.inner;
        let limit = inner.cfg.request_timeout;
        let client = inner.reader.client()?;
        let gpath = inner.cfg.group_path(group);
        // Sync first: a join that just returned (on any server) is then in the view.
        match call(OP, limit, client.sync(&gpath))? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_err(OP, e)),
        }
        let children = match call(OP, limit, client.list_children(&gpath))? {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(zk_err(OP, e)),
        };
        let ids: Vec<SessionId> = children
            .iter()
            .filter_map(|c| {
                SessionId::parse(c)
                    .ok()
                    .filter(|id| id.as_str().len() == 16)
            })
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut r = client.new_multi_reader();
        for id in &ids {
            r.add_get_data(&format!("{gpath}/{id}"))
                .map_err(|e| zk_err(OP, e))?;
        }
        let results = call(OP, limit, r.commit())?.map_err(|e| zk_err(OP, e))?;
        let mut members = Vec::new();
        for (id, r) in ids.into_iter().zip(results) {
            if let zk::MultiReadResult::Data { data, stat } = r {
                // Only a node the member's own session created counts.
                if SessionId::from_u64(stat.ephemeral_owner as u64) != id {
                    continue;
                }
                let metadata = String::from_utf8(data)
                    .ok()
                    .and_then(|m| Metadata::new(m).ok())
                    .unwrap_or_default();
                members.push(Member {
                    session: id,
                    metadata,
                });
            }
        }
        members.sort();
        Ok(members)
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<crate::spi::JobClaim> {
        self.inner.claim_job(session, name, at_most)
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        self.inner.finish_job(session, name, token, at_least)
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
        options::check_lease(patience)?;
        self.inner
            .acquire_queued(session, name, patience, || self.acquire(session, name))
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.inner.leave_queue(session, name)
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.inner.queue(name)
    }

    fn supports_rw_locks(&self) -> bool {
        true
    }

    /// A multi read of the name's counter node and its children; with writers waiting, the
    /// clock write and a multi read of their nodes (sent together); then the grant or the
    /// registration (one multi) or the renewal (one write), unless the reply is known by
    /// then: 1 to 3 round trips (see `rw`); a grant's multi has an `exists` with a watch of
    /// its term node queued behind it, not waited for (the keep-alive lists the term). Terms
    /// in their lock-delay add their stamps' writes (sent with the waiting writers' read, else
    /// one round trip more; one more at the first look).
    fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        self.inner.acquire_rw(session, name, mode, patience)
    }

    /// One delete of the term's node (named with the session and token); for a session with
    /// a lock-delay, one multi that also deletes the term's gate.
    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        self.inner.release_rw(session, name, mode, token)
    }

    /// One round trip: the clock's write, the waiting-writer node's read and its delete, sent
    /// together; `true` only if its patience had not run out.
    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.inner.leave_rw_queue(session, name)
    }

    /// A sync and a multi read on the reader (one round trip), plus the clock write and the
    /// waiting writers' multi read when writers wait, and the stamps' writes of terms in
    /// their lock-delay (see `rw`).
    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        self.inner.rw_state(name)
    }

    /// Lease nodes (one multi read), then each group's members. ZooKeeper does not list
    /// sessions to clients: the sessions shown are those holding a lease or in a group, with
    /// the metadata of their member nodes (or of this backend's own session), and the time
    /// left as for [`owner`](LeaseBackend::owner).
    fn list(&self) -> Result<Listing> {
        const OP: &str = "listing sessions, leases and groups";
        let inner = &self.inner;
        let limit = inner.cfg.request_timeout;
        let client = inner.reader.client()?;
        let mut out = Listing::default();
        match call(OP, limit, client.sync(&inner.cfg.root))? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_err(OP, e)),
        }
        let children = |path: &str| -> Result<Vec<String>> {
            match call(OP, limit, client.list_children(path))? {
                Ok(c) => Ok(c),
                Err(zk::Error::NoNode) => Ok(Vec::new()),
                Err(e) => Err(zk_err(OP, e)),
            }
        };
        let names: Vec<LeaseName> = children(&inner.cfg.leases)?
            .into_iter()
            .filter_map(|n| LeaseName::new(n).ok())
            .collect();
        if !names.is_empty() {
            let mut r = client.new_multi_reader();
            for n in &names {
                r.add_get_data(&inner.cfg.lease_path(n))
                    .map_err(|e| zk_err(OP, e))?;
            }
            let results = call(OP, limit, r.commit())?.map_err(|e| zk_err(OP, e))?;
            for (name, r) in names.into_iter().zip(results) {
                if let zk::MultiReadResult::Data { data, stat } = r {
                    match inner.owner_with_value(&data, &stat) {
                        Ok(owner) => out.leases.push(LeaseInfo { name, owner }),
                        Err(e) => log::warn!("lease node {name}: {}", e.report()),
                    }
                }
            }
        }
        for g in children(&inner.cfg.groups)? {
            let Ok(name) = GroupName::new(g) else {
                continue;
            };
            let members = self.members(&name)?;
            if !members.is_empty() {
                out.groups.push(GroupInfo { name, members });
            }
        }
        let mut sessions: std::collections::BTreeMap<SessionId, Metadata> = Default::default();
        for l in &out.leases {
            let id = &l.owner.session;
            let own = inner.sessions.lock().get(id).map(|s| s.metadata.clone());
            sessions
                .entry(id.clone())
                .or_insert(own.unwrap_or_default());
        }
        for m in out.groups.iter().flat_map(|g| &g.members) {
            sessions.insert(m.session.clone(), m.metadata.clone());
        }
        out.sessions = sessions
            .into_iter()
            .map(|(id, metadata)| {
                let raw = u64::from_str_radix(id.as_str(), 16).unwrap_or_default() as i64;
                SessionInfo {
                    remaining: inner.remaining_of(raw),
                    id,
                    metadata,
                }
            })
            .collect();
        out.leases.sort_by(|a, b| a.name.cmp(&b.name));
        out.groups.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn purge_expired(&self) -> Result<usize> {
        // ZooKeeper removes expired sessions and their nodes itself; this closes the local
        // sessions whose lease ran out without a keep-alive.
        Ok(self.inner.sweep().0)
    }

    /// One `exists` of the root on the reader: the floor round trip.
    fn ping(&self) -> Result<()> {
        const OP: &str = "ping";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        match call(
            OP,
            inner.cfg.request_timeout,
            client.check_stat(&inner.cfg.root),
        )? {
            Ok(_) => Ok(()),
            Err(e) => Err(zk_err(OP, e)),
        }
    }

    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        Ok(Some(self.inner.subscribers.add(sink)))
    }
}
