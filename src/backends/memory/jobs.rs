//! Run-once jobs in memory: claims bound to their session, windows kept after a finish.

use super::*;

impl MemoryBackend {
    pub(super) fn job_claim(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        crate::backends::jobs::check_at_most(at_most)?;
        let now = self.clock.now();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        if t.live(session, now).is_none() {
            return Err(t.expired(session));
        }
        let sessions = &t.sessions;
        let live = |id: &SessionId| sessions.get(id).is_some_and(|s| s.expires > now);
        let mut token = 0;
        if let Some(j) = t.jobs.get(name) {
            if j.until > now && (!j.running || live(&j.holder)) {
                return Ok(JobClaim::Busy {
                    remaining: j.until - now,
                });
            }
            token = j.token;
        }
        let token = Token::new(token + 1)?;
        t.jobs.insert(
            name.clone(),
            JobRow {
                holder: session.clone(),
                token: token.get(),
                started: now,
                until: now + at_most,
                running: true,
            },
        );
        Ok(JobClaim::Claimed {
            token,
            remaining: at_most,
        })
    }

    pub(super) fn job_finish(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        crate::backends::jobs::check_at_least(at_least)?;
        let now = self.clock.now();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        // An ended session holds nothing, so its finish changes nothing.
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        match t.jobs.get_mut(name) {
            Some(j)
                if j.running && j.holder == *session && j.token == token.get() && j.until > now =>
            {
                j.running = false;
                j.until = j.started + at_least;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
