//! The wait-and-retry loop of a lock call (plain, fair) and of a semaphore permit: what to do
//! after each acquire's reply. One copy, for every primitive and for the simulation.

use crate::error::Error;
use crate::spi::Acquire;
use crate::types::Term;
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

/// One lock call's wait: whether it waits for releases yet, and the last failure (the
/// source of its timeout, as `try_lock` would have returned it).
#[derive(Debug)]
pub(crate) struct LockWait {
    once: bool,
    retry: Duration,
    waiting: bool,
    last: Option<Error>,
}

impl LockWait {
    /// A call that tries once (`try_lock`), or waits, retrying every `retry` plus jitter.
    pub(crate) fn new(once: bool, retry: Duration) -> Self {
        LockWait {
            once,
            retry,
            waiting: false,
            last: None,
        }
    }

    /// A call that listens for releases from the start (a semaphore, over all its permits).
    pub(crate) fn waiting_from_start(mut self) -> Self {
        self.waiting = true;
        self
    }

    /// Whether the caller waits for releases of the name (and must stop when it ends).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// The error of the last attempt, if it failed (`None` if it found the name held).
    pub(crate) fn take_last(&mut self) -> Option<Error> {
        self.last.take()
    }

    /// The next step after a reply at `now`: `Ok(None)` is a fair lock's place in the queue
    /// behind another waiter. `reopen_coming` tells whether an expired session will be
    /// reopened; `jitter` draws the retry's jitter (given its bound).
    pub(crate) fn on_reply(
        &mut self,
        reply: crate::Result<Option<Acquire>>,
        reopen_coming: bool,
        now: Instant,
        jitter: impl FnOnce(Duration) -> Duration,
    ) -> Step {
        self.last = None;
        let retry_at = |j| now + super::retry_delay(self.retry, j);
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

#[cfg(test)]
mod tests {
    use super::*;
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
