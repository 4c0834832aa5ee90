//! Read-write locks in the model backend, as `MemoryBackend` keeps them: one record per
//! name (one token counter, the writer, the readers, the waiting writers in arrival order
//! with their patience), every holder and waiter bound to its session, on the backend's
//! clock; the premise `shared_writers`, and the log of grants the checker reads.

use super::{Model, Tables};
use crate::error::Result;
use crate::spi::{RwAcquire, RwMode, RwState};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::collections::BTreeMap;
use std::time::Duration;

/// A read-write lock's record.
#[derive(Clone, Debug, Default)]
pub(super) struct RwRow {
    token: u64,
    writer: Option<(SessionId, u64)>,
    readers: BTreeMap<SessionId, u64>,
    /// Waiting writers in arrival order, each with its patience's end (backend time).
    waiting: Vec<(SessionId, u64)>,
}

impl RwRow {
    fn busy(&self) -> RwAcquire {
        RwAcquire::Busy {
            writer: self.writer.as_ref().map(|(id, _)| id.clone()),
            readers: self.readers.len(),
            writers_waiting: self.waiting.len(),
        }
    }

    /// The terms held, as (session, token).
    fn terms(&self) -> impl Iterator<Item = (&SessionId, u64)> {
        let writer = self.writer.iter().map(|(id, t)| (id, *t));
        writer.chain(self.readers.iter().map(|(id, t)| (id, *t)))
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

impl Model {
    /// One attempt of `id` at true time `t` to take the read-write lock `name` in `mode`,
    /// registering a writer that must wait for `patience` (zero: not at all), as
    /// `MemoryBackend::acquire_rw`. Premise `shared_writers`: readers do not keep a writer
    /// out.
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
                if row.writer.is_some() || !row.waiting.is_empty() {
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
                if row.writer.is_some() || readers || ahead > 0 {
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

    /// The read-write lock `name` at true time `t`, as `MemoryBackend::rw_state`: its live
    /// writer, readers and waiting writers, and its newest token.
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
            delayed: Vec::new(),
        }
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
    /// its expiry) or whose patience ran out, at backend time `now`.
    fn prune_rw(&mut self, name: &LeaseName, now: u64) {
        let sessions = &self.tables.sessions;
        let Some(row) = self.tables.rw.get_mut(name) else {
            return;
        };
        let expiry = |id: &SessionId| sessions.get(id).map(|s| s.expires);
        let dead: Vec<(SessionId, u64, u64)> = row
            .terms()
            .filter_map(|(id, tok)| match expiry(id) {
                Some(e) if e > now => None,
                e => Some((id.clone(), tok, e.unwrap_or(now).min(now))),
            })
            .collect();
        row.waiting
            .retain(|(id, until)| *until > now && expiry(id).is_some_and(|e| e > now));
        for (id, _, _) in &dead {
            if row.writer.as_ref().is_some_and(|w| &w.0 == id) {
                row.writer = None;
            }
            row.readers.remove(id);
        }
        for (id, tok, at) in dead {
            if let Ok(token) = Token::new(tok) {
                self.end_term(name, token, &id, at);
            }
        }
    }

    /// The session `id` ended at backend time `at`: its read-write terms and registrations
    /// go; returns the names it held.
    pub(super) fn remove_rw(&mut self, id: &SessionId, at: u64) -> Vec<LeaseName> {
        let mut ended = Vec::new();
        for (name, row) in self.tables.rw.iter_mut() {
            row.waiting.retain(|(s, _)| s != id);
            let mut held = None;
            if row.writer.as_ref().is_some_and(|w| &w.0 == id) {
                held = row.writer.take().map(|w| w.1);
            }
            if let Some(tok) = row.readers.remove(id) {
                held = Some(tok);
            }
            if let Some(tok) = held {
                ended.push((name.clone(), tok));
            }
        }
        let mut freed = Vec::new();
        for (name, tok) in ended {
            if let Ok(token) = Token::new(tok) {
                self.end_term(&name, token, id, at);
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
