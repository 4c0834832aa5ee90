//! The pub/sub notifier of a backend: one thread, started by the first subscriber, that
//! listens on the lease, read-write lock and group channels of the prefix and turns their messages into
//! [`Notification`]s; when its connection drops, subscribers get [`Notification::Resync`]
//! and it subscribes again with backoff. It stops when the backend is dropped.

use super::backend::Base;
use super::scripting::PubSubEvent;
use crate::backends::options;
use crate::spi::{Notification, Subscribers};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `CLIENT SETNAME` of the notification connection under `prefix`.
pub(super) fn connection_name(prefix: &str) -> String {
    format!("simba-notify-{prefix}")
}

/// The notification thread's state, shared with the backend.
#[derive(Default)]
struct NotifierState {
    stop: AtomicBool,
    /// Whether the first subscription attempt finished (subscribed or failed).
    started: Mutex<bool>,
    cv: Condvar,
}

impl NotifierState {
    fn mark_started(&self) {
        *self.started.lock() = true;
        self.cv.notify_all();
    }
}

/// A backend's notification thread, once started.
#[derive(Default)]
pub(super) struct Notifier {
    state: Mutex<Option<Arc<NotifierState>>>,
}

impl Notifier {
    /// Tells the thread to stop, when the backend is dropped (no I/O: the thread notices at
    /// its next event).
    pub(super) fn stop(&self) {
        if let Some(n) = self.state.lock().take() {
            n.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Starts the notification thread once; every caller waits (bounded by the connect and
    /// query timeouts) until its first subscription attempt finished, so a sink registered
    /// before sees every later release.
    pub(super) fn start(&self, base: &Base, subs: &Arc<Subscribers>, conn_name: String) {
        let state = {
            let mut guard = self.state.lock();
            match &*guard {
                Some(st) => st.clone(),
                None => {
                    let st = Arc::new(NotifierState::default());
                    *guard = Some(st.clone());
                    spawn(base, subs, conn_name, st.clone());
                    st
                }
            }
        };
        let bound = base
            .cfg
            .connect_timeout
            .saturating_add(base.cfg.query_timeout);
        let mut started = state.started.lock();
        let end = options::deadline(bound);
        while !*started {
            if state.cv.wait_until(&mut started, end).timed_out() {
                log::warn!(
                    "Redis notifications not subscribed within {bound:?}; candidates poll until they are"
                );
                break;
            }
        }
    }
}

/// Spawns the thread of `st`: it listens, publishes what it hears to `subs`, and subscribes
/// again after a failure, until `st` says stop.
fn spawn(base: &Base, subs: &Arc<Subscribers>, conn_name: String, st: Arc<NotifierState>) {
    let scripting = base.scripting.clone();
    let keys = base.keys.clone();
    let subs = subs.clone();
    let patterns = vec![
        format!("{}*", keys.lease_prefix()),
        format!("{}*", keys.group_prefix()),
        format!("{}*", keys.rw_prefix()),
    ];
    let thread_st = st.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("simba-redis-pubsub-{}", keys.prefix))
        .spawn(move || {
            let st = thread_st;
            let stopped = || st.stop.load(Ordering::SeqCst);
            let mut backoff = Duration::from_millis(100);
            let mut subscribed_before = false;
            while !stopped() {
                let r = scripting.listen(
                    &conn_name,
                    &patterns,
                    Duration::from_millis(200),
                    &mut |ev| {
                        if stopped() {
                            return false;
                        }
                        match ev {
                            PubSubEvent::Subscribed => {
                                if subscribed_before {
                                    subs.publish(&Notification::Resync);
                                }
                                subscribed_before = true;
                                backoff = Duration::from_millis(100);
                                st.mark_started();
                            }
                            PubSubEvent::Message { channel, payload } => {
                                if let Some(n) = keys.notification(channel, payload) {
                                    subs.publish(&n);
                                }
                            }
                            PubSubEvent::Idle => {}
                        }
                        true
                    },
                );
                st.mark_started();
                if stopped() {
                    break;
                }
                if let Err(e) = r {
                    log::warn!(
                        "Redis notifications dropped ({}); resubscribing in {backoff:?}",
                        e.report()
                    );
                }
                subs.publish(&Notification::Resync);
                let until = Instant::now() + backoff;
                while Instant::now() < until && !stopped() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
    if let Err(e) = spawned {
        log::warn!("no Redis notification thread ({e}); candidates poll");
        st.mark_started();
    }
}
