//! What a run produces and how it reads: the trace lines, the counters, the [`Outcome`] with
//! its report and replay command, and the readable forms of replies and events.

use super::network::Rep;
use crate::engine::{Event, LossReason};
use crate::error::{Error, Result};
use crate::sim::check::{Belief, Kind, Violation};
use crate::sim::config::SimConfig;
use crate::sim::model::session_no;
use crate::spi::{Acquire, JobClaim, Queued, RwAcquire};
use crate::types::LeaseName;

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
    /// Read-write lock terms taken: reads, writes.
    pub rw_terms: (u64, u64),
    /// Read-write lock write calls that gave up (their deadline passed, or they failed),
    /// one-time tries not counted.
    pub writes_given_up: u64,
    /// The longest a write call waited for its term (true ns): writer preference's liveness
    /// figure (a writer that waits keeps new readers out, so it does not starve).
    pub longest_write_wait: u64,
    /// Read-write terms that ended with their session's expiry and kept their name blocked
    /// for a lock-delay, and attempts the backend refused because of such a term.
    pub rw_delays: (u64, u64),
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

pub(super) fn reason_str(r: LossReason) -> &'static str {
    match r {
        LossReason::SessionExpired => "lost: session expired",
        LossReason::Expired => "lost: term deadline",
        LossReason::Missing => "lost: missing from keep-alive",
        LossReason::Resigned => "resigned",
        LossReason::Closed => "closed",
    }
}

pub(super) fn show(r: &Result<Rep>) -> String {
    match r {
        Ok(Rep::Open(id, rem)) => format!("session s{} for {rem:?}", session_no(id)),
        Ok(Rep::Released(held)) => format!("released (was held: {held})"),
        Ok(Rep::KeepAlive(k)) => {
            let l: Vec<String> = k
                .leases
                .iter()
                .map(|h| format!("{}:{}", h.name, h.token))
                .collect();
            let rw: Vec<String> = (k.rw.iter())
                .map(|h| format!("{}:{}:{}", h.name, h.mode.as_str(), h.token))
                .collect();
            format!(
                "kept alive {:?}, holds [{}], read-write [{}]",
                k.remaining,
                l.join(" "),
                rw.join(" ")
            )
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
        Ok(Rep::Flag(done)) => format!("done: {done}"),
        Ok(Rep::Queued(Queued::Acquired(t))) => {
            format!("Acquired {} token {} through the queue", t.name, t.token)
        }
        Ok(Rep::Queued(Queued::Waiting { ahead, owner })) => match owner {
            Some(o) => format!(
                "Waiting ({ahead} ahead), held by s{} token {}",
                session_no(&o.session),
                o.token
            ),
            None => format!("Waiting ({ahead} ahead), free"),
        },
        Ok(Rep::Job(JobClaim::Claimed { token, remaining })) => {
            format!("job Claimed token {token} ({remaining:?} left)")
        }
        Ok(Rep::Job(JobClaim::Busy { remaining })) => format!("job Busy ({remaining:?} left)"),
        Ok(Rep::Rw(RwAcquire::Acquired(t))) => {
            format!(
                "rw Acquired {} token {} ({:?} left)",
                t.name, t.token, t.remaining
            )
        }
        Ok(Rep::Rw(RwAcquire::Busy {
            writer,
            readers,
            writers_waiting,
        })) => format!(
            "rw Busy (writer {}, {readers} reader(s), {writers_waiting} writer(s) waiting)",
            writer
                .as_ref()
                .map_or("none".into(), |w| format!("s{}", session_no(w)))
        ),
        Err(Error::SessionExpired { .. }) => "ERR session expired".into(),
        Err(Error::Timeout { .. }) => "TIMEOUT".into(),
        Err(e) => format!("ERR {e}"),
    }
}

pub(super) fn show_event(e: &Event) -> String {
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
