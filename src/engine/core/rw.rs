//! Read-write lock terms: a guard's read or write term of a name, bound to the session (the
//! backend ends it with the session, so it stays valid while the session does), lost with
//! the session's expiry.

use super::*;
use crate::spi::RwMode;

/// A read-write lock term a guard of this session holds.
#[derive(Clone, Debug)]
pub(super) struct RwHeld {
    term: Term,
    mode: RwMode,
    handle: HandleId,
}

impl Core {
    /// The reply to a read-write lock's acquire (`Ok(None)`: not granted now). A grant is
    /// taken into the local view while the session is live; `SessionExpired` expires it.
    pub fn on_rw_acquire(
        &mut self,
        handle: HandleId,
        mode: RwMode,
        now: Instant,
        reply: Result<Option<Term>>,
    ) -> Result<Option<Term>> {
        match reply {
            Ok(Some(term)) => {
                self.check_live()?;
                // The session's own release of this very term is in flight: it may land
                // after this grant and end it. Not granted; tried again once it finished.
                if self.rw_releasing.get(&term.name) == Some(&term.token) {
                    return Ok(None);
                }
                let name = term.name.clone();
                let held = RwHeld {
                    term: term.clone(),
                    mode,
                    handle,
                };
                self.rw.insert(name, held);
                Ok(Some(term))
            }
            Err(e @ Error::SessionExpired { .. }) => {
                if self.state.is_live() {
                    self.expire(now, false);
                }
                Err(e)
            }
            other => other,
        }
    }

    /// Whether the read-write term `name`/`token` is held and the session valid at `now`.
    pub fn is_rw_valid(&self, name: &LeaseName, token: Token, now: Instant) -> bool {
        self.state.is_live()
            && now < self.deadline
            && self.rw.get(name).is_some_and(|h| h.term.token == token)
    }

    /// How long the read-write term `name`/`token` stays valid from `now` (the session's
    /// local deadline), or `None` if it is not valid now.
    pub fn rw_valid_for(&self, name: &LeaseName, token: Token, now: Instant) -> Option<Duration> {
        self.is_rw_valid(name, token, now)
            .then(|| self.deadline.saturating_duration_since(now))
    }

    /// A read-write guard is unlocked or dropped: forgets the term and returns its mode and
    /// token to release. A term lost meanwhile (its session expired, reported first) is
    /// [`Error::LeaseLost`]: nothing to release.
    pub fn rw_unlock(
        &mut self,
        handle: HandleId,
        term: &Term,
        now: Instant,
    ) -> Result<(RwMode, Token)> {
        self.settle(now);
        match self.rw.get(&term.name) {
            Some(h) if h.handle == handle && h.term.token == term.token && self.state.is_live() => {
                let mode = h.mode;
                self.rw.remove(&term.name);
                self.rw_releasing.insert(term.name.clone(), term.token);
                Ok((mode, term.token))
            }
            _ => Err(lease_lost(term)),
        }
    }

    /// This session's release of the read-write lock `name` finished: its callers waiting
    /// for the name see a release.
    pub fn on_rw_released(&mut self, name: &LeaseName) {
        self.rw_releasing.remove(name);
        self.seen_release(name);
    }

    /// Ends every read-write term with the session: each guard hears [`Event::LockLost`].
    pub(super) fn lose_rw_terms(&mut self, reason: LossReason) {
        for (_, h) in std::mem::take(&mut self.rw) {
            let term = h.term;
            self.emit(Some(h.handle), Event::LockLost { term, reason });
        }
    }
}
