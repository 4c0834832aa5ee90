//! The session's decision logic, free of I/O and threads.
//!
//! [`Core`] is driven by `(now, input)` calls: ticks, backend replies and notifications. It
//! queues [`Output`]s (requests to send, events to emit) and tells the driver when to wake up
//! next. It reads no clock of its own, so tests and the simulation run it on virtual time.
//!
//! One type, one state machine; its methods sit in one file per concern: `liveness`
//! (keep-alive, jeopardy, expiry), `terms` (every term, whatever its kind: a lock's, a
//! permit's, a candidate's, a read-write lock's read or write; and the release memo),
//! `candidates` (elections), `watches` (observers and group watches), `handover`
//! (notifications, reopen, close).

use super::event::{Event, LossReason};
use crate::error::{Error, Result};
use crate::spi::{Acquire, KeepAlive, Notification, RwMode};
use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Term, Token};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

mod candidates;
mod handover;
mod liveness;
mod terms;
#[cfg(test)]
mod tests;
mod watches;

/// Identifies a handle (election, lock guard, observer, group) within a session.
pub type HandleId = u64;

/// Which names a term is of: read-write locks have their own (a plain lock of the same
/// name is another term).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Space {
    /// Locks, permits and election candidates: exclusive terms (leases).
    Lease,
    /// Read-write locks.
    Rw,
}

/// What kind of term a guard holds: its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TermKind {
    /// Exclusive: a lock's (or a semaphore's permit).
    Lock,
    /// A read-write lock's, read or write.
    Rw(RwMode),
}

impl TermKind {
    /// The names its term is of.
    pub(crate) fn space(self) -> Space {
        match self {
            TermKind::Lock => Space::Lease,
            TermKind::Rw(_) => Space::Rw,
        }
    }
}

/// One value per [`Space`].
#[derive(Clone, Debug, Default)]
struct Spaces<T> {
    lease: T,
    rw: T,
}

impl<T> Index<Space> for Spaces<T> {
    type Output = T;
    fn index(&self, s: Space) -> &T {
        match s {
            Space::Lease => &self.lease,
            Space::Rw => &self.rw,
        }
    }
}

impl<T> IndexMut<Space> for Spaces<T> {
    fn index_mut(&mut self, s: Space) -> &mut T {
        match s {
            Space::Lease => &mut self.lease,
            Space::Rw => &mut self.rw,
        }
    }
}

/// Who in this process holds a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// An election candidate.
    Election(HandleId),
    /// A lock guard (or a permit's).
    Lock(HandleId),
    /// A read-write lock guard, of a mode.
    Rw(HandleId, RwMode),
}

impl Holder {
    fn handle(self) -> HandleId {
        match self {
            Holder::Election(h) | Holder::Lock(h) | Holder::Rw(h, _) => h,
        }
    }

    /// The kind of term it holds (a candidate's is a lease, as a lock's).
    fn kind(self) -> TermKind {
        match self {
            Holder::Election(_) | Holder::Lock(_) => TermKind::Lock,
            Holder::Rw(_, mode) => TermKind::Rw(mode),
        }
    }

    /// Guard `h`'s, of `kind`.
    fn guard(h: HandleId, kind: TermKind) -> Self {
        match kind {
            TermKind::Lock => Holder::Lock(h),
            TermKind::Rw(mode) => Holder::Rw(h, mode),
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
    /// Release a read-write lock's term (of a mode) on the backend.
    ReleaseRw(LeaseName, RwMode, Token),
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
    /// The session's lock-delay: when above zero, a local expiry leaves the backend session
    /// to expire there (no close), so its terms get the delay.
    pub lock_delay: Duration,
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
    /// Every term a handle of this session holds, by space and name.
    terms: Spaces<BTreeMap<LeaseName, Held>>,
    /// Acquires in flight (a grant sent before a release landed may still come back).
    acquiring: Spaces<BTreeMap<LeaseName, u32>>,
    /// Releases in flight.
    releasing: Spaces<BTreeSet<LeaseName>>,
    /// The last token the engine asked the backend to release, per name. A release can reach
    /// the backend late, even after its caller timed out, so a grant of that same token may be
    /// undone at any moment: it is never adopted (found by the simulation; scenarios
    /// `same_term_after_an_unfinished_release_is_not_adopted`,
    /// `a_read_write_grant_of_a_token_whose_release_timed_out_is_released_again`). Forgotten
    /// once that can no longer happen ([`Memo`]), so a session locking ever new names keeps
    /// no memory of old ones.
    released: Spaces<BTreeMap<LeaseName, Memo>>,
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
            terms: Spaces::default(),
            acquiring: Spaces::default(),
            releasing: Spaces::default(),
            released: Spaces::default(),
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

    /// Whether outputs wait to be taken or the interest may have changed (a dispatch has
    /// work to do).
    pub fn needs_dispatch(&self) -> bool {
        self.has_outputs() || self.interest_dirty
    }

    /// Whether outputs are waiting to be taken.
    pub fn has_outputs(&self) -> bool {
        !self.out.is_empty()
    }

    /// Takes the queued outputs.
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
}

pub(crate) use crate::error::lease_lost;
