//! Candidates' term values: which term a value set now is written on, and what an
//! attempt that won a term while its candidate's value changed writes after it (again, if
//! the value changed once more while that write was in flight).

use crate::engine::core::{Core, HandleId, Holder, Space};
use crate::types::{LeaseName, Term, Token};
use std::time::Instant;

/// The most writes of a changing value after one attempt (each write answers the change
/// seen at the previous one; a value changing faster is left to the next change).
pub(crate) const MAX_WRITES: usize = 16;

/// The term a value candidate `h` sets now is written on: its term of `name`, if valid
/// now (else the value waits for its next term).
pub(crate) fn target(core: &Core, h: HandleId, name: &LeaseName, now: Instant) -> Option<Term> {
    let held = core.term_of(name, Holder::Election(h));
    held.filter(|t| core.is_valid(Space::Lease, &t.name, t.token, now))
}

/// After a candidate's attempt sent with the value `sent` was taken in: the token to write
/// the candidate's `current` value on, if the attempt won (`granted`) the term the candidate
/// holds now (`held`) and the value changed while it was in flight.
pub(crate) fn write_back(
    granted: Option<Token>,
    held: Option<&Term>,
    sent: &str,
    current: &str,
) -> Option<Token> {
    match (granted, held) {
        (Some(g), Some(t)) if t.token == g && current != sent => Some(g),
        _ => None,
    }
}

/// After `written` was written on the term: the value to write next, if the candidate
/// still holds that term (`held`) and its value changed since the write began (`changes`
/// counts the changes; `seen` is the count then) to another one (`current`).
pub(crate) fn write_again(
    held: bool,
    seen: u64,
    changes: u64,
    written: &str,
    current: &str,
) -> Option<String> {
    (held && changes != seen && current != written).then(|| current.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_changed_during_an_attempt_is_written_on_the_term_it_won() {
        let name = LeaseName::new("e").unwrap();
        let term = |t| Term {
            name: name.clone(),
            token: Token::new(t).unwrap(),
            remaining: std::time::Duration::from_secs(1),
        };
        let (t1, t2) = (Token::new(1).unwrap(), Token::new(2).unwrap());
        assert_eq!(write_back(Some(t1), Some(&term(1)), "a", "b"), Some(t1));
        assert_eq!(write_back(Some(t1), Some(&term(1)), "a", "a"), None);
        assert_eq!(write_back(Some(t2), Some(&term(1)), "a", "b"), None);
        assert_eq!(write_back(None, Some(&term(1)), "a", "b"), None);
        assert_eq!(write_again(true, 1, 2, "b", "c").as_deref(), Some("c"));
        assert_eq!(write_again(true, 2, 2, "b", "c"), None);
        assert_eq!(write_again(false, 1, 2, "b", "c"), None);
        assert_eq!(write_again(true, 1, 3, "b", "b"), None);
    }
}
