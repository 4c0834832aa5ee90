//! Notifications from the backend, the handover of candidates and watches to a reopened
//! session, and closing.

use super::*;

impl Core {
    /// A backend notification. Returns whether it concerned anything of this session (else
    /// nothing changed and nobody needs waking).
    pub fn notify(&mut self, n: &Notification, now: Instant) -> bool {
        match n {
            Notification::Released(name) => {
                let mut hit = self.seen_release(name);
                for c in self.candidates.values_mut().filter(|c| &c.key == name) {
                    c.wake(now);
                    hit = true;
                }
                self.observers_due(name, now) || hit
            }
            Notification::Acquired(name) => self.observers_due(name, now),
            Notification::GroupChanged(g) => {
                let mut hit = false;
                for w in self.groups.values_mut().filter(|w| &w.s.key == g) {
                    w.s.wake(now);
                    hit = true;
                }
                hit
            }
            Notification::Resync => {
                self.waiting.values_mut().for_each(|w| w.1 += 1);
                self.candidates.values_mut().for_each(|c| c.wake(now));
                self.observers.values_mut().for_each(|w| w.s.wake(now));
                self.groups.values_mut().for_each(|w| w.s.wake(now));
                true
            }
        }
    }

    /// The core of the session that replaces this (expired) one, opened by a request sent
    /// at `sent` that reported `remaining`: it takes over this one's registrations
    /// ([`Core::handover`], [`Core::take_over`]), with this one's timing.
    pub fn successor(
        &mut self,
        session: SessionId,
        sent: Instant,
        remaining: Duration,
        seed: u64,
        now: Instant,
    ) -> Core {
        let handover = self.handover();
        let mut next = Core::new(self.t, session, sent, remaining, seed);
        next.take_over(handover, self.session.clone(), now);
        next
    }

    /// Hands the registrations of this (expired) session over to the next one.
    pub fn handover(&mut self) -> Handover {
        self.interest_dirty = true;
        Handover {
            waiting: std::mem::take(&mut self.waiting),
            candidates: std::mem::take(&mut self.candidates)
                .into_iter()
                .map(|(h, c)| (h, c.key, self.lost_terms.remove(&h)))
                .collect(),
            observers: std::mem::take(&mut self.observers)
                .into_iter()
                .map(|(h, w)| (h, w.s.key, w.last))
                .collect(),
            groups: std::mem::take(&mut self.groups)
                .into_iter()
                .map(|(h, w)| (h, w.s.key, w.last))
                .collect(),
        }
    }

    /// Takes over the registrations of the expired session `old` (all due at once) and
    /// emits [`Event::SessionReopened`].
    pub fn take_over(&mut self, h: Handover, old: SessionId, now: Instant) {
        self.waiting = h.waiting;
        self.interest_dirty = true;
        for (handle, name, lost) in h.candidates {
            self.candidates.insert(handle, Scheduled::new(name, now));
            if let Some(term) = lost {
                self.lost_terms.insert(handle, term);
            }
        }
        for (handle, name, last) in h.observers {
            self.observers.insert(
                handle,
                Watch {
                    s: Scheduled::new(name, now),
                    last,
                },
            );
        }
        for (handle, group, last) in h.groups {
            self.groups.insert(
                handle,
                Watch {
                    s: Scheduled::new(group, now),
                    last,
                },
            );
        }
        let new = self.session.clone();
        self.emit(None, Event::SessionReopened { old, new });
    }

    /// Closes the session locally: every term ends with `Closed`. Returns false if it was
    /// already closed. The driver then closes the backend session.
    pub fn close(&mut self) -> bool {
        if self.state == State::Closed {
            return false;
        }
        let terms = std::mem::take(&mut self.terms);
        for (_, held) in terms.lease.into_iter().chain(terms.rw) {
            let (term, reason) = (held.term, LossReason::Closed);
            let h = held.holder.handle();
            match held.holder {
                Holder::Election(_) => self.emit(Some(h), Event::Revoked { term, reason }),
                Holder::Lock(_) | Holder::Rw(..) => {
                    self.emit(Some(h), Event::LockLost { term, reason })
                }
            }
        }
        self.candidates.clear();
        self.interest_dirty = true;
        self.lost_terms.clear();
        self.observers.clear();
        self.groups.clear();
        self.state = State::Closed;
        let session = self.session.clone();
        self.emit(None, Event::Closed { session });
        true
    }
}
