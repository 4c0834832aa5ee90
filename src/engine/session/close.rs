//! Closing a session: stopping its threads, waiting (bounded) for the final events to reach
//! the callbacks, and closing the backend session.

use super::*;

impl Inner {
    pub(super) fn stop_threads(&self) {
        let had = std::mem::take(&mut self.shared.lock().interest);
        self.router.remove(self.route.load(Ordering::SeqCst), &had);
        Timer::global().remove(self.timer.load(Ordering::SeqCst));
        // The keep-alive thread may be stuck in a backend call: it exits after it returns.
        let _ = self.shared.lock().keep_alive.send(None);
        // Every channel got the final events: forgetting the senders disconnects the
        // receivers once drained. The callbacks' final events are waited for (bounded),
        // unless called from an event callback (of any session: two sessions' callbacks
        // closing each other must not wait for each other).
        let in_callback = Listeners::in_callback();
        let callbacks = self.listeners.clear();
        let bound = self.delivery_bound();
        if !in_callback && !Listeners::wait_for(&callbacks, Instant::now() + bound) {
            log::warn!(
                "closing: an event callback did not return within {} ms: not waited for",
                bound.as_millis()
            );
        }
        self.changed.notify_all();
    }

    pub(super) fn close(&self) -> Result<()> {
        self.close_with(true)
    }

    /// Closes the session; the backend session is deleted on this thread if `wait`, else
    /// queued on the work queue (which then stops).
    pub(super) fn close_with(&self, wait: bool) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let was_live = self.with_core(|c| {
            let live = c.state().is_live();
            c.close();
            live
        });
        let id = self.id();
        let result = match (was_live, wait) {
            (true, true) => self.backend.close_session(&id),
            (true, false) => {
                self.queue(Work::Core(id, driver::Work::CloseBackend));
                Ok(())
            }
            (false, _) => Ok(()),
        };
        self.stop_threads();
        result
    }
}
