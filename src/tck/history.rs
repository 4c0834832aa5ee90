//! Recorded histories and their checker: what clients saw (grants with their tokens,
//! losses, unlocks), each with its monotonic time in one process, and the rules every
//! history must keep whatever the network did:
//!
//! * no two clients believe they hold the same name at once (a belief runs from the grant
//!   to the first of its loss event, the guard found invalid, or the unlock);
//! * a name's tokens increase strictly in the order of its grants (never reused, never
//!   back).
//!
//! [`check`] names the first counter-example. The recorder is shared by the clients'
//! threads.

use crate::types::{LeaseName, Token};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::Instant;

/// What a client saw, in a [`History`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A lock call returned a guard with `token`.
    Granted(Token),
    /// The guard's loss event arrived (or the guard was found invalid).
    Lost,
    /// The client began to unlock (it no longer relies on the term).
    Unlocking,
    /// A lock call failed (timed out, the session expired, a backend error): `why`.
    Failed(String),
}

/// One recorded step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// When (monotonic, one process).
    pub at: Instant,
    /// Which client.
    pub client: usize,
    /// Of which name.
    pub name: LeaseName,
    /// What.
    pub step: Step,
}

/// A history, recorded by many threads.
#[derive(Debug, Default)]
pub struct History {
    entries: Mutex<Vec<Entry>>,
}

impl History {
    /// Records `step` of `client` on `name` now.
    pub fn record(&self, client: usize, name: &LeaseName, step: Step) {
        self.record_at(Instant::now(), client, name, step);
    }

    /// Records `step` of `client` on `name` at `at` (a loss at the deadline the guard had
    /// promised, when the client noticed later).
    pub fn record_at(&self, at: Instant, client: usize, name: &LeaseName, step: Step) {
        let name = name.clone();
        self.entries.lock().push(Entry {
            at,
            client,
            name,
            step,
        });
    }

    /// The entries so far, in time order.
    pub fn entries(&self) -> Vec<Entry> {
        let mut e = self.entries.lock().clone();
        e.sort_by_key(|e| e.at);
        e
    }
}

/// A term as a client believed it: from its grant to the end of the belief.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Belief {
    /// The client.
    pub client: usize,
    /// The name.
    pub name: LeaseName,
    /// The token.
    pub token: Token,
    /// When the client got it.
    pub from: Instant,
    /// When the belief ended (the end of the history if it never did).
    pub until: Instant,
}

/// What a checked history held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Grants.
    pub grants: usize,
    /// Losses heard.
    pub losses: usize,
    /// Failed calls.
    pub failures: usize,
}

/// Checks `entries` (in time order): the beliefs of a name never overlap and its tokens
/// increase with its grants. The first counter-example is the error.
pub fn check(entries: &[Entry]) -> Result<Summary, String> {
    let mut summary = Summary::default();
    let end = entries.last().map(|e| e.at);
    let mut open: BTreeMap<(usize, LeaseName), Belief> = BTreeMap::new();
    let mut beliefs: Vec<Belief> = Vec::new();
    let mut last_token: BTreeMap<LeaseName, (Token, usize)> = BTreeMap::new();
    for e in entries {
        let key = (e.client, e.name.clone());
        match &e.step {
            Step::Granted(token) => {
                summary.grants += 1;
                if let Some((before, by)) = last_token.get(&e.name) {
                    if token <= before {
                        return Err(format!(
                            "{}: client {} was granted token {token} after client {by} was \
                             granted token {before}",
                            e.name, e.client
                        ));
                    }
                }
                last_token.insert(e.name.clone(), (*token, e.client));
                if let Some(b) = open.remove(&key) {
                    beliefs.push(Belief { until: e.at, ..b });
                }
                let belief = Belief {
                    client: e.client,
                    name: e.name.clone(),
                    token: *token,
                    from: e.at,
                    until: e.at,
                };
                open.insert(key, belief);
            }
            Step::Lost | Step::Unlocking => {
                summary.losses += usize::from(e.step == Step::Lost);
                if let Some(b) = open.remove(&key) {
                    beliefs.push(Belief { until: e.at, ..b });
                }
            }
            Step::Failed(_) => summary.failures += 1,
        }
    }
    for (_, b) in open {
        let until = end.unwrap_or(b.from);
        beliefs.push(Belief { until, ..b });
    }
    let mut by_name: BTreeMap<&LeaseName, Vec<&Belief>> = BTreeMap::new();
    for b in &beliefs {
        by_name.entry(&b.name).or_default().push(b);
    }
    for (name, mut list) in by_name {
        list.sort_by_key(|b| b.from);
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.from < a.until && a.client != b.client {
                let overlap = a.until.duration_since(b.from);
                return Err(format!(
                    "{name}: client {} (token {}) and client {} (token {}) both believed they \
                     held it for {overlap:?}",
                    a.client, a.token, b.client, b.token
                ));
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(at: Instant, ms: u64, client: usize, step: Step) -> Entry {
        Entry {
            at: at + Duration::from_millis(ms),
            client,
            name: LeaseName::new("n").unwrap(),
            step,
        }
    }

    fn t(n: u64) -> Token {
        Token::new(n).unwrap()
    }

    #[test]
    fn a_clean_history_passes_and_is_summed_up() {
        let t0 = Instant::now();
        let h = [
            entry(t0, 0, 0, Step::Granted(t(1))),
            entry(t0, 10, 0, Step::Unlocking),
            entry(t0, 11, 1, Step::Granted(t(2))),
            entry(t0, 20, 1, Step::Lost),
            entry(t0, 25, 0, Step::Failed("timed out".into())),
            entry(t0, 30, 0, Step::Granted(t(3))),
        ];
        let s = check(&h).unwrap();
        assert_eq!((s.grants, s.losses, s.failures), (3, 1, 1));
    }

    #[test]
    fn overlapping_beliefs_are_named() {
        let t0 = Instant::now();
        let h = [
            entry(t0, 0, 0, Step::Granted(t(1))),
            entry(t0, 5, 1, Step::Granted(t(2))),
            entry(t0, 10, 0, Step::Lost),
        ];
        let e = check(&h).unwrap_err();
        assert!(e.contains("both believed") && e.contains("5ms"), "{e}");
    }

    #[test]
    fn a_token_not_above_the_last_is_named() {
        let t0 = Instant::now();
        let h = [
            entry(t0, 0, 0, Step::Granted(t(4))),
            entry(t0, 5, 0, Step::Unlocking),
            entry(t0, 6, 1, Step::Granted(t(4))),
        ];
        let e = check(&h).unwrap_err();
        assert!(e.contains("token 4 after"), "{e}");
    }
}
