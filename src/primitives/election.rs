//! Leader election: a candidate that campaigns until it resigns.

use super::IntoLeaseName;
use crate::engine::handle::{EngineHandle, EventCallback, HandleId, Holder};
use crate::engine::{Cancel, Session};
use crate::error::{Error, Result};
use crate::types::{LeaseName, Term};
use crate::Event;
use crossbeam_channel::Receiver;
use std::time::{Duration, Instant};

impl Session {
    /// Enters the election `name` as a candidate. The candidate tries at once, then every
    /// `renew_interval / 2` plus jitter, or at once when the backend notifies a release.
    /// Winning emits [`Event::Elected`]; losing the term emits [`Event::Revoked`] and the
    /// candidate campaigns again until it resigns or is dropped.
    ///
    /// One candidate per name and session: a second one (or a lock of the same name held
    /// through this session) gives [`Error::AlreadyHeld`].
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let election = session.election("scheduler")?;
    /// let term = election.wait_elected(Duration::from_secs(5))?;
    /// println!("leading with token {}", term.token);
    /// election.resign()?;
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn election(&self, name: impl IntoLeaseName) -> Result<Election> {
        self.election_inner(name.into_lease_name()?, None, None)
    }

    /// Like [`Session::election`], with a callback that receives the election's events in
    /// order (on a queue of its own, see [`Session::on_event`]), starting with the first.
    pub fn election_with(
        &self,
        name: impl IntoLeaseName,
        on_event: impl FnMut(&Event) + Send + 'static,
    ) -> Result<Election> {
        self.election_inner(name.into_lease_name()?, Some(Box::new(on_event)), None)
    }

    pub(super) fn election_inner(
        &self,
        name: LeaseName,
        cb: Option<EventCallback>,
        value: Option<String>,
    ) -> Result<Election> {
        let inner = &self.inner;
        // Listening before the candidate enters: its first attempt may win at once.
        let (h, events) = inner.listen(cb);
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            if let Err(e) = inner.set_value(h, &name, Some(v)) {
                inner.drop_listeners(h);
                return Err(e);
            }
        }
        if let Err(e) = enter(inner, &name, h) {
            let _ = inner.set_value(h, &name, None);
            inner.drop_listeners(h);
            return Err(e);
        }
        Ok(Election {
            inner: inner.clone(),
            handle: h,
            name,
            events,
        })
    }
}

/// Reserves `name` for candidate `h` in this session and registers it with the engine; the
/// session joins the election's candidates group (on the work queue).
fn enter(inner: &EngineHandle, name: &LeaseName, h: HandleId) -> Result<()> {
    inner.enter_candidate(name, h, &super::leader_value::candidates_group(name))
}

/// A candidate in an election. Dropping it resigns.
pub struct Election {
    pub(super) inner: EngineHandle,
    pub(super) handle: HandleId,
    pub(super) name: LeaseName,
    events: Receiver<Event>,
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &LeaseName {
        &self.name
    }

    /// This candidate's events ([`Event::Elected`], [`Event::Revoked`]) in order. Clones of
    /// the receiver share one queue.
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// The term this candidate holds, if it is the leader now (locally valid).
    pub fn term(&self) -> Option<Term> {
        self.valid_term().map(|(t, _)| t)
    }

    /// How long this candidate's term stays valid from now if no keep-alive succeeds
    /// meanwhile, or `None` if it does not lead now (see [`LockGuard::valid_for`](crate::LockGuard::valid_for)).
    pub fn valid_for(&self) -> Option<Duration> {
        self.valid_term().map(|(_, left)| left)
    }

    /// The term this candidate leads with and how long it stays valid from now, read
    /// together (two calls to [`term`](Self::term) and [`valid_for`](Self::valid_for) could
    /// straddle a loss and a new term), or `None` if it does not lead now.
    ///
    /// ```
    /// # let session = simba_lease::Session::connect("memory://", simba_lease::Config::default())?;
    /// let election = session.election("chief")?;
    /// let term = election.wait_elected(std::time::Duration::from_secs(5))?;
    /// let (now, left) = election.valid_term().expect("leads");
    /// assert_eq!(now.token, term.token);
    /// assert!(left <= session.config().lease());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn valid_term(&self) -> Option<(Term, Duration)> {
        self.inner
            .term_and_validity(&self.name, Holder::Election(self.handle))
    }

    /// The term if this candidate leads now, otherwise [`Error::NotLeader`]:
    /// `let term = election.check()?;` before acting as the leader.
    pub fn check(&self) -> Result<Term> {
        self.term().ok_or_else(|| Error::NotLeader {
            name: self.name.clone(),
        })
    }

    /// Whether this candidate is the leader now.
    pub fn is_leader(&self) -> bool {
        self.term().is_some()
    }

    /// Waits until this candidate is elected, or `timeout` passes ([`Error::Timeout`]).
    /// Across an expiry it keeps waiting for the reopened session (unless expiry is
    /// terminal, then [`Error::SessionExpired`]).
    pub fn wait_elected(&self, timeout: Duration) -> Result<Term> {
        self.wait_elected_until(Some(timeout), None)
    }

    /// [`wait_elected`](Self::wait_elected) without a deadline when `timeout` is `None`,
    /// ended early by `cancel` ([`Error::Cancelled`]); the candidate keeps campaigning.
    pub fn wait_elected_cancellable(
        &self,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Result<Term> {
        self.wait_elected_until(timeout, Some(cancel))
    }

    fn wait_elected_until(
        &self,
        timeout: Option<Duration>,
        cancel: Option<&Cancel>,
    ) -> Result<Term> {
        // A timeout too large for an `Instant` means no deadline.
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        match self
            .inner
            .wait_elected(&self.name, self.handle, until, cancel)?
        {
            Some(term) => Ok(term),
            None => Err(Error::Timeout {
                operation: "waiting to be elected",
                after: timeout.unwrap_or_default(),
                source: None,
            }),
        }
    }

    /// Leaves the election: a leader releases its term (emitting [`Event::Revoked`] with
    /// [`LossReason::Resigned`](crate::LossReason::Resigned)) so another candidate can take
    /// over at once. Idempotent. Like [`Session::close`], it returns once the `Revoked`
    /// reached the callbacks of this candidate and of the session (a caller that resigns,
    /// then acts, finds its listeners already told), waiting at most the lease (or 5 s if
    /// longer); called from an event callback, it does not wait. Dropping the handle waits for
    /// nothing.
    ///
    /// If this candidate's last term was already lost, it says so with
    /// [`Error::LeaseLost`]: lost locally (reported by `Revoked` with its true reason, first
    /// if the engine had not yet), or found gone by the backend's release. This session's
    /// next candidate for the name waits two retry intervals before competing again, so
    /// candidates of other sessions get their turn on backends that only poll.
    ///
    /// The handle stays usable: [`Election::wait_elected`] then fails with
    /// [`Error::NotCandidate`] until [`Election::campaign`] enters again.
    pub fn resign(&self) -> Result<()> {
        let r = self.withdraw(true);
        // As `close()`: the final `Revoked` has reached this candidate's and the session's
        // callbacks when `resign` returns (bounded; not waited for from a callback).
        self.inner.wait_delivered(self.handle);
        r
    }

    /// Enters the election again after [`Election::resign`] (nothing to do if this handle
    /// still campaigns). [`Error::AlreadyHeld`] if this session took the name meanwhile.
    ///
    /// ```
    /// use simba_lease::{Config, Error, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let config = Config::builder()
    ///     .lease(Duration::from_secs(3))
    ///     .renew_interval(Duration::from_secs(1))
    ///     .build()?;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), config)?;
    /// let election = session.election("scheduler")?;
    /// election.wait_elected(Duration::from_secs(5))?;
    /// election.resign()?;
    /// let err = election.wait_elected(Duration::from_secs(5)).unwrap_err();
    /// assert!(matches!(err, Error::NotCandidate { .. }));
    /// election.campaign()?;
    /// election.wait_elected(Duration::from_secs(5))?;
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn campaign(&self) -> Result<()> {
        enter(&self.inner, &self.name, self.handle)
    }

    /// Withdraws the candidate; a term is released now if `wait`, else on the work queue.
    fn withdraw(&self, wait: bool) -> Result<()> {
        let group = super::leader_value::candidates_group(&self.name);
        (self.inner).withdraw_candidate(self.handle, &self.name, &group, wait)
    }
}

impl Drop for Election {
    /// Resigns; a leader's term ends at once and is released on the session's work queue.
    fn drop(&mut self) {
        match self.withdraw(false) {
            Ok(()) => {}
            Err(e @ Error::LeaseLost { .. }) => log::debug!("dropped a candidate: {}", e.report()),
            Err(e) => log::warn!("resigning from {} failed: {}", self.name, e.report()),
        }
        let _ = self.inner.set_value(self.handle, &self.name, None);
        self.inner.drop_listeners(self.handle);
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}
