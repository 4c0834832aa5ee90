//! The simulated threads' acquire calls: each lock, permit and read-write call is the
//! driver's [`Acquisition`], the machine the threaded session pumps, pumped here on the
//! simulated clock and network. A thread asks the machine what to do on every settle of
//! its process, sends the attempt it asks for, hands it the reply, and acts on its end; the
//! machine's decisions (reservation, retries, rounds, deadlines, queue places) are the ones
//! that ship.

use super::network::{Chan, Op};
use super::{Thread, World};
use crate::engine::core::HandleId;
use crate::engine::driver::acquire::{Acquisition, Ask, Ctx, Done, Reply, Step, Want};
use crate::engine::driver::{reopen, tokens};
use crate::spi::{Queued, RwMode};
use std::time::Duration;

/// Which thread of a process a call is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    /// A lock or permit caller (`lockers[i]`).
    Lock(usize),
    /// A read-write lock caller (`rw[i]`).
    Rw(usize),
}

impl World<'_> {
    /// The thread whose call has handle `h`.
    pub(super) fn who(&self, c: usize, h: HandleId) -> Option<Who> {
        let cl = &self.clients[c];
        let of = |call: &Option<Acquisition>| call.as_ref().is_some_and(|m| m.handle() == h);
        if let Some(i) = cl.lockers.iter().position(|l| of(&l.call)) {
            return Some(Who::Lock(i));
        }
        cl.rw.iter().position(|r| of(&r.call)).map(Who::Rw)
    }

    /// Starts thread `who`'s call `m`, then asks it what to do.
    pub(super) fn start_call(&mut self, c: usize, who: Who, m: Acquisition) {
        let cl = &mut self.clients[c];
        let (call, handle) = match who {
            Who::Lock(i) => {
                let l = &mut cl.lockers[i];
                (&mut l.call, &mut l.handle)
            }
            Who::Rw(i) => {
                let r = &mut cl.rw[i];
                (&mut r.call, &mut r.handle)
            }
        };
        *handle = m.handle();
        *call = Some(m);
        self.pump(c, who);
        let cl = &self.clients[c];
        let call = match who {
            Who::Lock(i) => &cl.lockers[i].call,
            Who::Rw(i) => &cl.rw[i].call,
        };
        if let Some(m) = call.as_ref().filter(|m| !m.reserves() && !m.in_flight()) {
            if m.spec().want != Want::Permit {
                let name = m.spec().names[0].clone();
                self.tr(Some(c), Some(&name), || {
                    format!("waits for {name}: another thread of its session has it")
                });
            }
        }
    }

    /// Asks thread `who`'s call what to do now, and does it: sends its attempt, sleeps
    /// until its wait ends (a settle of the process asks again sooner), or acts on its end.
    pub(super) fn pump(&mut self, c: usize, who: Who) {
        let local = self.local(c, self.now);
        let coming = reopen::reopen_coming(self.flags(c));
        let rng = &mut self.rng;
        let mut jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let (call, thread) = match who {
            Who::Lock(i) => {
                let l = &mut cl.lockers[i];
                (&mut l.call, l.thread)
            }
            Who::Rw(i) => {
                let r = &mut cl.rw[i];
                (&mut r.call, r.thread)
            }
        };
        let Some(m) = call.as_mut().filter(|_| thread == Thread::Idle) else {
            return;
        };
        let mut cx = Ctx {
            core,
            reserved: &mut cl.reserved,
            reopen_coming: coming,
            now: local,
            jitter: &mut jitter,
        };
        let (h, want) = (m.handle(), m.spec().want);
        let step = m.next(&mut cx);
        match step {
            Step::Call(call) => {
                self.set_thread(c, who, Thread::Acquiring, None);
                let op = match call.ask {
                    Ask::Plain => Op::Lock(h, call.name),
                    Ask::Queued(_) => Op::LockQueued(h, call.name),
                    Ask::Rw(mode, patience) => Op::AcquireRw(h, call.name, mode, patience),
                };
                self.send(c, op, Chan::Caller);
            }
            Step::Wait(until) => {
                let at = until.map_or(u64::MAX, |u| self.true_of(c, u));
                self.set_thread(c, who, Thread::Idle, Some(at));
            }
            Step::Done(done) => {
                match who {
                    Who::Lock(i) => self.clients[c].lockers[i].call = None,
                    Who::Rw(i) => self.clients[c].rw[i].call = None,
                }
                self.call_done(c, who, want, done);
            }
        }
    }

    fn set_thread(&mut self, c: usize, who: Who, thread: Thread, next: Option<u64>) {
        let cl = &mut self.clients[c];
        let (t, n) = match who {
            Who::Lock(i) => {
                let l = &mut cl.lockers[i];
                (&mut l.thread, &mut l.next)
            }
            Who::Rw(i) => {
                let r = &mut cl.rw[i];
                (&mut r.thread, &mut r.next)
            }
        };
        *t = thread;
        if let Some(next) = next {
            *n = next;
        }
    }

    /// The attempt of call `h` was answered `reply` (or, for a session replaced since,
    /// anything: the machine reads it as that session's expiry).
    pub(super) fn call_reply(&mut self, c: usize, h: HandleId, reply: Reply) {
        let Some(who) = self.who(c, h) else {
            return;
        };
        if let Reply::Queued(Ok(Queued::Waiting { owner: None, .. })) = &reply {
            let name = self.call_name(c, who);
            self.tr(Some(c), name.as_ref(), || {
                "queued behind another waiter".into()
            });
        }
        let local = self.local(c, self.now);
        let coming = reopen::reopen_coming(self.flags(c));
        let rng = &mut self.rng;
        let mut jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let call = match who {
            Who::Lock(i) => &mut cl.lockers[i].call,
            Who::Rw(i) => &mut cl.rw[i].call,
        };
        let Some(m) = call.as_mut() else {
            return;
        };
        let mut cx = Ctx {
            core,
            reserved: &mut cl.reserved,
            reopen_coming: coming,
            now: local,
            jitter: &mut jitter,
        };
        if let Some(term) = m.on_reply(&mut cx, reply) {
            tokens::check(&cl.tokens, cx.core, None, &term);
        }
        let permit = m.spec().want == Want::Permit;
        self.set_thread(c, who, Thread::Idle, Some(self.now));
        self.pump(c, who);
        let waits = match who {
            Who::Lock(i) => self.clients[c].lockers[i].thread == Thread::Idle,
            Who::Rw(_) => false,
        };
        if permit && waits && self.call_name(c, who).is_some() {
            let name = self.call_name(c, who);
            self.tr(Some(c), name.as_ref(), || "all permits taken".into());
        }
    }

    /// The first name of thread `who`'s call in progress.
    fn call_name(&self, c: usize, who: Who) -> Option<crate::types::LeaseName> {
        let cl = &self.clients[c];
        let call = match who {
            Who::Lock(i) => &cl.lockers[i].call,
            Who::Rw(i) => &cl.rw[i].call,
        };
        call.as_ref().map(|m| m.spec().names[0].clone())
    }

    /// Thread `who`'s call of `want` ended: the queue place it leaves goes to the backend;
    /// the term is believed, or the thread gives up and calls again later.
    fn call_done(&mut self, c: usize, who: Who, want: Want, done: Done) {
        let left = done.leave.is_some();
        if let Some(leave) = done.leave {
            let op = match leave.rw {
                true => Op::LeaveRwQueue(leave.name),
                false => Op::LeaveQueue(leave.name),
            };
            self.send(c, op, Chan::Caller);
        }
        let why = match done.result {
            Ok(Some(won)) => {
                return match (who, want) {
                    (Who::Lock(i), _) => self.acquired(c, i, won.term),
                    (Who::Rw(i), Want::Rw(mode)) => self.rw_acquired(c, i, mode, won.term),
                    (Who::Rw(i), _) => self.rw_acquired(c, i, RwMode::Read, won.term),
                };
            }
            Ok(None) => "taken",
            Err(crate::Error::Timeout { .. }) => "timed out",
            Err(crate::Error::AlreadyHeld { .. }) => "already held by this thread",
            Err(_) => "failed",
        };
        match who {
            Who::Lock(i) => self.end_call(c, i, why),
            Who::Rw(i) => self.rw_end_call(c, i, left, why),
        }
    }

    /// A cancel of thread `who`'s call (not while an attempt is in flight): it ends as the
    /// session's pump ends it (`Cancel`).
    pub(super) fn cancel_call(&mut self, c: usize, who: Who) {
        let local = self.local(c, self.now);
        let coming = reopen::reopen_coming(self.flags(c));
        let rng = &mut self.rng;
        let mut jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let call = match who {
            Who::Lock(i) => &mut cl.lockers[i].call,
            Who::Rw(i) => &mut cl.rw[i].call,
        };
        let Some(mut m) = call.take_if(|m| !m.in_flight()) else {
            return;
        };
        let mut cx = Ctx {
            core,
            reserved: &mut cl.reserved,
            reopen_coming: coming,
            now: local,
            jitter: &mut jitter,
        };
        let want = m.spec().want;
        let operation = m.spec().operation;
        let done = m.abandon(&mut cx, crate::Error::Cancelled { operation });
        let name = m.spec().names[0].clone();
        self.tr(Some(c), Some(&name), || {
            format!("cancels its call of {name}")
        });
        self.call_done(c, who, want, done);
    }
}
