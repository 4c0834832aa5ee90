//! Observers of a lease's owner and watchers of a group's members: when they read, and
//! what they report.

use super::*;

impl Core {
    /// Registers an observer of `name`; it reads the owner at once.
    pub fn add_observer(&mut self, handle: HandleId, name: LeaseName, now: Instant) {
        let s = Scheduled::new(name, now);
        self.interest_dirty = true;
        self.observers.insert(handle, Watch { s, last: None });
    }

    /// Registers a watcher of `group`; it reads the members at once.
    pub fn add_group_watch(&mut self, handle: HandleId, group: GroupName, now: Instant) {
        let s = Scheduled::new(group, now);
        self.interest_dirty = true;
        self.groups.insert(handle, Watch { s, last: None });
    }

    /// Removes an observer or group watcher.
    pub fn remove_watch(&mut self, handle: HandleId) {
        self.interest_dirty = true;
        self.observers.remove(&handle);
        self.groups.remove(&handle);
    }

    /// The result of an observer's read.
    pub fn on_owner(&mut self, handle: HandleId, now: Instant, reply: Result<Option<Owner>>) {
        let due = self.retry_at(now);
        let Some(w) = self.observers.get_mut(&handle) else {
            return;
        };
        w.s.finish(now, due);
        if !self.state.is_live() {
            // An expired session reports nothing more (found by the simulation; scenario
            // `a_read_answered_after_expiry_reports_nothing`); after a reopen the new session
            // reads again at once.
            return;
        }
        match reply {
            Ok(owner) => {
                let key = owner
                    .as_ref()
                    .map(|o| (o.session.clone(), o.token, o.value.clone()));
                if w.last.as_ref() != Some(&key) {
                    w.last = Some(key);
                    let name = w.s.key.clone();
                    self.emit(Some(handle), Event::LeaderChanged { name, owner });
                }
            }
            Err(e) => log::warn!(
                "observer of {} failed to read the owner: {}",
                w.s.key,
                e.report()
            ),
        }
    }

    /// The result of a group watcher's read.
    pub fn on_members(&mut self, handle: HandleId, now: Instant, reply: Result<Vec<Member>>) {
        let due = self.retry_at(now);
        let Some(w) = self.groups.get_mut(&handle) else {
            return;
        };
        w.s.finish(now, due);
        if !self.state.is_live() {
            // An expired session reports nothing more (found by the simulation; scenario
            // `a_read_answered_after_expiry_reports_nothing`); after a reopen the new session
            // reads again at once.
            return;
        }
        match reply {
            Ok(members) => {
                let now_set: BTreeSet<Member> = members.into_iter().collect();
                let first = w.last.is_none();
                let before = w.last.take().unwrap_or_default();
                let joined: Vec<Member> = now_set.difference(&before).cloned().collect();
                let left: Vec<Member> = before.difference(&now_set).cloned().collect();
                let changed = !joined.is_empty() || !left.is_empty();
                let group = w.s.key.clone();
                w.last = Some(now_set.clone());
                if changed || first {
                    let members = now_set.into_iter().collect();
                    self.emit(
                        Some(handle),
                        Event::MembersChanged {
                            group,
                            members,
                            joined,
                            left,
                        },
                    );
                }
            }
            Err(e) => log::warn!(
                "watcher of group {} failed to read members: {}",
                w.s.key,
                e.report()
            ),
        }
    }
}
