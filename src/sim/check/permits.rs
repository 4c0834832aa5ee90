//! The semaphore rule: never more permits held at once than the semaphore has. Each permit
//! is a lease of its own (its single believer and rising tokens are the lease rules); this
//! counts the believers of all of a semaphore's permits together, on true (backend) time.

use super::{Belief, Kind, Violation};
use crate::sim::model::session_no;
use crate::sim::world::secs;

/// Checks that at no true instant more beliefs of the permits `{name}.permit-{i}` of a
/// semaphore `(name, permits)` in `semaphores` were held than `permits`.
///
/// ```
/// use simba_lease::sim::check::check_permits;
/// let mut out = Vec::new();
/// check_permits(&[], &[("s0".to_string(), 2)], &mut out);
/// assert!(out.is_empty());
/// ```
pub fn check_permits(beliefs: &[Belief], semaphores: &[(String, u32)], out: &mut Vec<Violation>) {
    for (sem, permits) in semaphores {
        let prefix = format!("{sem}.permit-");
        // (instant, +1 start / -1 end, belief); ends sort before starts at the same instant.
        let mut edges: Vec<(u64, i8, usize)> = Vec::new();
        for (i, b) in beliefs.iter().enumerate() {
            if b.name.as_str().starts_with(&prefix) {
                for &(a, z) in &b.segments {
                    edges.push((a, 1, i));
                    edges.push((z, -1, i));
                }
            }
        }
        edges.sort();
        let mut held: Vec<usize> = Vec::new();
        for (at, step, i) in edges {
            if step < 0 {
                if let Some(k) = held.iter().position(|&j| j == i) {
                    held.swap_remove(k);
                }
                continue;
            }
            held.push(i);
            if held.len() > *permits as usize {
                let who: Vec<String> = held
                    .iter()
                    .map(|&j| {
                        let b = &beliefs[j];
                        format!("c{}/s{} {}", b.client, session_no(&b.session), b.name)
                    })
                    .collect();
                let mut clients: Vec<usize> = held.iter().map(|&j| beliefs[j].client).collect();
                clients.dedup();
                out.push(Violation {
                    kind: Kind::TooManyPermits,
                    at,
                    name: None,
                    clients,
                    what: format!(
                        "{sem} has {permits} permit(s) but {} were believed at {}: {}",
                        held.len(),
                        secs(at),
                        who.join(", ")
                    ),
                });
                break;
            }
        }
    }
}
