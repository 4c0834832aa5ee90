//! The threaded pump of an acquire call: the caller's thread runs the driver's
//! [`Acquisition`] under the session's lock, sends each attempt with the lock released,
//! waits on the session's condition variable, and leaves a queue place after a call that
//! ended without a term. Every decision is the machine's; the simulation pumps the same one.

use super::cancel::Cancel;
use super::core::HandleId;
use super::driver::acquire::{Acquisition, Ctx, Done, Spec, Step, Want};
use super::driver::reserve;
use super::event::Event;
use super::handle::EngineHandle;
use crate::error::{Error, Result};
use crate::types::{SessionId, Term};
use crossbeam_channel::Receiver;
use parking_lot::MutexGuard;
use std::time::Instant;

/// A term an acquire call won: the handle that holds it (its name stays reserved for it),
/// the session it was granted to, which of the call's names it is of, the handle's loss
/// channel, and when it was won.
pub(crate) struct Won {
    pub(crate) handle: HandleId,
    pub(crate) session: SessionId,
    pub(crate) term: Term,
    pub(crate) index: usize,
    pub(crate) events: Receiver<Event>,
    pub(crate) at: Instant,
}

impl EngineHandle {
    /// Runs the acquire call `spec` on the calling thread until it is done, `cancel` (if
    /// given) ending its waits with [`Error::Cancelled`]. `Ok(None)`: a try that found the
    /// name taken.
    pub(crate) fn acquire(&self, spec: Spec, cancel: Option<&Cancel>) -> Result<Option<Won>> {
        let inner = &self.0;
        if matches!(spec.want, Want::Rw(_)) && !inner.backend.supports_rw_locks() {
            return Err(Error::Unsupported {
                operation: "read-write locks",
                backend: inner.backend.kind(),
            });
        }
        let operation = spec.operation;
        let started = inner.now();
        let h = inner.next_handle();
        let events = inner.listeners.channel(h);
        let (retry, lease) = (inner.config.retry_interval(), inner.config.lease());
        let thread = reserve::this_thread();
        let mut m = Acquisition::new(spec, h, thread, started, retry, lease, crate::rand::u64());
        let mut jitter = crate::rand::jitter;
        let mut s = inner.lock_shared();
        let done: Done = loop {
            let coming = inner.reopen_coming(&s);
            let shared = &mut *s;
            let mut cx = Ctx {
                core: &mut shared.core,
                reserved: &mut shared.reserved,
                reopen_coming: coming,
                now: inner.now(),
                jitter: &mut jitter,
            };
            if cancel.is_some_and(Cancel::is_cancelled) {
                break m.abandon(&mut cx, Error::Cancelled { operation });
            }
            match m.next(&mut cx) {
                Step::Done(done) => break done,
                Step::Wait(until) => {
                    inner.dispatch_pending(&mut s);
                    inner.wait_or_cancel(&mut s, until, cancel);
                }
                Step::Call(call) => {
                    inner.dispatch_pending(&mut s);
                    let reply = MutexGuard::unlocked(&mut s, || call.send(&*inner.backend));
                    let coming = inner.reopen_coming(&s);
                    let shared = &mut *s;
                    let mut cx = Ctx {
                        core: &mut shared.core,
                        reserved: &mut shared.reserved,
                        reopen_coming: coming,
                        now: inner.now(),
                        jitter: &mut jitter,
                    };
                    // Read under the lock: a reply that waited for it is judged when taken in.
                    if let Some(term) = m.on_reply(&mut cx, reply) {
                        inner.check_token(&mut shared.core, None, &term);
                    }
                    inner.dispatch(&mut s, true);
                }
            }
        };
        // Wakes the waiters of a reservation this call freed.
        inner.dispatch(&mut s, true);
        drop(s);
        if let Some(leave) = &done.leave {
            if let Err(e) = leave.send(&*inner.backend) {
                log::warn!("leaving the queue of {} failed: {}", leave.name, e.report());
            }
        }
        match done.result {
            Ok(Some(won)) => {
                let at = inner.now();
                super::metrics::lock_wait(at.saturating_duration_since(started));
                Ok(Some(Won {
                    handle: h,
                    session: won.session,
                    term: won.term,
                    index: won.index,
                    events,
                    at,
                }))
            }
            other => {
                inner.drop_listeners(h);
                other.map(|_| None)
            }
        }
    }
}
