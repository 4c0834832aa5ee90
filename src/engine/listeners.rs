//! Event delivery: per-handle channels and callbacks.
//!
//! A channel gets each event at once, when the core emits it (a non-blocking send). Each
//! callback has a serial queue of its own on the process's event pool, so a callback that
//! blocks delays only itself (and its own later events, which keep their order), never a
//! channel or another callback.

use super::core::HandleId;
use super::event::Event;
use super::executor::{EventQueue, Pool};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

thread_local! {
    /// Whether this thread runs an event callback now (of any session).
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// The handle id of the session itself (listeners that see every event).
pub(crate) const SESSION: HandleId = 0;

/// A user's event callback.
type EventFn = Box<dyn FnMut(&Event) + Send>;

/// A callback and the queue its events run on, in order.
pub(crate) struct Callback {
    f: Mutex<EventFn>,
    queue: Arc<dyn EventQueue>,
    /// A wait for this callback ran out: it is not waited for again until it caught up.
    stuck: AtomicBool,
}

impl Callback {
    /// Runs the callback on `event`; a panic is logged (later events still arrive), and a
    /// run longer than `slow` is logged too (callbacks should not block).
    fn call(&self, event: &Event, slow: Duration) {
        let started = Instant::now();
        IN_CALLBACK.with(|c| c.set(true));
        let call = std::panic::AssertUnwindSafe(|| (self.f.lock())(event));
        let result = std::panic::catch_unwind(call);
        IN_CALLBACK.with(|c| c.set(false));
        if let Err(payload) = result {
            let message = super::guarded::panic_message(&*payload);
            log::error!("an event callback panicked on {event:?}: {message}");
        }
        let took = started.elapsed();
        if took > slow {
            log::warn!(
                "an event callback ran {} ms on {event:?}, longer than the retry interval \
                 ({} ms): callbacks should hand slow work to a thread of their own (this one \
                 delays only its own later events)",
                took.as_millis(),
                slow.as_millis()
            );
        }
    }
}

#[derive(Clone)]
enum Listener {
    Channel(Sender<Event>),
    Callback(Arc<Callback>),
}

/// Makes the queue of each new callback.
pub(crate) type Queues = Box<dyn Fn() -> Arc<dyn EventQueue> + Send + Sync>;

/// Listeners by handle.
pub(crate) struct Listeners {
    map: Mutex<HashMap<HandleId, Vec<Listener>>>,
    /// A callback running longer than this is logged.
    slow: Duration,
    queues: Queues,
}

impl Listeners {
    /// No listeners yet; each callback will run on a queue of its own on the process's event
    /// pool, and be logged when it runs longer than `slow`.
    pub(crate) fn new(slow: Duration) -> Self {
        Self::with_queues(slow, Box::new(|| Arc::new(Pool::events().serial())))
    }

    /// No listeners yet; each callback will run on a queue `queues` makes (the simulation's
    /// virtual queues).
    pub(crate) fn with_queues(slow: Duration, queues: Queues) -> Self {
        Listeners {
            map: Mutex::new(HashMap::new()),
            slow,
            queues,
        }
    }

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

    /// A callback listening to `handle`, with a queue of its own.
    pub(crate) fn callback(&self, handle: HandleId, f: impl FnMut(&Event) + Send + 'static) {
        let cb = Arc::new(Callback {
            f: Mutex::new(Box::new(f)),
            queue: (self.queues)(),
            stuck: AtomicBool::new(false),
        });
        self.map
            .lock()
            .entry(handle)
            .or_default()
            .push(Listener::Callback(cb));
    }

    /// Forgets a handle's listeners (events already queued for its callbacks still run).
    pub(crate) fn remove(&self, handle: HandleId) {
        let gone = self.map.lock().remove(&handle);
        // Dropped outside the map's lock: a callback's closure may own handles whose drop
        // takes the session's lock (which is taken before the map's).
        drop(gone);
    }

    /// Forgets every listener, so that every receiver disconnects once drained; returns the
    /// callbacks (to wait for, see [`Listeners::wait_for`]).
    pub(crate) fn clear(&self) -> Vec<Arc<Callback>> {
        let map = std::mem::take(&mut *self.map.lock());
        map.into_values()
            .flatten()
            .filter_map(|l| match l {
                Listener::Callback(cb) => Some(cb),
                Listener::Channel(_) => None,
            })
            .collect()
    }

    /// The callbacks of the session and of `handle`.
    pub(crate) fn callbacks_of(&self, handle: HandleId) -> Vec<Arc<Callback>> {
        let map = self.map.lock();
        let ids = std::iter::once(SESSION).chain(Some(handle).filter(|h| *h != SESSION));
        ids.flat_map(|h| map.get(&h).into_iter().flatten())
            .filter_map(|l| match l {
                Listener::Callback(cb) => Some(cb.clone()),
                Listener::Channel(_) => None,
            })
            .collect()
    }

    /// Whether the calling thread runs an event callback now (of any session): it is not
    /// made to wait for callbacks (which might wait for it).
    pub(crate) fn in_callback() -> bool {
        IN_CALLBACK.with(Cell::get)
    }

    /// Waits until every event queued for `callbacks` so far has been handled, or `until`
    /// passes; returns whether they all were. A callback that made an earlier wait run out
    /// is not waited for until it caught up (so one stuck callback costs one bound, once).
    pub(crate) fn wait_for(callbacks: &[Arc<Callback>], until: Instant) -> bool {
        let (tx, rx) = crossbeam_channel::unbounded::<()>();
        let mut pending = Vec::new();
        for cb in callbacks {
            if cb.queue.is_current() || cb.stuck.load(Ordering::SeqCst) {
                continue;
            }
            let (tx, marker) = (tx.clone(), cb.clone());
            cb.queue.push(Box::new(move || {
                marker.stuck.store(false, Ordering::SeqCst);
                let _ = tx.send(());
            }));
            pending.push(cb);
        }
        drop(tx);
        let mut done = 0;
        while done < pending.len() && rx.recv_deadline(until).is_ok() {
            done += 1;
        }
        if done == pending.len() {
            return true;
        }
        // The markers still queued clear `stuck` when they run.
        for cb in pending {
            cb.stuck.store(true, Ordering::SeqCst);
        }
        false
    }

    /// Delivers one event to the session's listeners and to `handle`'s: sent on every
    /// channel now, queued for every callback.
    pub(crate) fn deliver(&self, handle: Option<HandleId>, event: &Event) {
        let mut map = self.map.lock();
        let ids = std::iter::once(SESSION).chain(handle.filter(|h| *h != SESSION));
        for id in ids {
            let Some(listeners) = map.get_mut(&id) else {
                continue;
            };
            listeners.retain(|l| match l {
                // A receiver dropped: forget its channel.
                Listener::Channel(tx) => tx.send(event.clone()).is_ok(),
                Listener::Callback(cb) => {
                    let (cb2, e, slow) = (cb.clone(), event.clone(), self.slow);
                    cb.queue.push(Box::new(move || cb2.call(&e, slow)));
                    true
                }
            });
        }
    }
}
