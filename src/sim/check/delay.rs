//! The lock-delay rule: a lease term that ended with its session's expiry keeps its name
//! blocked for that session's lock-delay, by the backend's clock, so no new term of the name
//! begins within the delay after the expiry; for read-write terms, no new conflicting term
//! (any after a write term, a write after a read term). Judged over the backend's logs of
//! expired and new terms.

use super::{Kind, Violation};
use crate::sim::model::{session_no, DelayEntry, DelayStep, RwDelayEntry};
use crate::sim::world::secs;
use crate::spi::RwMode;
use crate::types::LeaseName;
use std::collections::BTreeMap;

/// Checks that no new term of a name began (backend time) before the end of the lock-delay
/// of a term of that name that ended with its session's expiry.
///
/// ```
/// use simba_lease::sim::check::check_delays;
/// use simba_lease::sim::{session_id, DelayEntry, DelayStep};
/// use simba_lease::{LeaseName, Token};
/// let name = LeaseName::new("l0")?;
/// let entry = |at, s, token, step| DelayEntry {
///     at, name: name.clone(), session: session_id(s), token: Token::new(token).unwrap(), step,
/// };
/// let log = [
///     entry(0, 1, 1, DelayStep::Granted),
///     entry(100, 1, 1, DelayStep::Expired { delay: 50 }),
///     entry(120, 2, 2, DelayStep::Granted),
/// ];
/// let mut out = Vec::new();
/// check_delays(&log, &mut out);
/// assert_eq!(out.len(), 1); // granted 20 ns into a 50 ns delay
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub fn check_delays(log: &[DelayEntry], out: &mut Vec<Violation>) {
    // The latest end of a lock-delay of each name, with the term it follows.
    let mut blocked: BTreeMap<&LeaseName, (u64, &DelayEntry)> = BTreeMap::new();
    for e in log {
        match e.step {
            DelayStep::Expired { delay } => {
                let until = e.at + delay;
                if blocked.get(&e.name).is_none_or(|(u, _)| until > *u) {
                    blocked.insert(&e.name, (until, e));
                }
            }
            DelayStep::Granted => {
                let Some((until, ended)) = blocked.get(&e.name) else {
                    continue;
                };
                if e.at < *until {
                    out.push(Violation {
                        kind: Kind::EarlyTakeover,
                        at: e.at,
                        name: Some(e.name.clone()),
                        clients: Vec::new(),
                        what: format!(
                            "{}: s{} got token {} at {} (backend clock), within the lock-delay of s{}'s token {} that ended with its session's expiry at {} (delay until {})",
                            e.name,
                            session_no(&e.session),
                            e.token,
                            secs(e.at),
                            session_no(&ended.session),
                            ended.token,
                            secs(ended.at),
                            secs(*until)
                        ),
                    });
                }
            }
        }
    }
}

/// Checks that no new read-write term of a name began (backend time) before the end of the
/// lock-delay of a conflicting term of that name that ended with its session's expiry: any
/// new term after a write term, a new write term after a read term.
///
/// ```
/// use simba_lease::sim::check::check_rw_delays;
/// use simba_lease::sim::{session_id, DelayStep, RwDelayEntry};
/// use simba_lease::spi::RwMode;
/// use simba_lease::{LeaseName, Token};
/// let name = LeaseName::new("rw0")?;
/// let entry = |at, s, mode, token, step| RwDelayEntry {
///     at, name: name.clone(), session: session_id(s), mode, token: Token::new(token).unwrap(), step,
/// };
/// let expired = DelayStep::Expired { delay: 50 };
/// let log = [
///     entry(0, 1, RwMode::Read, 1, DelayStep::Granted),
///     entry(100, 1, RwMode::Read, 1, expired),
///     entry(110, 2, RwMode::Read, 2, DelayStep::Granted), // readers do not conflict
///     entry(120, 3, RwMode::Write, 3, DelayStep::Granted), // 20 ns into the reader's delay
/// ];
/// let mut out = Vec::new();
/// check_rw_delays(&log, &mut out);
/// assert_eq!(out.len(), 1);
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub fn check_rw_delays(log: &[RwDelayEntry], out: &mut Vec<Violation>) {
    // Per name, the latest end of a delayed write term's and of a delayed read term's
    // lock-delay, with the term each follows.
    type Until<'a> = Option<(u64, &'a RwDelayEntry)>;
    let mut blocked: BTreeMap<&LeaseName, [Until; 2]> = BTreeMap::new();
    let side = |mode| usize::from(mode == RwMode::Write);
    for e in log {
        let ends = blocked.entry(&e.name).or_default();
        match e.step {
            DelayStep::Expired { delay } => {
                let until = e.at + delay;
                let end = &mut ends[side(e.mode)];
                if end.is_none_or(|(u, _)| until > u) {
                    *end = Some((until, e));
                }
            }
            DelayStep::Granted => {
                // A write term conflicts with both sides, a read term with writes only.
                let sides: &[usize] = match e.mode {
                    RwMode::Write => &[0, 1],
                    RwMode::Read => &[1],
                };
                let hit = (sides.iter())
                    .filter_map(|&i| ends[i])
                    .find(|(until, _)| e.at < *until);
                if let Some((until, ended)) = hit {
                    out.push(Violation {
                        kind: Kind::RwEarlyTakeover,
                        at: e.at,
                        name: Some(e.name.clone()),
                        clients: Vec::new(),
                        what: format!(
                            "{}: s{} got a {} term with token {} at {} (backend clock), within the lock-delay of s{}'s {} term with token {} that ended with its session's expiry at {} (delay until {})",
                            e.name,
                            session_no(&e.session),
                            e.mode.as_str(),
                            e.token,
                            secs(e.at),
                            session_no(&ended.session),
                            ended.mode.as_str(),
                            ended.token,
                            secs(ended.at),
                            secs(until)
                        ),
                    });
                }
            }
        }
    }
}
