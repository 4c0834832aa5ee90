//! The history checker: what every session believed, against what the backend did. This
//! file holds the beliefs, the violations and the rules over beliefs and grants (one
//! believer per lease, tokens rising); `fair`, `permits`, `jobs`, `rw` and `delay` hold the
//! rules of fair-lock queues, semaphores, run-once windows, read-write locks and lock-delays.

mod delay;
mod fair;
mod jobs;
mod permits;
mod rw;

pub use delay::{check_delays, check_rw_delays};
pub use fair::check_queues;
pub use jobs::check_jobs;
pub use permits::check_permits;
pub use rw::check_rw;

use super::model::{session_no, Grant};
use super::world::{secs, Stats};
use crate::types::{LeaseName, SessionId, Token};
use std::collections::BTreeMap;
use std::fmt;

/// What a belief is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Held {
    /// An election candidate's term.
    Election,
    /// A lock's term (plain or fair, or a semaphore's permit).
    Lock,
    /// A run-once job's claim, while `Job::is_valid` holds.
    Job,
    /// A read-write lock's read term, while `RwGuard::is_valid` holds.
    Read,
    /// A read-write lock's write term, while `RwGuard::is_valid` holds.
    Write,
}

impl Held {
    /// Whether it is a read-write lock's term (judged by the read-write rule, not by the
    /// single believer of a lease).
    pub fn is_rw(self) -> bool {
        matches!(self, Held::Read | Held::Write)
    }
}

/// One term a session believed it held.
///
/// A session believes it holds `name` with `token` at a local instant exactly when the engine's
/// `Core::is_valid(name, token, now)` is true, from the `Elected` event (or a lock's acquire)
/// until its loss event, its resign, unlock or close; a read-write lock's term likewise while
/// `Core::is_valid(Space::Rw, ..)` is true (what `RwGuard::is_valid` answers); a job claim while the
/// driver's `jobs::holds` is true (what `Job::is_valid` answers), until the job returns. The simulation evaluates that oracle after
/// every step of the engine and maps the instant where it turns false from the client's clock to
/// true (backend) time: the belief is the union of `segments`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Belief {
    /// The client process.
    pub client: usize,
    /// Its session.
    pub session: SessionId,
    /// The lease.
    pub name: LeaseName,
    /// The term's token.
    pub token: Token,
    /// What it is of.
    pub held: Held,
    /// The election or lock handle (0 for a job).
    pub handle: u64,
    /// True time the belief began (ns).
    pub start: u64,
    /// True time and way it ended, once it did.
    pub end: Option<(u64, &'static str)>,
    /// True-time intervals `[from, to)` during which the session believed (ns).
    pub segments: Vec<(u64, u64)>,
    /// The open segment: since when, and until when it lasts if nothing happens.
    pub(crate) current: Option<(u64, u64)>,
}

impl Belief {
    /// Closes the open segment at `now` (it ends earlier if it lapsed by then).
    pub(crate) fn cut(&mut self, now: u64) {
        if let Some((from, until)) = self.current.take() {
            let to = until.min(now);
            if to > from {
                match self.segments.last_mut() {
                    Some(last) if last.1 == from => last.1 = to,
                    _ => self.segments.push((from, to)),
                }
            }
        }
    }
}

impl fmt::Display for Belief {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let segs: Vec<String> = self
            .segments
            .iter()
            .map(|(a, b)| format!("[{}, {})", secs(*a), secs(*b)))
            .collect();
        let end = self.end.map_or("open".to_string(), |(t, how)| {
            format!("{how} at {}", secs(t))
        });
        write!(
            f,
            "c{}/s{} {} {} token {}: believed {} ({})",
            self.client,
            session_no(&self.session),
            match self.held {
                Held::Election => "election",
                Held::Lock => "lock",
                Held::Job => "job",
                Held::Read => "read",
                Held::Write => "write",
            },
            self.name,
            self.token,
            if segs.is_empty() {
                "never".into()
            } else {
                segs.join(" ")
            },
            end
        )
    }
}

/// What was violated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Two sessions believed they held the same lease at the same true instant.
    DoubleBeliever,
    /// A new term's token was not above every earlier token of the name.
    TokenRegression,
    /// A session reported something after it expired or closed (other than its losses).
    EventAfterExpiry,
    /// A term stopped being valid without its loss being reported.
    SilentLoss,
    /// A term was not ended by resign, close or the end of its session.
    TermNotEnded,
    /// The backend accepted a keep-alive or acquire of a session after it had ended.
    SessionRevived,
    /// An observer saw a term with a value its holder did not give it (another term's).
    ForeignValue,
    /// An observer saw a value written by a term older than one it had already seen.
    StaleValue,
    /// A fair lock went to a session while a live waiter queued before it still waited.
    QueueJump,
    /// More permits of a semaphore were believed at one instant than it has.
    TooManyPermits,
    /// A job ran again within the window (`at_least`) of a run that had finished.
    JobRerun,
    /// An unlock reported its term lost though the backend had not ended the term before
    /// the release.
    UnfoundedLoss,
    /// A read-write lock's write term was believed while another session believed a read
    /// or write term of the same name.
    RwConflict,
    /// A lease was granted anew within the lock-delay of a term of the name that ended with
    /// its session's expiry (backend clock).
    EarlyTakeover,
    /// A read-write term began within the lock-delay of a conflicting term of the name (a
    /// write term, or a read term for a new writer) that ended with its session's expiry
    /// (backend clock).
    RwEarlyTakeover,
}

/// One violation of the contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What was violated.
    pub kind: Kind,
    /// True time it happened (ns).
    pub at: u64,
    /// The lease concerned, if any.
    pub name: Option<LeaseName>,
    /// The clients concerned.
    pub clients: Vec<usize>,
    /// A readable description.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at {}: {}", self.kind, secs(self.at), self.what)
    }
}

/// Checks the history of one run after it ended: single believer per lease at every true
/// instant, tokens strictly increasing per name (in the beliefs and in the backend's grants).
/// Read-write lock terms are [`check_rw`]'s. The other checks run during the run, right
/// after each engine step.
pub fn check(
    beliefs: &mut [Belief],
    grants: &[Grant],
    out: &mut Vec<Violation>,
    stats: &mut Stats,
) {
    for b in beliefs.iter_mut() {
        if let Some((t, _)) = b.end {
            b.cut(t);
        }
    }
    let mut by_name: BTreeMap<&LeaseName, Vec<usize>> = BTreeMap::new();
    for (i, b) in beliefs.iter().enumerate().filter(|(_, b)| !b.held.is_rw()) {
        by_name.entry(&b.name).or_default().push(i);
    }
    for (name, idx) in &by_name {
        // Single believer: sweep the segments in start order.
        let mut segs: Vec<(u64, u64, usize)> = idx
            .iter()
            .flat_map(|&i| beliefs[i].segments.iter().map(move |&(a, z)| (a, z, i)))
            .collect();
        segs.sort();
        let mut reported = false;
        let mut cur: Option<(u64, usize)> = None; // (end, belief) of the latest-ending segment
        for &(a, z, i) in &segs {
            if let Some((end, j)) = cur {
                if i != j && a < end {
                    let overlap = end.min(z) - a;
                    stats.max_overlap = stats.max_overlap.max(overlap);
                    if !reported {
                        reported = true;
                        let (x, y) = (&beliefs[j], &beliefs[i]);
                        out.push(Violation {
                            kind: Kind::DoubleBeliever,
                            at: a,
                            name: Some((*name).clone()),
                            clients: vec![x.client, y.client],
                            what: format!(
                                "{name}: c{}/s{} (token {}) and c{}/s{} (token {}) both believed for {}",
                                x.client,
                                session_no(&x.session),
                                x.token,
                                y.client,
                                session_no(&y.session),
                                y.token,
                                secs(overlap)
                            ),
                        });
                    }
                }
                if i != j && a >= end {
                    stats.handovers += 1;
                    let gap = a - end;
                    stats.min_gap = Some(stats.min_gap.map_or(gap, |g| g.min(gap)));
                }
            }
            if cur.is_none_or(|(end, _)| z > end) {
                cur = Some((z, i));
            }
        }
        // Tokens of successive beliefs: never lower; equal only for the same session.
        let mut order: Vec<usize> = idx.clone();
        order.sort_by_key(|&i| (beliefs[i].start, i));
        let mut max: Option<usize> = None;
        for &i in &order {
            let b = &beliefs[i];
            if let Some(m) = max {
                let p = &beliefs[m];
                if b.token < p.token || (b.token == p.token && b.session != p.session) {
                    out.push(Violation {
                        kind: Kind::TokenRegression,
                        at: b.start,
                        name: Some((*name).clone()),
                        clients: vec![p.client, b.client],
                        what: format!(
                            "{name}: c{}/s{} believed token {} after c{}/s{} believed token {}",
                            b.client,
                            session_no(&b.session),
                            b.token,
                            p.client,
                            session_no(&p.session),
                            p.token
                        ),
                    });
                    continue;
                }
            }
            if max.is_none_or(|m| b.token >= beliefs[m].token) {
                max = Some(i);
            }
        }
    }
    // The backend's grants: every new term's token above every earlier token of the name.
    let mut top: BTreeMap<&LeaseName, &Grant> = BTreeMap::new();
    for g in grants {
        if let Some(p) = top.get(&g.name) {
            let bad = if g.new_term {
                g.token <= p.token
            } else {
                g.token != p.token && g.token < p.token
            };
            if bad {
                out.push(Violation {
                    kind: Kind::TokenRegression,
                    at: g.at,
                    name: Some(g.name.clone()),
                    clients: Vec::new(),
                    what: format!(
                        "{}: the backend granted token {} to s{} after granting token {} to s{}",
                        g.name,
                        g.token,
                        session_no(&g.session),
                        p.token,
                        session_no(&p.session)
                    ),
                });
            }
        }
        if top.get(&g.name).is_none_or(|p| g.token > p.token) {
            top.insert(&g.name, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::model::session_id;

    fn belief(client: usize, token: u64, segments: &[(u64, u64)]) -> Belief {
        Belief {
            client,
            session: session_id(client as u64 + 1),
            name: LeaseName::new("job").unwrap(),
            token: Token::new(token).unwrap(),
            held: Held::Election,
            handle: 1,
            start: segments[0].0,
            end: Some((segments.last().unwrap().1, "resigned")),
            segments: segments.to_vec(),
            current: None,
        }
    }

    fn kinds(beliefs: &mut [Belief], grants: &[Grant]) -> (Vec<Kind>, Stats) {
        let (mut out, mut stats) = (Vec::new(), Stats::default());
        check(beliefs, grants, &mut out, &mut stats);
        (out.into_iter().map(|v| v.kind).collect(), stats)
    }

    #[test]
    fn hand_overs_without_overlap_pass() {
        let mut b = [
            belief(0, 1, &[(0, 10), (10, 20)]),
            belief(1, 2, &[(25, 30)]),
        ];
        let (k, stats) = kinds(&mut b, &[]);
        assert!(k.is_empty());
        assert_eq!((stats.handovers, stats.min_gap), (1, Some(5)));
    }

    #[test]
    fn overlapping_believers_are_found() {
        let mut b = [belief(0, 1, &[(0, 10)]), belief(1, 2, &[(9, 30)])];
        let (k, stats) = kinds(&mut b, &[]);
        assert_eq!(k, vec![Kind::DoubleBeliever]);
        assert_eq!(stats.max_overlap, 1);
    }

    #[test]
    fn lower_or_shared_tokens_are_found() {
        let mut b = [belief(0, 5, &[(0, 10)]), belief(1, 4, &[(20, 30)])];
        assert_eq!(kinds(&mut b, &[]).0, vec![Kind::TokenRegression]);
        let mut b = [belief(0, 5, &[(0, 10)]), belief(1, 5, &[(20, 30)])];
        assert_eq!(kinds(&mut b, &[]).0, vec![Kind::TokenRegression]);
        // The same session believing its own term again is fine.
        let mut b = [belief(0, 5, &[(0, 10)]), belief(0, 5, &[(20, 30)])];
        assert!(kinds(&mut b, &[]).0.is_empty());
    }

    #[test]
    fn regressing_grants_are_found() {
        let grant = |at, s: u64, token, new_term| Grant {
            at,
            name: LeaseName::new("job").unwrap(),
            session: session_id(s),
            token: Token::new(token).unwrap(),
            new_term,
        };
        let ok = [
            grant(0, 1, 1, true),
            grant(1, 1, 1, false),
            grant(2, 2, 2, true),
        ];
        assert!(kinds(&mut [], &ok).0.is_empty());
        let bad = [grant(0, 1, 3, true), grant(1, 2, 3, true)];
        assert_eq!(kinds(&mut [], &bad).0, vec![Kind::TokenRegression]);
    }
}
