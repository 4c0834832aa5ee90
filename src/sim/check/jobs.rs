//! The run-once rule: a job name runs at most once per window. A claim that finished keeps
//! its name until `at_least` after it began (backend clock), so no other claim of the name
//! may begin before then; claims' tokens rise. (Two runs believed valid at once are the
//! single-believer rule over the jobs' beliefs.)

use super::{Kind, Violation};
use crate::sim::model::{session_no, JobEntry};
use crate::sim::world::secs;
use crate::types::{LeaseName, SessionId, Token};
use std::collections::BTreeMap;

struct Claim<'a> {
    at: u64,
    token: Token,
    session: &'a SessionId,
    /// `at_least` of its finish, once it finished.
    finished: Option<u64>,
}

/// Checks the backend's log of job claims and finishes: each claim of a name begins no
/// earlier than `at_least` after the start of the previous claim if that one finished, and
/// carries a token above the previous one.
pub fn check_jobs(log: &[JobEntry], out: &mut Vec<Violation>) {
    let mut last: BTreeMap<&LeaseName, Claim<'_>> = BTreeMap::new();
    for e in log {
        if e.finish {
            if let Some(c) = last.get_mut(&e.name).filter(|c| c.token == e.token) {
                c.finished = Some(e.window);
            }
            continue;
        }
        if let Some(p) = last.get(&e.name) {
            let mut report = |kind, what: String| {
                out.push(Violation {
                    kind,
                    at: e.true_at,
                    name: Some(e.name.clone()),
                    clients: Vec::new(),
                    what,
                })
            };
            if e.token <= p.token {
                report(
                    Kind::TokenRegression,
                    format!(
                        "job {}: claim token {} after token {}",
                        e.name, e.token, p.token
                    ),
                );
            }
            if let Some(at_least) = p.finished.filter(|l| e.at < p.at + l) {
                report(
                    Kind::JobRerun,
                    format!(
                        "job {}: s{} claimed it at {} (backend clock), within the window of s{}'s run that began at {} and finished (at_least {})",
                        e.name,
                        session_no(&e.session),
                        secs(e.at),
                        session_no(p.session),
                        secs(p.at),
                        secs(at_least)
                    ),
                );
            }
        }
        let claim = Claim {
            at: e.at,
            token: e.token,
            session: &e.session,
            finished: None,
        };
        last.insert(&e.name, claim);
    }
}
