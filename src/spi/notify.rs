//! Release and group-change notifications, and a registry backends can publish through.

use crate::types::{GroupName, LeaseName};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// A wake-up from the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notification {
    /// A lease was released (or its holder's session closed): candidates may take it now.
    Released(LeaseName),
    /// A lease passed to a new holder (a new term, not a re-acquire by its holder), or its
    /// holder changed the term's value: observers may read the owner now.
    Acquired(LeaseName),
    /// A group's membership changed.
    GroupChanged(GroupName),
    /// Notifications may have been missed (e.g. a dropped subscription): re-read everything.
    Resync,
}

/// A notification callback. It runs on the backend's thread: it must be quick and not block.
pub type NotifySink = Arc<dyn Fn(&Notification) + Send + Sync>;

type Registry = Mutex<Vec<(u64, NotifySink)>>;

/// A set of sinks a backend publishes to; [`Subscribers::add`] returns the [`Subscription`].
///
/// ```
/// use simba_lease::spi::{Notification, Subscribers};
/// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
/// let subs = Subscribers::default();
/// let seen = Arc::new(AtomicUsize::new(0));
/// let s = seen.clone();
/// let sub = subs.add(Arc::new(move |_n: &Notification| { s.fetch_add(1, Ordering::SeqCst); }));
/// subs.publish(&Notification::Resync);
/// drop(sub);
/// subs.publish(&Notification::Resync);
/// assert_eq!(seen.load(Ordering::SeqCst), 1);
/// ```
#[derive(Default)]
pub struct Subscribers {
    inner: Arc<Registry>,
    next: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Subscribers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscribers")
            .field("sinks", &self.inner.lock().len())
            .finish()
    }
}

impl Subscribers {
    /// Adds a sink; it stays registered until the subscription is dropped.
    pub fn add(&self, sink: NotifySink) -> Subscription {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.lock().push((id, sink));
        let registry: Weak<Registry> = Arc::downgrade(&self.inner);
        Subscription::new(move || {
            if let Some(reg) = registry.upgrade() {
                reg.lock().retain(|(i, _)| *i != id);
            }
        })
    }

    /// Whether any sink is registered.
    pub fn is_empty(&self) -> bool {
        self.inner.lock().is_empty()
    }

    /// Calls every sink with `n` (outside the registry's lock).
    pub fn publish(&self, n: &Notification) {
        let sinks: Vec<NotifySink> = self.inner.lock().iter().map(|(_, s)| s.clone()).collect();
        for sink in sinks {
            sink(n);
        }
    }
}

/// Keeps a notification sink registered; dropping it unregisters the sink.
pub struct Subscription {
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl Subscription {
    /// A subscription that runs `on_drop` when dropped (to unregister the sink).
    pub fn new(on_drop: impl FnOnce() + Send + 'static) -> Self {
        Subscription {
            on_drop: Some(Box::new(on_drop)),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Subscription")
    }
}
