//! The workload: the setup of the clients (clock rates, candidates and their values,
//! observers, lock, fair-lock, semaphore, read-write lock and job callers, group membership, expiry policy)
//! and the premises' faults, the churn and the pauses, and each client's actions: opening
//! sessions, the engine's reopen, resigning and running again, setting values, closing.

use super::delivery::Delivery;
use super::network::{Chan, Ev, Op};
use super::rw::RwCaller;
use super::{group, Cand, Client, JobThread, Jobber, Locker, Takes, Thread, World, MS, PPM};
use crate::engine::core::Core;
use crate::engine::driver::reserve::Reserved;
use crate::engine::driver::tokens::Watermarks;
use crate::engine::driver::{groups, reopen};
use crate::sim::check::Kind;
use crate::sim::model::session_no;
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
                    // Candidates with and without a value, so terms with and without one
                    // follow each other.
                    let value = if self.rng.chance(0.5) {
                        format!("c{c}e{e}")
                    } else {
                        String::new()
                    };
                    cands.push(Cand {
                        name: name(format!("e{e}")),
                        handle: None,
                        releasing: false,
                        value,
                    });
                }
            }
            let observes = (0..cfg.elections)
                .filter(|_| self.rng.chance(0.5))
                .map(|e| name(format!("e{e}")))
                .collect();
            let member = self.rng.chance(0.7);
            let watches = self.rng.chance(0.5);
            // Most processes let the engine reopen an expired session; the others open a
            // new one themselves (expiry terminal: `reopen_on_expiry(false)`).
            let reopen_on_expiry = c < 2 || self.rng.chance(0.75);
            // Half the processes give their terms a lock-delay of a quarter to one lease.
            let lease = cfg.lease.as_nanos() as u64;
            let lock_delay = match self.rng.chance(0.5) {
                true => Duration::from_nanos(self.rng.range(lease / 4, lease)),
                false => Duration::ZERO,
            };
            let mut lockers = Vec::new();
            let plain = (0..cfg.locks).map(|l| (vec![name(format!("l{l}"))], Takes::Plain));
            let fair = (0..cfg.fair_locks).map(|f| (vec![name(format!("f{f}"))], Takes::Fair));
            for (names, takes) in plain.chain(fair).collect::<Vec<_>>() {
                if c < 2 || self.rng.chance(0.7) {
                    lockers.push(locker(names, takes));
                }
            }
            // Now and then a second thread of the session takes the first lock too: it
            // waits for the name its sibling reserved (locks are not reentrant).
            if cfg.locks > 0 && self.rng.chance(0.3) {
                lockers.push(locker(vec![name("l0".into())], Takes::Plain));
            }
            for s in 0..cfg.semaphores {
                // Premise `permit_miscount`: the first process counts one permit more.
                let n = cfg.permits + u32::from(c == 0 && cfg.premises.permit_miscount);
                let names = (0..n).map(|i| name(format!("s{s}.permit-{i}"))).collect();
                lockers.push(locker(names, Takes::Permit));
            }
            for (k, l) in lockers.iter_mut().enumerate() {
                l.thread_key = k as u64 + 1;
            }
            let rw = (0..cfg.rw_locks)
                .filter(|_| c < 3 || self.rng.chance(0.7))
                .enumerate()
                .map(|(k, r)| RwCaller::new(name(format!("rw{r}")), k))
                .collect();
            let jobbers = (0..cfg.jobs)
                .filter(|_| c < 2 || self.rng.chance(0.7))
                .map(|j| Jobber {
                    name: name(format!("j{j}")),
                    thread: JobThread::Idle,
                    next: 0,
                })
                .collect();
            self.clients.push(Client {
                rate,
                core: None,
                gen: 0,
                opening: false,
                reopen_due: false,
                reopening: false,
                reopen_on_expiry,
                lock_delay,
                reopen_failed: false,
                lost_on_unlock: Vec::new(),
                ended: false,
                paused_until: 0,
                wake_at: None,
                work: VecDeque::new(),
                work_busy: false,
                attempt: None,
                cands,
                value_changes: 0,
                values_made: 0,
                lockers,
                reserved: Reserved::default(),
                rw,
                jobbers,
                observes,
                observed: BTreeMap::new(),
                member,
                watches,
                next_handle: 1,
                tokens: Watermarks::default(),
                delivery: Delivery::new(
                    cfg.premises.serial_delivery,
                    cfg.faults.slow_callbacks,
                    cfg.lease.as_nanos() as u64,
                    self.rng.next_u64(),
                ),
                open: BTreeMap::new(),
                jobs_open: BTreeMap::new(),
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
        let p = cfg.premises;
        self.model.stale_values = p.stale_values;
        self.model.unfair_queue = p.unfair_queue;
        self.model.lost_windows = p.lost_windows;
        self.model.false_misses = p.false_misses;
        self.model.shared_writers = p.shared_writers;
        self.model.lost_delays = p.lost_delays;
        self.model.lost_rw_delays = p.lost_rw_delays;
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

    /// The engine's timing of client `c`'s sessions (with its lock-delay).
    fn timing_of(&self, c: usize) -> crate::engine::core::Timing {
        let lock_delay = self.clients[c].lock_delay;
        crate::engine::core::Timing {
            lock_delay,
            ..self.timing
        }
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
        cl.reopen_failed = false;
        cl.opening = true;
        self.check_jobs(c);
        self.end_open_beliefs(c, "a session was replaced with terms still believed");
        self.send(c, Op::Open, Chan::Caller);
    }

    pub(super) fn start_session(&mut self, c: usize, id: SessionId, sent: Instant, rem: Duration) {
        let seed = self.rng.next_u64();
        let local = self.local(c, self.now);
        let mut core = Core::new(self.timing_of(c), id.clone(), sent, rem, seed);
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
        // A new process-level session: lock calls start afresh.
        cl.reserved = Reserved::default();
        for l in cl.lockers.iter_mut() {
            l.thread = Thread::Idle;
            l.call = None;
            l.cancel_at = None;
            l.term = None;
            l.unlocking = None;
        }
        for r in cl.rw.iter_mut() {
            r.reset();
        }
        for j in cl.jobbers.iter_mut() {
            // A running job runs on (its claim no longer holds); calls in flight failed.
            if !matches!(j.thread, JobThread::Running(_)) {
                j.thread = JobThread::Idle;
            }
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
        let delay = self.clients[c].lock_delay;
        self.tr(Some(c), None, || {
            format!("session s{sno} opened (lock-delay {delay:?})")
        });
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
        cl.core = Some(old.successor(id.clone(), sent, rem, seed, local));
        cl.ended = false;
        let (a, b) = (session_no(&old_id), session_no(&id));
        self.tr(Some(c), None, || format!("engine reopened s{a} as s{b}"));
        // The reopen re-joins the groups joined through a live membership.
        let joined = BTreeMap::from([(group(), usize::from(self.clients[c].member))]);
        for g in groups::rejoin(&joined) {
            self.send(c, Op::Join(g), Chan::Caller);
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
        if (5..8).contains(&r) && n > 0 {
            let i = self.rng.below(n as u64) as usize;
            self.set_value(c, i);
            self.settle(c);
        } else if r < 5 && n > 0 {
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
            // Running jobs' claims end with the session.
            self.check_jobs(c);
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
}

/// A lease name made of valid characters.
fn name(n: String) -> LeaseName {
    LeaseName::new(n).expect("valid name")
}

/// A lock caller that has not called yet.
fn locker(names: Vec<LeaseName>, takes: Takes) -> Locker {
    Locker {
        names,
        takes,
        thread_key: 0,
        thread: Thread::Idle,
        next: 0,
        handle: 0,
        call: None,
        cancel_at: None,
        term: None,
        unlocking: None,
    }
}
