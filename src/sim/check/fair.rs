//! The fair-lock rule: a fair lock is granted to its waiters in their queue order. The
//! checker rebuilds each queue from the backend's log of places, leaves and takes (arrival
//! order, patience, sessions' liveness), independently of how the backend orders it.

use super::{Kind, Violation};
use crate::sim::model::{session_no, QueueEntry, QueueStep};
use crate::sim::world::secs;
use crate::types::{LeaseName, SessionId};
use std::collections::BTreeMap;

/// Checks that every new term of a fair lock went to the first live waiter of its queue: a
/// place is live until its patience ends and while its session is live; a session keeps its
/// place when it renews it, and queues at the end when its place had died.
///
/// ```
/// use simba_lease::sim::check::check_queues;
/// use simba_lease::sim::{session_id, QueueEntry, QueueStep};
/// use simba_lease::LeaseName;
/// let name = LeaseName::new("f0")?;
/// let (a, b) = (session_id(1), session_id(2));
/// let entry = |at, s: &simba_lease::SessionId, step| QueueEntry { at, name: name.clone(), session: s.clone(), step };
/// let live = vec![a.clone(), b.clone()];
/// let log = [
///     entry(1, &a, QueueStep::Place(100)),
///     entry(2, &b, QueueStep::Place(100)),
///     entry(3, &b, QueueStep::Take { new_term: true, live }),
/// ];
/// let mut out = Vec::new();
/// check_queues(&log, &mut out);
/// assert_eq!(out.len(), 1); // b went before a
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub fn check_queues(log: &[QueueEntry], out: &mut Vec<Violation>) {
    let mut queues: BTreeMap<&LeaseName, Vec<(&SessionId, u64)>> = BTreeMap::new();
    for e in log {
        let q = queues.entry(&e.name).or_default();
        q.retain(|(_, until)| *until > e.at);
        match &e.step {
            QueueStep::Place(until) => match q.iter_mut().find(|(s, _)| *s == &e.session) {
                Some(place) => place.1 = *until,
                None => q.push((&e.session, *until)),
            },
            QueueStep::Leave => q.retain(|(s, _)| *s != &e.session),
            QueueStep::Take { new_term, live } => {
                q.retain(|(s, _)| live.contains(s));
                let first = q.first().map(|(s, _)| *s);
                if let Some(first) = first.filter(|f| *new_term && *f != &e.session) {
                    let what = format!(
                        "{}: s{} took the fair lock at {} (backend clock) while s{} queued before it and still waited",
                        e.name,
                        session_no(&e.session),
                        secs(e.at),
                        session_no(first)
                    );
                    out.push(Violation {
                        kind: Kind::QueueJump,
                        at: e.at,
                        name: Some(e.name.clone()),
                        clients: Vec::new(),
                        what,
                    });
                }
                q.retain(|(s, _)| *s != &e.session);
            }
        }
    }
}
