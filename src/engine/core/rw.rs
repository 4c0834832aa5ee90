//! Read-write lock terms: a guard's read or write term of a name, bound to the session (the
//! backend ends it with the session, so it stays valid while the session does), lost with
//! the session's expiry.

use super::*;
use crate::spi::{HeldRw, RwMode};

/// A read-write lock term a guard of this session holds.
#[derive(Clone, Debug)]
pub(super) struct RwHeld {
    term: Term,
    mode: RwMode,
    handle: HandleId,
    /// When the grant was taken in: a keep-alive sent before may not list it yet.
    since: Instant,
}

impl Core {
    /// Marks a read-write lock's attempt of `name` as in flight (sent by the caller): a
    /// grant sent before a release landed may still come back, so the release is remembered
    /// until the attempt's reply is in.
    pub fn begin_rw_acquire(&mut self, name: &LeaseName) {
        *self.rw_acquiring.entry(name.clone()).or_insert(0) += 1;
    }

    /// The reply to read-write guard `handle`'s attempt of `name` in `mode` (`Ok(None)`: not
    /// granted now). A grant is taken into the local view while the session is live;
    /// `SessionExpired` expires it. A grant of a token the engine asked to release is not
    /// taken, as for a lock: that release may still land (even after its caller timed out)
    /// and free the very term; the grant is released again ([`Output::ReleaseRw`]) and the
    /// attempt reads as not granted, so the next grant carries a new token.
    pub fn on_rw_acquire(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        mode: RwMode,
        now: Instant,
        reply: Result<Option<Term>>,
    ) -> Result<Option<Term>> {
        if let Some(n) = self.rw_acquiring.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.rw_acquiring.remove(name);
            }
        }
        // Unanswered (a timeout, a failure), the backend may have granted it: the next
        // keep-alive lists the term and it is released then ([`Core::on_rw_listed`]).
        let r = self.rw_reply(handle, mode, now, reply);
        self.forget_settled_rw_release(name);
        r
    }

    fn rw_reply(
        &mut self,
        handle: HandleId,
        mode: RwMode,
        now: Instant,
        reply: Result<Option<Term>>,
    ) -> Result<Option<Term>> {
        match reply {
            Ok(Some(term)) => {
                // A term of an ended session ends with it on the backend: nothing to release.
                self.check_live()?;
                let name = term.name.clone();
                match self.rw_released.get(&name).copied() {
                    Some(m) if m.token == term.token => {
                        // In flight, it frees the term when it lands; settled, the term is
                        // gone. Only a release that failed may not have happened: again.
                        if m.state == MemoState::Uncertain {
                            self.remember_rw_release(&name, term.token);
                            self.out.push(Output::ReleaseRw(name, mode, term.token));
                        }
                        return Ok(None);
                    }
                    // A newer token: no release of the older one can touch it, nor is one due.
                    Some(_) => {
                        if let Some(m) = self.rw_released.get_mut(&name) {
                            m.state = MemoState::Settled;
                        }
                    }
                    None => {}
                }
                let held = RwHeld {
                    term: term.clone(),
                    mode,
                    handle,
                    since: now,
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
                self.remember_rw_release(&term.name, term.token);
                Ok((mode, term.token))
            }
            _ => Err(lease_lost(term)),
        }
    }

    /// This session's release of its term `name`/`token` finished: `definitive` when
    /// the backend answered (either way: the term is then gone for good, its token never
    /// granted again), so no release of it can undo a grant any more; a failed or timed-out
    /// release may still land, or may not have happened: then the next keep-alive that
    /// lists the term sends it again (nothing else would end the term while the session
    /// lives; found by the simulation, scenario
    /// `a_failed_read_write_release_is_sent_again_after_the_next_keep_alive`). Its callers
    /// waiting for the name see a release.
    pub fn on_rw_released(&mut self, name: &LeaseName, token: Token, definitive: bool) {
        if let Some(m) = self.rw_released.get_mut(name).filter(|m| m.token == token) {
            m.state = match definitive {
                true => MemoState::Settled,
                false => MemoState::Uncertain,
            };
        }
        self.forget_settled_rw_release(name);
        self.seen_release(name);
    }

    /// A keep-alive sent at `sent` succeeded and listed `listed`, every read-write term of
    /// the session, as leases are judged: a term a guard holds that is not listed (and was
    /// granted before the keep-alive was sent) is lost ([`LossReason::Missing`]); a listed
    /// term no guard holds (a grant whose reply was lost, a release that failed) is
    /// released, unless an attempt of its name is in flight (it may be that very grant) or
    /// its release is (scenario `a_read_write_term_no_guard_knows_is_found_and_released`).
    pub(super) fn on_rw_listed(&mut self, listed: &[HeldRw], sent: Instant) {
        let lost: Vec<LeaseName> = (self.rw.iter())
            .filter(|(name, h)| {
                h.since <= sent
                    && !listed
                        .iter()
                        .any(|l| &l.name == *name && l.token == h.term.token)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in lost {
            if let Some(h) = self.rw.remove(&name) {
                let (term, reason) = (h.term, LossReason::Missing);
                self.emit(Some(h.handle), Event::LockLost { term, reason });
            }
        }
        for l in listed {
            let held = self
                .rw
                .get(&l.name)
                .is_some_and(|h| h.term.token == l.token);
            let releasing = (self.rw_released.get(&l.name))
                .is_some_and(|m| m.token == l.token && m.state != MemoState::Uncertain);
            if !held && !releasing && !self.rw_acquiring.contains_key(&l.name) {
                log::debug!(
                    "releasing the {} term of {} (token {}): held but unknown",
                    l.mode.as_str(),
                    l.name,
                    l.token
                );
                self.remember_rw_release(&l.name, l.token);
                self.out
                    .push(Output::ReleaseRw(l.name.clone(), l.mode, l.token));
            }
        }
    }

    fn remember_rw_release(&mut self, name: &LeaseName, token: Token) {
        let state = MemoState::Pending;
        self.rw_released.insert(name.clone(), Memo { token, state });
    }

    /// Forgets the last release of `name` once no grant it could undo can arrive.
    fn forget_settled_rw_release(&mut self, name: &LeaseName) {
        let settled = (self.rw_released.get(name)).is_some_and(|m| m.state == MemoState::Settled);
        if settled && !self.rw_acquiring.contains_key(name) {
            self.rw_released.remove(name);
        }
    }

    /// How many read-write lock names the core remembers a release for.
    #[cfg(test)]
    pub fn remembered_rw_releases(&self) -> usize {
        self.rw_released.len()
    }

    /// Ends every read-write term with the session: each guard hears [`Event::LockLost`].
    pub(super) fn lose_rw_terms(&mut self, reason: LossReason) {
        for (_, h) in std::mem::take(&mut self.rw) {
            let term = h.term;
            self.emit(Some(h.handle), Event::LockLost { term, reason });
        }
    }
}
