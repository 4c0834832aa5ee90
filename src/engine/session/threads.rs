//! The session's threads and queued work: the keep-alive thread, the reopen loop after an
//! expiry, the serial work queue, event delivery and election attempts.

use super::*;
use crate::engine::driver::attempt::{self, Attempt};
use crate::engine::driver::groups;
use crate::engine::driver::release::Unlock;

impl Inner {
    /// Starts a keep-alive thread serving `rx`.
    pub(super) fn spawn_keep_alive(
        self: &Arc<Self>,
        id: &SessionId,
        rx: Receiver<KeepAliveJob>,
    ) -> Result<()> {
        let i = self.clone();
        std::thread::Builder::new()
            .name(format!(
                "simba-keepalive-{}",
                &id.as_str()[..8.min(id.as_str().len())]
            ))
            .spawn(move || i.keep_alive_loop(rx))
            .map(drop)
            .map_err(|e| Error::backend("spawning a session thread", e))
    }

    pub(super) fn keep_alive_loop(self: Arc<Self>, rx: Receiver<KeepAliveJob>) {
        let lease = self.config.lease();
        for job in rx {
            let Some((id, sent)) = job else { break };
            let reply = self.backend.keep_alive(&id, lease);
            let now = self.now();
            let outcome = match &reply {
                Ok(_) => Some(true),
                Err(Error::SessionExpired { .. }) => None,
                Err(_) => Some(false),
            };
            let kind = self.backend.kind();
            self.with_session(&id, |c| {
                let left = c.deadline().saturating_duration_since(sent);
                c.on_keep_alive(sent, now, reply);
                match outcome {
                    Some(true) => crate::engine::metrics::keep_alive(
                        kind,
                        now.saturating_duration_since(sent),
                        left,
                        c.deadline().saturating_duration_since(now),
                    ),
                    Some(false) => crate::engine::metrics::keep_alive_failed(kind),
                    None => {}
                }
            });
        }
    }

    /// Opens a new backend session after an expiry and moves the registrations onto it,
    /// retrying every retry interval until it succeeds or the session is closed.
    pub(super) fn reopen(self: &Arc<Self>) {
        let retry = self.config.retry_interval();
        while !self.closed.load(Ordering::SeqCst) {
            let sent = self.now();
            match open_backend_session(&*self.backend, &self.config) {
                Ok(grant) => {
                    let now = self.now();
                    let mut s = self.shared.lock();
                    if self.closed.load(Ordering::SeqCst) {
                        drop(s);
                        let _ = self.backend.close_session(&grant.id);
                        return;
                    }
                    let old = s.core.session().clone();
                    let id = grant.id.clone();
                    let seed = crate::rand::u64();
                    s.core = s.core.successor(grant.id, sent, grant.remaining, seed, now);
                    s.reopening = false;
                    // A fresh keep-alive thread; the old one ends once its (maybe hanging)
                    // call returns, and its reply is dropped as a predecessor's.
                    let (tx, rx) = crossbeam_channel::unbounded();
                    let _ = std::mem::replace(&mut s.keep_alive, tx).send(None);
                    if let Err(e) = self.spawn_keep_alive(&id, rx) {
                        log::error!("no keep-alive thread for session {id}: {e}");
                    }
                    let groups = groups::rejoin(&s.joined);
                    self.dispatch(&mut s, true);
                    drop(s);
                    log::info!("session {old} expired; reopened as {id}");
                    for g in groups {
                        self.join_now(&id, &g, "re-joining");
                    }
                    return;
                }
                Err(e) => match reopen::after_open_error(&e) {
                    reopen::AfterOpenError::Terminal => {
                        // Retrying cannot help (e.g. the server now grants less than the
                        // lease): expiry becomes terminal, and waiters get `SessionExpired`.
                        log::error!(
                            "reopening an expired session failed for good: {}",
                            e.report()
                        );
                        self.shared.lock().reopening = false;
                        self.reopen_failed.store(true, Ordering::SeqCst);
                        self.changed.notify_all();
                        return;
                    }
                    step => {
                        // TLS and authentication failures are fixed outside this process (a
                        // renewed certificate, a restored password): retried, loudly.
                        let text = e.report();
                        if step == reopen::AfterOpenError::RetryLoudly {
                            log::error!("reopening an expired session failed, retrying: {text}");
                        } else {
                            log::warn!("reopening an expired session failed, retrying: {text}");
                        }
                        std::thread::sleep(reopen::retry_in(retry, crate::rand::jitter));
                    }
                },
            }
        }
    }

    /// Joins `group` as session `id` (a queued join, a reopen's re-join), logging a failure
    /// (an expired session's at debug level: the reopen that follows re-joins), and leaves
    /// it again if it was left meanwhile (its leave may have reached the backend first).
    fn join_now(&self, id: &SessionId, group: &GroupName, doing: &str) {
        match self.backend.join(id, group) {
            Ok(()) => {}
            Err(e @ Error::SessionExpired { .. }) => log::debug!("{doing} {group}: {}", e.report()),
            Err(e) => log::warn!("{doing} {group} as {id} failed: {}", e.report()),
        }
        if groups::left_meanwhile(&self.shared.lock().joined, group) {
            let _ = self.backend.leave(id, group);
        }
    }

    /// Runs a queued release, logging a failure (nobody waits for it).
    fn release_queued(&self, id: &SessionId, unlock: &Unlock) {
        if let Err(e) = self.release_now(id, unlock) {
            let (name, token) = (&unlock.name, unlock.token);
            match unlock.mode {
                None => log::warn!("releasing {name} (token {token}) failed: {}", e.report()),
                Some(mode) => log::warn!(
                    "releasing the {} term of {name} (token {token}) failed: {}",
                    mode.as_str(),
                    e.report()
                ),
            }
        }
    }

    /// Queues backend work on this session's serial work queue.
    pub(super) fn queue(&self, w: Work) {
        if let Some(i) = self.me.upgrade() {
            self.work.push(move || i.run_work(w));
        }
    }

    /// Delivers an event: sent on its channels now, queued for its callbacks (in order).
    pub(super) fn deliver(&self, handle: Option<HandleId>, e: Event) {
        crate::engine::metrics::event(&e);
        self.listeners.deliver(handle, &e);
    }

    /// How long a call that ends a term (close, resign) waits for the callbacks to have
    /// handled the final events: long enough for any callback that does not block.
    pub(super) fn delivery_bound(&self) -> Duration {
        self.config.lease().max(Duration::from_secs(5))
    }

    /// Waits (bounded) until the callbacks of the session and of `handle` have handled every
    /// event emitted so far, unless called from one of this session's callbacks.
    pub(crate) fn wait_delivered(&self, handle: HandleId) {
        if Listeners::in_callback() {
            return;
        }
        let callbacks = self.listeners.callbacks_of(handle);
        let bound = self.delivery_bound();
        if !Listeners::wait_for(&callbacks, Instant::now() + bound) {
            log::warn!(
                "an event callback did not return within {} ms: not waited for any longer",
                bound.as_millis()
            );
        }
    }

    pub(super) fn run_work(self: Arc<Self>, w: Work) {
        if self.crashed.load(Ordering::SeqCst) {
            return;
        }
        {
            match w {
                Work::Core(id, driver::Work::Run(Task::Attempt(h, name))) => {
                    self.attempt(id, h, name)
                }
                Work::Core(id, driver::Work::Run(Task::Owner(h, name))) => {
                    let reply = self.backend.owner(&name);
                    let now = self.now();
                    self.with_session(&id, |c| c.on_owner(h, now, reply));
                }
                Work::Core(id, driver::Work::Run(Task::Members(h, group))) => {
                    let reply = self.backend.members(&group);
                    let now = self.now();
                    self.with_session(&id, |c| c.on_members(h, now, reply));
                }
                Work::Core(id, driver::Work::Release(name, token)) => {
                    let unlock = Unlock {
                        name,
                        token,
                        mode: None,
                    };
                    self.release_queued(&id, &unlock);
                }
                Work::Core(id, driver::Work::ReleaseRw(name, mode, token)) => {
                    let unlock = Unlock {
                        name,
                        token,
                        mode: Some(mode),
                    };
                    self.release_queued(&id, &unlock);
                }
                Work::Leave(id, group) => {
                    if let Err(e) = self.backend.leave(&id, &group) {
                        log::warn!("leaving {group} failed: {}", e.report());
                    }
                }
                Work::Join(id, group) => self.join_now(&id, &group, "joining"),
                Work::Core(id, driver::Work::CloseBackend) => {
                    if let Err(e) = self.backend.close_session(&id) {
                        log::warn!("closing session {id} failed: {}", e.report());
                    }
                }
                Work::Reopen => self.reopen(),
            }
        }
    }

    /// A candidate's attempt: the driver's [`Attempt`] (the acquire with the candidate's
    /// value, then the write of a value changed meanwhile), pumped on the work thread.
    pub(super) fn attempt(&self, id: SessionId, h: HandleId, name: LeaseName) {
        let value = self
            .shared
            .lock()
            .values
            .get(&h)
            .cloned()
            .unwrap_or_default();
        let mut m = Attempt::new(id, h, name, value);
        while let Some(call) = m.next(self.now()) {
            let reply = call.send(&*self.backend);
            // Read under the lock: a reply that waited for it is judged when it is taken in.
            let mut s = self.shared.lock();
            let shared = &mut *s;
            let cx = attempt::Ctx {
                core: &mut shared.core,
                current: shared.values.get(&h).map_or("", String::as_str),
                changes: shared.value_changes,
                now: self.now(),
            };
            if let Some(t) = m.on_reply(cx, reply) {
                self.check_token(&mut shared.core, Some(h), &t);
            }
            self.dispatch(&mut s, true);
        }
    }
}
