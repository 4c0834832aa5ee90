//! The workload: the setup of the clients (clock rates, candidates, observers, locks, group
//! membership, expiry policy) and the premises' backend faults, the churn and the pauses, and
//! each client's actions: opening sessions, the engine's reopen, resigning and running again,
//! closing, and the lock callers' calls, holds and unlocks.

use super::network::{Chan, Ev, Op};
use super::{group, Cand, Client, LockPhase, LockSt, World, MS, PPM};
use crate::engine::core::{Core, HandleId};
use crate::engine::driver::wait::{LockWait, Step};
use crate::engine::driver::{self, reopen};
use crate::error::Result;
use crate::sim::check::Kind;
use crate::sim::model::session_no;
use crate::spi::Acquire;
use crate::types::{LeaseName, SessionId};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

impl World<'_> {
    pub(super) fn setup(&mut self) {
        let cfg = self.cfg;
        let d = (cfg.faults.clock_drift * PPM as f64) as u64;
        for c in 0..cfg.clients {
            let rate = if d > 0 {
                // Often exactly at the bound (the slowest clock allowed), else anywhere in it.
                match self.rng.below(4) {
                    0 => PPM - d,
                    1 => PPM + d,
                    _ => PPM - d + self.rng.below(2 * d + 1),
                }
            } else {
                PPM
            };
            let mut cands = Vec::new();
            for e in 0..cfg.elections {
                if c < 2 || self.rng.chance(0.7) {
                    cands.push(Cand {
                        name: LeaseName::new(format!("e{e}")).expect("valid name"),
                        handle: None,
                        releasing: false,
                    });
                }
            }
            let observes = (0..cfg.elections)
                .filter(|_| self.rng.chance(0.5))
                .map(|e| LeaseName::new(format!("e{e}")).expect("valid name"))
                .collect();
            let member = self.rng.chance(0.7);
            let watches = self.rng.chance(0.5);
            // Most processes let the engine reopen an expired session; the others open a
            // new one themselves (expiry terminal: `reopen_on_expiry(false)`).
            let reopen_on_expiry = c < 2 || self.rng.chance(0.75);
            let mut locks = Vec::new();
            for l in 0..cfg.locks {
                if c < 2 || self.rng.chance(0.7) {
                    locks.push(LockSt {
                        name: LeaseName::new(format!("l{l}")).expect("valid name"),
                        handle: 0,
                        phase: LockPhase::Idle,
                        next: 0,
                        seen: None,
                        term: None,
                        unlocking: None,
                        wait: None,
                    });
                }
            }
            self.clients.push(Client {
                rate,
                core: None,
                gen: 0,
                opening: false,
                reopen_due: false,
                reopening: false,
                reopen_on_expiry,
                reopen_failed: false,
                lost_on_unlock: Vec::new(),
                ended: false,
                paused_until: 0,
                wake_at: None,
                work: VecDeque::new(),
                work_busy: false,
                cands,
                locks,
                observes,
                observed: BTreeMap::new(),
                member,
                watches,
                next_handle: 1,
                open: BTreeMap::new(),
            });
            let start = self.rng.below(50 * MS);
            self.push(start, Ev::Reopen(c));
            self.schedule_act(c, start);
            self.schedule_pause(c, start);
        }
        let (lease, end) = (cfg.lease.as_nanos() as u64, self.end);
        if cfg.premises.token_reset {
            let at = self.rng.range(end / 5, end / 2);
            self.push(at, Ev::Snapshot);
            let lag = self.rng.range(lease, 3 * lease);
            self.push(at + lag, Ev::FailOver);
        }
        if cfg.premises.clock_step {
            let at = self.rng.range(end / 5, 3 * end / 4);
            self.push(at, Ev::ClockStep);
        }
        self.model.stale_values = cfg.premises.stale_values;
    }

    pub(super) fn exp_delay(&mut self, per_sec: f64) -> Option<u64> {
        if per_sec <= 0.0 {
            return None;
        }
        // Uniform in (0, 2 / rate): the mean is one per 1 / rate seconds.
        let max = (2.0e9 / per_sec) as u64;
        Some(1 + self.rng.below(max))
    }

    pub(super) fn schedule_act(&mut self, c: usize, from: u64) {
        if let Some(d) = self.exp_delay(self.cfg.faults.churn_per_sec) {
            if from + d < self.end {
                self.push(from + d, Ev::Act(c));
            }
        }
    }

    pub(super) fn schedule_pause(&mut self, c: usize, from: u64) {
        if let Some(d) = self.exp_delay(self.cfg.faults.pauses_per_sec) {
            if from + d < self.end {
                self.push(from + d, Ev::Pause(c));
            }
        }
    }

    pub(super) fn retry_delay(&mut self) -> u64 {
        let rng = &mut self.rng;
        let jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        driver::retry_delay(self.timing.retry, jitter).as_nanos() as u64
    }

    /// What the driver's decisions know of client `c`'s session besides its core.
    pub(super) fn flags(&self, c: usize) -> reopen::Flags {
        let cl = &self.clients[c];
        reopen::Flags {
            reopen_on_expiry: cl.reopen_on_expiry,
            reopening: cl.reopening,
            closed: false,
            failed: cl.reopen_failed,
        }
    }

    /// A lock call's acquire answered `r` (after the engine took it in): the driver's
    /// [`LockWait`] says what the caller does next.
    pub(super) fn lock_reply(&mut self, c: usize, h: HandleId, n: &LeaseName, r: Result<Acquire>) {
        let t = self.now;
        let local = self.local(c, t);
        let Some(i) = self.clients[c].locks.iter().position(|l| l.handle == h) else {
            return;
        };
        let coming = reopen::reopen_coming(self.flags(c));
        let retry = self.timing.retry;
        let rng = &mut self.rng;
        let jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        let l = &mut self.clients[c].locks[i];
        let wait = l.wait.get_or_insert_with(|| LockWait::new(false, retry));
        let step = wait.on_reply(r.map(Some), coming, local, jitter);
        let registered = wait.is_waiting();
        l.phase = LockPhase::Idle;
        l.next = t;
        let end_call = |w: &mut World<'_>| {
            let cl = &mut w.clients[c];
            if registered {
                if let Some(core) = cl.core.as_mut() {
                    core.stop_waiting(n);
                }
            }
            cl.locks[i].wait = None;
            cl.locks[i].seen = None;
        };
        match step {
            Step::Acquired(term) => {
                self.tr(Some(c), Some(n), || {
                    format!("LockAcquired {n} token {}", term.token)
                });
                end_call(self);
                let lease = self.cfg.lease.as_nanos() as u64;
                let hold = self.rng.range(10 * MS, 2 * lease);
                self.open_belief(c, h, n, term.token, true);
                let l = &mut self.clients[c].locks[i];
                l.phase = LockPhase::Holding(t + hold);
                l.term = Some(term);
            }
            Step::WaitForReleases => {
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.wait_for_release(n);
                }
            }
            Step::RetryNow => {}
            Step::RetryAt(at) => {
                let at = self.true_of(c, at);
                self.clients[c].locks[i].next = at;
            }
            Step::Busy | Step::Fail(_) => {
                // The call ended; the process calls `lock` again a little later.
                end_call(self);
                let pause = self.retry_delay();
                self.clients[c].locks[i].next = t + pause;
            }
        }
    }

    // ---- clients ------------------------------------------------------------------------

    pub(super) fn reopen(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        cl.reopen_due = false;
        if cl.opening || cl.core.as_ref().is_some_and(|k| k.state().is_live()) {
            return;
        }
        cl.gen += 1;
        cl.core = None;
        cl.work.clear();
        cl.work_busy = false;
        cl.ended = false;
        cl.reopening = false;
        cl.opening = true;
        self.end_open_beliefs(c, "a session was replaced with terms still believed");
        self.send(c, Op::Open, Chan::Caller);
    }

    pub(super) fn start_session(&mut self, c: usize, id: SessionId, sent: Instant, rem: Duration) {
        let seed = self.rng.next_u64();
        let local = self.local(c, self.now);
        let mut core = Core::new(self.timing, id.clone(), sent, rem, seed);
        let cl = &mut self.clients[c];
        for cand in cl.cands.iter_mut() {
            cand.releasing = false;
            if cand.handle.is_some() || cl.next_handle == 1 {
                let h = cl.next_handle;
                cl.next_handle += 1;
                cand.handle = Some(h);
                core.add_candidate(h, cand.name.clone(), local);
            }
        }
        for l in cl.locks.iter_mut() {
            // A new process-level session: lock calls start afresh.
            l.phase = LockPhase::Idle;
            l.seen = None;
            l.wait = None;
            l.unlocking = None;
        }
        for name in &cl.observes {
            let h = cl.next_handle;
            cl.next_handle += 1;
            core.add_observer(h, name.clone(), local);
        }
        if cl.watches {
            let h = cl.next_handle;
            cl.next_handle += 1;
            core.add_group_watch(h, group(), local);
        }
        let member = cl.member;
        cl.core = Some(core);
        let sno = session_no(&id);
        self.tr(Some(c), None, || format!("session s{sno} opened"));
        if member {
            self.send(c, Op::Join(group()), Chan::Caller);
        }
        self.settle(c);
    }

    /// The engine's reopen after an expiry succeeded: the registrations move to a new core.
    pub(super) fn reopened(&mut self, c: usize, id: SessionId, sent: Instant, rem: Duration) {
        let seed = self.rng.next_u64();
        let local = self.local(c, self.now);
        let cl = &mut self.clients[c];
        cl.reopening = false;
        let Some(old) = cl.core.as_mut() else {
            return;
        };
        let old_id = old.session().clone();
        let handover = old.handover();
        let mut core = Core::new(self.timing, id.clone(), sent, rem, seed);
        core.take_over(handover, old_id.clone(), local);
        cl.core = Some(core);
        cl.ended = false;
        let (a, b) = (session_no(&old_id), session_no(&id));
        self.tr(Some(c), None, || format!("engine reopened s{a} as s{b}"));
        if self.clients[c].member {
            // As the driver: re-join the groups on the new session.
            self.send(c, Op::Join(group()), Chan::Caller);
        }
        self.settle(c);
    }

    pub(super) fn act(&mut self, c: usize) {
        let live = self.clients[c]
            .core
            .as_ref()
            .is_some_and(|k| k.state().is_live());
        if !live {
            return;
        }
        let local = self.local(c, self.now);
        let n = self.clients[c].cands.len();
        let r = self.rng.below(10);
        if r < 8 && n > 0 {
            let i = self.rng.below(n as u64) as usize;
            let cl = &mut self.clients[c];
            let name = cl.cands[i].name.clone();
            match cl.cands[i].handle {
                Some(h) => {
                    cl.cands[i].handle = None;
                    let core = cl.core.as_mut().expect("live above");
                    let held = core.remove_candidate(h, local);
                    self.tr(Some(c), Some(&name), || format!("resigns from {name}"));
                    self.drain(c);
                    if self.clients[c].open.contains_key(&name) {
                        self.violation(
                            Kind::TermNotEnded,
                            c,
                            Some(&name),
                            "resign left the term believed".into(),
                        );
                    }
                    if let Ok(Some(term)) = held {
                        self.clients[c].cands[i].releasing = true;
                        self.send(c, Op::Resign(term.name, term.token), Chan::Caller);
                    }
                }
                None if !cl.cands[i].releasing => {
                    let h = cl.next_handle;
                    cl.next_handle += 1;
                    cl.cands[i].handle = Some(h);
                    cl.core
                        .as_mut()
                        .expect("live above")
                        .add_candidate(h, name.clone(), local);
                    self.tr(Some(c), Some(&name), || format!("runs for {name} again"));
                }
                None => {}
            }
            self.settle(c);
        } else if r == 9 {
            self.tr(Some(c), None, || "closes its session".into());
            let core = self.clients[c].core.as_mut().expect("live above");
            core.close();
            self.drain(c);
            if !self.clients[c].open.is_empty() {
                self.violation(
                    Kind::TermNotEnded,
                    c,
                    None,
                    "close left terms believed".into(),
                );
            }
            self.send(c, Op::Close, Chan::Caller);
            self.clients[c].gen += 1; // the session's threads stop
            let lease = self.cfg.lease.as_nanos() as u64;
            let d = self.rng.range(10 * MS, lease);
            self.clients[c].reopen_due = true;
            self.push(self.now + d, Ev::Reopen(c));
        }
    }

    pub(super) fn lock_step(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        for i in 0..self.clients[c].locks.len() {
            let cl = &mut self.clients[c];
            let Some(core) = cl.core.as_mut().filter(|k| k.state().is_live()) else {
                return;
            };
            let l = &mut cl.locks[i];
            match l.phase {
                LockPhase::Idle => {
                    let notified = l.seen.is_some_and(|s| s != core.releases_of(&l.name));
                    if t >= l.next || notified {
                        // A new lock call gets a handle; its retries keep it.
                        if l.wait.is_none() {
                            l.handle = cl.next_handle;
                            cl.next_handle += 1;
                            l.wait = Some(LockWait::new(false, self.timing.retry));
                        }
                        let h = l.handle;
                        l.phase = LockPhase::Acquiring;
                        l.seen = Some(core.releases_of(&l.name));
                        core.begin_acquire(&l.name);
                        let name = l.name.clone();
                        self.send(c, Op::Lock(h, name), Chan::Caller);
                    }
                }
                LockPhase::Holding(until) if t >= until => {
                    let (h, name) = (l.handle, l.name.clone());
                    let term = l.term.take().expect("a held lock has its term");
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
                    let l = &mut self.clients[c].locks[i];
                    match token {
                        Some(tok) => {
                            l.phase = LockPhase::Releasing;
                            self.send(c, Op::Unlock(name, tok), Chan::Caller);
                        }
                        None => {
                            l.phase = LockPhase::Idle;
                            l.next = t;
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
