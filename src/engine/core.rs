//! The session's decision logic, free of I/O and threads.
//!
//! [`Core`] is driven by `(now, input)` calls: ticks, backend replies and notifications. It
//! queues [`Output`]s (requests to send, events to emit) and tells the driver when to wake up
//! next. It reads no clock of its own, so tests and the simulation run it on virtual time.

use super::event::{Event, LossReason};
use crate::error::{Error, Result};
use crate::spi::{Acquire, KeepAlive, Notification};
use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Term, Token};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Identifies a handle (election, lock guard, observer, group) within a session.
pub type HandleId = u64;

/// Who in this process holds a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// An election candidate.
    Election(HandleId),
    /// A lock guard.
    Lock(HandleId),
}

impl Holder {
    fn handle(self) -> HandleId {
        match self {
            Holder::Election(h) | Holder::Lock(h) => h,
        }
    }
}

/// Backend work the driver runs off the keep-alive thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Task {
    /// A candidate's acquire attempt.
    Attempt(HandleId, LeaseName),
    /// An observer's read of the owner.
    Owner(HandleId, LeaseName),
    /// A group watcher's read of the members.
    Members(HandleId, GroupName),
}

/// What the core asks the driver to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Send a keep-alive now (the core recorded the send instant).
    KeepAlive,
    /// Run a task.
    Run(Task),
    /// Release a lease on the backend.
    Release(LeaseName, Token),
    /// The session was lost locally: close it on the backend, best effort.
    CloseBackend,
    /// Deliver an event to the session's listeners and, if given, to one handle's.
    Emit(Option<HandleId>, Event),
}

/// The session's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Kept alive.
    Valid,
    /// Keep-alives failing; still inside the local deadline.
    Jeopardy,
    /// Expired or lost at the local deadline (terminal).
    Expired,
    /// Closed (terminal).
    Closed,
}

impl State {
    /// Valid or Jeopardy.
    pub fn is_live(self) -> bool {
        matches!(self, State::Valid | State::Jeopardy)
    }
}

/// Durations the core works with.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Lease duration.
    pub lease: Duration,
    /// Keep-alive interval.
    pub renew: Duration,
    /// Retry interval of candidates and watchers without notification.
    pub retry: Duration,
    /// Clock-rate drift bound.
    pub drift: f64,
}

impl Timing {
    /// The local deadline of something the backend reported `remaining` for, in a reply to
    /// a request sent at `sent`. Capped at the lease: a backend bug or a clock step there
    /// never stretches a local deadline past `sent + lease`.
    fn local(&self, sent: Instant, remaining: Duration) -> Instant {
        sent + remaining.min(self.lease).mul_f64(1.0 - self.drift)
    }
}

/// What the core remembers of the last release of a name.
#[derive(Clone, Copy, Debug)]
struct Memo {
    token: Token,
    state: MemoState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemoState {
    /// A release of the token is in flight.
    Pending,
    /// A release of the token failed or timed out: it may still land, at any time.
    Uncertain,
    /// Every release of the token was answered (or a newer token was adopted): none can
    /// land later. Forgotten once no acquire of the name is in flight either, since a grant
    /// sent before the release landed may still come back (found by the simulation; scenario
    /// `a_released_token_is_remembered_while_an_acquire_of_its_name_is_in_flight`).
    Settled,
}

#[derive(Clone, Debug)]
struct Held {
    term: Term,
    deadline: Instant,
    confirmed: Instant,
    holder: Holder,
}

#[derive(Clone, Debug)]
struct Scheduled<K> {
    key: K,
    due: Instant,
    running: bool,
    /// Woken (by a notification) while its task was running: run again at once.
    woken: bool,
}

impl<K> Scheduled<K> {
    fn new(key: K, due: Instant) -> Self {
        Scheduled {
            key,
            due,
            running: false,
            woken: false,
        }
    }

    /// Due now; a wake-up during a running task is kept for when it finishes.
    fn wake(&mut self, now: Instant) {
        self.due = self.due.min(now);
        self.woken |= self.running;
    }

    /// The task finished at `now`: next due at `retry_at`, or at once if woken meanwhile.
    fn finish(&mut self, now: Instant, retry_at: Instant) {
        self.running = false;
        self.due = if std::mem::take(&mut self.woken) {
            now
        } else {
            retry_at
        };
    }
}

#[derive(Debug)]
struct Watch<K, V> {
    s: Scheduled<K>,
    last: Option<V>,
}

/// How healthy a session's keep-alives are: what predicts a loss before it happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Time left until the local deadline (zero once expired or closed).
    pub valid_for: Duration,
    /// Round trip of the last successful keep-alive.
    pub keep_alive_rtt: Option<Duration>,
    /// Time that was left until the local deadline when the last keep-alive completed:
    /// a shrinking slack means the session is near loss.
    pub slack: Option<Duration>,
    /// Keep-alives failed in a row.
    pub failures: u32,
}

/// The owner an observer saw last with its term's value (`None` inside: nobody held the
/// lease). A change of the value within one term is reported like a change of holder.
type LastOwner = Option<(SessionId, Token, String)>;

/// What outlives a backend session when the engine reopens a new one: the candidates,
/// observers and group watchers (terms never do).
#[derive(Debug, Default)]
pub struct Handover {
    candidates: Vec<(HandleId, LeaseName, Option<Term>)>,
    waiting: BTreeMap<LeaseName, (usize, u64)>,
    observers: Vec<(HandleId, LeaseName, Option<LastOwner>)>,
    groups: Vec<(HandleId, GroupName, Option<BTreeSet<Member>>)>,
}

/// The state machine of one session.
#[derive(Debug)]
pub struct Core {
    t: Timing,
    session: SessionId,
    state: State,
    deadline: Instant,
    next_keep_alive: Instant,
    keep_alive_sent: Option<Instant>,
    leases: BTreeMap<LeaseName, Held>,
    acquiring: BTreeMap<LeaseName, u32>,
    releasing: BTreeSet<LeaseName>,
    /// The last token the engine asked the backend to release, per name. A release can reach
    /// the backend late, even after its caller timed out, so a grant of that same token may be
    /// undone at any moment: it is never adopted (found by the simulation; scenario
    /// `same_term_after_an_unfinished_release_is_not_adopted`). Forgotten once that can no
    /// longer happen ([`Memo`]), so a session locking ever new names keeps no memory of old
    /// ones.
    released: BTreeMap<LeaseName, Memo>,
    /// After a voluntary unlock or resign, this session's new candidates for the name wait
    /// until the instant given, so candidates of other sessions (which may only poll) get
    /// their turn.
    cooldown: BTreeMap<LeaseName, Instant>,
    candidates: BTreeMap<HandleId, Scheduled<LeaseName>>,
    /// The last term of a candidate that was lost (not resigned) and not followed by a new
    /// one: its resign reports [`Error::LeaseLost`].
    lost_terms: BTreeMap<HandleId, Term>,
    observers: BTreeMap<HandleId, Watch<LeaseName, LastOwner>>,
    groups: BTreeMap<HandleId, Watch<GroupName, BTreeSet<Member>>>,
    /// Names lock callers wait to see released: how many wait, and a count of the releases
    /// of that name seen (a notification, or this session's own release finishing).
    waiting: BTreeMap<LeaseName, (usize, u64)>,
    /// The [`Core::interest`] may have changed since the last [`Core::interest_changed`].
    interest_dirty: bool,
    health: Health,
    rng: u64,
    out: Vec<Output>,
}

impl Core {
    /// A core for a session opened by a request sent at `sent` that reported `remaining`.
    pub fn new(
        t: Timing,
        session: SessionId,
        sent: Instant,
        remaining: Duration,
        seed: u64,
    ) -> Self {
        Core {
            t,
            session,
            state: State::Valid,
            deadline: t.local(sent, remaining),
            next_keep_alive: sent + t.renew,
            keep_alive_sent: None,
            leases: BTreeMap::new(),
            acquiring: BTreeMap::new(),
            releasing: BTreeSet::new(),
            released: BTreeMap::new(),
            cooldown: BTreeMap::new(),
            candidates: BTreeMap::new(),
            lost_terms: BTreeMap::new(),
            observers: BTreeMap::new(),
            groups: BTreeMap::new(),
            waiting: BTreeMap::new(),
            interest_dirty: true,
            health: Health::default(),
            rng: seed | 1,
            out: Vec::new(),
        }
    }

    /// The session id.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// The state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The local session deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// A snapshot of the session's lease health at `now`.
    pub fn health(&self, now: Instant) -> Health {
        Health {
            valid_for: if self.state.is_live() {
                self.deadline.saturating_duration_since(now)
            } else {
                Duration::ZERO
            },
            ..self.health
        }
    }

    /// Registers a lock caller waiting for `name` to be released; returns the count of its
    /// releases seen so far ([`Core::releases_of`] changes when one is seen).
    pub fn wait_for_release(&mut self, name: &LeaseName) -> u64 {
        let w = self.waiting.entry(name.clone()).or_insert((0, 0));
        w.0 += 1;
        self.interest_dirty |= w.0 == 1;
        w.1
    }

    /// A lock caller stopped waiting for `name`.
    pub fn stop_waiting(&mut self, name: &LeaseName) {
        if let Some(w) = self.waiting.get_mut(name) {
            w.0 -= 1;
            if w.0 == 0 {
                self.waiting.remove(name);
                self.interest_dirty = true;
            }
        }
    }

    /// The releases of `name` seen while someone waited for it.
    pub fn releases_of(&self, name: &LeaseName) -> u64 {
        self.waiting.get(name).map_or(0, |w| w.1)
    }

    fn seen_release(&mut self, name: &LeaseName) -> bool {
        self.waiting.get_mut(name).map(|w| w.1 += 1).is_some()
    }

    /// Whether [`Core::interest`] may have changed since the last call (which resets it).
    pub fn interest_changed(&mut self) -> bool {
        std::mem::take(&mut self.interest_dirty)
    }

    /// Every name this session wants to hear about: candidates, observers and lock callers
    /// waiting for a release (and, separately, watched groups). Notifications of other names
    /// need not reach it.
    pub fn interest(&self) -> (BTreeSet<LeaseName>, BTreeSet<GroupName>) {
        let leases = (self.candidates.values().map(|c| &c.key))
            .chain(self.observers.values().map(|w| &w.s.key))
            .chain(self.waiting.keys())
            .cloned()
            .collect();
        let groups = self.groups.values().map(|w| w.s.key.clone()).collect();
        (leases, groups)
    }

    /// Takes the queued outputs.
    /// Whether outputs wait to be taken.
    pub fn has_outputs(&self) -> bool {
        !self.out.is_empty()
    }

    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.out)
    }

    /// Fails unless the session is live.
    pub fn check_live(&self) -> Result<()> {
        match self.state {
            State::Valid | State::Jeopardy => Ok(()),
            State::Expired => Err(Error::SessionExpired {
                session: self.session.clone(),
            }),
            State::Closed => Err(Error::Closed),
        }
    }

    fn jitter(&mut self) -> Duration {
        // xorshift64*: deterministic for a given seed (the simulation relies on it).
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let max = (self.t.retry / 2).as_nanos().max(1) as u64;
        Duration::from_nanos(r % max)
    }

    fn retry_at(&mut self, now: Instant) -> Instant {
        now + self.t.retry + self.jitter()
    }

    fn emit(&mut self, to: Option<HandleId>, e: Event) {
        self.out.push(Output::Emit(to, e));
    }

    /// Advances time: starts keep-alives and due tasks, detects jeopardy and loss.
    pub fn tick(&mut self, now: Instant) {
        if !self.settle(now) {
            return;
        }
        match self.keep_alive_sent {
            None if now >= self.next_keep_alive => {
                self.keep_alive_sent = Some(now);
                self.out.push(Output::KeepAlive);
            }
            Some(sent) if now >= sent + self.t.renew && self.state == State::Valid => {
                self.enter_jeopardy();
            }
            _ => {}
        }
        let mut run = Vec::new();
        for (h, c) in self.candidates.iter_mut() {
            let blocked = self.leases.contains_key(&c.key) || self.releasing.contains(&c.key);
            // Not even a notification (of its own release, say) ends a cool-down early.
            let cooling = self.cooldown.get(&c.key).is_some_and(|until| *until > now);
            if !c.running && c.due <= now && !blocked && !cooling {
                c.running = true;
                *self.acquiring.entry(c.key.clone()).or_insert(0) += 1;
                run.push(Task::Attempt(*h, c.key.clone()));
            }
        }
        for (h, w) in self.observers.iter_mut() {
            if !w.s.running && w.s.due <= now {
                w.s.running = true;
                run.push(Task::Owner(*h, w.s.key.clone()));
            }
        }
        for (h, w) in self.groups.iter_mut() {
            if !w.s.running && w.s.due <= now {
                w.s.running = true;
                run.push(Task::Members(*h, w.s.key.clone()));
            }
        }
        self.out.extend(run.into_iter().map(Output::Run));
    }

    /// Ends what passed its local deadline by `now` (the session, or single terms), with the
    /// true reason, before anything else looks at the terms. Returns whether the session is
    /// still live.
    pub fn settle(&mut self, now: Instant) -> bool {
        if !self.state.is_live() {
            return false;
        }
        if now >= self.deadline {
            self.expire(now, true);
            return false;
        }
        let due: Vec<LeaseName> = self
            .leases
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.lose(&name, LossReason::Expired, now);
        }
        true
    }

    /// When [`Core::tick`] has something to do next (`None` once terminal).
    pub fn next_wake(&self) -> Option<Instant> {
        if !self.state.is_live() {
            return None;
        }
        let mut at = self.deadline;
        let mut consider = |t: Instant| at = at.min(t);
        match self.keep_alive_sent {
            None => consider(self.next_keep_alive),
            Some(sent) if self.state == State::Valid => consider(sent + self.t.renew),
            Some(_) => {}
        }
        self.leases.values().for_each(|h| consider(h.deadline));
        self.candidates
            .values()
            .filter(|c| !c.running && !self.leases.contains_key(&c.key))
            .filter(|c| !self.releasing.contains(&c.key))
            .for_each(|c| {
                let cooling = self.cooldown.get(&c.key).copied();
                consider(cooling.map_or(c.due, |until| until.max(c.due)))
            });
        self.observers
            .values()
            .filter(|w| !w.s.running)
            .for_each(|w| consider(w.s.due));
        self.groups
            .values()
            .filter(|w| !w.s.running)
            .for_each(|w| consider(w.s.due));
        Some(at)
    }

    fn enter_jeopardy(&mut self) {
        if self.state == State::Valid {
            self.state = State::Jeopardy;
            let session = self.session.clone();
            self.emit(None, Event::Jeopardy { session });
        }
    }

    /// The reply (or failure) of the keep-alive sent at `sent`.
    pub fn on_keep_alive(&mut self, sent: Instant, now: Instant, reply: Result<KeepAlive>) {
        self.keep_alive_sent = None;
        if !self.state.is_live() {
            return;
        }
        match reply {
            Ok(ka) => {
                self.deadline = self.deadline.max(self.t.local(sent, ka.remaining));
                self.health.keep_alive_rtt = Some(now.saturating_duration_since(sent));
                self.health.slack = Some(self.deadline.saturating_duration_since(now));
                self.health.failures = 0;
                self.next_keep_alive = sent + self.t.renew;
                if self.state == State::Jeopardy {
                    self.state = State::Valid;
                    let session = self.session.clone();
                    self.emit(None, Event::Recovered { session });
                }
                let listed: BTreeMap<&LeaseName, _> =
                    ka.leases.iter().map(|h| (&h.name, h)).collect();
                let mut lost = Vec::new();
                for (name, held) in self.leases.iter_mut() {
                    match listed.get(name) {
                        Some(l) if l.token == held.term.token => {
                            held.deadline = held.deadline.max(self.t.local(sent, l.remaining));
                        }
                        // Acquired after the keep-alive was sent: the reply may predate it.
                        _ if held.confirmed > sent => {}
                        _ => lost.push(name.clone()),
                    }
                }
                for name in lost {
                    self.lose(&name, LossReason::Missing, now);
                }
                for l in &ka.leases {
                    let known = self
                        .leases
                        .get(&l.name)
                        .is_some_and(|h| h.term.token == l.token);
                    if !known
                        && !self.acquiring.contains_key(&l.name)
                        && self.releasing.insert(l.name.clone())
                    {
                        log::debug!("releasing {} (token {}): held but unknown", l.name, l.token);
                        self.remember_release(&l.name, l.token);
                        self.out.push(Output::Release(l.name.clone(), l.token));
                    }
                }
                if now >= self.deadline {
                    self.expire(now, true);
                }
            }
            Err(Error::SessionExpired { .. }) => self.expire(now, false),
            Err(e) => {
                self.health.failures += 1;
                log::warn!(
                    "keep-alive of session {} failed: {}",
                    self.session,
                    e.report()
                );
                self.enter_jeopardy();
                self.next_keep_alive = now + self.t.renew / 4;
            }
        }
    }

    fn expire(&mut self, now: Instant, locally: bool) {
        let names: Vec<LeaseName> = self.leases.keys().cloned().collect();
        for name in names {
            self.lose(&name, LossReason::SessionExpired, now);
        }
        self.state = State::Expired;
        if locally {
            self.out.push(Output::CloseBackend);
        }
        let session = self.session.clone();
        self.emit(None, Event::SessionExpired { session });
    }

    fn lose(&mut self, name: &LeaseName, reason: LossReason, now: Instant) {
        let Some(held) = self.leases.remove(name) else {
            return;
        };
        let term = held.term;
        match held.holder {
            Holder::Election(h) => {
                let due = self.retry_at(now);
                if let Some(c) = self.candidates.get_mut(&h) {
                    c.due = due;
                    self.lost_terms.insert(h, term.clone());
                }
                self.emit(Some(h), Event::Revoked { term, reason });
            }
            Holder::Lock(h) => self.emit(Some(h), Event::LockLost { term, reason }),
        }
        self.observers_due(name, now);
    }

    /// Wakes the observers of `name`; whether there were any.
    fn observers_due(&mut self, name: &LeaseName, now: Instant) -> bool {
        let mut hit = false;
        for w in self.observers.values_mut().filter(|w| &w.s.key == name) {
            w.s.wake(now);
            hit = true;
        }
        hit
    }

    /// Marks an acquire of `name` as in flight (a lock's, sent by the caller).
    pub fn begin_acquire(&mut self, name: &LeaseName) {
        *self.acquiring.entry(name.clone()).or_insert(0) += 1;
    }

    fn end_acquire(&mut self, name: &LeaseName) {
        if let Some(n) = self.acquiring.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.acquiring.remove(name);
            }
        }
    }

    /// Takes a granted term into the local view. Refused while a release of the same name is
    /// in flight, or when the grant carries a token the engine asked to release: that
    /// release could free the very term being adopted, even after its caller timed out.
    /// The caller then releases the grant (again) and tries later, for a new token.
    fn adopt(&mut self, term: Term, sent: Instant, now: Instant, holder: Holder) -> bool {
        let released = self
            .released
            .get(&term.name)
            .is_some_and(|m| m.token == term.token);
        if self.releasing.contains(&term.name) || released {
            return false;
        }
        // A grant whose local deadline passed before its reply arrived (an acquire slower
        // than the lease) is no term to hand out: the backend may have expired it already.
        let deadline = self.t.local(sent, term.remaining).min(self.deadline);
        if deadline <= now {
            log::warn!(
                "the grant of {} (token {}) arrived after its local deadline; released",
                term.name,
                term.token
            );
            return false;
        }
        // A newer token: no release of the older one can touch it.
        if let Some(m) = self.released.get_mut(&term.name) {
            m.state = MemoState::Settled;
        }
        if let Holder::Election(h) = holder {
            self.lost_terms.remove(&h);
        }
        let name = term.name.clone();
        self.leases.insert(
            name.clone(),
            Held {
                term,
                deadline,
                confirmed: now,
                holder,
            },
        );
        self.observers_due(&name, now);
        true
    }

    /// Reports that `term` was granted with a token not above `seen` (see
    /// [`Event::TokenRegressed`]), to the session's listeners and to `handle`'s if given.
    pub fn token_regressed(&mut self, handle: Option<HandleId>, term: &Term, seen: Token) {
        log::error!(
            "the backend granted {} with token {}, not above token {seen} granted before: it \
             lost data (a failover to a replica that missed writes, a restart without \
             persistence, or an eviction); a resource that saw {seen} will reject the new term",
            term.name,
            term.token
        );
        let term = term.clone();
        self.emit(handle, Event::TokenRegressed { term, seen });
    }

    /// Whether `holder` holds `term` already (same name and token); its local deadline then
    /// moves to what this grant, sent at `sent`, allows if that is later.
    fn renew_held(&mut self, term: &Term, sent: Instant, holder: Holder) -> bool {
        let local = self.t.local(sent, term.remaining).min(self.deadline);
        match self.leases.get_mut(&term.name) {
            Some(h) if h.holder == holder && h.term.token == term.token => {
                h.deadline = h.deadline.max(local);
                true
            }
            _ => false,
        }
    }

    /// The result of a lock's acquire sent at `sent`. Returns the term if the lock now holds
    /// it; otherwise the backend's answer is passed back (and a stray grant released).
    pub fn on_lock_acquire(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) -> Result<Acquire> {
        self.end_acquire(name);
        let r = self.lock_reply(handle, sent, now, reply);
        self.forget_settled_release(name);
        r
    }

    /// Ends an acquire that left the session queued behind another waiter (fair locks).
    pub fn on_lock_queued(&mut self, name: &LeaseName) {
        self.end_acquire(name);
        self.forget_settled_release(name);
    }

    fn lock_reply(
        &mut self,
        handle: HandleId,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) -> Result<Acquire> {
        match reply {
            Ok(Acquire::Acquired(term)) => {
                if let Err(e) = self.check_live() {
                    self.release_stray(&term);
                    return Err(e);
                }
                if self.adopt(term.clone(), sent, now, Holder::Lock(handle)) {
                    Ok(Acquire::Acquired(term))
                } else {
                    // Try again once the release in flight has finished.
                    self.release_stray(&term);
                    Ok(Acquire::Held(Owner {
                        session: self.session.clone(),
                        token: term.token,
                        remaining: term.remaining,
                        value: String::new(),
                    }))
                }
            }
            Err(e @ Error::SessionExpired { .. }) => {
                if self.state.is_live() {
                    self.expire(now, false);
                }
                Err(e)
            }
            other => other,
        }
    }

    fn release_stray(&mut self, term: &Term) {
        let adopted = self
            .leases
            .get(&term.name)
            .is_some_and(|h| h.term.token == term.token);
        if self.state.is_live() && !adopted && self.releasing.insert(term.name.clone()) {
            self.remember_release(&term.name, term.token);
            self.out
                .push(Output::Release(term.name.clone(), term.token));
        }
    }

    /// A lock guard is unlocked or dropped: forgets the term and returns its token to
    /// release. A term that passed its local deadline is first reported lost
    /// ([`Event::LockLost`] with the true reason); then, as for a term lost earlier, the
    /// result is [`Error::LeaseLost`] and there is nothing to release.
    pub fn unlock(&mut self, handle: HandleId, term: &Term, now: Instant) -> Result<Token> {
        self.settle(now);
        match self.leases.get(&term.name) {
            Some(h) if h.holder == Holder::Lock(handle) && h.term.token == term.token => {
                let name = &term.name;
                self.leases.remove(name);
                self.releasing.insert(name.clone());
                self.remember_release(name, term.token);
                self.cool_down(name, now);
                self.observers_due(name, now);
                Ok(term.token)
            }
            _ => Err(lease_lost(term)),
        }
    }

    /// A voluntary release of `name` at `now`: this session's next candidate for it waits
    /// two retry intervals, longer than any polling candidate elsewhere waits between two
    /// attempts (an interval plus at most half of one in jitter), so they get a turn.
    fn cool_down(&mut self, name: &LeaseName, now: Instant) {
        self.cooldown.retain(|_, until| *until > now);
        let until = now + self.t.retry * 2;
        self.cooldown.insert(name.clone(), until);
    }

    /// The backend answered the release of a lock this session still believed held with
    /// "not held": the term had been lost there. Reports it to the lock (`LockLost` with
    /// [`LossReason::Missing`]) and returns the error for the unlock.
    pub fn lost_on_unlock(&mut self, handle: HandleId, term: Term) -> Error {
        let e = lease_lost(&term);
        let reason = LossReason::Missing;
        self.emit(Some(handle), Event::LockLost { term, reason });
        e
    }

    /// A release of `name` finished: `definitive` when the backend answered (either way), so
    /// it can no longer land later; a failed or timed-out release may still.
    pub fn on_released(&mut self, name: &LeaseName, definitive: bool) {
        if self.releasing.remove(name) {
            self.seen_release(name);
        }
        if let Some(m) = self.released.get_mut(name) {
            m.state = match (m.state, definitive) {
                (MemoState::Pending, true) => MemoState::Settled,
                (state, true) => state,
                (_, false) => MemoState::Uncertain,
            };
        }
        self.forget_settled_release(name);
    }

    /// Notes a release of `name` with `token` being sent.
    fn remember_release(&mut self, name: &LeaseName, token: Token) {
        let state = match self.released.get(name) {
            Some(m) if m.token == token && m.state == MemoState::Uncertain => m.state,
            _ => MemoState::Pending,
        };
        self.released.insert(name.clone(), Memo { token, state });
    }

    /// Forgets the last release of `name` once no grant it could undo can arrive.
    fn forget_settled_release(&mut self, name: &LeaseName) {
        let settled = self
            .released
            .get(name)
            .is_some_and(|m| m.state == MemoState::Settled);
        if settled && !self.acquiring.contains_key(name) {
            self.released.remove(name);
        }
    }

    /// How many names the core remembers a release for (bounded by the releases that did
    /// not finish definitively).
    #[cfg(test)]
    pub fn remembered_releases(&self) -> usize {
        self.released.len()
    }

    /// Whether `handle` holds `name` with `token` and the term's local deadline is ahead.
    pub fn is_valid(&self, name: &LeaseName, token: Token, now: Instant) -> bool {
        self.state.is_live()
            && now < self.deadline
            && self
                .leases
                .get(name)
                .is_some_and(|h| h.term.token == token && now < h.deadline)
    }

    /// How long the term `name` with `token` stays locally valid from `now` (the earlier of
    /// the session's and the term's local deadlines), or `None` if it is not valid now.
    pub fn valid_for(&self, name: &LeaseName, token: Token, now: Instant) -> Option<Duration> {
        if !self.is_valid(name, token, now) {
            return None;
        }
        let term = self.leases.get(name)?.deadline;
        Some(term.min(self.deadline).saturating_duration_since(now))
    }

    /// The term `holder` holds, if any.
    pub fn term_of(&self, name: &LeaseName, holder: Holder) -> Option<Term> {
        self.leases
            .get(name)
            .filter(|h| h.holder == holder)
            .map(|h| h.term.clone())
    }

    /// Whether `handle` is a registered candidate.
    pub fn is_candidate(&self, handle: HandleId) -> bool {
        self.candidates.contains_key(&handle)
    }

    /// Registers an election candidate for `name`; it attempts at once, or once the
    /// cool-down after this session's own voluntary release of `name` has passed.
    pub fn add_candidate(&mut self, handle: HandleId, name: LeaseName, now: Instant) {
        self.interest_dirty = true;
        self.candidates.insert(handle, Scheduled::new(name, now));
    }

    /// Withdraws a candidate. A term that passed its local deadline is first reported lost
    /// with the true reason. If the candidate still led, its term ends with
    /// `Revoked{Resigned}` and is returned, to release; [`Error::LeaseLost`] if its last
    /// term was lost and not followed by another; `Ok(None)` if it never led.
    pub fn remove_candidate(&mut self, handle: HandleId, now: Instant) -> Result<Option<Term>> {
        self.settle(now);
        let lost = self.lost_terms.remove(&handle);
        let Some(c) = self.candidates.remove(&handle) else {
            return Ok(None);
        };
        self.interest_dirty = true;
        match self.leases.get(&c.key) {
            Some(held) if held.holder == Holder::Election(handle) => {}
            _ => return lost.map_or(Ok(None), |t| Err(lease_lost(&t))),
        }
        let held = self.leases.remove(&c.key).expect("checked above");
        let token = held.term.token;
        self.releasing.insert(c.key.clone());
        self.remember_release(&c.key, token);
        self.cool_down(&c.key, now);
        self.observers_due(&c.key, now);
        let term = held.term;
        let reason = LossReason::Resigned;
        self.emit(
            Some(handle),
            Event::Revoked {
                term: term.clone(),
                reason,
            },
        );
        Ok(Some(term))
    }

    /// The result of a candidate's attempt sent at `sent`.
    pub fn on_attempt(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) {
        self.end_acquire(name);
        // A held term past its deadline is lost first: a re-grant never revives it silently.
        self.settle(now);
        self.attempt_reply(handle, name, sent, now, reply);
        self.forget_settled_release(name);
    }

    fn attempt_reply(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) {
        let due = self.retry_at(now);
        let Some(c) = self.candidates.get_mut(&handle) else {
            if let Ok(Acquire::Acquired(term)) = reply {
                self.release_stray(&term);
            }
            return;
        };
        c.finish(now, due);
        match reply {
            Ok(Acquire::Acquired(term)) => {
                if !self.state.is_live() {
                    return;
                }
                if self.renew_held(&term, sent, Holder::Election(handle)) {
                    // The term this candidate holds already (an attempt that overlapped
                    // another, e.g. across `resign` and `campaign`): announced once.
                    return;
                }
                if self.adopt(term.clone(), sent, now, Holder::Election(handle)) {
                    self.emit(Some(handle), Event::Elected { term });
                } else {
                    self.release_stray(&term);
                    if let Some(c) = self.candidates.get_mut(&handle) {
                        c.due = now; // again once the release in flight has finished
                    }
                }
            }
            Ok(Acquire::Held(_)) => {}
            Err(Error::SessionExpired { .. }) => {
                if self.state.is_live() {
                    self.expire(now, false);
                }
            }
            Err(e) => log::warn!("candidate for {name} failed to acquire: {}", e.report()),
        }
    }

    /// Registers an observer of `name`; it reads the owner at once.
    pub fn add_observer(&mut self, handle: HandleId, name: LeaseName, now: Instant) {
        let s = Scheduled::new(name, now);
        self.interest_dirty = true;
        self.observers.insert(handle, Watch { s, last: None });
    }

    /// Registers a watcher of `group`; it reads the members at once.
    pub fn add_group_watch(&mut self, handle: HandleId, group: GroupName, now: Instant) {
        let s = Scheduled::new(group, now);
        self.interest_dirty = true;
        self.groups.insert(handle, Watch { s, last: None });
    }

    /// Removes an observer or group watcher.
    pub fn remove_watch(&mut self, handle: HandleId) {
        self.interest_dirty = true;
        self.observers.remove(&handle);
        self.groups.remove(&handle);
    }

    /// The result of an observer's read.
    pub fn on_owner(&mut self, handle: HandleId, now: Instant, reply: Result<Option<Owner>>) {
        let due = self.retry_at(now);
        let Some(w) = self.observers.get_mut(&handle) else {
            return;
        };
        w.s.finish(now, due);
        if !self.state.is_live() {
            // An expired session reports nothing more (found by the simulation; scenario
            // `a_read_answered_after_expiry_reports_nothing`); after a reopen the new session
            // reads again at once.
            return;
        }
        match reply {
            Ok(owner) => {
                let key = owner
                    .as_ref()
                    .map(|o| (o.session.clone(), o.token, o.value.clone()));
                if w.last.as_ref() != Some(&key) {
                    w.last = Some(key);
                    let name = w.s.key.clone();
                    self.emit(Some(handle), Event::LeaderChanged { name, owner });
                }
            }
            Err(e) => log::warn!(
                "observer of {} failed to read the owner: {}",
                w.s.key,
                e.report()
            ),
        }
    }

    /// The result of a group watcher's read.
    pub fn on_members(&mut self, handle: HandleId, now: Instant, reply: Result<Vec<Member>>) {
        let due = self.retry_at(now);
        let Some(w) = self.groups.get_mut(&handle) else {
            return;
        };
        w.s.finish(now, due);
        if !self.state.is_live() {
            // An expired session reports nothing more (found by the simulation; scenario
            // `a_read_answered_after_expiry_reports_nothing`); after a reopen the new session
            // reads again at once.
            return;
        }
        match reply {
            Ok(members) => {
                let now_set: BTreeSet<Member> = members.into_iter().collect();
                let first = w.last.is_none();
                let before = w.last.take().unwrap_or_default();
                let joined: Vec<Member> = now_set.difference(&before).cloned().collect();
                let left: Vec<Member> = before.difference(&now_set).cloned().collect();
                let changed = !joined.is_empty() || !left.is_empty();
                let group = w.s.key.clone();
                w.last = Some(now_set.clone());
                if changed || first {
                    let members = now_set.into_iter().collect();
                    self.emit(
                        Some(handle),
                        Event::MembersChanged {
                            group,
                            members,
                            joined,
                            left,
                        },
                    );
                }
            }
            Err(e) => log::warn!(
                "watcher of group {} failed to read members: {}",
                w.s.key,
                e.report()
            ),
        }
    }

    /// A backend notification. Returns whether it concerned anything of this session (else
    /// nothing changed and nobody needs waking).
    pub fn notify(&mut self, n: &Notification, now: Instant) -> bool {
        match n {
            Notification::Released(name) => {
                let mut hit = self.seen_release(name);
                for c in self.candidates.values_mut().filter(|c| &c.key == name) {
                    c.wake(now);
                    hit = true;
                }
                self.observers_due(name, now) || hit
            }
            Notification::Acquired(name) => self.observers_due(name, now),
            Notification::GroupChanged(g) => {
                let mut hit = false;
                for w in self.groups.values_mut().filter(|w| &w.s.key == g) {
                    w.s.wake(now);
                    hit = true;
                }
                hit
            }
            Notification::Resync => {
                self.waiting.values_mut().for_each(|w| w.1 += 1);
                self.candidates.values_mut().for_each(|c| c.wake(now));
                self.observers.values_mut().for_each(|w| w.s.wake(now));
                self.groups.values_mut().for_each(|w| w.s.wake(now));
                true
            }
        }
    }

    /// Hands the registrations of this (expired) session over to the next one.
    pub fn handover(&mut self) -> Handover {
        self.interest_dirty = true;
        Handover {
            waiting: std::mem::take(&mut self.waiting),
            candidates: std::mem::take(&mut self.candidates)
                .into_iter()
                .map(|(h, c)| (h, c.key, self.lost_terms.remove(&h)))
                .collect(),
            observers: std::mem::take(&mut self.observers)
                .into_iter()
                .map(|(h, w)| (h, w.s.key, w.last))
                .collect(),
            groups: std::mem::take(&mut self.groups)
                .into_iter()
                .map(|(h, w)| (h, w.s.key, w.last))
                .collect(),
        }
    }

    /// Takes over the registrations of the expired session `old` (all due at once) and
    /// emits [`Event::SessionReopened`].
    pub fn take_over(&mut self, h: Handover, old: SessionId, now: Instant) {
        self.waiting = h.waiting;
        self.interest_dirty = true;
        for (handle, name, lost) in h.candidates {
            self.candidates.insert(handle, Scheduled::new(name, now));
            if let Some(term) = lost {
                self.lost_terms.insert(handle, term);
            }
        }
        for (handle, name, last) in h.observers {
            self.observers.insert(
                handle,
                Watch {
                    s: Scheduled::new(name, now),
                    last,
                },
            );
        }
        for (handle, group, last) in h.groups {
            self.groups.insert(
                handle,
                Watch {
                    s: Scheduled::new(group, now),
                    last,
                },
            );
        }
        let new = self.session.clone();
        self.emit(None, Event::SessionReopened { old, new });
    }

    /// Closes the session locally: every term ends with `Closed`. Returns false if it was
    /// already closed. The driver then closes the backend session.
    pub fn close(&mut self) -> bool {
        if self.state == State::Closed {
            return false;
        }
        let leases = std::mem::take(&mut self.leases);
        for (_, held) in leases {
            let (term, reason) = (held.term, LossReason::Closed);
            let h = held.holder.handle();
            match held.holder {
                Holder::Election(_) => self.emit(Some(h), Event::Revoked { term, reason }),
                Holder::Lock(_) => self.emit(Some(h), Event::LockLost { term, reason }),
            }
        }
        self.candidates.clear();
        self.interest_dirty = true;
        self.lost_terms.clear();
        self.observers.clear();
        self.groups.clear();
        self.state = State::Closed;
        let session = self.session.clone();
        self.emit(None, Event::Closed { session });
        true
    }
}

pub(crate) use crate::error::lease_lost;
