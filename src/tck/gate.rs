//! A backend wrapper for engine cases: holds calls back on demand (opens, acquires,
//! keep-alives), counts them, and makes acquires fail, so a case can act while a session is
//! reopened, an acquire is in flight or the backend hangs.

use crate::error::{Error, Result};
use crate::spi::{
    Acquire, KeepAlive, LeaseBackend, NotifySink, Queued, SessionGrant, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Token};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One kind of call that can be held back: calls wait while it is held (at most the
/// patience, then they proceed), and are counted as they enter and leave.
#[derive(Default)]
pub struct Gate {
    held: Mutex<bool>,
    changed: Condvar,
    entered: AtomicUsize,
    left: AtomicUsize,
}

impl Gate {
    /// Makes calls wait from now on.
    pub fn hold(&self) {
        *self.held.lock() = true;
    }

    /// Lets waiting and future calls through.
    pub fn pass(&self) {
        *self.held.lock() = false;
        self.changed.notify_all();
    }

    /// How many calls entered so far.
    pub fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    /// How many calls returned so far.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::SeqCst)
    }

    fn through<R>(&self, patience: Duration, call: impl FnOnce() -> R) -> R {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + patience;
        let mut held = self.held.lock();
        while *held && !self.changed.wait_until(&mut held, until).timed_out() {}
        drop(held);
        let r = call();
        self.left.fetch_add(1, Ordering::SeqCst);
        r
    }
}

/// Forwards every call to the backend it wraps, through its gates.
pub struct GatedOpens {
    inner: parking_lot::RwLock<Arc<dyn LeaseBackend>>,
    /// `open_session`.
    pub opens: Gate,
    /// `acquire` and `acquire_with_value`.
    pub acquires: Gate,
    /// `keep_alive`.
    pub keep_alives: Gate,
    /// While set, `acquire` fails with a transient error instead of calling the backend.
    pub fail_acquires: AtomicBool,
    patience: Duration,
}

impl GatedOpens {
    /// Wraps `inner`; every call passes until a gate is held.
    pub fn new(inner: Arc<dyn LeaseBackend>, patience: Duration) -> Self {
        GatedOpens {
            inner: parking_lot::RwLock::new(inner),
            opens: Gate::default(),
            acquires: Gate::default(),
            keep_alives: Gate::default(),
            fail_acquires: AtomicBool::new(false),
            patience,
        }
    }

    /// Makes `open_session` wait from now on.
    pub fn hold(&self) {
        self.opens.hold();
    }

    /// Forwards every later call to `backend` instead (a server restarted without its data:
    /// its sessions and tokens are gone).
    pub fn replace(&self, backend: Arc<dyn LeaseBackend>) {
        *self.inner.write() = backend;
    }

    fn current(&self) -> Arc<dyn LeaseBackend> {
        self.inner.read().clone()
    }

    /// Lets waiting and future `open_session` calls through.
    pub fn pass(&self) {
        self.opens.pass();
    }

    fn acquire_through(&self, call: impl FnOnce() -> Result<Acquire>) -> Result<Acquire> {
        self.acquires.through(self.patience, || {
            if self.fail_acquires.load(Ordering::SeqCst) {
                return Err(Error::backend(
                    "acquiring (injected by the TCK)",
                    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected failure"),
                ));
            }
            call()
        })
    }
}

impl LeaseBackend for GatedOpens {
    fn kind(&self) -> &'static str {
        self.current().kind()
    }
    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        self.opens.through(self.patience, || {
            self.current().open_session(lease, metadata)
        })
    }
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        self.keep_alives
            .through(self.patience, || self.current().keep_alive(session, lease))
    }
    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.current().close_session(session)
    }
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.acquire_through(|| self.current().acquire(session, name))
    }
    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        self.current().release(session, name, token)
    }
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.current().owner(name)
    }
    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        self.current().join(session, group)
    }
    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.current().leave(session, group)
    }
    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        self.current().members(group)
    }
    fn purge_expired(&self) -> Result<usize> {
        self.current().purge_expired()
    }
    fn supports_queues(&self) -> bool {
        self.current().supports_queues()
    }
    fn supports_values(&self) -> bool {
        self.current().supports_values()
    }
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: crate::Token,
        value: &str,
    ) -> crate::Result<bool> {
        self.current().set_value(session, name, token, value)
    }
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> crate::Result<crate::spi::Acquire> {
        self.acquire_through(|| self.current().acquire_with_value(session, name, value))
    }
    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        self.current().acquire_queued(session, name, patience)
    }
    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.current().leave_queue(session, name)
    }
    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.current().queue(name)
    }
    fn job_claims_end_with_session(&self) -> bool {
        self.current().job_claims_end_with_session()
    }
    fn supports_jobs(&self) -> bool {
        self.current().supports_jobs()
    }
    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> crate::Result<crate::spi::JobClaim> {
        self.current().claim_job(session, name, at_most)
    }
    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> crate::Result<bool> {
        self.current().finish_job(session, name, token, at_least)
    }

    fn list(&self) -> Result<crate::spi::Listing> {
        self.current().list()
    }
    fn ping(&self) -> Result<()> {
        self.current().ping()
    }
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        self.current().subscribe(sink)
    }
}
