//! The MySQL/MariaDB statements of read-write locks ([`RwSql`], text statements kept apart
//! from the others, so tables from before read-write locks still serve everything else) and
//! the driver calls that run them.
//!
//! MySQL has neither data-modifying CTEs nor `RETURNING`, and the backend sends no
//! multi-statement text or stored procedure, so an acquire is a short transaction, decided
//! by the backend ([`RwView::decide`]) from one read under the name's row lock:
//!
//! 1. `START TRANSACTION`;
//! 2. `lock`: a multi-table `UPDATE` of the name's row and the asker's session row that bumps
//!    the name's counter and the version of the asker's holdings (see the keep-alive): it
//!    takes both rows' exclusive locks, the name's first, and holds them to the end, so
//!    grants of one name are serialized. A name never used has no row: `create` inserts it
//!    (token 0) and `lock` runs again, two more round trips the first time;
//! 3. `view`: one read of the counter, the terms (live, or in their session's lock-delay)
//!    and the live waiting writers. It is the transaction's first consistent read, so its
//!    snapshot is taken after the lock was granted and holds every term granted before
//!    (grants commit under the lock);
//! 4. a grant inserts the term (the bumped counter is its token; a writer that waited also
//!    deletes its place) and commits, with the version bump; anything else rolls back (both
//!    bumps with it), and a writer that waits then adds or renews its place with one
//!    autocommit statement (a place only orders writers and keeps readers out: it needs no
//!    lock, and holds nothing a keep-alive lists).
//!
//! Round trips: 4 without a change (expired, the same term, busy), 5 for a grant or a
//! registration, 6 for a grant to a writer that waited; 2 more the first time a name is
//! used. A failure inside the transaction rolls it back before the connection goes back to
//! the pool (a rollback that fails drops the connection). Release and leave are one
//! autocommit statement each. A release must also bump the version, and MySQL has no
//! statement that deletes a row and changes another: it marks the term released (its
//! `writer` plus 2) in a multi-table `UPDATE` with the bump. Released rows count nowhere
//! (every read tests the side: `writer` 0 or 1, or `writer < 2`), are replaced by the
//! session's next grant of the name, and deleted with the session's other rows at its end
//! or by the collection.

use super::rows::{cells, opt_int, opt_text, req_int, req_text};
use super::statements::{NOW, NOW_US};
use super::MyDriver;
use crate::backends::sql::driver::{DbError, DbResult, Kind};
use crate::backends::sql::rw::{RwDecision, RwRow, RwStateRow, RwView};
use crate::backends::sql::tables::Tables;
use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Row};
use std::sync::atomic::Ordering;

/// The read-write lock statements.
pub(super) struct RwSql {
    lock: String,
    create: String,
    view: String,
    grant: String,
    unplace: String,
    renew: String,
    place: String,
    release: String,
    leave: String,
    state: String,
    end_holder: String,
    end_waiter: String,
    gc_holder: String,
    gc_waiter: String,
    /// The keep-alive's read with the read-write terms in its sample (see
    /// `statements::Sql::ka_read`).
    pub(super) ka_read: String,
    /// The keep-alive's listing with the read-write terms.
    pub(super) ka_list: String,
}

impl RwSql {
    pub(super) fn new(t: &Tables) -> Self {
        let (s, rw, h, w) = (&t.session, &t.rw, &t.rw_holder, &t.rw_waiter);
        let live = |a: &str| {
            format!("JOIN {s} x ON x.session_id = {a}.session_id AND x.expires_at > {NOW}")
        };
        let (live_h, live_w) = (live("h"), live("w"));
        // A term blocks its name while its session is live or in its lock-delay (0 without
        // one, never negative); `x` is NULL-complemented for a term that no longer does.
        let held_h = format!(
            "JOIN {s} x ON x.session_id = h.session_id AND x.expires_at + x.lock_delay > {NOW}"
        );
        let ended_h = format!(
            "LEFT JOIN {s} x ON x.session_id = h.session_id \
             AND x.expires_at + x.lock_delay > {NOW}"
        );
        RwSql {
            // session, name. The name's row, then the asker's session row, each with its
            // exclusive lock until the transaction ends (the name's first: an asker waiting
            // for a busy name holds no lock its keep-alive needs); bumps the name's counter and
            // the version of the asker's holdings, which a rollback undoes. 2 rows changed,
            // or 0 when either row is missing.
            lock: format!(
                "UPDATE {rw} r STRAIGHT_JOIN {s} me ON me.session_id = ? \
                 SET r.token = r.token + 1, me.version = me.version + 1 WHERE r.name = ?"
            ),
            // name: the row of a name never used, with token 0 (`lock` then bumps it to the
            // first token, 1), under its exclusive lock
            create: format!(
                "INSERT INTO {rw} (name, token) VALUES (?, 0) ON DUPLICATE KEY UPDATE token = token"
            ),
            // session, session, side, session, session, session, session, session, name: the
            // asker's remaining µs (NULL: not live), the (bumped) counter, the asker's term of
            // that side, the writer and the readers (live or in their lock-delay), the other
            // live places, the asker's live place and the live places before it (all others
            // without a place). The subqueries refer to the locked row, so they run after its
            // lock was granted.
            view: format!(
                "SELECT (SELECT m.expires_at * 1000 - {NOW_US} FROM {s} m \
                         WHERE m.session_id = ? AND m.expires_at > {NOW}), \
                        r.token, \
                        (SELECT h.token FROM {h} h {live_h} \
                         WHERE h.name = r.name AND h.session_id = ? AND h.writer = ?), \
                        (SELECT h.session_id FROM {h} h {held_h} \
                         WHERE h.name = r.name AND h.writer = 1 ORDER BY h.token DESC LIMIT 1), \
                        (SELECT COUNT(*) FROM {h} h {held_h} WHERE h.name = r.name AND h.writer = 0), \
                        (SELECT COUNT(*) FROM {w} w {live_w} \
                         WHERE w.name = r.name AND w.expires_at > {NOW} AND w.session_id <> ?), \
                        (SELECT w.seq FROM {w} w \
                         WHERE w.name = r.name AND w.session_id = ? AND w.expires_at > {NOW}), \
                        (SELECT COUNT(*) FROM {w} w {live_w} \
                         WHERE w.name = r.name AND w.expires_at > {NOW} AND w.session_id <> ? \
                           AND w.seq < COALESCE((SELECT v.seq FROM {w} v WHERE v.name = r.name \
                               AND v.session_id = ? AND v.expires_at > {NOW}), 9223372036854775807)), \
                        (SELECT COUNT(*) FROM {w} w WHERE w.name = r.name AND w.session_id = ?) \
                 FROM {rw} r WHERE r.name = ?"
            ),
            // name, session, side, token, side, token. A row of the asker for the name can
            // only be a released term's (`release`: a live term of the asker is in the view,
            // which then grants nothing), which the new term replaces.
            grant: format!(
                "INSERT INTO {h} (name, session_id, writer, token) VALUES (?, ?, ?, ?) \
                 ON DUPLICATE KEY UPDATE writer = ?, token = ?"
            ),
            // name, session: the new writer's place
            unplace: format!("DELETE FROM {w} WHERE name = ? AND session_id = ?"),
            // patience, name, session: a live place, kept where it is
            renew: format!(
                "UPDATE {w} SET expires_at = {NOW} + ? WHERE name = ? AND session_id = ?"
            ),
            // name, session, patience: a new place (or one whose patience ran out, replaced:
            // a new seq, at the back of the line)
            place: format!(
                "REPLACE INTO {w} (name, session_id, expires_at) VALUES (?, ?, {NOW} + ?)"
            ),
            // name, token, side, session: only by a live session. One multi-table UPDATE
            // (MySQL cannot delete a row and change another in one statement) locks the
            // session row, then the term's, marks the term released (`writer` + 2: 2 a
            // released read term, 3 a released write term, which no read counts) and bumps
            // the version of the session's holdings. Both rows change: the count is 2 or 0.
            // The row goes with the next grant of the name to the session, the session's end
            // or the collection.
            release: format!(
                "UPDATE {s} me STRAIGHT_JOIN {h} h \
                   ON h.name = ? AND h.session_id = me.session_id AND h.token = ? AND h.writer = ? \
                 SET h.writer = h.writer + 2, me.version = me.version + 1 \
                 WHERE me.session_id = ? AND me.expires_at > {NOW}"
            ),
            // name, session: a live place
            leave: format!(
                "DELETE FROM {w} WHERE name = ? AND session_id = ? AND expires_at > {NOW}"
            ),
            // name, name, name: the counter (0), the live terms (1 read, 2 write), the live
            // places (3, with their seq), the terms in their lock-delay (4 read, 5 write), each
            // with the µs left of its delay (0 for the others). `NOW` is the statement's start
            // on both servers, the same in every branch.
            state: format!(
                "SELECT 0, '', token, 0 FROM {rw} WHERE name = ? \
                 UNION ALL SELECT CASE WHEN x.expires_at > {NOW} THEN 1 ELSE 4 END + h.writer, \
                   h.session_id, h.token, (x.expires_at + x.lock_delay) * 1000 - {NOW_US} \
                   FROM {h} h {held_h} WHERE h.name = ? AND h.writer < 2 \
                 UNION ALL SELECT 3, w.session_id, w.seq, 0 FROM {w} w {live_w} \
                   WHERE w.name = ? AND w.expires_at > {NOW}"
            ),
            ka_read: super::statements::ka_read(t, true),
            // session, session: the leases (side -1), then the terms (side 0 read, 1 write;
            // the released ones left out)
            ka_list: format!(
                "SELECT name, token, -1 FROM {l} WHERE session_id = ? \
                 UNION ALL SELECT name, token, writer FROM {h} WHERE session_id = ? AND writer < 2",
                l = t.lease,
            ),
            // session: its terms, unless its row says they are in their lock-delay (an
            // expired session's row stays until the delay ran out; the purge deletes them
            // after it), and its released ones
            end_holder: format!(
                "DELETE h FROM {h} h {ended_h} WHERE h.session_id = ? \
                 AND (x.session_id IS NULL OR h.writer >= 2)"
            ),
            end_waiter: format!("DELETE FROM {w} WHERE session_id = ?"),
            // the terms of sessions neither live nor in their lock-delay, and released ones
            gc_holder: format!(
                "DELETE h FROM {h} h {ended_h} WHERE x.session_id IS NULL OR h.writer >= 2"
            ),
            gc_waiter: format!(
                "DELETE w FROM {w} w LEFT JOIN {s} x ON x.session_id = w.session_id \
                   AND x.expires_at > {NOW} WHERE x.session_id IS NULL OR w.expires_at <= {NOW}"
            ),
        }
    }
}

/// Runs `f` in a transaction that `f` ends; if `f` fails, rolls it back (a rollback that
/// fails reports the connection broken, so the pool drops it).
fn in_transaction<T>(c: &mut Conn, f: impl FnOnce(&mut Conn) -> DbResult<T>) -> DbResult<T> {
    c.query_drop("START TRANSACTION")?;
    f(c).map_err(|e| match c.query_drop("ROLLBACK") {
        Ok(()) => e,
        Err(r) => DbError::new(Kind::Connection, r),
    })
}

/// The `view` row.
fn view(row: Option<Row>) -> DbResult<(RwView, bool)> {
    const WHAT: &str = "a read-write lock";
    let r = row.map(cells).unwrap_or_default();
    let view = RwView {
        my_remaining: opt_int(WHAT, &r, 0)?,
        counter: req_int(WHAT, &r, 1)?,
        mine: opt_int(WHAT, &r, 2)?,
        writer: opt_text(WHAT, &r, 3)?,
        readers: req_int(WHAT, &r, 4)?,
        others_waiting: req_int(WHAT, &r, 5)?,
        my_place: opt_int(WHAT, &r, 6)?,
        ahead: req_int(WHAT, &r, 7)?,
    };
    let has_row = req_int(WHAT, &r, 8)? > 0;
    Ok((view, has_row))
}

impl MyDriver {
    pub(super) fn rw_acquire_my(
        &self,
        id: &str,
        name: &str,
        write: bool,
        patience_ms: i64,
    ) -> DbResult<RwRow> {
        let q = &self.rw_sql;
        let side = i64::from(write);
        self.run(|c| {
            let decided = in_transaction(c, |c| {
                c.exec_drop(&q.lock, (id, name))?;
                if c.affected_rows() == 0 {
                    // A name never used (or the session's row is gone: the view tells).
                    c.exec_drop(&q.create, (name,))?;
                    c.exec_drop(&q.lock, (id, name))?;
                }
                let r: Option<Row> =
                    c.exec_first(&q.view, (id, id, side, id, id, id, id, id, name))?;
                let (v, has_row) = view(r)?;
                let d = v.decide(write, patience_ms);
                if d == RwDecision::Grant {
                    c.exec_drop(&q.grant, (name, id, side, v.counter, side, v.counter))?;
                    if write && has_row {
                        c.exec_drop(&q.unplace, (name, id))?;
                    }
                    c.query_drop("COMMIT")?;
                } else {
                    c.query_drop("ROLLBACK")?;
                }
                Ok((v, d))
            })?;
            // The tables exist: keep-alives list the read-write terms (again).
            self.rw_missing.store(false, Ordering::Relaxed);
            Ok(match decided {
                (_, RwDecision::Expired) => RwRow::Expired,
                (v, RwDecision::Held(t)) => RwRow::Acquired {
                    token: t,
                    remaining_us: v.my_remaining.unwrap_or(0),
                },
                (v, RwDecision::Grant) => RwRow::Acquired {
                    token: v.counter,
                    remaining_us: v.my_remaining.unwrap_or(0),
                },
                (v, RwDecision::Busy { register: false }) => v.busy(false),
                (v, RwDecision::Busy { register: true }) => {
                    if v.my_place.is_some() {
                        c.exec_drop(&q.renew, (patience_ms, name, id))?;
                    } else {
                        c.exec_drop(&q.place, (name, id, patience_ms))?;
                    }
                    let registered = patience_ms > 0 || v.my_place.is_some();
                    v.busy(registered)
                }
            })
        })
    }

    pub(super) fn rw_release_my(
        &self,
        id: &str,
        name: &str,
        write: bool,
        token: i64,
    ) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.rw_sql.release, (name, token, i64::from(write), id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    pub(super) fn rw_leave_my(&self, id: &str, name: &str) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.rw_sql.leave, (name, id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    pub(super) fn rw_state_my(&self, name: &str) -> DbResult<Vec<RwStateRow>> {
        const WHAT: &str = "a read-write lock's state";
        self.run(|c| {
            let rows: Vec<Row> = c.exec(&self.rw_sql.state, (name, name, name))?;
            rows.into_iter()
                .map(|r| {
                    let r = cells(r);
                    Ok(RwStateRow {
                        kind: req_int(WHAT, &r, 0)?,
                        session: req_text(WHAT, &r, 1)?,
                        value: req_int(WHAT, &r, 2)?,
                        remaining_us: req_int(WHAT, &r, 3)?,
                    })
                })
                .collect()
        })
    }

    /// Two autocommit statements: the session's terms (but those in their lock-delay), then
    /// its places.
    pub(super) fn rw_end_session_my(&self, id: &str) -> DbResult<()> {
        self.run(|c| {
            c.exec_drop(&self.rw_sql.end_holder, (id,))?;
            Ok(c.exec_drop(&self.rw_sql.end_waiter, (id,))?)
        })
    }

    /// The collection run with every purge: the terms of sessions neither live nor in their
    /// lock-delay, the places of sessions no longer live, and the places whose patience ran
    /// out.
    pub(super) fn rw_gc_my(&self) -> DbResult<()> {
        self.run(|c| {
            c.exec_drop(&self.rw_sql.gc_holder, ())?;
            Ok(c.exec_drop(&self.rw_sql.gc_waiter, ())?)
        })
    }
}
