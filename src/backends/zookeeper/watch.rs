//! The backend's two threads: the watchdog that closes sessions no keep-alive renewed in
//! time (the client heartbeats on its own, so ZooKeeper alone would keep them), and the
//! reader's watch loop that turns node events under the root into notifications and
//! reconnects the reader.

use super::connect::{Cfg, Reader};
use super::facade::call;
use super::session::Sessions;
use crate::spi::{Notification, Subscribers};
use crate::types::{GroupName, LeaseName};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// Closes sessions that no keep-alive renewed within their lease.
pub(super) fn watchdog_loop(weak: Weak<Sessions>, wake: crossbeam_channel::Receiver<()>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let (_, next) = inner.sweep();
        drop(inner);
        let wait = next
            .map(|n| n.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        match wake.recv_timeout(wait + Duration::from_millis(1)) {
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            _ => continue,
        }
    }
}

/// Forwards the reader's recursive watch on the root to the subscribers; reconnects the
/// reader (a new session: it holds no ephemeral nodes) when its session ends.
pub(super) fn watch_loop(
    cfg: Arc<Cfg>,
    reader: Arc<Reader>,
    subs: Arc<Subscribers>,
    mut watcher: zk::PersistentWatcher,
) {
    let leases = format!("{}/", cfg.leases);
    let groups = format!("{}/", cfg.groups);
    let queues = format!("{}/queues/", cfg.root);
    let rw = format!("{}/", cfg.rw);
    let mut disconnected = false;
    loop {
        let ev = futures_lite::future::block_on(watcher.changed());
        match ev.event_type {
            zk::EventType::Session => match ev.session_state {
                zk::SessionState::Disconnected => disconnected = true,
                zk::SessionState::SyncConnected if disconnected => {
                    // Events during the disconnection may be lost (ZOOKEEPER-4698).
                    disconnected = false;
                    if let Some(w) = rewatch(&cfg, &reader) {
                        watcher = w;
                    }
                    subs.publish(&Notification::Resync);
                }
                s if s.is_terminated() => {
                    if reader.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    log::warn!("ZooKeeper reader session ended ({s}); reconnecting");
                    loop {
                        if reader.stopped.load(Ordering::SeqCst) {
                            return;
                        }
                        match cfg.open_reader() {
                            Ok((client, w)) => {
                                *reader.client.write() = Some(client);
                                watcher = w;
                                break;
                            }
                            Err(e) => {
                                log::warn!("reconnecting the ZooKeeper reader: {}", e.report());
                                std::thread::sleep(Duration::from_millis(200));
                            }
                        }
                    }
                    if reader.stopped.load(Ordering::SeqCst) {
                        reader.client.write().take();
                        return;
                    }
                    subs.publish(&Notification::Resync);
                }
                _ => {}
            },
            zk::EventType::NodeDeleted if ev.path.starts_with(&leases) => {
                if let Ok(name) = LeaseName::new(&ev.path[leases.len()..]) {
                    subs.publish(&Notification::Released(name));
                }
            }
            // A lease node is created only for a new term (a re-acquire finds it existing);
            // its data changes only with the term's value.
            zk::EventType::NodeCreated | zk::EventType::NodeDataChanged
                if ev.path.starts_with(&leases) =>
            {
                if let Ok(name) = LeaseName::new(&ev.path[leases.len()..]) {
                    subs.publish(&Notification::Acquired(name));
                }
            }
            // A place given up or taken: the next in line may go now.
            zk::EventType::NodeDeleted if ev.path.starts_with(&queues) => {
                let rest = &ev.path[queues.len()..];
                if let Some((n, _place)) = rest.split_once('/') {
                    if let Ok(name) = LeaseName::new(n) {
                        subs.publish(&Notification::Released(name));
                    }
                }
            }
            // A read-write term released, or a waiting writer gone: waiters may go now. A
            // lock-delay gate (`g…`) or its stamp is deleted with its term (whose own delete
            // is the release) or by a grant: no release of its own.
            zk::EventType::NodeDeleted if ev.path.starts_with(&rw) => {
                let rest = &ev.path[rw.len()..];
                if let Some((n, child)) = rest.split_once('/') {
                    let gate = child.starts_with('g') || child.contains('/');
                    if let (false, Ok(name)) = (gate, LeaseName::new(n)) {
                        subs.publish(&Notification::Released(name));
                    }
                }
            }
            zk::EventType::NodeCreated | zk::EventType::NodeDeleted
                if ev.path.starts_with(&groups) =>
            {
                let rest = &ev.path[groups.len()..];
                if let Some((g, _member)) = rest.split_once('/') {
                    if let Ok(g) = GroupName::new(g) {
                        subs.publish(&Notification::GroupChanged(g));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Adds the reader's persistent recursive watch on the root again after a reconnect of the
/// same session: `zookeeper-client` 0.11 does not (its `resend_watches` sends only data, exist
/// and child watches), so the server would send no more events. `None` when the reader is
/// stopped or disconnected again (the next reconnect retries).
pub(super) fn rewatch(cfg: &Cfg, reader: &Reader) -> Option<zk::PersistentWatcher> {
    loop {
        if reader.stopped.load(Ordering::SeqCst) {
            return None;
        }
        let client = reader.client().ok()?;
        let w = client.watch(&cfg.root, zk::AddWatchMode::PersistentRecursive);
        match call("watching the root", cfg.request_timeout, w) {
            Ok(Ok(w)) => return Some(w),
            Ok(Err(e)) => log::warn!("watching the root again: {e}"),
            Err(e) => log::warn!("watching the root again: {}", e.report()),
        }
        if client.state() != zk::SessionState::SyncConnected {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
