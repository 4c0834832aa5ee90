//! MySQL 8 / MariaDB 10.6+ statements (`mysql` crate, blocking).
//!
//! MySQL 8.0 is the target; the tests run on MariaDB 10.11. Every statement is in the subset
//! both document, and every new connection reads `SELECT VERSION(), @@version_comment` to tell
//! the two apart (MySQL 8.0+ and MariaDB 10.6+ are accepted; older servers are refused with
//! [`Error::UnsupportedServer`]).
//!
//! * `now` is `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`: UTC epoch
//!   µs (`DIV 1000` for ms), fixed at statement start, with no time-zone conversion at all
//!   (both servers). Remaining times are `expires_at * 1000 - now_us`, rounded down to whole
//!   ms by the caller, so no reply claims more than the database grants.
//! * Shared row locks: `LOCK IN SHARE MODE` (MariaDB has no `FOR SHARE`; MySQL 8 documents
//!   the two as equivalent, `LOCK IN SHARE MODE` kept for compatibility), also in subqueries.
//! * Upserts: `INSERT … SELECT … ON DUPLICATE KEY UPDATE` referring to the selected row's
//!   columns. MySQL 8.0.20+ deprecates `VALUES(col)` and offers a row alias
//!   (`INSERT … VALUES (…) AS new`) that MariaDB rejects; `INSERT … SELECT` needs neither on
//!   both. Neither `RETURNING` (MariaDB only) nor affected-row counts decide an outcome: the
//!   count of an unchanged upsert is 0, or 1 with `CLIENT_FOUND_ROWS` (settable through
//!   `mysql_opts`), so acquire reads the lease row after its `UPDATE` instead (below).
//! * Acquire and release change the lease row and bump the `version` of the sessions'
//!   leases in one multi-table `UPDATE` (both servers; the session table appears under two
//!   aliases, allowed as no key column is set), with `STRAIGHT_JOIN` fixing the order the
//!   rows are locked in. A name never acquired first gets a free row with token 0.
//! * The keep-alive's read lists the leases only when their version changed: its join key
//!   is `IF(listed, session_id, NULL)` on a materialized one-row derived table, so no lease
//!   row is read otherwise (both servers skip a lookup of a NULL key).
//! * Bounds on each statement: MariaDB's `max_statement_time` (seconds, fractional) bounds
//!   every statement, reads and writes. MySQL's `max_execution_time` (ms) bounds read-only
//!   `SELECT`s only, so on MySQL an `INSERT`/`UPDATE`/`DELETE` is bounded by the lock waits
//!   (`innodb_lock_wait_timeout` for row locks, `lock_wait_timeout` for metadata locks, both
//!   whole seconds, set on both servers) and, as a backstop, by the client's read/write
//!   timeout (the query timeout + 2 s: the connection is then dropped, while the server may
//!   finish the statement). `GET_LOCK(name, seconds)` (schema installation) has its own
//!   timeout.

use super::tls::{SqlTls, SslMode};
use super::{
    with_conn, AcqReport, AcqRow, ConnectionProbe, DbError, DbResult, Driver, Flavor, Kind, Known,
    Options, Pool, PoolConn, RawListing, Renewed, ServerVersion, Tables,
};
use crate::backends::BackendUrl;
use crate::error::{Error, Result};
use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Opts, OptsBuilder, Row, Value};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// UTC epoch µs of the statement's start.
const NOW_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
/// The same instant in whole ms (rounded down).
const NOW: &str = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
/// The value of the lease row `l`'s current term: set only for the token it was set with.
const TERM_VALUE: &str = "COALESCE(CASE WHEN l.value_token = l.token THEN l.term_value END, '')";

/// The oldest servers accepted.
const REQUIRED: &str = "MySQL 8.0 or later, or MariaDB 10.6 or later";

/// Tells MySQL from MariaDB and reads the version from `SELECT VERSION(), @@version_comment`.
/// `None` when no version number leads the string.
pub(crate) fn parse_server(version: &str, comment: &str) -> Option<ServerVersion> {
    let maria = |s: &str| s.to_ascii_lowercase().contains("mariadb");
    let flavor = if maria(version) || maria(comment) {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    // MariaDB behind some proxies (and in its handshake) prefixes "5.5.5-".
    let v = match flavor {
        Flavor::MariaDb => version.strip_prefix("5.5.5-").unwrap_or(version),
        Flavor::MySql => version,
    };
    let end = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let mut parts = v[..end].split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next().flatten()?;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some(ServerVersion {
        flavor,
        version: (major, minor, patch),
        reported: version.to_owned(),
    })
}

/// Whether the backend supports this server: MySQL 8.0+ or MariaDB 10.6+.
pub(crate) fn supported(v: &ServerVersion) -> bool {
    let (major, minor, _) = v.version;
    match v.flavor {
        Flavor::MySql => major >= 8,
        Flavor::MariaDb => (major, minor) >= (10, 6),
    }
}

/// The server of a new connection, refused when unsupported.
fn detect(conn: &mut Conn) -> Result<ServerVersion> {
    let row: Option<Row> = conn
        .query_first("SELECT VERSION(), @@version_comment")
        .map_err(|e| super::failure::error("connecting to MySQL", e))?;
    let row = row.map(cells).unwrap_or_default();
    let version = text(cell(&row, 0)).unwrap_or_default();
    let comment = text(cell(&row, 1)).unwrap_or_default();
    match parse_server(&version, &comment) {
        Some(v) if supported(&v) => Ok(v),
        _ => Err(Error::UnsupportedServer {
            server: version,
            required: REQUIRED,
        }),
    }
}

/// The session settings that bound every statement on this connection (see the module
/// docs): one `SET` statement, valid on the detected flavor.
fn limits(flavor: Flavor, timeout: Duration) -> String {
    let lock_wait = timeout.as_secs_f64().ceil().max(1.0) as u64;
    let first = match flavor {
        Flavor::MariaDb => format!(
            "max_statement_time = {:.3}",
            timeout.as_secs_f64().max(0.001)
        ),
        Flavor::MySql => format!(
            "max_execution_time = {}",
            timeout.as_millis().clamp(1, u128::from(u32::MAX))
        ),
    };
    format!(
        "SET SESSION {first}, SESSION innodb_lock_wait_timeout = {lock_wait}, \
         SESSION lock_wait_timeout = {lock_wait}"
    )
}

pub(crate) struct MyConn {
    conn: Conn,
}

impl PoolConn for MyConn {
    fn is_closed(&self) -> bool {
        false
    }
    fn is_valid(&mut self, _timeout: Duration) -> bool {
        // Bounded by the connection's read timeout (the query timeout plus 2 s).
        self.conn.ping().is_ok()
    }
}

fn classify(e: ::mysql::Error) -> DbError {
    let kind = match &e {
        ::mysql::Error::MySqlError(m) => match m.code {
            // ER_LOCK_DEADLOCK; MariaDB's ER_CHECKREAD (record changed since last read)
            1213 | 1020 => Kind::Retry,
            // lock wait timeout, MariaDB max_statement_time, MySQL max_execution_time,
            // query interrupted
            1205 | 1969 | 3024 | 1317 => Kind::Timeout,
            // server shutdown, connection killed
            1053 | 1927 => Kind::Connection,
            // ER_NO_SUCH_TABLE
            1146 => Kind::MissingTable,
            _ => Kind::Other,
        },
        _ => Kind::Connection,
    };
    DbError::new(kind, e)
}

struct Sql {
    open: String,
    open_read: String,
    ka_update: String,
    ka_read: String,
    rm_session: String,
    rm_leases: String,
    rm_members: String,
    acquire: String,
    acquire_new: String,
    acquire_report: String,
    release: String,
    owner: String,
    set_value: String,
    value_check: String,
    join: String,
    join_check: String,
    leave: String,
    members: String,
    purge_find: String,
    purge_members: String,
}

impl Sql {
    fn new(t: &Tables) -> Self {
        let (s, l, m) = (&t.session, &t.lease, &t.member);
        Sql {
            open: format!(
                "INSERT INTO {s} (session_id, expires_at, metadata) VALUES (?, {NOW} + ?, ?)"
            ),
            // Measured after the insert committed: never more than the insert granted.
            open_read: format!("SELECT expires_at * 1000 - {NOW_US} FROM {s} WHERE session_id = ?"),
            ka_update: format!(
                "UPDATE {s} SET expires_at = {NOW} + ? WHERE session_id = ? AND expires_at > {NOW}"
            ),
            // The renewal's read, one consistent read: the remaining time, the version of
            // the session's leases and whether they are listed: when the version differs
            // from the one passed in (NULL for none), or fewer than the count passed in of
            // the sample's (token, name) pairs (NULL pairs for none; a lookup by name
            // each, the primary key) are still held. Otherwise the join's key is NULL and no
            // lease row is read. The derived table (materialized: it has a LIMIT, on both
            // servers) computes the flag once.
            ka_read: format!(
                "SELECT d.rem, d.version, d.listed, l.name, l.token FROM \
                 (SELECT s.session_id, s.expires_at * 1000 - {NOW_US} AS rem, s.version, \
                         (s.version <> ? OR ? IS NULL OR \
                          COALESCE((SELECT k.session_id = s.session_id AND k.token = ? \
                                    FROM {l} k WHERE k.name = ?), 0) \
                          + COALESCE((SELECT k.session_id = s.session_id AND k.token = ? \
                                    FROM {l} k WHERE k.name = ?), 0) \
                          < ?) AS listed \
                  FROM {s} s WHERE s.session_id = ? LIMIT 1) d \
                 LEFT JOIN {l} l ON l.session_id = IF(d.listed, d.session_id, NULL)"
            ),
            rm_session: format!("DELETE FROM {s} WHERE session_id = ?"),
            rm_leases: format!("UPDATE {l} SET session_id = '' WHERE session_id = ?"),
            rm_members: format!("DELETE FROM {m} WHERE session_id = ?"),
            // One multi-table UPDATE takes an existing lease row that is free or whose
            // holder's session expired or is gone, and bumps the version of both sessions'
            // leases with it. It locks (X, as every table it names is updated) the acquirer's
            // session row, then the lease row, then the holder's session row: a keep-alive of
            // the holder is serialized with it, and reads the holder's newest row. (Not in
            // session id order as on PostgreSQL: a deadlock needs a holder that releases at
            // the instant it expires, and is retried.) Its outcome is read from the lease row
            // afterwards, not from the affected-row count (which `CLIENT_FOUND_ROWS`
            // changes). MySQL updates a NULL-complemented row of an outer join nowhere.
            acquire: format!(
                "UPDATE {s} me STRAIGHT_JOIN {l} l ON l.name = ? \
                 LEFT JOIN {s} h ON h.session_id = l.session_id \
                 SET l.token = l.token + 1, l.session_id = me.session_id, \
                     me.version = me.version + 1, h.version = h.version + 1 \
                 WHERE me.session_id = ? AND me.expires_at > {NOW} \
                   AND l.session_id <> me.session_id \
                   AND (h.session_id IS NULL OR h.expires_at <= {NOW})"
            ),
            // A name never acquired gets a free row with token 0 first (the first term has
            // token 1), which `acquire` then takes.
            acquire_new: format!(
                "INSERT INTO {l} (name, session_id, token) VALUES (?, '', 0) \
                 ON DUPLICATE KEY UPDATE {l}.token = {l}.token"
            ),
            acquire_report: format!(
                "SELECT (SELECT expires_at FROM {s} WHERE session_id = ?) * 1000 - {NOW_US}, \
                 l.session_id, l.token, \
                 (SELECT h.expires_at FROM {s} h WHERE h.session_id = l.session_id) * 1000 \
                   - {NOW_US} \
                 FROM (SELECT 1 AS one) d LEFT JOIN {l} l ON l.name = ?"
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
            owner: format!(
                "SELECT l.session_id, l.token, s.expires_at * 1000 - {NOW_US}, {TERM_VALUE} \
                 FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
                 WHERE l.name = ? AND s.expires_at > {NOW}"
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
            purge_find: format!(
                "SELECT session_id FROM {s} WHERE expires_at <= {NOW} ORDER BY expires_at LIMIT ?"
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

pub(crate) struct MyDriver {
    pool: Pool<MyConn>,
    tables: Tables,
    sql: Sql,
    /// Fair-lock queue statements, kept apart from `sql` (see `Driver::queue_place`).
    queue_sql: QueueSql,
    /// Run-once job statements.
    job_sql: super::jobs::JobSql,
    timeout: Duration,
    server: Arc<OnceLock<ServerVersion>>,
}

/// The driver's host (an IPv6 address without its brackets) and port (3306 by default) of
/// one URL host entry; a bad port is an error, never a silent default.
fn host_and_port(entry: &str) -> std::result::Result<(String, u16), String> {
    let hp = crate::backends::options::host_port(entry)?;
    Ok((hp.host, hp.port.unwrap_or(3306)))
}

/// The `mysql` crate's TLS settings for `tls`: `None` for `sslmode=disable`.
#[cfg(feature = "tls")]
fn ssl_opts(tls: &SqlTls) -> Option<::mysql::SslOpts> {
    if tls.mode == SslMode::Disable {
        return None;
    }
    let mut s = ::mysql::SslOpts::default();
    if let Some(ca) = &tls.ca {
        s = s.with_root_cert_path(Some(ca.path.clone()));
    }
    if let Some((cert, key)) = &tls.client {
        s = s.with_client_identity(Some(::mysql::ClientIdentity::new(
            cert.path.clone(),
            key.path.clone(),
        )));
    }
    if !tls.mode.verifies(tls.ca.is_some()) {
        // `prefer`/`require` without `ca`: encrypted, the server not authenticated (libpq).
        s = s.with_danger_accept_invalid_certs(true);
    } else if tls.mode != SslMode::VerifyFull {
        s = s.with_danger_skip_domain_validation(true);
    }
    Some(s)
}

/// Without the `tls` feature the URL parser accepts `sslmode=disable` only.
#[cfg(not(feature = "tls"))]
fn ssl_opts(_tls: &SqlTls) -> Option<::mysql::SslOpts> {
    None
}

impl MyDriver {
    pub(crate) fn new(
        url: &BackendUrl,
        opts: Option<Opts>,
        tls: &SqlTls,
        options: &Options,
        tables: Tables,
    ) -> Result<Self> {
        // The URL's TLS options win; without them, `mysql_opts` keep their own `ssl_opts`.
        let url_tls = opts.is_none() || tls.given;
        let base = match opts {
            Some(o) => OptsBuilder::from_opts(o),
            None => {
                let mut b = OptsBuilder::new();
                if let Some(h) = url.hosts.first() {
                    let (host, port) = host_and_port(h).map_err(|reason| url.invalid(reason))?;
                    b = b.ip_or_hostname(Some(host)).tcp_port(port);
                }
                if url.hosts.len() > 1 {
                    return Err(url.invalid("a MySQL URL names one host"));
                }
                let db = url.path.trim_start_matches('/');
                b.user(url.user.clone())
                    .pass(url.password.clone())
                    .db_name((!db.is_empty()).then(|| db.to_owned()))
            }
        };
        let t = options.query_timeout;
        // Never the unix socket (`prefer_socket`), which would bypass TLS.
        let base = base
            .prefer_socket(false)
            .tcp_connect_timeout(Some(t))
            // A backstop above the server-side timeout: a read that long means the server or
            // the network is gone; the connection is then dropped.
            .read_timeout(Some(t + Duration::from_secs(2)))
            .write_timeout(Some(t + Duration::from_secs(2)));
        // `sslmode=prefer` falls back to these when the server offers no TLS.
        let plain: Option<Opts> =
            (tls.mode == SslMode::Prefer).then(|| base.clone().ssl_opts(None).into());
        let opts: Opts = if url_tls {
            base.ssl_opts(ssl_opts(tls)).into()
        } else {
            base.into()
        };
        let server = Arc::new(OnceLock::new());
        let detected = server.clone();
        let connect = move || -> Result<MyConn> {
            #[cfg(feature = "tls")]
            if opts.get_ssl_opts().is_some() {
                super::tls::rustls_config::install_provider();
            }
            let conn = match (Conn::new(opts.clone()), &plain) {
                (
                    Err(::mysql::Error::DriverError(::mysql::DriverError::TlsNotSupported)),
                    Some(plain),
                ) => Conn::new(plain.clone()),
                (r, _) => r,
            };
            let mut conn = conn.map_err(|e| super::failure::error("connecting to MySQL", e))?;
            let version = detect(&mut conn)?;
            conn.query_drop(limits(version.flavor, t))
                .map_err(|e| super::failure::error("configuring a MySQL connection", e))?;
            let _ = detected.set(version);
            Ok(MyConn { conn })
        };
        let driver = MyDriver {
            pool: Pool::new(options.pool_size, connect),
            sql: Sql::new(&tables),
            queue_sql: QueueSql::new(&tables),
            job_sql: super::jobs::JobSql::new(&tables, super::Dialect::Mysql, NOW, NOW_US),
            tables,
            timeout: t,
            server,
        };
        drop(driver.pool.get(t)?);
        Ok(driver)
    }

    /// Runs `f` on a pooled connection; `f` classifies driver errors with `classify` (`?`
    /// does) and decodes rows with the functions below, never with the crate's typed
    /// conversions (which panic on an unexpected value).
    fn run<T>(&self, mut f: impl FnMut(&mut Conn) -> DbResult<T>) -> DbResult<T> {
        with_conn(&self.pool, self.timeout, |c| f(&mut c.conn))
    }
}

impl From<::mysql::Error> for DbError {
    fn from(e: ::mysql::Error) -> Self {
        classify(e)
    }
}

/// The values of a row (a taken value reads as NULL).
fn cells(row: Row) -> Vec<Value> {
    row.unwrap_raw()
        .into_iter()
        .map(|v| v.unwrap_or(Value::NULL))
        .collect()
}

/// Column `i` of `row`; NULL when the row is shorter.
fn cell(row: &[Value], i: usize) -> &Value {
    row.get(i).unwrap_or(&Value::NULL)
}

/// An unexpected value (a wrong type, NULL where none can be, a missing row) for `what`.
fn bad(what: &str, row: &[Value]) -> DbError {
    let mut shown = format!("{row:?}");
    if shown.len() > 200 {
        let mut end = 200;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push('…');
    }
    DbError::new(
        Kind::Other,
        format!("unexpected value from MySQL for {what}: {shown}"),
    )
}

/// Column `i` as an integer, NULL as `None`; any other value is an error.
fn opt_int(what: &str, row: &[Value], i: usize) -> DbResult<Option<i64>> {
    match cell(row, i) {
        Value::NULL => Ok(None),
        v => int(v).map(Some).ok_or_else(|| bad(what, row)),
    }
}

/// Column `i` as UTF-8 text, NULL as `None`; any other value is an error.
fn opt_text(what: &str, row: &[Value], i: usize) -> DbResult<Option<String>> {
    match cell(row, i) {
        Value::NULL => Ok(None),
        v => text(v).map(Some).ok_or_else(|| bad(what, row)),
    }
}

/// Column `i` as an integer, required.
fn req_int(what: &str, row: &[Value], i: usize) -> DbResult<i64> {
    opt_int(what, row, i)?.ok_or_else(|| bad(what, row))
}

/// Column `i` as UTF-8 text, required.
fn req_text(what: &str, row: &[Value], i: usize) -> DbResult<String> {
    opt_text(what, row, i)?.ok_or_else(|| bad(what, row))
}

/// Whether `GET_LOCK` granted the lock: 1; 0 (timed out), NULL (an error) or anything
/// else means not.
fn lock_granted(row: Option<&[Value]>) -> bool {
    row.and_then(|r| int(cell(r, 0))) == Some(1)
}

/// The remaining µs of a session just opened (`open_read`).
fn opened(row: Option<Vec<Value>>) -> DbResult<i64> {
    let row = row.ok_or_else(|| bad("the new session (no row)", &[]))?;
    req_int("the new session's remaining time", &row, 0)
}

/// A keep-alive's read (`ka_read`): no row when the session is gone, else on every row its
/// remaining µs (not positive: expired), the version of its leases and whether they are
/// listed (0 or 1), with a held lease's name and token (NULL, NULL when it holds none or they
/// are not listed).
fn renewed(rows: &[Vec<Value>]) -> DbResult<Option<Renewed>> {
    const WHAT: &str = "a keep-alive";
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let remaining_us = req_int(WHAT, first, 0)?;
    if remaining_us <= 0 {
        return Ok(None);
    }
    let version = req_int(WHAT, first, 1)?;
    let listed = match req_int(WHAT, first, 2)? {
        0 => false,
        1 => true,
        _ => return Err(bad(WHAT, first)),
    };
    let mut leases = Vec::new();
    for r in rows {
        match (opt_text(WHAT, r, 3)?, opt_int(WHAT, r, 4)?) {
            (Some(name), Some(token)) if listed => leases.push((name, token)),
            (None, None) => {}
            _ => return Err(bad(WHAT, r)),
        }
    }
    Ok(Some(Renewed {
        remaining_us,
        version,
        leases: listed.then_some(leases),
    }))
}

/// The report read after an acquire's `UPDATE` (`acquire_report`): always one row, NULLs
/// where the session or the lease row is missing.
fn acq_report(row: Option<Vec<Value>>) -> DbResult<AcqReport> {
    const WHAT: &str = "an acquire";
    let row = row.ok_or_else(|| bad(WHAT, &[]))?;
    Ok(AcqReport {
        my_remaining: opt_int(WHAT, &row, 0)?,
        new_token: None,
        holder: opt_text(WHAT, &row, 1)?,
        token: opt_int(WHAT, &row, 2)?,
        holder_remaining: opt_int(WHAT, &row, 3)?,
    })
}

/// A live holder (`owner`): session, token, remaining µs, all required.
fn holder(row: Option<Vec<Value>>) -> DbResult<Option<(String, i64, i64, String)>> {
    const WHAT: &str = "a lease owner";
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some((
        req_text(WHAT, &row, 0)?,
        req_int(WHAT, &row, 1)?,
        req_int(WHAT, &row, 2)?,
        req_text(WHAT, &row, 3)?,
    )))
}

/// Adds the `term_value` and `value_token` columns to a lease table of an earlier version.
fn add_value(c: &mut Conn, lease: &str) -> std::result::Result<(), ::mysql::Error> {
    for (column, def) in [
        (
            "term_value",
            "VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL",
        ),
        ("value_token", "BIGINT NULL"),
    ] {
        let row: Option<Row> = c.exec_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?",
            (lease, column),
        )?;
        if row.map(cells).and_then(|r| int(cell(&r, 0))) == Some(0) {
            c.query_drop(format!("ALTER TABLE {lease} ADD COLUMN {column} {def}"))?;
        }
    }
    Ok(())
}

/// Adds the `version` column to a session table of an earlier version (MySQL 8 has no
/// `ADD COLUMN IF NOT EXISTS`; MariaDB has).
fn add_version(c: &mut Conn, session: &str) -> std::result::Result<(), ::mysql::Error> {
    let row: Option<Row> = c.exec_first(
        "SELECT COUNT(*) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'version'",
        (session,),
    )?;
    if row.map(cells).and_then(|r| int(cell(&r, 0))) == Some(0) {
        c.query_drop(format!(
            "ALTER TABLE {session} ADD COLUMN version BIGINT NOT NULL DEFAULT 0"
        ))?;
    }
    Ok(())
}

/// `join_check`: whether the session is live (a count of 1).
fn live(row: Option<Vec<Value>>) -> DbResult<bool> {
    const WHAT: &str = "a session check";
    let row = row.ok_or_else(|| bad(WHAT, &[]))?;
    Ok(req_int(WHAT, &row, 0)? == 1)
}

/// A member row: session id and metadata, both required text.
fn member(row: &[Value]) -> DbResult<(String, String)> {
    const WHAT: &str = "a group member";
    Ok((req_text(WHAT, row, 0)?, req_text(WHAT, row, 1)?))
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::UInt(u) => i64::try_from(*u).ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::Bytes(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
    }
}

/// The fair-lock queue statements (four autocommit statements place a waiter; a place
/// counted by another waiter between them only reorders simultaneous arrivals).
struct QueueSql {
    live: String,
    prune: String,
    upsert: String,
    ahead: String,
    leave: String,
    list: String,
}

impl QueueSql {
    fn new(t: &Tables) -> Self {
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

impl Driver for MyDriver {
    fn queue_place(&self, id: &str, name: &str, patience_ms: i64) -> DbResult<Option<i64>> {
        let q = &self.queue_sql;
        self.run(|c| {
            let live: Option<Row> = c.exec_first(&q.live, (id,))?;
            let live = live.map(cells).unwrap_or_default();
            if req_int("a session's liveness", &live, 0)? == 0 {
                return Ok(None);
            }
            c.exec_drop(&q.prune, (name, id))?;
            c.exec_drop(&q.upsert, (name, id, patience_ms, patience_ms))?;
            let ahead: Option<Row> = c.exec_first(&q.ahead, (name, name, id))?;
            let ahead = ahead.map(cells).unwrap_or_default();
            Ok(Some(req_int("the places ahead", &ahead, 0)?))
        })
    }

    fn job_claim(&self, id: &str, name: &str, at_most_ms: i64) -> DbResult<Option<(i64, i64)>> {
        let q = &self.job_sql;
        self.run(|c| {
            c.exec_drop(&q.claim, (id, at_most_ms, name, id))?;
            if c.affected_rows() == 0 {
                return Ok(None);
            }
            // Read after the claim committed; only the claimer's end can change it meanwhile.
            let r: Option<Row> = c.exec_first(&q.claimed, (name, id))?;
            match r.map(cells) {
                Some(r) => Ok(Some((
                    req_int("a job's token", &r, 0)?,
                    req_int("a job's remaining time", &r, 1)?,
                ))),
                None => Ok(None),
            }
        })
    }

    fn job_report(&self, id: &str, name: &str) -> DbResult<super::jobs::JobReport> {
        self.run(|c| {
            let r: Option<Row> = c.exec_first(&self.job_sql.report, (id, name))?;
            let r = r.map(cells).unwrap_or_default();
            Ok(super::jobs::JobReport {
                me_live: req_int("a session's liveness", &r, 0)? == 1,
                exists: req_int("a job's row", &r, 1)? == 1,
                taken: req_int("a job's state", &r, 2)? == 1,
                remaining_us: req_int("a job's remaining time", &r, 3)?,
            })
        })
    }

    fn job_create(&self, name: &str) -> DbResult<()> {
        self.run(|c| Ok(c.exec_drop(&self.job_sql.create, (name,))?))
    }

    fn job_finish(&self, id: &str, name: &str, token: i64, at_least_ms: i64) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.job_sql.finish, (at_least_ms, name, id, token, id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    fn queue_leave(&self, id: &str, name: &str) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.queue_sql.leave, (name, id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    fn queue_list(&self, name: &str) -> DbResult<Vec<String>> {
        self.run(|c| {
            let rows: Vec<Row> = c.exec(&self.queue_sql.list, (name,))?;
            rows.into_iter()
                .map(|r| req_text("a queued session", &cells(r), 0))
                .collect()
        })
    }

    fn install_schema(&self) -> DbResult<()> {
        let script = self
            .tables
            .script(include_str!("../../../sql/init-simba-mysql.sql"));
        let secs = self.timeout.as_secs().max(1);
        self.run(|c| {
            // DDL commits implicitly: serialize concurrent installers with a named lock.
            let got: Option<Row> = c.exec_first("SELECT GET_LOCK('simba_install', ?)", (secs,))?;
            let got = lock_granted(got.map(cells).as_deref());
            let r = script
                .iter()
                .try_for_each(|s| c.query_drop(s))
                .and_then(|()| add_version(c, &self.tables.session))
                .and_then(|()| add_value(c, &self.tables.lease));
            if got {
                c.query_drop("DO RELEASE_LOCK('simba_install')")?;
            }
            Ok(r?)
        })
    }

    fn drop_tables(&self) -> DbResult<()> {
        let t = &self.tables;
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}",
            t.job, t.queue, t.member, t.lease, t.session
        );
        self.run(|c| Ok(c.query_drop(&sql)?))
    }

    fn open_session(&self, id: &str, lease_ms: i64, metadata: &str) -> DbResult<i64> {
        // MySQL has no RETURNING: the remaining time is read by a second statement, later
        // than the insert, so it can only be smaller than what the insert granted.
        self.run(|c| {
            c.exec_drop(&self.sql.open, (id, lease_ms, metadata))?;
            let rem: Option<Row> = c.exec_first(&self.sql.open_read, (id,))?;
            opened(rem.map(cells))
        })
    }

    fn keep_alive(
        &self,
        id: &str,
        lease_ms: i64,
        known: Option<Known<'_>>,
    ) -> DbResult<Option<Renewed>> {
        let version = known.map(|k| k.version);
        let sample = known.map_or(&[][..], |k| k.sample);
        let pair = |i: usize| match sample.get(i) {
            Some((n, t)) => (Value::from(n.as_str()), Value::from(*t)),
            None => (Value::NULL, Value::NULL),
        };
        let ((n1, t1), (n2, t2)) = (pair(0), pair(1));
        let params = vec![
            Value::from(version),
            Value::from(version),
            t1,
            n1,
            t2,
            n2,
            Value::from(sample.len().min(super::SAMPLE) as i64),
            Value::from(id),
        ];
        self.run(|c| {
            // Two autocommit statements: the renewal, then one read after it committed, so
            // a take-over that committed while the UPDATE waited for the holder's session
            // row is seen, with the version it bumped. (No rows changed can also mean a
            // renewal to the same value within one millisecond: the read decides.)
            c.exec_drop(&self.sql.ka_update, (lease_ms, id))?;
            let rows: Vec<Row> = c.exec(&self.sql.ka_read, params.clone())?;
            let rows: Vec<Vec<Value>> = rows.into_iter().map(cells).collect();
            renewed(&rows)
        })
    }

    fn remove_session(&self, id: &str) -> DbResult<()> {
        // Three autocommit statements, the session first: each holds its locks alone, so none
        // can deadlock with an acquire (session rows, then the lease row).
        self.run(|c| {
            c.exec_drop(&self.sql.rm_session, (id,))?;
            c.exec_drop(&self.sql.rm_leases, (id,))?;
            Ok(c.exec_drop(&self.sql.rm_members, (id,))?)
        })
    }

    fn acquire(&self, id: &str, name: &str) -> DbResult<AcqRow> {
        self.run(|c| {
            // The take, then the lease row as committed: it is the acquirer's (a new term or
            // the same one) or another live session's. Between the two statements the row
            // can change only if the acquirer's session expired (then `my_remaining` says so)
            // or the acquirer released it itself. A name without a row gets a free one, and
            // the take runs again.
            c.exec_drop(&self.sql.acquire, (name, id))?;
            let report: Option<Row> = c.exec_first(&self.sql.acquire_report, (id, name))?;
            let mut report = acq_report(report.map(cells))?;
            if report.token.is_none() && report.my_remaining.is_some_and(|r| r > 0) {
                c.exec_drop(&self.sql.acquire_new, (name,))?;
                c.exec_drop(&self.sql.acquire, (name, id))?;
                let again: Option<Row> = c.exec_first(&self.sql.acquire_report, (id, name))?;
                report = acq_report(again.map(cells))?;
            }
            Ok(report.outcome(id))
        })
    }

    fn release(&self, id: &str, name: &str, token: i64) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.sql.release, (name, token, id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    fn owner(&self, name: &str) -> DbResult<Option<(String, i64, i64, String)>> {
        self.run(|c| {
            let r: Option<Row> = c.exec_first(&self.sql.owner, (name,))?;
            holder(r.map(cells))
        })
    }

    fn set_value(&self, id: &str, name: &str, token: i64, value: &str) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.sql.set_value, (value, name, id, token))?;
            if c.affected_rows() > 0 {
                return Ok(true);
            }
            let r: Option<Row> = c.exec_first(&self.sql.value_check, (name, id, token, value))?;
            live(r.map(cells))
        })
    }

    fn join(&self, id: &str, group: &str) -> DbResult<bool> {
        self.run(|c| {
            // 1 = inserted; an existing membership counts 0, or 1 with `CLIENT_FOUND_ROWS`:
            // either way the session was live (the insert selects only a live session).
            c.exec_drop(&self.sql.join, (group, id))?;
            if c.affected_rows() == 1 {
                return Ok(true);
            }
            let r: Option<Row> = c.exec_first(&self.sql.join_check, (id,))?;
            live(r.map(cells))
        })
    }

    fn leave(&self, id: &str, group: &str) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.sql.leave, (group, id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    fn members(&self, group: &str) -> DbResult<Vec<(String, String)>> {
        self.run(|c| {
            let rows: Vec<Row> = c.exec(&self.sql.members, (group,))?;
            rows.into_iter().map(|r| member(&cells(r))).collect()
        })
    }

    fn purge(&self, limit: usize) -> DbResult<usize> {
        let s = &self.tables.session;
        self.run(|c| {
            let rows: Vec<Row> = c.exec(&self.sql.purge_find, (limit as u64,))?;
            let ids = rows
                .into_iter()
                .map(|r| req_text("an expired session", &cells(r), 0))
                .collect::<DbResult<Vec<String>>>()?;
            if ids.is_empty() {
                return Ok(0);
            }
            let marks = vec!["?"; ids.len()].join(",");
            // The session rows go first (lock order), each only if still expired when its
            // row is locked; then the memberships of the ids whose session row is gone.
            c.exec_drop(
                format!("DELETE FROM {s} WHERE session_id IN ({marks}) AND expires_at <= {NOW}"),
                ids.clone(),
            )?;
            let n = c.affected_rows() as usize;
            c.exec_drop(self.sql.purge_members.replace("{}", &marks), ids.clone())?;
            Ok(n)
        })
    }

    fn ping(&self) -> DbResult<()> {
        // A prepared statement (the crate caches it per connection): one round trip.
        self.run(|c| Ok(c.exec_drop("SELECT 1", ())?))
    }

    fn connection_ids(&self) -> Vec<u64> {
        let mut ids = Vec::new();
        self.pool
            .for_each_idle(|c| ids.push(u64::from(c.conn.connection_id())));
        ids
    }

    fn server(&self) -> Option<ServerVersion> {
        self.server.get().cloned()
    }

    fn list(&self) -> DbResult<RawListing> {
        let (s, l, m) = (
            &self.tables.session,
            &self.tables.lease,
            &self.tables.member,
        );
        let sessions = format!(
            "SELECT session_id, expires_at * 1000 - {NOW_US}, metadata FROM {s} \
             WHERE expires_at > {NOW} ORDER BY session_id"
        );
        let leases = format!(
            "SELECT l.name, l.session_id, l.token, s.expires_at * 1000 - {NOW_US}, {TERM_VALUE} \
             FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
             WHERE s.expires_at > {NOW} ORDER BY l.name"
        );
        let members = format!(
            "SELECT m.group_name, m.session_id, s.metadata FROM {m} m \
             JOIN {s} s ON s.session_id = m.session_id \
             WHERE s.expires_at > {NOW} ORDER BY m.group_name, m.session_id"
        );
        self.run(|c| {
            let mut out = RawListing::default();
            for r in c.query::<Row, _>(&sessions)? {
                let r = cells(r);
                out.sessions.push((
                    req_text("a session id", &r, 0)?,
                    req_int("a remaining time", &r, 1)?,
                    req_text("session metadata", &r, 2)?,
                ));
            }
            for r in c.query::<Row, _>(&leases)? {
                let r = cells(r);
                out.leases.push((
                    req_text("a lease name", &r, 0)?,
                    req_text("a session id", &r, 1)?,
                    req_int("a token", &r, 2)?,
                    req_int("a remaining time", &r, 3)?,
                    req_text("a term value", &r, 4)?,
                ));
            }
            for r in c.query::<Row, _>(&members)? {
                let r = cells(r);
                out.members.push((
                    req_text("a group name", &r, 0)?,
                    req_text("a session id", &r, 1)?,
                    req_text("session metadata", &r, 2)?,
                ));
            }
            Ok(out)
        })
    }

    fn clock_ms(&self) -> DbResult<i64> {
        self.run(|c| {
            let r: Option<Row> = c.query_first(format!("SELECT {NOW}"))?;
            let r = r.map(cells).unwrap_or_default();
            req_int("the server's clock", &r, 0)
        })
    }

    fn probe_connections(&self) -> DbResult<ConnectionProbe> {
        let open = || {
            self.pool
                .open_unpooled(self.timeout)
                .map_err(|e| DbError::new(Kind::Connection, e))
        };
        let (mut a, mut b) = (open()?, open()?);
        let id = |c: &mut Conn| -> DbResult<u64> {
            let r: Option<Row> = c.query_first("SELECT CONNECTION_ID()")?;
            let r = r.map(cells).unwrap_or_default();
            u64::try_from(req_int("a connection id", &r, 0)?)
                .map_err(|_| bad("a connection id", &r))
        };
        let mut own = vec![id(&mut a.conn)?, id(&mut a.conn)?];
        b.conn.query_drop("START TRANSACTION")?;
        let other = id(&mut b.conn)?;
        own.push(id(&mut a.conn)?);
        let _ = b.conn.query_drop("ROLLBACK");
        Ok(ConnectionProbe {
            own,
            other,
            statement_timeout: None,
        })
    }

    fn key_collations(&self) -> DbResult<Vec<(String, String, String)>> {
        let t = &self.tables;
        let names = (
            t.session.clone(),
            t.lease.clone(),
            t.member.clone(),
            t.queue.clone(),
            t.job.clone(),
        );
        self.run(|c| {
            Ok(c.exec(
                "SELECT TABLE_NAME, COLUMN_NAME, COALESCE(COLLATION_NAME, '') \
                 FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?, ?, ?) \
                 AND COLUMN_NAME IN ('name', 'session_id', 'group_name') ORDER BY 1, 2",
                names.clone(),
            )?)
        })
    }

    fn setting(&self, name: &str) -> DbResult<Option<String>> {
        // The caller checked the name ([A-Za-z0-9_.]); `SHOW` takes no placeholder on every
        // server, and `_` (a LIKE wildcard) is escaped.
        let sql = format!("SHOW GLOBAL VARIABLES LIKE '{}'", name.replace('_', "\\_"));
        self.run(|c| {
            let row: Option<(String, Option<String>)> = c.query_first(&sql)?;
            Ok(row.and_then(|(n, v)| {
                if n.eq_ignore_ascii_case(name) {
                    v
                } else {
                    None
                }
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(version: &str, comment: &str) -> ServerVersion {
        parse_server(version, comment).expect(version)
    }

    #[test]
    fn server_versions_are_parsed_and_checked() {
        let cases = [
            (
                "10.11.19-MariaDB-0+deb12u1",
                "Debian 12",
                Flavor::MariaDb,
                (10, 11, 19),
                true,
            ),
            (
                "8.0.36",
                "MySQL Community Server - GPL",
                Flavor::MySql,
                (8, 0, 36),
                true,
            ),
            (
                "5.7.44",
                "MySQL Community Server (GPL)",
                Flavor::MySql,
                (5, 7, 44),
                false,
            ),
            (
                "10.5.2-MariaDB",
                "mariadb.org binary distribution",
                Flavor::MariaDb,
                (10, 5, 2),
                false,
            ),
            ("11.4.2-MariaDB-log", "", Flavor::MariaDb, (11, 4, 2), true),
            ("10.6.0-MariaDB", "", Flavor::MariaDb, (10, 6, 0), true),
            (
                "5.5.5-10.11.6-MariaDB",
                "",
                Flavor::MariaDb,
                (10, 11, 6),
                true,
            ),
            ("8.4.0-log", "", Flavor::MySql, (8, 4, 0), true),
            ("9.1.0", "", Flavor::MySql, (9, 1, 0), true),
            (
                "8.0.36-28",
                "Percona Server (GPL)",
                Flavor::MySql,
                (8, 0, 36),
                true,
            ),
            // The flavor from the comment when the version string does not say.
            (
                "10.11.2",
                "MariaDB Server",
                Flavor::MariaDb,
                (10, 11, 2),
                true,
            ),
            ("10.4", "MariaDB Server", Flavor::MariaDb, (10, 4, 0), false),
        ];
        for (version, comment, flavor, numbers, ok) in cases {
            let s = v(version, comment);
            assert_eq!(s.flavor, flavor, "{version}");
            assert_eq!(s.version, numbers, "{version}");
            assert_eq!(s.reported, version);
            assert_eq!(supported(&s), ok, "{version}");
        }
        assert_eq!(parse_server("", ""), None);
        assert_eq!(parse_server("MariaDB", ""), None);
    }

    #[test]
    fn unexpected_values_are_errors_not_panics() {
        use Value::{Bytes, Int, NULL};
        let b = |s: &[u8]| Bytes(s.to_vec());
        // GET_LOCK: 1 only; NULL (an error on the server), 0, garbage or no row: not granted.
        assert!(lock_granted(Some(&[Int(1)])));
        assert!(lock_granted(Some(&[b(b"1")])));
        for row in [&[NULL][..], &[Int(0)], &[b(b"\xff")], &[]] {
            assert!(!lock_granted(Some(row)), "{row:?}");
        }
        assert!(!lock_granted(None));
        // A new session's remaining time: required.
        assert_eq!(opened(Some(vec![Int(5)])).unwrap(), 5);
        for row in [
            None,
            Some(vec![NULL]),
            Some(vec![b(b"\xff\xfe")]),
            Some(vec![]),
        ] {
            assert!(opened(row.clone()).is_err(), "{row:?}");
        }
        // Keep-alive rows: remaining, version, listed, name, token.
        let ka = |rem: i64, v: i64, leases: Option<Vec<(&str, i64)>>| {
            Some(Renewed {
                remaining_us: rem,
                version: v,
                leases: leases.map(|l| l.into_iter().map(|(n, t)| (n.to_owned(), t)).collect()),
            })
        };
        assert_eq!(renewed(&[]).unwrap(), None);
        assert_eq!(
            renewed(&[vec![Int(-3), Int(1), Int(1), NULL, NULL]]).unwrap(),
            None
        );
        assert_eq!(
            renewed(&[vec![Int(10), Int(4), Int(1), NULL, NULL]]).unwrap(),
            ka(10, 4, Some(vec![]))
        );
        assert_eq!(
            renewed(&[vec![Int(10), Int(4), Int(0), NULL, NULL]]).unwrap(),
            ka(10, 4, None)
        );
        assert_eq!(
            renewed(&[vec![Int(10), Int(4), Int(1), b(b"job"), Int(3)]]).unwrap(),
            ka(10, 4, Some(vec![("job", 3)]))
        );
        for rows in [
            vec![vec![NULL, Int(1), Int(1), NULL, NULL]],
            vec![vec![b(b"ten"), Int(1), Int(1), NULL, NULL]],
            vec![vec![Int(10), NULL, Int(1), NULL, NULL]],
            vec![vec![Int(10), Int(1), NULL, NULL, NULL]],
            vec![vec![Int(10), Int(1), Int(2), NULL, NULL]],
            vec![vec![Int(10), Int(1), Int(0), b(b"job"), Int(3)]],
            vec![vec![Int(10), Int(1), Int(1), b(b"\xff\xfe"), Int(3)]],
            vec![vec![Int(10), Int(1), Int(1), b(b"job"), NULL]],
            vec![vec![Int(10), Int(1), Int(1), NULL, Int(3)]],
            vec![vec![Int(10), Int(1), Int(1), b(b"job"), b(b"three")]],
        ] {
            assert!(renewed(&rows).is_err(), "{rows:?}");
        }
        // The acquire report: one row, NULLs allowed, wrong types not.
        assert!(acq_report(Some(vec![NULL, NULL, NULL, NULL])).is_ok());
        assert!(acq_report(None).is_err());
        assert!(acq_report(Some(vec![Int(1), b(b"\xff"), Int(2), NULL])).is_err());
        assert!(acq_report(Some(vec![Int(1), b(b"s"), b(b"x"), NULL])).is_err());
        // Owner, session check, members.
        assert_eq!(holder(None).unwrap(), None);
        assert!(holder(Some(vec![b(b"s"), NULL, Int(1)])).is_err());
        assert!(holder(Some(vec![b(b"s"), Int(1)])).is_err());
        assert!(live(Some(vec![NULL])).is_err());
        assert!(live(None).is_err());
        assert!(live(Some(vec![Int(1)])).unwrap());
        assert!(member(&[b(b"s"), b(b"\xff")]).is_err());
        assert!(member(&[b(b"s"), NULL]).is_err());
        assert_eq!(
            member(&[b(b"s"), b(b"m")]).unwrap(),
            ("s".to_owned(), "m".to_owned())
        );
    }

    #[test]
    fn statement_bounds_per_flavor() {
        let t = Duration::from_millis(1500);
        assert_eq!(
            limits(Flavor::MariaDb, t),
            "SET SESSION max_statement_time = 1.500, SESSION innodb_lock_wait_timeout = 2, \
             SESSION lock_wait_timeout = 2"
        );
        assert_eq!(
            limits(Flavor::MySql, t),
            "SET SESSION max_execution_time = 1500, SESSION innodb_lock_wait_timeout = 2, \
             SESSION lock_wait_timeout = 2"
        );
        let tiny = limits(Flavor::MySql, Duration::from_micros(10));
        assert!(tiny.contains("max_execution_time = 1,"), "{tiny}");
        assert!(tiny.contains("innodb_lock_wait_timeout = 1,"), "{tiny}");
    }

    #[test]
    fn url_hosts_give_the_driver_a_bare_address_and_a_checked_port() {
        assert_eq!(super::host_and_port("db").unwrap(), ("db".into(), 3306));
        assert_eq!(
            super::host_and_port("db:3307").unwrap(),
            ("db".into(), 3307)
        );
        assert_eq!(super::host_and_port("[::1]").unwrap(), ("::1".into(), 3306));
        assert_eq!(
            super::host_and_port("[::1]:3307").unwrap(),
            ("::1".into(), 3307)
        );
        assert!(
            super::host_and_port("db:33o6").is_err(),
            "no silent default port"
        );
    }
}
