//! Event delivery: per-handle channels and callbacks, served in order on the session's event
//! queue.

use super::core::HandleId;
use super::event::Event;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The handle id of the session itself (listeners that see every event).
pub(crate) const SESSION: HandleId = 0;

type Callback = Arc<Mutex<Box<dyn FnMut(&Event) + Send>>>;

#[derive(Clone)]
enum Listener {
    Channel(Sender<Event>),
    Callback(Callback),
}

/// Listeners by handle.
#[derive(Default)]
pub(crate) struct Listeners {
    map: Mutex<HashMap<HandleId, Vec<Listener>>>,
}

impl Listeners {
    /// A new channel listening to `handle`.
    pub(crate) fn channel(&self, handle: HandleId) -> Receiver<Event> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.map
            .lock()
            .entry(handle)
            .or_default()
            .push(Listener::Channel(tx));
        rx
    }

    /// A callback listening to `handle`.
    pub(crate) fn callback(&self, handle: HandleId, f: impl FnMut(&Event) + Send + 'static) {
        let cb: Callback = Arc::new(Mutex::new(Box::new(f)));
        self.map
            .lock()
            .entry(handle)
            .or_default()
            .push(Listener::Callback(cb));
    }

    /// Forgets a handle's listeners.
    pub(crate) fn remove(&self, handle: HandleId) {
        self.map.lock().remove(&handle);
    }

    /// Forgets every listener, so that every receiver disconnects.
    pub(crate) fn clear(&self) {
        self.map.lock().clear();
    }

    /// Delivers one event to the session's listeners and to `handle`'s, outside the map's lock.
    pub(crate) fn deliver(&self, handle: Option<HandleId>, event: &Event) {
        let targets: Vec<(HandleId, Listener)> = {
            let map = self.map.lock();
            let ids = std::iter::once(SESSION).chain(handle.filter(|h| *h != SESSION));
            ids.flat_map(|id| {
                map.get(&id)
                    .into_iter()
                    .flatten()
                    .map(move |l| (id, l.clone()))
            })
            .collect()
        };
        let mut dead = Vec::new();
        for (id, l) in targets {
            match l {
                Listener::Channel(tx) => {
                    if tx.send(event.clone()).is_err() {
                        dead.push((id, tx));
                    }
                }
                Listener::Callback(cb) => {
                    // A panicking callback must not stop the delivery of later events.
                    let call = std::panic::AssertUnwindSafe(|| (cb.lock())(event));
                    if let Err(payload) = std::panic::catch_unwind(call) {
                        let message = super::guarded::panic_message(&*payload);
                        log::error!("an event callback panicked on {event:?}: {message}");
                    }
                }
            }
        }
        if !dead.is_empty() {
            let mut map = self.map.lock();
            for (id, tx) in dead {
                if let Some(v) = map.get_mut(&id) {
                    v.retain(|l| !matches!(l, Listener::Channel(t) if t.same_channel(&tx)));
                }
            }
        }
    }
}
