//! The wait-and-retry loop of a lock call (plain, fair) and of a semaphore permit: what to do
//! after each acquire's reply, how a fair acquire's reply and a replaced session's reply
//! read, the round of a semaphore's acquire over its permits, and what a candidate waiting
//! to be elected finds. One copy, for every
//! primitive and for the simulation.

use crate::engine::core::{Core, HandleId, Holder, Space};
use crate::error::Error;
use crate::spi::{Acquire, Queued};
use crate::types::{LeaseName, SessionId, Term};
use std::time::{Duration, Instant};

/// What the caller does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// The caller holds `Term`.
    Acquired(Term),
    /// Register as waiting for a release of the name (once per call), then try again at
    /// once, so a release in between is not missed.
    WaitForReleases,
    /// Try again at once (on the session reopened after an expiry).
    RetryNow,
    /// Wait for a release of the name (one the caller saw counts) or until the instant,
    /// then try again (if the call's deadline has not passed).
    RetryAt(Instant),
    /// The one try found the name held: no lock.
    Busy,
    /// The call fails.
    Fail(Error),
}

/// One lock call's wait: whether it waits for releases yet, its deadline, and the last
/// failure (the source of its timeout, as `try_lock` would have returned it).
#[derive(Debug)]
pub(crate) struct LockWait {
    once: bool,
    retry: Duration,
    waiting: bool,
    until: Option<Instant>,
    last: Option<Error>,
}

impl LockWait {
    /// A call that tries once (`try_lock`), or waits, retrying every `retry` plus jitter.
    pub(crate) fn new(once: bool, retry: Duration) -> Self {
        LockWait {
            once,
            retry,
            waiting: false,
            until: None,
            last: None,
        }
    }

    /// A call that gives up at `until` (`None`: never): no retry is due after it.
    pub(crate) fn until(mut self, until: Option<Instant>) -> Self {
        self.until = until;
        self
    }

    /// Whether the call's deadline has passed at `now` (it then ends without the lock).
    pub(crate) fn timed_out(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now >= u)
    }

    /// A call that listens for releases from the start (a semaphore, over all its permits).
    pub(crate) fn waiting_from_start(mut self) -> Self {
        self.waiting = true;
        self
    }

    /// Whether the caller waits for releases of the name (and must stop when it ends).
    #[cfg(test)]
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// The error of the last attempt, if it failed (`None` if it found the name held).
    pub(crate) fn take_last(&mut self) -> Option<Error> {
        self.last.take()
    }

    /// The next step after a reply at `now`: `Ok(None)` is a fair lock's place in the queue
    /// behind another waiter. `reopen_coming` tells whether an expired session will be
    /// reopened; `jitter` draws the retry's jitter (given its bound). A retry is never due
    /// after the call's deadline.
    pub(crate) fn on_reply(
        &mut self,
        reply: crate::Result<Option<Acquire>>,
        reopen_coming: bool,
        now: Instant,
        jitter: impl FnOnce(Duration) -> Duration,
    ) -> Step {
        self.last = None;
        let until = self.until;
        let retry_at = |j| {
            let at = now + super::retry_delay(self.retry, j);
            until.map_or(at, |u| at.min(u))
        };
        match reply {
            Ok(Some(Acquire::Acquired(term))) => Step::Acquired(term),
            Ok(_) if self.once => Step::Busy,
            Ok(_) if !self.waiting => {
                self.waiting = true;
                Step::WaitForReleases
            }
            Ok(_) => Step::RetryAt(retry_at(jitter)),
            Err(e @ Error::Unsupported { .. }) => Step::Fail(e),
            Err(Error::SessionExpired { .. }) if !self.once && reopen_coming => Step::RetryNow,
            Err(e @ (Error::SessionExpired { .. } | Error::Closed)) => Step::Fail(e),
            Err(e) if self.once => Step::Fail(e),
            Err(e) => {
                log::warn!("acquiring failed, retrying: {}", e.report());
                self.last = Some(e);
                Step::RetryAt(retry_at(jitter))
            }
        }
    }
}

/// A fair acquire's reply as the wait reads it: the term, the holder, or `None` for a place
/// in the queue behind another waiter while the lease is free.
pub(crate) fn queued(reply: Queued) -> Option<Acquire> {
    match reply {
        Queued::Acquired(term) => Some(Acquire::Acquired(term)),
        Queued::Waiting { owner, .. } => owner.map(Acquire::Held),
    }
}

/// Takes lock `h`'s acquire of `name`, sent at `sent`, into `core` at `now` (the caller
/// checked that `core` is the session it was sent for): a term the lock now holds, the
/// holder, or `Ok(None)` for a fair lock queued behind another waiter.
pub(crate) fn take_reply(
    core: &mut Core,
    h: HandleId,
    name: &LeaseName,
    sent: Instant,
    now: Instant,
    reply: crate::Result<Option<Acquire>>,
) -> crate::Result<Option<Acquire>> {
    match reply.transpose() {
        Some(reply) => core.on_lock_acquire(h, name, sent, now, reply).map(Some),
        None => {
            core.on_lock_queued(name);
            Ok(None)
        }
    }
}

/// The backend found lock `h`'s `term` gone at the unlock's release: the loss is reported
/// to the lock (`LockLost` with `Missing`) while the session is live; once it expired (or
/// closed) nothing more is reported after its end, as after a reopen (found by the
/// simulation; scenario `an_unlock_that_finds_its_term_gone_after_expiry_reports_nothing`).
/// Either way the unlock fails with [`Error::LeaseLost`].
pub(crate) fn lost_on_release(core: &mut Core, h: HandleId, term: Term) -> Error {
    if core.state().is_live() {
        core.lost_on_unlock(h, term)
    } else {
        crate::error::lease_lost(&term)
    }
}

/// What a lock caller gets for an acquire sent for session `id` once another session
/// replaced it: `id` expired (its grants died with it).
pub(crate) fn replaced(id: &SessionId) -> Error {
    Error::SessionExpired {
        session: id.clone(),
    }
}

/// Where a semaphore's acquire starts its rounds: `random` picks a permit, so callers
/// spread over the permits.
pub(crate) fn first_permit(random: u64, permits: usize) -> usize {
    (random % permits.max(1) as u64) as usize
}

/// One round of a semaphore's acquire: every permit tried once (one try each, no waiting),
/// from the call's first permit on, until one is taken; a failure ends the round. Its
/// outcome goes through the call's [`LockWait`].
#[derive(Debug)]
pub(crate) struct PermitRound {
    start: usize,
    permits: usize,
    tried: usize,
    failed: Option<Error>,
}

impl PermitRound {
    /// A round over `permits` permits from `start` on.
    pub(crate) fn new(start: usize, permits: usize) -> Self {
        PermitRound {
            start,
            permits,
            tried: 0,
            failed: None,
        }
    }

    /// The permit to try next; `None` once each was tried or one try failed.
    pub(crate) fn next(&self) -> Option<usize> {
        (self.failed.is_none() && self.tried < self.permits)
            .then(|| (self.start + self.tried) % self.permits)
    }

    /// The permit [`PermitRound::next`] gave is taken (held elsewhere, or reserved here).
    pub(crate) fn busy(&mut self) {
        self.tried += 1;
    }

    /// Trying it failed with `e`: the round ends.
    pub(crate) fn failed(&mut self, e: Error) {
        self.failed = Some(e);
    }

    /// The round's outcome for [`LockWait::on_reply`]: no permit free, or the failure.
    pub(crate) fn outcome(self) -> crate::Result<Option<Acquire>> {
        self.failed.map_or(Ok(None), Err)
    }
}

/// What candidate `h` waiting to be elected to `name` finds now (the core settled first):
/// its term if valid now, [`Error::NotCandidate`] if it is no candidate, `None` to wait on.
pub(crate) fn elected(
    core: &Core,
    name: &LeaseName,
    h: HandleId,
    now: Instant,
) -> Result<Option<Term>, Error> {
    let held = core.term_of(name, Holder::Election(h));
    if let Some(t) = held.filter(|t| core.is_valid(Space::Lease, &t.name, t.token, now)) {
        return Ok(Some(t));
    }
    match core.is_candidate(h) {
        true => Ok(None),
        false => Err(Error::NotCandidate { name: name.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::core::TermKind;
    use crate::types::{Owner, SessionId, Token};

    fn held() -> crate::Result<Option<Acquire>> {
        Ok(Some(Acquire::Held(Owner {
            session: SessionId::random(),
            token: Token::new(1).unwrap(),
            remaining: Duration::from_secs(1),
            value: String::new(),
        })))
    }

    #[test]
    fn a_waiting_call_registers_once_then_retries_and_keeps_its_last_failure() {
        let now = Instant::now();
        let retry = Duration::from_millis(100);
        let mut w = LockWait::new(false, retry);
        assert!(matches!(
            w.on_reply(held(), true, now, |_| Duration::ZERO),
            Step::WaitForReleases
        ));
        assert!(w.is_waiting());
        assert!(
            matches!(w.on_reply(held(), true, now, |_| Duration::ZERO), Step::RetryAt(t) if t == now + retry)
        );
        let failure = Error::backend("acquiring", std::io::Error::other("down"));
        assert!(matches!(
            w.on_reply(Err(failure), true, now, |_| Duration::ZERO),
            Step::RetryAt(_)
        ));
        assert!(matches!(w.take_last(), Some(Error::Backend { .. })));
        let expired = || {
            Err(Error::SessionExpired {
                session: SessionId::random(),
            })
        };
        assert!(matches!(
            w.on_reply(expired(), true, now, |_| Duration::ZERO),
            Step::RetryNow
        ));
        assert!(matches!(
            w.on_reply(expired(), false, now, |_| Duration::ZERO),
            Step::Fail(_)
        ));
    }

    #[test]
    fn a_candidate_is_elected_only_with_a_term_valid_now() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let timing = crate::engine::core::Timing {
            lease: s,
            renew: s / 3,
            retry: s / 6,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        let name = LeaseName::new("e").unwrap();
        let mut core = Core::new(timing, SessionId::random(), t0, s, 1);
        assert!(matches!(
            elected(&core, &name, 3, t0),
            Err(Error::NotCandidate { .. })
        ));
        core.add_candidate(3, name.clone(), t0);
        assert!(matches!(elected(&core, &name, 3, t0), Ok(None)));
        let term = Term {
            name: name.clone(),
            token: crate::types::Token::new(4).unwrap(),
            remaining: s,
        };
        core.on_attempt(3, &name, t0, t0, Ok(Acquire::Acquired(term)));
        let won = elected(&core, &name, 3, t0).unwrap().expect("elected");
        assert_eq!(won.token.get(), 4);
        // Past the session's local deadline the term is not handed out, even untimed.
        assert!(matches!(elected(&core, &name, 3, t0 + 2 * s), Ok(None)));
    }

    #[test]
    fn an_unlock_that_finds_its_term_gone_after_expiry_reports_nothing() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let timing = crate::engine::core::Timing {
            lease: s,
            renew: s / 3,
            retry: s / 6,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        let name = LeaseName::new("l").unwrap();
        let mut core = Core::new(timing, SessionId::random(), t0, s, 1);
        core.begin_acquire(Space::Lease, &name);
        let term = Term {
            name: name.clone(),
            token: crate::types::Token::new(1).unwrap(),
            remaining: s,
        };
        let granted = Ok(Acquire::Acquired(term.clone()));
        let r = take_reply(&mut core, 7, &name, t0, t0, granted.map(Some));
        assert!(matches!(r, Ok(Some(Acquire::Acquired(_)))));
        assert!(core.unlock(7, TermKind::Lock, &term, t0).is_ok());
        let _ = core.take_outputs();
        // While live, the loss the release found is reported once.
        let e = lost_on_release(&mut core, 7, term.clone());
        assert!(matches!(e, Error::LeaseLost { .. }));
        assert_eq!(core.take_outputs().len(), 1);
        // After the session's end, nothing follows its `SessionExpired`.
        core.tick(t0 + 2 * s);
        let _ = core.take_outputs();
        let e = lost_on_release(&mut core, 7, term);
        assert!(matches!(e, Error::LeaseLost { .. }));
        assert!(core.take_outputs().is_empty());
    }

    #[test]
    fn no_retry_is_due_after_the_deadline() {
        let now = Instant::now();
        let retry = Duration::from_millis(100);
        let until = now + Duration::from_millis(30);
        let mut w = LockWait::new(false, retry).until(Some(until));
        assert!(matches!(
            w.on_reply(held(), true, now, |_| Duration::ZERO),
            Step::WaitForReleases
        ));
        assert!(
            matches!(w.on_reply(held(), true, now, |_| Duration::ZERO), Step::RetryAt(t) if t == until)
        );
        assert!(!w.timed_out(now));
        assert!(w.timed_out(until));
        assert!(!LockWait::new(false, retry).timed_out(now + retry * 1000));
    }

    #[test]
    fn a_round_tries_each_permit_once_from_its_start_until_one_fails() {
        let mut r = PermitRound::new(first_permit(7, 3), 3);
        let mut order = Vec::new();
        while let Some(i) = r.next() {
            order.push(i);
            r.busy();
        }
        assert_eq!(order, [1, 2, 0]);
        assert!(matches!(r.outcome(), Ok(None)));
        let mut r = PermitRound::new(0, 3);
        r.busy();
        r.failed(Error::Closed);
        assert_eq!(r.next(), None);
        assert!(matches!(r.outcome(), Err(Error::Closed)));
        let free = Queued::Waiting {
            ahead: 1,
            owner: None,
        };
        assert_eq!(queued(free), None);
    }

    #[test]
    fn one_try_is_busy_or_fails() {
        let now = Instant::now();
        let mut w = LockWait::new(true, Duration::from_millis(100));
        assert!(matches!(
            w.on_reply(held(), true, now, |_| Duration::ZERO),
            Step::Busy
        ));
        let failure = Error::backend("acquiring", std::io::Error::other("down"));
        assert!(matches!(
            w.on_reply(Err(failure), true, now, |_| Duration::ZERO),
            Step::Fail(_)
        ));
    }
}
