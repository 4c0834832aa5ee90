//! Read-write lock terms: a guard's read or write term of a name, bound to the session (the
//! backend ends it with the session, so it stays valid while the session does), lost with
//! the session's expiry.

use super::*;
use crate::spi::RwMode;

/// How many reads of a read-write lock's state (one per successful keep-alive, so about a
/// lease) must find no unknown term of the session after an unanswered attempt: the attempt
/// may still land after the first read.
const RW_STATE_READS: u8 = 3;

/// A read-write lock term a guard of this session holds.
#[derive(Clone, Debug)]
pub(super) struct RwHeld {
    term: Term,
    mode: RwMode,
    handle: HandleId,
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
        match &reply {
            // Unanswered (a timeout, a failure): the backend may have granted it.
            Err(e) if !matches!(e, Error::SessionExpired { .. } | Error::Unsupported { .. }) => {
                self.rw_unsure.insert(name.clone(), RW_STATE_READS);
            }
            _ => {}
        }
        let r = self.rw_reply(handle, mode, now, reply);
        self.forget_settled_rw_release(name);
        r
    }

    /// The state of the read-write lock `name` as the backend reported it (a read the core
    /// asked for after an unanswered attempt, [`Task::RwState`]): a term it shows for this
    /// session that no guard holds (a grant whose reply was lost) is released, since nothing
    /// else would end it while the session lives, and the session's own next write would
    /// wait behind it (found by the simulation; scenario
    /// `a_read_write_term_no_guard_knows_is_found_and_released`). Judged only while no
    /// attempt of the name is in flight (one may be that very grant); read again later
    /// otherwise, or after a failure, and a few times after a read that found none (the
    /// unanswered attempt may land later still). A backend without `rw_state` ends the
    /// search.
    pub fn on_rw_state(&mut self, name: &LeaseName, reply: Result<crate::spi::RwState>) {
        if !self.state.is_live() {
            return;
        }
        let state = match reply {
            Ok(state) if !self.rw_acquiring.contains_key(name) => state,
            Err(Error::Unsupported { .. }) => {
                self.rw_unsure.remove(name);
                return;
            }
            _ => return,
        };
        let me = &self.session;
        let writer = (state.writer.iter()).map(|(s, t)| (s, RwMode::Write, *t));
        let readers = (state.readers.iter()).map(|(s, t)| (s, RwMode::Read, *t));
        let mine: Vec<(RwMode, Token)> = writer
            .chain(readers)
            .filter(|(s, _, _)| *s == me)
            .map(|(_, m, t)| (m, t))
            .collect();
        match self.rw_unsure.get_mut(name) {
            Some(n) if *n > 1 && mine.is_empty() => *n -= 1,
            _ => {
                self.rw_unsure.remove(name);
            }
        }
        for (mode, token) in mine {
            let held = self.rw.get(name).is_some_and(|h| h.term.token == token);
            let releasing = (self.rw_released.get(name))
                .is_some_and(|m| m.token == token && m.state == MemoState::Pending);
            if !held && !releasing {
                log::debug!(
                    "releasing the {} term of {name} (token {token}): held but unknown",
                    mode.as_str()
                );
                self.remember_rw_release(name, token);
                self.out.push(Output::ReleaseRw(name.clone(), mode, token));
            }
        }
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
                            self.rw_retry.remove(&name);
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
                        self.rw_retry.remove(&name);
                    }
                    None => {}
                }
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
                self.remember_rw_release(&term.name, term.token);
                Ok((mode, term.token))
            }
            _ => Err(lease_lost(term)),
        }
    }

    /// This session's release of its `mode` term `name`/`token` finished: `definitive` when
    /// the backend answered (either way: the term is then gone for good, its token never
    /// granted again), so no release of it can undo a grant any more; a failed or timed-out
    /// release may still land, or may not have happened: then it is sent again after the
    /// next keep-alive that succeeds (nothing else would end the term while the session
    /// lives; found by the simulation, scenario
    /// `a_failed_read_write_release_is_sent_again_after_the_next_keep_alive`). Its callers
    /// waiting for the name see a release.
    pub fn on_rw_released(
        &mut self,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
        definitive: bool,
    ) {
        if let Some(m) = self.rw_released.get_mut(name).filter(|m| m.token == token) {
            if definitive {
                m.state = MemoState::Settled;
                self.rw_retry.remove(name);
            } else {
                m.state = MemoState::Uncertain;
                if self.state.is_live() {
                    self.rw_retry.insert(name.clone(), (mode, token));
                }
            }
        }
        self.forget_settled_rw_release(name);
        self.seen_release(name);
    }

    /// A keep-alive succeeded: the read-write releases that failed are sent again, and the
    /// names whose attempt went unanswered are read.
    pub(super) fn retry_rw_releases(&mut self) {
        for (name, (mode, token)) in std::mem::take(&mut self.rw_retry) {
            self.remember_rw_release(&name, token);
            self.out.push(Output::ReleaseRw(name, mode, token));
        }
        for name in self.rw_unsure.keys() {
            self.out.push(Output::Run(Task::RwState(name.clone())));
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
