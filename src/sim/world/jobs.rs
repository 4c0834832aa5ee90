//! Run-once callers: threads that call `run_once` for a job name on their own schedule. A
//! claim's local deadline is the driver's `jobs::deadline`; while the job runs, its claim is
//! believed exactly while the driver's `jobs::holds` says so (what `Job::is_valid`
//! answers). Some jobs run longer than their claim; when the job returns, the claim is
//! finished as the session that made it.

use super::network::{Chan, Op, Rep};
use super::{JobThread, Run, World};
use crate::engine::driver::jobs;
use crate::error::Result;
use crate::sim::check::Held;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Instant;

impl World<'_> {
    /// Calls `run_once` where due, and finishes the jobs that returned.
    pub(super) fn job_step(&mut self, c: usize) {
        let t = self.now;
        let (at_most, at_least) = (self.cfg.at_most, self.cfg.at_least);
        for i in 0..self.clients[c].jobbers.len() {
            let cl = &mut self.clients[c];
            let live = cl.core.as_ref().is_some_and(|k| k.check_live().is_ok());
            let j = &mut cl.jobbers[i];
            match &j.thread {
                JobThread::Idle if t >= j.next => {
                    let name = j.name.clone();
                    if !live {
                        // `run_once` fails at once on a lost session.
                        j.next = t + self.timing.retry.as_nanos() as u64;
                        continue;
                    }
                    j.thread = JobThread::Claiming;
                    self.send(c, Op::ClaimJob(name, at_most), Chan::Caller);
                }
                JobThread::Running(r) if t >= r.ends => {
                    let (name, token, session) = (j.name.clone(), r.token, r.session.clone());
                    j.thread = JobThread::Finishing;
                    if let Some(b) = cl.jobs_open.remove(&name) {
                        self.close_belief(b, "job returned");
                    }
                    self.tr(Some(c), Some(&name), || format!("job {name} returned"));
                    let op = Op::FinishJob(name, token, at_least);
                    self.send_for(c, op, Chan::Caller, Some(session));
                }
                _ => {}
            }
        }
    }

    /// The claim of job `name`, sent at `sent` for `session`, was answered: a claimed job
    /// runs (for a while, sometimes longer than its claim); a busy or failed one waits for
    /// the caller's next schedule.
    pub(super) fn claimed(
        &mut self,
        c: usize,
        name: &LeaseName,
        sent: Instant,
        reply: Result<Rep>,
        session: Option<SessionId>,
    ) {
        let t = self.now;
        let local = self.local(c, t);
        let at_most = self.cfg.at_most;
        let ns = at_most.as_nanos() as u64;
        let Some(i) = self.clients[c].jobbers.iter().position(|j| &j.name == name) else {
            return;
        };
        let drift = self.timing.drift;
        let claim = match (reply, session) {
            (Ok(Rep::Job(r)), Some(session)) => jobs::claimed(session, r, sent, at_most, drift),
            _ => None,
        };
        let Some(jobs::Claimed {
            session,
            token,
            deadline,
        }) = claim
        else {
            let pause = self.rng.range(ns / 4, ns);
            let j = &mut self.clients[c].jobbers[i];
            j.thread = JobThread::Idle;
            j.next = t + pause;
            return;
        };
        let runs = self.rng.range(ns / 8, ns + ns / 4);
        let holds = (self.clients[c].core.as_ref())
            .is_some_and(|k| jobs::holds(k, &session, deadline, local));
        self.tr(Some(c), Some(name), || {
            format!("runs job {name} token {token} (valid: {holds})")
        });
        self.clients[c].jobbers[i].thread = JobThread::Running(Run {
            token,
            session,
            deadline,
            ends: t + runs,
        });
        if holds {
            self.open_belief(c, 0, name, token, Held::Job);
        }
    }

    /// The finish of job `name` was answered: the caller runs it again on its next schedule.
    pub(super) fn finished(
        &mut self,
        c: usize,
        name: &LeaseName,
        token: Token,
        reply: Result<Rep>,
    ) {
        let reply = reply.map(|r| match r {
            Rep::Flag(done) => done,
            other => unreachable!("finish reply {other:?}"),
        });
        jobs::finished(name, token, reply);
        let ns = self.cfg.at_most.as_nanos() as u64;
        let pause = self.rng.range(ns / 4, ns);
        let t = self.now;
        if let Some(j) = self.clients[c].jobbers.iter_mut().find(|j| &j.name == name) {
            j.thread = JobThread::Idle;
            j.next = t + pause;
        }
    }
}
