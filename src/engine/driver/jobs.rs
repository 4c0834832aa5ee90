//! Run-once jobs: how long a claim holds on this host. A claim the backend made for at most
//! `at_most` (by its clock) ends here sooner: measured from when the claim was sent,
//! shortened by the drift bound, and with the session that made it.

use crate::engine::core::Core;
use crate::error::Result;
use crate::spi::JobClaim;
use crate::types::{LeaseName, SessionId, Token};
use std::time::{Duration, Instant};

/// The local instant a claim sent at `sent` ends at the latest: `remaining` (the backend's
/// answer, never more than `at_most`) shortened by the clock-rate `drift` bound.
pub(crate) fn deadline(
    sent: Instant,
    remaining: Duration,
    at_most: Duration,
    drift: f64,
) -> Instant {
    sent + remaining.min(at_most).mul_f64(1.0 - drift)
}

/// Whether a claim of session `id` with local `deadline` still holds at `now` in a session
/// whose engine is `core`: before the deadline, while `id` is the live session and before
/// its local deadline. The last part matters when the timer has not ticked yet (after a
/// process pause, say): the core still reads live, but the backend may have expired the
/// session and given the job to another node (found by the simulation; scenario
/// `a_claim_ends_at_its_sessions_local_deadline_before_the_timer_ticks`).
pub(crate) fn holds(core: &Core, id: &SessionId, deadline: Instant, now: Instant) -> bool {
    now < deadline && now < core.deadline() && core.session() == id && core.check_live().is_ok()
}

/// A claim taken: the session that made it, its token, and its local deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) session: SessionId,
    pub(crate) token: Token,
    pub(crate) deadline: Instant,
}

/// What session `session`'s claim, sent at `sent` for at most `at_most`, was answered:
/// `None` while another node runs the job or its window has not passed.
pub(crate) fn claimed(
    session: SessionId,
    reply: JobClaim,
    sent: Instant,
    at_most: Duration,
    drift: f64,
) -> Option<Claimed> {
    match reply {
        JobClaim::Busy { .. } => None,
        JobClaim::Claimed { token, remaining } => Some(Claimed {
            session,
            token,
            deadline: deadline(sent, remaining, at_most, drift),
        }),
    }
}

/// Takes in the answer to finishing job `name`'s claim (nobody waits for it: logged).
pub(crate) fn finished(name: &LeaseName, token: Token, reply: Result<bool>) {
    match reply {
        Ok(true) => {}
        Ok(false) => log::warn!(
            "job {name} (token {token}) finished after its claim ended (at_most passed or \
             the session ended): another node may run it"
        ),
        Err(e) => log::warn!(
            "finishing job {name} (token {token}) failed; the name stays taken until at_most \
             or the session's end: {}",
            e.report()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::core::Timing;

    #[test]
    fn a_claim_holds_until_its_shortened_deadline_in_its_live_session() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let d = deadline(t0, 2 * s, s, 0.01);
        assert_eq!(d, t0 + Duration::from_millis(990));
        let timing = Timing {
            lease: 10 * s,
            renew: s,
            retry: s / 2,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        let id = SessionId::random();
        let mut core = Core::new(timing, id.clone(), t0, 10 * s, 1);
        assert!(holds(&core, &id, d, t0));
        assert!(!holds(&core, &id, d, d));
        assert!(!holds(&core, &SessionId::random(), d, t0));
        core.close();
        assert!(!holds(&core, &id, d, t0));
    }

    #[test]
    fn a_claim_ends_at_its_sessions_local_deadline_before_the_timer_ticks() {
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
        // The session's local deadline is 990 ms after its open; the claim's is later.
        let core = Core::new(timing, id.clone(), t0, s, 1);
        let claim = deadline(t0, 3 * s, 3 * s, 0.01);
        let after_pause = t0 + 2 * s;
        assert!(core.state().is_live(), "no tick ran during the pause");
        assert!(!holds(&core, &id, claim, after_pause));
        assert!(!holds(&core, &id, claim, core.deadline()));
        assert!(holds(
            &core,
            &id,
            claim,
            core.deadline() - Duration::from_nanos(1)
        ));
    }
}
