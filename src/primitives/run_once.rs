//! Run-once jobs: `Session::run_once`, for scheduled work across a fleet. Every node calls
//! it on its own schedule; the job runs on one node per window.
//!
//! A job's record lives in the backend apart from leases (same name rules, its own token
//! sequence). A claim is taken for at most `at_most` by the **backend's** clock: it ends then
//! even while the session is kept alive, so a hung job never blocks the name for good. Once
//! the job returns, the claim is finished: the name stays taken until `at_least` after the
//! claim began (backend clock again), so a fast job does not run again on a node whose
//! schedule fires a little later. Host clocks never matter.
//!
//! While the job runs, its claim is also bound to the session: if the session ends (closed,
//! expired, its process crashed), the claim ends with it and another node may run the job
//! (on a Redis Cluster, or Redis routed by slot, where the backend cannot see the session from
//! the job's slot, the claim lasts until `at_most` instead). After the job returned, the
//! name no longer depends on the session.

use super::IntoLeaseName;
use crate::engine::handle::{Claimed, EngineHandle};
use crate::engine::Session;
use crate::error::{Error, Result};
use crate::types::{LeaseName, SessionId, Token};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Checks the window of a run-once job: `at_most` from 1 ms to
/// [`Config::MAX_LEASE`](crate::Config::MAX_LEASE), `at_least` at most `at_most` (zero
/// frees the name as soon as the job returns). [`Error::InvalidConfig`] names the bad one.
pub fn check_job_window(at_most: Duration, at_least: Duration) -> Result<()> {
    crate::types::limits::check_at_most(at_most)?;
    if at_least > at_most {
        return Err(Error::config(
            "at_least",
            format!("{at_least:?} is longer than at_most ({at_most:?})"),
        ));
    }
    Ok(())
}

impl Session {
    /// Runs `job` if no other node runs job `name` now or ran it within its `at_least`;
    /// `Ok(None)` (without running it) otherwise.
    ///
    /// One backend call claims the job for at most `at_most`, by the backend's clock; the
    /// claim's fencing token is [`Job::token`] (it increases with every claim of `name`, so
    /// a resource can refuse a stale run). While `job` runs, [`Job::is_valid`] says whether
    /// the claim still holds: it turns false for good once `at_most` passed by this host's
    /// monotonic clock (measured conservatively from when the claim was *sent*, shortened by
    /// the session's drift) or the session is lost. After `job` returns, a second call
    /// finishes the claim: the name stays taken until `at_least` after the claim began, then
    /// any node may run the job again.
    ///
    /// If the claim ended before `job` returned (`at_most` passed, or the session was lost:
    /// the claim ended with it), the finish changes nothing and is logged: another node may
    /// already run the job. If the finish fails (a backend error), the name stays taken until
    /// `at_most`, which is never shorter than `at_least`, unless the session ends first.
    /// Either way `job`'s result is returned. If `job` panics, the panic goes on unwinding and
    /// the claim ends at `at_most` (or with the session). If the claim itself fails with a
    /// backend error (a timeout, a lost reply), it may still have been made: the name may
    /// then stay taken until `at_most` or the session's end, and the job did not run.
    ///
    /// Fails before any I/O with [`Error::InvalidName`] for a bad name and
    /// [`Error::InvalidConfig`] for an `at_most` under 1 ms or over
    /// [`Config::MAX_LEASE`](crate::Config::MAX_LEASE) or an `at_least` longer than
    /// `at_most`; with [`Error::SessionExpired`] while the session is lost; with
    /// [`Error::Unsupported`] on a backend without jobs.
    ///
    /// ```
    /// use simba_lease::{Config, Session};
    /// use std::time::Duration;
    /// let a = Session::connect("memory://", Config::default())?;
    /// let b = Session::open(a.backend().clone(), Config::default())?;
    /// let (at_most, at_least) = (Duration::from_secs(60), Duration::from_secs(30));
    /// let ran = a.run_once("nightly-report", at_most, at_least, |job| {
    ///     assert!(job.is_valid());
    ///     // Another node's schedule fires meanwhile: the job is taken.
    ///     let elsewhere = b.run_once("nightly-report", at_most, at_least, |_| ()).unwrap();
    ///     assert!(elsewhere.is_none());
    ///     job.token() // e.g. handed to the resource the job writes
    /// })?;
    /// assert!(ran.is_some());
    /// // Done fast: still taken for the rest of `at_least`.
    /// assert!(b.run_once("nightly-report", at_most, at_least, |_| ())?.is_none());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn run_once<T>(
        &self,
        name: impl IntoLeaseName,
        at_most: Duration,
        at_least: Duration,
        job: impl FnOnce(&Job) -> T,
    ) -> Result<Option<T>> {
        let name = name.into_lease_name()?;
        check_job_window(at_most, at_least)?;
        let inner = &self.inner;
        let Some(claim) = inner.claim_job(&name, at_most)? else {
            return Ok(None);
        };
        let handle = Job {
            inner: inner.clone(),
            name,
            claim,
            lost: AtomicBool::new(false),
        };
        let out = job(&handle);
        handle
            .inner
            .finish_job(&handle.name, &handle.claim, at_least);
        Ok(Some(out))
    }
}

/// A claimed run of a job, handed to the job by [`Session::run_once`].
pub struct Job {
    inner: EngineHandle,
    name: LeaseName,
    claim: Claimed,
    lost: AtomicBool,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("token", &self.claim.token)
            .field("session", &self.claim.session)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// The job's name.
    pub fn name(&self) -> &LeaseName {
        &self.name
    }

    /// The claim's fencing token: > 0, increasing with every claim of the name, never reset.
    pub fn token(&self) -> Token {
        self.claim.token
    }

    /// The session that claimed the job.
    pub fn session(&self) -> &SessionId {
        &self.claim.session
    }

    /// The local instant at which the claim's `at_most` ends at the latest (sent +
    /// `at_most` × (1 − drift)); the claim can end sooner with its session.
    pub fn deadline(&self) -> Instant {
        self.claim.deadline
    }

    /// Whether the claim still holds: before [`Job::deadline`], and while the session that
    /// claimed it is live. Once false, it stays false.
    pub fn is_valid(&self) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return false;
        }
        let valid = self
            .inner
            .job_holds(&self.claim.session, self.claim.deadline);
        if !valid {
            self.lost.store(true, Ordering::SeqCst);
        }
        valid
    }

    /// The fencing token while the claim holds, otherwise [`Error::LeaseLost`].
    pub fn check(&self) -> Result<Token> {
        if self.is_valid() {
            Ok(self.claim.token)
        } else {
            Err(Error::LeaseLost {
                name: self.name.clone(),
                token: self.claim.token,
            })
        }
    }

    /// Time left before [`Job::deadline`] (zero once the claim no longer holds).
    pub fn remaining(&self) -> Duration {
        if self.is_valid() {
            self.claim
                .deadline
                .saturating_duration_since(self.inner.now())
        } else {
            Duration::ZERO
        }
    }
}
