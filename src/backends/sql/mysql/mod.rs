//! The MySQL 8 / MariaDB 10.6+ dialect (`mysql` crate, blocking): [`MyDriver`], the
//! [`Driver`] over a pool of [`MyConn`]s.
//!
//! MySQL 8.0 is the target; the tests run on MariaDB 10.11. Every statement is in the subset
//! both document, and every new connection reads `SELECT VERSION(), @@version_comment` to tell
//! the two apart (MySQL 8.0+ and MariaDB 10.6+ are accepted; older servers are refused with
//! [`Error::UnsupportedServer`](crate::Error::UnsupportedServer)).
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
//!   both. Neither `RETURNING` (MariaDB only) nor affected-row counts alone decide an
//!   outcome: the count of an unchanged upsert is 0, or 1 with `CLIENT_FOUND_ROWS` (settable
//!   through `mysql_opts`). An acquire's `UPDATE` that begins a term (its lease row always
//!   changes: the count is not 0 either way) hands the new token and the remaining time back
//!   in its OK packet through `LAST_INSERT_ID(expr)` (both servers); one that took nothing
//!   is followed by a read of the lease row (see [`statements`]).
//! * Acquire and release change the lease row and bump the `version` of the sessions'
//!   leases in one multi-table `UPDATE` (both servers; the session table appears under two
//!   aliases, allowed as no key column is set), with `STRAIGHT_JOIN` fixing the order the
//!   rows are locked in. A name never acquired first gets a free row with token 0.
//! * The keep-alive's `UPDATE` hands the session's version and remaining time back in its
//!   OK packet the same way: a session that holds nothing, at the version it knows, is
//!   renewed in that one statement. Otherwise a read follows (a primary-key lookup with the
//!   sample's two), which says whether the leases and read-write terms changed; only then a
//!   third statement lists them (both, in one `UNION ALL`). The read and the listing that
//!   name the read-write tables are kept with the read-write statements; where those tables
//!   do not exist, the ones of the leases alone serve (see `Driver::keep_alive`).
//! * Bounds on each statement: MariaDB's `max_statement_time` (seconds, fractional) bounds
//!   every statement, reads and writes. MySQL's `max_execution_time` (ms) bounds read-only
//!   `SELECT`s only, so on MySQL an `INSERT`/`UPDATE`/`DELETE` is bounded by the lock waits
//!   (`innodb_lock_wait_timeout` for row locks, `lock_wait_timeout` for metadata locks, both
//!   whole seconds, set on both servers) and, as a backstop, by the client's read/write
//!   timeout (the query timeout + 2 s: the connection is then dropped, while the server may
//!   finish the statement). `GET_LOCK(name, seconds)` (schema installation) has its own
//!   timeout.
//! * Schema upgrades read `information_schema.COLUMNS` before an `ADD COLUMN` (MySQL 8 has no
//!   `ADD COLUMN IF NOT EXISTS`; MariaDB has).
//!
//! Files: [`statements`] (the SQL), [`rw`] (read-write locks: their statements and their
//! transaction), [`rows`] (decoding values without panics), [`server`] (detection and
//! per-flavor statement bounds), [`migrate`] (schema installation).

mod migrate;
mod rows;
mod rw;
mod server;
mod statements;

use self::rows::{
    acq_report, bad, cells, holder, live, member, opened, opt_int, renewal, renewed, req_int,
    req_text, taken,
};
use self::server::{detect, limits};
use self::statements::{QueueSql, Sql, NOW, NOW_US, TERM_VALUE};
use super::builder::Options;
use super::driver::{
    with_conn, AcqRow, ConnectionProbe, DbError, DbResult, Driver, Kind, Known, RawListing,
    Renewed, ServerVersion, SAMPLE,
};
use super::pool::{Pool, PoolConn};
use super::rw::{RwRow, RwStateRow};
use super::tables::Tables;
use super::tls::{SqlTls, SslMode};
use super::{failure, jobs, Dialect};
use crate::backends::BackendUrl;
use crate::error::Result;
use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Opts, OptsBuilder, Row, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

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

pub(crate) struct MyDriver {
    pool: Pool<MyConn>,
    tables: Tables,
    sql: Sql,
    /// Fair-lock queue statements, kept apart from `sql` (see `Driver::queue_place`).
    queue_sql: QueueSql,
    /// Run-once job statements.
    job_sql: jobs::JobSql,
    /// Read-write lock statements.
    rw_sql: rw::RwSql,
    timeout: Duration,
    server: Arc<OnceLock<ServerVersion>>,
    /// Set when a keep-alive found a table of read-write locks missing (an earlier schema):
    /// keep-alives then list the leases alone. Cleared by a read-write acquire that ran (the
    /// tables exist) and by `install_schema`.
    rw_missing: AtomicBool,
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
            let mut conn = conn.map_err(|e| failure::error("connecting to MySQL", e))?;
            let version = detect(&mut conn)?;
            conn.query_drop(limits(version.flavor, t))
                .map_err(|e| failure::error("configuring a MySQL connection", e))?;
            let _ = detected.set(version);
            Ok(MyConn { conn })
        };
        let driver = MyDriver {
            pool: Pool::new(options.pool_size, connect),
            sql: Sql::new(&tables),
            queue_sql: QueueSql::new(&tables),
            job_sql: jobs::JobSql::new(&tables, Dialect::Mysql, NOW, NOW_US),
            rw_sql: rw::RwSql::new(&tables),
            tables,
            timeout: t,
            server,
            rw_missing: AtomicBool::new(false),
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

impl MyDriver {
    /// A keep-alive with the read-write terms (`rw`) or without.
    fn keep_alive_with(
        &self,
        id: &str,
        lease_ms: i64,
        known: Option<Known<'_>>,
        rw: bool,
    ) -> DbResult<Option<Renewed>> {
        let (version, sample) = Known::for_statement(known, rw);
        let mut params = vec![Value::from(version), Value::from(version)];
        for i in 0..SAMPLE {
            let (n, t, side) = match sample.get(i) {
                Some((n, t, side)) => {
                    (Value::from(n.as_str()), Value::from(*t), Value::from(*side))
                }
                None => (Value::NULL, Value::NULL, Value::NULL),
            };
            if rw {
                params.extend([t.clone(), n.clone(), side.clone(), t, n, side]);
            } else {
                params.extend([t, n]);
            }
        }
        params.push(Value::from(sample.len().min(SAMPLE) as i64));
        params.push(Value::from(id));
        let (read, list) = if rw {
            (&self.rw_sql.ka_read, &self.rw_sql.ka_list)
        } else {
            (&self.sql.ka_read, &self.sql.ka_list)
        };
        self.run(|c| {
            // One autocommit statement while the session holds nothing and its version is the
            // known one (the renewal's OK packet carries both). Otherwise two (three after a
            // change): the renewal, then one read after it committed, so a take-over that
            // committed while the UPDATE waited for the holder's session row is seen, with
            // the version it bumped (as are a grant or a release of the session's own, which
            // lock its row too). (No rows changed can also mean a renewal to the same value
            // within one millisecond: the read decides.)
            c.exec_drop(&self.sql.ka_update, (lease_ms, lease_ms, id))?;
            // Holding nothing, at the known version: the OK packet says all (one statement).
            if let (Some(known), Some((version, remaining_us))) =
                (version, renewal(c.affected_rows(), c.last_insert_id()))
            {
                if sample.is_empty() && version == known {
                    return Ok(Some(Renewed {
                        remaining_us,
                        version,
                        rw,
                        held: None,
                    }));
                }
            }
            let head: Option<Row> = c.exec_first(read, params.clone())?;
            let Some(head) = head.map(cells) else {
                return renewed(&[], rw);
            };
            // The holdings only when the read says so (and the session is live); `renewed`
            // decodes the read's row followed by each listed `(name, token, side)`.
            const WHAT: &str = "a keep-alive";
            let listed = matches!(
                (opt_int(WHAT, &head, 0), opt_int(WHAT, &head, 2)),
                (Ok(Some(rem)), Ok(Some(1))) if rem > 0
            );
            let mut rows: Vec<Vec<Value>> = Vec::new();
            if listed {
                let held: Vec<Row> = if rw {
                    c.exec(list, (id, id))?
                } else {
                    c.exec(list, (id,))?
                };
                for h in held {
                    let mut row = head.clone();
                    row.extend(cells(h));
                    rows.push(row);
                }
            }
            if rows.is_empty() {
                let mut row = head;
                row.extend([Value::NULL, Value::NULL, Value::NULL]);
                rows.push(row);
            }
            renewed(&rows, rw)
        })
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

    fn job_report(&self, id: &str, name: &str) -> DbResult<jobs::JobReport> {
        self.run(|c| {
            let r: Option<Row> = c.exec_first(&self.job_sql.report, (id, name))?;
            let r = r.map(cells).unwrap_or_default();
            Ok(jobs::JobReport {
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

    fn rw_acquire(&self, id: &str, name: &str, write: bool, patience_ms: i64) -> DbResult<RwRow> {
        self.rw_acquire_my(id, name, write, patience_ms)
    }

    fn rw_release(&self, id: &str, name: &str, write: bool, token: i64) -> DbResult<bool> {
        self.rw_release_my(id, name, write, token)
    }

    fn rw_leave(&self, id: &str, name: &str) -> DbResult<bool> {
        self.rw_leave_my(id, name)
    }

    fn rw_state(&self, name: &str) -> DbResult<Vec<RwStateRow>> {
        self.rw_state_my(name)
    }

    fn rw_end_session(&self, id: &str) -> DbResult<()> {
        self.rw_end_session_my(id)
    }

    fn install_schema(&self) -> DbResult<()> {
        let secs = self.timeout.as_secs().max(1);
        self.run(|c| migrate::install(c, &self.tables, secs))?;
        self.rw_missing.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn drop_tables(&self) -> DbResult<()> {
        let t = &self.tables;
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}, {}, {}, {}",
            t.rw_waiter, t.rw_holder, t.rw, t.job, t.queue, t.member, t.lease, t.session
        );
        self.run(|c| Ok(c.query_drop(&sql)?))
    }

    fn open_session(
        &self,
        id: &str,
        lease_ms: i64,
        lock_delay_ms: i64,
        metadata: &str,
    ) -> DbResult<i64> {
        // MySQL has no RETURNING: the remaining time is read by a second statement, later
        // than the insert, so it can only be smaller than what the insert granted.
        self.run(|c| {
            c.exec_drop(&self.sql.open, (id, lease_ms, metadata, lock_delay_ms))?;
            let rem: Option<Row> = c.exec_first(&self.sql.open_read, (id,))?;
            opened(rem.map(cells))
        })
    }

    /// The renewal, then (unless it said all) the read and, after a change, the listing: the
    /// read-write variants of the read and the listing (the terms in the sample and the
    /// list), or where their tables do not exist, the ones of the leases alone.
    fn keep_alive(
        &self,
        id: &str,
        lease_ms: i64,
        known: Option<Known<'_>>,
    ) -> DbResult<Option<Renewed>> {
        if !self.rw_missing.load(Ordering::Relaxed) {
            match self.keep_alive_with(id, lease_ms, known, true) {
                Err(e) if e.kind == Kind::MissingTable => {
                    log::debug!("keep-alives list no read-write terms: {}", e.source);
                    self.rw_missing.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        self.keep_alive_with(id, lease_ms, known, false)
    }

    fn remove_session(&self, id: &str) -> DbResult<()> {
        // Three autocommit statements, the session first: each holds its locks alone, so none
        // can deadlock with an acquire (session rows, then the lease row).
        self.run(|c| {
            c.exec_drop(&self.sql.rm_session, (id,))?;
            c.exec_drop(&self.sql.rm_leases, (id, id))?;
            Ok(c.exec_drop(&self.sql.rm_members, (id,))?)
        })
    }

    fn acquire(&self, id: &str, name: &str) -> DbResult<AcqRow> {
        self.run(|c| {
            // The take, whose reply carries a new term (see `statements::TAKEN`); when it
            // took nothing, the lease row as committed: it is the acquirer's (the same term)
            // or another live session's. Between the two statements the row can change only
            // if the acquirer's session expired (then `my_remaining` says so) or the acquirer
            // released it itself. A name without a row gets a free one, and the take runs
            // again.
            let new_term = |c: &Conn| {
                taken(c.affected_rows(), c.last_insert_id()).map(|(token, remaining_us)| {
                    AcqRow::Acquired {
                        token,
                        remaining_us,
                    }
                })
            };
            c.exec_drop(&self.sql.acquire, (name, id))?;
            if let Some(row) = new_term(c) {
                return Ok(row);
            }
            let report: Option<Row> = c.exec_first(&self.sql.acquire_report, (id, name))?;
            let mut report = acq_report(report.map(cells))?;
            if report.token.is_none() && report.my_remaining.is_some_and(|r| r > 0) {
                c.exec_drop(&self.sql.acquire_new, (name,))?;
                c.exec_drop(&self.sql.acquire, (name, id))?;
                if let Some(row) = new_term(c) {
                    return Ok(row);
                }
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
        let n = self.run(|c| {
            let rows: Vec<Row> = c.exec(&self.sql.purge_find, (limit as u64,))?;
            let ids = rows
                .into_iter()
                .map(|r| req_text("an expired session", &cells(r), 0))
                .collect::<DbResult<Vec<String>>>()?;
            if ids.is_empty() {
                return Ok(0);
            }
            let marks = vec!["?"; ids.len()].join(",");
            // The session rows go first (lock order), each only if still expired (and past
            // its lock-delay) when its row is locked; then the memberships of the ids whose
            // session row is gone.
            c.exec_drop(
                format!(
                    "DELETE FROM {s} WHERE session_id IN ({marks}) AND expires_at <= {NOW} \
                     AND expires_at + lock_delay <= {NOW}"
                ),
                ids.clone(),
            )?;
            let n = c.affected_rows() as usize;
            c.exec_drop(self.sql.purge_members.replace("{}", &marks), ids.clone())?;
            Ok(n)
        })?;
        // The sessions are gone either way: a failed collection is logged (the next purge
        // collects), and tables from before read-write locks have nothing to collect.
        match self.rw_gc_my() {
            Err(e) if e.kind != Kind::MissingTable => {
                log::warn!(
                    "collecting the read-write rows of ended sessions: {}",
                    e.source
                );
            }
            _ => {}
        }
        Ok(n)
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
            t.rw.clone(),
            t.rw_holder.clone(),
            t.rw_waiter.clone(),
        );
        self.run(|c| {
            Ok(c.exec(
                "SELECT TABLE_NAME, COLUMN_NAME, COALESCE(COLLATION_NAME, '') \
                 FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?, ?, ?, ?, ?, ?) \
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
