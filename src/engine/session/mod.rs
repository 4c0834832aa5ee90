//! `Session`: the threads around the core: its own keep-alive thread, and the process's
//! shared work and event pools and timer ([`super::executor`]).
//!
//! Here: the public [`Session`] and the session's state types; `state` reads and changes
//! that state and dispatches the core's outputs, `threads` runs the keep-alive, reopen and
//! queued work, `close` ends it all.

use super::config::Config;
use super::core::{Core, HandleId, Health, State, Task, Timing};
use super::driver::reserve::Reserved;
use super::driver::{self, reopen, Route};
use super::event::Event;
use super::executor::{Pool, Serial, Tick, Timer};
use super::guarded::PanicGuard;
use super::handle::EngineHandle;
use super::listeners::{Listeners, SESSION};
use super::router::{Interest, Router};
use crate::error::{Error, Result};
use crate::spi::{LeaseBackend, Notification, SessionGrant, SessionSpec};
use crate::types::{Clock, SystemClock};
use crate::types::{GroupName, LeaseName, SessionId, Term};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod close;
mod state;
mod threads;

/// The state of a session, as [`Session::state`] reports it.
pub use super::core::State as SessionState;

/// Work for the session's work queue.
enum Work {
    /// Work an output of the core asked for, for backend session `SessionId`.
    Core(SessionId, driver::Work),
    Leave(SessionId, GroupName),
    Join(SessionId, GroupName),
    Reopen,
}

/// What the core and the local lock table share under one mutex.
pub(crate) struct Shared {
    pub(super) core: Core,
    /// Names held or being taken by a lock, read-write lock or election handle of this
    /// session, with the thread that asked (locks are not reentrant: a lock of a name its
    /// own thread holds fails instead of waiting).
    pub(super) reserved: Reserved,
    /// Groups joined through live [`Membership`](crate::Membership) guards, with their count;
    /// re-joined when the session is reopened.
    pub(super) joined: driver::groups::Joined,
    /// The term value of each election candidate that has one (see
    /// [`Election::set_value`](crate::Election::set_value)): a new term starts with it.
    pub(super) values: BTreeMap<HandleId, String>,
    /// Counts the changes of `values` (the engine's write of a value that changed during an
    /// attempt checks it was the last).
    pub(super) value_changes: u64,
    /// A reopen was queued and has not finished.
    reopening: bool,
    /// What the router delivers to this session (the core's interest at the last dispatch).
    interest: Interest,
    /// When the ticker wakes next on its own (`None`: only when woken).
    ticker_at: Option<Instant>,
    /// The keep-alive thread of the current backend session: each backend session gets its
    /// own, so a keep-alive hanging for an expired session never delays its successor's.
    keep_alive: Sender<KeepAliveJob>,
}

/// A keep-alive to send for a session, recorded at the given instant; `None` stops the thread.
type KeepAliveJob = Option<(SessionId, Instant)>;

pub(crate) struct Inner {
    /// This session's state itself, for the jobs it queues.
    me: std::sync::Weak<Inner>,
    pub(crate) backend: Arc<dyn LeaseBackend>,
    clock: SystemClock,
    pub(crate) config: Config,
    shared: Mutex<Shared>,
    changed: Condvar,
    pub(crate) listeners: Listeners,
    /// Backend work, run in order on the shared work pool.
    work: Arc<Serial>,
    /// This session's key in the process's [`Timer`].
    timer: AtomicU64,
    next_handle: AtomicU64,
    closed: AtomicBool,
    /// Stopped like a crashed process (`Session::abandon`): queued work is dropped.
    crashed: AtomicBool,
    /// A reopen after expiry failed with an error retrying cannot fix: expiry is terminal.
    reopen_failed: AtomicBool,
    /// Delivers the backend's notifications of the names this session is interested in.
    router: Arc<Router>,
    route: std::sync::atomic::AtomicU64,
}

/// A session on a backend: one keep-alive thread, and the elections, locks, observers and
/// groups opened on it.
///
/// The session renews itself every `renew_interval`. Its local deadline is
/// `send instant + remaining × (1 − drift)` of the last successful keep-alive; a failing
/// keep-alive moves it to [`SessionState::Jeopardy`], and at the deadline it is lost
/// ([`SessionState::Expired`]) even while a backend call hangs. An expired session is never
/// revived: open a new one. Dropping a session closes it (deleting the backend session from
/// its work queue; [`Session::close`] waits for that).
///
/// ```
/// use simba_lease::{Config, Session, backends::MemoryBackend};
/// use std::sync::Arc;
/// let backend = Arc::new(MemoryBackend::new());
/// let session = Session::open(backend, Config::default())?;
/// let guard = session.try_lock("nightly-report")?.expect("nobody else holds it");
/// assert!(guard.is_valid());
/// println!("fencing token {}", guard.token());
/// drop(guard);
/// session.close()?;
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub struct Session {
    pub(crate) inner: EngineHandle,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.inner.0.id())
            .field("backend", &self.inner.0.backend.kind())
            .field("state", &self.state())
            .finish()
    }
}

/// Opens a backend session for `config`: with its lock-delay when it has one (a backend
/// without lock-delay then fails with `Unsupported`, never ignoring it).
pub(super) fn open_backend_session(
    backend: &dyn LeaseBackend,
    config: &Config,
) -> Result<SessionGrant> {
    if config.lock_delay().is_zero() {
        backend.open_session(config.lease(), config.metadata())
    } else {
        backend.open(
            &SessionSpec::new(config.lease(), config.metadata()).lock_delay(config.lock_delay()),
        )
    }
}

impl Session {
    /// Opens a session on `backend` (one backend call) and starts its threads.
    pub fn open(backend: Arc<dyn LeaseBackend>, config: Config) -> Result<Session> {
        if config.fair_locks() && !backend.supports_queues() {
            return Err(Error::Unsupported {
                operation: "fair locks (waiting queues)",
                backend: backend.kind(),
            });
        }
        if !config.lock_delay().is_zero() && !backend.supports_lock_delay() {
            return Err(Error::Unsupported {
                operation: "lock-delay",
                backend: backend.kind(),
            });
        }
        // One subscription per backend and process, shared by its sessions.
        let router = Router::for_backend(&backend)?;
        // A panic in a backend call becomes an error; the session's threads live on.
        let backend: Arc<dyn LeaseBackend> = Arc::new(PanicGuard(backend));
        let clock = SystemClock;
        let sent = clock.now();
        let grant = open_backend_session(&*backend, &config)?;
        let timing = Timing {
            lease: config.lease(),
            renew: config.renew_interval(),
            retry: config.retry_interval(),
            drift: config.drift(),
            lock_delay: config.lock_delay(),
        };
        let core = Core::new(
            timing,
            grant.id.clone(),
            sent,
            grant.remaining,
            crate::rand::u64(),
        );
        let (ka_tx, ka_rx) = crossbeam_channel::unbounded();
        let config_retry = config.retry_interval();
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            backend,
            clock,
            config,
            shared: Mutex::new(Shared {
                core,
                reserved: Reserved::default(),
                joined: BTreeMap::new(),
                values: BTreeMap::new(),
                value_changes: 0,
                reopening: false,
                interest: Interest::default(),
                ticker_at: None,
                keep_alive: ka_tx,
            }),
            changed: Condvar::new(),
            listeners: Listeners::new(config_retry),
            work: Pool::work().serial(),
            timer: AtomicU64::new(0),
            next_handle: AtomicU64::new(SESSION + 1),
            closed: AtomicBool::new(false),
            crashed: AtomicBool::new(false),
            reopen_failed: AtomicBool::new(false),
            router,
            route: std::sync::atomic::AtomicU64::new(0),
        });
        let key = inner.router.add(Arc::downgrade(&inner));
        inner.route.store(key, Ordering::SeqCst);
        let result = inner.spawn_keep_alive(&inner.id(), ka_rx);
        // The timer ticks it at once, then whenever something is due.
        let target: std::sync::Weak<dyn Tick> = Arc::downgrade(&(inner.clone() as Arc<dyn Tick>));
        inner
            .timer
            .store(Timer::global().add(target), Ordering::SeqCst);
        let session = Session {
            inner: EngineHandle(inner),
        };
        result.map(|()| session)
    }

    /// The current backend session's id (a new one after a reopen).
    pub fn id(&self) -> SessionId {
        self.inner.0.id()
    }

    /// The configuration the session was opened with.
    pub fn config(&self) -> &Config {
        &self.inner.0.config
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.inner.0.backend
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.inner.0.shared.lock().core.state()
    }

    /// Lease health now: time left, last keep-alive round trip and slack, failures in a row.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::sync::Arc;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let health = session.health();
    /// assert!(health.valid_for > std::time::Duration::ZERO);
    /// assert_eq!(health.failures, 0);
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn health(&self) -> Health {
        let now = self.inner.0.now();
        self.inner.0.shared.lock().core.health(now)
    }

    /// Every event of this session and its handles, from now on, in order.
    pub fn events(&self) -> Receiver<Event> {
        self.inner.0.listeners.channel(SESSION)
    }

    /// Calls `f` with every event of this session and its handles, in order, on a thread of
    /// the process's event pool (never under an internal lock). `f` has a queue of its own:
    /// if it blocks, it delays only its own later events, never a channel or another
    /// callback. It should not block (a run longer than the retry interval is logged):
    /// hand slow work, such as a backend call, to a thread of your own.
    /// [`close`](Self::close), [`Election::resign`](crate::Election::resign) and
    /// [`LockGuard::unlock`](crate::LockGuard::unlock) return once their final events
    /// reached the callbacks (waiting at most the lease, or 5 s if longer; not at all when
    /// called from an event callback, and not again for a callback that made an earlier wait
    /// run out). Do not call them while holding a mutex that a callback takes: the call then
    /// waits out the bound.
    pub fn on_event(&self, f: impl FnMut(&Event) + Send + 'static) {
        self.inner.0.listeners.callback(SESSION, f)
    }

    /// Waits until the session is [`SessionState::Valid`] or `timeout` passes; errors if it
    /// closed or expired for good (with `reopen_on_expiry`, it waits for the new session).
    pub fn wait_valid(&self, timeout: Duration) -> Result<()> {
        self.wait_valid_until(Some(timeout), None)
    }

    /// [`wait_valid`](Self::wait_valid) without a deadline when `timeout` is `None`, ended
    /// early by `cancel` ([`Error::Cancelled`]).
    pub fn wait_valid_cancellable(
        &self,
        timeout: Option<Duration>,
        cancel: &super::Cancel,
    ) -> Result<()> {
        self.wait_valid_until(timeout, Some(cancel))
    }

    fn wait_valid_until(
        &self,
        timeout: Option<Duration>,
        cancel: Option<&super::Cancel>,
    ) -> Result<()> {
        const OP: &str = "waiting for the session to be valid";
        // A timeout too large for an `Instant` means no deadline.
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut s = self.inner.0.shared.lock();
        loop {
            super::Cancel::check(cancel, OP)?;
            self.inner.0.check_waitable(&s)?;
            if s.core.state() == State::Valid {
                return Ok(());
            }
            if !self.inner.0.wait_or_cancel(&mut s, until, cancel) {
                return Err(Error::Timeout {
                    operation: OP,
                    after: timeout.unwrap_or_default(),
                    source: None,
                });
            }
        }
    }

    /// Closes the session: ends every term (events `Revoked`/`LockLost` with
    /// [`LossReason::Closed`](crate::LossReason::Closed), then [`Event::Closed`]), deletes the
    /// backend session (which frees its leases and memberships) and waits until the final
    /// events were delivered. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.inner.0.close()
    }

    /// Abandons the session as a crashed process would: its threads stop and nothing more
    /// reaches the backend (no release, no close, queued work dropped), so its terms and
    /// memberships stay held there until the session expires (other sessions then take
    /// over after the lease). For failover drills and tests of take-over; a program that
    /// means to stop uses [`Session::close`].
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let backend = Arc::new(MemoryBackend::new());
    /// let lease = Duration::from_millis(300);
    /// let config = Config::builder().lease(lease).renew_interval(lease / 3).build()?;
    /// let a = Session::open(backend.clone(), config.clone())?;
    /// let guard = a.lock("job")?;
    /// std::mem::forget(guard);
    /// a.abandon();
    /// let b = Session::open(backend, config)?;
    /// // Held by the abandoned session until it expires on the backend.
    /// assert!(b.try_lock("job")?.is_none());
    /// assert!(b.lock_timeout("job", Duration::from_secs(10)).is_ok());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn abandon(self) {
        self.inner.0.crashed.store(true, Ordering::SeqCst);
        self.inner.0.closed.store(true, Ordering::SeqCst);
        self.inner.0.stop_threads();
    }
}

impl Drop for Session {
    /// Closes the session like [`Session::close`], except that the backend session is
    /// deleted on the session's work queue, not on the dropping thread (no network I/O in
    /// `Drop`); call `close()` to wait for it and see its result.
    fn drop(&mut self) {
        let _ = self.inner.0.close_with(false);
    }
}

impl Tick for Inner {
    /// Advances the core: keep-alives to send, tasks due, deadlines passed.
    fn tick(&self) -> Option<Instant> {
        let mut s = self.shared.lock();
        s.core.tick(self.now());
        self.dispatch(&mut s, false);
        s.ticker_at = s.core.next_wake();
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        s.ticker_at
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("backend", &self.backend.kind())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
