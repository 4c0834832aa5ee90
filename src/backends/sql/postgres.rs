//! PostgreSQL statements (`postgres` crate, blocking).
//!
//! `now` is `statement_timestamp()` as UTC epoch ms: constant within a statement, and an
//! epoch does not depend on the connection's `TimeZone`. Remaining times are measured in
//! microseconds against the same timestamp (`expires_at * 1000 - now_us`, exact: `extract`
//! returns `numeric` on PostgreSQL 14+) and rounded down to whole ms by the caller, so no
//! reply claims more time than the database grants.

use super::{
    AcqReport, AcqRow, ConnectionProbe, DbError, DbResult, Driver, Kind, Known, Options, Pool,
    PoolConn, RawListing, Renewed, Tables,
};
use crate::backends::BackendUrl;
use crate::error::Result;
use crate::spi::{NotifySink, Subscription};
use ::postgres::config::SslMode as PgSslMode;
use ::postgres::error::SqlState;
use ::postgres::types::FromSql;
use ::postgres::types::Type;
use ::postgres::{Client, Config, NoTls, Row, Statement};
use std::time::Duration;

use super::tls::{SqlTls, SslMode};

/// How this backend's connections (the pool's and the listener's) use TLS: the URL's
/// `sslmode`, `ca`, `cert` and `key` (see `backends::sql::tls`).
#[derive(Clone)]
pub(crate) struct PgTls {
    /// The rustls configuration, unless `sslmode=disable`.
    #[cfg(feature = "tls")]
    rustls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl PgTls {
    /// Builds the TLS settings and sets the matching `sslmode` on `config`.
    pub(crate) fn new(tls: &SqlTls, config: &mut Config) -> Result<Self> {
        config.ssl_mode(match tls.mode {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
        });
        #[cfg(feature = "tls")]
        {
            let rustls = match tls.mode {
                SslMode::Disable => None,
                _ => Some(super::tls::rustls_config::client_config(tls)?),
            };
            Ok(PgTls { rustls })
        }
        #[cfg(not(feature = "tls"))]
        {
            // Without the feature the URL parser accepts `sslmode=disable` only.
            let _ = tls;
            Ok(PgTls {})
        }
    }

    /// Opens one connection with these settings.
    pub(crate) fn connect(
        &self,
        config: &Config,
    ) -> std::result::Result<Client, ::postgres::Error> {
        #[cfg(feature = "tls")]
        if let Some(c) = &self.rustls {
            return config.connect(super::tls::pg::MakeRustls(c.clone()));
        }
        config.connect(NoTls)
    }
}

const NOW: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000)::int8)";
/// The same instant in µs.
const NOW_US: &str = "((extract(epoch FROM statement_timestamp()) * 1000000)::int8)";
/// The value of the lease row `l`'s current term: set only for the token it was set with.
const TERM_VALUE: &str =
    "coalesce(CASE WHEN l.value_token = l.token THEN l.term_value END, '')::text";

struct Stmts {
    open: Statement,
    keep_alive: Statement,
    remove: Statement,
    acquire: Statement,
    /// `acquire` that gives a new term the value `$3` in the same upsert.
    acquire_valued: Statement,
    release: Statement,
    owner: Statement,
    set_value: Statement,
    join: Statement,
    leave: Statement,
    members: Statement,
    purge: Statement,
    ping: Statement,
}

pub(crate) struct PgConn {
    /// `Some` until the connection is dropped (see `Drop`).
    client: Option<Client>,
    /// Prepared on first use (the tables may not exist when the connection opens).
    stmts: Option<Stmts>,
    pid: u32,
}

impl PgConn {
    fn client(&mut self) -> DbResult<&mut Client> {
        self.client
            .as_mut()
            .ok_or_else(|| DbError::new(Kind::Connection, "the connection was closed"))
    }
}

impl PoolConn for PgConn {
    fn is_closed(&self) -> bool {
        self.client.as_ref().is_none_or(Client::is_closed)
    }
    fn is_valid(&mut self, timeout: Duration) -> bool {
        let Some(client) = self.client.as_mut() else {
            return false;
        };
        outside_runtime(|| client.is_valid(timeout).is_ok()).unwrap_or(false)
    }
}

/// A `postgres::Client` blocks on a private tokio runtime in every call and when it is
/// dropped (it sends `Terminate`), which panics ("Cannot start a runtime from within a
/// runtime") on a thread inside a tokio runtime. Such a thread hands its connection to a
/// short-lived thread to close; elsewhere it is closed here.
impl Drop for PgConn {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if !in_tokio_runtime() {
            return drop(client);
        }
        let closer = std::thread::Builder::new()
            .name("simba-pg-close".into())
            .spawn(move || drop(client));
        if let Err(e) = closer {
            // The client went down with the failed spawn's closure, unrun: closing it here
            // would panic, so its socket is left to the OS (the server ends the session).
            log::warn!("PostgreSQL connection not closed: no thread to close it on ({e})");
        }
    }
}

/// Whether this thread is inside a tokio runtime (a `#[tokio::main]` body, an async task, a
/// `block_on`, a `spawn_blocking` closure), where the `postgres` driver cannot block on its
/// own runtime.
fn in_tokio_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Runs `f` on this thread, or, on a thread inside a tokio runtime, on a scoped thread of
/// its own (waiting for it): the `postgres` driver's calls panic inside a runtime, and an
/// async caller is better served by a call that works (and blocks, as documented) than by a
/// panic. A panic of `f` is passed on as it is.
fn outside_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T> {
    if !in_tokio_runtime() {
        return Ok(f());
    }
    std::thread::scope(|scope| {
        let call = std::thread::Builder::new()
            .name("simba-pg-call".into())
            .spawn_scoped(scope, f)
            .map_err(|e| {
                super::failure::error(
                    "starting a thread for a PostgreSQL call from inside a tokio runtime \
                     (call the backend from `tokio::task::spawn_blocking` or a plain thread)",
                    e,
                )
            })?;
        Ok(call
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// [`super::with_conn`] off any tokio runtime (see [`outside_runtime`]).
fn with_conn<T: Send>(
    pool: &Pool<PgConn>,
    timeout: Duration,
    f: impl FnMut(&mut PgConn) -> DbResult<T> + Send,
) -> DbResult<T> {
    outside_runtime(|| super::with_conn(pool, timeout, f))
        .map_err(|e| DbError::new(Kind::Other, e))?
}

fn classify(e: ::postgres::Error) -> DbError {
    let kind = match e.code() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            Kind::Retry
        }
        Some(c) if *c == SqlState::UNDEFINED_TABLE => Kind::MissingTable,
        Some(c) if *c == SqlState::QUERY_CANCELED || *c == SqlState::LOCK_NOT_AVAILABLE => {
            Kind::Timeout
        }
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || c.code().starts_with("08") =>
        {
            Kind::Connection
        }
        Some(_) => Kind::Other,
        None => Kind::Connection,
    };
    DbError::new(kind, e)
}

/// Column `i` of `row` as a `T`; a value of another type (or NULL where `T` does not allow
/// it), as a server or a table altered behind the backend's back could send, is an error of
/// kind [`Kind::Other`], never a panic.
fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> DbResult<T> {
    row.try_get(i).map_err(|e| DbError::new(Kind::Other, e))
}

/// A count from the database as a `usize`; a negative one is an error.
fn count(n: i64) -> DbResult<usize> {
    usize::try_from(n).map_err(|_| DbError::new(Kind::Other, format!("count {n} from PostgreSQL")))
}

fn sql(t: &Tables) -> [String; 11] {
    let (s, l, m) = (&t.session, &t.lease, &t.member);
    // Every change publishes on the prefix's channel with `pg_notify` inside its own
    // statement, so a notification is sent exactly when the change commits (see `listen`).
    let ch = super::listen::channel_literal(t);
    [
        // open: the remaining µs measured by the same statement
        format!(
            "INSERT INTO {s} (session_id, expires_at, metadata) VALUES ($1, {NOW} + $2, $3) \
             RETURNING expires_at * 1000 - {NOW_US}"
        ),
        // keep-alive, one statement: renew first (the one-time filters on `renewed` run the
        // UPDATE before the lease scan), then read the held leases FOR SHARE, but only when
        // the version of the session's leases differs from the one passed in ($3, NULL for
        // none) or fewer than $8 of the sample's (name, token) pairs ($4..$7, NULL for none)
        // are still held; otherwise nothing scales with what the session holds. (Each pair is
        // looked up by name alone: with `session_id = $1` in the WHERE clause a generic plan
        // made while the table was small can walk the session's entries of
        // `idx_lease_session` instead of the primary key.)
        // Every statement that changes which leases a session holds (acquire of a new term,
        // take-over, release) bumps `version` under an exclusive lock on the session's row,
        // in the same statement as the change.
        //
        // A take-over holds the holder's session row locked until it commits, so the UPDATE
        // waits for it and then renews the newest row (READ COMMITTED), whose version the
        // take-over bumped: the leases are listed. The lease scan still uses the statement's
        // older snapshot, but locking a row that was updated since makes PostgreSQL recheck
        // the newest version, which no longer matches `session_id = $1`: a lease taken
        // meanwhile is not listed. The version returned is the snapshot's (`snap`): if a
        // change committed after the snapshot, the list may miss a lease acquired meanwhile,
        // but that version is older than the row's, so the next keep-alive lists again.
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms, {NOW_US} AS us), \
             snap AS MATERIALIZED (SELECT version FROM {s} WHERE session_id = $1), \
             renewed AS (UPDATE {s} SET expires_at = (SELECT ms FROM now) + $2 \
                         WHERE session_id = $1 AND expires_at > (SELECT ms FROM now) \
                         RETURNING expires_at, version), \
             list AS MATERIALIZED (SELECT (SELECT version FROM renewed) IS DISTINCT FROM $3 \
                         OR coalesce((SELECT x.session_id = $1 AND x.token = $5 FROM {l} x \
                                      WHERE x.name = $4), false)::int \
                          + coalesce((SELECT x.session_id = $1 AND x.token = $7 FROM {l} x \
                                      WHERE x.name = $6), false)::int < $8 AS yes), \
             held AS (SELECT l.name, l.token FROM {l} l \
                      WHERE l.session_id = $1 AND EXISTS (SELECT 1 FROM renewed) \
                        AND (SELECT yes FROM list) FOR SHARE) \
             SELECT (SELECT expires_at FROM renewed) * 1000 - (SELECT us FROM now) AS remaining, \
                    (SELECT version FROM snap), (SELECT yes FROM list), \
                    held.name::text, held.token \
             FROM (SELECT 1) one LEFT JOIN held ON true"
        ),
        // remove: the session row first (lock order session -> lease, as in acquire); notifies
        // every freed lease and every group left
        format!(
            "WITH gone AS (DELETE FROM {s} WHERE session_id = $1 RETURNING 1), \
             freed AS (UPDATE {l} SET session_id = '' \
                       WHERE session_id = $1 AND (SELECT count(*) FROM gone) >= 0 RETURNING name), \
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
        // only applies if the row still has the holder that was checked. A new term (a row
        // from `up`) bumps the version of both sessions' leases and notifies `a:`; a
        // re-acquire by the holder updates nothing and notifies nothing. (The holder's row is
        // locked exclusively because its version changes with the take-over: a keep-alive of
        // the holder waits, as it did behind the shared lock of earlier versions.)
        format!(
            "WITH now AS MATERIALIZED (SELECT {NOW} AS ms, {NOW_US} AS us), \
             cur AS MATERIALIZED (SELECT session_id, token FROM {l} WHERE name = $2), \
             locked AS MATERIALIZED (SELECT session_id, expires_at FROM {s} \
                    WHERE session_id = $1 OR session_id = (SELECT session_id FROM cur) \
                    ORDER BY session_id FOR NO KEY UPDATE), \
             me AS MATERIALIZED (SELECT expires_at FROM locked \
                    WHERE session_id = $1 AND expires_at > (SELECT ms FROM now)), \
             holder AS MATERIALIZED (SELECT expires_at FROM locked \
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
                    WHERE session_id IN (SELECT session_id FROM locked) AND EXISTS (SELECT 1 FROM up) \
                    RETURNING 1), \
             note AS MATERIALIZED (SELECT pg_notify({ch}, 'a:' || $2) FROM up) \
             SELECT (SELECT expires_at FROM me) * 1000 - (SELECT us FROM now), \
                    (SELECT token FROM up), \
                    (SELECT session_id::text FROM cur), (SELECT token FROM cur), \
                    (SELECT expires_at FROM holder) * 1000 - (SELECT us FROM now), \
                    (SELECT count(*) FROM note), (SELECT count(*) FROM bump)"
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
        // owner, with the term's value (stored with the token it belongs to)
        format!(
            "SELECT l.session_id::text, l.token, s.expires_at * 1000 - {NOW_US}, {TERM_VALUE} \
             FROM {l} l JOIN {s} s ON s.session_id = l.session_id \
             WHERE l.name = $1 AND s.expires_at > {NOW}"
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
        // purge: along idx_session_expires, skipping rows a concurrent statement holds;
        // notifies the groups left and the leases the purged sessions still pointed at
        format!(
            "WITH dead AS (SELECT session_id FROM {s} WHERE expires_at <= {NOW} \
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
fn queue_sql(t: &Tables) -> [String; 3] {
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

fn prepare(client: &mut Client, t: &Tables) -> std::result::Result<Stmts, ::postgres::Error> {
    let [open, keep_alive, remove, acquire, release, owner, set_value, join, leave, members, purge] =
        sql(t);
    let (sid, name, i8) = (Type::BPCHAR, Type::VARCHAR, Type::INT8);
    Ok(Stmts {
        open: client.prepare_typed(&open, &[sid.clone(), i8.clone(), Type::VARCHAR])?,
        keep_alive: client.prepare_typed(
            &keep_alive,
            &[
                sid.clone(),
                i8.clone(),
                i8.clone(),
                name.clone(),
                i8.clone(),
                name.clone(),
                i8.clone(),
                i8.clone(),
            ],
        )?,
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

/// The first column of the first row of `sql`, over the simple query protocol (no prepared
/// statement, which a transaction-mode pooler may lose between transactions).
fn simple_value(client: &mut Client, sql: &str) -> DbResult<Option<String>> {
    let rows = client.simple_query(sql).map_err(classify)?;
    Ok(rows.iter().find_map(|m| match m {
        ::postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    }))
}

/// `pg_backend_pid()` of the connection, over the simple query protocol.
fn pid(client: &mut Client) -> DbResult<u64> {
    simple_value(client, "SELECT pg_backend_pid()")?
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| DbError::new(Kind::Other, "pg_backend_pid() gave no number"))
}

pub(crate) struct PgDriver {
    pool: Pool<PgConn>,
    tables: Tables,
    /// Fair-lock queue statements: place, leave, list.
    queue_sql: [String; 3],
    /// Run-once job statements.
    job_sql: super::jobs::JobSql,
    timeout: Duration,
    /// The `LISTEN` connection's thread, started by the first subscription.
    listener: super::listen::Listener,
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
        let listener = super::listen::Listener::new(&config, &tls, &tables, options.query_timeout);
        let connect = move || -> Result<PgConn> {
            let mut client = tls
                .connect(&config)
                .map_err(|e| super::failure::error("connecting to PostgreSQL", e))?;
            // The simple query protocol: a prepared statement here would be the first thing
            // a transaction-mode pooler breaks, and `simba doctor` must get past it.
            let pid = pid(&mut client)
                .map_err(|e| super::failure::error("connecting to PostgreSQL", e.source))?;
            let pid = u32::try_from(pid).map_err(|_| {
                super::failure::error(
                    "connecting to PostgreSQL",
                    format!("backend pid {pid} from PostgreSQL"),
                )
            })?;
            Ok(PgConn {
                client: Some(client),
                stmts: None,
                pid,
            })
        };
        let pool = Pool::new(options.pool_size, connect);
        let queue_sql = queue_sql(&tables);
        let job_sql = super::jobs::JobSql::new(&tables, super::Dialect::Postgres, NOW, NOW_US);
        let driver = PgDriver {
            queue_sql,
            job_sql,
            pool,
            tables,
            timeout: options.query_timeout,
            listener,
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

    fn job_report(&self, id: &str, name: &str) -> DbResult<super::jobs::JobReport> {
        self.run(|c, _| {
            let r = c
                .query_one(&self.job_sql.report, &[&id, &name])
                .map_err(classify)?;
            Ok(super::jobs::JobReport {
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

    fn install_schema(&self) -> DbResult<()> {
        let script = self
            .tables
            .script(include_str!("../../../sql/init-simba-postgresql.sql"));
        let (session, lease) = (&self.tables.session, &self.tables.lease);
        self.run_plain(|c| {
            let mut tx = c.transaction()?;
            // Serialize concurrent installers (CREATE ... IF NOT EXISTS races otherwise).
            tx.execute("SELECT pg_advisory_xact_lock(7283946120)", &[])?;
            for stmt in &script {
                tx.batch_execute(stmt)?;
            }
            // Tables of earlier versions have no `version` column: add it (only then, as
            // ALTER TABLE locks the table exclusively even when there is nothing to do).
            let has: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_attribute \
                     WHERE attrelid = to_regclass($1) AND attname = 'version' AND NOT attisdropped)",
                    &[&session],
                )?
                .try_get(0)?;
            if !has {
                tx.batch_execute(&format!(
                    "ALTER TABLE {session} ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0"
                ))?;
            }
            // Lease tables from before term values have neither value column: add both.
            let has: bool = tx
                .query_one(
                    "SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = to_regclass($1) \
                     AND attname IN ('term_value', 'value_token') AND NOT attisdropped",
                    &[&lease],
                )?
                .try_get(0)?;
            if !has {
                tx.batch_execute(&format!(
                    "ALTER TABLE {lease} ADD COLUMN IF NOT EXISTS term_value varchar(1024), \
                     ADD COLUMN IF NOT EXISTS value_token bigint"
                ))?;
            }
            tx.commit()
        })?;
        // Connections opened before the tables existed prepare their statements now.
        self.pool.flush_idle();
        Ok(())
    }

    fn drop_tables(&self) -> DbResult<()> {
        let t = &self.tables;
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}",
            t.job, t.queue, t.member, t.lease, t.session
        );
        self.run_plain(|c| c.batch_execute(&sql))?;
        self.pool.flush_idle();
        Ok(())
    }

    fn open_session(&self, id: &str, lease_ms: i64, metadata: &str) -> DbResult<i64> {
        self.run(|c, st| {
            let r = c
                .query_one(&st.open, &[&id, &lease_ms, &metadata])
                .map_err(classify)?;
            col(&r, 0)
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
        let pair = |i: usize| {
            sample
                .get(i)
                .map_or((None, None), |(n, t)| (Some(n.as_str()), Some(*t)))
        };
        let ((n1, t1), (n2, t2)) = (pair(0), pair(1));
        let expected = sample.len().min(super::SAMPLE) as i64;
        self.run(|c, st| {
            let rows = c
                .query(
                    &st.keep_alive,
                    &[&id, &lease_ms, &version, &n1, &t1, &n2, &t2, &expected],
                )
                .map_err(classify)?;
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
            let mut leases = Vec::new();
            for r in &rows {
                if let (Some(name), Some(token)) =
                    (col::<Option<String>>(r, 3)?, col::<Option<i64>>(r, 4)?)
                {
                    leases.push((name, token));
                }
            }
            if !listed && !leases.is_empty() {
                return Err(DbError::new(
                    Kind::Other,
                    "a keep-alive listed leases it said were unchanged",
                ));
            }
            Ok(Some(Renewed {
                remaining_us,
                version,
                leases: listed.then_some(leases),
            }))
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
        self.run(|c, st| {
            let r = c.query_one(&st.purge, &[&limit]).map_err(classify)?;
            count(col(&r, 0)?)
        })
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
        let names: Vec<String> = [&t.session, &t.lease, &t.member, &t.queue, &t.job]
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

#[cfg(test)]
mod tests {
    use super::*;

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
