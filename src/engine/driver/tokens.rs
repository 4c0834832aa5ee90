//! The highest fencing token this process has seen granted for each name of one backend:
//! a grant that does not exceed it means the backend lost data (a failover to a replica
//! that missed writes, a restart without persistence, an eviction). [`check`] is what the
//! pumps of the call machines (the session's threads, the simulation) do with a grant.

use crate::engine::core::{Core, HandleId};
use crate::types::{LeaseName, SessionId, Term, Token};
use parking_lot::Mutex;
use std::collections::HashMap;

/// How many names are remembered; past that the memory starts afresh (a regression of a
/// name forgotten then goes unseen).
const REMEMBERED: usize = 1 << 16;

/// Per name, the highest token granted and the session it was granted to.
#[derive(Debug, Default)]
pub(crate) struct Watermarks {
    seen: Mutex<HashMap<LeaseName, (Token, SessionId)>>,
}

impl Watermarks {
    /// Notes a grant of `name` with `token` to `session`; returns the higher (or equal)
    /// token seen before if this grant does not exceed it. The same session granted the
    /// same token again (a renewed term) is no regression.
    pub(crate) fn note(
        &self,
        name: &LeaseName,
        token: Token,
        session: &SessionId,
    ) -> Option<Token> {
        let mut seen = self.seen.lock();
        match seen.get(name) {
            Some((t, s)) if *t == token && s == session => None,
            Some((t, _)) if *t >= token => Some(*t),
            _ => {
                if seen.len() >= REMEMBERED && !seen.contains_key(name) {
                    seen.clear();
                }
                seen.insert(name.clone(), (token, session.clone()));
                None
            }
        }
    }
}

/// Checks a term just granted to `handle` of `core`'s session against the highest token
/// its process saw for the name (`seen`), and reports a regression (to `handle`'s
/// listeners if given: an election's; a lock's `lost()` channel carries only losses).
pub(crate) fn check(seen: &Watermarks, core: &mut Core, handle: Option<HandleId>, term: &Term) {
    if let Some(higher) = seen.note(&term.name, term.token, core.session()) {
        core.token_regressed(handle, term, higher);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_not_above_the_highest_seen_is_a_regression() {
        let t = |n: u64| Token::new(n).unwrap();
        let w = Watermarks::default();
        let name = LeaseName::new("n").unwrap();
        let (a, b) = (SessionId::random(), SessionId::random());
        assert_eq!(w.note(&name, t(5), &a), None);
        assert_eq!(w.note(&name, t(5), &a), None, "the same term renewed");
        assert_eq!(
            w.note(&name, t(5), &b),
            Some(t(5)),
            "one token granted twice"
        );
        assert_eq!(w.note(&name, t(3), &b), Some(t(5)));
        assert_eq!(w.note(&name, t(6), &b), None);
        assert_eq!(w.note(&name, t(6), &b), None);
    }
}
