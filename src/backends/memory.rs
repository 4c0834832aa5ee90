//! The in-memory backend: the embedded default and a supported test double.

use crate::error::{Error, Result};
use crate::spi::{
    Acquire, GroupInfo, HeldLease, JobClaim, KeepAlive, LeaseBackend, LeaseInfo, Listing,
    Notification, NotifySink, Queued, RwAcquire, RwMode, SessionGrant, SessionInfo, Subscribers,
    Subscription,
};
use crate::types::{Clock, SystemClock};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct SessionRow {
    expires: Instant,
    /// How long its terms keep their names blocked after it expired.
    lock_delay: Duration,
    metadata: Metadata,
    leases: BTreeSet<LeaseName>,
    groups: BTreeSet<GroupName>,
    /// Read-write locks the session holds or waits for as a writer.
    rw: BTreeSet<LeaseName>,
}

/// A read-write lock's record: its token counter (never reset) and who holds or waits.
#[derive(Default)]
struct RwRow {
    token: u64,
    writer: Option<(SessionId, u64)>,
    readers: BTreeMap<SessionId, u64>,
    /// Waiting writers in arrival order, each with its patience deadline.
    waiting: Vec<(SessionId, Instant)>,
}

impl RwRow {
    /// Drops holders and waiters whose session ended (or whose patience ran out).
    fn prune(&mut self, sessions: &HashMap<SessionId, SessionRow>, now: Instant) {
        let live = |id: &SessionId| sessions.get(id).is_some_and(|s| s.expires > now);
        if self.writer.as_ref().is_some_and(|(id, _)| !live(id)) {
            self.writer = None;
        }
        self.readers.retain(|id, _| live(id));
        self.waiting.retain(|(id, until)| *until > now && live(id));
    }

    /// Forgets `id` as holder and waiter; whether it was either.
    fn forget(&mut self, id: &SessionId) -> bool {
        let mut hit = self.writer.as_ref().is_some_and(|(w, _)| w == id);
        if hit {
            self.writer = None;
        }
        hit |= self.readers.remove(id).is_some();
        let before = self.waiting.len();
        self.waiting.retain(|(w, _)| w != id);
        hit || self.waiting.len() < before
    }

    fn busy(&self) -> RwAcquire {
        RwAcquire::Busy {
            writer: self.writer.as_ref().map(|(id, _)| id.clone()),
            readers: self.readers.len(),
            writers_waiting: self.waiting.len(),
        }
    }
}

struct LeaseRow {
    session: Option<SessionId>,
    token: u64,
    /// The current term's value (a new term starts empty).
    value: String,
    /// The session of a term that ended with its (removed) session's expiry and the end of
    /// that term's lock-delay: the name stays blocked until then.
    delayed: Option<(SessionId, Instant)>,
}

impl LeaseRow {
    /// Who blocks the name at `now` for a session other than the holder: the live holder, or
    /// the holder of a term still in its lock-delay, with the time until the name is free.
    fn blocker(
        &self,
        sessions: &HashMap<SessionId, SessionRow>,
        now: Instant,
    ) -> Option<(SessionId, Duration)> {
        match &self.session {
            Some(holder) => {
                let row = sessions.get(holder)?;
                let until = if row.expires > now {
                    row.expires
                } else {
                    row.expires + row.lock_delay
                };
                (until > now).then(|| (holder.clone(), until - now))
            }
            None => {
                let (holder, until) = self.delayed.as_ref()?;
                (*until > now).then(|| (holder.clone(), *until - now))
            }
        }
    }
}

#[derive(Default)]
struct Tables {
    sessions: HashMap<SessionId, SessionRow>,
    leases: HashMap<LeaseName, LeaseRow>,
    groups: HashMap<GroupName, BTreeSet<SessionId>>,
    /// Fair-lock queues: places in arrival order, each with its patience deadline.
    queues: HashMap<LeaseName, Vec<(SessionId, Instant)>>,
    last_purge: Option<Instant>,
    /// Run-once job records, never removed (their tokens never reset).
    jobs: HashMap<LeaseName, JobRow>,
    /// Read-write lock records, never removed (their tokens never reset).
    rw: HashMap<LeaseName, RwRow>,
}

/// A run-once job's record: its last claim.
struct JobRow {
    holder: SessionId,
    token: u64,
    started: Instant,
    until: Instant,
    /// The running phase: the claim ends with its holder's session too.
    running: bool,
}

/// How often opens and keep-alives remove crashed sessions on their own.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);

impl Tables {
    fn live(&self, id: &SessionId, now: Instant) -> Option<&SessionRow> {
        self.sessions.get(id).filter(|s| s.expires > now)
    }

    /// Deletes a session, frees its leases (tokens kept) and memberships; returns the
    /// notifications to publish. The terms of a session removed after its expiry keep their
    /// names blocked until the end of their lock-delay.
    fn remove(&mut self, id: &SessionId, now: Instant, out: &mut Vec<Notification>) {
        let Some(row) = self.sessions.remove(id) else {
            return;
        };
        let until = row.expires + row.lock_delay;
        let delayed = (row.expires <= now && until > now).then(|| (id.clone(), until));
        for name in row.leases {
            if let Some(l) = self.leases.get_mut(&name) {
                if l.session.as_ref() == Some(id) {
                    l.session = None;
                    l.delayed.clone_from(&delayed);
                    out.push(Notification::Released(name));
                }
            }
        }
        for g in row.groups {
            if let Some(m) = self.groups.get_mut(&g) {
                m.remove(id);
                if m.is_empty() {
                    self.groups.remove(&g);
                }
            }
            out.push(Notification::GroupChanged(g));
        }
        for name in row.rw {
            if self.rw.get_mut(&name).is_some_and(|r| r.forget(id)) {
                out.push(Notification::Released(name));
            }
        }
    }

    /// Removes expired sessions; returns how many.
    fn purge(&mut self, now: Instant, out: &mut Vec<Notification>) -> usize {
        self.last_purge = Some(now);
        let dead: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &dead {
            self.remove(id, now, out);
        }
        dead.len()
    }

    /// Purges if the last purge is older than the purge interval.
    fn purge_due(&mut self, now: Instant, out: &mut Vec<Notification>) {
        if self.last_purge.is_none_or(|t| now >= t + PURGE_INTERVAL) {
            self.purge(now, out);
        }
    }

    /// Takes `name` for the live session `session` if free or its holder expired; the reply
    /// and whether it is a new term.
    fn take(
        &mut self,
        session: &SessionId,
        name: &LeaseName,
        now: Instant,
    ) -> Result<(Acquire, bool)> {
        let remaining = self
            .sessions
            .get(session)
            .map_or(Duration::ZERO, |s| s.expires - now);
        let lease = self.leases.entry(name.clone()).or_insert(LeaseRow {
            session: None,
            token: 0,
            value: String::new(),
            delayed: None,
        });
        if lease.session.as_ref() != Some(session) {
            if let Some((holder, remaining)) = lease.blocker(&self.sessions, now) {
                if let Ok(token) = Token::new(lease.token) {
                    let owner = Owner {
                        session: holder,
                        token,
                        remaining,
                        value: lease.value.clone(),
                    };
                    return Ok((Acquire::Held(owner), false));
                }
            }
        }
        let new_term = lease.session.as_ref() != Some(session);
        if new_term {
            lease.token += 1;
            lease.session = Some(session.clone());
            lease.value.clear();
            lease.delayed = None;
        }
        let token = Token::new(lease.token)?;
        if let Some(row) = self.sessions.get_mut(session) {
            row.leases.insert(name.clone());
        }
        let term = Term {
            name: name.clone(),
            token,
            remaining,
        };
        Ok((Acquire::Acquired(term), new_term))
    }

    /// The live holder of `name`, or the holder of a term still in its lock-delay.
    fn owner(&self, name: &LeaseName, now: Instant) -> Option<Owner> {
        let l = self.leases.get(name)?;
        let (session, remaining) = l.blocker(&self.sessions, now)?;
        Some(Owner {
            session,
            token: Token::new(l.token).ok()?,
            remaining,
            value: l.value.clone(),
        })
    }

    /// Drops the dead places of `name`'s queue (session gone or patience run out).
    fn prune_queue(&mut self, name: &LeaseName, now: Instant) {
        let sessions = &self.sessions;
        if let Some(q) = self.queues.get_mut(name) {
            q.retain(|(id, until)| {
                *until > now && sessions.get(id).is_some_and(|s| s.expires > now)
            });
            if q.is_empty() {
                self.queues.remove(name);
            }
        }
    }

    fn expired(&self, id: &SessionId) -> Error {
        Error::SessionExpired {
            session: id.clone(),
        }
    }
}

/// Leases, sessions and groups in this process's memory, keeping the whole contract:
/// tokens never reset (not on release, expiry or purge), expired sessions are never revived,
/// and releases and group changes are notified at once. Expired sessions are purged at most
/// once a minute by opens and keep-alives (and by [`LeaseBackend::purge_expired`]). A
/// session's lock-delay keeps the names of its terms blocked until its expiry plus the delay,
/// also once it was purged (the lease row keeps the end).
///
/// Its clock is injectable: the real monotonic clock by default, a
/// [`ManualClock`](crate::ManualClock) in tests.
///
/// ```
/// use simba_lease::{backends::MemoryBackend, spi::{Acquire, LeaseBackend}, LeaseName, Metadata, ManualClock};
/// use std::{sync::Arc, time::Duration};
/// let clock = Arc::new(ManualClock::new());
/// let backend = MemoryBackend::with_clock(clock.clone());
/// let s = backend.open_session(Duration::from_secs(10), &Metadata::default())?;
/// let name = LeaseName::new("job")?;
/// assert!(matches!(backend.acquire(&s.id, &name)?, Acquire::Acquired(t) if t.token.get() == 1));
/// clock.advance(Duration::from_secs(11));
/// assert!(backend.keep_alive(&s.id, Duration::from_secs(10)).unwrap_err().is_session_expired());
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub struct MemoryBackend {
    clock: Arc<dyn Clock>,
    tables: Mutex<Tables>,
    subscribers: Subscribers,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryBackend")
    }
}

impl MemoryBackend {
    /// A backend on the real monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// A backend on the given clock.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryBackend {
            clock,
            tables: Mutex::new(Tables::default()),
            subscribers: Subscribers::default(),
        }
    }

    fn publish(&self, notes: Vec<Notification>) {
        for n in &notes {
            self.subscribers.publish(n);
        }
    }
}

impl LeaseBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        self.open_session_with_delay(lease, metadata, Duration::ZERO)
    }

    fn supports_lock_delay(&self) -> bool {
        true
    }

    fn open_session_with_delay(
        &self,
        lease: Duration,
        metadata: &Metadata,
        lock_delay: Duration,
    ) -> Result<SessionGrant> {
        crate::backends::options::check_lease(lease)?;
        crate::types::limits::check_lock_delay(lock_delay)?;
        let now = self.clock.now();
        let id = SessionId::random();
        let mut notes = Vec::new();
        let mut t = self.tables.lock();
        t.purge_due(now, &mut notes);
        t.sessions.insert(
            id.clone(),
            SessionRow {
                expires: now + lease,
                lock_delay,
                metadata: metadata.clone(),
                leases: BTreeSet::new(),
                groups: BTreeSet::new(),
                rw: BTreeSet::new(),
            },
        );
        drop(t);
        self.publish(notes);
        Ok(SessionGrant {
            id,
            remaining: lease,
        })
    }

    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        crate::backends::options::check_lease(lease)?;
        let now = self.clock.now();
        let mut notes = Vec::new();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        t.purge_due(now, &mut notes);
        let reply = match t.sessions.get_mut(session).filter(|s| s.expires > now) {
            Some(row) => {
                row.expires = now + lease;
                let leases = row
                    .leases
                    .iter()
                    .filter_map(|name| {
                        let l = t.leases.get(name)?;
                        (l.session.as_ref() == Some(session)).then(|| HeldLease {
                            name: name.clone(),
                            token: Token::new(l.token).expect("tokens start at 1"),
                            remaining: lease,
                        })
                    })
                    .collect();
                Ok(KeepAlive {
                    remaining: lease,
                    leases,
                })
            }
            None => {
                t.remove(session, now, &mut notes);
                Err(t.expired(session))
            }
        };
        drop(guard);
        self.publish(notes);
        reply
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        let now = self.clock.now();
        let mut notes = Vec::new();
        self.tables.lock().remove(session, now, &mut notes);
        self.publish(notes);
        Ok(())
    }

    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        let (reply, new_term) = t.take(session, name, now)?;
        drop(t);
        if new_term {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(reply)
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        // An expired session holds nothing, so its release changes nothing.
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        let freed = match t.leases.get_mut(name) {
            Some(l) if l.session.as_ref() == Some(session) && l.token == token.get() => {
                l.session = None;
                true
            }
            _ => false,
        };
        if freed {
            if let Some(row) = t.sessions.get_mut(session) {
                row.leases.remove(name);
            }
        }
        drop(t);
        if freed {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(freed)
    }

    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        let now = self.clock.now();
        Ok(self.tables.lock().owner(name, now))
    }

    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        let row = t.sessions.get_mut(session).expect("live above");
        row.groups.insert(group.clone());
        let added = t
            .groups
            .entry(group.clone())
            .or_default()
            .insert(session.clone());
        drop(t);
        if added {
            self.subscribers
                .publish(&Notification::GroupChanged(group.clone()));
        }
        Ok(())
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        let removed = t.groups.get_mut(group).is_some_and(|m| m.remove(session));
        if t.groups.get(group).is_some_and(|m| m.is_empty()) {
            t.groups.remove(group);
        }
        if let Some(row) = t.sessions.get_mut(session) {
            row.groups.remove(group);
        }
        drop(t);
        if removed {
            self.subscribers
                .publish(&Notification::GroupChanged(group.clone()));
        }
        Ok(removed)
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        let now = self.clock.now();
        let t = self.tables.lock();
        let Some(ids) = t.groups.get(group) else {
            return Ok(Vec::new());
        };
        Ok(ids
            .iter()
            .filter_map(|id| {
                t.live(id, now).map(|row| Member {
                    session: id.clone(),
                    metadata: row.metadata.clone(),
                })
            })
            .collect())
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        crate::backends::jobs::check_at_most(at_most)?;
        let now = self.clock.now();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        let sessions = &t.sessions;
        let live = |id: &SessionId| sessions.get(id).is_some_and(|s| s.expires > now);
        let mut token = 0;
        if let Some(j) = t.jobs.get(name) {
            if j.until > now && (!j.running || live(&j.holder)) {
                return Ok(JobClaim::Busy {
                    remaining: j.until - now,
                });
            }
            token = j.token;
        }
        let token = Token::new(token + 1)?;
        t.jobs.insert(
            name.clone(),
            JobRow {
                holder: session.clone(),
                token: token.get(),
                started: now,
                until: now + at_most,
                running: true,
            },
        );
        Ok(JobClaim::Claimed {
            token,
            remaining: at_most,
        })
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        crate::backends::jobs::check_at_least(at_least)?;
        let now = self.clock.now();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        // An ended session holds nothing, so its finish changes nothing.
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        match t.jobs.get_mut(name) {
            Some(j)
                if j.running && j.holder == *session && j.token == token.get() && j.until > now =>
            {
                j.running = false;
                j.until = j.started + at_least;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn supports_queues(&self) -> bool {
        true
    }

    fn supports_values(&self) -> bool {
        true
    }

    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        crate::types::check_value(value)?;
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        let set = match t.leases.get_mut(name) {
            Some(l) if l.session.as_ref() == Some(session) && l.token == token.get() => {
                value.clone_into(&mut l.value);
                true
            }
            _ => false,
        };
        drop(t);
        if set {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(set)
    }

    /// One step: the term is never seen without its value.
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        crate::types::check_value(value)?;
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        let (reply, new_term) = t.take(session, name, now)?;
        let set = matches!(reply, Acquire::Acquired(_)) && !value.is_empty();
        if set {
            if let Some(l) = t.leases.get_mut(name) {
                value.clone_into(&mut l.value);
            }
        }
        drop(t);
        if new_term || set {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(reply)
    }

    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        crate::backends::options::check_lease(patience)?;
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        t.prune_queue(name, now);
        let until = now + patience;
        let q = t.queues.entry(name.clone()).or_default();
        let ahead = match q.iter().position(|(id, _)| id == session) {
            Some(i) => {
                q[i].1 = until;
                i
            }
            None => {
                q.push((session.clone(), until));
                q.len() - 1
            }
        };
        let holds = t
            .leases
            .get(name)
            .is_some_and(|l| l.session.as_ref() == Some(session));
        if ahead > 0 && !holds {
            let owner = t.owner(name, now);
            return Ok(Queued::Waiting { ahead, owner });
        }
        let (reply, new_term) = t.take(session, name, now)?;
        let reply = match reply {
            Acquire::Acquired(term) => {
                if let Some(q) = t.queues.get_mut(name) {
                    q.retain(|(id, _)| id != session);
                    if q.is_empty() {
                        t.queues.remove(name);
                    }
                }
                Queued::Acquired(term)
            }
            Acquire::Held(owner) => Queued::Waiting {
                ahead: 0,
                owner: Some(owner),
            },
        };
        drop(t);
        if new_term {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(reply)
    }

    fn supports_rw_locks(&self) -> bool {
        true
    }

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
        let now = self.clock.now();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        let Some(remaining) = t.live(session, now).map(|s| s.expires - now) else {
            return Err(t.expired(session));
        };
        let row = t.rw.entry(name.clone()).or_default();
        row.prune(&t.sessions, now);
        let held = match mode {
            RwMode::Read => row.readers.get(session).copied(),
            RwMode::Write => row.writer.as_ref().filter(|w| &w.0 == session).map(|w| w.1),
        };
        let token = match (held, mode) {
            (Some(token), _) => token,
            (None, RwMode::Read) => {
                if row.writer.is_some() || !row.waiting.is_empty() {
                    return Ok(row.busy());
                }
                row.token += 1;
                row.readers.insert(session.clone(), row.token);
                row.token
            }
            (None, RwMode::Write) => {
                let place = row.waiting.iter().position(|(id, _)| id == session);
                let ahead = place.unwrap_or(row.waiting.len());
                if row.writer.is_some() || !row.readers.is_empty() || ahead > 0 {
                    let until = now + patience;
                    match place {
                        Some(i) => row.waiting[i].1 = until,
                        None if patience.is_zero() => return Ok(row.busy()),
                        None => row.waiting.push((session.clone(), until)),
                    }
                    let busy = row.busy();
                    if let Some(s) = t.sessions.get_mut(session) {
                        s.rw.insert(name.clone());
                    }
                    return Ok(busy);
                }
                row.waiting.retain(|(id, _)| id != session);
                row.token += 1;
                row.writer = Some((session.clone(), row.token));
                row.token
            }
        };
        let token = Token::new(token)?;
        if let Some(s) = t.sessions.get_mut(session) {
            s.rw.insert(name.clone());
        }
        Ok(RwAcquire::Acquired(Term {
            name: name.clone(),
            token,
            remaining,
        }))
    }

    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        // An expired session holds nothing, so its release changes nothing.
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        let Some(row) = t.rw.get_mut(name) else {
            return Ok(false);
        };
        let freed = match mode {
            RwMode::Read if row.readers.get(session) == Some(&token.get()) => {
                row.readers.remove(session);
                true
            }
            RwMode::Write if row.writer == Some((session.clone(), token.get())) => {
                row.writer = None;
                true
            }
            _ => false,
        };
        drop(t);
        if freed {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(freed)
    }

    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        let mut t = self.tables.lock();
        let Some(row) = t.rw.get_mut(name) else {
            return Ok(false);
        };
        let before = row.waiting.len();
        row.waiting.retain(|(id, _)| id != session);
        let left = row.waiting.len() < before;
        drop(t);
        // Readers (or the next writer) may be waiting for this writer to go: tell them.
        if left {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(left)
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        let Some(q) = t.queues.get_mut(name) else {
            return Ok(false);
        };
        let before = q.len();
        q.retain(|(id, _)| id != session);
        let left = q.len() < before;
        if q.is_empty() {
            t.queues.remove(name);
        }
        // The next in line may be waiting for the lease to be free: tell it.
        let wake = left && t.owner(name, now).is_none();
        drop(t);
        if wake {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(left)
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        t.prune_queue(name, now);
        Ok(t.queues
            .get(name)
            .map(|q| q.iter().map(|(id, _)| id.clone()).collect())
            .unwrap_or_default())
    }

    fn list(&self) -> Result<Listing> {
        let now = self.clock.now();
        let t = self.tables.lock();
        let mut out = Listing::default();
        for (id, row) in &t.sessions {
            if row.expires > now {
                out.sessions.push(SessionInfo {
                    id: id.clone(),
                    remaining: row.expires - now,
                    metadata: row.metadata.clone(),
                });
            }
        }
        for (name, l) in &t.leases {
            let Some(s) = l.session.as_ref() else {
                continue;
            };
            if let (Some(row), Ok(token)) = (t.live(s, now), Token::new(l.token)) {
                out.leases.push(LeaseInfo {
                    name: name.clone(),
                    owner: Owner {
                        session: s.clone(),
                        token,
                        remaining: row.expires - now,
                        value: l.value.clone(),
                    },
                });
            }
        }
        for (name, ids) in &t.groups {
            let members: Vec<Member> = ids
                .iter()
                .filter_map(|id| {
                    t.live(id, now).map(|row| Member {
                        session: id.clone(),
                        metadata: row.metadata.clone(),
                    })
                })
                .collect();
            if !members.is_empty() {
                out.groups.push(GroupInfo {
                    name: name.clone(),
                    members,
                });
            }
        }
        drop(t);
        out.sessions.sort_by(|a, b| a.id.cmp(&b.id));
        out.leases.sort_by(|a, b| a.name.cmp(&b.name));
        out.groups.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn purge_expired(&self) -> Result<usize> {
        let now = self.clock.now();
        let mut notes = Vec::new();
        let purged = self.tables.lock().purge(now, &mut notes);
        self.publish(notes);
        Ok(purged)
    }

    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        Ok(Some(self.subscribers.add(sink)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    /// The window boundaries on a manual clock: a claim ends exactly at `at_most`, a
    /// finished one exactly at started + `at_least`, a running one with its session.
    #[test]
    fn job_claims_end_at_their_bounds() {
        let clock = Arc::new(ManualClock::new());
        let b = MemoryBackend::with_clock(clock.clone());
        let (m, s) = (Metadata::default(), Duration::from_secs);
        let a = b.open_session(s(100), &m).unwrap().id;
        let c = b.open_session(s(100), &m).unwrap().id;
        let n = LeaseName::new("job").unwrap();
        let claimed = |r: JobClaim| match r {
            JobClaim::Claimed { token, remaining } => (token.get(), remaining),
            other => panic!("{other:?}"),
        };
        let left = |r: JobClaim| match r {
            JobClaim::Busy { remaining } => remaining,
            other => panic!("{other:?}"),
        };
        assert_eq!(claimed(b.claim_job(&a, &n, s(10)).unwrap()), (1, s(10)));
        clock.advance(s(4));
        assert_eq!(left(b.claim_job(&c, &n, s(10)).unwrap()), s(6));
        clock.advance(s(6));
        // at_most passed: free, and the late finish changes nothing.
        let t2 = claimed(b.claim_job(&c, &n, s(10)).unwrap()).0;
        assert_eq!(t2, 2);
        let one = Token::new(1).unwrap();
        assert!(!b.finish_job(&a, &n, one, s(0)).unwrap());
        clock.advance(s(1));
        assert!(b.finish_job(&c, &n, Token::new(2).unwrap(), s(3)).unwrap());
        assert_eq!(left(b.claim_job(&a, &n, s(10)).unwrap()), s(2));
        b.close_session(&c).unwrap();
        assert_eq!(left(b.claim_job(&a, &n, s(10)).unwrap()), s(2));
        clock.advance(s(2));
        assert_eq!(claimed(b.claim_job(&a, &n, s(10)).unwrap()).0, 3);
        // A running claim ends with its session.
        b.close_session(&a).unwrap();
        let d = b.open_session(s(100), &m).unwrap().id;
        assert_eq!(claimed(b.claim_job(&d, &n, s(10)).unwrap()).0, 4);
        // A finish whose at_least already passed frees the name at once.
        clock.advance(s(5));
        assert!(b.finish_job(&d, &n, Token::new(4).unwrap(), s(1)).unwrap());
        assert_eq!(claimed(b.claim_job(&d, &n, s(10)).unwrap()).0, 5);
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            crate::Config::MAX_LEASE * 2,
        ] {
            assert!(matches!(
                b.claim_job(&d, &n, bad),
                Err(Error::InvalidConfig { .. })
            ));
        }
    }

    /// The lock-delay's bounds on a manual clock: the name is blocked from the holder's
    /// expiry until exactly expiry + delay, also after the holder's row was purged; a release
    /// and a close of the live session free it at once.
    #[test]
    fn a_lock_delay_blocks_until_expiry_plus_delay() {
        let clock = Arc::new(ManualClock::new());
        let b = MemoryBackend::with_clock(clock.clone());
        let (m, s) = (Metadata::default(), Duration::from_secs);
        let n = LeaseName::new("delayed").unwrap();
        let other = b.open_session(s(1000), &m).unwrap().id;
        let held_by = |r: Acquire| match r {
            Acquire::Held(o) => (o.session, o.token.get(), o.remaining),
            other => panic!("{other:?}"),
        };
        for purged in [false, true] {
            let a = b.open_session_with_delay(s(10), &m, s(5)).unwrap().id;
            let Acquire::Acquired(t) = b.acquire(&a, &n).unwrap() else {
                panic!("free");
            };
            clock.advance(s(10));
            if purged {
                assert_eq!(b.purge_expired().unwrap(), 1);
                assert!(!b.tables.lock().sessions.contains_key(&a));
            }
            let expect = (a.clone(), t.token.get(), s(5));
            assert_eq!(held_by(b.acquire(&other, &n).unwrap()), expect);
            let o = b.owner(&n).unwrap().unwrap();
            assert_eq!((o.session, o.token.get(), o.remaining), expect);
            // Closing the expired session changes nothing.
            b.close_session(&a).unwrap();
            clock.advance(s(4));
            assert_eq!(held_by(b.acquire(&other, &n).unwrap()).2, s(1));
            clock.advance(s(1));
            assert_eq!(b.owner(&n).unwrap(), None);
            let Acquire::Acquired(next) = b.acquire(&other, &n).unwrap() else {
                panic!("free after the delay");
            };
            assert!(next.token > t.token);
            assert!(b.release(&other, &n, next.token).unwrap());
        }
        // A release and a close of the live session free at once.
        let a = b.open_session_with_delay(s(10), &m, s(5)).unwrap().id;
        let Acquire::Acquired(t) = b.acquire(&a, &n).unwrap() else {
            panic!("free");
        };
        assert!(b.release(&a, &n, t.token).unwrap());
        assert!(
            matches!(b.acquire(&other, &n).unwrap(), Acquire::Acquired(t) if b.release(&other, &n, t.token).unwrap())
        );
        assert!(matches!(b.acquire(&a, &n).unwrap(), Acquire::Acquired(_)));
        b.close_session(&a).unwrap();
        assert!(matches!(
            b.acquire(&other, &n).unwrap(),
            Acquire::Acquired(_)
        ));
        assert!(matches!(
            b.open_session_with_delay(s(10), &m, crate::Config::MAX_LOCK_DELAY * 2),
            Err(Error::InvalidConfig { .. })
        ));
    }

    #[test]
    fn opens_purge_crashed_sessions_at_most_once_per_interval() {
        let clock = Arc::new(ManualClock::new());
        let b = MemoryBackend::with_clock(clock.clone());
        let m = Metadata::default();
        let g = GroupName::new("g").unwrap();
        let crashed = b.open_session(Duration::from_secs(1), &m).unwrap().id;
        b.join(&crashed, &g).unwrap();
        clock.advance(Duration::from_secs(2));
        b.open_session(Duration::from_secs(100), &m).unwrap();
        assert!(
            b.tables.lock().sessions.contains_key(&crashed),
            "purged too early"
        );
        clock.advance(PURGE_INTERVAL);
        b.open_session(Duration::from_secs(100), &m).unwrap();
        assert!(!b.tables.lock().sessions.contains_key(&crashed));
        assert!(!b.tables.lock().groups.contains_key(&g));
    }
}
