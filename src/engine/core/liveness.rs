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
            let blocked = self.leases.contains_key(&c.key) || self.releasing.contains(&c.key);
            // Not even a notification (of its own release, say) ends a cool-down early.
            let cooling = self.cooldown.get(&c.key).is_some_and(|until| *until > now);
            if !c.running && c.due <= now && !blocked && !cooling {
                c.running = true;
                *self.acquiring.entry(c.key.clone()).or_insert(0) += 1;
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
        let due: Vec<LeaseName> = self
            .leases
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.lose(&name, LossReason::Expired, now);
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
        self.leases.values().for_each(|h| consider(h.deadline));
        self.candidates
            .values()
            .filter(|c| !c.running && !self.leases.contains_key(&c.key))
            .filter(|c| !self.releasing.contains(&c.key))
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
                let listed: BTreeMap<&LeaseName, _> =
                    ka.leases.iter().map(|h| (&h.name, h)).collect();
                let mut lost = Vec::new();
                for (name, held) in self.leases.iter_mut() {
                    match listed.get(name) {
                        Some(l) if l.token == held.term.token => {
                            held.deadline = held.deadline.max(self.t.local(sent, l.remaining));
                        }
                        // Acquired after the keep-alive was sent: the reply may predate it.
                        _ if held.confirmed > sent => {}
                        _ => lost.push(name.clone()),
                    }
                }
                for name in lost {
                    self.lose(&name, LossReason::Missing, now);
                }
                for l in &ka.leases {
                    let known = self
                        .leases
                        .get(&l.name)
                        .is_some_and(|h| h.term.token == l.token);
                    if !known
                        && !self.acquiring.contains_key(&l.name)
                        && self.releasing.insert(l.name.clone())
                    {
                        log::debug!("releasing {} (token {}): held but unknown", l.name, l.token);
                        self.remember_release(&l.name, l.token);
                        self.out.push(Output::Release(l.name.clone(), l.token));
                    }
                }
                self.on_rw_listed(&ka.rw, sent);
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
        let names: Vec<LeaseName> = self.leases.keys().cloned().collect();
        for name in names {
            self.lose(&name, LossReason::SessionExpired, now);
        }
        self.lose_rw_terms(LossReason::SessionExpired);
        self.state = State::Expired;
        // Closing would end the terms cleanly, without the lock-delay they are owed.
        if locally && self.t.lock_delay.is_zero() {
            self.out.push(Output::CloseBackend);
        }
        let session = self.session.clone();
        self.emit(None, Event::SessionExpired { session });
    }

    pub(super) fn lose(&mut self, name: &LeaseName, reason: LossReason, now: Instant) {
        let Some(held) = self.leases.remove(name) else {
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
            Holder::Lock(h) => self.emit(Some(h), Event::LockLost { term, reason }),
        }
        self.observers_due(name, now);
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
