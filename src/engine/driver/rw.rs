//! A read-write lock call: what its errors say it was doing, how long a waiting writer's
//! registration lasts, an attempt's reply as the engine takes it in and the wait reads it,
//! and whether a call that ends without a term leaves the writers' queue. The wait itself is
//! the lock's [`LockWait`](super::wait::LockWait) (a refusal reads as a place in a queue:
//! retried after a release of the name, or after the retry interval). One copy, for
//! `RwLock` and for the simulation.

use crate::engine::core::{Core, HandleId, TermKind};
use crate::spi::{Acquire, RwAcquire, RwMode};
use crate::types::LeaseName;
use std::time::{Duration, Instant};

/// What a read or a write call's errors say it was doing.
pub(crate) fn operation(mode: RwMode) -> &'static str {
    match mode {
        RwMode::Read => "taking a read lock",
        RwMode::Write => "taking a write lock",
    }
}

/// How long a writer's registration as waiting lasts from each of its attempts: a lease
/// (`lease`), so a crashed waiting writer stops blocking readers within one lease; a
/// one-time try (`once`) registers nothing. A reader registers nothing either way.
pub(crate) fn patience(once: bool, lease: Duration) -> Duration {
    if once {
        Duration::ZERO
    } else {
        lease
    }
}

/// Takes read-write guard `h`'s attempt of `name` in `mode`, sent at `sent` and answered
/// `reply`, into `core` at `now` (the caller marked it in flight with `Core::begin_acquire`
/// and checked that
/// `core` is the session it was sent for), as the wait reads it: a term the guard now holds,
/// or `Ok(None)` for one not granted now (also a grant of a token the engine asked to
/// release, which it releases again: tried again after that release, for a new token).
pub(crate) fn take_reply(
    core: &mut Core,
    h: HandleId,
    name: &LeaseName,
    mode: RwMode,
    sent: Instant,
    now: Instant,
    reply: crate::Result<RwAcquire>,
) -> crate::Result<Option<Acquire>> {
    let reply = reply.map(|r| match r {
        RwAcquire::Acquired(term) => Some(term),
        RwAcquire::Busy { .. } => None,
    });
    core.on_guard_acquire(h, TermKind::Rw(mode), name, sent, now, reply)
        .map(|t| t.map(Acquire::Acquired))
}

/// Whether a call of `mode` that ended without a term (it timed out, was cancelled or
/// failed) leaves the writers' queue, so it no longer blocks readers: a writer that waited
/// (a one-time try registered nothing). A failure to leave costs one lease: the
/// registration's patience.
pub(crate) fn leaves_queue(mode: RwMode, once: bool) -> bool {
    mode == RwMode::Write && !once
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::core::Output;
    use crate::engine::core::Timing;
    use crate::error::Error;
    use crate::types::{SessionId, Term, Token};

    #[test]
    fn only_a_waiting_writer_registers_and_leaves() {
        let lease = Duration::from_secs(1);
        assert_eq!(patience(false, lease), lease);
        assert_eq!(patience(true, lease), Duration::ZERO);
        assert!(leaves_queue(RwMode::Write, false));
        assert!(!leaves_queue(RwMode::Write, true));
        assert!(!leaves_queue(RwMode::Read, false));
        assert_eq!(operation(RwMode::Read), "taking a read lock");
        assert_eq!(operation(RwMode::Write), "taking a write lock");
    }

    #[test]
    fn a_reply_reads_as_the_term_or_not_granted_and_an_expiry_expires_the_core() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let timing = Timing {
            lease: s,
            renew: s / 3,
            retry: s / 6,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        let id = SessionId::random();
        let mut core = Core::new(timing, id.clone(), t0, s, 1);
        let name = LeaseName::new("rw").unwrap();
        let term = Term {
            name: name.clone(),
            token: Token::new(3).unwrap(),
            remaining: s,
        };
        let busy = RwAcquire::Busy {
            writer: None,
            readers: 1,
            writers_waiting: 0,
        };
        let r = take_reply(&mut core, 7, &name, RwMode::Write, t0, t0, Ok(busy));
        assert!(matches!(r, Ok(None)));
        let granted = Ok(RwAcquire::Acquired(term.clone()));
        let r = take_reply(&mut core, 7, &name, RwMode::Read, t0, t0, granted);
        assert!(matches!(r, Ok(Some(Acquire::Acquired(t))) if t == term));
        let rw = TermKind::Rw(RwMode::Read);
        assert!(core.is_valid(rw.space(), &name, term.token, t0));
        // Its release timed out: the same term granted again is not taken, but released.
        assert!(core.unlock(7, rw, &term, t0).is_ok());
        core.on_released(rw.space(), &name, false);
        let again = Ok(RwAcquire::Acquired(term.clone()));
        let r = take_reply(&mut core, 8, &name, RwMode::Read, t0, t0, again);
        assert!(matches!(r, Ok(None)));
        let released = Output::ReleaseRw(name.clone(), RwMode::Read, term.token);
        assert_eq!(core.take_outputs(), vec![released]);
        let expired = Err(Error::SessionExpired { session: id });
        let r = take_reply(&mut core, 8, &name, RwMode::Read, t0, t0, expired);
        assert!(matches!(r, Err(Error::SessionExpired { .. })));
        assert!(!core.state().is_live());
    }
}
