//! Group membership: join (a guard that leaves on drop), list and watch the live members.

use super::IntoGroupName;
use crate::engine::handle::{EngineHandle, HandleId, Watch};
use crate::engine::Session;
use crate::error::Result;
use crate::types::{GroupName, Member};
use crate::Event;
use crossbeam_channel::Receiver;
use parking_lot::Mutex;

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
    /// membership.leave()?; // dropping it leaves too, from the session's work queue
    /// assert!(workers.members()?.is_empty());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn group(&self, name: impl IntoGroupName) -> Result<Group> {
        let name = name.into_group_name()?;
        Ok(Group {
            inner: self.inner.clone(),
            name,
            watches: Mutex::new(Vec::new()),
        })
    }
}

/// A view of a group. Dropping it stops its watches; memberships are [`Membership`] guards.
#[derive(Debug)]
pub struct Group {
    inner: EngineHandle,
    name: GroupName,
    watches: Mutex<Vec<HandleId>>,
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &GroupName {
        &self.name
    }

    /// Joins with this session (idempotent on the backend). The membership lasts until the
    /// guard is dropped, [`Group::leave`] is called, or the session ends.
    pub fn join(&self) -> Result<Membership> {
        self.inner.join(&self.name)?;
        Ok(Membership {
            inner: self.inner.clone(),
            name: self.name.clone(),
            done: false,
        })
    }

    /// Leaves; returns whether this session was a member. Memberships of this group held
    /// by [`Membership`] guards are not re-joined after a reopen.
    pub fn leave(&self) -> Result<bool> {
        self.inner.leave_all(&self.name)
    }

    /// The live members, read from the backend.
    pub fn members(&self) -> Result<Vec<Member>> {
        self.inner.reads().members(&self.name)
    }

    /// [`Event::MembersChanged`] events: first the members now, then every change (read
    /// again on every group notification and every `renew_interval / 2`). Each call starts
    /// a watch of its own, so every receiver gets every event; all disconnect when the
    /// session closes or this `Group` is dropped.
    ///
    /// ```
    /// use simba_lease::{Config, Event, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let workers = session.group("workers")?;
    /// let (a, b) = (workers.watch()?, workers.watch()?);
    /// for rx in [&a, &b] {
    ///     let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    ///     assert!(matches!(first, Event::MembersChanged { members, .. } if members.is_empty()));
    /// }
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn watch(&self) -> Result<Receiver<Event>> {
        let (h, rx) = self.inner.watch(Watch::Members(self.name.clone()))?;
        self.watches.lock().push(h);
        Ok(rx)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for h in std::mem::take(&mut *self.watches.lock()) {
            self.inner.unwatch(h);
        }
    }
}

/// Membership of a group; dropping it leaves the group (the backend call runs on the
/// session's work queue; [`Membership::leave`] leaves before returning).
pub struct Membership {
    inner: EngineHandle,
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
        self.leave_once(true)
    }

    /// Leaves now if `wait`, else queues the leave on the session's work queue.
    fn leave_once(&mut self, wait: bool) -> Result<bool> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(false);
        }
        self.inner.leave(&self.name, wait)
    }
}

impl Drop for Membership {
    /// Leaves; the backend call runs on the session's work queue.
    fn drop(&mut self) {
        if let Err(e) = self.leave_once(false) {
            log::warn!("leaving {} failed: {}", self.name, e.report());
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
