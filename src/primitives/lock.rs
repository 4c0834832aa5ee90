//! Distributed locks: `Session::lock`, `try_lock`, `lock_timeout` and the guard.

use super::guard::TermGuard;
use super::IntoLeaseName;
use crate::engine::handle::{timed_out, EngineHandle, Form, Spec, TermKind, Want, Won};
use crate::engine::{Cancel, Session};
use crate::error::Result;
use crate::types::{LeaseName, SessionId, Term, Token};
#[cfg(doc)]
use crate::Error;
use crossbeam_channel::Receiver;
use std::time::Duration;

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
        let op = "taking a lock";
        waited(take_lock(&self.inner, name, Form::Wait(None), op, None), op)
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
        take_lock(&self.inner, name, Form::Try, "taking a lock", None)
    }

    /// Takes the lock `name`, waiting at most `timeout`; [`Error::Timeout`] after that.
    pub fn lock_timeout(&self, name: impl IntoLeaseName, timeout: Duration) -> Result<LockGuard> {
        let name = name.into_lease_name()?;
        let (op, form) = ("waiting for a lock", Form::Wait(Some(timeout)));
        waited(take_lock(&self.inner, name, form, op, None), op)
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
        let op = "taking a lock";
        let r = take_lock(&self.inner, name, Form::Wait(timeout), op, Some(cancel));
        waited(r, op)
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
        self.inner.reads().queue(&name)
    }
}

/// Takes the lock `name` in `form` (plain or fair as the session's configuration says),
/// through the engine's acquire call.
fn take_lock(
    inner: &EngineHandle,
    name: LeaseName,
    form: Form,
    operation: &'static str,
    cancel: Option<&Cancel>,
) -> Result<Option<LockGuard>> {
    let want = match inner.config().fair_locks() {
        true => Want::FairLock,
        false => Want::Lock,
    };
    let spec = Spec {
        want,
        names: vec![name],
        form,
        operation,
    };
    Ok(inner
        .acquire(spec, cancel)?
        .map(|won| LockGuard::new(inner, won)))
}

/// The guard of a call that waits (it answers a term or an error, never "taken"; a "taken"
/// would read as its timeout).
pub(crate) fn waited<G>(r: Result<Option<G>>, operation: &'static str) -> Result<G> {
    r?.ok_or_else(|| timed_out(operation, Duration::MAX, None))
}

/// A held lock. Dropping it ends the term at once and releases the lock on the backend from
/// the session's work queue (never network I/O on the dropping thread);
/// [`LockGuard::unlock`] releases it before returning. It is `Send`, so it may be dropped
/// on another thread.
///
/// Check [`LockGuard::is_valid`] (or pass [`LockGuard::token`] to the protected resource)
/// before acting on the lock: it ends without the guard being dropped if the session is lost.
pub struct LockGuard {
    pub(super) g: TermGuard,
}

impl LockGuard {
    /// The guard of the term `won`.
    pub(crate) fn new(inner: &EngineHandle, won: Won) -> Self {
        LockGuard {
            g: TermGuard::new(inner, won, TermKind::Lock),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LeaseName {
        &self.g.term().name
    }

    /// The term's fencing token.
    pub fn token(&self) -> Token {
        self.g.term().token
    }

    /// The term as granted (its `remaining` is from the acquire reply).
    pub fn term(&self) -> &Term {
        self.g.term()
    }

    /// Whether the lock is still held: the session is live and the term's local deadline is
    /// ahead.
    pub fn is_valid(&self) -> bool {
        self.g.valid_for().is_some()
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
        self.g.valid_for()
    }

    /// The fencing token if the lock is still held ([`LockGuard::is_valid`]), otherwise
    /// [`Error::LeaseLost`]: `let token = guard.check()?;` before every protected write.
    pub fn check(&self) -> Result<Token> {
        self.g.check()
    }

    /// Receives [`Event::LockLost`] if the lock is lost before the guard is dropped.
    pub fn lost(&self) -> &Receiver<Event> {
        self.g.lost()
    }

    /// Releases the lock now, reporting a backend failure (dropping the guard only logs it).
    ///
    /// A term already lost gives [`Error::LeaseLost`]: lost locally (its deadline passed,
    /// reported by [`Event::LockLost`] first if the engine had not yet), or found gone by
    /// the backend's release (reported as `LockLost` with
    /// [`LossReason::Missing`](crate::LossReason::Missing)). Either way the loss is reported
    /// exactly once.
    pub fn unlock(self) -> Result<()> {
        self.g.unlock()
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("term", self.g.term())
            .finish()
    }
}
