//! Lock callers: threads that take a lock (plain or fair) or a semaphore's permit, hold it a
//! while, unlock it, and again. Each call is the driver's acquire machine (pumped in
//! [`calls`](super::calls)): a lock call registers for releases after its first refusal, a
//! semaphore call from the start over all its permits, some calls have a deadline, some are
//! cancelled, and a second thread of a session may wait for the name its sibling reserved.

use super::calls::Who;
use super::network::{Chan, Op, Rep};
use super::{Takes, Thread, World, MS};
use crate::engine::driver::acquire::{Acquisition, Form, Spec, Want};
use crate::engine::driver::release::{self, TermKind};
use crate::engine::driver::reserve::Space;
use crate::engine::driver::wait;
use crate::error::Result;
use crate::sim::check::{Held, Kind};
use crate::types::{LeaseName, Term};
use std::time::Duration;

impl World<'_> {
    /// Begins the lock calls that are due, asks those in progress what to do (a retry due,
    /// a release seen, a deadline passed), cancels those whose cancel is due, and unlocks
    /// what was held long enough.
    pub(super) fn lock_step(&mut self, c: usize) {
        let t = self.now;
        for i in 0..self.clients[c].lockers.len() {
            let cl = &self.clients[c];
            let Some(core) = cl.core.as_ref() else {
                return;
            };
            let live = core.state().is_live();
            let l = &cl.lockers[i];
            match (l.thread, &l.call) {
                (Thread::Idle, None) if live && t >= l.next => self.begin_call(c, i),
                (Thread::Idle, Some(_)) if l.cancel_at.is_some_and(|at| t >= at) => {
                    self.clients[c].lockers[i].cancel_at = None;
                    self.cancel_call(c, Who::Lock(i));
                }
                (Thread::Idle, Some(_)) => self.pump(c, Who::Lock(i)),
                (Thread::Holding(until), _) if t >= until => self.unlock(c, i),
                _ => {}
            }
        }
    }

    /// A new call of locker `i`: a new handle, maybe a deadline (`lock_timeout`), maybe a
    /// cancel later (`lock_cancellable`).
    fn begin_call(&mut self, c: usize, i: usize) {
        let local = self.local(c, self.now);
        let lease = self.cfg.lease.as_nanos() as u64;
        let timeout = (self.rng.chance(0.3))
            .then(|| Duration::from_nanos(self.rng.range(lease / 2, 2 * lease)));
        let cancel_at = (self.rng.chance(0.1)).then(|| self.now + self.rng.range(MS, lease));
        let random = self.rng.next_u64();
        let (retry, lease) = (self.timing.retry, self.cfg.lease);
        let cl = &mut self.clients[c];
        let h = cl.next_handle;
        cl.next_handle += 1;
        let l = &mut cl.lockers[i];
        l.cancel_at = cancel_at;
        let (want, operation) = match l.takes {
            Takes::Plain => (Want::Lock, "taking a lock"),
            Takes::Fair => (Want::FairLock, "taking a lock"),
            Takes::Permit => (Want::Permit, "taking a permit"),
        };
        let spec = Spec {
            want,
            names: l.names.clone(),
            form: Form::Wait(timeout),
            operation,
        };
        let m = Acquisition::new(spec, h, l.thread_key, local, retry, lease, random);
        let name = l.names[0].clone();
        self.tr(Some(c), Some(&name), || {
            format!("calls lock {name} (timeout {timeout:?})")
        });
        self.start_call(c, Who::Lock(i), m);
    }

    /// Locker `i` holds `term` (of its handle): the call ends, the term is believed.
    pub(super) fn acquired(&mut self, c: usize, i: usize, term: Term) {
        let t = self.now;
        let n = term.name.clone();
        let what = match self.clients[c].lockers[i].takes {
            Takes::Permit => "PermitAcquired",
            _ => "LockAcquired",
        };
        self.tr(Some(c), Some(&n), || {
            format!("{what} {n} token {}", term.token)
        });
        let lease = self.cfg.lease.as_nanos() as u64;
        let hold = self.rng.range(10 * MS, 2 * lease);
        let h = self.clients[c].lockers[i].handle;
        self.open_belief(c, h, &n, term.token, Held::Lock);
        let l = &mut self.clients[c].lockers[i];
        l.thread = Thread::Holding(t + hold);
        l.term = Some(term);
    }

    /// Locker `i`'s call ended without the lock (`why`; a fair lock left its queue): the
    /// thread calls again a little later.
    pub(super) fn end_call(&mut self, c: usize, i: usize, why: &'static str) {
        let name = self.clients[c].lockers[i].names[0].clone();
        self.tr(Some(c), Some(&name), || format!("gives up {name}: {why}"));
        let retry = self.timing.retry.as_nanos() as u64;
        let pause = self.rng.range(retry, retry + retry / 2);
        let l = &mut self.clients[c].lockers[i];
        l.thread = Thread::Idle;
        l.next = self.now + pause;
    }

    /// Locker `i` unlocks the term it held: the engine ends it (a term found past its
    /// deadline is reported lost first), then the release goes to the backend.
    fn unlock(&mut self, c: usize, i: usize) {
        let t = self.now;
        let local = self.local(c, t);
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let l = &mut cl.lockers[i];
        let h = l.handle;
        let term = l.term.take().expect("a held lock has its term");
        let name = term.name.clone();
        let token = (release::end(core, TermKind::Lock, h, &term, local).ok()).map(|u| u.token);
        // The guard's name is free once it ends (as a dropped guard's).
        cl.reserved.unreserve(Space::Lease, &term.name, h);
        l.unlocking = token.map(|_| term.clone());
        self.tr(Some(c), Some(&name), || format!("unlocks {name}"));
        // A term found past its deadline by the unlock is reported first.
        self.drain(c);
        if let Some(b) = self.clients[c].open.get(&name).copied() {
            if token.is_none() {
                self.violation(
                    Kind::SilentLoss,
                    c,
                    Some(&name),
                    "a lock was believed but the engine no longer held it".into(),
                );
            }
            self.clients[c].open.remove(&name);
            self.close_belief(b, "unlocked");
        }
        let l = &mut self.clients[c].lockers[i];
        match token {
            Some(tok) => {
                l.thread = Thread::Unlocking;
                self.send(c, Op::Unlock(name, tok), Chan::Caller);
            }
            None => {
                l.thread = Thread::Idle;
                l.next = t;
            }
        }
    }

    /// Request `id`, an unlock's release of `name`, was answered: a release that found the
    /// term gone is reported (`LockLost{Missing}`, once), as `LockGuard::unlock` does.
    pub(super) fn unlocked(&mut self, c: usize, id: u64, name: &LeaseName, reply: Result<Rep>) {
        let t = self.now;
        let held = matches!(reply, Ok(Rep::Released(true)));
        if let Some(core) = self.clients[c].core.as_mut() {
            core.on_released(Space::Lease, name, reply.is_ok());
        }
        let lease = self.cfg.lease.as_nanos() as u64;
        let pause = self.rng.range(10 * MS, lease);
        let unlocking = |l: &&mut super::Locker| {
            l.thread == Thread::Unlocking && l.unlocking.as_ref().is_some_and(|u| &u.name == name)
        };
        let ended_before = self.gone_before.remove(&id).unwrap_or(false);
        let cl = &mut self.clients[c];
        let Some(l) = cl.lockers.iter_mut().find(unlocking) else {
            return;
        };
        l.thread = Thread::Idle;
        l.next = t + pause;
        let term = l.unlocking.take();
        if let (false, Ok(_), Some(term), Some(core)) = (held, &reply, term, cl.core.as_mut()) {
            if core.state().is_live() {
                // It will report the loss, once.
                cl.lost_on_unlock.push((term.clone(), ended_before));
            }
            let _ = wait::lost_on_release(core, l.handle, term);
        }
    }
}
