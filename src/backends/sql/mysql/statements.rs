//! The MySQL/MariaDB statements: [`Sql`], one or more per operation (no `RETURNING`, so a
//! second statement reads what the first did, except for the new term of an acquire, which
//! its `UPDATE`'s reply carries: [`TAKEN`]), and the fair-lock queue's [`QueueSql`]. The
//! comments say how each locks its rows and why its outcome is read rather than counted.

use crate::backends::sql::tables::Tables;

/// UTC epoch µs of the statement's start.
pub(super) const NOW_US: &str =
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
/// The same instant in whole ms (rounded down).
pub(super) const NOW: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
/// The new token of an acquire's `UPDATE` (of lease row `l` by session row `me`), set
/// through `LAST_INSERT_ID(expr)` so that the reply's OK packet carries the new term, with
/// no read after it (both servers put the value of the statement's `LAST_INSERT_ID(expr)`
/// in the OK packet of an `UPDATE`, and 0 when it called none): `t << 31 | r`, `t` the new
/// token and `r` the acquirer's remaining ms measured by the statement, capped at
/// 2^31 − 1 (a lower bound, about 24.8 days). A token of 2^33 or more does not fit: the
/// statement then sets `LAST_INSERT_ID(0)`, and the lease row is read as before
/// (`rows::taken` decodes it).
pub(super) const TAKEN: &str = "IF(l.token < 8589934591, \
     LAST_INSERT_ID(((l.token + 1) << 31) \
         | LEAST((me.expires_at * 1000 - TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', \
                  UTC_TIMESTAMP(6))) DIV 1000, 2147483647)) >> 31, \
     LAST_INSERT_ID(0) + l.token + 1)";
/// The version a keep-alive's `UPDATE` sets (the same, unchanged) and hands back in its OK
/// packet with the remaining time, as [`TAKEN`] does for an acquire: `LAST_INSERT_ID((v + 1)
/// << 31 | r)`, `v` the version (of the newest committed row: the `UPDATE` reads it under
/// its exclusive lock, after a take-over it waited for) and `r` the remaining ms measured by
/// the statement (`expires_at` as set, `(now + lease) * 1000 - now_us`, capped at 2^31 − 1:
/// a lower bound). The first `?` is the lease in ms, as in the `SET` of `expires_at`. A
/// version of 2^32 or more does not fit: the statement then sets `LAST_INSERT_ID(0)`, and
/// the keep-alive reads the row as before (`rows::renewal`).
pub(super) const RENEWED: &str = "IF(version < 4294967295, \
     (LAST_INSERT_ID(((version + 1) << 31) \
         | LEAST((((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000) + ?) * 1000 \
                  - TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))) DIV 1000, \
                 2147483647)) >> 31) - 1, \
     LAST_INSERT_ID(0) + version)";
/// The value of the lease row `l`'s current term: set only for the token it was set with.
pub(super) const TERM_VALUE: &str =
    "COALESCE(CASE WHEN l.value_token = l.token THEN l.term_value END, '')";

/// The end (epoch ms) of the terms of the session row `alias`: its expiry while it is live,
/// its expiry plus its lock-delay once it expired.
fn term_end(alias: &str) -> String {
    format!(
        "({alias}.expires_at + CASE WHEN {alias}.expires_at > {NOW} THEN 0 ELSE {alias}.lock_delay END)"
    )
}

/// The renewal's read, one primary-key lookup: the remaining time, the version of the
/// session's holdings and whether they are to be listed: when the version differs from the
/// one passed in (NULL for none), or fewer than the count passed in of the sample's entries
/// are still held. Parameters: the version twice, each of the two entries (NULL for none),
/// the count, the session. An entry is (token, name) with the leases alone, (token, name,
/// side, token, name, side) with `rw` (side -1 a lease, 0 a read term, 1 a write term):
/// one lookup by primary key, the lease's name or the term's (name, session); a lease's
/// second only when its row is gone. (No derived table and no join: a materialized derived
/// table with a join for the listing cost 40% more of the server's time on every
/// keep-alive, listing or not.)
pub(super) fn ka_read(t: &Tables, rw: bool) -> String {
    let (s, l, h) = (&t.session, &t.lease, &t.rw_holder);
    let entry = if rw {
        format!(
            "COALESCE((SELECT k.session_id = s.session_id AND k.token = ? \
                       FROM {l} k WHERE k.name = ? AND ? < 0), \
                      (SELECT y.token = ? FROM {h} y WHERE y.name = ? \
                       AND y.session_id = s.session_id AND y.writer = ?), 0)"
        )
    } else {
        format!(
            "COALESCE((SELECT k.session_id = s.session_id AND k.token = ? \
                       FROM {l} k WHERE k.name = ?), 0)"
        )
    };
    format!(
        "SELECT s.expires_at * 1000 - {NOW_US}, s.version, \
                (s.version <> ? OR ? IS NULL OR {entry} + {entry} < ?) \
         FROM {s} s WHERE s.session_id = ?"
    )
}

pub(super) struct Sql {
    pub(super) open: String,
    pub(super) open_read: String,
    pub(super) ka_update: String,
    pub(super) ka_read: String,
    pub(super) ka_list: String,
    pub(super) rm_session: String,
    pub(super) rm_leases: String,
    pub(super) rm_members: String,
    pub(super) acquire: String,
    pub(super) acquire_new: String,
    pub(super) acquire_report: String,
    pub(super) release: String,
    pub(super) owner: String,
    pub(super) set_value: String,
    pub(super) value_check: String,
    pub(super) join: String,
    pub(super) join_check: String,
    pub(super) leave: String,
    pub(super) members: String,
    pub(super) purge_find: String,
    pub(super) purge_members: String,
}

impl Sql {
    pub(super) fn new(t: &Tables) -> Self {
        let (s, l, m) = (&t.session, &t.lease, &t.member);
        Sql {
            open: format!(
                "INSERT INTO {s} (session_id, expires_at, metadata, lock_delay) \
                 VALUES (?, {NOW} + ?, ?, ?)"
            ),
            // Measured after the insert committed: never more than the insert granted.
            open_read: format!("SELECT expires_at * 1000 - {NOW_US} FROM {s} WHERE session_id = ?"),
            // The renewal, whose OK packet carries the session's version and remaining time
            // through `LAST_INSERT_ID(expr)` (see [`RENEWED`]): when the session holds nothing
            // and the version is the one known, the keep-alive needs no read after it.
            ka_update: format!(
                "UPDATE {s} SET expires_at = {NOW} + ?, version = {RENEWED} \
                 WHERE session_id = ? AND expires_at > {NOW}"
            ),
            ka_read: ka_read(t, false),
            // The listing, only when `ka_read` says so: a later consistent read than the
            // version `ka_read` returned, so a change committed in between is either in the
            // list or, having bumped the version past the one returned, listed at the next
            // keep-alive. (name, token, side -1: a lease; `RwSql::ka_list` lists the
            // read-write terms too.)
            ka_list: format!("SELECT name, token, -1 FROM {l} WHERE session_id = ?"),
            // A session that expired and whose lock-delay has not run out keeps its row, and
            // so its leases (blocked until the purge after the delay): only a live session's
            // close, or a removal after the delay, frees them.
            rm_session: format!(
                "DELETE FROM {s} WHERE session_id = ? \
                 AND (expires_at > {NOW} OR expires_at + lock_delay <= {NOW})"
            ),
            rm_leases: format!(
                "UPDATE {l} SET session_id = '' WHERE session_id = ? \
                 AND NOT EXISTS (SELECT 1 FROM {s} s WHERE s.session_id = ?)"
            ),
            rm_members: format!("DELETE FROM {m} WHERE session_id = ?"),
            // One multi-table UPDATE takes an existing lease row that is free or whose
            // holder's session expired or is gone, and bumps the version of both sessions'
            // leases with it. It locks (X, as every table it names is updated) the acquirer's
            // session row, then the lease row, then the holder's session row: a keep-alive of
            // the holder is serialized with it, and reads the holder's newest row. (Not in
            // session id order as on PostgreSQL: a deadlock needs a holder that releases at
            // the instant it expires, and is retried.) A new term comes back in the reply
            // itself: the new token is set through `LAST_INSERT_ID(expr)`, whose value the
            // OK packet carries (see `TAKEN`); when the statement changed no row, the outcome
            // is read from the lease row afterwards (`acquire_report`). MySQL updates a
            // NULL-complemented row of an outer join nowhere.
            // A holder blocks the name until its expiry, and once expired until its expiry
            // plus its lock-delay: while `expires_at + lock_delay` is later than now.
            acquire: format!(
                "UPDATE {s} me STRAIGHT_JOIN {l} l ON l.name = ? \
                 LEFT JOIN {s} h ON h.session_id = l.session_id \
                 SET l.token = {TAKEN}, l.session_id = me.session_id, \
                     me.version = me.version + 1, h.version = h.version + 1 \
                 WHERE me.session_id = ? AND me.expires_at > {NOW} \
                   AND l.session_id <> me.session_id \
                   AND (h.session_id IS NULL OR h.expires_at + h.lock_delay <= {NOW})"
            ),
            // A name never acquired gets a free row with token 0 first (the first term has
            // token 1), which `acquire` then takes.
            acquire_new: format!(
                "INSERT INTO {l} (name, session_id, token) VALUES (?, '', 0) \
                 ON DUPLICATE KEY UPDATE {l}.token = {l}.token"
            ),
            // The holder's remaining time is until its term's end (its expiry, plus its
            // lock-delay once expired).
            acquire_report: format!(
                "SELECT (SELECT expires_at FROM {s} WHERE session_id = ?) * 1000 - {NOW_US}, \
                 l.session_id, l.token, \
                 (SELECT {end} FROM {s} h WHERE h.session_id = l.session_id) * 1000 \
                   - {NOW_US} \
                 FROM (SELECT 1 AS one) d LEFT JOIN {l} l ON l.name = ?",
                end = term_end("h"),
            ),
            // Only by a live session (an expired one holds nothing, so changes nothing);
            // bumps the version of the session's leases. Both rows change, so the count is
            // 2 or 0, with or without `CLIENT_FOUND_ROWS`.
            release: format!(
                "UPDATE {s} me STRAIGHT_JOIN {l} l \
                   ON l.name = ? AND l.session_id = me.session_id AND l.token = ? \
                 SET l.session_id = '', me.version = me.version + 1 \
                 WHERE me.session_id = ? AND me.expires_at > {NOW}"
            ),
            // The live holder, or the expired one while its term is in its lock-delay.
            owner: format!(
                "SELECT l.session_id, l.token, {end} * 1000 - {NOW_US}, {TERM_VALUE} \
                 FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
                 WHERE l.name = ? AND s.expires_at + s.lock_delay > {NOW}",
                end = term_end("s"),
            ),
            // Only by the live holder of the term with that token. The affected-row count
            // is 0 when the value was already set (without `CLIENT_FOUND_ROWS`), so a 0 is
            // checked by `value_check`.
            set_value: format!(
                "UPDATE {l} SET term_value = ?, value_token = token \
                 WHERE name = ? AND session_id = ? AND token = ? \
                 AND EXISTS (SELECT 1 FROM {s} s WHERE s.session_id = {l}.session_id \
                             AND s.expires_at > {NOW})"
            ),
            value_check: format!(
                "SELECT COUNT(*) FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
                 WHERE l.name = ? AND l.session_id = ? AND l.token = ? \
                 AND l.value_token = l.token AND l.term_value = ? AND s.expires_at > {NOW}"
            ),
            join: format!(
                "INSERT INTO {m} (group_name, session_id) \
                 SELECT ?, s.session_id FROM {s} s \
                 WHERE s.session_id = ? AND s.expires_at > {NOW} LOCK IN SHARE MODE \
                 ON DUPLICATE KEY UPDATE {m}.session_id = {m}.session_id"
            ),
            join_check: format!(
                "SELECT COUNT(*) FROM {s} WHERE session_id = ? AND expires_at > {NOW}"
            ),
            leave: format!(
                "DELETE FROM {m} WHERE group_name = ? AND session_id = ? \
                 AND EXISTS (SELECT 1 FROM {s} s WHERE s.session_id = {m}.session_id \
                             AND s.expires_at > {NOW})"
            ),
            members: format!(
                "SELECT m.session_id, s.metadata FROM {m} m \
                 JOIN {s} s ON s.session_id = m.session_id \
                 WHERE m.group_name = ? AND s.expires_at > {NOW} ORDER BY m.session_id"
            ),
            // Expired sessions whose lock-delay ran out (the others' terms still block).
            purge_find: format!(
                "SELECT session_id FROM {s} WHERE expires_at <= {NOW} \
                 AND expires_at + lock_delay <= {NOW} ORDER BY expires_at LIMIT ?"
            ),
            // Memberships only of the sessions that are gone: a session found expired but
            // live again at its delete (a step back of the database clock) keeps its row and
            // so its memberships. `{{}}` becomes the placeholders of the ids.
            purge_members: format!(
                "DELETE FROM {m} WHERE session_id IN ({{}}) \
                 AND NOT EXISTS (SELECT 1 FROM {s} s WHERE s.session_id = {m}.session_id)"
            ),
        }
    }
}

/// The fair-lock queue statements (four autocommit statements place a waiter; a place
/// counted by another waiter between them only reorders simultaneous arrivals).
pub(super) struct QueueSql {
    pub(super) live: String,
    pub(super) prune: String,
    pub(super) upsert: String,
    pub(super) ahead: String,
    pub(super) leave: String,
    pub(super) list: String,
}

impl QueueSql {
    pub(super) fn new(t: &Tables) -> Self {
        let (s, q) = (&t.session, &t.queue);
        QueueSql {
            live: format!("SELECT COUNT(*) FROM {s} WHERE session_id = ? AND expires_at > {NOW}"),
            // Dead places of the name: patience run out, or session gone.
            prune: format!(
                "DELETE q FROM {q} q LEFT JOIN {s} x \
                 ON x.session_id = q.session_id AND x.expires_at > {NOW} \
                 WHERE q.name = ? AND q.session_id <> ? \
                 AND (q.expires_at <= {NOW} OR x.session_id IS NULL)"
            ),
            upsert: format!(
                "INSERT INTO {q} (name, session_id, expires_at) VALUES (?, ?, {NOW} + ?) \
                 ON DUPLICATE KEY UPDATE expires_at = {NOW} + ?"
            ),
            ahead: format!(
                "SELECT COUNT(*) FROM {q} q JOIN {s} x \
                 ON x.session_id = q.session_id AND x.expires_at > {NOW} \
                 WHERE q.name = ? AND q.expires_at > {NOW} \
                 AND q.seq < (SELECT me.seq FROM {q} me WHERE me.name = ? AND me.session_id = ?)"
            ),
            leave: format!("DELETE FROM {q} WHERE name = ? AND session_id = ?"),
            list: format!(
                "SELECT q.session_id FROM {q} q JOIN {s} x \
                 ON x.session_id = q.session_id AND x.expires_at > {NOW} \
                 WHERE q.name = ? AND q.expires_at > {NOW} ORDER BY q.seq"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_read_write_keep_alive_names_the_read_write_tables() {
        let t = Tables::new("p_");
        let (plain, rw) = (ka_read(&t, false), ka_read(&t, true));
        assert!(!plain.contains("p_simba_rw") && rw.contains("p_simba_rw_holder"));
        // The version twice, two entries, the count, the session.
        assert_eq!(plain.matches('?').count(), 2 + 2 * 2 + 2);
        assert_eq!(rw.matches('?').count(), 2 + 2 * 6 + 2);
        let sql = Sql::new(&t);
        assert!(!sql.ka_list.contains("p_simba_rw") && !sql.ka_update.contains("p_simba_rw"));
    }
}
