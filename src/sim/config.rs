//! What a simulated run contains: sessions, lease names, timing, faults and premises.

use super::rng::Rng;
use std::time::Duration;

/// Fault probabilities. Every draw comes from the run's one seeded [`Rng`].
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Probability that a request is lost (the operation did not happen; the caller times out).
    pub lost_request: f64,
    /// Probability that a reply is lost (the operation happened; the caller times out).
    pub lost_reply: f64,
    /// Probability that a message is slow: delayed up to 1.5 × the call timeout, so an
    /// operation may run on the backend after its caller gave up.
    pub slow: f64,
    /// Probability that a release notification is lost.
    pub lost_notification: f64,
    /// Expected process pauses per client and virtual second; each lasts 1–3 leases, and the
    /// client then resumes as if nothing happened.
    pub pauses_per_sec: f64,
    /// Each client's clock runs at a rate `1 ± d` with `d` up to this (0: exact clocks).
    /// Up to the engine's drift bound keeps the contract's premise; more breaks it on purpose.
    pub clock_drift: f64,
    /// Expected workload actions (resign, re-run, close) per client and virtual second.
    pub churn_per_sec: f64,
    /// Share of events a process's own session callback blocks on, for up to a lease (a
    /// callback that makes a backend call, say): it must delay only itself.
    pub slow_callbacks: f64,
}

impl Faults {
    /// No faults at all (exact clocks, instant and reliable network).
    pub fn none() -> Self {
        Faults {
            lost_request: 0.0,
            lost_reply: 0.0,
            slow: 0.0,
            lost_notification: 0.0,
            pauses_per_sec: 0.0,
            clock_drift: 0.0,
            churn_per_sec: 0.5,
            slow_callbacks: 0.0,
        }
    }

    /// Every fault at once.
    pub fn all() -> Self {
        Faults {
            lost_request: 0.03,
            lost_reply: 0.03,
            slow: 0.05,
            lost_notification: 0.2,
            pauses_per_sec: 0.1,
            clock_drift: 0.01,
            churn_per_sec: 0.7,
            slow_callbacks: 0.2,
        }
    }
}

/// Premises: broken assumptions the checker must detect. Off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Premises {
    /// The backend loses its recent writes (an asynchronous replica is promoted): tokens go back.
    pub token_reset: bool,
    /// The backend's clock jumps forward (an NTP step, a VM migration).
    pub clock_step: bool,
    /// The backend keeps a term's value into the next term (a value not bound to its term).
    pub stale_values: bool,
    /// The backend serves a fair lock's newest waiter first (a queue that is not FIFO).
    pub unfair_queue: bool,
    /// One process counts one permit more than the others (`semaphore(name, n + 1)`).
    pub permit_miscount: bool,
    /// The backend frees a finished job's name at once (it ignores `at_least`).
    pub lost_windows: bool,
    /// The backend answers "not held" to every third release of a term it holds (and keeps
    /// the term): an unlock then reports a loss that never happened.
    pub false_misses: bool,
    /// The backend grants a read-write lock's write while readers hold it (readers do not
    /// keep a writer out).
    pub shared_writers: bool,
    /// The backend ignores leases' lock-delays: a lease is free at once after its holder's
    /// expiry.
    pub lost_delays: bool,
    /// The backend ignores read-write terms' lock-delays: a term that ended with its
    /// session's expiry blocks nothing.
    pub lost_rw_delays: bool,
    /// The engine's delivery runs every callback of a session on one queue (as one serial
    /// delivery job per session once did): a callback that blocks holds back the others'
    /// events, losses included.
    pub serial_delivery: bool,
}

/// Every premise, as `SIMBA_SIM_PREMISE` spells it.
const PREMISES: [&str; 11] = [
    "token_reset",
    "clock_step",
    "stale_values",
    "unfair_queue",
    "permit_miscount",
    "lost_windows",
    "false_misses",
    "shared_writers",
    "lost_delays",
    "lost_rw_delays",
    "serial_delivery",
];

impl Premises {
    /// Reads `SIMBA_SIM_PREMISE` (comma-separated: `token_reset`, `clock_step`,
    /// `stale_values`, `unfair_queue`, `permit_miscount`, `lost_windows`, `false_misses`,
    /// `shared_writers`, `lost_delays`, `lost_rw_delays`, `serial_delivery`; or unset).
    pub fn from_env() -> Self {
        Self::parse(&std::env::var("SIMBA_SIM_PREMISE").unwrap_or_default())
    }

    /// The premises named in `v` (comma-separated).
    ///
    /// ```
    /// use simba_lease::sim::Premises;
    /// let p = Premises::parse("unfair_queue,lost_windows");
    /// assert!(p.unfair_queue && p.lost_windows && !p.token_reset);
    /// assert_eq!(p.env_value(), "unfair_queue,lost_windows");
    /// ```
    pub fn parse(v: &str) -> Self {
        let mut p = Premises::default();
        for name in v.split(',').map(str::trim) {
            if let Some(flag) = p.flag(name) {
                *flag = true;
            }
        }
        p
    }

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "token_reset" => &mut self.token_reset,
            "clock_step" => &mut self.clock_step,
            "stale_values" => &mut self.stale_values,
            "unfair_queue" => &mut self.unfair_queue,
            "permit_miscount" => &mut self.permit_miscount,
            "lost_windows" => &mut self.lost_windows,
            "false_misses" => &mut self.false_misses,
            "shared_writers" => &mut self.shared_writers,
            "lost_delays" => &mut self.lost_delays,
            "lost_rw_delays" => &mut self.lost_rw_delays,
            "serial_delivery" => &mut self.serial_delivery,
            _ => return None,
        })
    }

    /// The premises as `SIMBA_SIM_PREMISE` spells them (empty when none).
    pub fn env_value(&self) -> String {
        let mut copy = *self;
        let on: Vec<&str> = PREMISES
            .into_iter()
            .filter(|n| copy.flag(n).is_some_and(|f| *f))
            .collect();
        on.join(",")
    }
}

/// A simulated run's setup.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Client processes (each has one session at a time).
    pub clients: usize,
    /// Lease names contested by election candidates (`e0`, `e1`, …).
    pub elections: usize,
    /// Lease names contested by locks (`l0`, `l1`, …).
    pub locks: usize,
    /// Lease names contested by fair locks, through the backend's queue (`f0`, …).
    pub fair_locks: usize,
    /// Semaphores (`s0`, …), of [`SimConfig::permits`] permits each.
    pub semaphores: usize,
    /// The permits of every semaphore, as every process counts them (but one under the
    /// premise `permit_miscount`).
    pub permits: u32,
    /// Run-once job names (`j0`, …).
    pub jobs: usize,
    /// Read-write lock names (`rw0`, …).
    pub rw_locks: usize,
    /// A job claim's `at_most`.
    pub at_most: Duration,
    /// A finished job's `at_least`.
    pub at_least: Duration,
    /// Virtual time the workload runs.
    pub duration: Duration,
    /// Lease duration of every session.
    pub lease: Duration,
    /// Keep-alive interval (also the call timeout, as the JDBC statement timeout).
    pub renew: Duration,
    /// The engine's clock-rate drift bound.
    pub drift: f64,
    /// Fault probabilities.
    pub faults: Faults,
    /// Premises (off by default).
    pub premises: Premises,
    /// The name of the fault mix, for reports.
    pub mix: &'static str,
    /// Checker self-test: the simulation hides this fraction of the engine's loss events
    /// (`Revoked`/`LockLost` other than resign and close) from the history, as an engine that
    /// forgot to report would; the checker must then report silent losses. 0 normally.
    pub hide_losses: f64,
}

/// The fault mixes a seed picks from.
pub const MIXES: [&str; 5] = ["calm", "lossy", "slow", "paused", "all"];

impl SimConfig {
    /// The setup of `seed`: the seed picks the fault mix (in turn over [`MIXES`]), the number
    /// of clients and names; the premises are as given.
    ///
    /// ```
    /// use simba_lease::sim::{Premises, SimConfig};
    /// let a = SimConfig::for_seed(42, Premises::default());
    /// assert_eq!(a, SimConfig::for_seed(42, Premises::default()));
    /// ```
    pub fn for_seed(seed: u64, premises: Premises) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x00C0_FFEE);
        let mix = MIXES[(seed % MIXES.len() as u64) as usize];
        let all = Faults::all();
        let faults = match mix {
            "calm" => Faults {
                clock_drift: 0.01,
                ..Faults::none()
            },
            "lossy" => Faults {
                lost_request: 0.05,
                lost_reply: 0.05,
                lost_notification: 0.3,
                clock_drift: 0.01,
                ..Faults::none()
            },
            "slow" => Faults {
                slow: 0.1,
                clock_drift: 0.01,
                churn_per_sec: 0.7,
                slow_callbacks: 0.3,
                ..Faults::none()
            },
            "paused" => Faults {
                pauses_per_sec: 0.25,
                clock_drift: 0.01,
                ..Faults::none()
            },
            _ => all,
        };
        let clients = 2 + rng.below(3) as usize;
        let at_most = 500 + 500 * rng.below(3);
        SimConfig {
            clients,
            elections: 1 + rng.below(2) as usize,
            locks: 1 + rng.below(2) as usize,
            fair_locks: 1,
            semaphores: 1,
            permits: 1 + rng.below(clients as u64 - 1) as u32,
            jobs: 1,
            rw_locks: 1,
            at_most: Duration::from_millis(at_most),
            at_least: Duration::from_millis(at_most * 3 / 4),
            duration: Duration::from_secs(12),
            lease: Duration::from_secs(1),
            renew: Duration::from_millis(300),
            drift: 0.01,
            faults,
            premises,
            mix,
            hide_losses: 0.0,
        }
    }
}
