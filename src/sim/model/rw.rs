//! Read-write locks in the model backend, as `MemoryBackend` keeps them: one record per
//! name (one token counter, the writer, the readers, the waiting writers in arrival order
//! with their patience, the terms in their lock-delay), every holder and waiter bound to its
//! session, on the backend's clock; the premises `shared_writers` and `lost_rw_delays`, and
//! the logs of grants and of expired and new terms the checker reads.

use super::{DelayStep, Model, Tables};
use crate::error::Result;
use crate::spi::{HeldRw, RwAcquire, RwDelayed, RwMode, RwState};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::collections::BTreeMap;
use std::time::Duration;

/// A session's expiry and lock-delay (backend time, ns).
type Expiry = (u64, u64);

/// A read-write lock's record.
#[derive(Clone, Debug, Default)]
pub(super) struct RwRow {
    token: u64,
    writer: Option<(SessionId, u64)>,
    readers: BTreeMap<SessionId, u64>,
    /// Waiting writers in arrival order, each with its patience's end (backend time).
    waiting: Vec<(SessionId, u64)>,
    /// Terms that ended with their session's expiry, each with its lock-delay's end
    /// (backend time): a write term blocks every new term, a read term new writers.
    delayed: Vec<(SessionId, RwMode, u64, u64)>,
}

impl RwRow {
    /// The delayed write term's session, if one blocks every new term (after a prune).
    fn delayed_writer(&self) -> Option<&SessionId> {
        let mut writes = self.delayed.iter().filter(|d| d.1 == RwMode::Write);
        writes.next().map(|d| &d.0)
    }

    /// Busy, counting the terms in their lock-delay as holders.
    fn busy(&self) -> RwAcquire {
        let delayed_readers = self.delayed.iter().filter(|d| d.1 == RwMode::Read).count();
        let writer = self.writer.as_ref().map(|(id, _)| id);
        RwAcquire::Busy {
            writer: writer.or(self.delayed_writer()).cloned(),
            readers: self.readers.len() + delayed_readers,
            writers_waiting: self.waiting.len(),
        }
    }

    /// The terms held, as (session, mode, token).
    fn holders(&self) -> impl Iterator<Item = (&SessionId, RwMode, u64)> {
        let writer = self.writer.iter().map(|(id, t)| (id, RwMode::Write, *t));
        writer.chain(self.readers.iter().map(|(id, t)| (id, RwMode::Read, *t)))
    }

    /// The terms held, as (session, token).
    fn terms(&self) -> impl Iterator<Item = (&SessionId, u64)> {
        self.holders().map(|(id, _, t)| (id, t))
    }

    /// Forgets `id` as writer and reader.
    fn forget(&mut self, id: &SessionId) {
        self.writer.take_if(|(w, _)| w == id);
        self.readers.remove(id);
    }
}

/// One read-write lock grant the backend made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwGrant {
    /// True time of the grant (ns).
    pub at: u64,
    /// The read-write lock.
    pub name: LeaseName,
    /// The session it went to.
    pub session: SessionId,
    /// Read or write.
    pub mode: RwMode,
    /// The term's token.
    pub token: Token,
    /// Whether it began a new term (false: the holder asked again).
    pub new_term: bool,
}

/// One step of a read-write lock for the lock-delay rule (backend times).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwDelayEntry {
    /// Backend time (ns): when the term ended with its session's expiry, or began.
    pub at: u64,
    /// The read-write lock.
    pub name: LeaseName,
    /// The session of the term.
    pub session: SessionId,
    /// The term's side.
    pub mode: RwMode,
    /// The term's token.
    pub token: Token,
    /// What happened (`Expired` with the session's lock-delay, or `Granted`).
    pub step: DelayStep,
}

impl Model {
    /// One attempt of `id` at true time `t` to take the read-write lock `name` in `mode`,
    /// registering a writer that must wait for `patience` (zero: not at all), as
    /// `MemoryBackend::acquire_rw`; terms in their lock-delay block as holders. Premise
    /// `shared_writers`: readers do not keep a writer out.
    pub fn acquire_rw(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        let remaining = self.check_live(t, id)?;
        let now = self.clock(t);
        self.prune_rw(name, now);
        let shared = self.shared_writers;
        let row = self.tables.rw.entry(name.clone()).or_default();
        let held = match mode {
            RwMode::Read => row.readers.get(id).copied(),
            RwMode::Write => row.writer.as_ref().filter(|w| &w.0 == id).map(|w| w.1),
        };
        let (token, new_term) = match (held, mode) {
            (Some(token), _) => (token, false),
            (None, RwMode::Read) => {
                let delayed = row.delayed_writer().is_some();
                if row.writer.is_some() || delayed || !row.waiting.is_empty() {
                    self.rw_delay_refusals += u64::from(delayed);
                    return Ok(row.busy());
                }
                row.token += 1;
                row.readers.insert(id.clone(), row.token);
                (row.token, true)
            }
            (None, RwMode::Write) => {
                let place = row.waiting.iter().position(|(s, _)| s == id);
                let ahead = place.unwrap_or(row.waiting.len());
                let readers = !shared && !row.readers.is_empty();
                let delayed = !row.delayed.is_empty();
                if row.writer.is_some() || readers || delayed || ahead > 0 {
                    self.rw_delay_refusals += u64::from(delayed);
                    let until = now + patience.as_nanos() as u64;
                    match place {
                        Some(i) => row.waiting[i].1 = until,
                        None if patience.is_zero() => {}
                        None => row.waiting.push((id.clone(), until)),
                    }
                    return Ok(row.busy());
                }
                row.waiting.retain(|(s, _)| s != id);
                row.token += 1;
                row.writer = Some((id.clone(), row.token));
                (row.token, true)
            }
        };
        let token = Token::new(token).expect("tokens start at 1");
        if new_term {
            self.log_rw_delay(now, name, id, mode, token, DelayStep::Granted);
        }
        self.rw_log.push(RwGrant {
            at: t,
            name: name.clone(),
            session: id.clone(),
            mode,
            token,
            new_term,
        });
        Ok(RwAcquire::Acquired(Term {
            name: name.clone(),
            token,
            remaining,
        }))
    }

    /// Ends `id`'s `mode` term of `name` with `token` at true time `t`; whether it held it
    /// (an expired session holds nothing, so its release changes nothing).
    pub fn release_rw(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> bool {
        let now = self.clock(t);
        let Some(row) = self.tables.rw.get_mut(name) else {
            return false;
        };
        let tok = token.get();
        let holds = match mode {
            RwMode::Read => row.readers.get(id) == Some(&tok),
            RwMode::Write => row.writer.as_ref() == Some(&(id.clone(), tok)),
        };
        let expires = self.tables.sessions.get(id).map(|r| r.expires);
        match expires {
            Some(expires) if expires > now => {}
            _ => {
                if holds {
                    self.end_term(name, token, id, expires.unwrap_or(now).min(now));
                }
                return false;
            }
        }
        if !holds {
            return false;
        }
        match mode {
            RwMode::Read => {
                row.readers.remove(id);
            }
            RwMode::Write => row.writer = None,
        }
        self.end_term(name, token, id, now);
        true
    }

    /// Every read-write term session `id` holds, as a keep-alive lists them.
    pub(super) fn rw_held_by(&self, id: &SessionId) -> Vec<HeldRw> {
        let rows = self.tables.rw.iter();
        let mine = rows.flat_map(|(name, row)| {
            let of_id = row.holders().filter(|(s, _, _)| *s == id);
            of_id.map(|(_, mode, t)| HeldRw {
                name: name.clone(),
                mode,
                token: Token::new(t).expect("tokens start at 1"),
            })
        });
        mine.collect()
    }

    /// The read-write lock `name` at true time `t`, as `MemoryBackend::rw_state`: its live
    /// writer, readers and waiting writers, its newest token, and the terms in their
    /// lock-delay.
    pub fn rw_state(&self, t: u64, name: &LeaseName) -> RwState {
        let now = self.clock(t);
        let Some(row) = self.tables.rw.get(name) else {
            return RwState::default();
        };
        let live = |id: &SessionId| self.live(id, now).is_some();
        let token = |t: u64| Token::new(t).expect("tokens start at 1");
        RwState {
            writer: (row.writer.as_ref())
                .filter(|(id, _)| live(id))
                .map(|(id, t)| (id.clone(), token(*t))),
            readers: (row.readers.iter())
                .filter(|(id, _)| live(id))
                .map(|(id, t)| (id.clone(), token(*t)))
                .collect(),
            writers_waiting: (row.waiting.iter())
                .filter(|(id, until)| *until > now && live(id))
                .map(|(id, _)| id.clone())
                .collect(),
            last_token: row.token,
            delayed: self.rw_delays(row, now),
        }
    }

    /// `row`'s terms in their lock-delay at backend time `now`, in session order: those
    /// pruned already and those whose session expired since (premise `lost_rw_delays`:
    /// none of the latter).
    fn rw_delays(&self, row: &RwRow, now: u64) -> Vec<RwDelayed> {
        let lost = self.lost_rw_delays;
        let in_delay = |id: &SessionId| {
            let s = self.tables.sessions.get(id)?;
            let until = s.expires + s.lock_delay;
            (!lost && s.expires <= now && until > now).then_some(until)
        };
        let holders = (row.holders())
            .filter_map(|(id, mode, tok)| Some((id.clone(), mode, tok, in_delay(id)?)));
        let mut out: Vec<RwDelayed> = (row.delayed.iter())
            .filter(|d| d.3 > now)
            .cloned()
            .chain(holders)
            .map(|(session, mode, token, until)| RwDelayed {
                session,
                mode,
                token: Token::new(token).expect("tokens start at 1"),
                remaining: Duration::from_nanos(until - now),
            })
            .collect();
        out.sort_by(|a, b| a.session.cmp(&b.session));
        out
    }

    /// Removes `id`'s registration as a writer waiting for `name`; whether it had one (then
    /// the readers and writers waiting are told).
    pub fn leave_rw_queue(&mut self, id: &SessionId, name: &LeaseName) -> bool {
        let Some(row) = self.tables.rw.get_mut(name) else {
            return false;
        };
        let before = row.waiting.len();
        row.waiting.retain(|(s, _)| s != id);
        row.waiting.len() < before
    }

    /// Drops the holders and waiters of `name` whose session ended (their terms ended at
    /// its expiry) or whose patience ran out, and the lock-delays over, at backend time
    /// `now`; an expired holder's term keeps blocking for its session's lock-delay.
    fn prune_rw(&mut self, name: &LeaseName, now: u64) {
        let sessions = &self.tables.sessions;
        let Some(row) = self.tables.rw.get_mut(name) else {
            return;
        };
        let expiry = |id: &SessionId| sessions.get(id).map(|s| s.expires);
        // With the session's expiry if the session is still there.
        let dead: Vec<(SessionId, RwMode, u64, Option<Expiry>)> = row
            .holders()
            .filter_map(|(id, mode, tok)| match sessions.get(id) {
                Some(s) if s.expires > now => None,
                s => Some((id.clone(), mode, tok, s.map(|s| (s.expires, s.lock_delay)))),
            })
            .collect();
        row.waiting
            .retain(|(id, until)| *until > now && expiry(id).is_some_and(|e| e > now));
        row.delayed.retain(|d| d.3 > now);
        for (id, _, _, _) in &dead {
            row.forget(id);
        }
        for (id, mode, tok, expired) in dead {
            if let Ok(token) = Token::new(tok) {
                self.end_rw_term(name, &id, mode, token, now, expired);
            }
        }
    }

    /// `id`'s `mode` term `name`/`token` ended at backend time `now`, with its session's
    /// expiry and lock-delay if that expired: then it keeps blocking the name until the
    /// expiry plus the delay (premise `lost_rw_delays`: not at all), and the expiry is
    /// logged.
    fn end_rw_term(
        &mut self,
        name: &LeaseName,
        id: &SessionId,
        mode: RwMode,
        token: Token,
        now: u64,
        expired: Option<Expiry>,
    ) {
        let Some((expires, delay)) = expired.filter(|(e, _)| *e <= now) else {
            self.end_term(name, token, id, now);
            return;
        };
        self.end_term(name, token, id, expires);
        let until = expires + delay;
        if let Some(row) = self.tables.rw.get_mut(name) {
            if until > now && !self.lost_rw_delays {
                row.delayed.push((id.clone(), mode, token.get(), until));
            }
        }
        self.log_rw_delay(expires, name, id, mode, token, DelayStep::Expired { delay });
    }

    fn log_rw_delay(
        &mut self,
        at: u64,
        name: &LeaseName,
        id: &SessionId,
        mode: RwMode,
        token: Token,
        step: DelayStep,
    ) {
        self.rw_delay_log.push(RwDelayEntry {
            at,
            name: name.clone(),
            session: id.clone(),
            mode,
            token,
            step,
        });
    }

    /// The session `id` ended at backend time `now`, after its expiry and with its
    /// lock-delay if `expired` (expiry, delay) is given: its read-write terms end (those
    /// of an expired session keep their names blocked for the delay) and its registrations
    /// go; returns the names it held.
    pub(super) fn remove_rw(
        &mut self,
        id: &SessionId,
        now: u64,
        expired: Option<Expiry>,
    ) -> Vec<LeaseName> {
        let mut ended = Vec::new();
        for (name, row) in self.tables.rw.iter_mut() {
            row.waiting.retain(|(s, _)| s != id);
            let held: Vec<(RwMode, u64)> = (row.holders())
                .filter(|(s, _, _)| *s == id)
                .map(|(_, mode, tok)| (mode, tok))
                .collect();
            row.forget(id);
            ended.extend(
                held.into_iter()
                    .map(|(mode, tok)| (name.clone(), mode, tok)),
            );
        }
        let mut freed = Vec::new();
        for (name, mode, tok) in ended {
            if let Ok(token) = Token::new(tok) {
                self.end_rw_term(&name, id, mode, token, now, expired);
            }
            freed.push(name);
        }
        freed
    }

    /// A failover to `old`: the read-write terms the replica never saw end at backend time
    /// `now`; returns the names whose token goes back.
    pub(super) fn fail_over_rw(&mut self, old: &Tables, now: u64) -> Vec<LeaseName> {
        let mut back = Vec::new();
        let mut ended = Vec::new();
        for (name, row) in &self.tables.rw {
            let before = old.rw.get(name).map_or(0, |o| o.token);
            if before < row.token {
                back.push(name.clone());
                for (id, tok) in row.terms().filter(|(_, tok)| *tok > before) {
                    ended.push((name.clone(), id.clone(), tok));
                }
            }
        }
        for (name, id, tok) in ended {
            if let Ok(token) = Token::new(tok) {
                self.end_term(&name, token, &id, now);
            }
        }
        back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const LEASE: Duration = Duration::from_secs(1);
    const DELAY: Duration = Duration::from_millis(500);

    fn rw0() -> LeaseName {
        LeaseName::new("rw0").unwrap()
    }

    /// Whether `id` gets a new `mode` term of `rw0` at `t` (ms; a one-time try).
    fn gets(m: &mut Model, t: u64, id: &SessionId, mode: RwMode) -> bool {
        let r = m.acquire_rw(t * MS, id, &rw0(), mode, Duration::ZERO);
        matches!(r.unwrap(), RwAcquire::Acquired(_))
    }

    /// A backend with `s1` (lock-delay `DELAY`) holding a `mode` term of `rw0` from 0 ms,
    /// and `s2`, `s3` opened at 1000 ms (`s1` expired then).
    fn expired_holder(mode: RwMode, lost: bool) -> (Model, [SessionId; 3]) {
        let mut m = Model::new();
        m.lost_rw_delays = lost;
        let (s1, _) = m.open_with_delay(0, LEASE, DELAY);
        assert!(gets(&mut m, 0, &s1, mode));
        let (s2, _) = m.open_session(1000 * MS, LEASE);
        let (s3, _) = m.open_session(1000 * MS, LEASE);
        (m, [s1, s2, s3])
    }

    #[test]
    fn an_expired_write_term_blocks_every_new_term_for_its_delay() {
        let (mut m, [s1, s2, _]) = expired_holder(RwMode::Write, false);
        let busy = m.acquire_rw(1200 * MS, &s2, &rw0(), RwMode::Read, Duration::ZERO);
        assert!(matches!(
            busy.unwrap(),
            RwAcquire::Busy { writer: Some(w), readers: 0, .. } if w == s1
        ));
        assert!(!gets(&mut m, 1300, &s2, RwMode::Write));
        let st = m.rw_state(1300 * MS, &rw0());
        assert_eq!((st.writer, st.delayed.len()), (None, 1));
        assert_eq!(st.delayed[0].mode, RwMode::Write);
        assert_eq!(st.delayed[0].remaining, Duration::from_millis(200));
        assert!(gets(&mut m, 1500, &s2, RwMode::Read));
        let expired = DelayStep::Expired {
            delay: DELAY.as_nanos() as u64,
        };
        let steps: Vec<_> = m
            .rw_delay_log
            .iter()
            .map(|e| (e.at, e.step.clone()))
            .collect();
        assert_eq!(
            steps,
            [
                (0, DelayStep::Granted),
                (1000 * MS, expired),
                (1500 * MS, DelayStep::Granted)
            ]
        );
    }

    #[test]
    fn an_expired_read_term_blocks_new_writers_only() {
        let (mut m, [_, s2, s3]) = expired_holder(RwMode::Read, false);
        assert!(gets(&mut m, 1100, &s2, RwMode::Read));
        let busy = m.acquire_rw(1200 * MS, &s3, &rw0(), RwMode::Write, Duration::ZERO);
        assert!(matches!(
            busy.unwrap(),
            RwAcquire::Busy {
                writer: None,
                readers: 2,
                ..
            }
        ));
        assert!(m.release_rw(1300 * MS, &s2, &rw0(), RwMode::Read, token(2)));
        assert!(!gets(&mut m, 1400, &s3, RwMode::Write));
        assert!(gets(&mut m, 1500, &s3, RwMode::Write));
    }

    fn token(t: u64) -> Token {
        Token::new(t).unwrap()
    }

    #[test]
    fn an_expiry_found_by_a_keep_alive_keeps_the_delay() {
        let (mut m, [s1, s2, _]) = expired_holder(RwMode::Write, false);
        let (r, _) = m.keep_alive(1100 * MS, &s1, LEASE);
        assert!(r.is_err());
        assert!(!gets(&mut m, 1200, &s2, RwMode::Read));
        assert_eq!(m.rw_state(1200 * MS, &rw0()).delayed.len(), 1);
        assert!(gets(&mut m, 1500, &s2, RwMode::Read));
    }

    #[test]
    fn a_release_a_close_and_a_waiting_writer_leave_no_delay() {
        let mut m = Model::new();
        let (s1, _) = m.open_with_delay(0, LEASE, DELAY);
        let (s2, _) = m.open_with_delay(0, LEASE, DELAY);
        assert!(gets(&mut m, 0, &s1, RwMode::Write));
        assert!(m.release_rw(100 * MS, &s1, &rw0(), RwMode::Write, token(1)));
        assert!(gets(&mut m, 100, &s2, RwMode::Read));
        assert!(!m.close_session(200 * MS, &s2).is_empty());
        // s1 waits to write behind a reader, then expires: its registration goes at once.
        let (s3, _) = m.open_session(300 * MS, Duration::from_secs(5));
        assert!(gets(&mut m, 300, &s3, RwMode::Read));
        let r = m.acquire_rw(400 * MS, &s1, &rw0(), RwMode::Write, LEASE);
        assert!(matches!(r.unwrap(), RwAcquire::Busy { .. }));
        let (s4, _) = m.open_session(1000 * MS, LEASE);
        assert!(gets(&mut m, 1000, &s4, RwMode::Read));
        assert!(m.rw_state(1000 * MS, &rw0()).delayed.is_empty());
    }

    #[test]
    fn premise_lost_rw_delays_frees_the_name_at_once_but_logs_the_expiry() {
        let (mut m, [_, s2, _]) = expired_holder(RwMode::Write, true);
        assert!(m.rw_state(1100 * MS, &rw0()).delayed.is_empty());
        assert!(gets(&mut m, 1100, &s2, RwMode::Write));
        let mut out = Vec::new();
        crate::sim::check::check_rw_delays(&m.rw_delay_log, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
    }
}
