//! Group membership: join, leave, list and watch the live members.

use super::IntoGroupName;
use crate::engine::session::Inner;
use crate::engine::{HandleId, Session};
use crate::error::Result;
use crate::types::{GroupName, Member};
use crate::Event;
use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

impl Session {
    /// A handle on the group `name` (no I/O until used). Membership lives as long as the
    /// session: a member whose session expires disappears from the group.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::sync::Arc;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::builder().metadata("10.0.0.7:80").build()?)?;
    /// let workers = session.group("workers")?;
    /// workers.join()?;
    /// assert_eq!(workers.members()?[0].metadata.as_str(), "10.0.0.7:80");
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn group(&self, name: impl IntoGroupName) -> Result<Group> {
        let name = name.try_into()?;
        Ok(Group {
            inner: self.inner.clone(),
            handle: self.inner.next_handle(),
            name,
            joined: AtomicBool::new(false),
            watch: Mutex::new(None),
        })
    }
}

/// A group handle. Dropping it leaves the group if it joined, and stops its watch.
pub struct Group {
    inner: Arc<Inner>,
    handle: HandleId,
    name: GroupName,
    joined: AtomicBool,
    watch: Mutex<Option<Receiver<Event>>>,
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &GroupName {
        &self.name
    }

    /// Joins with this session (idempotent).
    pub fn join(&self) -> Result<()> {
        self.inner.lock_shared().core.check_live()?;
        let r = self.inner.backend.join(&self.inner.id, &self.name);
        if let Err(e @ crate::Error::SessionExpired { .. }) = &r {
            log::warn!("joining {} failed: {e}", self.name);
        }
        r?;
        self.joined.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Leaves; returns whether this session was a member.
    pub fn leave(&self) -> Result<bool> {
        self.joined.store(false, Ordering::SeqCst);
        self.inner.backend.leave(&self.inner.id, &self.name)
    }

    /// The live members, read from the backend.
    pub fn members(&self) -> Result<Vec<Member>> {
        self.inner.backend.members(&self.name)
    }

    /// [`Event::MembersChanged`] events: first the members now, then every change (read
    /// again on every group notification and every `renew_interval / 2`). Every call returns
    /// the same queue.
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
        if self.joined.load(Ordering::SeqCst) && self.inner.lock_shared().core.check_live().is_ok()
        {
            if let Err(e) = self.leave() {
                log::warn!("leaving {} failed: {e}", self.name);
            }
        }
        let h = self.handle;
        self.inner.with_core(|c| c.remove_watch(h));
        self.inner.listeners.remove(h);
    }
}
