//! `Session`: the threads around the core (keep-alive, work, ticker, events).

use super::clock::{Clock, SystemClock};
use super::config::Config;
use super::core::{Core, HandleId, Health, Output, State, Task, Timing};
use super::event::Event;
use super::guarded::PanicGuard;
use super::listeners::{Delivery, Listeners, SESSION};
use super::router::{Interest, Router};
use crate::error::{Error, Result};
use crate::spi::{LeaseBackend, Notification};
use crate::types::{GroupName, LeaseName, SessionId, Token};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// The state of a session, as [`Session::state`] reports it.
pub use super::core::State as SessionState;

/// Work for the session's work thread.
enum Work {
    Run(SessionId, Task),
    Release(SessionId, LeaseName, Token),
    Leave(SessionId, GroupName),
    CloseBackend(SessionId),
    Reopen,
    Stop,
}

/// What the core and the local lock table share under one mutex.
pub(crate) struct Shared {
    pub(crate) core: Core,
    /// Names in use by a handle of this session (locks are not reentrant).
    pub(crate) reserved: BTreeMap<LeaseName, HandleId>,
    /// Groups joined through live [`Membership`](crate::Membership) guards, with their count;
    /// re-joined when the session is reopened.
    pub(crate) joined: BTreeMap<GroupName, usize>,
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
    pub(crate) backend: Arc<dyn LeaseBackend>,
    clock: SystemClock,
    pub(crate) config: Config,
    timing: Timing,
    shared: Mutex<Shared>,
    changed: Condvar,
    pub(crate) listeners: Listeners,
    wake_tx: Sender<()>,
    work_tx: Sender<Work>,
    events_tx: Sender<Delivery>,
    next_handle: AtomicU64,
    closed: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    event_thread: Mutex<Option<(ThreadId, JoinHandle<()>)>>,
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
/// its work thread; [`Session::close`] waits for that).
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
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.inner.id())
            .field("backend", &self.inner.backend.kind())
            .field("state", &self.state())
            .finish()
    }
}

impl Session {
    /// Opens a session on `backend` (one backend call) and starts its threads.
    pub fn open(backend: Arc<dyn LeaseBackend>, config: Config) -> Result<Session> {
        // One subscription per backend and process, shared by its sessions.
        let router = Router::for_backend(&backend)?;
        // A panic in a backend call becomes an error; the session's threads live on.
        let backend: Arc<dyn LeaseBackend> = Arc::new(PanicGuard(backend));
        let clock = SystemClock;
        let sent = clock.now();
        let grant = backend.open_session(config.lease(), config.metadata())?;
        let timing = Timing {
            lease: config.lease(),
            renew: config.renew_interval(),
            retry: config.retry_interval(),
            drift: config.drift(),
        };
        let core = Core::new(
            timing,
            grant.id.clone(),
            sent,
            grant.remaining,
            crate::rand::u64(),
        );
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        let (ka_tx, ka_rx) = crossbeam_channel::unbounded();
        let (work_tx, work_rx) = crossbeam_channel::unbounded();
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let short = grant.id.as_str()[..8.min(grant.id.as_str().len())].to_owned();
        let inner = Arc::new(Inner {
            backend,
            clock,
            config,
            timing,
            shared: Mutex::new(Shared {
                core,
                reserved: BTreeMap::new(),
                joined: BTreeMap::new(),
                reopening: false,
                interest: Interest::default(),
                ticker_at: None,
                keep_alive: ka_tx,
            }),
            changed: Condvar::new(),
            listeners: Listeners::default(),
            wake_tx,
            work_tx,
            events_tx,
            next_handle: AtomicU64::new(SESSION + 1),
            closed: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            event_thread: Mutex::new(None),
            router,
            route: std::sync::atomic::AtomicU64::new(0),
        });
        let spawn = |what: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(format!("simba-{what}-{short}"))
                .spawn(f)
                .map_err(|e| Error::backend("spawning a session thread", e))
        };
        let key = inner.router.add(Arc::downgrade(&inner));
        inner.route.store(key, Ordering::SeqCst);
        let result = (|| {
            let i = inner.clone();
            let ev = spawn("events", Box::new(move || i.listeners.run(events_rx)))?;
            *inner.event_thread.lock() = Some((ev.thread().id(), ev));
            let t1 = inner.spawn_keep_alive(&inner.id(), ka_rx)?;
            let i = inner.clone();
            let t2 = spawn("work", Box::new(move || i.work_loop(work_rx)))?;
            let i = inner.clone();
            let t3 = spawn("ticker", Box::new(move || i.ticker_loop(wake_rx)))?;
            inner.threads.lock().extend([t1, t2, t3]);
            Ok(())
        })();
        let session = Session { inner };
        result.map(|()| session)
    }

    /// Builds the backend from `url` (see [`connect`](crate::connect)) and opens a session.
    ///
    /// ```
    /// use simba_lease::{Config, Session};
    /// let session = Session::connect("memory://", Config::default())?;
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn connect(url: &str, config: Config) -> Result<Session> {
        Session::open(crate::backends::connect(url)?, config)
    }

    /// The current backend session's id (a new one after a reopen).
    pub fn id(&self) -> SessionId {
        self.inner.id()
    }

    /// The configuration the session was opened with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.inner.backend
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.inner.shared.lock().core.state()
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
        let now = self.inner.now();
        self.inner.shared.lock().core.health(now)
    }

    /// Every event of this session and its handles, from now on, in order.
    pub fn events(&self) -> Receiver<Event> {
        self.inner.listeners.channel(SESSION)
    }

    /// Calls `f` with every event of this session and its handles, in order, on the session's
    /// event thread (never under an internal lock).
    pub fn on_event(&self, f: impl FnMut(&Event) + Send + 'static) {
        self.inner.listeners.callback(SESSION, f)
    }

    /// Waits until the session is [`SessionState::Valid`] or `timeout` passes; errors if it
    /// closed or expired for good (with `reopen_on_expiry`, it waits for the new session).
    pub fn wait_valid(&self, timeout: Duration) -> Result<()> {
        // A timeout too large for an `Instant` means no deadline.
        let until = Instant::now().checked_add(timeout);
        let mut s = self.inner.shared.lock();
        loop {
            self.inner.check_waitable(&s)?;
            if s.core.state() == State::Valid {
                return Ok(());
            }
            if !self.inner.wait(&mut s, until) {
                return Err(Error::Timeout {
                    operation: "waiting for the session to be valid",
                    after: timeout,
                });
            }
        }
    }

    /// Closes the session: ends every term (events `Revoked`/`LockLost` with
    /// [`LossReason::Closed`](crate::LossReason::Closed), then [`Event::Closed`]), deletes the
    /// backend session (which frees its leases and memberships) and waits until the final
    /// events were delivered. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.inner.close()
    }

    /// Stops the session's threads without closing it on the backend, as a crashed process
    /// would: its leases stay held until the session expires there.
    #[cfg(feature = "tck")]
    #[doc(hidden)]
    pub fn crash(self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.stop_threads();
    }
}

impl Drop for Session {
    /// Closes the session like [`Session::close`], except that the backend session is
    /// deleted on the session's work thread, not on the dropping thread (no network I/O in
    /// `Drop`); call `close()` to wait for it and see its result.
    fn drop(&mut self) {
        let _ = self.inner.close_with(false);
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
    pub(crate) fn with_session<R>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Core) -> R,
    ) -> Option<R> {
        let mut s = self.shared.lock();
        if s.core.session() != id {
            return None;
        }
        let r = f(&mut s.core);
        self.dispatch(&mut s, true);
        Some(r)
    }

    pub(crate) fn next_handle(&self) -> HandleId {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn lock_shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// Runs `f` on the core, then dispatches its outputs (still under the lock, so events keep
    /// their order; every send is non-blocking) and wakes the ticker and lock waiters.
    pub(crate) fn with_core<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        let mut s = self.shared.lock();
        let r = f(&mut s.core);
        self.dispatch(&mut s, true);
        drop(s);
        r
    }

    /// Sends the core's outputs on; wakes the ticker unless the ticker itself dispatches.
    fn dispatch(&self, s: &mut Shared, wake_ticker: bool) {
        let now = self.now();
        let id = s.core.session().clone();
        for o in s.core.take_outputs() {
            let work = |w| self.work_tx.send(w).map_err(drop);
            let _ = match o {
                Output::KeepAlive => s.keep_alive.send(Some((id.clone(), now))).map_err(drop),
                Output::Run(t) => work(Work::Run(id.clone(), t)),
                Output::Release(n, t) => work(Work::Release(id.clone(), n, t)),
                Output::CloseBackend => work(Work::CloseBackend(id.clone())),
                Output::Emit(h, e) => self.events_tx.send(Delivery::Event(h, e)).map_err(drop),
            };
        }
        if s.core.state() == State::Expired
            && self.config.reopen_on_expiry()
            && !s.reopening
            && !self.closed.load(Ordering::SeqCst)
        {
            s.reopening = true;
            let _ = self.work_tx.send(Work::Reopen);
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
                let _ = self.wake_tx.send(());
            }
        }
        self.changed.notify_all();
    }

    /// Waits on the shared state until notified or `until` (forever if `None`).
    /// Returns false on timeout.
    pub(crate) fn wait(&self, s: &mut MutexGuard<'_, Shared>, until: Option<Instant>) -> bool {
        match until {
            Some(t) => !self.changed.wait_until(s, t).timed_out(),
            None => {
                self.changed.wait(s);
                true
            }
        }
    }

    /// Whether waiting on this session can still succeed: fails once it is closed, or
    /// expired for good (an expired session that will be reopened is worth waiting for).
    pub(crate) fn check_waitable(&self, s: &Shared) -> Result<()> {
        match s.core.check_live() {
            Err(Error::SessionExpired { .. })
                if self.config.reopen_on_expiry() && !self.closed.load(Ordering::SeqCst) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Forgets a dropped handle's listeners after the events already queued for it.
    pub(crate) fn drop_listeners(&self, handle: HandleId) {
        if self.closed.load(Ordering::SeqCst)
            || self.events_tx.send(Delivery::Remove(handle)).is_err()
        {
            self.listeners.remove(handle);
        }
    }

    /// Frees a local reservation and wakes waiters.
    pub(crate) fn unreserve(&self, name: &LeaseName, handle: HandleId) {
        let mut s = self.shared.lock();
        if s.reserved.get(name) == Some(&handle) {
            s.reserved.remove(name);
        }
        drop(s);
        self.changed.notify_all();
    }

    /// Queues the release of a term of session `id` on the work thread (for `Drop`, which
    /// never does network I/O on the caller's thread).
    pub(crate) fn release_later(&self, id: &SessionId, name: &LeaseName, token: Token) {
        let work = Work::Release(id.clone(), name.clone(), token);
        if self.work_tx.send(work).is_err() {
            // The session is closed: closing freed the term already.
            self.with_session(id, |c| c.on_released(name, true));
        }
    }

    /// Queues leaving `group` as session `id` on the work thread (for `Drop`).
    pub(crate) fn leave_later(&self, id: &SessionId, group: &GroupName) {
        let _ = self.work_tx.send(Work::Leave(id.clone(), group.clone()));
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

    fn ticker_loop(self: Arc<Self>, wake: Receiver<()>) {
        loop {
            // Wake-ups queued so far are all served by the tick below; one arriving after
            // this point stays queued and makes the wait return at once.
            while wake.try_recv().is_ok() {}
            let next = {
                let mut s = self.shared.lock();
                s.core.tick(self.now());
                self.dispatch(&mut s, false);
                s.ticker_at = s.core.next_wake();
                s.ticker_at
            };
            if self.closed.load(Ordering::SeqCst) {
                break;
            }
            let r = match next {
                Some(at) => wake
                    .recv_timeout(at.saturating_duration_since(self.now()))
                    .map_err(|e| e.is_disconnected()),
                None => wake.recv().map_err(|_| true),
            };
            if r == Err(true) {
                break;
            }
        }
    }

    /// Starts a keep-alive thread serving `rx`.
    fn spawn_keep_alive(
        self: &Arc<Self>,
        id: &SessionId,
        rx: Receiver<KeepAliveJob>,
    ) -> Result<JoinHandle<()>> {
        let i = self.clone();
        std::thread::Builder::new()
            .name(format!(
                "simba-keepalive-{}",
                &id.as_str()[..8.min(id.as_str().len())]
            ))
            .spawn(move || i.keep_alive_loop(rx))
            .map_err(|e| Error::backend("spawning a session thread", e))
    }

    fn keep_alive_loop(self: Arc<Self>, rx: Receiver<KeepAliveJob>) {
        let lease = self.config.lease();
        for job in rx {
            let Some((id, sent)) = job else { break };
            let reply = self.backend.keep_alive(&id, lease);
            let now = self.now();
            self.with_session(&id, |c| c.on_keep_alive(sent, now, reply));
        }
    }

    /// Opens a new backend session after an expiry and moves the registrations onto it,
    /// retrying every retry interval until it succeeds or the session is closed.
    fn reopen(self: &Arc<Self>) {
        let retry = self.config.retry_interval();
        while !self.closed.load(Ordering::SeqCst) {
            let sent = self.now();
            match self
                .backend
                .open_session(self.config.lease(), self.config.metadata())
            {
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
                    let groups: Vec<GroupName> = s.joined.keys().cloned().collect();
                    self.dispatch(&mut s, true);
                    drop(s);
                    log::info!("session {old} expired; reopened as {id}");
                    for g in groups {
                        if let Err(e) = self.backend.join(&id, &g) {
                            log::warn!("re-joining {g} as {id} failed: {e}");
                        }
                        // Left meanwhile (its leave may have reached the backend first).
                        if !self.shared.lock().joined.contains_key(&g) {
                            let _ = self.backend.leave(&id, &g);
                        }
                    }
                    return;
                }
                Err(e) => {
                    log::warn!("reopening an expired session failed, retrying: {e}");
                    std::thread::sleep(retry + crate::rand::jitter(retry / 2));
                }
            }
        }
    }

    fn work_loop(self: Arc<Self>, rx: Receiver<Work>) {
        for w in rx {
            match w {
                Work::Run(id, Task::Attempt(h, name)) => {
                    let sent = self.now();
                    let reply = self.backend.acquire(&id, &name);
                    let now = self.now();
                    // A reply for an expired predecessor is dropped: its grants die with it.
                    self.with_session(&id, |c| c.on_attempt(h, &name, sent, now, reply));
                }
                Work::Run(id, Task::Owner(h, name)) => {
                    let reply = self.backend.owner(&name);
                    let now = self.now();
                    self.with_session(&id, |c| c.on_owner(h, now, reply));
                }
                Work::Run(id, Task::Members(h, group)) => {
                    let reply = self.backend.members(&group);
                    let now = self.now();
                    self.with_session(&id, |c| c.on_members(h, now, reply));
                }
                Work::Release(id, name, token) => {
                    if let Err(e) = self.release_now(&id, &name, token) {
                        log::warn!("releasing {name} (token {token}) failed: {e}");
                    }
                }
                Work::Leave(id, group) => {
                    if let Err(e) = self.backend.leave(&id, &group) {
                        log::warn!("leaving {group} failed: {e}");
                    }
                }
                Work::CloseBackend(id) => {
                    if let Err(e) = self.backend.close_session(&id) {
                        log::warn!("closing session {id} failed: {e}");
                    }
                }
                Work::Reopen => self.reopen(),
                Work::Stop => break,
            }
        }
    }

    fn stop_threads(&self) {
        let had = std::mem::take(&mut self.shared.lock().interest);
        self.router.remove(self.route.load(Ordering::SeqCst), &had);
        let _ = self.shared.lock().keep_alive.send(None);
        let _ = self.work_tx.send(Work::Stop);
        let _ = self.wake_tx.send(());
        // The I/O threads may be stuck in a backend call: they exit after it returns.
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let is_ticker = t
                .thread()
                .name()
                .is_some_and(|n| n.starts_with("simba-ticker"));
            if is_ticker && t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        let _ = self.events_tx.send(Delivery::Stop);
        // Every receiver disconnects once the final events are delivered: the event thread
        // clears the listeners when it reaches Stop (it may be the caller, inside a callback).
        match self.event_thread.lock().take() {
            Some((id, t)) if id != std::thread::current().id() => {
                let _ = t.join();
            }
            Some(_) => {}
            None => self.listeners.clear(),
        }
        self.changed.notify_all();
    }

    fn close(&self) -> Result<()> {
        self.close_with(true)
    }

    /// Closes the session; the backend session is deleted on this thread if `wait`, else
    /// queued on the work thread (which then stops).
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
                let _ = self.work_tx.send(Work::CloseBackend(id));
                Ok(())
            }
            (false, _) => Ok(()),
        };
        self.stop_threads();
        result
    }
}
