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
}

impl Premises {
    /// Reads `SIMBA_SIM_PREMISE` (`token_reset`, `clock_step`, `stale_values`,
    /// comma-separated, or unset).
    pub fn from_env() -> Self {
        let v = std::env::var("SIMBA_SIM_PREMISE").unwrap_or_default();
        Premises {
            token_reset: v.contains("token_reset"),
            clock_step: v.contains("clock_step"),
            stale_values: v.contains("stale_values"),
        }
    }

    /// The premises as `SIMBA_SIM_PREMISE` spells them (empty when none).
    pub fn env_value(&self) -> String {
        let mut v = Vec::new();
        if self.token_reset {
            v.push("token_reset");
        }
        if self.clock_step {
            v.push("clock_step");
        }
        if self.stale_values {
            v.push("stale_values");
        }
        v.join(",")
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
                ..Faults::none()
            },
            "paused" => Faults {
                pauses_per_sec: 0.25,
                clock_drift: 0.01,
                ..Faults::none()
            },
            _ => all,
        };
        SimConfig {
            clients: 2 + rng.below(3) as usize,
            elections: 1 + rng.below(2) as usize,
            locks: 1 + rng.below(2) as usize,
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
