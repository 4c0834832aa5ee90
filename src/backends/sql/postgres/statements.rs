//! The PostgreSQL statements: the prepared ones of every operation ([`Stmts`], built by
//! [`sql`] and [`prepare`]) and the text ones of the fair-lock queue. Every statement that
//! changes a row publishes the change with `pg_notify` (see `listen`); the comments say how
//! each locks its rows and why it cannot deadlock or miss a change.
//!
//! `now` is `statement_timestamp()` as UTC epoch ms: constant within a statement, and an
//! epoch does not depend on the connection's `TimeZone`. Remaining times are measured in
//! microseconds against the same timestamp (`expires_at * 1000 - now_us`, exact: `extract`
//! returns `numeric` on PostgreSQL 14+) and rounded down to whole ms by the caller, so no
//! reply claims more time than the database grants.

use crate::backends::sql::tables::Tables;
use ::postgres::types::Type;
use ::postgres::{Client, Statement};

/// UTC epoch ms of the statement's start.
pub(super) const NOW: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000)::int8)";
/// The same instant in µs.
pub(super) const NOW_US: &str = "((extract(epoch FROM statement_timestamp()) * 1000000)::int8)";
/// The value of the lease row `l`'s current term: set only for the token it was set with.
pub(super) const TERM_VALUE: &str =
    "coalesce(CASE WHEN l.value_token = l.token THEN l.term_value END, '')::text";

/// The end (epoch ms) of the terms of the session row `alias` at `now` (an SQL expression in
/// ms): its expiry while it is live, its expiry plus its lock-delay once it expired. A term
/// blocks its name while this is later than `now`, that is while `expires_at + lock_delay`
/// is (the delay is never negative).
pub(super) fn term_end(alias: &str, now: &str) -> String {
    format!(
        "({alias}.expires_at + CASE WHEN {alias}.expires_at > {now} THEN 0 ELSE {alias}.lock_delay END)"
    )
}

/// The keep-alive statement, one statement: renew first (the one-time filters on `renewed`
/// run the UPDATE before the scans), then read the held leases FOR SHARE (and with `rw` the
/// session's read-write terms, FOR SHARE too), but only when the version of the session's
/// holdings differs from the one passed in ($3, NULL for none) or fewer than $8 of the
/// sample's entries are still held; otherwise nothing scales with what the session holds.
/// A sample entry is a (name, token) pair ($4, $5 and $6, $7; NULL for none) with, with
/// `rw`, its side ($9, $10: -1 a lease, 0 a read term, 1 a write term). Each is one
/// primary-key lookup: a lease by name alone (with `session_id = $1` in the WHERE clause a
/// generic plan made while the table was small can walk the session's entries of
/// `idx_lease_session` instead of the primary key), a term by (name, session).
///
/// Every statement that changes what a session holds (acquire of a new term, take-over,
/// release; a read-write grant or release) bumps `version` under an exclusive lock on the
/// session's row, in the same statement as the change.
///
/// A take-over holds the holder's session row locked until it commits, so the UPDATE waits
/// for it and then renews the newest row (READ COMMITTED), whose version the take-over
/// bumped: the leases are listed. The scans still use the statement's older snapshot, but
/// locking a row that was updated (or deleted) since makes PostgreSQL recheck the newest
/// version, which no longer matches `session_id = $1`: a lease taken meanwhile (a term
/// released meanwhile: its release locked the session row first too) is not listed. The
/// version returned is the snapshot's (`snap`): if a change committed after the snapshot,
/// the list may miss a lease or term acquired meanwhile, but that version is older than the
/// row's, so the next keep-alive lists again.
///
/// Columns: remaining µs, version, listed, then per held lease or term its name, token and
/// side (NULLs for none).
fn keep_alive_sql(t: &Tables, rw: bool) -> String {
    let (s, l, h) = (&t.session, &t.lease, &t.rw_holder);
    let slot = |n: &str, tok: &str, side: &str| {
        if rw {
            format!(
                "coalesce((SELECT x.session_id = $1 AND x.token = {tok} FROM {l} x \
                           WHERE x.name = {n} AND {side} < 0), \
                          (SELECT y.token = {tok} FROM {h} y WHERE y.name = {n} \
                           AND y.session_id = $1 AND y.writer = {side}), false)::int"
            )
        } else {
            format!(
                "coalesce((SELECT x.session_id = $1 AND x.token = {tok} FROM {l} x \
                           WHERE x.name = {n}), false)::int"
            )
        }
    };
    let held_rw = if rw {
        format!(
            ", held_rw AS (SELECT h.name, h.token, h.writer FROM {h} h \
                      WHERE h.session_id = $1 AND EXISTS (SELECT 1 FROM renewed) \
                        AND (SELECT yes FROM list) FOR SHARE)"
        )
    } else {
        String::new()
    };
    let rows = if rw {
        "SELECT name, token, -1::int8 AS side FROM held \
         UNION ALL SELECT name, token, writer::int8 FROM held_rw"
    } else {
        "SELECT name, token, -1::int8 AS side FROM held"
    };
    format!(
        "WITH now AS MATERIALIZED (SELECT {NOW} AS ms, {NOW_US} AS us), \
         snap AS MATERIALIZED (SELECT version FROM {s} WHERE session_id = $1), \
         renewed AS (UPDATE {s} SET expires_at = (SELECT ms FROM now) + $2 \
                     WHERE session_id = $1 AND expires_at > (SELECT ms FROM now) \
                     RETURNING expires_at, version), \
         list AS MATERIALIZED (SELECT (SELECT version FROM renewed) IS DISTINCT FROM $3 \
                     OR {one} + {two} < $8 AS yes), \
         held AS (SELECT l.name, l.token FROM {l} l \
                  WHERE l.session_id = $1 AND EXISTS (SELECT 1 FROM renewed) \
                    AND (SELECT yes FROM list) FOR SHARE){held_rw} \
         SELECT (SELECT expires_at FROM renewed) * 1000 - (SELECT us FROM now) AS remaining, \
                (SELECT version FROM snap), (SELECT yes FROM list), \
                x.name::text, x.token, x.side \
         FROM (SELECT 1) one LEFT JOIN ({rows}) x ON true",
        one = slot("$4", "$5", "$9"),
        two = slot("$6", "$7", "$10"),
    )
}

/// The parameter types of [`keep_alive_sql`] (with `rw`, the two sides too).
pub(super) fn keep_alive_types(rw: bool) -> Vec<Type> {
    let (sid, name, i8) = (Type::BPCHAR, Type::VARCHAR, Type::INT8);
    let mut types = vec![
        sid,
        i8.clone(),
        i8.clone(),
        name.clone(),
        i8.clone(),
        name,
        i8.clone(),
        i8.clone(),
    ];
    if rw {
        types.extend([i8.clone(), i8]);
    }
    types
}

/// [`keep_alive_sql`] reading the read-write terms too (prepared with the read-write
/// statements, as it needs their tables).
pub(super) fn keep_alive_rw_sql(t: &Tables) -> String {
    keep_alive_sql(t, true)
}

/// One connection's prepared statements, one per operation (see [`sql`]).
pub(super) struct Stmts {
    pub(super) open: Statement,
    pub(super) keep_alive: Statement,
    pub(super) remove: Statement,
    pub(super) acquire: Statement,
    /// `acquire` that gives a new term the value `$3` in the same upsert.
    pub(super) acquire_valued: Statement,
    pub(super) release: Statement,
    pub(super) owner: Statement,
    pub(super) set_value: Statement,
    pub(super) join: Statement,
    pub(super) leave: Statement,
    pub(super) members: Statement,
    pub(super) purge: Statement,
    pub(super) ping: Statement,
}

pub(super) fn sql(t: &Tables) -> [String; 11] {
    let (s, l, m) = (&t.session, &t.lease, &t.member);
    // Every change publishes on the prefix's channel with `pg_notify` inside its own
    // statement, so a notification is sent exactly when the change commits (see `listen`).
    let ch = super::listen::channel_literal(t);
    [
        // open: the remaining µs measured by the same statement; $4 the lock-delay in ms
        format!(
            "INSERT INTO {s} (session_id, expires_at, metadata, lock_delay) \
             VALUES ($1, {NOW} + $2, $3, $4) RETURNING expires_at * 1000 - {NOW_US}"
        ),
        keep_alive_sql(t, false),
        // remove: the session row first (lock order session -> lease, as in acquire); notifies
        // every freed lease and every group left. An expired session still in its lock-delay
        // keeps its row and its leases (which stay blocked until the purge after the delay):
        // only a live session's close, or a removal after the delay, frees them.
        format!(
            "WITH gone AS (DELETE FROM {s} WHERE session_id = $1 \
                       AND (expires_at > {NOW} OR expires_at + lock_delay <= {NOW}) RETURNING 1), \
             freed AS (UPDATE {l} SET session_id = '' \
                       WHERE session_id = $1 AND (EXISTS (SELECT 1 FROM gone) \
                             OR NOT EXISTS (SELECT 1 FROM {s} WHERE session_id = $1)) \
                       RETURNING name), \
             left_ AS (DELETE FROM {m} WHERE session_id = $1 AND (SELECT count(*) FROM gone) >= 0 \
                       RETURNING group_name), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'r:' || name) FROM freed \
                       UNION ALL SELECT pg_notify({ch}, 'g:' || group_name) FROM left_) \
             SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM freed), (SELECT count(*) FROM left_), \
                    (SELECT count(*) FROM note)"
        ),
        // acquire: one upsert. Locks the acquirer's session row and the holder's (whether or
        // not it is live) FOR NO KEY UPDATE, in session id order (two sessions taking over
        // each other's leases cannot deadlock), then the lease row (ON CONFLICT); the update
        // only applies if the row still has the holder that was checked. The holder blocks
        // the name until its term's end: its expiry, or once expired its expiry plus its
        // lock-delay (`holder.expires_at` is that end, and the holder's remaining its time). A new term (a row
        // from `up`) bumps the version of both sessions' leases and notifies `a:`; a
        // re-acquire by the holder updates nothing and notifies nothing. (The holder's row is
        // locked exclusively because its version changes with the take-over: a keep-alive of
        // the holder waits, as it did behind the shared lock of earlier versions.)
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms, {NOW_US} AS us), \
             cur AS MATERIALIZED (SELECT session_id, token FROM {l} WHERE name = $2), \
             locked AS MATERIALIZED (SELECT session_id, expires_at, lock_delay FROM {s} \
                    WHERE session_id = $1 OR session_id = (SELECT session_id FROM cur) \
                    ORDER BY session_id FOR NO KEY UPDATE), \
             me AS MATERIALIZED (SELECT expires_at FROM locked \
                    WHERE session_id = $1 AND expires_at > (SELECT ms FROM now)), \
             holder AS MATERIALIZED (SELECT {held_until} AS expires_at FROM locked h \
                    WHERE session_id = (SELECT session_id FROM cur) AND session_id <> $1 \
                      AND EXISTS (SELECT 1 FROM me)), \
             up AS (INSERT INTO {l} AS x (name, session_id, token) \
                    SELECT $2, $1, 1 FROM me \
                    WHERE NOT EXISTS (SELECT 1 FROM holder WHERE expires_at > (SELECT ms FROM now)) \
                    ON CONFLICT (name) DO UPDATE SET session_id = EXCLUDED.session_id, token = x.token + 1 \
                    WHERE x.session_id <> EXCLUDED.session_id \
                      AND x.session_id = (SELECT session_id FROM cur) \
                    RETURNING x.token), \
             bump AS (UPDATE {s} SET version = version + 1 \
                    WHERE (session_id = $1 OR session_id = (SELECT session_id FROM cur)) \
                      AND EXISTS (SELECT 1 FROM up) \
                    RETURNING 1), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'a:' || $2) FROM up) \
             SELECT (SELECT expires_at FROM me) * 1000 - (SELECT us FROM now), \
                    (SELECT token FROM up), \
                    (SELECT session_id::text FROM cur), (SELECT token FROM cur), \
                    (SELECT expires_at FROM holder) * 1000 - (SELECT us FROM now), \
                    (SELECT count(*) FROM note), (SELECT count(*) FROM bump)",
            held_until = term_end("h", "(SELECT ms FROM now)"),
        ),
        // release: only by a live session (an expired one holds nothing, so changes nothing);
        // its session row first (the lock order of acquire), whose version a release bumps.
        // The lease row is found by name alone (`session_id::text` is no index key): with
        // `session_id = $2` a generic plan made while the table was small walks the
        // session's entries of `idx_lease_session` instead of the primary key.
        format!(
            "WITH me AS MATERIALIZED (SELECT 1 FROM {s} \
                    WHERE session_id = $2 AND expires_at > {NOW} FOR NO KEY UPDATE), \
             freed AS (UPDATE {l} SET session_id = '' \
                    WHERE name = $1 AND session_id::text = $2::text AND token = $3 \
                      AND EXISTS (SELECT 1 FROM me) \
                    RETURNING name), \
             bump AS (UPDATE {s} SET version = version + 1 \
                    WHERE session_id = $2 AND EXISTS (SELECT 1 FROM freed) RETURNING 1), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'r:' || name) FROM freed) \
             SELECT (SELECT count(*) FROM freed), (SELECT count(*) FROM note), \
                    (SELECT count(*) FROM bump)"
        ),
        // owner, with the term's value (stored with the token it belongs to): the live holder,
        // or the expired one while its term is in its lock-delay
        format!(
            "SELECT l.session_id::text, l.token, {end} * 1000 - {NOW_US}, {TERM_VALUE} \
             FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
             WHERE l.name = $1 AND s.expires_at + s.lock_delay > {NOW}",
            end = term_end("s", NOW),
        ),
        // set_value: $1 name, $2 session, $3 token, $4 value. Only the live holder of that
        // term; the lease row alone is locked (the session is read, not locked), so it cannot
        // deadlock with acquire. Notifies `a:`: observers read the owner again.
        format!(
            "WITH up AS (UPDATE {l} SET term_value = $4, value_token = token \
                    WHERE name = $1 AND session_id::text = $2::text AND token = $3 \
                      AND EXISTS (SELECT 1 FROM {s} WHERE session_id = $2 AND expires_at > {NOW}) \
                    RETURNING name), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'a:' || name) FROM up) \
             SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM note)"
        ),
        // join
        format!(
            "WITH me AS MATERIALIZED (SELECT session_id FROM {s} \
                    WHERE session_id = $1 AND expires_at > {NOW} FOR SHARE), \
             ins AS (INSERT INTO {m} (group_name, session_id) SELECT $2, session_id FROM me \
                     ON CONFLICT DO NOTHING RETURNING group_name), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'g:' || group_name) FROM ins) \
             SELECT EXISTS (SELECT 1 FROM me), (SELECT count(*) FROM ins), (SELECT count(*) FROM note)"
        ),
        // leave: only by a live session, like release
        format!(
            "DELETE FROM {m} WHERE group_name = $1 AND session_id = $2 \
             AND EXISTS (SELECT 1 FROM {s} WHERE session_id = $2 AND expires_at > {NOW}) \
             RETURNING pg_notify({ch}, 'g:' || group_name)"
        ),
        // members
        format!(
            "SELECT m.session_id::text, s.metadata::text FROM {m} m \
             JOIN {s} s ON s.session_id = m.session_id \
             WHERE m.group_name = $1 AND s.expires_at > {NOW} ORDER BY m.session_id"
        ),
        // purge: along idx_session_expires, skipping rows a concurrent statement holds and
        // the sessions whose lock-delay has not run out (their terms still block their
        // names); notifies the groups left and the leases the purged sessions still pointed at
        format!(
            "WITH dead AS (SELECT session_id FROM {s} WHERE expires_at <= {NOW} \
                           AND expires_at + lock_delay <= {NOW} \
                           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED), \
             gone AS (DELETE FROM {s} WHERE session_id IN (SELECT session_id FROM dead) \
                      RETURNING session_id), \
             left_ AS (DELETE FROM {m} WHERE session_id IN (SELECT session_id FROM gone) \
                       RETURNING group_name), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'g:' || group_name) FROM left_ \
                       UNION ALL SELECT pg_notify({ch}, 'r:' || name) FROM {l} \
                       WHERE session_id IN (SELECT session_id FROM gone)) \
             SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM left_), (SELECT count(*) FROM note)"
        ),
    ]
}

/// The acquire statement (of lease table `l`) that gives a new term the value `$3` in its
/// upsert: the inserted row and the take-over both set `term_value` and `value_token` (the
/// new token: in `DO UPDATE SET`, `x.token` is the row's token before the update). A
/// re-acquire by the holder updates nothing, as in `acquire`.
fn acquire_with_value(acquire: &str, l: &str) -> String {
    let swap = |s: &str, from: &str, to: &str| {
        assert_eq!(
            s.matches(from).count(),
            1,
            "the acquire statement has one {from:?}"
        );
        s.replacen(from, to, 1)
    };
    let s = swap(
        acquire,
        &format!("INSERT INTO {l} AS x (name, session_id, token) SELECT $2, $1, 1 FROM me"),
        &format!(
            "INSERT INTO {l} AS x (name, session_id, token, term_value, value_token) \
             SELECT $2, $1, 1, $3, 1 FROM me"
        ),
    );
    swap(
        &s,
        "SET session_id = EXCLUDED.session_id, token = x.token + 1",
        "SET session_id = EXCLUDED.session_id, token = x.token + 1, \
         term_value = EXCLUDED.term_value, value_token = x.token + 1",
    )
}

/// The fair-lock queue statements (text, run unprepared): place, leave, list.
pub(super) fn queue_sql(t: &Tables) -> [String; 3] {
    let (s, q) = (&t.session, &t.queue);
    let ch = super::listen::channel_literal(t);
    let live = |alias: &str| {
        format!(
            "EXISTS (SELECT 1 FROM {s} x WHERE x.session_id = {alias}.session_id \
             AND x.expires_at > (SELECT ms FROM now))"
        )
    };
    [
        // place: $1 session, $2 name, $3 patience ms. Deletes the dead places of the name,
        // upserts the own place (its seq kept), counts the live places before it.
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms), \
             me AS MATERIALIZED (SELECT 1 FROM {s} WHERE session_id = $1 \
                    AND expires_at > (SELECT ms FROM now)), \
             gone AS (DELETE FROM {q} q WHERE q.name = $2 AND q.session_id <> $1 \
                    AND (q.expires_at <= (SELECT ms FROM now) OR NOT {live_q}) RETURNING 1), \
             up AS (INSERT INTO {q} (name, session_id, expires_at) \
                    SELECT $2, $1, (SELECT ms FROM now) + $3::int8 FROM me \
                    ON CONFLICT (name, session_id) DO UPDATE SET expires_at = EXCLUDED.expires_at \
                    RETURNING seq) \
             SELECT (SELECT count(*) FROM me), \
                    (SELECT count(*) FROM {q} q WHERE q.name = $2 AND q.seq < (SELECT seq FROM up) \
                       AND q.expires_at > (SELECT ms FROM now) AND {live_q}), \
                    (SELECT count(*) FROM gone)",
            live_q = live("q"),
        ),
        // leave: $1 name, $2 session. Notifies a release, so the next in line tries at once.
        format!(
            "WITH gone AS (DELETE FROM {q} WHERE name = $1 AND session_id = $2 RETURNING name) \
             SELECT (SELECT count(*) FROM gone), \
                    (SELECT count(*) FROM (SELECT pg_notify({ch}, 'r:' || name) FROM gone) n)"
        ),
        // list: $1 name
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms) \
             SELECT q.session_id::text FROM {q} q WHERE q.name = $1 \
             AND q.expires_at > (SELECT ms FROM now) AND {live_q} ORDER BY q.seq",
            live_q = live("q"),
        ),
    ]
}

pub(super) fn prepare(
    client: &mut Client,
    t: &Tables,
) -> std::result::Result<Stmts, ::postgres::Error> {
    let [open, keep_alive, remove, acquire, release, owner, set_value, join, leave, members, purge] =
        sql(t);
    let (sid, name, i8) = (Type::BPCHAR, Type::VARCHAR, Type::INT8);
    Ok(Stmts {
        open: client.prepare_typed(&open, &[sid.clone(), i8.clone(), Type::VARCHAR, i8.clone()])?,
        keep_alive: client.prepare_typed(&keep_alive, &keep_alive_types(false))?,
        remove: client.prepare_typed(&remove, std::slice::from_ref(&sid))?,
        acquire_valued: client.prepare_typed(
            &acquire_with_value(&acquire, &t.lease),
            &[sid.clone(), name.clone(), Type::VARCHAR],
        )?,
        acquire: client.prepare_typed(&acquire, &[sid.clone(), name.clone()])?,
        release: client.prepare_typed(&release, &[name.clone(), sid.clone(), i8.clone()])?,
        owner: client.prepare_typed(&owner, std::slice::from_ref(&name))?,
        set_value: client.prepare_typed(
            &set_value,
            &[name.clone(), sid.clone(), i8.clone(), Type::VARCHAR],
        )?,
        join: client.prepare_typed(&join, &[sid.clone(), name.clone()])?,
        leave: client.prepare_typed(&leave, &[name.clone(), sid.clone()])?,
        members: client.prepare_typed(&members, &[name])?,
        purge: client.prepare_typed(&purge, &[i8])?,
        ping: client.prepare("SELECT 1")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_read_write_keep_alive_names_the_read_write_tables() {
        let t = Tables::new("p_");
        let plain = sql(&t)[1].clone();
        assert!(plain.contains("p_simba_lease") && !plain.contains("p_simba_rw"));
        let rw = keep_alive_rw_sql(&t);
        assert!(rw.contains("FROM p_simba_rw_holder h WHERE h.session_id = $1"));
        assert!(rw.contains("$10") && !plain.contains("$9"));
        assert_eq!(keep_alive_types(false).len(), 8);
        assert_eq!(keep_alive_types(true).len(), 10);
    }

    #[test]
    fn the_valued_acquire_sets_the_value_in_the_upsert_only() {
        let t = Tables::new("p_");
        let acquire = sql(&t)[3].clone();
        let valued = acquire_with_value(&acquire, &t.lease);
        assert!(valued.contains(
            "INSERT INTO p_simba_lease AS x (name, session_id, token, term_value, value_token) \
             SELECT $2, $1, 1, $3, 1 FROM me"
        ));
        assert!(valued.contains("term_value = EXCLUDED.term_value, value_token = x.token + 1"));
        // Everything else is the acquire statement.
        let back = valued
            .replace(
                ", term_value, value_token) SELECT $2, $1, 1, $3, 1",
                ") SELECT $2, $1, 1",
            )
            .replace(
                ", term_value = EXCLUDED.term_value, value_token = x.token + 1",
                "",
            );
        assert_eq!(back, acquire);
    }
}
