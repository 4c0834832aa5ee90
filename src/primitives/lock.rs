//! Distributed locks: `Session::lock`, `try_lock`, `lock_timeout` and the guard.

use super::IntoLeaseName;
use crate::engine::driver::wait::{self, LockWait, Step};
use crate::engine::handle::EngineHandle;
use crate::engine::{Cancel, HandleId, Session};
use crate::error::{Error, Result};
use crate::spi::Acquire;
use crate::types::{LeaseName, SessionId, Term, Token};
use crossbeam_channel::Receiver;
use std::time::{Duration, Instant};

use crate::Event;

impl Session {
    /// Takes the lock `name`, waiting as long as it takes (until the session is lost).
    ///
    /// Locks are **not reentrant**: a thread that locks a name it already holds (or is
    /// taking) through this session gets [`Error::AlreadyHeld`] at once instead of waiting
    /// for itself forever (as does [`lock_timeout`](Self::lock_timeout); `try_lock` answers
    /// `None`). "This thread" is the thread that took the guard. Threads sharing one session
    /// exclude each other, like processes with different sessions do.
    pub fn lock(&self, name: impl IntoLeaseName) -> Result<LockGuard> {
        let name = name.into_lease_name()?;
        let fair = self.inner.config().fair_locks();
        waiting("taking a lock", None, None, |until, once, cancel, last| {
            lock_until(&self.inner, name, until, once, fair, cancel, last)
        })
    }

    /// Takes the lock `name` if it is free now; `Ok(None)` if someone holds it.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::sync::Arc;
    /// let backend = Arc::new(MemoryBackend::new());
    /// let a = Session::open(backend.clone(), Config::default())?;
    /// let b = Session::open(backend, Config::default())?;
    /// let guard = a.try_lock("db-migration")?.unwrap();
    /// assert!(b.try_lock("db-migration")?.is_none());
    /// guard.unlock()?; // released when this returns (dropping releases in the background)
    /// assert!(b.try_lock("db-migration")?.is_some());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn try_lock(&self, name: impl IntoLeaseName) -> Result<Option<LockGuard>> {
        let name = name.into_lease_name()?;
        let fair = self.inner.config().fair_locks();
        try_once(|until, once, cancel, last| {
            lock_until(&self.inner, name, until, once, fair, cancel, last)
        })
    }

    /// Takes the lock `name`, waiting at most `timeout`; [`Error::Timeout`] after that.
    pub fn lock_timeout(&self, name: impl IntoLeaseName, timeout: Duration) -> Result<LockGuard> {
        let name = name.into_lease_name()?;
        let fair = self.inner.config().fair_locks();
        waiting(
            "waiting for a lock",
            Some(timeout),
            None,
            |until, once, cancel, last| {
                lock_until(&self.inner, name, until, once, fair, cancel, last)
            },
        )
    }

    /// Takes the lock `name`, waiting until `timeout` passes (`None`: no deadline) or
    /// `cancel` is cancelled ([`Error::Cancelled`]); [`Error::Timeout`] after the timeout.
    /// Like [`lock`](Self::lock), it fails with [`Error::AlreadyHeld`] when this thread
    /// already holds (or is taking) `name` through this session.
    ///
    /// See [`Cancel`] for an example.
    pub fn lock_cancellable(
        &self,
        name: impl IntoLeaseName,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Result<LockGuard> {
        let name = name.into_lease_name()?;
        let fair = self.inner.config().fair_locks();
        waiting(
            "taking a lock",
            timeout,
            Some(cancel),
            |until, once, cancel, last| {
                lock_until(&self.inner, name, until, once, fair, cancel, last)
            },
        )
    }

    /// The sessions waiting for the fair lock `name`, first first (see
    /// [`ConfigBuilder::fair_locks`](crate::ConfigBuilder::fair_locks)); one backend call.
    /// [`Error::Unsupported`] on a backend without queues.
    ///
    /// ```
    /// use simba_lease::{Config, Session};
    /// let config = Config::builder().fair_locks(true).build()?;
    /// let session = Session::connect("memory://", config)?;
    /// let guard = session.lock("printer")?;
    /// assert!(session.lock_queue("printer")?.is_empty()); // nobody waits
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn lock_queue(&self, name: impl IntoLeaseName) -> Result<Vec<SessionId>> {
        let name = name.into_lease_name()?;
        self.inner.backend().queue(&name)
    }
}

/// The timeout of a wait that ran out; the last failed attempt (if the last attempt failed)
/// is its source, as `try_lock` would have returned it.
pub(crate) fn timed_out(operation: &'static str, after: Duration, last: Option<Error>) -> Error {
    Error::Timeout {
        operation,
        after,
        source: last.map(|e| Box::new(e) as crate::error::BoxError),
    }
}

/// One call of a lock, a read-write lock's side or a semaphore, that waits: at most
/// `timeout` (`None`, or one too large for an `Instant`: no deadline) and until `cancel` is
/// cancelled (if given). `take(until, once, cancel, last)` takes the lock by `until`
/// (`None`: no deadline; `once`: one try, no waiting), `last` getting the error of its last
/// attempt if that failed; a wait that runs out is [`Error::Timeout`] of `operation` after
/// `timeout`, with that error as its source. The blocking, timeout and cancellable calls of
/// every lock are this one.
pub(crate) fn waiting<G>(
    operation: &'static str,
    timeout: Option<Duration>,
    cancel: Option<&Cancel>,
    take: impl FnOnce(Option<Instant>, bool, Option<&Cancel>, &mut Option<Error>) -> Result<Option<G>>,
) -> Result<G> {
    // A timeout too large for an `Instant` means no deadline.
    let until = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut last = None;
    take(until, false, cancel, &mut last)?
        .ok_or_else(|| timed_out(operation, timeout.unwrap_or(Duration::MAX), last))
}

/// One try, now, through `take` (as [`waiting`] calls it): `Ok(None)` if the lock is taken.
pub(crate) fn try_once<G>(
    take: impl FnOnce(Option<Instant>, bool, Option<&Cancel>, &mut Option<Error>) -> Result<Option<G>>,
) -> Result<Option<G>> {
    take(Some(Instant::now()), true, None, &mut None)
}

/// Takes the lock `name` by `until` (`None`: no deadline); `once`: one try, no waiting.
/// `fair`: through the name's queue (see [`ConfigBuilder::fair_locks`](crate::ConfigBuilder::fair_locks)).
/// `last` is the error of the last attempt if it failed (`None` if it found the lock held).
#[allow(clippy::too_many_arguments)]
pub(crate) fn lock_until(
    inner: &EngineHandle,
    name: LeaseName,
    until: Option<Instant>,
    once: bool,
    fair: bool,
    cancel: Option<&Cancel>,
    last: &mut Option<Error>,
) -> Result<Option<LockGuard>> {
    let started = inner.now();
    let h = inner.next_handle();
    if !inner.reserve_for_lock(&name, h, until, once, cancel)? {
        return Ok(None);
    }
    let events = inner.channel(h);
    let r = acquire_loop(inner, &name, h, until, once, fair, cancel, last);
    match r {
        Ok(Some((session, term))) => Ok(Some(LockGuard {
            acquired: {
                let now = inner.now();
                crate::engine::metrics::lock_wait(now.saturating_duration_since(started));
                now
            },
            inner: inner.clone(),
            handle: h,
            session,
            term,
            events,
            done: false,
        })),
        other => {
            if fair {
                leave_queue(inner, &name);
            }
            inner.drop_listeners(h);
            inner.unreserve(&name, h);
            other.map(|_| None)
        }
    }
}

/// Gives up this session's place in `name`'s queue (a waiter that timed out, was
/// cancelled or failed). A failure only costs the place's patience: it is skipped once
/// no longer renewed.
pub(crate) fn leave_queue(inner: &EngineHandle, name: &LeaseName) {
    let id = inner.id();
    if let Err(e) = inner.backend().leave_queue(&id, name) {
        log::warn!("leaving the queue of lock {name} failed: {}", e.report());
    }
}

/// One lock call: acquires until the term is held, the deadline passes, or the driver's
/// [`LockWait`] gives up; `last` gets the last failure (the timeout's source).
#[allow(clippy::too_many_arguments)]
fn acquire_loop(
    inner: &EngineHandle,
    name: &LeaseName,
    h: HandleId,
    until: Option<Instant>,
    once: bool,
    fair: bool,
    cancel: Option<&Cancel>,
    last: &mut Option<Error>,
) -> Result<Option<(SessionId, Term)>> {
    const OP: &str = "taking a lock";
    let wait = LockWait::new(once, inner.config().retry_interval()).until(until);
    attempts(inner, name, wait, cancel, last, || {
        // While an expired session is reopened, wait for the new one.
        let Some((id, seen)) = inner.begin_lock_attempt(name, until, once, cancel, OP)? else {
            return Ok(None);
        };
        let sent = inner.now();
        // `None`: queued behind another waiter while the lease is free.
        let reply: Result<Option<Acquire>> = if fair {
            inner
                .backend()
                .acquire_queued(&id, name, inner.config().lease())
                .map(wait::queued)
        } else {
            inner.backend().acquire(&id, name).map(Some)
        };
        let r = inner.finish_lock_attempt(&id, h, name, sent, reply);
        Ok(Some((id, seen, r)))
    })
}

/// The wait-and-retry loop of one call of a lock or a read-write lock on `name`, through
/// the driver's `wait` ([`LockWait`]): `attempt()` makes one attempt and returns the
/// session it was sent for, the releases of `name` seen before it and its reply as the
/// engine took it in (`Ok(None)`: not granted now), or `None` if the call's deadline passed
/// first. A caller that waits listens for releases of this name only: other names'
/// releases neither wake it nor reach this session. It registers once the name is found
/// taken (then tries again at once, so a release in between is not missed). `last` gets
/// the last failure (the timeout's source).
pub(super) fn attempts(
    inner: &EngineHandle,
    name: &LeaseName,
    mut wait: LockWait,
    cancel: Option<&Cancel>,
    last: &mut Option<Error>,
    mut attempt: impl FnMut() -> Result<Option<(SessionId, u64, Result<Option<Acquire>>)>>,
) -> Result<Option<(SessionId, Term)>> {
    let mut waiting: Option<WaitingForRelease> = None;
    loop {
        let Some((id, seen, r)) = attempt()? else {
            return Ok(None);
        };
        let expired = matches!(r, Err(Error::SessionExpired { .. }));
        let coming = expired && inner.will_reopen();
        let step = wait.on_reply(r, coming, inner.now(), crate::rand::jitter);
        *last = wait.take_last();
        let next = match step {
            Step::Acquired(term) => return Ok(Some((id, term))),
            Step::Busy => return Ok(None),
            Step::Fail(e) => return Err(e),
            Step::WaitForReleases => {
                waiting = Some(WaitingForRelease::new(inner, name));
                continue;
            }
            Step::RetryNow => continue,
            Step::RetryAt(at) => at,
        };
        inner.wait_for_change(next, cancel, |v| v.releases_of(name) != seen);
        if wait.timed_out(inner.now()) {
            drop(waiting);
            return Ok(None);
        }
    }
}

/// Registers a lock caller waiting for a release of `name` while it lives.
pub(super) struct WaitingForRelease<'a> {
    inner: &'a EngineHandle,
    name: &'a LeaseName,
}

impl<'a> WaitingForRelease<'a> {
    pub(super) fn new(inner: &'a EngineHandle, name: &'a LeaseName) -> Self {
        inner.wait_for_release(name);
        WaitingForRelease { inner, name }
    }
}

impl Drop for WaitingForRelease<'_> {
    fn drop(&mut self) {
        self.inner.stop_waiting(self.name);
    }
}

/// A held lock. Dropping it ends the term at once and releases the lock on the backend from
/// the session's work queue (never network I/O on the dropping thread);
/// [`LockGuard::unlock`] releases it before returning. It is `Send`, so it may be dropped
/// on another thread.
///
/// Check [`LockGuard::is_valid`] (or pass [`LockGuard::token`] to the protected resource)
/// before acting on the lock: it ends without the guard being dropped if the session is lost.
pub struct LockGuard {
    pub(super) inner: EngineHandle,
    handle: HandleId,
    pub(super) session: SessionId,
    pub(super) term: Term,
    events: Receiver<Event>,
    done: bool,
    /// When the guard was made (for the hold time metric).
    acquired: Instant,
}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &LeaseName {
        &self.term.name
    }

    /// The term's fencing token.
    pub fn token(&self) -> Token {
        self.term.token
    }

    /// The term as granted (its `remaining` is from the acquire reply).
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// Whether the lock is still held: the session is live and the term's local deadline is
    /// ahead.
    pub fn is_valid(&self) -> bool {
        self.inner
            .lock_is_valid(&self.session, &self.term.name, self.term.token)
    }

    /// How long the lock stays valid from now if no keep-alive succeeds meanwhile (each one
    /// that does moves this ahead), or `None` if it is not valid now. A protected write that
    /// would take longer should not start.
    ///
    /// ```
    /// # let session = simba_lease::Session::connect("memory://", simba_lease::Config::default())?;
    /// let guard = session.lock("jobs")?;
    /// let left = guard.valid_for().expect("held");
    /// assert!(left <= session.config().lease());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn valid_for(&self) -> Option<Duration> {
        self.inner
            .lock_valid_for(&self.session, &self.term.name, self.term.token)
    }

    /// The fencing token if the lock is still held ([`LockGuard::is_valid`]), otherwise
    /// [`Error::LeaseLost`]: `let token = guard.check()?;` before every protected write.
    pub fn check(&self) -> Result<Token> {
        if self.is_valid() {
            Ok(self.term.token)
        } else {
            Err(Error::LeaseLost {
                name: self.term.name.clone(),
                token: self.term.token,
            })
        }
    }

    /// Receives [`Event::LockLost`] if the lock is lost before the guard is dropped.
    pub fn lost(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Releases the lock now, reporting a backend failure (dropping the guard only logs it).
    ///
    /// A term already lost gives [`Error::LeaseLost`]: lost locally (its deadline passed,
    /// reported by [`Event::LockLost`] first if the engine had not yet), or found gone by
    /// the backend's release (reported as `LockLost` with
    /// [`LossReason::Missing`](crate::LossReason::Missing)). Either way the loss is reported
    /// exactly once.
    pub fn unlock(mut self) -> Result<()> {
        let r = self.release(true);
        // A `LockLost` it reported has reached the session's callbacks when it returns.
        self.inner.wait_delivered(self.handle);
        r
    }

    /// Ends the term locally; releases it on the backend now if `wait`, else queues the
    /// release on the session's work queue.
    fn release(&mut self, wait: bool) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let inner = &self.inner;
        let now = inner.now();
        crate::engine::metrics::lock_hold(now.saturating_duration_since(self.acquired));
        let (id, term, h) = (&self.session, &self.term, self.handle);
        // A term of a replaced (expired) session was lost and reported with it.
        let token = inner.end_lock_term(id, h, term);
        let r = token.and_then(|token| {
            if !wait {
                inner.release_later(id, &term.name, token);
                return Ok(());
            }
            match inner.release_now(id, &term.name, token)? {
                true => Ok(()),
                false => Err(inner.lock_lost_on_release(id, h, term)),
            }
        });
        inner.drop_listeners(self.handle);
        inner.unreserve(&self.term.name, self.handle);
        r
    }
}

impl Drop for LockGuard {
    /// Ends the term at once; the backend release runs on the session's work queue.
    fn drop(&mut self) {
        match self.release(false) {
            Ok(()) => {}
            Err(e @ Error::LeaseLost { .. }) => log::debug!("dropped a lost lock: {}", e.report()),
            Err(e) => log::warn!("releasing lock {} failed: {}", self.term.name, e.report()),
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("term", &self.term)
            .finish()
    }
}
