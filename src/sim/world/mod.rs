//! The simulated world: clients driving real engine [`Core`]s, a network, the model backend,
//! and one event queue on true (backend) time.
//!
//! The parts: [`network`] (messages, delays, a request's arrival at the model backend),
//! [`replies`] (a reply's completion at its client, through the driver), [`clock`] (local
//! and true time), [`workload`] (setup, churn, sessions), [`locks`] (lock, fair-lock and
//! semaphore callers), [`rw`] (read-write lock callers), [`jobs`] (run-once callers),
//! [`values`] (candidates' term values),
//! [`beliefs`] (the checker's side of events) and [`outcome`] (trace, counters, report).

mod beliefs;
mod calls;
mod clock;
mod delivery;
mod jobs;
mod locks;
mod network;
mod outcome;
mod replies;
mod rw;
mod values;
mod workload;

pub(crate) use outcome::secs;
pub use outcome::{Outcome, Stats, TraceLine};

use super::check::{self, Belief, Kind, Violation};
use super::config::SimConfig;
use super::model::{session_no, DelayStep, Model};
use super::rng::Rng;
use crate::engine::core::{Core, HandleId, Task, Timing};
use crate::engine::driver::acquire::Acquisition;
use crate::engine::driver::attempt::Attempt;
use crate::engine::driver::reopen;
use crate::engine::driver::reserve::Reserved;
use crate::engine::driver::tokens::Watermarks;
use crate::engine::driver::{self, Route};
use crate::error::Error;
use crate::spi::{Acquire, Notification};
use crate::types::{GroupName, LeaseName, SessionId, Term, Token};
use network::{Chan, Ev, Item, Op, Rep, Req};
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;
const PPM: u64 = 1_000_000;

/// What a lock (or read-write lock) caller's thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thread {
    /// Between two calls (until `next`), or in a call, waiting to try again (at `next`, or
    /// at a release seen).
    Idle,
    /// An acquire is in flight.
    Acquiring,
    /// Holds the term until the true instant given.
    Holding(u64),
    /// The unlock's release is in flight.
    Unlocking,
}

/// What a lock caller takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Takes {
    /// A lock (`Session::lock`).
    Plain,
    /// A fair lock, through the backend's queue (`fair_locks(true)`).
    Fair,
    /// A semaphore's permit (`Semaphore::acquire`): one of its permit leases.
    Permit,
}

/// A caller thread taking a lock or a semaphore's permit, holding it a while, unlocking it,
/// and again.
struct Locker {
    /// The lock's name, or the semaphore's permit leases (as many as this process counts).
    names: Vec<LeaseName>,
    takes: Takes,
    /// The simulated thread (its key for the session's reservations).
    thread_key: u64,
    thread: Thread,
    /// When the next call begins, or the call in progress wants to be asked again (true
    /// time).
    next: u64,
    /// The handle of the call in progress, then of the held term.
    handle: HandleId,
    /// The call in progress: the driver's acquire machine, pumped as the session pumps it.
    call: Option<Acquisition>,
    /// When the call in progress is cancelled (true time), if it is.
    cancel_at: Option<u64>,
    /// The term while holding.
    term: Option<Term>,
    /// The term being unlocked (its release in flight).
    unlocking: Option<Term>,
}

/// A run-once job's claim while its job runs.
struct Run {
    token: Token,
    /// The session that claimed it.
    session: SessionId,
    /// The claim's local deadline.
    deadline: Instant,
    /// When the job returns (true time).
    ends: u64,
}

/// What a job caller's thread is doing.
enum JobThread {
    /// Until its next `run_once` (at `next`).
    Idle,
    /// The claim is in flight.
    Claiming,
    /// The job runs.
    Running(Run),
    /// The finish is in flight.
    Finishing,
}

/// A caller thread running a job with `run_once` on its own schedule.
struct Jobber {
    name: LeaseName,
    thread: JobThread,
    next: u64,
}

struct Cand {
    name: LeaseName,
    handle: Option<HandleId>,
    releasing: bool,
    /// The value it gives its terms (empty: none).
    value: String,
}

struct Client {
    rate: u64,
    core: Option<Core>,
    gen: u64,
    opening: bool,
    reopen_due: bool,
    /// The engine's reopen after an expiry is queued or running on the work thread.
    reopening: bool,
    /// `Config::reopen_on_expiry` of this process's sessions.
    reopen_on_expiry: bool,
    /// `Config::lock_delay` of this process's sessions (zero: none).
    lock_delay: Duration,
    /// A reopen failed for good: expiry is terminal (the process opens a new session).
    reopen_failed: bool,
    /// Terms whose unlock found them gone, each with whether the backend had ended it
    /// before the release: each must be reported lost once.
    lost_on_unlock: Vec<(Term, bool)>,
    ended: bool,
    paused_until: u64,
    wake_at: Option<u64>,
    work: VecDeque<(Op, Option<SessionId>)>,
    work_busy: bool,
    /// The work thread's candidate attempt in progress.
    attempt: Option<Attempt>,
    cands: Vec<Cand>,
    /// Changes of the candidates' values (the session's count).
    value_changes: u64,
    /// Values this process made (each new value is unique).
    values_made: u64,
    lockers: Vec<Locker>,
    /// The names the session's handles reserved (its callers are its threads).
    reserved: Reserved,
    /// Read-write lock callers, one per name it uses.
    rw: Vec<rw::RwCaller>,
    jobbers: Vec<Jobber>,
    /// Names this process observes (an observer handle per name, per session opened).
    observes: Vec<LeaseName>,
    /// The highest token each observer handle reported.
    observed: BTreeMap<HandleId, Token>,
    /// Whether this process joins the group `g` (and re-joins it after a reopen).
    member: bool,
    /// Whether this process watches the group `g`.
    watches: bool,
    next_handle: HandleId,
    /// The process's event delivery (its listeners on virtual queues).
    delivery: delivery::Delivery,
    /// The highest token the process saw granted per name (its sessions share it).
    tokens: Watermarks,
    /// The believed terms of elections and locks, by name.
    open: BTreeMap<LeaseName, usize>,
    /// The believed job claims, by name.
    jobs_open: BTreeMap<LeaseName, usize>,
}

struct World<'a> {
    cfg: &'a SimConfig,
    timing: Timing,
    timeout: u64,
    rng: Rng,
    now: u64,
    end: u64,
    base: Instant,
    seq: u64,
    queue: BinaryHeap<Item>,
    model: Model,
    clients: Vec<Client>,
    reqs: BTreeMap<u64, Req>,
    next_req: u64,
    beliefs: Vec<Belief>,
    /// Where each belief would lapse, as last found (a hint for the next search).
    lapses: BTreeMap<usize, Instant>,
    /// The values written for each term (by a grant with its value, or a write on it).
    writes: BTreeMap<(LeaseName, Token), Vec<String>>,
    /// The newest term each value of a name was written for.
    value_terms: BTreeMap<(LeaseName, String), Token>,
    /// Unlocks whose release found the term gone: whether the backend had ended the term
    /// before the release, by request.
    gone_before: BTreeMap<u64, bool>,
    violations: Vec<Violation>,
    trace: Option<Vec<TraceLine>>,
    digest: u64,
    stats: Stats,
}

/// Runs the simulation of `seed` with `config`; `trace` records a readable trace.
///
/// ```
/// use simba_lease::sim::{run, Premises, SimConfig};
/// let config = SimConfig::for_seed(3, Premises::default());
/// let outcome = run(3, &config, false);
/// assert!(outcome.violations.is_empty(), "{}", outcome.report());
/// assert_eq!(outcome.digest, run(3, &config, false).digest);
/// ```
pub fn run(seed: u64, config: &SimConfig, trace: bool) -> Outcome {
    let timing = Timing {
        lease: config.lease,
        renew: config.renew,
        retry: config.renew / 2,
        drift: config.drift,
        lock_delay: Duration::ZERO,
    };
    let mut w = World {
        cfg: config,
        timing,
        timeout: config.renew.as_nanos() as u64,
        rng: Rng::new(seed),
        now: 0,
        end: config.duration.as_nanos() as u64,
        base: Instant::now(),
        seq: 0,
        queue: BinaryHeap::new(),
        model: Model::new(),
        clients: Vec::new(),
        reqs: BTreeMap::new(),
        next_req: 1,
        beliefs: Vec::new(),
        lapses: BTreeMap::new(),
        writes: BTreeMap::new(),
        value_terms: BTreeMap::new(),
        gone_before: BTreeMap::new(),
        violations: Vec::new(),
        trace: trace.then(Vec::new),
        digest: 0xCBF2_9CE4_8422_2325,
        stats: Stats::default(),
    };
    w.setup();
    w.run_loop();
    w.finish();
    let mut beliefs = std::mem::take(&mut w.beliefs);
    let grants = std::mem::take(&mut w.model.grants);
    for (at, id) in std::mem::take(&mut w.model.revivals) {
        w.violations.push(Violation {
            kind: Kind::SessionRevived,
            at,
            name: None,
            clients: Vec::new(),
            what: format!(
                "the backend renewed or granted to s{} after it had ended",
                session_no(&id)
            ),
        });
    }
    check::check(&mut beliefs, &grants, &mut w.violations, &mut w.stats);
    check::check_queues(&w.model.queue_log, &mut w.violations);
    check::check_jobs(&w.model.job_log, &mut w.violations);
    check::check_rw(&beliefs, &w.model.rw_log, &mut w.violations);
    check::check_delays(&w.model.delay_log, &mut w.violations);
    check::check_rw_delays(&w.model.rw_delay_log, &mut w.violations);
    w.stats.rw_delays = (
        (w.model.rw_delay_log.iter())
            .filter(|e| matches!(e.step, DelayStep::Expired { delay } if delay > 0))
            .count() as u64,
        w.model.rw_delay_refusals,
    );
    let semaphores: Vec<(String, u32)> = (0..config.semaphores)
        .map(|s| (format!("s{s}"), config.permits))
        .collect();
    check::check_permits(&beliefs, &semaphores, &mut w.violations);
    for g in &grants {
        w.mix(g.at ^ g.token.get() ^ session_no(&g.session).rotate_left(32));
    }
    for b in &beliefs {
        for (a, z) in &b.segments {
            w.mix(a ^ z.rotate_left(17) ^ b.token.get());
        }
    }
    w.violations.sort_by_key(|v| v.at);
    Outcome {
        seed,
        config: config.clone(),
        violations: w.violations,
        stats: w.stats,
        digest: w.digest,
        trace: w.trace.unwrap_or_default(),
        beliefs,
    }
}

impl World<'_> {
    fn mix(&mut self, x: u64) {
        self.digest = (self.digest ^ x).wrapping_mul(0x0100_0000_01B3);
    }

    fn tr(&mut self, client: Option<usize>, name: Option<&LeaseName>, f: impl FnOnce() -> String) {
        self.tr_at(client, name, true, f)
    }

    /// A trace line; `local` prefixes the client's local time (false for backend lines).
    fn tr_at(
        &mut self,
        client: Option<usize>,
        name: Option<&LeaseName>,
        local: bool,
        f: impl FnOnce() -> String,
    ) {
        if let Some(t) = self.trace.as_mut() {
            let at = self.now;
            let text = match client {
                Some(c) if local => {
                    let l = self.clients[c].rate as u128 * at as u128 / PPM as u128;
                    format!("c{c}@{} {}", secs(l as u64), f())
                }
                _ => f(),
            };
            t.push(TraceLine {
                at,
                client,
                name: name.cloned(),
                text,
            });
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Item {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn run_loop(&mut self) {
        while let Some(item) = self.queue.pop() {
            if item.at > self.end {
                self.queue.push(item);
                break;
            }
            self.now = item.at;
            self.stats.events += 1;
            let target = match &item.ev {
                Ev::Reply(id, _) | Ev::Timeout(id) => self.reqs.get(id).map(|r| r.client),
                ev => ev.client(),
            };
            if let Some(c) = target {
                let until = self.clients[c].paused_until;
                if self.now < until {
                    // A paused process: everything addressed to it waits, in order.
                    self.queue.push(Item { at: until, ..item });
                    continue;
                }
            }
            self.handle(item.ev);
        }
        self.now = self.end;
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake(c) => {
                if self.clients[c].wake_at == Some(self.now) {
                    self.clients[c].wake_at = None;
                    self.settle(c);
                }
            }
            Ev::Arrive(id) => self.arrive(id),
            Ev::Reply(id, r) => self.complete(id, r),
            Ev::Timeout(id) => {
                let after = Duration::from_nanos(self.timeout);
                self.complete(
                    id,
                    Err(Error::Timeout {
                        operation: "a simulated call",
                        after,
                        source: None,
                    }),
                )
            }
            Ev::Notify(c, n) => {
                let local = self.local(c, self.now);
                let (Notification::Released(name) | Notification::Acquired(name)) = &n else {
                    return;
                };
                let what = match n {
                    Notification::Released(_) => "released",
                    _ => "acquired",
                };
                self.tr(Some(c), Some(name), || format!("notified: {name} {what}"));
                // The router hands a notification only to sessions interested in its name.
                if let Some(core) = self.clients[c].core.as_mut() {
                    if core.interest().0.contains(name) {
                        core.notify(&n, local);
                    }
                }
                self.settle(c);
            }
            Ev::Act(c) => {
                self.act(c);
                self.schedule_act(c, self.now);
            }
            Ev::Reopen(c) => self.reopen(c),
            Ev::Callbacks(c) => {
                self.clients[c].delivery.woken();
                self.run_callbacks(c);
            }
            Ev::RetryReopen(c) => {
                if self.clients[c].reopening {
                    self.send_for(c, Op::Open, Chan::Work, None);
                }
            }
            Ev::Pause(c) => {
                let lease = self.cfg.lease.as_nanos() as u64;
                let d = self.rng.range(lease + lease / 10, 3 * lease);
                self.clients[c].paused_until = self.now + d;
                self.stats.pauses += 1;
                self.tr(Some(c), None, || {
                    format!("PAUSED for {} (longer than the lease)", secs(d))
                });
                self.schedule_pause(c, self.now + d);
            }
            Ev::Snapshot => {
                self.model.snapshot();
                self.tr(None, None, || "backend: replica snapshot taken".into());
            }
            Ev::FailOver => {
                let back = self.model.fail_over(self.now);
                self.tr(None, None, || {
                    format!(
                        "backend: FAILOVER to the lagging replica; tokens went back on {back:?}"
                    )
                });
            }
            Ev::ClockStep => {
                let lease = self.cfg.lease.as_nanos() as u64;
                let by = self.rng.range(lease / 2, 3 * lease / 2);
                self.model.step_clock(by);
                self.tr(None, None, || {
                    format!("backend: CLOCK STEP forward by {}", secs(by))
                });
            }
        }
    }

    /// After any input: runs due work, ticks the core, dispatches its outputs, checks beliefs
    /// and schedules the next wake-up.
    fn settle(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        self.lock_step(c);
        self.rw_step(c);
        self.job_step(c);
        if let Some(core) = self.clients[c].core.as_mut() {
            core.tick(local);
        }
        self.drain(c);
        self.check_beliefs(c);
        let cl = &self.clients[c];
        let Some(core) = cl.core.as_ref() else {
            return;
        };
        if !core.state().is_live() {
            let state = core.state();
            let flags = self.flags(c);
            if reopen::should_reopen(state, flags) {
                // The driver reopens on the work thread, after the queued work.
                self.clients[c].reopening = true;
                self.clients[c].work.push_back((Op::Open, None));
                self.drain(c);
            } else if !reopen::reopen_coming(flags) && !self.clients[c].reopen_due {
                // Expiry is terminal: the process opens a new session itself, later.
                self.tr(Some(c), None, || {
                    "expiry is terminal: a new session later".into()
                });
                self.clients[c].reopen_due = true;
                let lease = self.cfg.lease.as_nanos() as u64;
                let d = self.rng.range(10 * MS, lease);
                self.push(t + d, Ev::Reopen(c));
            }
            return;
        }
        let mut next = core.next_wake().map(|w| self.true_of(c, w));
        let lockers = cl.lockers.iter().filter_map(|l| match l.thread {
            Thread::Idle => Some(l.next),
            Thread::Holding(u) => Some(u),
            _ => None,
        });
        let rw = cl.rw.iter().filter_map(|r| match r.thread {
            Thread::Idle => Some(r.next),
            Thread::Holding(u) => Some(u),
            _ => None,
        });
        let jobbers = cl.jobbers.iter().filter_map(|j| match &j.thread {
            JobThread::Idle => Some(j.next),
            JobThread::Running(r) => Some(r.ends),
            _ => None,
        });
        for at in lockers.chain(rw).chain(jobbers) {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        if let Some(at) = next {
            let at = at.max(t + 1000);
            if self.clients[c].wake_at != Some(at) {
                self.clients[c].wake_at = Some(at);
                self.push(at, Ev::Wake(c));
            }
        }
    }

    fn drain(&mut self, c: usize) {
        while let Some(outs) = self.clients[c]
            .core
            .as_mut()
            .map(Core::take_outputs)
            .filter(|o| !o.is_empty())
        {
            let sid = self.clients[c].core.as_ref().map(|k| k.session().clone());
            for o in outs {
                let work = match driver::route(o) {
                    Route::KeepAlive => {
                        self.send(c, Op::KeepAlive, Chan::KeepAlive);
                        None
                    }
                    Route::Work(driver::Work::Run(Task::Attempt(h, n))) => {
                        // The work thread reads the candidate's value when it runs it.
                        Some(Op::Attempt(h, n, String::new()))
                    }
                    Route::Work(driver::Work::Run(Task::Owner(h, n))) => Some(Op::Owner(h, n)),
                    Route::Work(driver::Work::Run(Task::Members(h, g))) => Some(Op::Members(h, g)),
                    Route::Work(driver::Work::Release(n, t)) => Some(Op::Release(n, t)),
                    Route::Work(driver::Work::ReleaseRw(n, m, t)) => Some(Op::ReleaseRw(n, m, t)),
                    Route::Work(driver::Work::CloseBackend) => Some(Op::CloseBackend),
                    Route::Emit(h, e) => {
                        self.emitted(c, h, e);
                        None
                    }
                };
                if let Some(op) = work {
                    self.clients[c].work.push_back((op, sid.clone()));
                }
            }
        }
        self.run_callbacks(c);
        let cl = &mut self.clients[c];
        if !cl.work_busy {
            if let Some((op, sid)) = cl.work.pop_front() {
                cl.work_busy = true;
                match (op, sid) {
                    (Op::Attempt(h, name, _), Some(id)) => self.start_attempt(c, id, h, name),
                    (op, sid) => self.send_for(c, op, Chan::Work, sid),
                }
            }
        }
    }

    fn finish(&mut self) {
        let t = self.end;
        self.now = t;
        for c in 0..self.clients.len() {
            // Resume paused processes; every engine runs once more, then closes.
            self.clients[c].paused_until = 0;
            self.settle(c);
            if let Some(core) = self.clients[c].core.as_mut() {
                core.close();
            }
            self.drain(c);
            self.end_open_beliefs(c, "close at the end left terms believed");
            for (_, b) in std::mem::take(&mut self.clients[c].jobs_open) {
                self.close_belief(b, "run ended");
            }
        }
    }
}

/// The group every process may join and watch.
fn group() -> GroupName {
    GroupName::new("g").expect("valid name")
}

fn acquire_of(r: Rep) -> Acquire {
    match r {
        Rep::Acquire(a) => a,
        other => unreachable!("acquire reply {other:?}"),
    }
}
