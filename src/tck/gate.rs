//! A backend wrapper for engine cases: holds `open_session` calls back on demand, so a case
//! can act while an expired session is being reopened.

use crate::error::Result;
use crate::spi::{
    Acquire, KeepAlive, LeaseBackend, NotifySink, Queued, SessionGrant, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Token};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Forwards every call to the backend it wraps; `open_session` waits while opens are held
/// (at most the given patience, then it proceeds).
pub struct GatedOpens {
    inner: Arc<dyn LeaseBackend>,
    held: Mutex<bool>,
    changed: Condvar,
    patience: Duration,
}

impl GatedOpens {
    /// Wraps `inner`; opens pass until [`GatedOpens::hold`].
    pub fn new(inner: Arc<dyn LeaseBackend>, patience: Duration) -> Self {
        GatedOpens {
            inner,
            held: Mutex::new(false),
            changed: Condvar::new(),
            patience,
        }
    }

    /// Makes `open_session` wait from now on.
    pub fn hold(&self) {
        *self.held.lock() = true;
    }

    /// Lets waiting and future `open_session` calls through.
    pub fn pass(&self) {
        *self.held.lock() = false;
        self.changed.notify_all();
    }
}

impl LeaseBackend for GatedOpens {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        let until = Instant::now() + self.patience;
        let mut held = self.held.lock();
        while *held && !self.changed.wait_until(&mut held, until).timed_out() {}
        drop(held);
        self.inner.open_session(lease, metadata)
    }
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        self.inner.keep_alive(session, lease)
    }
    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.inner.close_session(session)
    }
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.inner.acquire(session, name)
    }
    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        self.inner.release(session, name, token)
    }
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.inner.owner(name)
    }
    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        self.inner.join(session, group)
    }
    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.inner.leave(session, group)
    }
    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        self.inner.members(group)
    }
    fn purge_expired(&self) -> Result<usize> {
        self.inner.purge_expired()
    }
    fn supports_queues(&self) -> bool {
        self.inner.supports_queues()
    }
    fn supports_values(&self) -> bool {
        self.inner.supports_values()
    }
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: crate::Token,
        value: &str,
    ) -> crate::Result<bool> {
        self.inner.set_value(session, name, token, value)
    }
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> crate::Result<crate::spi::Acquire> {
        self.inner.acquire_with_value(session, name, value)
    }
    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        self.inner.acquire_queued(session, name, patience)
    }
    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.inner.leave_queue(session, name)
    }
    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.inner.queue(name)
    }
    fn job_claims_end_with_session(&self) -> bool {
        self.inner.job_claims_end_with_session()
    }
    fn supports_jobs(&self) -> bool {
        self.inner.supports_jobs()
    }
    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> crate::Result<crate::spi::JobClaim> {
        self.inner.claim_job(session, name, at_most)
    }
    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> crate::Result<bool> {
        self.inner.finish_job(session, name, token, at_least)
    }

    fn list(&self) -> Result<crate::spi::Listing> {
        self.inner.list()
    }
    fn ping(&self) -> Result<()> {
        self.inner.ping()
    }
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        self.inner.subscribe(sink)
    }
}
