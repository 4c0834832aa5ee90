//! The read-write lock rules: a writer believes alone, and tokens follow the read-write
//! rule. Exclusion is judged over beliefs on true (backend) time, as the single-believer rule
//! of a lease is (a belief counts only while its holder's local deadline says valid); the
//! tokens over the backend's log of grants.

use super::{Belief, Held, Kind, Violation};
use crate::sim::model::{session_no, RwGrant};
use crate::sim::world::secs;
use crate::spi::RwMode;
use crate::types::LeaseName;
use std::collections::BTreeMap;

/// Checks that at no true instant a belief of a write term of a read-write lock overlaps a
/// belief of another read or write term of the same name, and that, in the backend's
/// grants, every new write term's token is above every token granted before on the name and
/// every new read term's token above the last write term's.
///
/// ```
/// use simba_lease::sim::check::check_rw;
/// let mut out = Vec::new();
/// check_rw(&[], &[], &mut out);
/// assert!(out.is_empty());
/// ```
pub fn check_rw(beliefs: &[Belief], grants: &[RwGrant], out: &mut Vec<Violation>) {
    let mut by_name: BTreeMap<&LeaseName, Vec<(u64, u64, usize)>> = BTreeMap::new();
    for (i, b) in beliefs.iter().enumerate().filter(|(_, b)| b.held.is_rw()) {
        let segs = by_name.entry(&b.name).or_default();
        segs.extend(b.segments.iter().map(|&(a, z)| (a, z, i)));
    }
    for (name, mut segs) in by_name {
        segs.sort();
        // The segments still open at each start: (end, belief).
        let mut open: Vec<(u64, usize)> = Vec::new();
        'segments: for (a, z, i) in segs {
            open.retain(|&(end, _)| end > a);
            for &(end, j) in &open {
                let (x, y) = (&beliefs[j], &beliefs[i]);
                let write = x.held == Held::Write || y.held == Held::Write;
                if j != i && write {
                    let overlap = end.min(z) - a;
                    out.push(Violation {
                        kind: Kind::RwConflict,
                        at: a,
                        name: Some(name.clone()),
                        clients: vec![x.client, y.client],
                        what: format!(
                            "{name}: c{}/s{} ({:?} token {}) and c{}/s{} ({:?} token {}) both believed for {}",
                            x.client,
                            session_no(&x.session),
                            x.held,
                            x.token,
                            y.client,
                            session_no(&y.session),
                            y.held,
                            y.token,
                            secs(overlap)
                        ),
                    });
                    // One report per name.
                    break 'segments;
                }
            }
            open.push((z, i));
        }
    }
    // (highest token, last write term's token) per name, in grant order.
    let mut seen: BTreeMap<&LeaseName, (u64, u64)> = BTreeMap::new();
    for g in grants {
        let (top, last_write) = seen.entry(&g.name).or_default();
        let token = g.token.get();
        if g.new_term {
            let (bad, rule) = match g.mode {
                RwMode::Write => (token <= *top, format!("above every token before ({top})")),
                RwMode::Read => (
                    token <= *last_write,
                    format!("above the last write term's ({last_write})"),
                ),
            };
            if bad {
                out.push(Violation {
                    kind: Kind::TokenRegression,
                    at: g.at,
                    name: Some(g.name.clone()),
                    clients: Vec::new(),
                    what: format!(
                        "{}: the backend granted a {} term with token {token} to s{}, not {rule}",
                        g.name,
                        g.mode.as_str(),
                        session_no(&g.session)
                    ),
                });
            }
            if g.mode == RwMode::Write {
                *last_write = token;
            }
        }
        *top = (*top).max(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::model::session_id;
    use crate::types::Token;

    fn belief(client: usize, held: Held, token: u64, seg: (u64, u64)) -> Belief {
        Belief {
            client,
            session: session_id(client as u64 + 1),
            name: LeaseName::new("rw0").unwrap(),
            token: Token::new(token).unwrap(),
            held,
            handle: 1,
            start: seg.0,
            end: Some((seg.1, "unlocked")),
            segments: vec![seg],
            current: None,
        }
    }

    fn grant(s: u64, mode: RwMode, token: u64, new_term: bool) -> RwGrant {
        RwGrant {
            at: token,
            name: LeaseName::new("rw0").unwrap(),
            session: session_id(s),
            mode,
            token: Token::new(token).unwrap(),
            new_term,
        }
    }

    fn kinds(beliefs: &[Belief], grants: &[RwGrant]) -> Vec<Kind> {
        let mut out = Vec::new();
        check_rw(beliefs, grants, &mut out);
        out.into_iter().map(|v| v.kind).collect()
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let readers = [
            belief(0, Held::Read, 1, (0, 10)),
            belief(1, Held::Read, 2, (5, 20)),
            belief(2, Held::Write, 3, (20, 30)),
        ];
        assert!(kinds(&readers, &[]).is_empty());
        let with_writer = [
            belief(0, Held::Read, 1, (0, 10)),
            belief(1, Held::Write, 2, (9, 20)),
        ];
        assert_eq!(kinds(&with_writer, &[]), [Kind::RwConflict]);
        let writers = [
            belief(0, Held::Write, 1, (0, 10)),
            belief(1, Held::Write, 2, (9, 20)),
        ];
        assert_eq!(kinds(&writers, &[]), [Kind::RwConflict]);
        // Beliefs of other kinds do not count here (a lease's rules judge them).
        let mut lock = belief(1, Held::Lock, 2, (5, 20));
        lock.name = LeaseName::new("rw0").unwrap();
        assert!(kinds(&[belief(0, Held::Write, 1, (0, 10)), lock], &[]).is_empty());
    }

    #[test]
    fn tokens_follow_the_read_write_rule() {
        let ok = [
            grant(1, RwMode::Read, 1, true),
            grant(2, RwMode::Read, 2, true),
            grant(1, RwMode::Read, 1, false),
            grant(3, RwMode::Write, 3, true),
            grant(1, RwMode::Read, 4, true),
        ];
        assert!(kinds(&[], &ok).is_empty());
        let write_below_a_read = [
            grant(1, RwMode::Read, 5, true),
            grant(2, RwMode::Write, 4, true),
        ];
        assert_eq!(kinds(&[], &write_below_a_read), [Kind::TokenRegression]);
        let read_below_a_write = [
            grant(1, RwMode::Write, 5, true),
            grant(2, RwMode::Read, 5, true),
        ];
        assert_eq!(kinds(&[], &read_below_a_write), [Kind::TokenRegression]);
    }
}
