//! Lock terms: acquire in flight, adopting a grant, unlock, the cool-down after a release,
//! the release memo (what the core remembers of a name's last release) and term validity.

use super::*;

impl Core {
    /// Marks an acquire of `name` as in flight (a lock's, sent by the caller).
    pub fn begin_acquire(&mut self, name: &LeaseName) {
        *self.acquiring.entry(name.clone()).or_insert(0) += 1;
    }

    pub(super) fn end_acquire(&mut self, name: &LeaseName) {
        if let Some(n) = self.acquiring.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.acquiring.remove(name);
            }
        }
    }

    /// Takes a granted term into the local view. Refused while a release of the same name is
    /// in flight, or when the grant carries a token the engine asked to release: that
    /// release could free the very term being adopted, even after its caller timed out.
    /// The caller then releases the grant (again) and tries later, for a new token.
    pub(super) fn adopt(
        &mut self,
        term: Term,
        sent: Instant,
        now: Instant,
        holder: Holder,
    ) -> bool {
        let released = self
            .released
            .get(&term.name)
            .is_some_and(|m| m.token == term.token);
        if self.releasing.contains(&term.name) || released {
            return false;
        }
        // A grant whose local deadline passed before its reply arrived (an acquire slower
        // than the lease) is no term to hand out: the backend may have expired it already.
        let deadline = self.t.local(sent, term.remaining).min(self.deadline);
        if deadline <= now {
            log::warn!(
                "the grant of {} (token {}) arrived after its local deadline; released",
                term.name,
                term.token
            );
            return false;
        }
        // A newer token: no release of the older one can touch it.
        if let Some(m) = self.released.get_mut(&term.name) {
            m.state = MemoState::Settled;
        }
        if let Holder::Election(h) = holder {
            self.lost_terms.remove(&h);
        }
        let name = term.name.clone();
        self.leases.insert(
            name.clone(),
            Held {
                term,
                deadline,
                confirmed: now,
                holder,
            },
        );
        self.observers_due(&name, now);
        true
    }

    /// Reports that `term` was granted with a token not above `seen` (see
    /// [`Event::TokenRegressed`]), to the session's listeners and to `handle`'s if given.
    pub fn token_regressed(&mut self, handle: Option<HandleId>, term: &Term, seen: Token) {
        log::error!(
            "the backend granted {} with token {}, not above token {seen} granted before: it \
             lost data (a failover to a replica that missed writes, a restart without \
             persistence, or an eviction); a resource that saw {seen} will reject the new term",
            term.name,
            term.token
        );
        let term = term.clone();
        self.emit(handle, Event::TokenRegressed { term, seen });
    }

    /// Whether `holder` holds `term` already (same name and token); its local deadline then
    /// moves to what this grant, sent at `sent`, allows if that is later.
    pub(super) fn renew_held(&mut self, term: &Term, sent: Instant, holder: Holder) -> bool {
        let local = self.t.local(sent, term.remaining).min(self.deadline);
        match self.leases.get_mut(&term.name) {
            Some(h) if h.holder == holder && h.term.token == term.token => {
                h.deadline = h.deadline.max(local);
                true
            }
            _ => false,
        }
    }

    /// The result of a lock's acquire sent at `sent`. Returns the term if the lock now holds
    /// it; otherwise the backend's answer is passed back (and a stray grant released).
    pub fn on_lock_acquire(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) -> Result<Acquire> {
        self.end_acquire(name);
        let r = self.lock_reply(handle, sent, now, reply);
        self.forget_settled_release(name);
        r
    }

    /// Ends an acquire that left the session queued behind another waiter (fair locks).
    pub fn on_lock_queued(&mut self, name: &LeaseName) {
        self.end_acquire(name);
        self.forget_settled_release(name);
    }

    pub(super) fn lock_reply(
        &mut self,
        handle: HandleId,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) -> Result<Acquire> {
        match reply {
            Ok(Acquire::Acquired(term)) => {
                if let Err(e) = self.check_live() {
                    self.release_stray(&term);
                    return Err(e);
                }
                if self.adopt(term.clone(), sent, now, Holder::Lock(handle)) {
                    Ok(Acquire::Acquired(term))
                } else {
                    // Try again once the release in flight has finished.
                    self.release_stray(&term);
                    Ok(Acquire::Held(Owner {
                        session: self.session.clone(),
                        token: term.token,
                        remaining: term.remaining,
                        value: String::new(),
                    }))
                }
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

    pub(super) fn release_stray(&mut self, term: &Term) {
        let adopted = self
            .leases
            .get(&term.name)
            .is_some_and(|h| h.term.token == term.token);
        if self.state.is_live() && !adopted && self.releasing.insert(term.name.clone()) {
            self.remember_release(&term.name, term.token);
            self.out
                .push(Output::Release(term.name.clone(), term.token));
        }
    }

    /// A lock guard is unlocked or dropped: forgets the term and returns its token to
    /// release. A term that passed its local deadline is first reported lost
    /// ([`Event::LockLost`] with the true reason); then, as for a term lost earlier, the
    /// result is [`Error::LeaseLost`] and there is nothing to release.
    pub fn unlock(&mut self, handle: HandleId, term: &Term, now: Instant) -> Result<Token> {
        self.settle(now);
        match self.leases.get(&term.name) {
            Some(h) if h.holder == Holder::Lock(handle) && h.term.token == term.token => {
                let name = &term.name;
                self.leases.remove(name);
                self.releasing.insert(name.clone());
                self.remember_release(name, term.token);
                self.cool_down(name, now);
                self.observers_due(name, now);
                Ok(term.token)
            }
            _ => Err(lease_lost(term)),
        }
    }

    /// A voluntary release of `name` at `now`: this session's next candidate for it waits
    /// two retry intervals, longer than any polling candidate elsewhere waits between two
    /// attempts (an interval plus at most half of one in jitter), so they get a turn.
    pub(super) fn cool_down(&mut self, name: &LeaseName, now: Instant) {
        self.cooldown.retain(|_, until| *until > now);
        let until = now + self.t.retry * 2;
        self.cooldown.insert(name.clone(), until);
    }

    /// The backend answered the release of a lock this session still believed held with
    /// "not held": the term had been lost there. Reports it to the lock (`LockLost` with
    /// [`LossReason::Missing`]) and returns the error for the unlock.
    pub fn lost_on_unlock(&mut self, handle: HandleId, term: Term) -> Error {
        let e = lease_lost(&term);
        let reason = LossReason::Missing;
        self.emit(Some(handle), Event::LockLost { term, reason });
        e
    }

    /// A release of `name` finished: `definitive` when the backend answered (either way), so
    /// it can no longer land later; a failed or timed-out release may still.
    pub fn on_released(&mut self, name: &LeaseName, definitive: bool) {
        if self.releasing.remove(name) {
            self.seen_release(name);
        }
        if let Some(m) = self.released.get_mut(name) {
            m.state = match (m.state, definitive) {
                (MemoState::Pending, true) => MemoState::Settled,
                (state, true) => state,
                (_, false) => MemoState::Uncertain,
            };
        }
        self.forget_settled_release(name);
    }

    /// Notes a release of `name` with `token` being sent.
    pub(super) fn remember_release(&mut self, name: &LeaseName, token: Token) {
        let state = match self.released.get(name) {
            Some(m) if m.token == token && m.state == MemoState::Uncertain => m.state,
            _ => MemoState::Pending,
        };
        self.released.insert(name.clone(), Memo { token, state });
    }

    /// Forgets the last release of `name` once no grant it could undo can arrive.
    pub(super) fn forget_settled_release(&mut self, name: &LeaseName) {
        let settled = self
            .released
            .get(name)
            .is_some_and(|m| m.state == MemoState::Settled);
        if settled && !self.acquiring.contains_key(name) {
            self.released.remove(name);
        }
    }

    /// How many names the core remembers a release for (bounded by the releases that did
    /// not finish definitively).
    #[cfg(test)]
    pub fn remembered_releases(&self) -> usize {
        self.released.len()
    }

    /// Whether `handle` holds `name` with `token` and the term's local deadline is ahead.
    pub fn is_valid(&self, name: &LeaseName, token: Token, now: Instant) -> bool {
        self.state.is_live()
            && now < self.deadline
            && self
                .leases
                .get(name)
                .is_some_and(|h| h.term.token == token && now < h.deadline)
    }

    /// How long the term `name` with `token` stays locally valid from `now` (the earlier of
    /// the session's and the term's local deadlines), or `None` if it is not valid now.
    pub fn valid_for(&self, name: &LeaseName, token: Token, now: Instant) -> Option<Duration> {
        if !self.is_valid(name, token, now) {
            return None;
        }
        let term = self.leases.get(name)?.deadline;
        Some(term.min(self.deadline).saturating_duration_since(now))
    }

    /// The term `holder` holds, if any.
    pub fn term_of(&self, name: &LeaseName, holder: Holder) -> Option<Term> {
        self.leases
            .get(name)
            .filter(|h| h.holder == holder)
            .map(|h| h.term.clone())
    }
}
