//! MySQL 8 / MariaDB 10.11 statements (`mysql` crate, blocking).
//!
//! `now` is `TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000`: UTC epoch
//! ms, fixed at statement start, with no time-zone conversion at all. Only SQL both servers
//! accept is used: `LOCK IN SHARE MODE` (MariaDB has no `FOR SHARE`; MySQL 8 documents the two
//! as equivalent), `INSERT … SELECT … ON DUPLICATE KEY UPDATE` referring to the selected row's
//! columns (neither the deprecated `VALUES(col)` nor the row alias MariaDB rejects), no
//! `RETURNING`.

use super::{
    with_conn, AcqReport, AcqRow, DbError, DbResult, Driver, Kind, Options, Pool, PoolConn,
    Renewed, Tables,
};
use crate::backends::BackendUrl;
use crate::error::{Error, Result};
use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Opts, OptsBuilder, Value};
use std::time::Duration;

const NOW: &str = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

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
            _ => Kind::Other,
        },
        _ => Kind::Connection,
    };
    DbError::new(kind, e)
}

struct Sql {
    open: String,
    ka_update: String,
    ka_read: String,
    rm_session: String,
    rm_leases: String,
    rm_members: String,
    acquire: String,
    acquire_report: String,
    release: String,
    owner: String,
    join: String,
    join_check: String,
    leave: String,
    members: String,
    purge_find: String,
}

impl Sql {
    fn new(t: &Tables) -> Self {
        let (s, l, m) = (&t.session, &t.lease, &t.member);
        // The take-over condition, evaluated on the existing row: it holds for a free row or
        // one whose holder's session expired or is gone. The holder's session row is read
        // with a shared lock (a locking read sees the latest committed row), so a concurrent
        // keep-alive of that session is serialized with this statement.
        let take = format!(
            "({l}.session_id <> s.session_id AND ({l}.session_id = '' OR \
              COALESCE((SELECT h.expires_at FROM {s} h WHERE h.session_id = {l}.session_id \
                        LOCK IN SHARE MODE), 0) <= {NOW}))"
        );
        Sql {
            open: format!(
                "INSERT INTO {s} (session_id, expires_at, metadata) VALUES (?, {NOW} + ?, ?)"
            ),
            ka_update: format!(
                "UPDATE {s} SET expires_at = {NOW} + ? WHERE session_id = ? AND expires_at > {NOW}"
            ),
            ka_read: format!(
                "SELECT s.expires_at - {NOW}, l.name, l.token FROM {s} s \
                 LEFT JOIN {l} l ON l.session_id = s.session_id WHERE s.session_id = ?"
            ),
            rm_session: format!("DELETE FROM {s} WHERE session_id = ?"),
            rm_leases: format!("UPDATE {l} SET session_id = '' WHERE session_id = ?"),
            rm_members: format!("DELETE FROM {m} WHERE session_id = ?"),
            // One upsert. The token assignment comes first: MySQL evaluates the SET list left
            // to right with already-updated values, and `take` reads only `session_id`, which
            // is assigned last.
            acquire: format!(
                "INSERT INTO {l} (name, session_id, token) \
                 SELECT ?, s.session_id, 1 FROM {s} s \
                 WHERE s.session_id = ? AND s.expires_at > {NOW} LOCK IN SHARE MODE \
                 ON DUPLICATE KEY UPDATE \
                 token = IF({take}, LAST_INSERT_ID({l}.token + 1), {l}.token), \
                 session_id = IF({take}, s.session_id, {l}.session_id)"
            ),
            acquire_report: format!(
                "SELECT (SELECT expires_at FROM {s} WHERE session_id = ?) - {NOW}, \
                 l.session_id, l.token, \
                 (SELECT h.expires_at FROM {s} h WHERE h.session_id = l.session_id) - {NOW} \
                 FROM (SELECT 1 AS one) d LEFT JOIN {l} l ON l.name = ?"
            ),
            release: format!(
                "UPDATE {l} SET session_id = '' WHERE name = ? AND session_id = ? AND token = ?"
            ),
            owner: format!(
                "SELECT l.session_id, l.token, s.expires_at - {NOW} FROM {l} l \
                 JOIN {s} s ON s.session_id = l.session_id \
                 WHERE l.name = ? AND s.expires_at > {NOW}"
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
            leave: format!("DELETE FROM {m} WHERE group_name = ? AND session_id = ?"),
            members: format!(
                "SELECT m.session_id, s.metadata FROM {m} m \
                 JOIN {s} s ON s.session_id = m.session_id \
                 WHERE m.group_name = ? AND s.expires_at > {NOW} ORDER BY m.session_id"
            ),
            purge_find: format!(
                "SELECT session_id FROM {s} WHERE expires_at <= {NOW} ORDER BY expires_at LIMIT ?"
            ),
        }
    }
}

pub(crate) struct MyDriver {
    pool: Pool<MyConn>,
    tables: Tables,
    sql: Sql,
    timeout: Duration,
}

impl MyDriver {
    pub(crate) fn new(
        url: &BackendUrl,
        opts: Option<Opts>,
        options: &Options,
        tables: Tables,
    ) -> Result<Self> {
        let base = match opts {
            Some(o) => OptsBuilder::from_opts(o),
            None => {
                let mut b = OptsBuilder::new();
                if let Some(h) = url.hosts.first() {
                    let (host, port) = match h.rsplit_once(':') {
                        Some((host, port)) if !h.ends_with(']') => {
                            (host.to_owned(), port.parse::<u16>().unwrap_or(3306))
                        }
                        _ => (h.clone(), 3306),
                    };
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
        let opts: Opts = base
            .prefer_socket(false)
            .tcp_connect_timeout(Some(t))
            // A backstop above the server-side timeout: a read that long means the server or
            // the network is gone; the connection is then dropped.
            .read_timeout(Some(t + Duration::from_secs(2)))
            .write_timeout(Some(t + Duration::from_secs(2)))
            .into();
        let secs = t.as_secs_f64().max(0.001);
        let lock_wait = t.as_secs_f64().ceil().max(1.0) as u64;
        let connect = move || -> Result<MyConn> {
            let mut conn =
                Conn::new(opts.clone()).map_err(|e| Error::backend("connecting to MySQL", e))?;
            let version: Option<String> = conn
                .query_first("SELECT VERSION()")
                .map_err(|e| Error::backend("connecting to MySQL", e))?;
            let mariadb = version.unwrap_or_default().contains("MariaDB");
            let limit = if mariadb {
                format!("SET SESSION max_statement_time = {secs:.3}")
            } else {
                // MySQL limits SELECT only; writes are bounded by the lock wait below.
                format!(
                    "SET SESSION max_execution_time = {}",
                    (secs * 1000.0).ceil() as u64
                )
            };
            conn.query_drop(limit)
                .and_then(|_| {
                    conn.query_drop(format!(
                        "SET SESSION innodb_lock_wait_timeout = {lock_wait}"
                    ))
                })
                .map_err(|e| Error::backend("configuring a MySQL connection", e))?;
            Ok(MyConn { conn })
        };
        let driver = MyDriver {
            pool: Pool::new(options.pool_size, connect),
            sql: Sql::new(&tables),
            tables,
            timeout: t,
        };
        drop(driver.pool.get(t)?);
        Ok(driver)
    }

    fn run<T>(
        &self,
        mut f: impl FnMut(&mut Conn) -> std::result::Result<T, ::mysql::Error>,
    ) -> DbResult<T> {
        with_conn(&self.pool, self.timeout, |c| {
            f(&mut c.conn).map_err(classify)
        })
    }
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

impl Driver for MyDriver {
    fn install_schema(&self) -> DbResult<()> {
        let script = self
            .tables
            .script(include_str!("../../../sql/init-simba-mysql.sql"));
        let secs = self.timeout.as_secs().max(1);
        self.run(|c| {
            // DDL commits implicitly: serialize concurrent installers with a named lock.
            let got: Option<i64> = c.exec_first("SELECT GET_LOCK('simba_install', ?)", (secs,))?;
            let r = script.iter().try_for_each(|s| c.query_drop(s));
            if got == Some(1) {
                c.query_drop("DO RELEASE_LOCK('simba_install')")?;
            }
            r
        })
    }

    fn drop_tables(&self) -> DbResult<()> {
        let t = &self.tables;
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}",
            t.member, t.lease, t.session
        );
        self.run(|c| c.query_drop(&sql))
    }

    fn open_session(&self, id: &str, lease_ms: i64, metadata: &str) -> DbResult<()> {
        self.run(|c| c.exec_drop(&self.sql.open, (id, lease_ms, metadata)))
    }

    fn keep_alive(&self, id: &str, lease_ms: i64) -> DbResult<Option<Renewed>> {
        self.run(|c| {
            // Two autocommit statements: the renewal, then the held leases read after it
            // committed, so a take-over that committed while the UPDATE waited for the holder's
            // session row is seen. (No rows changed can also mean a renewal to the same value
            // within one millisecond: the read decides.)
            c.exec_drop(&self.sql.ka_update, (lease_ms, id))?;
            let rows: Vec<(Value, Value, Value)> = c.exec(&self.sql.ka_read, (id,))?;
            let Some(remaining) = rows.first().and_then(|r| int(&r.0)) else {
                return Ok(None);
            };
            if remaining <= 0 {
                return Ok(None);
            }
            let leases = rows
                .iter()
                .filter_map(|r| Some((text(&r.1)?, int(&r.2)?)))
                .collect();
            Ok(Some((remaining, leases)))
        })
    }

    fn remove_session(&self, id: &str) -> DbResult<()> {
        // Three autocommit statements, the session first: each holds its locks alone, so none
        // can deadlock with an acquire (session rows, then the lease row).
        self.run(|c| {
            c.exec_drop(&self.sql.rm_session, (id,))?;
            c.exec_drop(&self.sql.rm_leases, (id,))?;
            c.exec_drop(&self.sql.rm_members, (id,))
        })
    }

    fn acquire(&self, id: &str, name: &str) -> DbResult<AcqRow> {
        self.run(|c| {
            c.exec_drop(&self.sql.acquire, (name, id))?;
            let (affected, last_id) = (c.affected_rows(), c.last_insert_id());
            let report: Option<(Value, Value, Value, Value)> =
                c.exec_first(&self.sql.acquire_report, (id, name))?;
            let (my_remaining, holder, token, holder_remaining) = match &report {
                Some((a, b, t, d)) => (int(a), text(b), int(t), int(d)),
                None => (None, None, None, None),
            };
            // Affected rows: 1 = inserted (token 1), 2 = updated (a new term, its token
            // through LAST_INSERT_ID(expr)), 0 = unchanged.
            let new_token = match affected {
                1 => Some(1),
                2 => Some(last_id as i64),
                _ => None,
            };
            Ok(AcqReport {
                my_remaining,
                new_token,
                holder,
                token,
                holder_remaining,
            }
            .outcome(id))
        })
    }

    fn release(&self, id: &str, name: &str, token: i64) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.sql.release, (name, id, token))?;
            Ok(c.affected_rows() == 1)
        })
    }

    fn owner(&self, name: &str) -> DbResult<Option<(String, i64, i64)>> {
        self.run(|c| {
            let r: Option<(String, i64, i64)> = c.exec_first(&self.sql.owner, (name,))?;
            Ok(r)
        })
    }

    fn join(&self, id: &str, group: &str) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.sql.join, (group, id))?;
            if c.affected_rows() == 1 {
                return Ok(true);
            }
            let live: Option<i64> = c.exec_first(&self.sql.join_check, (id,))?;
            Ok(live == Some(1))
        })
    }

    fn leave(&self, id: &str, group: &str) -> DbResult<bool> {
        self.run(|c| {
            c.exec_drop(&self.sql.leave, (group, id))?;
            Ok(c.affected_rows() > 0)
        })
    }

    fn members(&self, group: &str) -> DbResult<Vec<(String, String)>> {
        self.run(|c| c.exec(&self.sql.members, (group,)))
    }

    fn purge(&self, limit: usize) -> DbResult<usize> {
        let s = &self.tables.session;
        let m = &self.tables.member;
        self.run(|c| {
            let ids: Vec<String> = c.exec(&self.sql.purge_find, (limit as u64,))?;
            if ids.is_empty() {
                return Ok(0);
            }
            let marks = vec!["?"; ids.len()].join(",");
            // Expired sessions are never revived, so the ids found are still expired; the
            // condition is repeated anyway. The session rows go first (lock order).
            c.exec_drop(
                format!("DELETE FROM {s} WHERE session_id IN ({marks}) AND expires_at <= {NOW}"),
                ids.clone(),
            )?;
            let n = c.affected_rows() as usize;
            c.exec_drop(
                format!("DELETE FROM {m} WHERE session_id IN ({marks})"),
                ids.clone(),
            )?;
            Ok(n)
        })
    }

    fn ping(&self) -> DbResult<()> {
        // A prepared statement (the crate caches it per connection): one round trip.
        self.run(|c| c.exec_drop("SELECT 1", ()))
    }

    fn connection_ids(&self) -> Vec<u64> {
        let mut ids = Vec::new();
        self.pool
            .for_each_idle(|c| ids.push(u64::from(c.conn.connection_id())));
        ids
    }
}
