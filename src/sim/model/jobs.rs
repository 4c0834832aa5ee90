//! Run-once jobs in the model: claims, finishes and the log the checker reads (as
//! `MemoryBackend`'s jobs).

use super::{JobEntry, JobRow, Model};
use crate::error::Result;
use crate::spi::JobClaim;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Duration;

impl Model {
    /// Claims the run-once job `name` for `id` at true time `t` for at most `at_most` (by the
    /// backend's clock), as `MemoryBackend::claim_job`.
    pub fn claim_job(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        self.check_live(t, id)?;
        let now = self.clock(t);
        let mut token = 0;
        if let Some(j) = self.tables.jobs.get(name) {
            let holder_live = self.live(&j.holder, now).is_some();
            if j.until > now && (!j.running || holder_live) {
                return Ok(JobClaim::Busy {
                    remaining: Duration::from_nanos(j.until - now),
                });
            }
            token = j.token;
        }
        let token = Token::new(token + 1).expect("above zero");
        let window = at_most.as_nanos() as u64;
        self.tables.jobs.insert(
            name.clone(),
            JobRow {
                holder: id.clone(),
                token: token.get(),
                started: now,
                until: now + window,
                running: true,
            },
        );
        self.log_job(t, name, id, token, false, window);
        Ok(JobClaim::Claimed {
            token,
            remaining: at_most,
        })
    }

    /// Finishes `id`'s running claim of `name` with `token` at true time `t`: the name stays
    /// taken until the claim's start plus `at_least`. Whether `id` held that claim.
    pub fn finish_job(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> bool {
        let now = self.clock(t);
        if self.live(id, now).is_none() {
            return false;
        }
        let lost = self.lost_windows;
        let window = at_least.as_nanos() as u64;
        match self.tables.jobs.get_mut(name) {
            Some(j) if j.running && j.holder == *id && j.token == token.get() && j.until > now => {
                j.running = false;
                // Premise `lost_windows`: the name is free at once.
                j.until = if lost { now } else { j.started + window };
                self.log_job(t, name, id, token, true, window);
                true
            }
            _ => false,
        }
    }

    fn log_job(
        &mut self,
        t: u64,
        name: &LeaseName,
        id: &SessionId,
        token: Token,
        finish: bool,
        window: u64,
    ) {
        self.job_log.push(JobEntry {
            at: self.clock(t),
            true_at: t,
            name: name.clone(),
            session: id.clone(),
            token,
            finish,
            window,
        });
    }
}
