//! A guard's term, whatever its kind (a lock's or permit's, a read-write lock's read or
//! write): its end by the guard (unlock or drop) ends it locally first ([`end`]: a term
//! found past its deadline is reported lost, once), then its release goes to the backend
//! ([`Unlock::send`], or queued as [`Unlock::work`]), and the reply is taken in
//! ([`Unlock::answered`]; a release that found the term gone is reported by
//! [`super::wait::lost_on_release`]). One copy for every guard and for the simulation.

use super::Work;
use crate::engine::core::{Core, HandleId, Space};
use crate::error::Result;
use crate::spi::{LeaseBackend, RwMode};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::time::{Duration, Instant};

pub(crate) use crate::engine::core::TermKind;

/// A term ended locally, whose release goes to the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unlock {
    pub(crate) name: LeaseName,
    pub(crate) token: Token,
    /// A read-write term's mode (`None`: a lock's).
    pub(crate) mode: Option<RwMode>,
}

/// Ends guard `h`'s `term` of `kind` in `core` at `now`: the release to send, or
/// [`Error::LeaseLost`](crate::Error::LeaseLost) for a term lost meanwhile (one found past
/// its deadline is reported first).
pub(crate) fn end(
    core: &mut Core,
    kind: TermKind,
    h: HandleId,
    term: &Term,
    now: Instant,
) -> Result<Unlock> {
    let token = core.unlock(h, kind, term, now)?;
    let mode = match kind {
        TermKind::Lock => None,
        TermKind::Rw(mode) => Some(mode),
    };
    let name = term.name.clone();
    Ok(Unlock { name, token, mode })
}

/// Whether `kind`'s term `name`/`token` is valid in `core` at `now`, and for how long.
pub(crate) fn valid_for(
    core: &Core,
    kind: TermKind,
    name: &LeaseName,
    token: Token,
    now: Instant,
) -> Option<Duration> {
    core.valid_for(kind.space(), name, token, now)
}

impl Unlock {
    /// Sends the release, for backend session `session`, to `backend`: whether the term was
    /// still held there.
    pub(crate) fn send(&self, session: &SessionId, backend: &dyn LeaseBackend) -> Result<bool> {
        match self.mode {
            None => backend.release(session, &self.name, self.token),
            Some(mode) => backend.release_rw(session, &self.name, mode, self.token),
        }
    }

    /// The release as work for the session's queue (a dropped guard's).
    pub(crate) fn work(&self) -> Work {
        match self.mode {
            None => Work::Release(self.name.clone(), self.token),
            Some(mode) => Work::ReleaseRw(self.name.clone(), mode, self.token),
        }
    }

    /// Takes the release's reply into `core`: `definitive` when the backend answered
    /// (either way), so it can no longer land later.
    pub(crate) fn answered(&self, core: &mut Core, definitive: bool) {
        let space = match self.mode {
            None => Space::Lease,
            Some(_) => Space::Rw,
        };
        core.on_released(space, &self.name, definitive);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::core::Timing;
    use crate::engine::driver::wait;
    use crate::spi::{Acquire, RwAcquire};

    #[test]
    fn a_term_of_either_kind_ends_once_and_its_release_is_taken_in() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let timing = Timing {
            lease: s,
            renew: s / 3,
            retry: s / 6,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        let mut core = Core::new(timing, SessionId::random(), t0, s, 1);
        let name = LeaseName::new("n").unwrap();
        let term = Term {
            name: name.clone(),
            token: Token::new(5).unwrap(),
            remaining: s,
        };
        core.begin_acquire(Space::Lease, &name);
        let granted = Ok(Some(Acquire::Acquired(term.clone())));
        assert!(wait::take_reply(&mut core, 1, &name, t0, t0, granted).is_ok());
        assert!(valid_for(&core, TermKind::Lock, &name, term.token, t0).is_some());
        let u = end(&mut core, TermKind::Lock, 1, &term, t0).unwrap();
        assert_eq!((u.token, u.mode), (term.token, None));
        assert_eq!(u.work(), Work::Release(name.clone(), term.token));
        // Ended once: the second end finds it lost.
        assert!(end(&mut core, TermKind::Lock, 1, &term, t0).is_err());
        u.answered(&mut core, true);

        let rw = TermKind::Rw(RwMode::Read);
        assert_eq!(rw.space(), Space::Rw);
        let other = Term {
            token: Token::new(6).unwrap(),
            ..term.clone()
        };
        core.begin_acquire(Space::Rw, &name);
        let granted = Ok(RwAcquire::Acquired(other.clone()));
        let r = super::super::rw::take_reply(&mut core, 2, &name, RwMode::Read, t0, t0, granted);
        assert!(matches!(r, Ok(Some(_))));
        assert!(valid_for(&core, rw, &name, other.token, t0).is_some());
        let u = end(&mut core, rw, 2, &other, t0).unwrap();
        assert_eq!(u.mode, Some(RwMode::Read));
        assert_eq!(u.work(), Work::ReleaseRw(name, RwMode::Read, other.token));
        u.answered(&mut core, true);
        assert!(valid_for(&core, rw, &other.name, other.token, t0).is_none());
    }
}
