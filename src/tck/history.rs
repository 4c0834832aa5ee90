//! Recorded histories and their checker: what clients saw (grants with their tokens,
//! losses, unlocks), each with its monotonic time in one process, and the rules every
//! history must keep whatever the network did:
//!
//! * no two clients believe they hold the same name at once (a belief runs from the grant
//!   to the first of its loss event, the guard found invalid, or the unlock), but for two
//!   read terms of a read-write lock;
//! * a lease's or a write term's token is above every token granted before it (never
//!   reused, never back), a read term's above every write term's before it.
//!
//! [`check`] names the first counter-example. The recorder is shared by the clients'
//! threads.

use crate::spi::RwMode;
use crate::types::{LeaseName, Token};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::Instant;

/// What a client saw, in a [`History`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A lock call returned a guard with `token`.
    Granted(Token),
    /// A read-write lock's call returned a guard of `mode` with `token` (a read-write lock's
    /// name is a name of its own, apart from a lease of the same name).
    GrantedRw(Token, RwMode),
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
    /// A read-write term's mode (none: a lease's).
    pub mode: Option<RwMode>,
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
    // Keyed by client, read-write or not, and name.
    let mut open: BTreeMap<(usize, bool, LeaseName), Belief> = BTreeMap::new();
    let mut beliefs: Vec<Belief> = Vec::new();
    // Per name: the highest token granted, and the highest of a lease or write term.
    let mut highest: BTreeMap<(bool, LeaseName), (Token, usize)> = BTreeMap::new();
    let mut exclusive: BTreeMap<(bool, LeaseName), (Token, usize)> = BTreeMap::new();
    let mut last_rw: BTreeMap<(usize, LeaseName), bool> = BTreeMap::new();
    for e in entries {
        let (token, mode) = match &e.step {
            Step::Granted(t) => (*t, None),
            Step::GrantedRw(t, m) => (*t, Some(*m)),
            Step::Lost | Step::Unlocking => {
                summary.losses += usize::from(e.step == Step::Lost);
                let rw = last_rw.get(&(e.client, e.name.clone())).copied();
                let key = (e.client, rw.unwrap_or(false), e.name.clone());
                if let Some(b) = open.remove(&key) {
                    beliefs.push(Belief { until: e.at, ..b });
                }
                continue;
            }
            Step::Failed(_) => {
                summary.failures += 1;
                continue;
            }
        };
        summary.grants += 1;
        let rw = mode.is_some();
        let name = (rw, e.name.clone());
        // A read term need only be above the writes before it.
        let bound = match mode {
            Some(RwMode::Read) => exclusive.get(&name),
            _ => highest.get(&name),
        };
        if let Some((before, by)) = bound {
            if token <= *before {
                return Err(format!(
                    "{}: client {} was granted token {token} after client {by} was granted \
                     token {before}",
                    e.name, e.client
                ));
            }
        }
        let top = highest.entry(name.clone()).or_insert((token, e.client));
        if token > top.0 {
            *top = (token, e.client);
        }
        if mode != Some(RwMode::Read) {
            exclusive.insert(name, (token, e.client));
        }
        last_rw.insert((e.client, e.name.clone()), rw);
        let key = (e.client, rw, e.name.clone());
        if let Some(b) = open.remove(&key) {
            beliefs.push(Belief { until: e.at, ..b });
        }
        let belief = Belief {
            client: e.client,
            name: e.name.clone(),
            token,
            mode,
            from: e.at,
            until: e.at,
        };
        open.insert(key, belief);
    }
    for (_, b) in open {
        let until = end.unwrap_or(b.from);
        beliefs.push(Belief { until, ..b });
    }
    let mut by_name: BTreeMap<(bool, &LeaseName), Vec<&Belief>> = BTreeMap::new();
    for b in &beliefs {
        by_name
            .entry((b.mode.is_some(), &b.name))
            .or_default()
            .push(b);
    }
    for ((_, name), mut list) in by_name {
        list.sort_by_key(|b| b.from);
        // Each belief against every later one that began before it ended.
        for (i, a) in list.iter().enumerate() {
            for b in list[i + 1..].iter().take_while(|b| b.from < a.until) {
                let readers = a.mode == Some(RwMode::Read) && b.mode == Some(RwMode::Read);
                if a.client != b.client && !readers {
                    let overlap = a.until.min(b.until).duration_since(b.from);
                    return Err(format!(
                        "{name}: client {} (token {}{}) and client {} (token {}{}) both \
                         believed they held it for {overlap:?}",
                        a.client,
                        a.token,
                        mode_str(a.mode),
                        b.client,
                        b.token,
                        mode_str(b.mode)
                    ));
                }
            }
        }
    }
    Ok(summary)
}

fn mode_str(mode: Option<RwMode>) -> &'static str {
    match mode {
        None => "",
        Some(RwMode::Read) => ", read",
        Some(RwMode::Write) => ", write",
    }
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

    #[test]
    fn readers_share_writers_do_not_and_a_read_is_above_the_last_write() {
        let t0 = Instant::now();
        let (r, w) = (RwMode::Read, RwMode::Write);
        let readers = [
            entry(t0, 0, 0, Step::GrantedRw(t(2), r)),
            entry(t0, 1, 1, Step::GrantedRw(t(1), r)),
            entry(t0, 5, 0, Step::Unlocking),
            entry(t0, 6, 1, Step::Unlocking),
            // A lease of the same name is another name.
            entry(t0, 2, 2, Step::Granted(t(1))),
        ];
        let mut readers = readers.to_vec();
        readers.sort_by_key(|e| e.at);
        assert_eq!(check(&readers).unwrap().grants, 3);
        let writer_with_reader = [
            entry(t0, 0, 0, Step::GrantedRw(t(1), r)),
            entry(t0, 1, 1, Step::GrantedRw(t(2), w)),
            entry(t0, 9, 0, Step::Unlocking),
        ];
        let e = check(&writer_with_reader).unwrap_err();
        assert!(e.contains("write") && e.contains("both believed"), "{e}");
        let stale_read = [
            entry(t0, 0, 0, Step::GrantedRw(t(3), w)),
            entry(t0, 1, 0, Step::Unlocking),
            entry(t0, 2, 1, Step::GrantedRw(t(3), r)),
        ];
        assert!(check(&stale_read).unwrap_err().contains("token 3 after"));
    }
}
