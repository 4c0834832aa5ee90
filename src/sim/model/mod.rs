//! The model backend: the contract of [`LeaseBackend`](crate::spi::LeaseBackend) on the
//! simulation's virtual clock (sessions, fenced leases with values, fair-lock queues, run-once
//! job records, read-write locks ([`rw`](self::rw)), groups), with the premises that break it
//! on request, and the logs the checker reads. Behind the SPI on a clock it is
//! [`ModelBackend`], which passes the TCK as every backend does (`tests/sim_model.rs`): the
//! model the simulation judges the engine against keeps the contract.
//!
//! It is a model of its own rather than [`MemoryBackend`](crate::backends::MemoryBackend) on
//! a virtual [`Clock`](crate::Clock) for three reasons: session ids must come from the seed
//! (the memory backend draws them from the operating system), the `token_reset` premise needs
//! to roll the whole state back to an older snapshot (an asynchronous replica), and the
//! checker needs the log of every grant the backend made.

mod backend;
mod jobs;
mod queues;
mod rw;

pub use backend::ModelBackend;
pub use rw::{RwDelayEntry, RwGrant};

use crate::error::{Error, Result};
use crate::spi::{Acquire, HeldLease, KeepAlive};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A session id from a small number (32 hex digits, as on SQL and Redis).
pub fn session_id(n: u64) -> SessionId {
    SessionId::parse(&format!("{n:032x}")).expect("32 hex digits")
}

/// The small number of a session id made by [`session_id`].
pub fn session_no(id: &SessionId) -> u64 {
    u64::from_str_radix(id.as_str(), 16).unwrap_or(u64::MAX)
}

#[derive(Clone, Debug)]
struct SessionRow {
    expires: u64,
    metadata: Metadata,
    leases: BTreeSet<LeaseName>,
    /// Its lock-delay (ns): a term that ends with its expiry keeps its name blocked so long.
    lock_delay: u64,
}

#[derive(Clone, Debug)]
struct LeaseRow {
    session: Option<SessionId>,
    token: u64,
    /// The current term's value (a new term starts without one).
    value: String,
    /// The session of a term that ended with its (removed) session's expiry and the end of
    /// that term's lock-delay (backend time): the name stays blocked until then.
    delayed: Option<(SessionId, u64)>,
}

/// A run-once job's record: its last claim (backend times).
#[derive(Clone, Debug)]
struct JobRow {
    holder: SessionId,
    token: u64,
    started: u64,
    until: u64,
    /// The running phase: the claim ends with its holder's session too.
    running: bool,
}

/// The backend's tables (cloned whole for a replica snapshot).
#[derive(Clone, Debug, Default)]
struct Tables {
    sessions: BTreeMap<SessionId, SessionRow>,
    leases: BTreeMap<LeaseName, LeaseRow>,
    groups: BTreeMap<GroupName, BTreeSet<SessionId>>,
    /// Fair-lock queues: places in arrival order, each with its patience's end.
    queues: BTreeMap<LeaseName, Vec<(SessionId, u64)>>,
    jobs: BTreeMap<LeaseName, JobRow>,
    /// Read-write locks.
    rw: BTreeMap<LeaseName, rw::RwRow>,
}

/// What happened to a fair lock's queue (for the checker's queue-order rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueStep {
    /// A session placed itself (or renewed its place) until the backend time given.
    Place(u64),
    /// A session left the queue.
    Leave,
    /// A session took the lease through the queue; `live` are the sessions live then.
    Take {
        /// A new term (false: the holder asked again).
        new_term: bool,
        /// Every live session at that instant.
        live: Vec<SessionId>,
    },
}

/// One step of a fair lock's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueEntry {
    /// Backend time (ns).
    pub at: u64,
    /// The lock.
    pub name: LeaseName,
    /// The session concerned.
    pub session: SessionId,
    /// What it did.
    pub step: QueueStep,
}

/// One step of a run-once job's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEntry {
    /// Backend time (ns).
    pub at: u64,
    /// True time (ns).
    pub true_at: u64,
    /// The job.
    pub name: LeaseName,
    /// The session concerned.
    pub session: SessionId,
    /// The claim's token.
    pub token: Token,
    /// A claim for at most the ns given (`false`), or its finish keeping the name until the
    /// claim's start plus the ns given (`true`).
    pub finish: bool,
    /// `at_most` of a claim, `at_least` of a finish (ns).
    pub window: u64,
}

/// One step of a lease name for the lock-delay rule (backend times).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelayStep {
    /// A term ended with its session's expiry at `at`; its session's lock-delay (ns).
    Expired {
        /// The lock-delay of the session (ns).
        delay: u64,
    },
    /// A new term began at `at`.
    Granted,
}

/// One step of a lease name for the lock-delay rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayEntry {
    /// Backend time (ns): when the term ended, or began.
    pub at: u64,
    /// The lease.
    pub name: LeaseName,
    /// The session of the term.
    pub session: SessionId,
    /// The term's token.
    pub token: Token,
    /// What happened.
    pub step: DelayStep,
}

/// One lease grant the backend made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// True time of the grant (ns).
    pub at: u64,
    /// The lease.
    pub name: LeaseName,
    /// The session it went to.
    pub session: SessionId,
    /// The token.
    pub token: Token,
    /// Whether it began a new term (false: the holder asked again).
    pub new_term: bool,
}

/// Sessions and fenced leases on a virtual clock.
#[derive(Debug)]
pub struct Model {
    tables: Tables,
    replica: Option<Tables>,
    next_session: u64,
    offset: u64,
    /// Every grant, in true-time order.
    pub grants: Vec<Grant>,
    /// Sessions known to have ended (closed, or found expired): the checker's knowledge,
    /// which a failover does not roll back.
    ended: BTreeSet<SessionId>,
    /// Successful keep-alives or acquires of a session after it ended: (true time, session).
    pub revivals: Vec<(u64, SessionId)>,
    /// Every fair-lock queue step, in true-time order.
    pub queue_log: Vec<QueueEntry>,
    /// Every job claim and finish, in true-time order.
    pub job_log: Vec<JobEntry>,
    /// Lease terms ended by their session's expiry and new lease terms, as the backend
    /// learnt of them (each expiry before any later grant of its name).
    pub delay_log: Vec<DelayEntry>,
    /// The terms whose expiry is in `delay_log`.
    delay_logged: BTreeSet<(LeaseName, Token)>,
    /// Every read-write lock grant, in true-time order.
    pub rw_log: Vec<RwGrant>,
    /// Read-write terms ended by their session's expiry and new read-write terms, as the
    /// backend learnt of them (each expiry before any later grant of its name).
    pub rw_delay_log: Vec<RwDelayEntry>,
    /// Read-write attempts refused because of a term in its lock-delay.
    pub rw_delay_refusals: u64,
    /// When each term ended (backend time), with its session: its release, its session's
    /// end or expiry, a failover. The checker's knowledge, which a failover does not roll back.
    term_ends: BTreeMap<(LeaseName, Token), (SessionId, u64)>,
    /// Releases answered so far (premise `false_misses` lies to every third).
    releases: u64,
    /// Premise `stale_values`: a new term keeps the previous term's value.
    pub stale_values: bool,
    /// Premise `unfair_queue`: a fair lock serves its newest waiter first.
    pub unfair_queue: bool,
    /// Premise `lost_windows`: a finished job frees its name at once (ignoring `at_least`).
    pub lost_windows: bool,
    /// Premise `false_misses`: every third release of a held term answers "not held" (and
    /// frees nothing).
    pub false_misses: bool,
    /// Premise `shared_writers`: a write is granted while readers hold the name.
    pub shared_writers: bool,
    /// Premise `lost_delays`: a name is free at once after its holder's expiry (the
    /// lock-delay is ignored).
    pub lost_delays: bool,
    /// Premise `lost_rw_delays`: a read-write term that ended with its session's expiry
    /// blocks nothing (the lock-delay is ignored).
    pub lost_rw_delays: bool,
}

impl Model {
    /// An empty backend whose clock equals true time.
    pub fn new() -> Self {
        Model {
            tables: Tables::default(),
            replica: None,
            next_session: 1,
            offset: 0,
            grants: Vec::new(),
            ended: BTreeSet::new(),
            revivals: Vec::new(),
            queue_log: Vec::new(),
            job_log: Vec::new(),
            delay_log: Vec::new(),
            delay_logged: BTreeSet::new(),
            rw_log: Vec::new(),
            rw_delay_log: Vec::new(),
            rw_delay_refusals: 0,
            term_ends: BTreeMap::new(),
            releases: 0,
            stale_values: false,
            unfair_queue: false,
            lost_windows: false,
            false_misses: false,
            shared_writers: false,
            lost_delays: false,
            lost_rw_delays: false,
        }
    }

    /// The backend clock at true time `t`.
    pub fn clock(&self, t: u64) -> u64 {
        t + self.offset
    }

    /// Premise `clock_step`: the backend clock jumps forward by `by` ns.
    pub fn step_clock(&mut self, by: u64) {
        self.offset += by;
    }

    /// Takes the snapshot an asynchronous replica would have.
    pub fn snapshot(&mut self) {
        self.replica = Some(self.tables.clone());
    }

    /// Premise `token_reset`: fails over to the replica, losing every write since the
    /// snapshot. Returns the names whose token went back.
    pub fn fail_over(&mut self, t: u64) -> Vec<LeaseName> {
        let Some(old) = self.replica.take() else {
            return Vec::new();
        };
        let now = self.clock(t);
        let mut back: Vec<LeaseName> = self
            .tables
            .leases
            .iter()
            .filter(|(n, l)| old.leases.get(*n).map_or(0, |o| o.token) < l.token)
            .map(|(n, _)| n.clone())
            .collect();
        // The terms the replica never saw end with the failover.
        for name in &back {
            let l = &self.tables.leases[name];
            if let (Some(s), Ok(token)) = (l.session.clone(), Token::new(l.token)) {
                self.end_term(name, token, &s, now);
            }
        }
        back.extend(self.fail_over_rw(&old, now));
        self.tables = old;
        back
    }

    /// Notes that `session`'s term `name`/`token` ended at backend time `at` (the first end
    /// counts).
    fn end_term(&mut self, name: &LeaseName, token: Token, session: &SessionId, at: u64) {
        self.term_ends
            .entry((name.clone(), token))
            .or_insert_with(|| (session.clone(), at));
    }

    /// When `session`'s term `name`/`token` ended on the backend (backend time), if it did.
    pub fn term_end(&self, name: &LeaseName, token: Token, session: &SessionId) -> Option<u64> {
        self.term_ends
            .get(&(name.clone(), token))
            .filter(|(s, _)| s == session)
            .map(|(_, at)| *at)
    }

    /// Whether `id` is live at true time `t`.
    pub fn is_live(&self, t: u64, id: &SessionId) -> bool {
        self.live(id, self.clock(t)).is_some()
    }

    fn live(&self, id: &SessionId, now: u64) -> Option<&SessionRow> {
        self.tables.sessions.get(id).filter(|s| s.expires > now)
    }

    fn expired(id: &SessionId) -> Error {
        Error::SessionExpired {
            session: id.clone(),
        }
    }

    /// Removes a session at backend time `now`; returns the names it freed.
    fn remove(&mut self, id: &SessionId, now: u64) -> Vec<LeaseName> {
        self.ended.insert(id.clone());
        let Some(row) = self.tables.sessions.remove(id) else {
            return Vec::new();
        };
        for members in self.tables.groups.values_mut() {
            members.remove(id);
        }
        let mut freed = Vec::new();
        let mut ended = Vec::new();
        // Removed after its expiry: its terms keep their names blocked for its lock-delay.
        let expired = row.expires <= now;
        let delayed =
            (expired && row.lock_delay > 0).then(|| (id.clone(), row.expires + row.lock_delay));
        for name in row.leases {
            if let Some(l) = self.tables.leases.get_mut(&name) {
                if l.session.as_ref() == Some(id) {
                    l.session = None;
                    l.delayed.clone_from(&delayed);
                    ended.push((name.clone(), l.token));
                    freed.push(name);
                }
            }
        }
        for (name, token) in ended {
            if let Ok(token) = Token::new(token) {
                self.end_term(&name, token, id, now.min(row.expires));
                if expired {
                    self.log_expiry(&name, token, id, row.expires, row.lock_delay);
                }
            }
        }
        let expiry = expired.then_some((row.expires, row.lock_delay));
        freed.extend(self.remove_rw(id, now, expiry));
        freed
    }

    /// Opens a session for `lease` at true time `t`.
    pub fn open_session(&mut self, t: u64, lease: Duration) -> (SessionId, Duration) {
        self.open_with_delay(t, lease, Duration::ZERO)
    }

    /// Opens a session for `lease` with `lock_delay` at true time `t`, as
    /// `LeaseBackend::open`.
    pub fn open_with_delay(
        &mut self,
        t: u64,
        lease: Duration,
        lock_delay: Duration,
    ) -> (SessionId, Duration) {
        let id = session_id(self.next_session);
        self.next_session += 1;
        let expires = self.clock(t) + lease.as_nanos() as u64;
        self.tables.sessions.insert(
            id.clone(),
            SessionRow {
                expires,
                metadata: Metadata::default(),
                leases: BTreeSet::new(),
                lock_delay: lock_delay.as_nanos() as u64,
            },
        );
        (id, lease)
    }

    /// Keeps `id` alive; on an expired session, removes it (returning the names freed).
    pub fn keep_alive(
        &mut self,
        t: u64,
        id: &SessionId,
        lease: Duration,
    ) -> (Result<KeepAlive>, Vec<LeaseName>) {
        let now = self.clock(t);
        let Some(row) = self.tables.sessions.get_mut(id).filter(|s| s.expires > now) else {
            return (Err(Self::expired(id)), self.remove(id, now));
        };
        row.expires = now + lease.as_nanos() as u64;
        if self.ended.contains(id) {
            self.revivals.push((t, id.clone()));
        }
        let leases = row
            .leases
            .iter()
            .filter_map(|name| {
                let l = self.tables.leases.get(name)?;
                (l.session.as_ref() == Some(id)).then(|| HeldLease {
                    name: name.clone(),
                    token: Token::new(l.token).expect("tokens start at 1"),
                    remaining: lease,
                })
            })
            .collect();
        let rw = self.rw_held_by(id);
        (
            Ok(KeepAlive {
                remaining: lease,
                leases,
                rw,
            }),
            Vec::new(),
        )
    }

    /// Closes `id` at true time `t`; returns the names freed.
    pub fn close_session(&mut self, t: u64, id: &SessionId) -> Vec<LeaseName> {
        self.remove(id, self.clock(t))
    }

    /// Acquires `name` for `id` at true time `t`.
    pub fn acquire(&mut self, t: u64, id: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.acquire_with_value(t, id, name, "")
    }

    /// Acquires `name` for `id` at true time `t`; the term held then gets `value` unless it
    /// is empty (in one step, as `LeaseBackend::acquire_with_value` may).
    pub fn acquire_with_value(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        self.acquire_term(t, id, name, value).map(|(a, _)| a)
    }

    /// [`Model::acquire_with_value`], and whether the grant began a new term (then observers
    /// are notified).
    pub fn acquire_term(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<(Acquire, bool)> {
        let remaining = self.check_live(t, id)?;
        self.take(t, id, name, value, remaining)
    }

    /// Fails unless `id` is live at true time `t`; the time it has left.
    fn check_live(&mut self, t: u64, id: &SessionId) -> Result<Duration> {
        let now = self.clock(t);
        let Some(me) = self.live(id, now) else {
            self.ended.insert(id.clone());
            return Err(Self::expired(id));
        };
        let remaining = Duration::from_nanos(me.expires - now);
        if self.ended.contains(id) {
            self.revivals.push((t, id.clone()));
        }
        Ok(remaining)
    }

    /// Takes `name` for the live session `id` at true time `t` if free or its holder
    /// expired; the reply and whether it began a new term.
    fn take(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        value: &str,
        remaining: Duration,
    ) -> Result<(Acquire, bool)> {
        let now = self.clock(t);
        let row = self.tables.leases.get(name).cloned();
        let holder = row.as_ref().and_then(|l| l.session.clone());
        if let (Some(l), Some(holder)) = (&row, holder.clone().filter(|h| h != id)) {
            let token = Token::new(l.token).expect("held leases have a token");
            let session = self.tables.sessions.get(&holder);
            let (expires, delay) = session.map_or((now, 0), |r| (r.expires, r.lock_delay));
            if expires <= now {
                // The holder expired: its term ended then, and its lock-delay began.
                self.log_expiry(name, token, &holder, expires, delay);
            }
        }
        if let Some((blocker, until)) = self.blocker(name, now).filter(|(b, _)| b != id) {
            let l = &self.tables.leases[name];
            let owner = Owner {
                session: blocker,
                token: Token::new(l.token).expect("held leases have a token"),
                remaining: Duration::from_nanos(until - now),
                value: l.value.clone(),
            };
            return Ok((Acquire::Held(owner), false));
        }
        if let (Some(l), Some(holder)) = (&row, holder.filter(|h| h != id)) {
            let token = Token::new(l.token).expect("held leases have a token");
            let expired = self.tables.sessions.get(&holder).map_or(now, |r| r.expires);
            self.end_term(name, token, &holder, expired.min(now));
        }
        let lease = self.tables.leases.entry(name.clone()).or_insert(LeaseRow {
            session: None,
            token: 0,
            value: String::new(),
            delayed: None,
        });
        let new_term = lease.session.as_ref() != Some(id);
        if new_term {
            lease.token += 1;
            lease.session = Some(id.clone());
            lease.delayed = None;
            if !self.stale_values {
                lease.value.clear();
            }
            let token = Token::new(lease.token).expect("token advanced above zero");
            self.delay_log.push(DelayEntry {
                at: now,
                name: name.clone(),
                session: id.clone(),
                token,
                step: DelayStep::Granted,
            });
        }
        if !value.is_empty() {
            value.clone_into(&mut lease.value);
        }
        let token = Token::new(lease.token).expect("token advanced above zero");
        if let Some(row) = self.tables.sessions.get_mut(id) {
            row.leases.insert(name.clone());
        }
        self.grants.push(Grant {
            at: t,
            name: name.clone(),
            session: id.clone(),
            token,
            new_term,
        });
        Ok((
            Acquire::Acquired(Term {
                name: name.clone(),
                token,
                remaining,
            }),
            new_term,
        ))
    }

    /// Releases `name` at true time `t` if the live session `id` holds it with `token` (an
    /// expired session holds nothing, so its release changes nothing).
    pub fn release(&mut self, t: u64, id: &SessionId, name: &LeaseName, token: Token) -> bool {
        let now = self.clock(t);
        let holds = self
            .tables
            .leases
            .get(name)
            .is_some_and(|l| l.session.as_ref() == Some(id) && l.token == token.get());
        let Some(expires) = self.tables.sessions.get(id).map(|r| r.expires) else {
            return false;
        };
        if expires <= now {
            if holds {
                self.end_term(name, token, id, expires);
            }
            return false;
        }
        if !holds {
            return false;
        }
        self.releases += 1;
        if self.false_misses && self.releases.is_multiple_of(3) {
            return false;
        }
        if let Some(l) = self.tables.leases.get_mut(name) {
            l.session = None;
        }
        if let Some(row) = self.tables.sessions.get_mut(id) {
            row.leases.remove(name);
        }
        self.end_term(name, token, id, now);
        true
    }

    /// Sets the value of `id`'s term `name`/`token` at true time `t`; whether it was set.
    pub fn set_value(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> bool {
        if self.live(id, self.clock(t)).is_none() {
            return false;
        }
        match self.tables.leases.get_mut(name) {
            Some(l) if l.session.as_ref() == Some(id) && l.token == token.get() => {
                value.clone_into(&mut l.value);
                true
            }
            _ => false,
        }
    }

    /// The live holder of `name` at true time `t`, or the holder of a term still in its
    /// lock-delay (as `MemoryBackend::owner`).
    pub fn owner(&self, t: u64, name: &LeaseName) -> Option<Owner> {
        let now = self.clock(t);
        let l = self.tables.leases.get(name)?;
        let (session, until) = self.blocker(name, now)?;
        Some(Owner {
            session,
            token: Token::new(l.token).ok()?,
            remaining: Duration::from_nanos(until - now),
            value: l.value.clone(),
        })
    }

    /// Who keeps `name` from another session at backend time `now`, and until when: its
    /// live holder, or the holder of a term that ended with its session's expiry, until
    /// that expiry plus the session's lock-delay (premise `lost_delays`: not at all).
    fn blocker(&self, name: &LeaseName, now: u64) -> Option<(SessionId, u64)> {
        let l = self.tables.leases.get(name)?;
        let (holder, until) = match &l.session {
            Some(h) => {
                let r = self.tables.sessions.get(h)?;
                match r.expires > now {
                    true => (h.clone(), r.expires),
                    false if self.lost_delays => return None,
                    false => (h.clone(), r.expires + r.lock_delay),
                }
            }
            None if self.lost_delays => return None,
            None => l.delayed.clone()?,
        };
        (until > now).then_some((holder, until))
    }

    /// Notes (once) that `session`'s term `name`/`token` ended with its expiry at backend
    /// time `at`, its lock-delay `delay` (ns) then beginning.
    fn log_expiry(
        &mut self,
        name: &LeaseName,
        token: Token,
        session: &SessionId,
        at: u64,
        delay: u64,
    ) {
        if self.delay_logged.insert((name.clone(), token)) {
            self.delay_log.push(DelayEntry {
                at,
                name: name.clone(),
                session: session.clone(),
                token,
                step: DelayStep::Expired { delay },
            });
        }
    }
}

impl Model {
    /// Adds `id` to `group`; fails once the session expired.
    pub fn join(&mut self, t: u64, id: &SessionId, group: &GroupName) -> Result<()> {
        self.check_live(t, id)?;
        let members = self.tables.groups.entry(group.clone()).or_default();
        members.insert(id.clone());
        Ok(())
    }

    /// The live members of `group` at true time `t`.
    pub fn members(&self, t: u64, group: &GroupName) -> Vec<Member> {
        let now = self.clock(t);
        let Some(ids) = self.tables.groups.get(group) else {
            return Vec::new();
        };
        ids.iter()
            .filter(|id| self.live(id, now).is_some())
            .map(|id| Member {
                session: id.clone(),
                metadata: (self.tables.sessions.get(id))
                    .map_or_else(Metadata::default, |s| s.metadata.clone()),
            })
            .collect()
    }

    /// Takes `id` out of `group`; whether it was a member (an expired session is none).
    pub fn leave(&mut self, t: u64, id: &SessionId, group: &GroupName) -> Result<bool> {
        let live = self.live(id, self.clock(t)).is_some();
        let Some(members) = self.tables.groups.get_mut(group) else {
            return Ok(false);
        };
        let was = members.remove(id) && live;
        if members.is_empty() {
            self.tables.groups.remove(group);
        }
        Ok(was)
    }

    /// Sets the metadata of session `id`.
    pub fn set_metadata(&mut self, id: &SessionId, metadata: &Metadata) {
        if let Some(s) = self.tables.sessions.get_mut(id) {
            s.metadata = metadata.clone();
        }
    }

    /// Removes every session expired at true time `t` (their terms keep their lock-delays);
    /// how many.
    pub fn purge_expired(&mut self, t: u64) -> usize {
        let now = self.clock(t);
        let expired: Vec<SessionId> = (self.tables.sessions.iter())
            .filter(|(_, s)| s.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.remove(id, now);
        }
        expired.len()
    }
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}
