//! The names a session's handles use: a lock, a read-write lock or an election candidate
//! reserves its name while it takes, holds or runs for it, so two handles of one session
//! never share a term (the backend would answer a second acquire by the same session with
//! the same term). A thread that asks for a name it already reserved gets
//! [`Error::AlreadyHeld`](crate::Error::AlreadyHeld) instead of waiting for itself: locks are
//! not reentrant.

use crate::engine::core::HandleId;
use crate::types::LeaseName;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use crate::engine::core::Space;

/// What [`Reserved::reserve`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Reserved now for the asking handle.
    Now,
    /// Another thread's handle has it.
    ByOther,
    /// A handle of the asking thread has it.
    ByThisThread,
}

/// The names reserved by a session's handles, with the handle and the thread (a key of
/// [`this_thread`], or a simulated thread's) that asked.
#[derive(Debug, Default)]
pub(crate) struct Reserved {
    names: BTreeMap<(Space, LeaseName), (HandleId, u64)>,
}

impl Reserved {
    /// Reserves `name` in `space` for handle `h` of `thread` if no handle has it.
    pub(crate) fn reserve(
        &mut self,
        space: Space,
        name: &LeaseName,
        h: HandleId,
        thread: u64,
    ) -> Taken {
        match self.names.get(&(space, name.clone())) {
            None => {
                self.names.insert((space, name.clone()), (h, thread));
                Taken::Now
            }
            Some((_, by)) if *by == thread => Taken::ByThisThread,
            Some(_) => Taken::ByOther,
        }
    }

    /// Frees `name` in `space` if handle `h` has it.
    pub(crate) fn unreserve(&mut self, space: Space, name: &LeaseName, h: HandleId) {
        let key = (space, name.clone());
        if self.names.get(&key).is_some_and(|(by, _)| *by == h) {
            self.names.remove(&key);
        }
    }

    /// Whether any handle has `name` in `space`.
    #[cfg(test)]
    pub(crate) fn has(&self, space: Space, name: &LeaseName) -> bool {
        self.names.contains_key(&(space, name.clone()))
    }
}

/// A key of the calling thread, the same for every call it makes and distinct from every
/// other thread's.
pub(crate) fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static KEY: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    KEY.with(|k| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_handles_and_its_thread_is_told() {
        let mut r = Reserved::default();
        let n = LeaseName::new("a").unwrap();
        assert_eq!(r.reserve(Space::Lease, &n, 1, 10), Taken::Now);
        assert_eq!(r.reserve(Space::Lease, &n, 2, 10), Taken::ByThisThread);
        assert_eq!(r.reserve(Space::Lease, &n, 2, 11), Taken::ByOther);
        // Read-write names are apart.
        assert_eq!(r.reserve(Space::Rw, &n, 2, 11), Taken::Now);
        // Only its handle frees it.
        r.unreserve(Space::Lease, &n, 2);
        assert!(r.has(Space::Lease, &n));
        r.unreserve(Space::Lease, &n, 1);
        assert!(!r.has(Space::Lease, &n));
        let here = this_thread();
        assert_eq!(here, this_thread());
        let there = std::thread::spawn(this_thread).join().unwrap();
        assert_ne!(here, there);
    }
}
