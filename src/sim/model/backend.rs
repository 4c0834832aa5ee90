//! The simulation's model as a [`LeaseBackend`] on a [`Clock`]: the TCK runs on it
//! (`tests/sim_model.rs`), so the model the simulation checks the engine against keeps the
//! contract every backend keeps.

use super::Model;
use crate::error::Result;
use crate::spi::options::check_lease;
use crate::spi::{
    Acquire, JobClaim, KeepAlive, LeaseBackend, Queued, RwAcquire, RwMode, RwState, SessionGrant,
    SessionSpec,
};
use crate::types::limits::check_lock_delay;
use crate::types::{Clock, GroupName, LeaseName, Member, Owner, SessionId, SystemClock, Token};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The simulation's model backend behind the SPI, its true time read from a clock (the
/// model's own clock runs at that rate: no premise is on).
///
/// ```
/// use simba_lease::sim::ModelBackend;
/// use simba_lease::spi::{Acquire, LeaseBackend};
/// use simba_lease::{LeaseName, Metadata};
/// use std::time::Duration;
/// let b = ModelBackend::new();
/// let s = b.open_session(Duration::from_secs(10), &Metadata::default()).unwrap().id;
/// let name = LeaseName::new("leader").unwrap();
/// assert!(matches!(b.acquire(&s, &name).unwrap(), Acquire::Acquired(_)));
/// ```
pub struct ModelBackend {
    model: Mutex<Model>,
    clock: Arc<dyn Clock>,
    start: Instant,
}

impl ModelBackend {
    /// A model on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// A model on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        let start = clock.now();
        ModelBackend {
            model: Mutex::new(Model::new()),
            clock,
            start,
        }
    }

    /// The model's true time now (ns since it was made).
    fn t(&self) -> u64 {
        let since = self.clock.now().saturating_duration_since(self.start);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs `f` on the model at the true time now.
    fn at<R>(&self, f: impl FnOnce(&mut Model, u64) -> R) -> R {
        let t = self.t();
        f(&mut self.model.lock(), t)
    }
}

impl Default for ModelBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ModelBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelBackend").finish_non_exhaustive()
    }
}

impl LeaseBackend for ModelBackend {
    fn kind(&self) -> &'static str {
        "model"
    }

    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
        check_lease(spec.lease)?;
        check_lock_delay(spec.lock_delay)?;
        self.at(|m, t| {
            let (id, remaining) = m.open_with_delay(t, spec.lease, spec.lock_delay);
            m.set_metadata(&id, spec.metadata);
            Ok(SessionGrant { id, remaining })
        })
    }

    fn supports_lock_delay(&self) -> bool {
        true
    }

    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        check_lease(lease)?;
        self.at(|m, t| m.keep_alive(t, session, lease).0)
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.at(|m, t| m.close_session(t, session));
        Ok(())
    }

    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.at(|m, t| m.acquire(t, session, name))
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        Ok(self.at(|m, t| m.release(t, session, name, token)))
    }

    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        Ok(self.at(|m, t| m.owner(t, name)))
    }

    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        self.at(|m, t| m.join(t, session, group))
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.at(|m, t| m.leave(t, session, group))
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        Ok(self.at(|m, t| m.members(t, group)))
    }

    fn purge_expired(&self) -> Result<usize> {
        Ok(self.at(|m, t| m.purge_expired(t)))
    }

    fn supports_values(&self) -> bool {
        true
    }

    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        crate::types::check_value(value)?;
        Ok(self.at(|m, t| m.set_value(t, session, name, token, value)))
    }

    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        crate::types::check_value(value)?;
        self.at(|m, t| m.acquire_with_value(t, session, name, value))
    }

    fn supports_queues(&self) -> bool {
        true
    }

    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        self.at(|m, t| m.acquire_queued(t, session, name, patience).map(|(q, _)| q))
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        Ok(self.at(|m, t| m.leave_queue(t, session, name).0))
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        Ok(self.at(|m, t| m.queue(t, name)))
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        self.at(|m, t| m.claim_job(t, session, name, at_most))
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        Ok(self.at(|m, t| m.finish_job(t, session, name, token, at_least)))
    }

    fn supports_rw_locks(&self) -> bool {
        true
    }

    fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        self.at(|m, t| m.acquire_rw(t, session, name, mode, patience))
    }

    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        Ok(self.at(|m, t| m.release_rw(t, session, name, mode, token)))
    }

    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        Ok(self.at(|m, _| m.leave_rw_queue(session, name)))
    }

    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        Ok(self.at(|m, t| m.rw_state(t, name)))
    }
}
