//! The checker's side of a run, while it runs: every event the engine emits is judged
//! (nothing after expiry, losses only of believed terms and to their holders, an unlock's
//! loss only of a term the backend had ended, observers' tokens and values), and every
//! believed term and job claim is checked valid after each engine step, its belief extended
//! until the instant it would lapse.

use super::outcome::{reason_str, show_event};
use super::{JobThread, World};
use crate::engine::core::{HandleId, Space};
use crate::engine::driver::jobs;
use crate::engine::{Event, LossReason};
use crate::sim::check::{Belief, Held, Kind, Violation};
use crate::types::{LeaseName, Token};
use std::time::{Duration, Instant};

impl World<'_> {
    pub(super) fn on_event(&mut self, c: usize, h: Option<HandleId>, e: Event) {
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
                if !o.value.is_empty() {
                    self.check_value(c, &name, o.token, &o.value, last);
                }
            }
            Event::Elected { term } => {
                self.open_belief(c, h.unwrap_or(0), &term.name, term.token, Held::Election);
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
                            .any(|(t, _)| t.token == term.token && t.name == term.name) =>
                    {
                        // An unlock whose release found the term gone reports it, once; the
                        // backend must have ended the term before that release.
                        let lost = &mut self.clients[c].lost_on_unlock;
                        let i = lost
                            .iter()
                            .position(|(t, _)| t.token == term.token && t.name == term.name)
                            .expect("checked above");
                        let (_, ended_before) = lost.remove(i);
                        if !ended_before {
                            let what = format!(
                                "an unlock reported token {} lost, but the backend had not ended that term before the release",
                                term.token
                            );
                            self.violation(Kind::UnfoundedLoss, c, Some(&term.name), what);
                        }
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

    pub(super) fn violation(
        &mut self,
        kind: Kind,
        c: usize,
        name: Option<&LeaseName>,
        what: String,
    ) {
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

    /// Client `c` begins to believe `name`/`token` (by `handle`) now.
    pub(super) fn open_belief(
        &mut self,
        c: usize,
        handle: HandleId,
        name: &LeaseName,
        token: Token,
        held: Held,
    ) {
        let open = match held {
            Held::Job => &self.clients[c].jobs_open,
            _ => &self.clients[c].open,
        };
        if open.contains_key(name) {
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
            held,
            handle,
            start: self.now,
            end: None,
            segments: Vec::new(),
            current: Some((self.now, self.now)),
        });
        let b = self.beliefs.len() - 1;
        match held {
            Held::Job => self.clients[c].jobs_open.insert(name.clone(), b),
            _ => self.clients[c].open.insert(name.clone(), b),
        };
    }

    /// An observer of client `c` saw `name`'s term `token` with `value` (after the highest
    /// token `last`): the value must have been written for that very term, and by no term
    /// older than one the observer saw.
    fn check_value(
        &mut self,
        c: usize,
        name: &LeaseName,
        token: Token,
        value: &str,
        last: Option<Token>,
    ) {
        let key = (name.clone(), token);
        let written = self
            .writes
            .get(&key)
            .is_some_and(|w| w.iter().any(|v| v == value));
        if !written {
            let what =
                format!("an observer of {name} saw token {token} with the value {value:?}, not written for that term");
            self.violation(Kind::ForeignValue, c, Some(name), what);
        }
        let seen = last.map_or(token, |l| l.max(token));
        let newest = self
            .value_terms
            .get(&(name.clone(), value.to_owned()))
            .copied();
        if let Some(by) = newest.filter(|by| *by < seen) {
            let what = format!(
                "an observer of {name} saw the value {value:?} of token {by} with token {token}, after seeing token {seen}"
            );
            self.violation(Kind::StaleValue, c, Some(name), what);
        }
    }

    /// Reports a violation if client `c` still believes terms, and ends those beliefs.
    pub(super) fn end_open_beliefs(&mut self, c: usize, what: &str) {
        if self.clients[c].open.is_empty() {
            return;
        }
        self.violation(Kind::TermNotEnded, c, None, what.into());
        let open = std::mem::take(&mut self.clients[c].open);
        for (_, b) in open {
            self.close_belief(b, "never reported");
        }
    }

    pub(super) fn close_belief(&mut self, b: usize, how: &'static str) {
        let now = self.now;
        let bl = &mut self.beliefs[b];
        bl.cut(now);
        bl.current = None;
        bl.end = Some((now, how));
    }

    /// Every term still believed must be valid now (the engine ticked and dispatched): a term
    /// whose `is_valid` is false but whose loss was not reported is a silent loss. Records when
    /// each belief will lapse if nothing else happens.
    pub(super) fn check_beliefs(&mut self, c: usize) {
        self.check_jobs(c);
        let t = self.now;
        let local = self.local(c, t);
        let open: Vec<(LeaseName, usize)> = self.clients[c]
            .open
            .iter()
            .map(|(n, b)| (n.clone(), *b))
            .collect();
        for (name, b) in open {
            let (token, rw) = (self.beliefs[b].token, self.beliefs[b].held.is_rw());
            let space = if rw { Space::Rw } else { Space::Lease };
            let cl = &self.clients[c];
            let Some(core) = cl.core.as_ref() else {
                continue;
            };
            // What `LockGuard::is_valid` / `Election::is_leader`, or `RwGuard::is_valid`, answer.
            let valid = |at: Instant| core.is_valid(space, &name, token, at);
            if !valid(local) {
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
            let hint = self.lapses.get(&b).copied();
            let hi = lapse(local, core.deadline(), hint, valid);
            self.lapses.insert(b, hi);
            let until = self.true_of(c, hi).max(t);
            let bl = &mut self.beliefs[b];
            bl.cut(t);
            bl.current = Some((t, until));
        }
    }

    /// Every job claim still believed must hold now (the driver's `jobs::holds`, what
    /// `Job::is_valid` answers); one that no longer does ends (and stays ended, as
    /// `is_valid` latches). Records when each will end if nothing else happens.
    pub(super) fn check_jobs(&mut self, c: usize) {
        let t = self.now;
        let local = self.local(c, t);
        let open: Vec<(LeaseName, usize)> = (self.clients[c].jobs_open.iter())
            .map(|(n, b)| (n.clone(), *b))
            .collect();
        for (name, b) in open {
            let cl = &self.clients[c];
            let run = cl
                .jobbers
                .iter()
                .find(|j| j.name == name)
                .and_then(|j| match &j.thread {
                    JobThread::Running(r) => Some((r.session.clone(), r.deadline)),
                    _ => None,
                });
            let holds = |at: Instant| {
                run.as_ref().is_some_and(|(id, deadline)| {
                    cl.core
                        .as_ref()
                        .is_some_and(|k| jobs::holds(k, id, *deadline, at))
                })
            };
            if !holds(local) {
                self.clients[c].jobs_open.remove(&name);
                self.close_belief(b, "claim ended");
                continue;
            }
            let deadline = run.as_ref().map_or(local, |(_, d)| *d);
            let hint = self.lapses.get(&b).copied();
            let hi = lapse(local, deadline, hint, holds);
            self.lapses.insert(b, hi);
            let until = self.true_of(c, hi).max(t);
            let bl = &mut self.beliefs[b];
            bl.cut(t);
            bl.current = Some((t, until));
        }
    }
}

/// The first instant (to the nanosecond) in `(from, to]` at which `valid` is false, for a
/// `valid` that is monotone in time (true at `from`, false at `to`): `hint` (where it
/// turned false last time) if it still is that instant, else found by bisection. Either way
/// the answer is the same.
fn lapse(
    from: Instant,
    to: Instant,
    hint: Option<Instant>,
    valid: impl Fn(Instant) -> bool,
) -> Instant {
    let ns = Duration::from_nanos(1);
    if let Some(h) = hint.filter(|h| *h > from && *h <= to) {
        if valid(h - ns) && !valid(h) {
            return h;
        }
    }
    let (mut lo, mut hi) = (from, to);
    while hi.duration_since(lo) > ns {
        let mid = lo + hi.duration_since(lo) / 2;
        if valid(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}
