//! A backend wrapper that turns a panic inside a backend call into an error, so a faulty
//! backend (or driver) never kills a session's keep-alive or work thread.

use crate::error::{Error, Result};
use crate::spi::{
    Acquire, JobClaim, KeepAlive, LeaseBackend, Listing, NotifySink, Queued, SessionGrant,
    Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Token};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// Forwards every call; a panic becomes [`Error::Backend`] naming the operation.
pub(crate) struct PanicGuard(pub(crate) Arc<dyn LeaseBackend>);

/// The message a panic carried, if it was a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".into())
}

fn guard<T>(operation: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = panic_message(&*payload);
        log::error!("the backend panicked while {operation}: {message}");
        Err(Error::backend(
            operation,
            format!("the backend panicked: {message}"),
        ))
    })
}

impl LeaseBackend for PanicGuard {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        guard("opening a session", || self.0.open_session(lease, metadata))
    }
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        guard("keeping a session alive", || {
            self.0.keep_alive(session, lease)
        })
    }
    fn close_session(&self, session: &SessionId) -> Result<()> {
        guard("closing a session", || self.0.close_session(session))
    }
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        guard("acquiring a lease", || self.0.acquire(session, name))
    }
    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        guard("releasing a lease", || self.0.release(session, name, token))
    }
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        guard("reading a lease's owner", || self.0.owner(name))
    }
    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        guard("joining a group", || self.0.join(session, group))
    }
    fn list(&self) -> Result<Listing> {
        guard("listing sessions, leases and groups", || self.0.list())
    }
    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        guard("leaving a group", || self.0.leave(session, group))
    }
    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        guard("reading a group's members", || self.0.members(group))
    }
    fn purge_expired(&self) -> Result<usize> {
        guard("purging expired sessions", || self.0.purge_expired())
    }
    fn supports_queues(&self) -> bool {
        self.0.supports_queues()
    }
    fn supports_values(&self) -> bool {
        self.0.supports_values()
    }
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        guard("setting a term value", || {
            self.0.set_value(session, name, token, value)
        })
    }
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        guard("acquiring a lease", || {
            self.0.acquire_with_value(session, name, value)
        })
    }
    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        guard("acquiring a lease in turn", || {
            self.0.acquire_queued(session, name, patience)
        })
    }
    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        guard("leaving a lease's queue", || {
            self.0.leave_queue(session, name)
        })
    }
    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        guard("reading a lease's queue", || self.0.queue(name))
    }
    fn job_claims_end_with_session(&self) -> bool {
        self.0.job_claims_end_with_session()
    }
    fn supports_jobs(&self) -> bool {
        self.0.supports_jobs()
    }
    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        guard("claiming a job", || {
            self.0.claim_job(session, name, at_most)
        })
    }
    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        guard("finishing a job", || {
            self.0.finish_job(session, name, token, at_least)
        })
    }
    fn ping(&self) -> Result<()> {
        guard("pinging", || self.0.ping())
    }
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        guard("subscribing to notifications", || self.0.subscribe(sink))
    }
}
