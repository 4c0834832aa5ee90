//! Group membership: join (a guard that leaves on drop), list and watch the live members.

use super::IntoGroupName;
use crate::engine::session::Inner;
use crate::engine::{HandleId, Session};
use crate::error::Result;
use crate::types::{GroupName, Member};
use crate::Event;
use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use std::sync::Arc;

impl Session {
    /// A view of the group `name` (no I/O until used): join it, list or watch its members.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::sync::Arc;
    /// let config = Config::builder().metadata("10.0.0.7:80").build()?;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), config)?;
    /// let workers = session.group("workers")?;
    /// let membership = workers.join()?;
    /// assert_eq!(workers.members()?[0].metadata.as_str(), "10.0.0.7:80");
    /// drop(membership); // leaves
    /// assert!(workers.members()?.is_empty());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn group(&self, name: impl IntoGroupName) -> Result<Group> {
        let name = name.into_group_name()?;
        Ok(Group {
            inner: self.inner.clone(),
            handle: self.inner.next_handle(),
            name,
            watch: Mutex::new(None),
        })
    }
}

/// A view of a group. Dropping it stops its watch; memberships are [`Membership`] guards.
pub struct Group {
    inner: Arc<Inner>,
    handle: HandleId,
    name: GroupName,
    watch: Mutex<Option<Receiver<Event>>>,
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &GroupName {
        &self.name
    }

    /// Joins with this session (idempotent on the backend). The membership lasts until the
    /// guard is dropped, [`Group::leave`] is called, or the session ends.
    pub fn join(&self) -> Result<Membership> {
        // Counted under the same lock that reads the id: a reopen either sees the count
        // (and re-joins) or has already swapped the session in.
        let id = {
            let mut s = self.inner.lock_shared();
            s.core.check_live()?;
            *s.joined.entry(self.name.clone()).or_insert(0) += 1;
            s.core.session().clone()
        };
        if let Err(e) = self.inner.backend.join(&id, &self.name) {
            let mut s = self.inner.lock_shared();
            if let Some(n) = s.joined.get_mut(&self.name) {
                *n -= 1;
                if *n == 0 {
                    s.joined.remove(&self.name);
                }
            }
            return Err(e);
        }
        Ok(Membership {
            inner: self.inner.clone(),
            name: self.name.clone(),
            done: false,
        })
    }

    /// Leaves; returns whether this session was a member. Memberships of this group held
    /// by [`Membership`] guards are not re-joined after a reopen.
    pub fn leave(&self) -> Result<bool> {
        self.inner.lock_shared().joined.remove(&self.name);
        self.inner.backend.leave(&self.inner.id(), &self.name)
    }

    /// The live members, read from the backend.
    pub fn members(&self) -> Result<Vec<Member>> {
        self.inner.backend.members(&self.name)
    }

    /// [`Event::MembersChanged`] events: first the members now, then every change (read
    /// again on every group notification and every `renew_interval / 2`). Every call returns
    /// the same queue; it disconnects when the session closes.
    pub fn watch(&self) -> Result<Receiver<Event>> {
        let mut w = self.watch.lock();
        if let Some(rx) = &*w {
            return Ok(rx.clone());
        }
        self.inner.lock_shared().core.check_live()?;
        let rx = self.inner.listeners.channel(self.handle);
        let (h, now, name) = (self.handle, self.inner.now(), self.name.clone());
        self.inner.with_core(|c| c.add_group_watch(h, name, now));
        *w = Some(rx.clone());
        Ok(rx)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let h = self.handle;
        self.inner.with_core(|c| c.remove_watch(h));
        self.inner.drop_listeners(h);
    }
}

/// Membership of a group; dropping it leaves the group.
pub struct Membership {
    inner: Arc<Inner>,
    name: GroupName,
    done: bool,
}

impl Membership {
    /// The group.
    pub fn group(&self) -> &GroupName {
        &self.name
    }

    /// Leaves now (unless another guard of this session still holds the group), reporting
    /// a backend failure (dropping only logs it).
    pub fn leave(mut self) -> Result<bool> {
        self.leave_once()
    }

    fn leave_once(&mut self) -> Result<bool> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(false);
        }
        let id = {
            let mut s = self.inner.lock_shared();
            let last = match s.joined.get_mut(&self.name) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    s.joined.remove(&self.name);
                    true
                }
                None => false,
            };
            if !last || s.core.check_live().is_err() {
                return Ok(false);
            }
            s.core.session().clone()
        };
        self.inner.backend.leave(&id, &self.name)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Err(e) = self.leave_once() {
            log::warn!("leaving {} failed: {e}", self.name);
        }
    }
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("group", &self.name)
            .finish()
    }
}
