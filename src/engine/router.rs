//! One backend subscription per backend and process, shared by every session on that backend:
//! each notification reaches only the sessions interested in its name (a candidate, an
//! observer or a lock caller waiting for it; a group watch), so a release among thousands of
//! sessions wakes one, not all.

use super::guarded::PanicGuard;
use super::session::Inner;
use crate::error::Result;
use crate::spi::{LeaseBackend, Notification, Subscription};
use crate::types::{GroupName, LeaseName};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// What a session wants to hear about: lease names and group names.
pub(crate) type Interest = (BTreeSet<LeaseName>, BTreeSet<GroupName>);

type Sessions = BTreeMap<u64, Weak<Inner>>;

#[derive(Default)]
struct Routes {
    leases: HashMap<LeaseName, Sessions>,
    groups: HashMap<GroupName, Sessions>,
    all: Sessions,
}

/// Routes one backend's notifications to the interested sessions of this process.
pub(crate) struct Router {
    routes: RwLock<Routes>,
    /// The highest tokens this process saw granted on this backend.
    pub(crate) tokens: super::driver::tokens::Watermarks,
    subscription: Mutex<Option<Subscription>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("sessions", &self.routes.read().all.len())
            .finish_non_exhaustive()
    }
}

type Registry = Vec<(Weak<dyn LeaseBackend>, Weak<Router>)>;

/// The routers of the process, by backend (compared by address).
static ROUTERS: Mutex<Registry> = parking_lot::const_mutex(Vec::new());

fn same(a: &Arc<dyn LeaseBackend>, b: &Arc<dyn LeaseBackend>) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const (), Arc::as_ptr(b) as *const ())
}

impl Router {
    /// The router of `backend`, subscribing to it on first use.
    pub(crate) fn for_backend(backend: &Arc<dyn LeaseBackend>) -> Result<Arc<Router>> {
        let mut registry = ROUTERS.lock();
        registry.retain(|(b, r)| b.strong_count() > 0 && r.strong_count() > 0);
        let found = registry.iter().find_map(|(b, r)| {
            let b = b.upgrade()?;
            same(&b, backend).then(|| r.upgrade()).flatten()
        });
        if let Some(router) = found {
            return Ok(router);
        }
        let router = Arc::new(Router {
            routes: RwLock::new(Routes::default()),
            tokens: Default::default(),
            subscription: Mutex::new(None),
            next: AtomicU64::new(1),
        });
        let weak = Arc::downgrade(&router);
        let sink = Arc::new(move |n: &Notification| {
            if let Some(router) = weak.upgrade() {
                router.route(n);
            }
        });
        *router.subscription.lock() = PanicGuard(backend.clone()).subscribe(sink)?;
        registry.push((Arc::downgrade(backend), Arc::downgrade(&router)));
        Ok(router)
    }

    /// Adds a session (it gets every `Resync`); returns its key.
    pub(crate) fn add(&self, session: Weak<Inner>) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.routes.write().all.insert(key, session);
        key
    }

    /// Removes a session with the interest it had.
    pub(crate) fn remove(&self, key: u64, had: &Interest) {
        let mut r = self.routes.write();
        r.all.remove(&key);
        for name in &had.0 {
            unroute(&mut r.leases, name, key);
        }
        for group in &had.1 {
            unroute(&mut r.groups, group, key);
        }
    }

    /// A session's interest changed from `old` to `new`.
    pub(crate) fn update(&self, key: u64, old: &Interest, new: &Interest) {
        let Some(session) = self.routes.read().all.get(&key).cloned() else {
            return;
        };
        let mut r = self.routes.write();
        for name in old.0.difference(&new.0) {
            unroute(&mut r.leases, name, key);
        }
        for name in new.0.difference(&old.0) {
            let sessions = r.leases.entry(name.clone()).or_default();
            sessions.insert(key, session.clone());
        }
        for group in old.1.difference(&new.1) {
            unroute(&mut r.groups, group, key);
        }
        for group in new.1.difference(&old.1) {
            let sessions = r.groups.entry(group.clone()).or_default();
            sessions.insert(key, session.clone());
        }
    }

    /// A session of this process released `name` on this backend: the others waiting for
    /// it hear it at once, without waiting for the backend's push (a round trip through its
    /// notification channel) or, on a backend without one, for their next retry.
    pub(crate) fn released_here(&self, name: &LeaseName) {
        self.route(&Notification::Released(name.clone()));
    }

    /// Hands `n` to the sessions interested in it (outside the routes' lock).
    fn route(&self, n: &Notification) {
        let targets: Vec<Arc<Inner>> = {
            let r = self.routes.read();
            let sessions = match n {
                Notification::Released(name) | Notification::Acquired(name) => r.leases.get(name),
                Notification::GroupChanged(group) => r.groups.get(group),
                Notification::Resync => Some(&r.all),
            };
            sessions
                .into_iter()
                .flat_map(|s| s.values())
                .filter_map(Weak::upgrade)
                .collect()
        };
        for session in targets {
            session.notified(n);
        }
    }
}

fn unroute<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Sessions>, k: &K, key: u64) {
    if let Some(sessions) = map.get_mut(k) {
        sessions.remove(&key);
        if sessions.is_empty() {
            map.remove(k);
        }
    }
}
