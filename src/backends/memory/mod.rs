//! The in-memory backend: the embedded default and a supported test double.

use crate::error::{Error, Result};
use crate::spi::{
    Acquire, GroupInfo, HeldLease, HeldRw, JobClaim, KeepAlive, LeaseBackend, LeaseInfo, Listing,
    Notification, NotifySink, Queued, RwAcquire, RwDelayed, RwMode, RwState, SessionGrant,
    SessionInfo, SessionSpec, Subscribers, Subscription,
};
use crate::types::{Clock, SystemClock};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod jobs;
mod queues;
mod rw;

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
    /// Terms of removed expired sessions in their lock-delay, each with the delay's end.
    delayed: Vec<(SessionId, RwMode, u64, Instant)>,
}

impl RwRow {
    /// The term `session` holds of this lock `name`, if any.
    fn held_by(&self, name: &LeaseName, session: &SessionId) -> Option<HeldRw> {
        let (mode, token) = match &self.writer {
            Some((id, token)) if id == session => (RwMode::Write, *token),
            _ => (RwMode::Read, *self.readers.get(session)?),
        };
        let token = Token::new(token).expect("tokens start at 1");
        let name = name.clone();
        Some(HeldRw { name, mode, token })
    }

    /// Drops holders and waiters whose session ended (or whose patience ran out); a holder
    /// whose session expired with a lock-delay still running moves to `delayed`.
    fn prune(&mut self, sessions: &HashMap<SessionId, SessionRow>, now: Instant) {
        let live = |id: &SessionId| sessions.get(id).is_some_and(|s| s.expires > now);
        let until = |id: &SessionId| sessions.get(id).map(|s| s.expires + s.lock_delay);
        if let Some((id, token)) = self.writer.take_if(|(id, _)| !live(id)) {
            if let Some(until) = until(&id) {
                self.delayed.push((id, RwMode::Write, token, until));
            }
        }
        let gone: Vec<SessionId> = self
            .readers
            .keys()
            .filter(|id| !live(id))
            .cloned()
            .collect();
        for id in gone {
            if let (Some(token), Some(until)) = (self.readers.remove(&id), until(&id)) {
                self.delayed.push((id, RwMode::Read, token, until));
            }
        }
        self.delayed.retain(|d| d.3 > now);
        self.waiting.retain(|(id, until)| *until > now && live(id));
    }

    /// Forgets `id` as holder and waiter; whether it was either. With `delay_until` (its
    /// session expired and its lock-delay runs until then) its terms move to `delayed`.
    fn forget(&mut self, id: &SessionId, delay_until: Option<Instant>) -> bool {
        let mut hit = false;
        if let Some((_, token)) = self.writer.take_if(|(w, _)| w == id) {
            hit = true;
            if let Some(until) = delay_until {
                self.delayed.push((id.clone(), RwMode::Write, token, until));
            }
        }
        if let Some(token) = self.readers.remove(id) {
            hit = true;
            if let Some(until) = delay_until {
                self.delayed.push((id.clone(), RwMode::Read, token, until));
            }
        }
        let before = self.waiting.len();
        self.waiting.retain(|(w, _)| w != id);
        hit || self.waiting.len() < before
    }

    /// The delayed write term, if one blocks every new term (after a prune).
    fn delayed_writer(&self) -> Option<&SessionId> {
        self.delayed
            .iter()
            .find(|d| d.1 == RwMode::Write)
            .map(|d| &d.0)
    }

    fn busy(&self) -> RwAcquire {
        let delayed_readers = self.delayed.iter().filter(|d| d.1 == RwMode::Read).count();
        RwAcquire::Busy {
            writer: self
                .writer
                .as_ref()
                .map(|(id, _)| id)
                .or(self.delayed_writer())
                .cloned(),
            readers: self.readers.len() + delayed_readers,
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
        let delay_until = delayed.map(|(_, until)| until);
        for name in row.rw {
            if self
                .rw
                .get_mut(&name)
                .is_some_and(|r| r.forget(id, delay_until))
            {
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

    fn supports_lock_delay(&self) -> bool {
        true
    }

    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
        let SessionSpec {
            lease,
            metadata,
            lock_delay,
        } = *spec;
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
                let rw = row
                    .rw
                    .iter()
                    .filter_map(|name| t.rw.get(name)?.held_by(name, session));
                Ok(KeepAlive {
                    remaining: lease,
                    leases,
                    rw: rw.collect(),
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
        self.job_claim(session, name, at_most)
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        self.job_finish(session, name, token, at_least)
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
        self.value_set(session, name, token, value)
    }

    /// One step: the term is never seen without its value.
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        self.value_acquire(session, name, value)
    }

    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        self.queued_acquire(session, name, patience)
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
        self.rw_acquire(session, name, mode, patience)
    }

    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        self.rw_release(session, name, mode, token)
    }

    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.rw_leave_queue(session, name)
    }

    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        self.rw_read_state(name)
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.queue_leave(session, name)
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.queue_list(name)
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
mod tests;
