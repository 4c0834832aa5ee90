//! The PostgreSQL dialect (`postgres` crate, blocking): [`PgDriver`], the [`Driver`] over a
//! pool of [`PgConn`]s, one statement per operation in most cases (see the round-trip table
//! of the SQL backend).
//!
//! * [`statements`]: the SQL of every operation and how each locks its rows;
//! * [`conn`]: connections, TLS, error classification, value decoding, and running off any
//!   tokio runtime;
//! * [`migrate`]: schema installation and the columns of earlier versions;
//! * [`listen`]: the `LISTEN` connection that turns `pg_notify` into notifications;
//! * [`rw`]: the statements of read-write locks, prepared on first use.

mod conn;
mod listen;
mod migrate;
mod rw;
mod statements;

pub(crate) use self::conn::PgConn;
use self::conn::{classify, col, count, outside_runtime, pid, simple_value, with_conn, PgTls};
use self::statements::{prepare, queue_sql, Stmts, NOW, NOW_US, TERM_VALUE};
use super::builder::Options;
use super::driver::{
    AcqReport, AcqRow, ConnectionProbe, DbError, DbResult, Driver, Holding, Kind, Known,
    RawListing, Renewed, SAMPLE,
};
use super::pool::Pool;
use super::rw::{RwRow, RwStateRow};
use super::tables::Tables;
use super::tls::SqlTls;
use super::{failure, jobs, Dialect};
use crate::backends::BackendUrl;
use crate::error::Result;
use crate::spi::{NotifySink, Subscription};
use ::postgres::{Client, Config};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(crate) struct PgDriver {
    pool: Pool<PgConn>,
    tables: Tables,
    /// Fair-lock queue statements: place, leave, list.
    queue_sql: [String; 3],
    /// Run-once job statements.
    job_sql: jobs::JobSql,
    timeout: Duration,
    /// The `LISTEN` connection's thread, started by the first subscription.
    listener: listen::Listener,
    /// Set when the read-write statements could not be prepared for want of their tables
    /// (an earlier schema): keep-alives then list the leases alone. Cleared when they are
    /// prepared (a read-write call found the tables) and by `install_schema`.
    rw_missing: AtomicBool,
}

impl PgDriver {
    pub(crate) fn new(
        url: &BackendUrl,
        config: Option<Config>,
        tls: &SqlTls,
        options: &Options,
        tables: Tables,
    ) -> Result<Self> {
        let mut config = match config {
            Some(c) => c,
            None => {
                let mut c = Config::new();
                for h in &url.hosts {
                    let (host, port) = match h.rsplit_once(':') {
                        Some((host, port)) if !h.ends_with(']') => {
                            (host, port.parse::<u16>().unwrap_or(5432))
                        }
                        _ => (h.as_str(), 5432),
                    };
                    c.host(host.trim_start_matches('[').trim_end_matches(']'));
                    c.port(port);
                }
                if url.hosts.is_empty() {
                    c.host("localhost");
                }
                if let Some(u) = &url.user {
                    c.user(u);
                }
                if let Some(p) = &url.password {
                    c.password(p);
                }
                let db = url.path.trim_start_matches('/');
                if !db.is_empty() {
                    c.dbname(db);
                }
                c
            }
        };
        if config.get_user().is_none() {
            return Err(url.invalid("a PostgreSQL URL needs a user: postgres://user@host/db"));
        }
        let timeout_ms = options.query_timeout.as_millis().max(1);
        let mut opts = config.get_options().unwrap_or("").to_owned();
        opts.push_str(&format!(
            " -c statement_timeout={timeout_ms} -c idle_in_transaction_session_timeout={}",
            timeout_ms * 2
        ));
        config
            .options(opts.trim())
            .connect_timeout(options.query_timeout)
            .tcp_user_timeout(options.query_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name(&format!("simba-lease/{}", tables.prefix));
        }
        let tls = PgTls::new(tls, &mut config)?;
        let listener = listen::Listener::new(&config, &tls, &tables, options.query_timeout);
        let connect = move || -> Result<PgConn> {
            let mut client = tls
                .connect(&config)
                .map_err(|e| failure::error("connecting to PostgreSQL", e))?;
            // The simple query protocol: a prepared statement here would be the first thing
            // a transaction-mode pooler breaks, and `simba doctor` must get past it.
            let pid = pid(&mut client)
                .map_err(|e| failure::error("connecting to PostgreSQL", e.source))?;
            let pid = u32::try_from(pid).map_err(|_| {
                failure::error(
                    "connecting to PostgreSQL",
                    format!("backend pid {pid} from PostgreSQL"),
                )
            })?;
            Ok(PgConn {
                client: Some(client),
                stmts: None,
                rw: None,
                pid,
            })
        };
        let pool = Pool::new(options.pool_size, connect);
        let queue_sql = queue_sql(&tables);
        let job_sql = jobs::JobSql::new(&tables, Dialect::Postgres, NOW, NOW_US);
        let driver = PgDriver {
            queue_sql,
            job_sql,
            pool,
            tables,
            timeout: options.query_timeout,
            listener,
            rw_missing: AtomicBool::new(false),
        };
        // Check the server answers now, so a bad URL fails at build time.
        outside_runtime(|| driver.pool.get(options.query_timeout).map(drop))??;
        Ok(driver)
    }

    /// Runs `f` with the prepared statements; `f` classifies driver errors with `classify`
    /// (`?` does) and decodes values with [`col`].
    fn run<T: Send>(
        &self,
        mut f: impl FnMut(&mut Client, &Stmts) -> DbResult<T> + Send,
    ) -> DbResult<T> {
        with_conn(&self.pool, self.timeout, |c| {
            let stmts = match c.stmts.take() {
                Some(s) => s,
                None => prepare(c.client()?, &self.tables).map_err(classify)?,
            };
            let r = f(c.client()?, &stmts);
            c.stmts = Some(stmts);
            r
        })
    }

    /// Runs `f` on the plain client (no prepared statements needed).
    fn run_plain<T: Send>(
        &self,
        mut f: impl FnMut(&mut Client) -> std::result::Result<T, ::postgres::Error> + Send,
    ) -> DbResult<T> {
        with_conn(&self.pool, self.timeout, |c| {
            f(c.client()?).map_err(classify)
        })
    }
}

/// The parameters of a keep-alive statement: the session, the lease, the version known,
/// the sample's two entries (name, token; NULL for none), the count of entries, then the
/// entries' sides (read only by the statement that lists the read-write terms).
struct KeepAliveParams<'a> {
    id: &'a str,
    lease_ms: i64,
    version: Option<i64>,
    names: [Option<&'a str>; 2],
    tokens: [Option<i64>; 2],
    expected: i64,
    side: [Option<i64>; 2],
}

impl<'a> KeepAliveParams<'a> {
    fn new(id: &'a str, lease_ms: i64, version: Option<i64>, sample: &'a [Holding]) -> Self {
        let entry = |i: usize| sample.get(i).map(|(n, t, side)| (n.as_str(), *t, *side));
        let (one, two) = (entry(0), entry(1));
        KeepAliveParams {
            id,
            lease_ms,
            version,
            names: [one.map(|e| e.0), two.map(|e| e.0)],
            tokens: [one.map(|e| e.1), two.map(|e| e.1)],
            expected: sample.len().min(SAMPLE) as i64,
            side: [one.map(|e| e.2), two.map(|e| e.2)],
        }
    }

    fn all(&self) -> [&(dyn ::postgres::types::ToSql + Sync); 10] {
        [
            &self.id,
            &self.lease_ms,
            &self.version,
            &self.names[0],
            &self.tokens[0],
            &self.names[1],
            &self.tokens[1],
            &self.expected,
            &self.side[0],
            &self.side[1],
        ]
    }
}

/// A keep-alive's rows (see `statements::keep_alive_sql`): none when the session is gone,
/// else each with the remaining µs (NULL: expired), the version, whether listed, and a held
/// lease's or term's name, token and side (NULLs for none). `rw`: the statement read the
/// read-write terms.
fn renewed(rows: &[::postgres::Row], rw: bool) -> DbResult<Option<Renewed>> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let Some(remaining_us) = col::<Option<i64>>(first, 0)? else {
        return Ok(None);
    };
    let (Some(version), Some(listed)) = (
        col::<Option<i64>>(first, 1)?,
        col::<Option<bool>>(first, 2)?,
    ) else {
        return Err(DbError::new(
            Kind::Other,
            "a keep-alive without the version of the session's leases",
        ));
    };
    let mut held = Vec::new();
    for r in rows {
        match (
            col::<Option<String>>(r, 3)?,
            col::<Option<i64>>(r, 4)?,
            col::<Option<i64>>(r, 5)?,
        ) {
            (Some(name), Some(token), Some(side)) => held.push((name, token, side)),
            (None, None, None) => {}
            _ => {
                return Err(DbError::new(
                    Kind::Other,
                    "a keep-alive listed a lease or term without its token or side",
                ))
            }
        }
    }
    if !listed && !held.is_empty() {
        return Err(DbError::new(
            Kind::Other,
            "a keep-alive listed leases it said were unchanged",
        ));
    }
    Ok(Some(Renewed {
        remaining_us,
        version,
        rw,
        held: listed.then_some(held),
    }))
}

impl Driver for PgDriver {
    fn job_claim(&self, id: &str, name: &str, at_most_ms: i64) -> DbResult<Option<(i64, i64)>> {
        let q = &self.job_sql;
        self.run(|c, _| {
            let mut tx = c.transaction().map_err(classify)?;
            tx.query_opt(&q.lock, &[&name]).map_err(classify)?;
            let r = tx
                .query_opt(&q.claim, &[&id, &name, &at_most_ms])
                .map_err(classify)?;
            tx.commit().map_err(classify)?;
            r.map(|r| Ok((col(&r, 0)?, col(&r, 1)?))).transpose()
        })
    }

    fn job_report(&self, id: &str, name: &str) -> DbResult<jobs::JobReport> {
        self.run(|c, _| {
            let r = c
                .query_one(&self.job_sql.report, &[&id, &name])
                .map_err(classify)?;
            Ok(jobs::JobReport {
                me_live: col::<i64>(&r, 0)? == 1,
                exists: col::<i64>(&r, 1)? == 1,
                taken: col::<i64>(&r, 2)? == 1,
                remaining_us: col(&r, 3)?,
            })
        })
    }

    fn job_create(&self, name: &str) -> DbResult<()> {
        self.run(|c, _| {
            c.execute(&self.job_sql.create, &[&name])
                .map_err(classify)
                .map(drop)
        })
    }

    fn job_finish(&self, id: &str, name: &str, token: i64, at_least_ms: i64) -> DbResult<bool> {
        self.run(|c, _| {
            let n = c
                .execute(&self.job_sql.finish, &[&id, &name, &token, &at_least_ms])
                .map_err(classify)?;
            Ok(n > 0)
        })
    }

    fn queue_place(&self, id: &str, name: &str, patience_ms: i64) -> DbResult<Option<i64>> {
        self.run(|c, _| {
            let r = c
                .query_one(&self.queue_sql[0], &[&id, &name, &patience_ms])
                .map_err(classify)?;
            let live: i64 = col(&r, 0)?;
            Ok(if live > 0 { Some(col(&r, 1)?) } else { None })
        })
    }

    fn queue_leave(&self, id: &str, name: &str) -> DbResult<bool> {
        self.run(|c, _| {
            let r = c
                .query_one(&self.queue_sql[1], &[&name, &id])
                .map_err(classify)?;
            Ok(col::<i64>(&r, 0)? > 0)
        })
    }

    fn queue_list(&self, name: &str) -> DbResult<Vec<String>> {
        self.run(|c, _| {
            c.query(&self.queue_sql[2], &[&name])
                .map_err(classify)?
                .iter()
                .map(|r| col(r, 0))
                .collect()
        })
    }

    fn rw_acquire(&self, id: &str, name: &str, write: bool, patience_ms: i64) -> DbResult<RwRow> {
        self.rw_acquire_pg(id, name, write, patience_ms)
    }

    fn rw_release(&self, id: &str, name: &str, write: bool, token: i64) -> DbResult<bool> {
        self.rw_release_pg(id, name, write, token)
    }

    fn rw_leave(&self, id: &str, name: &str) -> DbResult<bool> {
        self.rw_leave_pg(id, name)
    }

    fn rw_state(&self, name: &str) -> DbResult<Vec<RwStateRow>> {
        self.rw_state_pg(name)
    }

    fn rw_end_session(&self, id: &str) -> DbResult<()> {
        self.rw_end_session_pg(id)
    }

    fn install_schema(&self) -> DbResult<()> {
        self.run_plain(|c| migrate::install(c, &self.tables))?;
        // Connections opened before the tables existed prepare their statements now.
        self.pool.flush_idle();
        self.rw_missing.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn drop_tables(&self) -> DbResult<()> {
        let t = &self.tables;
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}, {}, {}, {}",
            t.rw_waiter, t.rw_holder, t.rw, t.job, t.queue, t.member, t.lease, t.session
        );
        self.run_plain(|c| c.batch_execute(&sql))?;
        self.pool.flush_idle();
        Ok(())
    }

    fn open_session(
        &self,
        id: &str,
        lease_ms: i64,
        lock_delay_ms: i64,
        metadata: &str,
    ) -> DbResult<i64> {
        self.run(|c, st| {
            let r = c
                .query_one(&st.open, &[&id, &lease_ms, &metadata, &lock_delay_ms])
                .map_err(classify)?;
            col(&r, 0)
        })
    }

    /// One statement: the one of the read-write statements that lists the read-write terms
    /// too, or, where their tables do not exist, the one that lists the leases alone.
    fn keep_alive(
        &self,
        id: &str,
        lease_ms: i64,
        known: Option<Known<'_>>,
    ) -> DbResult<Option<Renewed>> {
        if !self.rw_missing.load(Ordering::Relaxed) {
            let (version, sample) = Known::for_statement(known, true);
            let params = KeepAliveParams::new(id, lease_ms, version, sample);
            match self.run_rw(|c, st| {
                let rows = c.query(&st.keep_alive, &params.all()).map_err(classify)?;
                renewed(&rows, true)
            }) {
                Err(e) if e.kind == Kind::MissingTable => {
                    log::debug!("keep-alives list no read-write terms: {}", e.source);
                    self.rw_missing.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        let (version, sample) = Known::for_statement(known, false);
        let params = KeepAliveParams::new(id, lease_ms, version, sample);
        self.run(|c, st| {
            let rows = c
                .query(&st.keep_alive, &params.all()[..8])
                .map_err(classify)?;
            renewed(&rows, false)
        })
    }

    fn remove_session(&self, id: &str) -> DbResult<()> {
        self.run(|c, st| c.query_one(&st.remove, &[&id]).map(drop).map_err(classify))
    }

    fn acquire(&self, id: &str, name: &str) -> DbResult<AcqRow> {
        self.run(|c, st| {
            let r = c.query_one(&st.acquire, &[&id, &name]).map_err(classify)?;
            Ok(AcqReport {
                my_remaining: col(&r, 0)?,
                new_token: col(&r, 1)?,
                holder: col(&r, 2)?,
                token: col(&r, 3)?,
                holder_remaining: col(&r, 4)?,
            }
            .outcome(id))
        })
    }

    fn acquire_with_value(&self, id: &str, name: &str, value: &str) -> DbResult<(AcqRow, bool)> {
        self.run(|c, st| {
            let r = c
                .query_one(&st.acquire_valued, &[&id, &name, &value])
                .map_err(classify)?;
            let report = AcqReport {
                my_remaining: col(&r, 0)?,
                new_token: col(&r, 1)?,
                holder: col(&r, 2)?,
                token: col(&r, 3)?,
                holder_remaining: col(&r, 4)?,
            };
            // Only a new term (a row from the upsert) got the value.
            let set = report.new_token.is_some();
            Ok((report.outcome(id), set))
        })
    }

    fn release(&self, id: &str, name: &str, token: i64) -> DbResult<bool> {
        self.run(|c, st| {
            let r = c
                .query_one(&st.release, &[&name, &id, &token])
                .map_err(classify)?;
            Ok(col::<i64>(&r, 0)? == 1)
        })
    }

    fn owner(&self, name: &str) -> DbResult<Option<(String, i64, i64, String)>> {
        self.run(|c, st| {
            let Some(r) = c.query_opt(&st.owner, &[&name]).map_err(classify)? else {
                return Ok(None);
            };
            Ok(Some((col(&r, 0)?, col(&r, 1)?, col(&r, 2)?, col(&r, 3)?)))
        })
    }

    fn set_value(&self, id: &str, name: &str, token: i64, value: &str) -> DbResult<bool> {
        self.run(|c, st| {
            let r = c
                .query_one(&st.set_value, &[&name, &id, &token, &value])
                .map_err(classify)?;
            Ok(col::<i64>(&r, 0)? == 1)
        })
    }

    fn join(&self, id: &str, group: &str) -> DbResult<bool> {
        self.run(|c, st| {
            let r = c.query_one(&st.join, &[&id, &group]).map_err(classify)?;
            col(&r, 0)
        })
    }

    fn leave(&self, id: &str, group: &str) -> DbResult<bool> {
        self.run(|c, st| {
            c.execute(&st.leave, &[&group, &id])
                .map(|n| n > 0)
                .map_err(classify)
        })
    }

    fn members(&self, group: &str) -> DbResult<Vec<(String, String)>> {
        self.run(|c, st| {
            let rows = c.query(&st.members, &[&group]).map_err(classify)?;
            rows.iter().map(|r| Ok((col(r, 0)?, col(r, 1)?))).collect()
        })
    }

    fn purge(&self, limit: usize) -> DbResult<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let n = self.run(|c, st| {
            let r = c.query_one(&st.purge, &[&limit]).map_err(classify)?;
            count(col(&r, 0)?)
        })?;
        // The sessions are gone either way: a failed collection is logged (the next purge
        // collects), and tables from before read-write locks have nothing to collect.
        match self.rw_gc_pg() {
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
        self.run(|c, st| c.query_one(&st.ping, &[]).map(drop).map_err(classify))
    }

    fn connection_ids(&self) -> Vec<u64> {
        let mut ids = Vec::new();
        self.pool.for_each_idle(|c| ids.push(u64::from(c.pid)));
        ids
    }

    fn key_collations(&self) -> DbResult<Vec<(String, String, String)>> {
        let t = &self.tables;
        // Unquoted names are folded to lower case in the catalog.
        let names: Vec<String> = [
            &t.session,
            &t.lease,
            &t.member,
            &t.queue,
            &t.job,
            &t.rw,
            &t.rw_holder,
            &t.rw_waiter,
        ]
        .iter()
        .map(|n| n.to_lowercase())
        .collect();
        self.run_plain(|c| {
            c.query(
                "SELECT table_name::text, column_name::text, coalesce(collation_name::text, '') \
                 FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = ANY($1) \
                 AND column_name IN ('name', 'session_id', 'group_name') ORDER BY 1, 2",
                &[&names],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
        })
    }

    fn setting(&self, name: &str) -> DbResult<Option<String>> {
        self.run_plain(|c| {
            c.query_one("SELECT current_setting($1, true)", &[&name])
                .and_then(|r| r.try_get::<_, Option<String>>(0))
        })
    }

    fn list(&self) -> DbResult<RawListing> {
        let (s, l, m) = (
            &self.tables.session,
            &self.tables.lease,
            &self.tables.member,
        );
        let sessions = format!(
            "SELECT session_id::text, expires_at * 1000 - {NOW_US}, metadata::text FROM {s} \
             WHERE expires_at > {NOW} ORDER BY session_id"
        );
        let leases = format!(
            "SELECT l.name::text, l.session_id::text, l.token, s.expires_at * 1000 - {NOW_US}, \
                    {TERM_VALUE} \
             FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
             WHERE s.expires_at > {NOW} ORDER BY l.name"
        );
        let members = format!(
            "SELECT m.group_name::text, m.session_id::text, s.metadata::text FROM {m} m \
             JOIN {s} s ON s.session_id = m.session_id \
             WHERE s.expires_at > {NOW} ORDER BY m.group_name, m.session_id"
        );
        self.run_plain(|c| {
            let mut tx = c
                .build_transaction()
                .isolation_level(::postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let mut out = RawListing::default();
            for r in tx.query(&sessions, &[])? {
                out.sessions
                    .push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?));
            }
            for r in tx.query(&leases, &[])? {
                out.leases.push((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                ));
            }
            for r in tx.query(&members, &[])? {
                out.members
                    .push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?));
            }
            tx.commit()?;
            Ok(out)
        })
    }

    fn clock_ms(&self) -> DbResult<i64> {
        // The simple query protocol: no prepared statement (which a pooler may break).
        with_conn(&self.pool, self.timeout, |c| {
            simple_value(
                c.client()?,
                "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8",
            )?
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| DbError::new(Kind::Other, "clock_timestamp() gave no number"))
        })
    }

    fn probe_connections(&self) -> DbResult<ConnectionProbe> {
        outside_runtime(|| {
            let open = || {
                self.pool
                    .open_unpooled(self.timeout)
                    .map_err(|e| DbError::new(Kind::Connection, e))
            };
            let (mut a, mut b) = (open()?, open()?);
            let (a, b) = (a.client()?, b.client()?);
            let mut own = vec![pid(a)?, pid(a)?];
            b.simple_query("BEGIN").map_err(classify)?;
            let other = pid(b)?;
            own.push(pid(a)?);
            let _ = b.simple_query("ROLLBACK");
            let timeout = simple_value(
                a,
                "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'",
            )?
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
            Ok(ConnectionProbe {
                own,
                other,
                statement_timeout: timeout,
            })
        })
        .map_err(|e| DbError::new(Kind::Other, e))?
    }

    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        self.listener.subscribe(sink)
    }

    fn listener_name(&self) -> Option<String> {
        Some(self.listener.name().to_owned())
    }
}
