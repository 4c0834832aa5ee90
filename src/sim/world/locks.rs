//! Lock callers: threads that take a lock (plain or fair) or a semaphore's permit, hold it a
//! while, unlock it, and again. Each call runs the driver's wait-and-retry loop
//! ([`LockWait`]): a lock call registers for releases after its first refusal, a semaphore
//! call from the start over all its permits, and some calls have a deadline. A semaphore
//! call tries its permits in rounds ([`PermitRound`]), each permit once (a one-try
//! [`LockWait`]); a fair lock's call that ends without the lock leaves the queue.

use super::network::{Chan, Op, Rep};
use super::{Takes, Thread, World, MS};
use crate::engine::core::HandleId;
use crate::engine::driver::reopen;
use crate::engine::driver::wait::{self, LockWait, PermitRound, Step};
use crate::error::Result;
use crate::sim::check::{Held, Kind};
use crate::spi::Acquire;
use crate::types::{LeaseName, Term};
use std::time::Duration;

impl World<'_> {
    /// Begins the lock calls that are due, tries again those whose retry is due or that saw a
    /// release, ends those past their deadline, and unlocks what was held long enough.
    pub(super) fn lock_step(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        for i in 0..self.clients[c].lockers.len() {
            let cl = &mut self.clients[c];
            let Some(core) = cl.core.as_mut().filter(|k| k.state().is_live()) else {
                return;
            };
            let l = &mut cl.lockers[i];
            match l.thread {
                Thread::Idle => {
                    let seen = l.seen.as_ref();
                    let notified = seen.is_some_and(|seen| {
                        (l.names.iter().zip(seen)).any(|(n, s)| core.releases_of(n) != *s)
                    });
                    if t < l.next && !notified {
                        continue;
                    }
                    match &l.wait {
                        None => self.begin_call(c, i),
                        Some(w) if w.timed_out(local) => self.end_call(c, i, "timed out"),
                        Some(_) => self.try_again(c, i),
                    }
                }
                Thread::Holding(until) if t >= until => self.unlock(c, i),
                _ => {}
            }
        }
    }

    /// A new call of locker `i`: a new handle, maybe a deadline (`lock_timeout`); a
    /// semaphore's call listens for releases of all its permits from the start.
    fn begin_call(&mut self, c: usize, i: usize) {
        let local = self.local(c, self.now);
        let lease = self.cfg.lease.as_nanos() as u64;
        let until = self
            .rng
            .chance(0.3)
            .then(|| local + Duration::from_nanos(self.rng.range(lease / 2, 2 * lease)));
        let random = self.rng.next_u64();
        let retry = self.timing.retry;
        let cl = &mut self.clients[c];
        let l = &mut cl.lockers[i];
        l.handle = cl.next_handle;
        cl.next_handle += 1;
        let mut w = LockWait::new(false, retry).until(until);
        if l.takes == Takes::Permit {
            w = w.waiting_from_start();
            l.start = wait::first_permit(random, l.names.len());
            if let Some(core) = cl.core.as_mut() {
                for n in &l.names {
                    core.wait_for_release(n);
                }
            }
        }
        l.wait = Some(w);
        let name = l.names[0].clone();
        let timeout = until.map(|u| u.saturating_duration_since(local));
        self.tr(Some(c), Some(&name), || {
            format!("calls lock {name} (timeout {timeout:?})")
        });
        self.try_again(c, i);
    }

    /// The call of locker `i` tries (again): one acquire of a lock, or a new round over a
    /// semaphore's permits.
    fn try_again(&mut self, c: usize, i: usize) {
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let l = &mut cl.lockers[i];
        l.seen = Some(l.names.iter().map(|n| core.releases_of(n)).collect());
        if l.takes == Takes::Permit {
            l.round = Some(PermitRound::new(l.start, l.names.len()));
            self.try_permit(c, i);
            return;
        }
        let (h, name) = (l.handle, l.names[0].clone());
        l.thread = Thread::Acquiring;
        core.begin_acquire(&name);
        let op = match l.takes {
            Takes::Fair => Op::LockQueued(h, name),
            _ => Op::Lock(h, name),
        };
        self.send(c, op, Chan::Caller);
    }

    /// The round of locker `i`'s semaphore call tries its next permit (one try, as
    /// `try_lock`), or ends.
    fn try_permit(&mut self, c: usize, i: usize) {
        let retry = self.timing.retry;
        let cl = &mut self.clients[c];
        let l = &mut cl.lockers[i];
        let Some(round) = l.round.as_mut() else {
            return;
        };
        let Some(k) = round.next() else {
            return self.round_over(c, i);
        };
        // A try on a session that is not live fails at once (`begin_lock_attempt`).
        let live = cl.core.as_ref().map(|core| core.check_live());
        if let Some(Err(e)) = live {
            round.failed(e);
            return self.round_over(c, i);
        }
        l.handle = cl.next_handle;
        cl.next_handle += 1;
        l.slot = Some(LockWait::new(true, retry));
        l.thread = Thread::Acquiring;
        let (h, name) = (l.handle, l.names[k].clone());
        if let Some(core) = cl.core.as_mut() {
            core.begin_acquire(&name);
        }
        self.send(c, Op::Lock(h, name), Chan::Caller);
    }

    /// A round over the permits ended without one: the call's [`LockWait`] says what next.
    fn round_over(&mut self, c: usize, i: usize) {
        let local = self.local(c, self.now);
        let coming = reopen::reopen_coming(self.flags(c));
        let t = self.now;
        let rng = &mut self.rng;
        let jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let l = &mut self.clients[c].lockers[i];
        l.thread = Thread::Idle;
        let outcome = l.round.take().map_or(Ok(None), PermitRound::outcome);
        let Some(w) = l.wait.as_mut() else {
            return;
        };
        let name = l.names[0].clone();
        match w.on_reply(outcome, coming, local, jitter) {
            Step::Busy | Step::Fail(_) => self.end_call(c, i, "failed"),
            Step::RetryNow | Step::WaitForReleases | Step::Acquired(_) => l.next = t,
            Step::RetryAt(at) => {
                if w.timed_out(local) {
                    return self.end_call(c, i, "timed out");
                }
                self.tr(Some(c), Some(&name), || "all permits taken".into());
                let at = self.true_of(c, at);
                self.clients[c].lockers[i].next = at;
            }
        }
    }

    /// A lock call's (or a permit try's) acquire answered `r`, after the engine took it in
    /// (`wait::take_reply`): the driver's [`LockWait`] says what the caller does next.
    pub(super) fn lock_reply(
        &mut self,
        c: usize,
        h: HandleId,
        n: &LeaseName,
        r: Result<Option<Acquire>>,
    ) {
        let t = self.now;
        let local = self.local(c, t);
        let Some(i) = self.clients[c].lockers.iter().position(|l| l.handle == h) else {
            return;
        };
        if matches!(r, Ok(None)) {
            self.tr(Some(c), Some(n), || "queued behind another waiter".into());
        }
        let coming = reopen::reopen_coming(self.flags(c));
        let rng = &mut self.rng;
        let jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let l = &mut self.clients[c].lockers[i];
        l.thread = Thread::Idle;
        l.next = t;
        let permit = l.takes == Takes::Permit;
        let w = if permit { l.slot.take() } else { l.wait.take() };
        let Some(mut w) = w else {
            return;
        };
        let step = w.on_reply(r, coming, local, jitter);
        if !permit {
            l.wait = Some(w);
        }
        match step {
            Step::Acquired(term) => self.acquired(c, i, term),
            Step::Busy if permit => {
                if let Some(round) = l.round.as_mut() {
                    round.busy();
                }
                self.try_permit(c, i);
            }
            Step::Fail(e) if permit => {
                if let Some(round) = l.round.as_mut() {
                    round.failed(e);
                }
                self.round_over(c, i);
            }
            Step::WaitForReleases => {
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.wait_for_release(n);
                }
            }
            Step::RetryNow => {}
            Step::RetryAt(at) => {
                let at = self.true_of(c, at);
                self.clients[c].lockers[i].next = at;
            }
            Step::Busy | Step::Fail(_) => self.end_call(c, i, "failed"),
        }
    }

    /// Locker `i` holds `term` (of its handle): the call ends, the term is believed.
    fn acquired(&mut self, c: usize, i: usize, term: Term) {
        let t = self.now;
        let n = term.name.clone();
        let what = match self.clients[c].lockers[i].takes {
            Takes::Permit => "PermitAcquired",
            _ => "LockAcquired",
        };
        self.tr(Some(c), Some(&n), || {
            format!("{what} {n} token {}", term.token)
        });
        self.stop_call(c, i);
        let lease = self.cfg.lease.as_nanos() as u64;
        let hold = self.rng.range(10 * MS, 2 * lease);
        let h = self.clients[c].lockers[i].handle;
        self.open_belief(c, h, &n, term.token, Held::Lock);
        let l = &mut self.clients[c].lockers[i];
        l.thread = Thread::Holding(t + hold);
        l.term = Some(term);
    }

    /// Locker `i`'s call ends: it stops waiting for releases.
    fn stop_call(&mut self, c: usize, i: usize) {
        let cl = &mut self.clients[c];
        let l = &mut cl.lockers[i];
        let w = l.wait.take();
        l.seen = None;
        l.round = None;
        l.slot = None;
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        if l.takes == Takes::Permit {
            for n in &l.names {
                core.stop_waiting(n);
            }
        } else if w.is_some_and(|w| w.is_waiting()) {
            core.stop_waiting(&l.names[0]);
        }
    }

    /// Locker `i`'s call ends without the lock (`why`): a fair lock leaves its queue; the
    /// thread calls again a little later.
    fn end_call(&mut self, c: usize, i: usize, why: &'static str) {
        self.stop_call(c, i);
        let name = self.clients[c].lockers[i].names[0].clone();
        self.tr(Some(c), Some(&name), || format!("gives up {name}: {why}"));
        if self.clients[c].lockers[i].takes == Takes::Fair {
            self.send(c, Op::LeaveQueue(name), Chan::Caller);
        }
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
        let token = core.unlock(h, &term, local).ok();
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
            core.on_released(name, reply.is_ok());
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
