//! The session's shared state behind its lock: reading and changing the core, then
//! dispatching its outputs (one place), waits with deadline and cancel, and the releases,
//! leaves and joins queued for the work pool.

use super::*;
use crate::engine::driver::release::Unlock;
use crate::engine::driver::reserve::Space;

impl Inner {
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A backend notification routed to this session: wakes only what it concerns.
    pub(crate) fn notified(&self, n: &Notification) {
        let now = self.now();
        let mut s = self.shared.lock();
        if s.core.notify(n, now) {
            self.dispatch(&mut s, true);
        }
    }

    /// The current backend session's id.
    pub(crate) fn id(&self) -> SessionId {
        self.shared.lock().core.session().clone()
    }

    /// Like [`Inner::with_core`], but only if `id` is still the current session: replies
    /// for an expired session must not touch its successor.
    pub(in crate::engine) fn with_session<R>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Core) -> R,
    ) -> Option<R> {
        self.with_session_shared(id, |s| f(&mut s.core))
    }

    /// [`Inner::with_session`] with everything the lock guards.
    pub(super) fn with_session_shared<R>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Shared) -> R,
    ) -> Option<R> {
        let mut s = self.shared.lock();
        if !driver::accepts(s.core.session(), id) {
            return None;
        }
        let r = f(&mut s);
        self.dispatch(&mut s, true);
        Some(r)
    }

    /// Checks a term just granted to `handle` against the highest token this process saw
    /// for its name on this backend ([`driver::tokens::check`]).
    pub(in crate::engine) fn check_token(
        &self,
        core: &mut Core,
        handle: Option<HandleId>,
        term: &Term,
    ) {
        driver::tokens::check(&self.router.tokens, core, handle, term);
    }

    pub(crate) fn next_handle(&self) -> HandleId {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    pub(in crate::engine) fn lock_shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// Runs `f` on the core, then dispatches its outputs (still under the lock, so events keep
    /// their order; every send is non-blocking) and wakes the ticker and lock waiters.
    pub(in crate::engine) fn with_core<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        let mut s = self.shared.lock();
        let r = f(&mut s.core);
        self.dispatch(&mut s, true);
        drop(s);
        r
    }

    /// Ends what passed its local deadline by now (as the timer would on its next tick), so
    /// that what the caller reads next is valid now; dispatches the losses.
    pub(in crate::engine) fn settle(&self, s: &mut Shared) {
        s.core.settle(self.now());
        // Nothing ended: nothing to send, and no waiter to wake (two waiters settling in
        // turn would wake each other for ever).
        if s.core.has_outputs() {
            self.dispatch(s, true);
        }
    }

    /// Sends the core's outputs on (as [`Inner::dispatch`]) if it has any or its interest
    /// may have changed: a caller that only looked wakes nobody (two waiters looking in
    /// turn would wake each other for ever).
    pub(in crate::engine) fn dispatch_pending(&self, s: &mut Shared) {
        if s.core.needs_dispatch() {
            self.dispatch(s, true);
        }
    }

    /// Sends the core's outputs on; wakes the ticker unless the ticker itself dispatches.
    pub(in crate::engine) fn dispatch(&self, s: &mut Shared, wake_ticker: bool) {
        let now = self.now();
        let id = s.core.session().clone();
        for o in s.core.take_outputs() {
            match driver::route(o) {
                Route::KeepAlive => {
                    let _ = s.keep_alive.send(Some((id.clone(), now)));
                }
                Route::Work(w) => self.queue(Work::Core(id.clone(), w)),
                Route::Emit(h, e) => self.deliver(h, e),
            }
        }
        if reopen::should_reopen(s.core.state(), self.flags(s)) {
            s.reopening = true;
            self.queue(Work::Reopen);
        }
        if s.core.interest_changed() {
            let interest = s.core.interest();
            let key = self.route.load(Ordering::SeqCst);
            if interest != s.interest {
                self.router.update(key, &s.interest, &interest);
                s.interest = interest;
            }
        }
        // The ticker only needs waking when there is something to do before it wakes anyway.
        if wake_ticker {
            let next = s.core.next_wake();
            if next.is_some_and(|t| s.ticker_at.is_none_or(|at| t < at)) {
                s.ticker_at = next;
                Timer::global().set(self.timer.load(Ordering::SeqCst), next);
            }
        }
        self.changed.notify_all();
    }

    /// Waits for a change of the session's state until `until` (false once it passed),
    /// waking at least every 10 ms with a `cancel` token (the caller checks it): a wake-up
    /// to look at the token counts as a change.
    pub(in crate::engine) fn wait_or_cancel(
        &self,
        s: &mut MutexGuard<'_, Shared>,
        until: Option<Instant>,
        cancel: Option<&crate::engine::Cancel>,
    ) -> bool {
        if cancel.is_some() {
            let woken = !self
                .changed
                .wait_until(s, crate::engine::Cancel::wake_at(until))
                .timed_out();
            return woken || until.is_none_or(|u| Instant::now() < u);
        }
        match until {
            Some(t) => !self.changed.wait_until(s, t).timed_out(),
            None => {
                self.changed.wait(s);
                true
            }
        }
    }

    /// What the driver's decisions need to know of this session besides its core.
    pub(super) fn flags(&self, s: &Shared) -> reopen::Flags {
        reopen::Flags {
            reopen_on_expiry: self.config.reopen_on_expiry(),
            reopening: s.reopening,
            closed: self.closed.load(Ordering::SeqCst),
            failed: self.reopen_failed.load(Ordering::SeqCst),
        }
    }

    /// Whether an expired session will be reopened (waiting on it can still succeed).
    pub(in crate::engine) fn reopen_coming(&self, s: &Shared) -> bool {
        reopen::reopen_coming(self.flags(s))
    }

    /// Whether waiting on this session can still succeed: fails once it is closed, or
    /// expired for good (an expired session that will be reopened is worth waiting for).
    pub(in crate::engine) fn check_waitable(&self, s: &Shared) -> Result<()> {
        match s.core.check_live() {
            Err(Error::SessionExpired { .. }) if self.reopen_coming(s) => Ok(()),
            other => other,
        }
    }

    /// Forgets a dropped handle's listeners (its channels got every event already; events
    /// queued for its callbacks still run).
    pub(crate) fn drop_listeners(&self, handle: HandleId) {
        self.listeners.remove(handle);
    }

    /// Frees a local reservation of `name` in `space` by `handle` and wakes waiters.
    pub(crate) fn unreserve(&self, space: Space, name: &LeaseName, handle: HandleId) {
        self.shared.lock().reserved.unreserve(space, name, handle);
        self.changed.notify_all();
    }

    /// Queues the release `unlock` of a term of session `id` on the work queue (for `Drop`,
    /// which never does network I/O on the caller's thread).
    pub(crate) fn release_later(&self, id: &SessionId, unlock: &Unlock) {
        self.queue(Work::Core(id.clone(), unlock.work()));
    }

    /// Releases a term of session `id` (`unlock`) on the backend from the calling thread:
    /// whether it was still held there.
    pub(crate) fn release_now(&self, id: &SessionId, unlock: &Unlock) -> Result<bool> {
        let r = unlock.send(id, &*self.backend);
        self.with_session(id, |c| unlock.answered(c, r.is_ok()));
        if matches!(r, Ok(true)) {
            self.router.released_here(&unlock.name);
        }
        r
    }

    /// Queues leaving `group` as session `id` on the work queue (for `Drop`).
    pub(crate) fn leave_later(&self, id: &SessionId, group: &GroupName) {
        self.queue(Work::Leave(id.clone(), group.clone()));
    }

    /// Queues joining `group` as session `id` on the work queue (an election's candidates).
    pub(in crate::engine) fn join_later(&self, id: &SessionId, group: &GroupName) {
        self.queue(Work::Join(id.clone(), group.clone()));
    }
}
