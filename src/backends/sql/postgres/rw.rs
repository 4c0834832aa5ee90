//! The PostgreSQL statements of read-write locks ([`RwStmts`]), prepared on a connection's
//! first read-write call (apart from the others, so tables from before read-write locks still
//! serve everything else), and the driver calls that run them: every operation is one
//! statement, so one round trip.
//!
//! The acquire reads the name's counter, its terms (live, or in their session's lock-delay)
//! and its live waiting writers from the statement's snapshot, decides, and takes a new term
//! with an upsert of the name's row that bumps the counter only if it is still the one read
//! (`x.token = cur.token`; the upsert locks the row, and under READ COMMITTED its `WHERE`
//! sees the newest committed version). Every grant bumps the counter under that lock, so a
//! grant that committed after the snapshot makes the upsert change nothing: the statement
//! reports a race and the backend runs it again. Two grants of one name are so serialized,
//! each seeing every term granted before it. The term's row is inserted from the upsert's
//! result, in the same statement.

use super::conn::{classify, col};
use super::statements::{keep_alive_rw_sql, keep_alive_types, NOW, NOW_US};
use super::PgDriver;
use crate::backends::sql::driver::DbResult;
use crate::backends::sql::rw::{RwRow, RwStateRow};
use crate::backends::sql::tables::Tables;
use ::postgres::types::Type;
use ::postgres::{Client, Statement};
use std::sync::atomic::Ordering;

/// One connection's prepared read-write statements.
pub(crate) struct RwStmts {
    acquire: Statement,
    release: Statement,
    leave: Statement,
    state: Statement,
    end_session: Statement,
    gc: Statement,
    /// The keep-alive that lists the read-write terms too (see
    /// [`super::statements::keep_alive_rw_sql`]).
    pub(super) keep_alive: Statement,
}

/// The statements: acquire, release, leave, state, end of a session, collection.
pub(super) fn sql(t: &Tables) -> [String; 6] {
    let (s, rw, h, w) = (&t.session, &t.rw, &t.rw_holder, &t.rw_waiter);
    let ch = super::listen::channel_literal(t);
    let live = |alias: &str| {
        format!(
            "JOIN {s} x ON x.session_id = {alias}.session_id AND x.expires_at > (SELECT ms FROM now)"
        )
    };
    // A term blocks its name while its session is live or in its lock-delay (the delay is 0
    // without one, and never negative).
    let held = |alias: &str| {
        format!(
            "JOIN {s} x ON x.session_id = {alias}.session_id \
             AND x.expires_at + x.lock_delay > (SELECT ms FROM now)"
        )
    };
    // The term rows that no longer block (their session gone, or past expiry and delay).
    let ended = |alias: &str| {
        format!(
            "NOT EXISTS (SELECT 1 FROM {s} x WHERE x.session_id = {alias}.session_id \
             AND x.expires_at + x.lock_delay > (SELECT ms FROM now))"
        )
    };
    [
        // acquire: $1 session, $2 name, $3 side (1 write, 0 read), $4 patience ms.
        // `hold` is the terms that block (their sessions live or in their lock-delay), `wait`
        // the live places (their sessions live, and within their patience). `ok`: the asker
        // is live, holds no term of that side, and the rules let it in. `up` takes the term
        // (see the module doc), `ins` records it, `dq` deletes the new writer's place, `bump`
        // bumps the version of the asker's holdings (its session row is locked after the
        // name's row, and only by a grant: a keep-alive waits for the grant, see
        // `keep_alive_rw_sql`). `reg`
        // adds or renews a waiting writer's place: a place whose patience ran out gets a new
        // seq (the back of the line).
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms, {NOW_US} AS us), \
             me AS MATERIALIZED (SELECT expires_at FROM {s} \
                    WHERE session_id = $1 AND expires_at > (SELECT ms FROM now)), \
             cur AS MATERIALIZED (SELECT token FROM {rw} WHERE name = $2), \
             hold AS MATERIALIZED (SELECT h.session_id, h.writer, h.token FROM {h} h {held_h} \
                    WHERE h.name = $2), \
             wait AS MATERIALIZED (SELECT w.session_id, w.seq FROM {w} w {live_w} \
                    WHERE w.name = $2 AND w.expires_at > (SELECT ms FROM now)), \
             mine AS MATERIALIZED (SELECT token FROM hold WHERE session_id = $1 AND writer = $3), \
             place AS MATERIALIZED (SELECT seq FROM wait WHERE session_id = $1), \
             ok AS MATERIALIZED (SELECT 1 FROM me WHERE NOT EXISTS (SELECT 1 FROM mine) AND \
                    CASE WHEN $3 = 0 \
                    THEN NOT EXISTS (SELECT 1 FROM hold WHERE writer = 1) \
                         AND NOT EXISTS (SELECT 1 FROM wait) \
                    ELSE NOT EXISTS (SELECT 1 FROM hold) \
                         AND NOT EXISTS (SELECT 1 FROM wait WHERE session_id <> $1 \
                             AND seq < coalesce((SELECT seq FROM place), 9223372036854775807)) \
                    END), \
             up AS (INSERT INTO {rw} AS x (name, token) SELECT $2, 1 FROM ok \
                    ON CONFLICT (name) DO UPDATE SET token = x.token + 1 \
                    WHERE x.token = (SELECT token FROM cur) \
                    RETURNING x.token), \
             ins AS (INSERT INTO {h} (name, session_id, writer, token) \
                    SELECT $2, $1, $3::int2, token FROM up RETURNING token), \
             dq AS (DELETE FROM {w} WHERE name = $2 AND session_id = $1 AND $3 = 1 \
                    AND EXISTS (SELECT 1 FROM ins) RETURNING 1), \
             bump AS (UPDATE {s} SET version = version + 1 \
                    WHERE session_id = $1 AND EXISTS (SELECT 1 FROM ins) RETURNING 1), \
             reg AS (INSERT INTO {w} AS q (name, session_id, expires_at) \
                    SELECT $2, $1, (SELECT ms FROM now) + $4 FROM me \
                    WHERE $3 = 1 AND NOT EXISTS (SELECT 1 FROM ok) \
                      AND NOT EXISTS (SELECT 1 FROM mine) \
                      AND ($4 > 0 OR EXISTS (SELECT 1 FROM place)) \
                    ON CONFLICT (name, session_id) DO UPDATE SET expires_at = EXCLUDED.expires_at, \
                       seq = CASE WHEN q.expires_at > (SELECT ms FROM now) THEN q.seq \
                                  ELSE EXCLUDED.seq END \
                    RETURNING seq) \
             SELECT (SELECT expires_at FROM me) * 1000 - (SELECT us FROM now), \
                    (SELECT token FROM mine), (SELECT token FROM ins), \
                    EXISTS (SELECT 1 FROM ok), \
                    (SELECT session_id::text FROM hold WHERE writer = 1 LIMIT 1), \
                    (SELECT count(*) FROM hold WHERE writer = 0), \
                    (SELECT count(*) FROM wait WHERE session_id <> $1) \
                      + CASE WHEN EXISTS (SELECT 1 FROM reg) \
                               OR ($3 = 0 AND EXISTS (SELECT 1 FROM place)) THEN 1 ELSE 0 END, \
                    (SELECT count(*) FROM dq), (SELECT count(*) FROM bump)",
            held_h = held("h"),
            live_w = live("w"),
        ),
        // release: $1 name, $2 session, $3 side, $4 token. Only by a live session (an expired
        // one holds nothing), whose row is locked first (as a lease release does) and whose
        // version a release bumps. Notifies a release: readers or writers waiting try at once.
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms), \
             me AS MATERIALIZED (SELECT 1 FROM {s} \
                    WHERE session_id = $2 AND expires_at > (SELECT ms FROM now) FOR NO KEY UPDATE), \
             gone AS (DELETE FROM {h} WHERE name = $1 AND session_id = $2 AND writer = $3 \
                    AND token = $4 AND EXISTS (SELECT 1 FROM me) \
                    RETURNING name), \
             bump AS (UPDATE {s} SET version = version + 1 \
                    WHERE session_id = $2 AND EXISTS (SELECT 1 FROM gone) RETURNING 1), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'r:' || name) FROM gone) \
             SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM note), \
                    (SELECT count(*) FROM bump)"
        ),
        // leave: $1 name, $2 session. Deletes the place (also one whose patience ran out);
        // a live one counts, and its going is notified (readers behind it may go in).
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms), \
             gone AS (DELETE FROM {w} WHERE name = $1 AND session_id = $2 \
                    RETURNING name, expires_at > (SELECT ms FROM now) AS live), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'r:' || name) FROM gone WHERE live) \
             SELECT (SELECT count(*) FROM gone WHERE live), (SELECT count(*) FROM note)"
        ),
        // state: $1 name. The counter, the live terms (1 read, 2 write), the live places
        // (3, with their seq) and the terms in their lock-delay (4 read, 5 write, with the
        // µs left).
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms, {NOW_US} AS us) \
             SELECT 0::int8, ''::text, token, 0::int8 FROM {rw} WHERE name = $1 \
             UNION ALL SELECT CASE WHEN x.expires_at > (SELECT ms FROM now) THEN 1 ELSE 4 END \
                      + h.writer::int8, h.session_id::text, h.token, \
                    (x.expires_at + x.lock_delay) * 1000 - (SELECT us FROM now) \
                    FROM {h} h {held_h} WHERE h.name = $1 \
             UNION ALL SELECT 3::int8, w.session_id::text, w.seq, 0::int8 FROM {w} w {live_w} \
                    WHERE w.name = $1 AND w.expires_at > (SELECT ms FROM now)",
            held_h = held("h"),
            live_w = live("w"),
        ),
        // end of a session: $1 session (already removed, or expired). Its places go, and its
        // terms unless its row says they are in their lock-delay (an expired session's row
        // stays until its delay ran out; the purge deletes them after it); each name is
        // notified once.
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms), \
             h AS (DELETE FROM {h} h WHERE h.session_id = $1 AND {ended_h} RETURNING name), \
             w AS (DELETE FROM {w} WHERE session_id = $1 RETURNING name), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'r:' || name) \
                    FROM (SELECT name FROM h UNION SELECT name FROM w) n) \
             SELECT (SELECT count(*) FROM note)",
            ended_h = ended("h"),
        ),
        // collection (with the purge): the terms of sessions neither live nor in their
        // lock-delay, the places of sessions no longer live, and the places whose patience
        // ran out; each name is notified once.
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms), \
             h AS (DELETE FROM {h} h WHERE {ended_h} RETURNING name), \
             w AS (DELETE FROM {w} w WHERE w.expires_at <= (SELECT ms FROM now) \
                    OR NOT EXISTS (SELECT 1 FROM {s} x \
                    WHERE x.session_id = w.session_id AND x.expires_at > (SELECT ms FROM now)) \
                    RETURNING name), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'r:' || name) \
                    FROM (SELECT name FROM h UNION SELECT name FROM w) n) \
             SELECT (SELECT count(*) FROM note)",
            ended_h = ended("h"),
        ),
    ]
}

pub(super) fn prepare(
    client: &mut Client,
    t: &Tables,
) -> std::result::Result<RwStmts, ::postgres::Error> {
    let [acquire, release, leave, state, end_session, gc] = sql(t);
    let (sid, name, i8) = (Type::BPCHAR, Type::VARCHAR, Type::INT8);
    Ok(RwStmts {
        keep_alive: client.prepare_typed(&keep_alive_rw_sql(t), &keep_alive_types(true))?,
        acquire: client.prepare_typed(
            &acquire,
            &[sid.clone(), name.clone(), i8.clone(), i8.clone()],
        )?,
        release: client.prepare_typed(
            &release,
            &[name.clone(), sid.clone(), i8.clone(), i8.clone()],
        )?,
        leave: client.prepare_typed(&leave, &[name.clone(), sid.clone()])?,
        state: client.prepare_typed(&state, std::slice::from_ref(&name))?,
        end_session: client.prepare_typed(&end_session, &[sid])?,
        gc: client.prepare_typed(&gc, &[])?,
    })
}

impl PgDriver {
    /// Runs `f` with the read-write statements, preparing them on the connection's first
    /// read-write call or keep-alive (which then knows their tables exist).
    pub(super) fn run_rw<T: Send>(
        &self,
        mut f: impl FnMut(&mut Client, &RwStmts) -> DbResult<T> + Send,
    ) -> DbResult<T> {
        super::conn::with_conn(&self.pool, self.timeout, |c| {
            let stmts = match c.rw.take() {
                Some(s) => s,
                None => {
                    let s = prepare(c.client()?, &self.tables).map_err(classify)?;
                    self.rw_missing.store(false, Ordering::Relaxed);
                    s
                }
            };
            let r = f(c.client()?, &stmts);
            c.rw = Some(stmts);
            r
        })
    }

    pub(super) fn rw_acquire_pg(
        &self,
        id: &str,
        name: &str,
        write: bool,
        patience_ms: i64,
    ) -> DbResult<RwRow> {
        let side = i64::from(write);
        self.run_rw(|c, st| {
            let r = c
                .query_one(&st.acquire, &[&id, &name, &side, &patience_ms])
                .map_err(classify)?;
            let Some(me) = col::<Option<i64>>(&r, 0)?.filter(|us| *us > 0) else {
                return Ok(RwRow::Expired);
            };
            if let Some(t) = col::<Option<i64>>(&r, 1)?.or(col::<Option<i64>>(&r, 2)?) {
                return Ok(RwRow::Acquired {
                    token: t,
                    remaining_us: me,
                });
            }
            if col::<bool>(&r, 3)? {
                return Ok(RwRow::Raced);
            }
            Ok(RwRow::Busy {
                writer: col(&r, 4)?,
                readers: col(&r, 5)?,
                waiting: col(&r, 6)?,
            })
        })
    }

    pub(super) fn rw_release_pg(
        &self,
        id: &str,
        name: &str,
        write: bool,
        token: i64,
    ) -> DbResult<bool> {
        let side = i64::from(write);
        self.run_rw(|c, st| {
            let r = c
                .query_one(&st.release, &[&name, &id, &side, &token])
                .map_err(classify)?;
            Ok(col::<i64>(&r, 0)? > 0)
        })
    }

    pub(super) fn rw_leave_pg(&self, id: &str, name: &str) -> DbResult<bool> {
        self.run_rw(|c, st| {
            let r = c.query_one(&st.leave, &[&name, &id]).map_err(classify)?;
            Ok(col::<i64>(&r, 0)? > 0)
        })
    }

    pub(super) fn rw_state_pg(&self, name: &str) -> DbResult<Vec<RwStateRow>> {
        self.run_rw(|c, st| {
            c.query(&st.state, &[&name])
                .map_err(classify)?
                .iter()
                .map(|r| {
                    Ok(RwStateRow {
                        kind: col(r, 0)?,
                        session: col(r, 1)?,
                        value: col(r, 2)?,
                        remaining_us: col(r, 3)?,
                    })
                })
                .collect()
        })
    }

    pub(super) fn rw_end_session_pg(&self, id: &str) -> DbResult<()> {
        self.run_rw(|c, st| {
            c.query_one(&st.end_session, &[&id])
                .map(drop)
                .map_err(classify)
        })
    }

    /// The collection run with every purge; nothing when the tables do not exist.
    pub(super) fn rw_gc_pg(&self) -> DbResult<()> {
        self.run_rw(|c, st| c.query_one(&st.gc, &[]).map(drop).map_err(classify))
    }
}
