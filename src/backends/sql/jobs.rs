//! Run-once jobs on SQL: one row per job name in `simba_job`, never deleted (its `token`
//! never resets), with the holder `session_id`, `started_at` and `until_at` (database time,
//! UTC epoch ms) and `running` (1 while the job runs: the claim then also ends with its
//! session). The statements are text, prepared on first use like the queue's, so tables
//! from before the job table still serve everything else.
//!
//! A claim is one `UPDATE` that takes the row when it is free and the claimer's session is
//! live (PostgreSQL: in a transaction that first locks the row `FOR UPDATE`, so the update's
//! snapshot is taken after a concurrent claim committed; MySQL/MariaDB: one autocommit
//! statement, whose subqueries on the session table are locking, current reads). When it
//! takes nothing, one `SELECT` tells a missing row (inserted free, then the claim runs
//! again), an expired claimer, or the time the name stays taken. A finish is one `UPDATE`.
//!
//! Round trips: a claim of a free job 4 on PostgreSQL (`BEGIN`, the row lock, the claim,
//! `COMMIT`) and 2 on MySQL/MariaDB (the claim, then a read of its token); of a taken job
//! one read more (MySQL: the claim that took nothing and the read); the first claim of a
//! name also inserts its row and claims again. A finish is 1.

use super::backend::{remaining, token};
use super::tables::Tables;
use super::{Dialect, SqlBackend};
use crate::backends::jobs::{check_at_least, check_at_most, ms};
use crate::error::Result;
use crate::spi::JobClaim;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Duration;

/// A job row as the report statement reads it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct JobReport {
    /// Whether the asking session is live.
    pub(crate) me_live: bool,
    /// Whether the row exists.
    pub(crate) exists: bool,
    /// Whether the job is taken (until ahead, and not running for a dead session).
    pub(crate) taken: bool,
    /// µs until `until_at`.
    pub(crate) remaining_us: i64,
}

/// The job statements of one dialect.
#[derive(Clone, Debug)]
pub(crate) struct JobSql {
    /// PostgreSQL: `$1` name. Locks the row (in the claim's transaction).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) lock: String,
    /// PostgreSQL: `$1` session, `$2` name, `$3` at_most ms; returns token and remaining µs.
    /// MySQL: session, at_most, name, session.
    pub(crate) claim: String,
    /// MySQL: name, session; the token and remaining µs of the session's running claim.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) claimed: String,
    /// PostgreSQL: `$1` session, `$2` name. MySQL: session, name. One row: me live, row
    /// exists, taken, remaining µs.
    pub(crate) report: String,
    /// PostgreSQL: `$1` name. MySQL: name. Inserts the free row if missing.
    pub(crate) create: String,
    /// PostgreSQL: `$1` session, `$2` name, `$3` token, `$4` at_least ms.
    /// MySQL: at_least, name, session, token, session.
    pub(crate) finish: String,
}

impl JobSql {
    /// The statements for `t`, with the dialect's `now` (UTC epoch ms) and `now_us`.
    pub(crate) fn new(t: &Tables, dialect: Dialect, now: &str, now_us: &str) -> Self {
        let (s, j) = (&t.session, &t.job);
        let holder_dead = format!(
            "NOT EXISTS (SELECT 1 FROM {s} x WHERE x.session_id = j.session_id \
             AND x.expires_at > {now})"
        );
        let taken = format!("(j.until_at > {now} AND (j.running = 0 OR NOT {holder_dead}))");
        match dialect {
            Dialect::Postgres => {
                let me = format!(
                    "EXISTS (SELECT 1 FROM {s} m WHERE m.session_id = $1 AND m.expires_at > {now})"
                );
                JobSql {
                    lock: format!("SELECT 1 FROM {j} WHERE name = $1 FOR UPDATE"),
                    claim: format!(
                        "UPDATE {j} j SET token = j.token + 1, session_id = $1, \
                         started_at = {now}, until_at = {now} + $3::int8, running = 1 \
                         WHERE j.name = $2 AND {me} AND NOT {taken} \
                         RETURNING j.token, j.until_at * 1000 - {now_us}"
                    ),
                    claimed: String::new(),
                    report: format!(
                        "SELECT (CASE WHEN {me} THEN 1 ELSE 0 END)::int8, \
                         (CASE WHEN j.name IS NOT NULL THEN 1 ELSE 0 END)::int8, \
                         (CASE WHEN {taken} THEN 1 ELSE 0 END)::int8, \
                         COALESCE(j.until_at * 1000 - {now_us}, 0) \
                         FROM (SELECT 1) one LEFT JOIN {j} j ON j.name = $2"
                    ),
                    create: format!(
                        "INSERT INTO {j} (name, session_id, token, started_at, until_at, running) \
                         VALUES ($1, '', 0, 0, 0, 0) ON CONFLICT (name) DO NOTHING"
                    ),
                    finish: format!(
                        "UPDATE {j} j SET until_at = j.started_at + $4::int8, running = 0 \
                         WHERE j.name = $2 AND j.session_id = $1 AND j.token = $3::int8 \
                         AND j.running = 1 AND j.until_at > {now} AND {me}"
                    ),
                }
            }
            Dialect::Mysql => {
                let me = format!(
                    "EXISTS (SELECT 1 FROM {s} m WHERE m.session_id = ? AND m.expires_at > {now})"
                );
                JobSql {
                    lock: String::new(),
                    // MySQL assigns left to right; no assignment reads another here.
                    claim: format!(
                        "UPDATE {j} j SET j.token = j.token + 1, j.session_id = ?, \
                         j.started_at = {now}, j.until_at = {now} + ?, j.running = 1 \
                         WHERE j.name = ? AND {me} AND NOT {taken}"
                    ),
                    claimed: format!(
                        "SELECT token, until_at * 1000 - {now_us} FROM {j} \
                         WHERE name = ? AND session_id = ? AND running = 1"
                    ),
                    report: format!(
                        "SELECT CASE WHEN {me} THEN 1 ELSE 0 END, \
                         CASE WHEN j.name IS NOT NULL THEN 1 ELSE 0 END, \
                         CASE WHEN {taken} THEN 1 ELSE 0 END, \
                         COALESCE(j.until_at * 1000 - {now_us}, 0) \
                         FROM (SELECT 1) one LEFT JOIN {j} j ON j.name = ?"
                    ),
                    create: format!(
                        "INSERT INTO {j} (name, session_id, token, started_at, until_at, running) \
                         VALUES (?, '', 0, 0, 0, 0) ON DUPLICATE KEY UPDATE name = name"
                    ),
                    finish: format!(
                        "UPDATE {j} j SET j.until_at = j.started_at + ?, j.running = 0 \
                         WHERE j.name = ? AND j.session_id = ? AND j.token = ? \
                         AND j.running = 1 AND j.until_at > {now} AND {me}"
                    ),
                }
            }
        }
    }
}

impl SqlBackend {
    pub(super) fn claim_job_sql(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        const OP: &str = "claiming a job";
        check_at_most(at_most)?;
        let at_most_ms = i64::try_from(ms(at_most)).unwrap_or(i64::MAX);
        let (id, n) = (session.as_str(), name.as_str());
        // A free row is taken at the first try; a missing one is inserted, then taken.
        for _ in 0..3 {
            let got = self
                .driver
                .job_claim(id, n, at_most_ms)
                .map_err(|e| self.err(OP, e))?;
            if let Some((t, us)) = got {
                return Ok(JobClaim::Claimed {
                    token: token(t)?,
                    remaining: remaining(us).min(at_most),
                });
            }
            let r = self.driver.job_report(id, n).map_err(|e| self.err(OP, e))?;
            if !r.me_live {
                return Err(Self::expired(session));
            }
            if !r.exists {
                self.driver.job_create(n).map_err(|e| self.err(OP, e))?;
            } else if r.taken {
                return Ok(JobClaim::Busy {
                    remaining: remaining(r.remaining_us),
                });
            }
            // Freed between the two statements: claim again.
        }
        Err(super::failure::error(
            OP,
            format!("job {name} kept changing hands"),
        ))
    }

    pub(super) fn finish_job_sql(
        &self,
        session: &SessionId,
        name: &LeaseName,
        job_token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        check_at_least(at_least)?;
        let at_least_ms = i64::try_from(ms(at_least)).unwrap_or(i64::MAX);
        let t = i64::try_from(job_token.get()).unwrap_or(i64::MAX);
        self.driver
            .job_finish(session.as_str(), name.as_str(), t, at_least_ms)
            .map_err(|e| self.err("finishing a job", e))
    }
}
