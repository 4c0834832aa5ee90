//! Session liveness: ticks, the keep-alive and its reply, jeopardy, expiry, and the loss
//! of every term that expiry ends.

use super::*;

impl Core {
    /// Advances time: starts keep-alives and due tasks, detects jeopardy and loss.
    pub fn tick(&mut self, now: Instant) {
        if !self.settle(now) {
            return;
        }
        match self.keep_alive_sent {
            None if now >= self.next_keep_alive => {
                self.keep_alive_sent = Some(now);
                self.out.push(Output::KeepAlive);
            }
            Some(sent) if now >= sent + self.t.renew && self.state == State::Valid => {
                self.enter_jeopardy();
            }
            _ => {}
        }
        let mut run = Vec::new();
        for (h, c) in self.candidates.iter_mut() {
            let blocked =
                self.terms.lease.contains_key(&c.key) || self.releasing.lease.contains(&c.key);
            // Not even a notification (of its own release, say) ends a cool-down early.
            let cooling = self.cooldown.get(&c.key).is_some_and(|until| *until > now);
            if !c.running && c.due <= now && !blocked && !cooling {
                c.running = true;
                *self.acquiring.lease.entry(c.key.clone()).or_insert(0) += 1;
                run.push(Task::Attempt(*h, c.key.clone()));
            }
        }
        for (h, w) in self.observers.iter_mut() {
            if !w.s.running && w.s.due <= now {
                w.s.running = true;
                run.push(Task::Owner(*h, w.s.key.clone()));
            }
        }
        for (h, w) in self.groups.iter_mut() {
            if !w.s.running && w.s.due <= now {
                w.s.running = true;
                run.push(Task::Members(*h, w.s.key.clone()));
            }
        }
        self.out.extend(run.into_iter().map(Output::Run));
    }

    /// Ends what passed its local deadline by `now` (the session, or single terms), with the
    /// true reason, before anything else looks at the terms. Returns whether the session is
    /// still live.
    pub fn settle(&mut self, now: Instant) -> bool {
        if !self.state.is_live() {
            return false;
        }
        if now >= self.deadline {
            self.expire(now, true);
            return false;
        }
        for space in [Space::Lease, Space::Rw] {
            let due: Vec<LeaseName> = (self.terms[space].iter())
                .filter(|(_, h)| h.deadline <= now)
                .map(|(n, _)| n.clone())
                .collect();
            for name in due {
                self.lose(space, &name, LossReason::Expired, now);
            }
        }
        true
    }

    /// When [`Core::tick`] has something to do next (`None` once terminal).
    pub fn next_wake(&self) -> Option<Instant> {
        if !self.state.is_live() {
            return None;
        }
        let mut at = self.deadline;
        let mut consider = |t: Instant| at = at.min(t);
        match self.keep_alive_sent {
            None => consider(self.next_keep_alive),
            Some(sent) if self.state == State::Valid => consider(sent + self.t.renew),
            Some(_) => {}
        }
        (self.terms.lease.values())
            .chain(self.terms.rw.values())
            .for_each(|h| consider(h.deadline));
        self.candidates
            .values()
            .filter(|c| !c.running && !self.terms.lease.contains_key(&c.key))
            .filter(|c| !self.releasing.lease.contains(&c.key))
            .for_each(|c| {
                let cooling = self.cooldown.get(&c.key).copied();
                consider(cooling.map_or(c.due, |until| until.max(c.due)))
            });
        self.observers
            .values()
            .filter(|w| !w.s.running)
            .for_each(|w| consider(w.s.due));
        self.groups
            .values()
            .filter(|w| !w.s.running)
            .for_each(|w| consider(w.s.due));
        Some(at)
    }

    pub(super) fn enter_jeopardy(&mut self) {
        if self.state == State::Valid {
            self.state = State::Jeopardy;
            let session = self.session.clone();
            self.emit(None, Event::Jeopardy { session });
        }
    }

    /// The reply (or failure) of the keep-alive sent at `sent`.
    pub fn on_keep_alive(&mut self, sent: Instant, now: Instant, reply: Result<KeepAlive>) {
        self.keep_alive_sent = None;
        if !self.state.is_live() {
            return;
        }
        match reply {
            Ok(ka) => {
                self.deadline = self.deadline.max(self.t.local(sent, ka.remaining));
                self.health.keep_alive_rtt = Some(now.saturating_duration_since(sent));
                self.health.slack = Some(self.deadline.saturating_duration_since(now));
                self.health.failures = 0;
                self.next_keep_alive = sent + self.t.renew;
                if self.state == State::Jeopardy {
                    self.state = State::Valid;
                    let session = self.session.clone();
                    self.emit(None, Event::Recovered { session });
                }
                // Every term is judged alike, whatever its kind: one listed with its token
                // lives on; one not listed is lost, unless taken after the keep-alive was
                // sent (the reply may predate it); one listed that no handle holds (a grant
                // whose reply was lost, a release that failed) is released.
                let rw_left = ka.remaining;
                let listed = (ka.leases.iter())
                    .map(|l| (Space::Lease, &l.name, l.token, l.remaining, TermKind::Lock))
                    .chain(
                        (ka.rw.iter())
                            .map(|l| (Space::Rw, &l.name, l.token, rw_left, TermKind::Rw(l.mode))),
                    );
                let listed: BTreeMap<(Space, &LeaseName), _> = listed
                    .map(|(space, name, token, left, kind)| ((space, name), (token, left, kind)))
                    .collect();
                let mut lost = Vec::new();
                for space in [Space::Lease, Space::Rw] {
                    for (name, held) in self.terms[space].iter_mut() {
                        match listed.get(&(space, name)) {
                            Some((token, left, _)) if *token == held.term.token => {
                                held.deadline = held.deadline.max(self.t.local(sent, *left));
                            }
                            _ if held.confirmed > sent => {}
                            _ => lost.push((space, name.clone())),
                        }
                    }
                }
                for (space, name) in lost {
                    self.lose(space, &name, LossReason::Missing, now);
                }
                for ((space, name), (token, _, kind)) in listed {
                    let known =
                        (self.terms[space].get(name)).is_some_and(|h| h.term.token == token);
                    if !known
                        && !self.acquiring[space].contains_key(name)
                        && self.releasing[space].insert(name.clone())
                    {
                        log::debug!("releasing {name} (token {token}): held but unknown");
                        self.remember_release(space, name, token);
                        self.out.push(terms::release(kind, name, token));
                    }
                }
                if now >= self.deadline {
                    self.expire(now, true);
                }
            }
            Err(Error::SessionExpired { .. }) => self.expire(now, false),
            Err(e) => {
                self.health.failures += 1;
                log::warn!(
                    "keep-alive of session {} failed: {}",
                    self.session,
                    e.report()
                );
                self.enter_jeopardy();
                self.next_keep_alive = now + self.t.renew / 4;
            }
        }
    }

    pub(super) fn expire(&mut self, now: Instant, locally: bool) {
        for space in [Space::Lease, Space::Rw] {
            let names: Vec<LeaseName> = self.terms[space].keys().cloned().collect();
            for name in names {
                self.lose(space, &name, LossReason::SessionExpired, now);
            }
        }
        self.state = State::Expired;
        // Closing would end the terms cleanly, without the lock-delay they are owed.
        if locally && self.t.lock_delay.is_zero() {
            self.out.push(Output::CloseBackend);
        }
        let session = self.session.clone();
        self.emit(None, Event::SessionExpired { session });
    }

    pub(super) fn lose(
        &mut self,
        space: Space,
        name: &LeaseName,
        reason: LossReason,
        now: Instant,
    ) {
        let Some(held) = self.terms[space].remove(name) else {
            return;
        };
        let term = held.term;
        match held.holder {
            Holder::Election(h) => {
                let due = self.retry_at(now);
                if let Some(c) = self.candidates.get_mut(&h) {
                    c.due = due;
                    self.lost_terms.insert(h, term.clone());
                }
                self.emit(Some(h), Event::Revoked { term, reason });
            }
            Holder::Lock(h) | Holder::Rw(h, _) => {
                self.emit(Some(h), Event::LockLost { term, reason })
            }
        }
        if space == Space::Lease {
            self.observers_due(name, now);
        }
    }

    /// Wakes the observers of `name`; whether there were any.
    pub(super) fn observers_due(&mut self, name: &LeaseName, now: Instant) -> bool {
        let mut hit = false;
        for w in self.observers.values_mut().filter(|w| &w.s.key == name) {
            w.s.wake(now);
            hit = true;
        }
        hit
    }
}
