//! `Session`: the threads around the core: its own keep-alive thread, and the process's
//! shared work and event pools and timer ([`super::executor`]).

use super::config::Config;
use super::core::{Core, HandleId, Health, State, Task, Timing};
use super::driver::{self, reopen, Route};
use super::event::Event;
use super::executor::{Pool, Serial, Tick, Timer};
use super::guarded::PanicGuard;
use super::handle::EngineHandle;
use super::listeners::{Listeners, SESSION};
use super::router::{Interest, Router};
use crate::error::{Error, Result};
use crate::spi::{LeaseBackend, Notification, SessionGrant};
use crate::types::{Clock, SystemClock};
use crate::types::{GroupName, LeaseName, SessionId, Term, Token};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Names in use by a handle of this session (locks are not reentrant).
    /// Names held or being taken by a lock or election handle of this session, with the
    /// thread that asked (a lock of a name its own thread holds fails instead of waiting).
    pub(super) reserved: BTreeMap<LeaseName, (HandleId, std::thread::ThreadId)>,
    /// Groups joined through live [`Membership`](crate::Membership) guards, with their count;
    /// re-joined when the session is reopened.
    pub(super) joined: BTreeMap<GroupName, usize>,
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
    timing: Timing,
    shared: Mutex<Shared>,
    changed: Condvar,
    pub(crate) listeners: Listeners,
    /// Backend work, run in order on the shared work pool.
    work: Arc<Serial>,
    /// This session's key in the process's [`Timer`].
    timer: AtomicU64,
    next_handle: AtomicU64,
    closed: AtomicBool,
    /// Stopped like a crashed process (TCK): queued work is dropped.
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
fn open_backend_session(backend: &dyn LeaseBackend, config: &Config) -> Result<SessionGrant> {
    if config.lock_delay().is_zero() {
        backend.open_session(config.lease(), config.metadata())
    } else {
        backend.open_session_with_delay(config.lease(), config.metadata(), config.lock_delay())
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
            timing,
            shared: Mutex::new(Shared {
                core,
                reserved: BTreeMap::new(),
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

    /// Stops the session's threads without closing it on the backend, as a crashed process
    /// would: its leases stay held until the session expires there.
    #[cfg(feature = "tck")]
    #[doc(hidden)]
    pub fn crash(self) {
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

impl Inner {
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A backend notification routed to this session: wakes only what it concerns.
    pub(crate) fn notified(&self, n: &Notification) {
        let now = self.now();
        let mut s = self.shared.lock();
        if s.core.notify(n, now) {
            self.dispatch(&mut s, true);
        }
    }

    /// The current backend session's id.
    pub(crate) fn id(&self) -> SessionId {
        self.shared.lock().core.session().clone()
    }

    /// Like [`Inner::with_core`], but only if `id` is still the current session: replies
    /// for an expired session must not touch its successor.
    pub(super) fn with_session<R>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Core) -> R,
    ) -> Option<R> {
        self.with_session_shared(id, |s| f(&mut s.core))
    }

    /// [`Inner::with_session`] with everything the lock guards.
    fn with_session_shared<R>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Shared) -> R,
    ) -> Option<R> {
        let mut s = self.shared.lock();
        if !driver::accepts(s.core.session(), id) {
            return None;
        }
        let r = f(&mut s);
        self.dispatch(&mut s, true);
        Some(r)
    }

    /// Checks a term just granted to `handle` against the highest token this process saw
    /// for its name on this backend, and reports a regression (to `handle`'s listeners if
    /// given: an election's; a lock's `lost()` channel carries only losses).
    pub(super) fn check_token(&self, core: &mut Core, handle: Option<HandleId>, term: &Term) {
        if let Some(seen) = self
            .router
            .tokens
            .note(&term.name, term.token, core.session())
        {
            core.token_regressed(handle, term, seen);
        }
    }

    pub(crate) fn next_handle(&self) -> HandleId {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn lock_shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// Runs `f` on the core, then dispatches its outputs (still under the lock, so events keep
    /// their order; every send is non-blocking) and wakes the ticker and lock waiters.
    pub(super) fn with_core<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        let mut s = self.shared.lock();
        let r = f(&mut s.core);
        self.dispatch(&mut s, true);
        drop(s);
        r
    }

    /// Ends what passed its local deadline by now (as the timer would on its next tick), so
    /// that what the caller reads next is valid now; dispatches the losses.
    pub(super) fn settle(&self, s: &mut Shared) {
        s.core.settle(self.now());
        // Nothing ended: nothing to send, and no waiter to wake (two waiters settling in
        // turn would wake each other for ever).
        if s.core.has_outputs() {
            self.dispatch(s, true);
        }
    }

    /// Sends the core's outputs on; wakes the ticker unless the ticker itself dispatches.
    fn dispatch(&self, s: &mut Shared, wake_ticker: bool) {
        let now = self.now();
        let id = s.core.session().clone();
        for o in s.core.take_outputs() {
            match driver::route(o) {
                Route::KeepAlive => {
                    let _ = s.keep_alive.send(Some((id.clone(), now)));
                }
                Route::Work(w) => self.queue(Work::Core(id.clone(), w)),
                Route::Emit(h, e) => self.deliver(h, e),
            }
        }
        if reopen::should_reopen(s.core.state(), self.flags(s)) {
            s.reopening = true;
            self.queue(Work::Reopen);
        }
        if s.core.interest_changed() {
            let interest = s.core.interest();
            let key = self.route.load(Ordering::SeqCst);
            if interest != s.interest {
                self.router.update(key, &s.interest, &interest);
                s.interest = interest;
            }
        }
        // The ticker only needs waking when there is something to do before it wakes anyway.
        if wake_ticker {
            let next = s.core.next_wake();
            if next.is_some_and(|t| s.ticker_at.is_none_or(|at| t < at)) {
                s.ticker_at = next;
                Timer::global().set(self.timer.load(Ordering::SeqCst), next);
            }
        }
        self.changed.notify_all();
    }

    /// Waits for a change of the session's state until `until` (false once it passed),
    /// waking at least every 10 ms with a `cancel` token (the caller checks it): a wake-up
    /// to look at the token counts as a change.
    pub(super) fn wait_or_cancel(
        &self,
        s: &mut MutexGuard<'_, Shared>,
        until: Option<Instant>,
        cancel: Option<&super::Cancel>,
    ) -> bool {
        if cancel.is_some() {
            let woken = !self
                .changed
                .wait_until(s, super::Cancel::wake_at(until))
                .timed_out();
            return woken || until.is_none_or(|u| Instant::now() < u);
        }
        match until {
            Some(t) => !self.changed.wait_until(s, t).timed_out(),
            None => {
                self.changed.wait(s);
                true
            }
        }
    }

    /// What the driver's decisions need to know of this session besides its core.
    fn flags(&self, s: &Shared) -> reopen::Flags {
        reopen::Flags {
            reopen_on_expiry: self.config.reopen_on_expiry(),
            reopening: s.reopening,
            closed: self.closed.load(Ordering::SeqCst),
            failed: self.reopen_failed.load(Ordering::SeqCst),
        }
    }

    /// Whether an expired session will be reopened (waiting on it can still succeed).
    pub(super) fn reopen_coming(&self, s: &Shared) -> bool {
        reopen::reopen_coming(self.flags(s))
    }

    /// Whether waiting on this session can still succeed: fails once it is closed, or
    /// expired for good (an expired session that will be reopened is worth waiting for).
    pub(super) fn check_waitable(&self, s: &Shared) -> Result<()> {
        match s.core.check_live() {
            Err(Error::SessionExpired { .. }) if self.reopen_coming(s) => Ok(()),
            other => other,
        }
    }

    /// Forgets a dropped handle's listeners (its channels got every event already; events
    /// queued for its callbacks still run).
    pub(crate) fn drop_listeners(&self, handle: HandleId) {
        self.listeners.remove(handle);
    }

    /// Frees a local reservation and wakes waiters.
    pub(crate) fn unreserve(&self, name: &LeaseName, handle: HandleId) {
        let mut s = self.shared.lock();
        if s.reserved.get(name).map(|r| r.0) == Some(handle) {
            s.reserved.remove(name);
        }
        drop(s);
        self.changed.notify_all();
    }

    /// Queues the release of a term of session `id` on the work queue (for `Drop`, which
    /// never does network I/O on the caller's thread).
    pub(crate) fn release_later(&self, id: &SessionId, name: &LeaseName, token: Token) {
        self.queue(Work::Core(
            id.clone(),
            driver::Work::Release(name.clone(), token),
        ));
    }

    /// Queues leaving `group` as session `id` on the work queue (for `Drop`).
    pub(crate) fn leave_later(&self, id: &SessionId, group: &GroupName) {
        self.queue(Work::Leave(id.clone(), group.clone()));
    }

    /// Queues joining `group` as session `id` on the work queue (an election's candidates).
    pub(super) fn join_later(&self, id: &SessionId, group: &GroupName) {
        self.queue(Work::Join(id.clone(), group.clone()));
    }

    /// Releases a term of session `id` on the backend from the calling thread.
    pub(crate) fn release_now(
        &self,
        id: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        let r = self.backend.release(id, name, token);
        self.with_session(id, |c| c.on_released(name, r.is_ok()));
        r
    }

    /// Starts a keep-alive thread serving `rx`.
    fn spawn_keep_alive(
        self: &Arc<Self>,
        id: &SessionId,
        rx: Receiver<KeepAliveJob>,
    ) -> Result<()> {
        let i = self.clone();
        std::thread::Builder::new()
            .name(format!(
                "simba-keepalive-{}",
                &id.as_str()[..8.min(id.as_str().len())]
            ))
            .spawn(move || i.keep_alive_loop(rx))
            .map(drop)
            .map_err(|e| Error::backend("spawning a session thread", e))
    }

    fn keep_alive_loop(self: Arc<Self>, rx: Receiver<KeepAliveJob>) {
        let lease = self.config.lease();
        for job in rx {
            let Some((id, sent)) = job else { break };
            let reply = self.backend.keep_alive(&id, lease);
            let now = self.now();
            let outcome = match &reply {
                Ok(_) => Some(true),
                Err(Error::SessionExpired { .. }) => None,
                Err(_) => Some(false),
            };
            let kind = self.backend.kind();
            self.with_session(&id, |c| {
                let left = c.deadline().saturating_duration_since(sent);
                c.on_keep_alive(sent, now, reply);
                match outcome {
                    Some(true) => crate::engine::metrics::keep_alive(
                        kind,
                        now.saturating_duration_since(sent),
                        left,
                        c.deadline().saturating_duration_since(now),
                    ),
                    Some(false) => crate::engine::metrics::keep_alive_failed(kind),
                    None => {}
                }
            });
        }
    }

    /// Opens a new backend session after an expiry and moves the registrations onto it,
    /// retrying every retry interval until it succeeds or the session is closed.
    fn reopen(self: &Arc<Self>) {
        let retry = self.config.retry_interval();
        while !self.closed.load(Ordering::SeqCst) {
            let sent = self.now();
            match open_backend_session(&*self.backend, &self.config) {
                Ok(grant) => {
                    let now = self.now();
                    let mut s = self.shared.lock();
                    if self.closed.load(Ordering::SeqCst) {
                        drop(s);
                        let _ = self.backend.close_session(&grant.id);
                        return;
                    }
                    let old = s.core.session().clone();
                    let handover = s.core.handover();
                    let id = grant.id.clone();
                    let mut core = Core::new(
                        self.timing,
                        grant.id,
                        sent,
                        grant.remaining,
                        crate::rand::u64(),
                    );
                    core.take_over(handover, old.clone(), now);
                    s.core = core;
                    s.reopening = false;
                    // A fresh keep-alive thread; the old one ends once its (maybe hanging)
                    // call returns, and its reply is dropped as a predecessor's.
                    let (tx, rx) = crossbeam_channel::unbounded();
                    let _ = std::mem::replace(&mut s.keep_alive, tx).send(None);
                    if let Err(e) = self.spawn_keep_alive(&id, rx) {
                        log::error!("no keep-alive thread for session {id}: {e}");
                    }
                    let groups = reopen::rejoin(&s.joined);
                    self.dispatch(&mut s, true);
                    drop(s);
                    log::info!("session {old} expired; reopened as {id}");
                    for g in groups {
                        if let Err(e) = self.backend.join(&id, &g) {
                            log::warn!("re-joining {g} as {id} failed: {}", e.report());
                        }
                        // Left meanwhile (its leave may have reached the backend first).
                        if !self.shared.lock().joined.contains_key(&g) {
                            let _ = self.backend.leave(&id, &g);
                        }
                    }
                    return;
                }
                Err(e) => match reopen::after_open_error(&e) {
                    reopen::AfterOpenError::Terminal => {
                        // Retrying cannot help (e.g. the server now grants less than the
                        // lease): expiry becomes terminal, and waiters get `SessionExpired`.
                        log::error!(
                            "reopening an expired session failed for good: {}",
                            e.report()
                        );
                        self.shared.lock().reopening = false;
                        self.reopen_failed.store(true, Ordering::SeqCst);
                        self.changed.notify_all();
                        return;
                    }
                    step => {
                        // TLS and authentication failures are fixed outside this process (a
                        // renewed certificate, a restored password): retried, loudly.
                        let text = e.report();
                        if step == reopen::AfterOpenError::RetryLoudly {
                            log::error!("reopening an expired session failed, retrying: {text}");
                        } else {
                            log::warn!("reopening an expired session failed, retrying: {text}");
                        }
                        std::thread::sleep(driver::retry_delay(retry, crate::rand::jitter));
                    }
                },
            }
        }
    }

    /// Queues backend work on this session's serial work queue.
    fn queue(&self, w: Work) {
        if let Some(i) = self.me.upgrade() {
            self.work.push(move || i.run_work(w));
        }
    }

    /// Delivers an event: sent on its channels now, queued for its callbacks (in order).
    fn deliver(&self, handle: Option<HandleId>, e: Event) {
        crate::engine::metrics::event(&e);
        self.listeners.deliver(handle, &e);
    }

    /// How long a call that ends a term (close, resign) waits for the callbacks to have
    /// handled the final events: long enough for any callback that does not block.
    fn delivery_bound(&self) -> Duration {
        self.config.lease().max(Duration::from_secs(5))
    }

    /// Waits (bounded) until the callbacks of the session and of `handle` have handled every
    /// event emitted so far, unless called from one of this session's callbacks.
    pub(crate) fn wait_delivered(&self, handle: HandleId) {
        if Listeners::in_callback() {
            return;
        }
        let callbacks = self.listeners.callbacks_of(handle);
        let bound = self.delivery_bound();
        if !Listeners::wait_for(&callbacks, Instant::now() + bound) {
            log::warn!(
                "an event callback did not return within {} ms: not waited for any longer",
                bound.as_millis()
            );
        }
    }

    fn run_work(self: Arc<Self>, w: Work) {
        if self.crashed.load(Ordering::SeqCst) {
            return;
        }
        {
            match w {
                Work::Core(id, driver::Work::Run(Task::Attempt(h, name))) => {
                    self.attempt(id, h, name)
                }
                Work::Core(id, driver::Work::Run(Task::Owner(h, name))) => {
                    let reply = self.backend.owner(&name);
                    let now = self.now();
                    self.with_session(&id, |c| c.on_owner(h, now, reply));
                }
                Work::Core(id, driver::Work::Run(Task::Members(h, group))) => {
                    let reply = self.backend.members(&group);
                    let now = self.now();
                    self.with_session(&id, |c| c.on_members(h, now, reply));
                }
                Work::Core(id, driver::Work::Release(name, token)) => {
                    if let Err(e) = self.release_now(&id, &name, token) {
                        log::warn!("releasing {name} (token {token}) failed: {}", e.report());
                    }
                }
                Work::Leave(id, group) => {
                    if let Err(e) = self.backend.leave(&id, &group) {
                        log::warn!("leaving {group} failed: {}", e.report());
                    }
                }
                Work::Join(id, group) => {
                    match self.backend.join(&id, &group) {
                        Ok(()) => {}
                        // Re-joined by the reopen that follows, if any.
                        Err(e @ Error::SessionExpired { .. }) => {
                            log::debug!("joining {group}: {}", e.report())
                        }
                        Err(e) => log::warn!("joining {group} failed: {}", e.report()),
                    }
                    // Left meanwhile (its leave may have reached the backend first).
                    if !self.shared.lock().joined.contains_key(&group) {
                        let _ = self.backend.leave(&id, &group);
                    }
                }
                Work::Core(id, driver::Work::CloseBackend) => {
                    if let Err(e) = self.backend.close_session(&id) {
                        log::warn!("closing session {id} failed: {}", e.report());
                    }
                }
                Work::Reopen => self.reopen(),
            }
        }
    }

    /// A candidate's attempt, with the candidate's term value. A value changed while the
    /// attempt was in flight is set on the term it won (the change and the adoption are
    /// ordered by the lock: whichever comes second sees the other), and set again if it
    /// changed once more while that write was in flight (whose arrival may then follow the
    /// newer value's own write).
    fn attempt(&self, id: SessionId, h: HandleId, name: LeaseName) {
        let value = self
            .shared
            .lock()
            .values
            .get(&h)
            .cloned()
            .unwrap_or_default();
        let sent = self.now();
        let reply = if value.is_empty() {
            self.backend.acquire(&id, &name)
        } else {
            self.backend.acquire_with_value(&id, &name, &value)
        };
        let granted = match &reply {
            Ok(crate::spi::Acquire::Acquired(t)) => Some(t.token),
            _ => None,
        };
        // A reply for an expired predecessor is dropped: its grants die with it.
        let fix = self.with_session_shared(&id, |s| {
            // Read under the lock: a reply that waited for it is judged when it is taken in.
            let now = self.now();
            s.core.on_attempt(h, &name, sent, now, reply);
            let held = s.core.term_of(&name, super::Holder::Election(h));
            if let Some(t) = held.as_ref().filter(|t| Some(t.token) == granted) {
                self.check_token(&mut s.core, Some(h), t);
            }
            let current = s.values.get(&h).map_or("", String::as_str);
            match (granted, held) {
                (Some(g), Some(t)) if t.token == g && current != value => {
                    Some((g, current.to_owned(), s.value_changes))
                }
                _ => None,
            }
        });
        let Some((token, mut v, mut seen)) = fix.flatten() else {
            return;
        };
        for _ in 0..16 {
            if let Err(e) = self.backend.set_value(&id, &name, token, &v) {
                log::warn!("setting the value of {name} failed: {}", e.report());
                return;
            }
            let s = self.shared.lock();
            let held = s.core.session() == &id
                && s.core
                    .term_of(&name, super::Holder::Election(h))
                    .is_some_and(|t| t.token == token);
            if !held || s.value_changes == seen {
                return;
            }
            seen = s.value_changes;
            match s.values.get(&h).map_or("", String::as_str) {
                current if current == v => return,
                current => current.clone_into(&mut v),
            }
        }
    }

    fn stop_threads(&self) {
        let had = std::mem::take(&mut self.shared.lock().interest);
        self.router.remove(self.route.load(Ordering::SeqCst), &had);
        Timer::global().remove(self.timer.load(Ordering::SeqCst));
        // The keep-alive thread may be stuck in a backend call: it exits after it returns.
        let _ = self.shared.lock().keep_alive.send(None);
        // Every channel got the final events: forgetting the senders disconnects the
        // receivers once drained. The callbacks' final events are waited for (bounded),
        // unless called from an event callback (of any session: two sessions' callbacks
        // closing each other must not wait for each other).
        let in_callback = Listeners::in_callback();
        let callbacks = self.listeners.clear();
        let bound = self.delivery_bound();
        if !in_callback && !Listeners::wait_for(&callbacks, Instant::now() + bound) {
            log::warn!(
                "closing: an event callback did not return within {} ms: not waited for",
                bound.as_millis()
            );
        }
        self.changed.notify_all();
    }

    fn close(&self) -> Result<()> {
        self.close_with(true)
    }

    /// Closes the session; the backend session is deleted on this thread if `wait`, else
    /// queued on the work queue (which then stops).
    fn close_with(&self, wait: bool) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let was_live = self.with_core(|c| {
            let live = c.state().is_live();
            c.close();
            live
        });
        let id = self.id();
        let result = match (was_live, wait) {
            (true, true) => self.backend.close_session(&id),
            (true, false) => {
                self.queue(Work::Core(id, driver::Work::CloseBackend));
                Ok(())
            }
            (false, _) => Ok(()),
        };
        self.stop_threads();
        result
    }
}
