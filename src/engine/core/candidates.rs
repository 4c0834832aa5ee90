//! Election candidates: registering and removing them, their attempts and the replies
//! (one `Elected` per term).

use super::*;

impl Core {
    /// Whether `handle` is a registered candidate.
    pub fn is_candidate(&self, handle: HandleId) -> bool {
        self.candidates.contains_key(&handle)
    }

    /// Registers an election candidate for `name`; it attempts at once, or once the
    /// cool-down after this session's own voluntary release of `name` has passed.
    pub fn add_candidate(&mut self, handle: HandleId, name: LeaseName, now: Instant) {
        self.interest_dirty = true;
        self.candidates.insert(handle, Scheduled::new(name, now));
    }

    /// Withdraws a candidate. A term that passed its local deadline is first reported lost
    /// with the true reason. If the candidate still led, its term ends with
    /// `Revoked{Resigned}` and is returned, to release; [`Error::LeaseLost`] if its last
    /// term was lost and not followed by another; `Ok(None)` if it never led.
    pub fn remove_candidate(&mut self, handle: HandleId, now: Instant) -> Result<Option<Term>> {
        self.settle(now);
        let lost = self.lost_terms.remove(&handle);
        let Some(c) = self.candidates.remove(&handle) else {
            return Ok(None);
        };
        self.interest_dirty = true;
        match self.terms.lease.get(&c.key) {
            Some(held) if held.holder == Holder::Election(handle) => {}
            _ => return lost.map_or(Ok(None), |t| Err(lease_lost(&t))),
        }
        let Some(held) = self.terms.lease.remove(&c.key) else {
            return Ok(None);
        };
        let token = held.term.token;
        self.releasing.lease.insert(c.key.clone());
        self.remember_release(Space::Lease, &c.key, token);
        self.cool_down(&c.key, now);
        self.observers_due(&c.key, now);
        let term = held.term;
        let reason = LossReason::Resigned;
        self.emit(
            Some(handle),
            Event::Revoked {
                term: term.clone(),
                reason,
            },
        );
        Ok(Some(term))
    }

    /// The result of a candidate's attempt sent at `sent`.
    pub fn on_attempt(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) {
        self.end_acquire(Space::Lease, name);
        // A held term past its deadline is lost first: a re-grant never revives it silently.
        self.settle(now);
        self.attempt_reply(handle, name, sent, now, reply);
        self.forget_settled_release(Space::Lease, name);
    }

    pub(super) fn attempt_reply(
        &mut self,
        handle: HandleId,
        name: &LeaseName,
        sent: Instant,
        now: Instant,
        reply: Result<Acquire>,
    ) {
        let due = self.retry_at(now);
        let Some(c) = self.candidates.get_mut(&handle) else {
            if let Ok(Acquire::Acquired(term)) = reply {
                self.release_stray(TermKind::Lock, &term);
            }
            return;
        };
        c.finish(now, due);
        match reply {
            Ok(Acquire::Acquired(term)) => {
                if !self.state.is_live() {
                    return;
                }
                if self.renew_held(&term, sent, Holder::Election(handle)) {
                    // The term this candidate holds already (an attempt that overlapped
                    // another, e.g. across `resign` and `campaign`): announced once.
                    return;
                }
                if self.adopt(term.clone(), sent, now, Holder::Election(handle)) {
                    self.emit(Some(handle), Event::Elected { term });
                } else {
                    self.release_stray(TermKind::Lock, &term);
                    if let Some(c) = self.candidates.get_mut(&handle) {
                        c.due = now; // again once the release in flight has finished
                    }
                }
            }
            Ok(Acquire::Held(_)) => {}
            Err(Error::SessionExpired { .. }) => {
                if self.state.is_live() {
                    self.expire(now, false);
                }
            }
            Err(e) => log::warn!("candidate for {name} failed to acquire: {}", e.report()),
        }
    }
}
