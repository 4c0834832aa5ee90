//! Fair-lock queues and term values in memory.

use super::*;

impl MemoryBackend {
    pub(super) fn value_set(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        crate::types::check_value(value)?;
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        let set = match t.leases.get_mut(name) {
            Some(l) if l.session.as_ref() == Some(session) && l.token == token.get() => {
                value.clone_into(&mut l.value);
                true
            }
            _ => false,
        };
        drop(t);
        if set {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(set)
    }

    /// One step: the term is never seen without its value.
    pub(super) fn value_acquire(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        crate::types::check_value(value)?;
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        let (reply, new_term) = t.take(session, name, now)?;
        let set = matches!(reply, Acquire::Acquired(_)) && !value.is_empty();
        if set {
            if let Some(l) = t.leases.get_mut(name) {
                value.clone_into(&mut l.value);
            }
        }
        drop(t);
        if new_term || set {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(reply)
    }

    pub(super) fn queued_acquire(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        crate::backends::options::check_lease(patience)?;
        let now = self.clock.now();
        let mut t = self.tables.lock();
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        t.prune_queue(name, now);
        let until = now + patience;
        let q = t.queues.entry(name.clone()).or_default();
        let ahead = match q.iter().position(|(id, _)| id == session) {
            Some(i) => {
                q[i].1 = until;
                i
            }
            None => {
                q.push((session.clone(), until));
                q.len() - 1
            }
        };
        let holds = t
            .leases
            .get(name)
            .is_some_and(|l| l.session.as_ref() == Some(session));
        if ahead > 0 && !holds {
            let owner = t.owner(name, now);
            return Ok(Queued::Waiting { ahead, owner });
        }
        let (reply, new_term) = t.take(session, name, now)?;
        let reply = match reply {
            Acquire::Acquired(term) => {
                if let Some(q) = t.queues.get_mut(name) {
                    q.retain(|(id, _)| id != session);
                    if q.is_empty() {
                        t.queues.remove(name);
                    }
                }
                Queued::Acquired(term)
            }
            Acquire::Held(owner) => Queued::Waiting {
                ahead: 0,
                owner: Some(owner),
            },
        };
        drop(t);
        if new_term {
            self.subscribers
                .publish(&Notification::Acquired(name.clone()));
        }
        Ok(reply)
    }

    pub(super) fn queue_leave(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        let Some(q) = t.queues.get_mut(name) else {
            return Ok(false);
        };
        let before = q.len();
        q.retain(|(id, _)| id != session);
        let left = q.len() < before;
        if q.is_empty() {
            t.queues.remove(name);
        }
        // The next in line may be waiting for the lease to be free: tell it.
        let wake = left && t.owner(name, now).is_none();
        drop(t);
        if wake {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(left)
    }

    pub(super) fn queue_list(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        t.prune_queue(name, now);
        Ok(t.queues
            .get(name)
            .map(|q| q.iter().map(|(id, _)| id.clone()).collect())
            .unwrap_or_default())
    }
}
