//! The lock-delay rule: a lease term that ended with its session's expiry keeps its name
//! blocked for that session's lock-delay, by the backend's clock, so no new term of the name
//! begins within the delay after the expiry. Judged over the backend's log of expired and
//! new terms.

use super::{Kind, Violation};
use crate::sim::model::{session_no, DelayEntry, DelayStep};
use crate::sim::world::secs;
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
