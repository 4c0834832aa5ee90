//! Run-once jobs on Redis: one hash per job, `{prefix}:job:{name}`, never expiring (its
//! `token` field keeps tokens increasing, like a lease hash), with `session`, `started`,
//! `until` (this node's `TIME`, ms) and `running`. `lua/claim_job.lua` and
//! `lua/finish_job.lua` decide on the job's node alone.
//!
//! One server: the scripts also read the session hashes (the claimer's is declared, the
//! holder's is found by prefix), so a running claim ends with its session. Routed by slot (a
//! Cluster), session hashes live in other slots: a PTTL of the claimer's session comes first
//! (one more round trip, as for release), and a running claim lasts until its `at_most`
//! whatever becomes of its session; the price of a crashed holder is the rest of `at_most`.
//! With `wait_replicas`, a claim counts only once that many replicas acknowledged it
//! (`WAIT`); otherwise it is given up (finished with no `at_least`) and the call fails.
//! Like lease hashes, job hashes must never be evicted (`maxmemory-policy noeviction`): an
//! evicted one starts its tokens again at 1.

use super::backend::{lease_ms, RedisBackend};
use super::reply::{bad_reply, expired, flag, int_at, millis, token};
use super::scripting::{Reply, Role};
use super::scripts::scripts;
use crate::backends::jobs::{check_at_least, check_at_most, ms};
use crate::error::Result;
use crate::spi::JobClaim;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Duration;

impl RedisBackend {
    fn job_key(&self, name: &LeaseName) -> String {
        format!("{}:job:{{{}}}", self.base.keys.prefix, name.as_str())
    }

    /// The keys of a job script: the job, and on one node the session.
    fn job_keys(&self, session: &SessionId, name: &LeaseName) -> Vec<String> {
        let mut keys = vec![self.job_key(name)];
        if self.flavor.is_one_node() {
            keys.push(self.base.keys.session(session));
        }
        keys
    }

    pub(super) fn claim_job_script(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        const OP: &str = "claiming a job";
        check_at_most(at_most)?;
        if !self.flavor.live_before_change(&self.base, session)? {
            return Err(expired(session));
        }
        let keys = self.job_keys(session, name);
        let sprefix = self.flavor.live_sessions_prefix(&self.base.keys);
        let args = [session.to_string(), lease_ms(at_most).to_string(), sprefix];
        let s = &scripts().claim_job;
        let b = &self.base;
        let (r, acked) = if b.cfg.wait_replicas == 0 {
            (b.eval(Role::Other, s, &keys, &args)?, None)
        } else {
            let claimed = |r: &Reply| r.as_array().and_then(|a| a.first()?.as_int()) == Some(1);
            b.scripting.eval_then_wait(
                s,
                &keys,
                &args,
                &claimed,
                b.cfg.wait_replicas,
                b.wait_timeout(),
            )?
        };
        let claim = match r.as_array() {
            Some([x]) if x.as_int() == Some(-1) => return Err(expired(session)),
            Some([_, _, _]) if int_at(OP, &r, 0)? == 1 => JobClaim::Claimed {
                token: token(OP, int_at(OP, &r, 1)?)?,
                remaining: millis(OP, &r, int_at(OP, &r, 2)?)?,
            },
            Some([_, _]) if int_at(OP, &r, 0)? == 0 => JobClaim::Busy {
                remaining: millis(OP, &r, int_at(OP, &r, 1)?)?,
            },
            _ => return Err(bad_reply(OP, &r)),
        };
        let n = b.cfg.wait_replicas;
        match (acked, &claim) {
            (Some(acked), JobClaim::Claimed { token: t, .. }) if acked < n => {
                let undone = self.finish_job_script(session, name, *t, Duration::ZERO);
                Err(super::failure::error(
                    OP,
                    format!(
                        "only {acked} of {n} replicas acknowledged the claim of job {name:?} \
                         (token {t}); the claim was given up{}",
                        match undone {
                            Ok(_) => String::new(),
                            Err(e) => format!(
                                " (that failed too: {e}; it ends with its session or at_most)"
                            ),
                        }
                    ),
                ))
            }
            _ => Ok(claim),
        }
    }

    pub(super) fn finish_job_script(
        &self,
        session: &SessionId,
        name: &LeaseName,
        job_token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        check_at_least(at_least)?;
        if !self.flavor.live_before_change(&self.base, session)? {
            return Ok(false);
        }
        let r = self.base.eval(
            Role::Other,
            &scripts().finish_job,
            &self.job_keys(session, name),
            &[
                session.to_string(),
                job_token.get().to_string(),
                ms(at_least).to_string(),
            ],
        )?;
        flag("finishing a job", &r)
    }
}
