//! The simulated world: clients driving real engine [`Core`]s, a network, the model backend,
//! and one event queue on true (backend) time.

use super::check::{self, Belief, Kind, Violation};
use super::config::SimConfig;
use super::model::{session_no, Model};
use super::rng::Rng;
use crate::engine::core::{Core, HandleId, Task, Timing};
use crate::engine::driver::reopen::{self, AfterOpenError};
use crate::engine::driver::wait::{LockWait, Step};
use crate::engine::driver::{self, Route};
use crate::engine::{Event, LossReason};
use crate::error::{Error, Result};
use crate::spi::{Acquire, KeepAlive};
use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Term, Token};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;
const PPM: u64 = 1_000_000;

/// Formats true nanoseconds as seconds.
pub(crate) fn secs(ns: u64) -> String {
    format!("{}.{:06}s", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}

/// One line of a run's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceLine {
    /// True time (ns).
    pub at: u64,
    /// The client concerned, if any.
    pub client: Option<usize>,
    /// The lease concerned, if any.
    pub name: Option<LeaseName>,
    /// What happened.
    pub text: String,
}

/// Counters of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Queue events processed.
    pub events: u64,
    /// Requests sent.
    pub requests: u64,
    /// Terms believed (elections and locks).
    pub beliefs: u64,
    /// Hand-overs of a lease between sessions.
    pub handovers: u64,
    /// Smallest gap between one believer's end and the next believer's start (ns), if any.
    pub min_gap: Option<u64>,
    /// Longest overlap of two believers (ns); 0 unless the checker found a double believer.
    pub max_overlap: u64,
    /// Process pauses injected.
    pub pauses: u64,
    /// Messages lost.
    pub lost: u64,
}

/// The result of one simulated run.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The setup it ran.
    pub config: SimConfig,
    /// What the checker found (empty: the contract held).
    pub violations: Vec<Violation>,
    /// Counters.
    pub stats: Stats,
    /// A digest of the whole history (events, grants, beliefs): equal seeds give equal digests.
    pub digest: u64,
    /// The trace, when asked for.
    pub trace: Vec<TraceLine>,
    /// Every term some session believed.
    pub beliefs: Vec<Belief>,
}

impl Outcome {
    /// Whether the checker found any violation of `kind`.
    pub fn found(&self, kind: Kind) -> bool {
        self.violations.iter().any(|v| v.kind == kind)
    }

    /// The one-line command that replays this run.
    pub fn replay_command(&self) -> String {
        let p = self.config.premises.env_value();
        let premise = if p.is_empty() {
            String::new()
        } else {
            format!("SIMBA_SIM_PREMISE={p} ")
        };
        format!(
            "{premise}SIMBA_SIM_SEED={} cargo test --features sim --test sim replay -- --nocapture",
            self.seed
        )
    }

    /// A readable report: the violations, the part of the trace about them (clients and lease
    /// involved, up to the first violation), the beliefs on that lease, and the replay command.
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let c = &self.config;
        let _ = writeln!(
            s,
            "seed {} (mix {}, {} clients, {} election + {} lock names, lease {:?}, renew {:?}, drift {}, premises {:?}): {} violation(s)",
            self.seed,
            c.mix,
            c.clients,
            c.elections,
            c.locks,
            c.lease,
            c.renew,
            c.drift,
            c.premises,
            self.violations.len()
        );
        for v in self.violations.iter().take(5) {
            let _ = writeln!(s, "  VIOLATION {v}");
        }
        // Trace the first violation that names its clients (else every client).
        let first = self
            .violations
            .iter()
            .find(|v| !v.clients.is_empty())
            .or(self.violations.first());
        if let Some(v) = first {
            if !self.trace.is_empty() {
                let _ = writeln!(
                    s,
                    "trace of the clients and lease involved, 2 leases before to half a lease after (true time, client@local time):"
                );
                let lease = c.lease.as_nanos() as u64;
                let (from, until) = (v.at.saturating_sub(2 * lease), v.at + lease / 2);
                for l in &self.trace {
                    let client_ok =
                        v.clients.is_empty() || l.client.is_none_or(|x| v.clients.contains(&x));
                    let name_ok = match (&l.name, &v.name) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    };
                    if l.at >= from && l.at <= until && client_ok && name_ok {
                        let _ = writeln!(s, "  {:>12} {}", secs(l.at), l.text);
                    }
                }
            }
            if let Some(name) = &v.name {
                let _ = writeln!(s, "beliefs on {name} (true time):");
                for b in self.beliefs.iter().filter(|b| &b.name == name) {
                    let _ = writeln!(s, "  {b}");
                }
            }
        }
        let _ = writeln!(s, "replay: {}", self.replay_command());
        s
    }
}

#[derive(Clone, Debug)]
enum Op {
    Open,
    KeepAlive,
    Attempt(HandleId, LeaseName),
    Owner(HandleId, LeaseName),
    Members(HandleId, GroupName),
    Join(GroupName),
    Release(LeaseName, Token),
    CloseBackend,
    Lock(HandleId, LeaseName),
    Unlock(LeaseName, Token),
    Resign(LeaseName, Token),
    Close,
}

impl Op {
    fn name(&self) -> Option<&LeaseName> {
        match self {
            Op::Attempt(_, n)
            | Op::Owner(_, n)
            | Op::Release(n, _)
            | Op::Lock(_, n)
            | Op::Unlock(n, _)
            | Op::Resign(n, _) => Some(n),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chan {
    KeepAlive,
    Work,
    Caller,
}

#[derive(Clone, Debug)]
enum Rep {
    Open(SessionId, Duration),
    KeepAlive(KeepAlive),
    Acquire(Acquire),
    Owner(Option<Owner>),
    Members(Vec<Member>),
    /// A release: whether the term was still held.
    Released(bool),
    Done,
}

struct Req {
    client: usize,
    gen: u64,
    session: Option<SessionId>,
    op: Op,
    chan: Chan,
    sent: Instant,
    done: bool,
}

enum Ev {
    Wake(usize),
    Arrive(u64),
    Reply(u64, Result<Rep>),
    Timeout(u64),
    Notify(usize, LeaseName),
    Act(usize),
    Reopen(usize),
    RetryReopen(usize),
    Pause(usize),
    Snapshot,
    FailOver,
    ClockStep,
}

impl Ev {
    fn client(&self) -> Option<usize> {
        match self {
            Ev::Wake(c)
            | Ev::Notify(c, _)
            | Ev::Act(c)
            | Ev::Reopen(c)
            | Ev::RetryReopen(c)
            | Ev::Pause(c) => Some(*c),
            _ => None,
        }
    }
}

struct Item {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockPhase {
    Idle,
    Acquiring,
    Holding(u64),
    Releasing,
}

struct LockSt {
    name: LeaseName,
    handle: HandleId,
    phase: LockPhase,
    next: u64,
    seen: Option<u64>,
    /// The term while holding.
    term: Option<Term>,
    /// The term being unlocked (its release in flight).
    unlocking: Option<Term>,
    /// The lock call in progress (the driver's wait-and-retry policy), if any.
    wait: Option<LockWait>,
}

struct Cand {
    name: LeaseName,
    handle: Option<HandleId>,
    releasing: bool,
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
    /// A reopen failed for good: expiry is terminal (the process opens a new session).
    reopen_failed: bool,
    /// Terms whose unlock found them gone: each must be reported lost once.
    lost_on_unlock: Vec<Term>,
    ended: bool,
    paused_until: u64,
    wake_at: Option<u64>,
    work: VecDeque<(Op, Option<SessionId>)>,
    work_busy: bool,
    cands: Vec<Cand>,
    locks: Vec<LockSt>,
    /// Names this process observes (an observer handle per name, per session opened).
    observes: Vec<LeaseName>,
    /// The highest token each observer handle reported.
    observed: BTreeMap<HandleId, Token>,
    /// Whether this process joins the group `g` (and re-joins it after a reopen).
    member: bool,
    /// Whether this process watches the group `g`.
    watches: bool,
    next_handle: HandleId,
    open: BTreeMap<LeaseName, usize>,
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

    fn local_ns(&self, c: usize, t: u64) -> u64 {
        (self.clients[c].rate as u128 * t as u128 / PPM as u128) as u64
    }

    fn local(&self, c: usize, t: u64) -> Instant {
        self.base + Duration::from_nanos(self.local_ns(c, t))
    }

    /// The first true time at which client `c`'s clock reads `at` or later.
    fn true_of(&self, c: usize, at: Instant) -> u64 {
        let l = at.saturating_duration_since(self.base).as_nanos();
        let r = self.clients[c].rate as u128;
        (l * PPM as u128).div_ceil(r) as u64
    }

    fn setup(&mut self) {
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

    fn exp_delay(&mut self, per_sec: f64) -> Option<u64> {
        if per_sec <= 0.0 {
            return None;
        }
        // Uniform in (0, 2 / rate): the mean is one per 1 / rate seconds.
        let max = (2.0e9 / per_sec) as u64;
        Some(1 + self.rng.below(max))
    }

    fn schedule_act(&mut self, c: usize, from: u64) {
        if let Some(d) = self.exp_delay(self.cfg.faults.churn_per_sec) {
            if from + d < self.end {
                self.push(from + d, Ev::Act(c));
            }
        }
    }

    fn schedule_pause(&mut self, c: usize, from: u64) {
        if let Some(d) = self.exp_delay(self.cfg.faults.pauses_per_sec) {
            if from + d < self.end {
                self.push(from + d, Ev::Pause(c));
            }
        }
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
            Ev::Notify(c, name) => {
                let local = self.local(c, self.now);
                self.tr(Some(c), Some(&name), || {
                    format!("notified: {name} released")
                });
                // The router hands a notification only to sessions interested in its name.
                if let Some(core) = self.clients[c].core.as_mut() {
                    if core.interest().0.contains(&name) {
                        core.notify(&crate::spi::Notification::Released(name), local);
                    }
                }
                self.settle(c);
            }
            Ev::Act(c) => {
                self.act(c);
                self.schedule_act(c, self.now);
            }
            Ev::Reopen(c) => self.reopen(c),
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
                let back = self.model.fail_over();
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

    // ---- network ------------------------------------------------------------------------

    fn delay(&mut self) -> u64 {
        if self.rng.chance(self.cfg.faults.slow) {
            self.rng.range(MS, self.timeout + self.timeout / 2)
        } else {
            self.rng.range(MS / 2, 5 * MS)
        }
    }

    /// Sends `op` for the client's current session.
    fn send(&mut self, c: usize, op: Op, chan: Chan) {
        let session = self.clients[c].core.as_ref().map(|k| k.session().clone());
        self.send_for(c, op, chan, session)
    }

    /// Sends `op` for `session` (the session an engine output was made for).
    fn send_for(&mut self, c: usize, op: Op, chan: Chan, session: Option<SessionId>) {
        let id = self.next_req;
        self.next_req += 1;
        self.stats.requests += 1;
        let gen = self.clients[c].gen;
        let sent = self.local(c, self.now);
        let name = op.name().cloned();
        let sno = session.as_ref().map_or(0, session_no);
        self.tr(Some(c), name.as_ref(), || format!("s{sno} -> #{id} {op:?}"));
        self.reqs.insert(
            id,
            Req {
                client: c,
                gen,
                session,
                op,
                chan,
                sent,
                done: false,
            },
        );
        if self.rng.chance(self.cfg.faults.lost_request) {
            self.stats.lost += 1;
            self.tr(Some(c), name.as_ref(), || format!("#{id} request LOST"));
        } else {
            let d = self.delay();
            self.push(self.now + d, Ev::Arrive(id));
        }
        self.push(self.now + self.timeout, Ev::Timeout(id));
    }

    fn arrive(&mut self, id: u64) {
        let t = self.now;
        let lease = self.cfg.lease;
        let (op, session, client) = {
            let r = &self.reqs[&id];
            (r.op.clone(), r.session.clone(), r.client)
        };
        let sid = || session.clone().expect("a session request has a session");
        let mut freed = Vec::new();
        let reply: Result<Rep> = match &op {
            Op::Open => {
                let (id, rem) = self.model.open_session(t, lease);
                Ok(Rep::Open(id, rem))
            }
            Op::KeepAlive => {
                let (r, f) = self.model.keep_alive(t, &sid(), lease);
                freed = f;
                r.map(Rep::KeepAlive)
            }
            Op::Owner(_, n) => Ok(Rep::Owner(self.model.owner(t, n))),
            Op::Members(_, g) => Ok(Rep::Members(self.model.members(t, g))),
            Op::Join(g) => self.model.join(t, &sid(), g).map(|()| Rep::Done),
            Op::Attempt(_, n) => {
                let value = candidate_value(&sid());
                let r = self.model.acquire_with_value(t, &sid(), n, &value);
                r.map(Rep::Acquire)
            }
            Op::Lock(_, n) => self.model.acquire(t, &sid(), n).map(Rep::Acquire),
            Op::Release(n, tok) | Op::Unlock(n, tok) | Op::Resign(n, tok) => {
                let held = self.model.release(&sid(), n, *tok);
                if held {
                    freed.push(n.clone());
                }
                Ok(Rep::Released(held))
            }
            Op::CloseBackend | Op::Close => {
                freed = self.model.close_session(&sid());
                Ok(Rep::Done)
            }
        };
        let name = op.name().cloned();
        self.tr_at(Some(client), name.as_ref(), false, || {
            let who = session
                .as_ref()
                .map_or(String::from("-"), |s| format!("s{}", session_no(s)));
            format!(
                "backend <- #{id} {op:?} from c{client}/{who} => {}",
                show(&reply)
            )
        });
        if self.rng.chance(self.cfg.faults.lost_reply) {
            self.stats.lost += 1;
            self.tr_at(Some(client), name.as_ref(), false, || {
                format!("#{id} reply LOST")
            });
        } else {
            let d = self.delay();
            self.push(t + d, Ev::Reply(id, reply));
        }
        for n in freed {
            for c in 0..self.clients.len() {
                if self.rng.chance(self.cfg.faults.lost_notification) {
                    continue;
                }
                let d = self.delay();
                self.push(t + d, Ev::Notify(c, n.clone()));
            }
        }
    }

    fn complete(&mut self, id: u64, reply: Result<Rep>) {
        let Some(req) = self.reqs.get_mut(&id) else {
            return;
        };
        if req.done {
            return;
        }
        req.done = true;
        let (c, gen, op, chan, sent) = (req.client, req.gen, req.op.clone(), req.chan, req.sent);
        let for_session = req.session.clone();
        let name = op.name().cloned();
        self.tr(Some(c), name.as_ref(), || {
            format!("<- #{id} {}", show(&reply))
        });
        if gen != self.clients[c].gen {
            return; // a call of a process that restarted since
        }
        let t = self.now;
        let local = self.local(c, t);
        let lease = self.cfg.lease.as_nanos() as u64;
        // The driver's `accepts`: a reply for an earlier session (before a reopen) does not
        // reach the current engine.
        let current = self.clients[c].core.as_ref().map(|k| k.session().clone());
        let stale = match (&for_session, &current) {
            (Some(sent_for), Some(current)) => !driver::accepts(current, sent_for),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if stale && !matches!(op, Op::Open) {
            if let Op::Lock(h, n) = &op {
                // As `with_session` answers the lock caller: its session expired.
                let expired = Err(Error::SessionExpired {
                    session: for_session.clone().expect("stale replies have a session"),
                });
                self.lock_reply(c, *h, n, expired);
            }
            if let Op::Unlock(n, _) = &op {
                if let Some(l) = self.clients[c].locks.iter_mut().find(|l| &l.name == n) {
                    l.phase = LockPhase::Idle;
                    l.unlocking = None;
                    l.next = t;
                }
            }
            if let Op::Resign(n, _) = &op {
                if let Some(cand) = self.clients[c].cands.iter_mut().find(|k| &k.name == n) {
                    cand.releasing = false;
                }
            }
            if chan == Chan::Work {
                self.clients[c].work_busy = false;
            }
            self.settle(c);
            return;
        }
        match op {
            Op::Open if chan == Chan::Work => match reply {
                Ok(Rep::Open(sid, rem)) => {
                    self.clients[c].work_busy = false;
                    self.reopened(c, sid, sent, rem);
                    return;
                }
                Ok(other) => unreachable!("open reply {other:?}"),
                Err(e) => {
                    self.clients[c].work_busy = false;
                    if reopen::after_open_error(&e) == AfterOpenError::Terminal {
                        // Expiry is terminal: the process opens a new session later.
                        self.tr(Some(c), None, || "reopen failed for good".into());
                        let cl = &mut self.clients[c];
                        cl.reopening = false;
                        cl.reopen_failed = true;
                        self.settle(c);
                        return;
                    }
                    // The work thread sleeps a retry interval (plus jitter), then tries again.
                    let d = self.retry_delay();
                    self.push(t + d, Ev::RetryReopen(c));
                    return;
                }
            },
            Op::Open => {
                self.clients[c].opening = false;
                match reply {
                    Ok(Rep::Open(sid, rem)) => self.start_session(c, sid, sent, rem),
                    _ => {
                        let d = self.timing.retry.as_nanos() as u64;
                        self.push(t + d, Ev::Reopen(c));
                    }
                }
            }
            Op::KeepAlive => {
                let r = reply.map(|r| match r {
                    Rep::KeepAlive(k) => k,
                    other => unreachable!("keep-alive reply {other:?}"),
                });
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_keep_alive(sent, local, r);
                }
            }
            Op::Attempt(h, n) => {
                let r = reply.map(acquire_of);
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_attempt(h, &n, sent, local, r);
                }
            }
            Op::Members(h, _) => {
                let r = reply.map(|r| match r {
                    Rep::Members(m) => m,
                    other => unreachable!("members reply {other:?}"),
                });
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_members(h, local, r);
                }
            }
            Op::Join(_) => {}
            Op::Owner(h, _) => {
                let r = reply.map(|r| match r {
                    Rep::Owner(o) => o,
                    other => unreachable!("owner reply {other:?}"),
                });
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_owner(h, local, r);
                }
            }
            Op::Release(n, _) | Op::Resign(n, _) => {
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_released(&n, reply.is_ok());
                }
                if let Some(cand) = self.clients[c].cands.iter_mut().find(|k| k.name == n) {
                    cand.releasing = false;
                }
            }
            Op::CloseBackend | Op::Close => {}
            Op::Lock(h, n) => {
                let r = reply.map(acquire_of);
                let Some(core) = self.clients[c].core.as_mut() else {
                    return;
                };
                let r = core.on_lock_acquire(h, &n, sent, local, r);
                self.lock_reply(c, h, &n, r);
            }
            Op::Unlock(n, _) => {
                let held = matches!(reply, Ok(Rep::Released(true)));
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_released(&n, reply.is_ok());
                }
                let pause = self.rng.range(10 * MS, lease);
                let li = self.clients[c].locks.iter().position(|l| l.name == n);
                if let Some(i) = li {
                    let l = &mut self.clients[c].locks[i];
                    l.phase = LockPhase::Idle;
                    l.next = t + pause;
                    let term = l.unlocking.take();
                    let h = l.handle;
                    // The release found the term gone: the unlock reports it, as `unlock`
                    // does (`LockLost{Missing}`, once).
                    if let (false, Ok(_), Some(term)) = (held, &reply, term) {
                        if let Some(core) = self.clients[c].core.as_mut() {
                            let _ = core.lost_on_unlock(h, term.clone());
                            self.clients[c].lost_on_unlock.push(term);
                        }
                    }
                }
            }
        }
        if chan == Chan::Work {
            self.clients[c].work_busy = false;
        }
        self.settle(c);
    }

    fn retry_delay(&mut self) -> u64 {
        let rng = &mut self.rng;
        let jitter = |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
        driver::retry_delay(self.timing.retry, jitter).as_nanos() as u64
    }

    /// What the driver's decisions know of client `c`'s session besides its core.
    fn flags(&self, c: usize) -> reopen::Flags {
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
    fn lock_reply(&mut self, c: usize, h: HandleId, n: &LeaseName, r: Result<Acquire>) {
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

    fn reopen(&mut self, c: usize) {
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

    fn start_session(&mut self, c: usize, id: SessionId, sent: Instant, rem: Duration) {
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
    fn reopened(&mut self, c: usize, id: SessionId, sent: Instant, rem: Duration) {
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

    fn act(&mut self, c: usize) {
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

    fn lock_step(&mut self, c: usize) {
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

    /// After any input: runs due work, ticks the core, dispatches its outputs, checks beliefs
    /// and schedules the next wake-up.
    fn settle(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        self.lock_step(c);
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
        for l in &cl.locks {
            let at = match l.phase {
                LockPhase::Idle => Some(l.next),
                LockPhase::Holding(u) => Some(u),
                _ => None,
            };
            if let Some(at) = at {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
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
                    Route::Work(driver::Work::Run(Task::Attempt(h, n))) => Some(Op::Attempt(h, n)),
                    Route::Work(driver::Work::Run(Task::Owner(h, n))) => Some(Op::Owner(h, n)),
                    Route::Work(driver::Work::Run(Task::Members(h, g))) => Some(Op::Members(h, g)),
                    Route::Work(driver::Work::Release(n, t)) => Some(Op::Release(n, t)),
                    Route::Work(driver::Work::CloseBackend) => Some(Op::CloseBackend),
                    Route::Emit(h, e) => {
                        self.on_event(c, h, e);
                        None
                    }
                };
                if let Some(op) = work {
                    self.clients[c].work.push_back((op, sid.clone()));
                }
            }
        }
        let cl = &mut self.clients[c];
        if !cl.work_busy {
            if let Some((op, sid)) = cl.work.pop_front() {
                cl.work_busy = true;
                self.send_for(c, op, Chan::Work, sid);
            }
        }
    }

    fn on_event(&mut self, c: usize, h: Option<HandleId>, e: Event) {
        let name = match &e {
            Event::Elected { term }
            | Event::Revoked { term, .. }
            | Event::LockLost { term, .. } => Some(term.name.clone()),
            Event::LeaderChanged { name, .. } => Some(name.clone()),
            _ => None,
        };
        self.tr(Some(c), name.as_ref(), || {
            format!("EVENT {}", show_event(&e))
        });
        let code = match &e {
            Event::Elected { term } => 1 ^ term.token.get() << 8,
            Event::Revoked { term, .. } => 2 ^ term.token.get() << 8,
            Event::LockLost { term, .. } => 3 ^ term.token.get() << 8,
            Event::SessionExpired { .. } => 4,
            Event::Closed { .. } => 5,
            _ => 6,
        };
        self.mix(self.now ^ code.rotate_left(20) ^ c as u64);
        // After expiry only the close acknowledgment (`close()` on an expired session) may come.
        if self.clients[c].ended && !matches!(e, Event::Closed { .. }) {
            self.violation(
                Kind::EventAfterExpiry,
                c,
                name.as_ref(),
                format!("{} after the session ended", show_event(&e)),
            );
        }
        if let Event::Revoked { reason, .. } | Event::LockLost { reason, .. } = &e {
            let own = matches!(reason, LossReason::Resigned | LossReason::Closed);
            if self.cfg.hide_losses > 0.0 && !own && self.rng.chance(self.cfg.hide_losses) {
                self.tr(Some(c), name.as_ref(), || {
                    "(self-test: loss event hidden)".into()
                });
                return;
            }
        }
        match e {
            Event::LeaderChanged {
                name,
                owner: Some(o),
            } => {
                let h = h.unwrap_or(0);
                let last = self.clients[c].observed.get(&h).copied();
                if last.is_some_and(|l| o.token < l) {
                    let what = format!(
                        "an observer of {name} saw token {} after token {}",
                        o.token,
                        last.expect("checked")
                    );
                    self.violation(Kind::TokenRegression, c, Some(&name), what);
                }
                if last.is_none_or(|l| o.token > l) {
                    self.clients[c].observed.insert(h, o.token);
                }
                if !o.value.is_empty() && o.value != candidate_value(&o.session) {
                    let what = format!(
                        "an observer of {name} saw token {} of {} with the value {:?}",
                        o.token, o.session, o.value
                    );
                    self.violation(Kind::ForeignValue, c, Some(&name), what);
                }
            }
            Event::Elected { term } => {
                self.open_belief(c, h.unwrap_or(0), &term.name, term.token, false);
            }
            Event::Revoked { term, reason } | Event::LockLost { term, reason } => {
                match self.clients[c].open.get(&term.name).copied() {
                    Some(b) if self.beliefs[b].token == term.token => {
                        if h != Some(self.beliefs[b].handle) {
                            let what = format!(
                                "the loss of token {} went to handle {h:?}, not to its holder {}",
                                term.token, self.beliefs[b].handle
                            );
                            self.violation(Kind::SilentLoss, c, Some(&term.name), what);
                        }
                        self.clients[c].open.remove(&term.name);
                        self.close_belief(b, reason_str(reason));
                    }
                    _ if reason == LossReason::Missing
                        && self.clients[c]
                            .lost_on_unlock
                            .iter()
                            .any(|t| t.token == term.token && t.name == term.name) =>
                    {
                        // An unlock whose release found the term gone reports it, once.
                        self.clients[c]
                            .lost_on_unlock
                            .retain(|t| !(t.token == term.token && t.name == term.name));
                    }
                    _ => {
                        // A loss of a term never announced (or reported twice): report it.
                        self.violation(
                            Kind::SilentLoss,
                            c,
                            Some(&term.name),
                            format!("loss of token {} that was not believed", term.token),
                        );
                    }
                }
            }
            Event::SessionExpired { .. } | Event::Closed { .. } => {
                self.clients[c].ended = true;
                if !self.clients[c].open.is_empty() {
                    self.violation(
                        Kind::TermNotEnded,
                        c,
                        None,
                        "the session ended before reporting the loss of its terms".into(),
                    );
                }
            }
            _ => {}
        }
    }

    fn violation(&mut self, kind: Kind, c: usize, name: Option<&LeaseName>, what: String) {
        let what = format!("c{c}: {what}");
        self.tr(Some(c), name, || format!("VIOLATION {kind:?}: {what}"));
        self.violations.push(Violation {
            kind,
            at: self.now,
            name: name.cloned(),
            clients: vec![c],
            what,
        });
    }

    fn open_belief(
        &mut self,
        c: usize,
        handle: HandleId,
        name: &LeaseName,
        token: Token,
        lock: bool,
    ) {
        if self.clients[c].open.contains_key(name) {
            self.violation(
                Kind::TermNotEnded,
                c,
                Some(name),
                "a second term began before the first was reported lost".into(),
            );
        }
        let session = self.clients[c]
            .core
            .as_ref()
            .map(|k| k.session().clone())
            .expect("a believer has a session");
        self.stats.beliefs += 1;
        self.beliefs.push(Belief {
            client: c,
            session,
            name: name.clone(),
            token,
            lock,
            handle,
            start: self.now,
            end: None,
            segments: Vec::new(),
            current: Some((self.now, self.now)),
        });
        self.clients[c]
            .open
            .insert(name.clone(), self.beliefs.len() - 1);
    }

    /// Reports a violation if client `c` still believes terms, and ends those beliefs.
    fn end_open_beliefs(&mut self, c: usize, what: &str) {
        if self.clients[c].open.is_empty() {
            return;
        }
        self.violation(Kind::TermNotEnded, c, None, what.into());
        let open = std::mem::take(&mut self.clients[c].open);
        for (_, b) in open {
            self.close_belief(b, "never reported");
        }
    }

    fn close_belief(&mut self, b: usize, how: &'static str) {
        let now = self.now;
        let bl = &mut self.beliefs[b];
        bl.cut(now);
        bl.current = None;
        bl.end = Some((now, how));
    }

    /// Every term still believed must be valid now (the engine ticked and dispatched): a term
    /// whose `is_valid` is false but whose loss was not reported is a silent loss. Records when
    /// each belief will lapse if nothing else happens.
    fn check_beliefs(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        let open: Vec<(LeaseName, usize)> = self.clients[c]
            .open
            .iter()
            .map(|(n, b)| (n.clone(), *b))
            .collect();
        for (name, b) in open {
            let token = self.beliefs[b].token;
            let cl = &self.clients[c];
            let Some(core) = cl.core.as_ref() else {
                continue;
            };
            if !core.is_valid(&name, token, local) {
                self.violation(
                    Kind::SilentLoss,
                    c,
                    Some(&name),
                    format!("token {token} is no longer valid but its loss was not reported"),
                );
                self.clients[c].open.remove(&name);
                self.close_belief(b, "silently lost");
                continue;
            }
            // is_valid is monotone in time for a fixed state: find where it turns false.
            let (mut lo, mut hi) = (local, core.deadline());
            while hi.duration_since(lo) > Duration::from_nanos(1) {
                let mid = lo + hi.duration_since(lo) / 2;
                if core.is_valid(&name, token, mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let until = self.true_of(c, hi).max(t);
            let bl = &mut self.beliefs[b];
            bl.cut(t);
            bl.current = Some((t, until));
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

fn reason_str(r: LossReason) -> &'static str {
    match r {
        LossReason::SessionExpired => "lost: session expired",
        LossReason::Expired => "lost: term deadline",
        LossReason::Missing => "lost: missing from keep-alive",
        LossReason::Resigned => "resigned",
        LossReason::Closed => "closed",
    }
}

fn show(r: &Result<Rep>) -> String {
    match r {
        Ok(Rep::Open(id, rem)) => format!("session s{} for {rem:?}", session_no(id)),
        Ok(Rep::Released(held)) => format!("released (was held: {held})"),
        Ok(Rep::KeepAlive(k)) => {
            let l: Vec<String> = k
                .leases
                .iter()
                .map(|h| format!("{}:{}", h.name, h.token))
                .collect();
            format!("kept alive {:?}, holds [{}]", k.remaining, l.join(" "))
        }
        Ok(Rep::Acquire(Acquire::Acquired(t))) => {
            format!(
                "Acquired {} token {} ({:?} left)",
                t.name, t.token, t.remaining
            )
        }
        Ok(Rep::Acquire(Acquire::Held(o))) => {
            format!("Held by s{} token {}", session_no(&o.session), o.token)
        }
        Ok(Rep::Owner(Some(o))) => {
            format!("owner s{} token {}", session_no(&o.session), o.token)
        }
        Ok(Rep::Owner(None)) => "no owner".into(),
        Ok(Rep::Members(m)) => {
            let m: Vec<String> = m
                .iter()
                .map(|m| format!("s{}", session_no(&m.session)))
                .collect();
            format!("members [{}]", m.join(" "))
        }
        Ok(Rep::Done) => "ok".into(),
        Err(Error::SessionExpired { .. }) => "ERR session expired".into(),
        Err(Error::Timeout { .. }) => "TIMEOUT".into(),
        Err(e) => format!("ERR {e}"),
    }
}

fn show_event(e: &Event) -> String {
    match e {
        Event::Elected { term } => format!("Elected {} token {}", term.name, term.token),
        Event::Revoked { term, reason } => {
            format!("Revoked {} token {} ({reason:?})", term.name, term.token)
        }
        Event::LockLost { term, reason } => {
            format!("LockLost {} token {} ({reason:?})", term.name, term.token)
        }
        Event::SessionExpired { session } => format!("SessionExpired s{}", session_no(session)),
        Event::Closed { session } => format!("Closed s{}", session_no(session)),
        Event::Jeopardy { session } => format!("Jeopardy s{}", session_no(session)),
        Event::Recovered { session } => format!("Recovered s{}", session_no(session)),
        Event::LeaderChanged { name, owner } => match owner {
            Some(o) => format!(
                "LeaderChanged {name}: s{} token {}",
                session_no(&o.session),
                o.token
            ),
            None => format!("LeaderChanged {name}: nobody"),
        },
        Event::MembersChanged { group, members, .. } => {
            let m: Vec<String> = members
                .iter()
                .map(|m| format!("s{}", session_no(&m.session)))
                .collect();
            format!("MembersChanged {group}: [{}]", m.join(" "))
        }
        other => format!("{other:?}"),
    }
}

/// The term value a candidate of session `id` gives its terms: its session number, or none
/// for odd ones (so terms with and without a value follow each other).
fn candidate_value(id: &SessionId) -> String {
    let n = super::model::session_no(id);
    if n.is_multiple_of(2) {
        format!("s{n}")
    } else {
        String::new()
    }
}
