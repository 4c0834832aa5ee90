//! Fair-lock queues in the model: arrival order, a place's patience, leaving, and the log
//! the checker reads (as `MemoryBackend`'s queues).

use super::{Model, QueueEntry, QueueStep};
use crate::error::Result;
use crate::spi::{Acquire, Queued};
use crate::types::{LeaseName, SessionId};
use std::time::Duration;

impl Model {
    /// Takes `name` for `id` at true time `t` in arrival order (fair locks), keeping its
    /// place for `patience` more; as `MemoryBackend::acquire_queued`. Also whether the grant
    /// began a new term.
    pub fn acquire_queued(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<(Queued, bool)> {
        let remaining = self.check_live(t, id)?;
        let now = self.clock(t);
        self.prune_queue(name, now);
        let until = now + patience.as_nanos() as u64;
        let q = self.tables.queues.entry(name.clone()).or_default();
        let i = match q.iter().position(|(s, _)| s == id) {
            Some(i) => {
                q[i].1 = until;
                i
            }
            None => {
                q.push((id.clone(), until));
                q.len() - 1
            }
        };
        // Premise `unfair_queue`: the newest waiter goes first.
        let ahead = if self.unfair_queue {
            q.len() - 1 - i
        } else {
            i
        };
        self.log_queue(now, name, id, QueueStep::Place(until));
        let holds = self
            .tables
            .leases
            .get(name)
            .is_some_and(|l| l.session.as_ref() == Some(id));
        if ahead > 0 && !holds {
            let owner = self.owner(t, name);
            return Ok((Queued::Waiting { ahead, owner }, false));
        }
        let (reply, new_term) = self.take(t, id, name, "", remaining)?;
        Ok(match reply {
            Acquire::Acquired(term) => {
                if let Some(q) = self.tables.queues.get_mut(name) {
                    q.retain(|(s, _)| s != id);
                    if q.is_empty() {
                        self.tables.queues.remove(name);
                    }
                }
                let live = self
                    .tables
                    .sessions
                    .iter()
                    .filter(|(_, r)| r.expires > now)
                    .map(|(s, _)| s.clone())
                    .collect();
                self.log_queue(now, name, id, QueueStep::Take { new_term, live });
                (Queued::Acquired(term), new_term)
            }
            Acquire::Held(owner) => (
                Queued::Waiting {
                    ahead: 0,
                    owner: Some(owner),
                },
                false,
            ),
        })
    }

    /// Removes `id`'s place in `name`'s queue at true time `t`: whether it had one, and
    /// whether the next in line must be told (the lease is free).
    pub fn leave_queue(&mut self, t: u64, id: &SessionId, name: &LeaseName) -> (bool, bool) {
        let Some(q) = self.tables.queues.get_mut(name) else {
            return (false, false);
        };
        let before = q.len();
        q.retain(|(s, _)| s != id);
        let left = q.len() < before;
        if q.is_empty() {
            self.tables.queues.remove(name);
        }
        if left {
            self.log_queue(self.clock(t), name, id, QueueStep::Leave);
        }
        (left, left && self.owner(t, name).is_none())
    }

    /// The live places of `name`'s queue at true time `t`, in arrival order.
    pub fn queue(&self, t: u64, name: &LeaseName) -> Vec<SessionId> {
        let now = self.clock(t);
        let sessions = &self.tables.sessions;
        let places = self.tables.queues.get(name).into_iter().flatten();
        let live = places.filter(|(id, until)| {
            *until > now && sessions.get(id).is_some_and(|s| s.expires > now)
        });
        live.map(|(id, _)| id.clone()).collect()
    }

    /// Drops the dead places of `name`'s queue (session gone or patience run out).
    fn prune_queue(&mut self, name: &LeaseName, now: u64) {
        let sessions = &self.tables.sessions;
        if let Some(q) = self.tables.queues.get_mut(name) {
            q.retain(|(id, until)| {
                *until > now && sessions.get(id).is_some_and(|s| s.expires > now)
            });
            if q.is_empty() {
                self.tables.queues.remove(name);
            }
        }
    }

    fn log_queue(&mut self, at: u64, name: &LeaseName, id: &SessionId, step: QueueStep) {
        self.queue_log.push(QueueEntry {
            at,
            name: name.clone(),
            session: id.clone(),
            step,
        });
    }
}
