//! Terms of every kind (a lock's, a permit's, a candidate's, a read-write lock's read or
//! write): acquires in flight, adopting a grant, unlock, the cool-down after a release, the
//! release memo (what the core remembers of a name's last release) and term validity. A
//! read-write lock's terms are a [`Space`] of names of their own, judged by the same rules.

use super::*;

impl Core {
    /// Marks an acquire of `name` in `space` as in flight (sent by a caller).
    pub fn begin_acquire(&mut self, space: Space, name: &LeaseName) {
        *self.acquiring[space].entry(name.clone()).or_insert(0) += 1;
    }

    pub(super) fn end_acquire(&mut self, space: Space, name: &LeaseName) {
        if let Some(n) = self.acquiring[space].get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.acquiring[space].remove(name);
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
        let space = holder.kind().space();
        let released = self.released[space]
            .get(&term.name)
            .is_some_and(|m| m.token == term.token);
        if self.releasing[space].contains(&term.name) || released {
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
        if let Some(m) = self.released[space].get_mut(&term.name) {
            m.state = MemoState::Settled;
        }
        if let Holder::Election(h) = holder {
            self.lost_terms.remove(&h);
        }
        let name = term.name.clone();
        let held = Held {
            term,
            deadline,
            confirmed: now,
            holder,
        };
        self.terms[space].insert(name.clone(), held);
        if space == Space::Lease {
            self.observers_due(&name, now);
        }
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
        match self.terms[holder.kind().space()].get_mut(&term.name) {
            Some(h) if h.holder == holder && h.term.token == term.token => {
                h.deadline = h.deadline.max(local);
                true
            }
            _ => false,
        }
    }

    /// The reply to guard `handle`'s acquire of `name` of `kind`, sent at `sent` (the caller
    /// marked it with [`Core::begin_acquire`]): the term if the guard now holds it, `Ok(None)`
    /// if not granted now (also a grant the core did not take: a token it asked to release,
    /// or one granted while a release of the name was in flight; released again, so the next
    /// grant carries a new token). `SessionExpired` expires the session.
    pub fn on_guard_acquire(
        &mut self,
        handle: HandleId,
        kind: TermKind,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Option<Term>>,
    ) -> Result<Option<Term>> {
        let space = kind.space();
        self.end_acquire(space, name);
        let r = match reply {
            Ok(Some(term)) => self
                .take_grant(Holder::guard(handle, kind), &term, sent, now)
                .map(|taken| taken.then_some(term)),
            other => self.unless_expired(now, other),
        };
        self.forget_settled_release(space, name);
        r
    }

    /// The reply to lock (or permit) `handle`'s acquire of `name` sent at `sent`, taken as
    /// [`Core::on_guard_acquire`] takes it: a grant the core did not take reads as held by
    /// this session (tried again once its release finished).
    pub fn on_lock_acquire(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) -> Result<Acquire> {
        self.end_acquire(Space::Lease, name);
        let r = match reply {
            Ok(Acquire::Acquired(term)) => {
                (self.take_grant(Holder::Lock(handle), &term, sent, now)).map(|taken| match taken {
                    true => Acquire::Acquired(term),
                    false => Acquire::Held(Owner {
                        session: self.session.clone(),
                        token: term.token,
                        remaining: term.remaining,
                        value: String::new(),
                    }),
                })
            }
            other => self.unless_expired(now, other),
        };
        self.forget_settled_release(Space::Lease, name);
        r
    }

    /// A reply without a grant: `SessionExpired` expires the session.
    pub(super) fn unless_expired<T>(&mut self, now: Instant, reply: Result<T>) -> Result<T> {
        if matches!(reply, Err(Error::SessionExpired { .. })) && self.state.is_live() {
            self.expire(now, false);
        }
        reply
    }

    /// Ends an acquire that left the session queued behind another waiter (fair locks).
    pub fn on_lock_queued(&mut self, name: &LeaseName) {
        self.end_acquire(Space::Lease, name);
        self.forget_settled_release(Space::Lease, name);
    }

    /// Takes a grant for `holder` if the session is live and the term may be adopted
    /// (whether it was); a grant not taken is released.
    pub(super) fn take_grant(
        &mut self,
        holder: Holder,
        term: &Term,
        sent: Instant,
        now: Instant,
    ) -> Result<bool> {
        self.check_live()?;
        if self.adopt(term.clone(), sent, now, holder) {
            return Ok(true);
        }
        self.release_stray(holder.kind(), term);
        Ok(false)
    }

    /// Releases a grant of `kind` that no handle holds, unless a release of the name is in
    /// flight or the session ended (its terms end with it). A grant of a token whose
    /// release was answered is released again: harmless if that release freed it.
    pub(super) fn release_stray(&mut self, kind: TermKind, term: &Term) {
        let space = kind.space();
        let adopted = self.terms[space]
            .get(&term.name)
            .is_some_and(|h| h.term.token == term.token);
        if self.state.is_live() && !adopted && self.releasing[space].insert(term.name.clone()) {
            self.remember_release(space, &term.name, term.token);
            self.out.push(release(kind, &term.name, term.token));
        }
    }

    /// A guard's term of `kind` is unlocked or dropped: forgets the term and returns its
    /// token to release. A term that passed its local deadline is first reported lost
    /// ([`Event::LockLost`] with the true reason); then, as for a term lost earlier, the
    /// result is [`Error::LeaseLost`] and there is nothing to release.
    pub fn unlock(
        &mut self,
        handle: HandleId,
        kind: TermKind,
        term: &Term,
        now: Instant,
    ) -> Result<Token> {
        self.settle(now);
        let (space, name) = (kind.space(), &term.name);
        match self.terms[space].get(name) {
            Some(h) if h.holder == Holder::guard(handle, kind) && h.term.token == term.token => {
                self.terms[space].remove(name);
                self.releasing[space].insert(name.clone());
                self.remember_release(space, name, term.token);
                if space == Space::Lease {
                    self.cool_down(name, now);
                    self.observers_due(name, now);
                }
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

    /// A release of `name` in `space` finished: `definitive` when the backend answered
    /// (either way: the term is then gone for good, its token never granted again), so no
    /// release of it can undo a grant any more; a failed or timed-out release may still
    /// land, or may not have happened: the next keep-alive that lists the term sends it
    /// again (nothing else would end the term while the session lives; found by the
    /// simulation, scenario `a_failed_read_write_release_is_sent_again_after_the_next_keep_alive`).
    /// Its callers waiting for the name see a release.
    pub fn on_released(&mut self, space: Space, name: &LeaseName, definitive: bool) {
        if self.releasing[space].remove(name) {
            self.seen_release(name);
        }
        if let Some(m) = self.released[space].get_mut(name) {
            m.state = match definitive {
                true => MemoState::Settled,
                false => MemoState::Uncertain,
            };
        }
        self.forget_settled_release(space, name);
    }

    /// Notes a release of `name` in `space` with `token` being sent.
    pub(super) fn remember_release(&mut self, space: Space, name: &LeaseName, token: Token) {
        let state = MemoState::Pending;
        self.released[space].insert(name.clone(), Memo { token, state });
    }

    /// Forgets the last release of `name` once no grant it could undo can arrive.
    pub(super) fn forget_settled_release(&mut self, space: Space, name: &LeaseName) {
        let settled = self.released[space]
            .get(name)
            .is_some_and(|m| m.state == MemoState::Settled);
        if settled && !self.acquiring[space].contains_key(name) {
            self.released[space].remove(name);
        }
    }

    /// How many names the core remembers a release for (bounded by the releases that did
    /// not finish definitively).
    #[cfg(test)]
    pub fn remembered_releases(&self) -> usize {
        self.released.lease.len() + self.released.rw.len()
    }

    /// Whether `name` with `token` is held in `space` and the term's local deadline is ahead.
    pub fn is_valid(&self, space: Space, name: &LeaseName, token: Token, now: Instant) -> bool {
        self.valid_for(space, name, token, now).is_some()
    }

    /// How long the term `name` with `token` in `space` stays locally valid from `now` (the
    /// earlier of the session's and the term's local deadlines), or `None` if it is not
    /// valid now.
    pub fn valid_for(
        &self,
        space: Space,
        name: &LeaseName,
        token: Token,
        now: Instant,
    ) -> Option<Duration> {
        let held = self.terms[space].get(name)?;
        let until = held.deadline.min(self.deadline);
        let valid = self.state.is_live() && held.term.token == token && now < until;
        valid.then(|| until.saturating_duration_since(now))
    }

    /// The term `holder` holds, if any.
    pub fn term_of(&self, name: &LeaseName, holder: Holder) -> Option<Term> {
        self.terms[holder.kind().space()]
            .get(name)
            .filter(|h| h.holder == holder)
            .map(|h| h.term.clone())
    }
}

/// The output that releases `name`/`token` of `kind` on the backend.
pub(super) fn release(kind: TermKind, name: &LeaseName, token: Token) -> Output {
    match kind {
        TermKind::Lock => Output::Release(name.clone(), token),
        TermKind::Rw(mode) => Output::ReleaseRw(name.clone(), mode, token),
    }
}
