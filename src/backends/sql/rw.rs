//! Read-write locks on SQL: three tables per prefix, `simba_rw` (one row per name: its token
//! counter, never reset or deleted), `simba_rw_holder` (one row per term: name, session,
//! side, token) and `simba_rw_waiter` (one row per waiting writer: name, session, arrival
//! `seq`, patience deadline `expires_at`). A term or a place is live only while its session
//! row is (joined on every read, on the database's clock), so a session that ends, by a close,
//! its expiry or a purge, holds and waits for nothing at once; its rows are deleted by the
//! close (waking the names' waiters) or by the next purge. Except for lock-delay: a term of a
//! session that expired blocks its name until the session row's `expires_at + lock_delay`
//! (the row stays until then, as for leases), and its row is kept until that instant.
//!
//! Every grant takes the name's row lock and bumps its counter, so two grants of one name are
//! serialized and a grant sees every term granted before it (how each dialect does it, and
//! what it costs: see the SQL backend's design notes). Releases, leaves and registrations only
//! ever free a name or reorder waiters, so they do not take the lock. A grant and a release
//! also bump the version of the session's holdings (its session row, as lease acquires and
//! releases do), in the same statement or transaction: the keep-alive lists the session's
//! terms with its leases, read again only when that version changed. The statements are
//! prepared apart from the others (PostgreSQL: on a connection's first read-write call or
//! keep-alive), so tables from before read-write locks still serve everything else (the
//! keep-alive then lists the leases alone).

use super::backend::{ms, remaining, session_id, token};
use super::SqlBackend;
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::{RwAcquire, RwDelayed, RwMode, RwState};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::time::{Duration, Instant};

/// Outcome of one acquire attempt, as a dialect reports it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RwRow {
    /// The session is not live.
    Expired,
    /// The session holds a term of the side asked for (new or the same).
    Acquired { token: i64, remaining_us: i64 },
    /// Not granted (and, for a writer with patience, its place registered or renewed). The
    /// writer and the readers include the terms in their lock-delay.
    Busy {
        writer: Option<String>,
        readers: i64,
        waiting: i64,
    },
    /// A grant raced another grant of the name (the counter moved under it): try again.
    /// (PostgreSQL only: MySQL decides under the name's lock.)
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Raced,
}

/// What a row of `rw_state` is: the counter, a live read term, the live write term, a
/// waiting writer, a read or write term in its lock-delay (the live kind + 3).
pub(crate) const STATE_COUNTER: i64 = 0;
pub(crate) const STATE_READER: i64 = 1;
pub(crate) const STATE_WRITER: i64 = 2;
pub(crate) const STATE_WAITER: i64 = 3;
pub(crate) const STATE_DELAYED_READER: i64 = 4;
pub(crate) const STATE_DELAYED_WRITER: i64 = 5;

/// One row of a name's state: `kind` (see the `STATE_*` constants), the session (empty for
/// the counter), a value (the token; a waiter's arrival `seq`) and, for a delayed term, the
/// µs left of its delay (0 otherwise).
#[derive(Debug)]
pub(crate) struct RwStateRow {
    pub(crate) kind: i64,
    pub(crate) session: String,
    pub(crate) value: i64,
    pub(crate) remaining_us: i64,
}

/// What a dialect read of the name before deciding (MySQL decides in the backend, from one
/// read under the name's lock): remaining µs of the asker (`None`: not live), the counter,
/// the asker's term of the side asked for, the writer and the readers (the asker included),
/// live or in their lock-delay, the other live waiting writers, the asker's live place and
/// how many live places are before it (all of them without a place).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
#[derive(Debug, Default)]
pub(crate) struct RwView {
    pub(crate) my_remaining: Option<i64>,
    pub(crate) counter: i64,
    pub(crate) mine: Option<i64>,
    pub(crate) writer: Option<String>,
    pub(crate) readers: i64,
    pub(crate) others_waiting: i64,
    pub(crate) my_place: Option<i64>,
    pub(crate) ahead: i64,
}

/// What to do after a [`RwView`].
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RwDecision {
    Expired,
    /// The same term.
    Held(i64),
    /// A new term with the (already bumped) counter as its token.
    Grant,
    /// Not now; `register`: a writer's place is to be added or renewed.
    Busy {
        register: bool,
    },
}

#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
impl RwView {
    /// The rules of [`LeaseBackend::acquire_rw`](crate::spi::LeaseBackend::acquire_rw): a
    /// reader with no writer holding (live or delayed) or waiting; a writer with no term
    /// (live or delayed) and no live place before its own; a writer that waits registers (or
    /// renews) unless its patience is zero and it has no place.
    pub(crate) fn decide(&self, write: bool, patience_ms: i64) -> RwDecision {
        if self.my_remaining.is_none_or(|r| r <= 0) {
            return RwDecision::Expired;
        }
        if let Some(t) = self.mine {
            return RwDecision::Held(t);
        }
        let free = if write {
            self.writer.is_none() && self.readers == 0 && self.ahead == 0
        } else {
            self.writer.is_none() && self.others_waiting == 0 && self.my_place.is_none()
        };
        if free {
            RwDecision::Grant
        } else {
            RwDecision::Busy {
                register: write && (patience_ms > 0 || self.my_place.is_some()),
            }
        }
    }

    /// The `Busy` reply (after a registration, if `registered`).
    pub(crate) fn busy(self, registered: bool) -> RwRow {
        let me = i64::from(registered || self.my_place.is_some());
        RwRow::Busy {
            writer: self.writer,
            readers: self.readers,
            waiting: self.others_waiting + me,
        }
    }
}

fn side(mode: RwMode) -> bool {
    mode == RwMode::Write
}

impl SqlBackend {
    /// One attempt (run again while it raced another grant of the name, as the lease
    /// acquire does).
    pub(super) fn acquire_rw_sql(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        const OP: &str = "acquiring a read-write lock";
        if !patience.is_zero() {
            options::check_lease(patience)?;
        }
        self.rw_sessions.lock().insert(session.clone());
        let deadline = options::deadline(self.options.query_timeout);
        let mut attempt = 0u32;
        loop {
            let row = self
                .driver
                .rw_acquire(session.as_str(), name.as_str(), side(mode), ms(patience))
                .map_err(|e| self.err(OP, e))?;
            return match row {
                RwRow::Expired => Err(Self::expired(session)),
                RwRow::Acquired {
                    token: t,
                    remaining_us,
                } => Ok(RwAcquire::Acquired(Term {
                    name: name.clone(),
                    token: token(t)?,
                    remaining: remaining(remaining_us),
                })),
                RwRow::Busy {
                    writer,
                    readers,
                    waiting,
                } => Ok(RwAcquire::Busy {
                    writer: writer.as_deref().map(session_id).transpose()?,
                    readers: usize::try_from(readers).unwrap_or(0),
                    writers_waiting: usize::try_from(waiting).unwrap_or(0),
                }),
                RwRow::Raced if Instant::now() < deadline && attempt < 50 => {
                    attempt += 1;
                    std::thread::sleep(crate::rand::jitter(Duration::from_millis(
                        1 << attempt.min(5),
                    )));
                    continue;
                }
                RwRow::Raced => Err(Error::Timeout {
                    operation: "acquiring a read-write lock under contention",
                    after: self.options.query_timeout,
                    source: None,
                }),
            };
        }
    }

    pub(super) fn release_rw_sql(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        t: Token,
    ) -> Result<bool> {
        let t = i64::try_from(t.get()).unwrap_or(i64::MAX);
        self.driver
            .rw_release(session.as_str(), name.as_str(), side(mode), t)
            .map_err(|e| self.err("releasing a read-write lock", e))
    }

    pub(super) fn leave_rw_sql(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.driver
            .rw_leave(session.as_str(), name.as_str())
            .map_err(|e| self.err("leaving a read-write lock's writers", e))
    }

    pub(super) fn rw_state_sql(&self, name: &LeaseName) -> Result<RwState> {
        let rows = self
            .driver
            .rw_state(name.as_str())
            .map_err(|e| self.err("reading a read-write lock", e))?;
        let mut state = RwState::default();
        let mut waiting = Vec::new();
        for r in rows {
            let delayed = |mode| -> Result<RwDelayed> {
                Ok(RwDelayed {
                    session: session_id(&r.session)?,
                    mode,
                    token: token(r.value)?,
                    remaining: remaining(r.remaining_us),
                })
            };
            match r.kind {
                STATE_COUNTER => state.last_token = u64::try_from(r.value).unwrap_or(0),
                STATE_READER => state
                    .readers
                    .push((session_id(&r.session)?, token(r.value)?)),
                STATE_WRITER => state.writer = Some((session_id(&r.session)?, token(r.value)?)),
                STATE_WAITER => waiting.push((r.value, session_id(&r.session)?)),
                STATE_DELAYED_READER => state.delayed.push(delayed(RwMode::Read)?),
                STATE_DELAYED_WRITER => state.delayed.push(delayed(RwMode::Write)?),
                other => {
                    return Err(super::failure::error(
                        "reading a read-write lock",
                        format!("unknown row kind {other}"),
                    ))
                }
            }
        }
        state.readers.sort();
        state.delayed.sort_by(|a, b| a.session.cmp(&b.session));
        waiting.sort();
        state.writers_waiting = waiting.into_iter().map(|(_, s)| s).collect();
        Ok(state)
    }

    /// After `session` ended (closed, or found expired): deletes its read-write rows and
    /// wakes their names' waiters, if it ever asked for a read-write lock here. Its terms
    /// stay while its session row says they are in their lock-delay (the purge deletes them
    /// after it). A failure is logged: its terms already ended with its session row (or
    /// with its delay), and the purge deletes the rows.
    pub(super) fn end_rw_session(&self, session: &SessionId) {
        if !self.rw_sessions.lock().remove(session) {
            return;
        }
        if let Err(e) = self.driver.rw_end_session(session.as_str()) {
            log::warn!(
                "deleting the read-write terms of an ended session: {}",
                self.err("ending read-write terms", e).report()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> RwView {
        RwView {
            my_remaining: Some(1_000),
            counter: 3,
            ..RwView::default()
        }
    }

    #[test]
    fn the_decision_keeps_the_rules() {
        let busy = |register| RwDecision::Busy { register };
        assert_eq!(
            RwView {
                my_remaining: None,
                ..view()
            }
            .decide(true, 10),
            RwDecision::Expired
        );
        assert_eq!(
            RwView {
                my_remaining: Some(0),
                ..view()
            }
            .decide(false, 10),
            RwDecision::Expired
        );
        assert_eq!(
            RwView {
                mine: Some(2),
                ..view()
            }
            .decide(false, 10),
            RwDecision::Held(2)
        );
        assert_eq!(view().decide(false, 0), RwDecision::Grant);
        assert_eq!(view().decide(true, 0), RwDecision::Grant);
        // Readers share; a writer waits for them, registering only with patience.
        let read = RwView {
            readers: 2,
            ..view()
        };
        assert_eq!(read.decide(false, 0), RwDecision::Grant);
        assert_eq!(read.decide(true, 0), busy(false));
        assert_eq!(read.decide(true, 10), busy(true));
        // A waiting writer keeps readers out (its own place too) and writers behind it.
        let waiting = RwView {
            others_waiting: 1,
            ahead: 1,
            ..view()
        };
        assert_eq!(waiting.decide(false, 10), busy(false));
        assert_eq!(waiting.decide(true, 10), busy(true));
        let first = RwView {
            others_waiting: 1,
            my_place: Some(4),
            ahead: 0,
            ..view()
        };
        assert_eq!(first.decide(true, 0), RwDecision::Grant);
        assert_eq!(
            RwView {
                my_place: Some(4),
                ..view()
            }
            .decide(false, 0),
            busy(false)
        );
        // A zero patience renews (ends) an existing place.
        let placed = RwView {
            readers: 1,
            my_place: Some(4),
            ..view()
        };
        assert_eq!(placed.decide(true, 0), busy(true));
        let writer = RwView {
            writer: Some("w".into()),
            ..view()
        };
        assert_eq!(writer.decide(false, 10), busy(false));
        assert_eq!(
            RwView {
                others_waiting: 2,
                ..writer
            }
            .busy(true),
            RwRow::Busy {
                writer: Some("w".into()),
                readers: 0,
                waiting: 3
            }
        );
    }
}
