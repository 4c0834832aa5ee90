//! Read-write lock callers: threads that take a read or a write term of a name (`read`,
//! `try_write`, `write_timeout`, …), hold it a while, unlock it, and again. Each call runs
//! the shipped driver as `RwLock` does: the wait-and-retry loop ([`LockWait`]: a call
//! registers for releases after its first refusal, some calls have a deadline, some try
//! once), the writer's patience, the attempt's reply as the engine takes it in
//! (`rw::take_reply`), the writers' queue left by a writer that gave up
//! (`rw::leaves_queue`), and the unlock's found-gone report (`wait::lost_on_release`).

use super::network::{Chan, Op, Rep};
use super::{Thread, World, MS};
use crate::engine::core::HandleId;
use crate::engine::driver::wait::{self, LockWait, Step};
use crate::engine::driver::{reopen, rw};
use crate::error::Result;
use crate::sim::check::{Held, Kind};
use crate::spi::{Acquire, RwMode};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::time::Duration;

/// A caller thread of one read-write lock, reading most of the time and writing now and
/// then.
pub(super) struct RwCaller {
    pub(super) name: LeaseName,
    /// The side the call in progress takes (or the term held is of).
    mode: RwMode,
    /// Whether the call tries once (`try_read`, `try_write`).
    once: bool,
    pub(super) thread: Thread,
    /// When the next call begins, or the call in progress tries again (true time).
    pub(super) next: u64,
    /// The guard's handle (one per call).
    handle: HandleId,
    /// When the call in progress began (true time).
    called: u64,
    /// The releases of the name seen when the call last tried.
    seen: Option<u64>,
    /// The call in progress (the driver's wait-and-retry policy), if any.
    wait: Option<LockWait>,
    /// The term while holding.
    term: Option<Term>,
    /// The term being unlocked (its release in flight).
    unlocking: Option<Term>,
}

impl RwCaller {
    /// A caller of `name` that has not called yet.
    pub(super) fn new(name: LeaseName) -> Self {
        RwCaller {
            name,
            mode: RwMode::Read,
            once: false,
            thread: Thread::Idle,
            next: 0,
            handle: 0,
            called: 0,
            seen: None,
            wait: None,
            term: None,
            unlocking: None,
        }
    }

    /// A new process-level session: calls start afresh.
    pub(super) fn reset(&mut self) {
        self.thread = Thread::Idle;
        self.seen = None;
        self.wait = None;
        self.term = None;
        self.unlocking = None;
    }
}

impl World<'_> {
    /// Begins the read-write calls that are due, tries again those whose retry is due or
    /// that saw a release, ends those past their deadline, and unlocks what was held long
    /// enough.
    pub(super) fn rw_step(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        for i in 0..self.clients[c].rw.len() {
            let cl = &mut self.clients[c];
            let Some(core) = cl.core.as_mut().filter(|k| k.state().is_live()) else {
                return;
            };
            let r = &mut cl.rw[i];
            match r.thread {
                Thread::Idle => {
                    let notified = r.seen.is_some_and(|s| core.releases_of(&r.name) != s);
                    if t < r.next && !notified {
                        continue;
                    }
                    match &r.wait {
                        None => self.rw_begin(c, i),
                        Some(w) if w.timed_out(local) => self.rw_end_call(c, i, "timed out"),
                        Some(_) => self.rw_try(c, i),
                    }
                }
                Thread::Holding(until) if t >= until => self.rw_unlock(c, i),
                _ => {}
            }
        }
    }

    /// A new call of caller `i`: a write now and then, else a read; some try once, some
    /// have a deadline (`read_timeout`, `write_timeout`).
    fn rw_begin(&mut self, c: usize, i: usize) {
        let local = self.local(c, self.now);
        let lease = self.cfg.lease.as_nanos() as u64;
        let mode = if self.rng.chance(0.35) {
            RwMode::Write
        } else {
            RwMode::Read
        };
        let once = self.rng.chance(0.15);
        let until = if once {
            Some(local)
        } else {
            (self.rng.chance(0.3))
                .then(|| local + Duration::from_nanos(self.rng.range(lease / 2, 2 * lease)))
        };
        let retry = self.timing.retry;
        let cl = &mut self.clients[c];
        let r = &mut cl.rw[i];
        r.handle = cl.next_handle;
        cl.next_handle += 1;
        r.mode = mode;
        r.once = once;
        r.called = self.now;
        r.wait = Some(LockWait::new(once, retry).until(until));
        let name = r.name.clone();
        let timeout = until.map(|u| u.saturating_duration_since(local));
        self.tr(Some(c), Some(&name), || {
            let how = if once { "try" } else { "call" };
            format!("{how} {} {name} (timeout {timeout:?})", mode.as_str())
        });
        self.rw_try(c, i);
    }

    /// The call of caller `i` tries (again): one attempt, with the writer's patience.
    fn rw_try(&mut self, c: usize, i: usize) {
        let lease = self.cfg.lease;
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let r = &mut cl.rw[i];
        r.seen = Some(core.releases_of(&r.name));
        r.thread = Thread::Acquiring;
        core.begin_rw_acquire(&r.name);
        let patience = rw::patience(r.once, lease);
        let op = Op::AcquireRw(r.handle, r.name.clone(), r.mode, patience);
        self.send(c, op, Chan::Caller);
    }

    /// Guard `h`'s attempt answered `r`, as the engine took it in (`rw::take_reply`): the
    /// driver's [`LockWait`] says what the caller does next.
    pub(super) fn rw_reply(
        &mut self,
        c: usize,
        h: HandleId,
        n: &LeaseName,
        r: Result<Option<Acquire>>,
    ) {
        let t = self.now;
        let local = self.local(c, t);
        let Some(i) = self.clients[c].rw.iter().position(|r| r.handle == h) else {
            return;
        };
        let coming = reopen::reopen_coming(self.flags(c));
        let rng = &mut self.rng;
        let jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let caller = &mut self.clients[c].rw[i];
        if caller.thread != Thread::Acquiring {
            return;
        }
        caller.thread = Thread::Idle;
        caller.next = t;
        let Some(w) = caller.wait.as_mut() else {
            return;
        };
        match w.on_reply(r, coming, local, jitter) {
            Step::Acquired(term) => self.rw_acquired(c, i, term),
            Step::Busy | Step::Fail(_) => self.rw_end_call(c, i, "failed"),
            Step::WaitForReleases => {
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.wait_for_release(n);
                }
            }
            Step::RetryNow => {}
            Step::RetryAt(at) => {
                let at = self.true_of(c, at);
                self.clients[c].rw[i].next = at;
            }
        }
    }

    /// Caller `i` holds `term`: the call ends, the term is believed.
    fn rw_acquired(&mut self, c: usize, i: usize, term: Term) {
        let t = self.now;
        let n = term.name.clone();
        let (mode, called) = (self.clients[c].rw[i].mode, self.clients[c].rw[i].called);
        match mode {
            RwMode::Read => self.stats.rw_terms.0 += 1,
            RwMode::Write => {
                self.stats.rw_terms.1 += 1;
                let waited = t - called;
                self.stats.longest_write_wait = self.stats.longest_write_wait.max(waited);
            }
        }
        self.tr(Some(c), Some(&n), || {
            format!("RwAcquired {} {n} token {}", mode.as_str(), term.token)
        });
        self.rw_stop_call(c, i);
        let lease = self.cfg.lease.as_nanos() as u64;
        let hold = self.rng.range(10 * MS, lease);
        let h = self.clients[c].rw[i].handle;
        let held = match mode {
            RwMode::Read => Held::Read,
            RwMode::Write => Held::Write,
        };
        self.open_belief(c, h, &n, term.token, held);
        let r = &mut self.clients[c].rw[i];
        r.thread = Thread::Holding(t + hold);
        r.term = Some(term);
    }

    /// Caller `i`'s call ends: it stops waiting for releases.
    fn rw_stop_call(&mut self, c: usize, i: usize) {
        let cl = &mut self.clients[c];
        let r = &mut cl.rw[i];
        let w = r.wait.take();
        r.seen = None;
        if let (Some(core), true) = (cl.core.as_mut(), w.is_some_and(|w| w.is_waiting())) {
            core.stop_waiting(&r.name);
        }
    }

    /// Caller `i`'s call ends without a term (`why`): a writer that waited leaves the
    /// writers' queue; the thread calls again a little later.
    fn rw_end_call(&mut self, c: usize, i: usize, why: &'static str) {
        self.rw_stop_call(c, i);
        let r = &self.clients[c].rw[i];
        let (name, leaves) = (r.name.clone(), rw::leaves_queue(r.mode, r.once));
        if leaves {
            self.stats.writes_given_up += 1;
        }
        self.tr(Some(c), Some(&name), || format!("gives up {name}: {why}"));
        if leaves {
            self.send(c, Op::LeaveRwQueue(name), Chan::Caller);
        }
        let retry = self.timing.retry.as_nanos() as u64;
        let pause = self.rng.range(retry / 2, retry + retry / 2);
        let r = &mut self.clients[c].rw[i];
        r.thread = Thread::Idle;
        r.next = self.now + pause;
    }

    /// Caller `i` unlocks the term it held: the engine ends it (`rw_unlock`; a term lost
    /// meanwhile is reported first), then the release goes to the backend.
    fn rw_unlock(&mut self, c: usize, i: usize) {
        let t = self.now;
        let local = self.local(c, t);
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let r = &mut cl.rw[i];
        let h = r.handle;
        let term = r.term.take().expect("a held term has its term");
        let name = term.name.clone();
        let ended = core.rw_unlock(h, &term, local).ok();
        r.unlocking = ended.map(|_| term.clone());
        self.tr(Some(c), Some(&name), || format!("unlocks {name}"));
        self.drain(c);
        if let Some(b) = self.clients[c].open.get(&name).copied() {
            if ended.is_none() {
                self.violation(
                    Kind::SilentLoss,
                    c,
                    Some(&name),
                    "a read-write term was believed but the engine no longer held it".into(),
                );
            }
            self.clients[c].open.remove(&name);
            self.close_belief(b, "unlocked");
        }
        let r = &mut self.clients[c].rw[i];
        match ended {
            Some((mode, token)) => {
                r.thread = Thread::Unlocking;
                self.send(c, Op::ReleaseRw(name, mode, token), Chan::Caller);
            }
            None => {
                r.thread = Thread::Idle;
                r.next = t;
            }
        }
    }

    /// Request `id`, an unlock's release of `name`, was answered (for the current session):
    /// the engine hears the release finished (`on_rw_released`); one that found the term
    /// gone is reported (`LockLost{Missing}`, once), as `RwGuard::unlock` does.
    pub(super) fn rw_unlocked(
        &mut self,
        c: usize,
        id: u64,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
        reply: Result<Rep>,
    ) {
        let t = self.now;
        let held = matches!(reply, Ok(Rep::Released(true)));
        if let Some(core) = self.clients[c].core.as_mut() {
            core.on_rw_released(name, mode, token, reply.is_ok());
        }
        let lease = self.cfg.lease.as_nanos() as u64;
        let pause = self.rng.range(10 * MS, lease / 2);
        let ended_before = self.gone_before.remove(&id).unwrap_or(false);
        let cl = &mut self.clients[c];
        let unlocking = |r: &&mut RwCaller| r.thread == Thread::Unlocking && &r.name == name;
        let Some(r) = cl.rw.iter_mut().find(unlocking) else {
            return;
        };
        r.thread = Thread::Idle;
        r.next = t + pause;
        let term = r.unlocking.take();
        if let (false, Ok(_), Some(term), Some(core)) = (held, &reply, term, cl.core.as_mut()) {
            if core.state().is_live() {
                // It will report the loss, once.
                cl.lost_on_unlock.push((term.clone(), ended_before));
            }
            let _ = wait::lost_on_release(core, r.handle, term);
        }
    }

    /// A reply for a session replaced since: an attempt hears its session expired (as the
    /// driver's `with_session` answers it), an unlock ends (the engine's own releases on
    /// the work queue, `chan`, have no caller).
    pub(super) fn rw_stale(&mut self, c: usize, op: &Op, chan: Chan, sent_for: Option<SessionId>) {
        match op {
            _ if chan == Chan::Work => {}
            Op::AcquireRw(h, n, _, _) => {
                let sent_for = sent_for.expect("stale replies have a session");
                self.rw_reply(c, *h, n, Err(wait::replaced(&sent_for)));
            }
            Op::ReleaseRw(n, _, _) => {
                let t = self.now;
                let unlocking = |r: &&mut RwCaller| r.thread == Thread::Unlocking && &r.name == n;
                if let Some(r) = self.clients[c].rw.iter_mut().find(unlocking) {
                    r.thread = Thread::Idle;
                    r.unlocking = None;
                    r.next = t;
                }
            }
            _ => {}
        }
    }
}
