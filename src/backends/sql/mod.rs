//! The SQL backends: PostgreSQL 14+ (feature `postgres`) and MySQL 8.0+ / MariaDB 10.6+
//! (feature `mysql`), one [`SqlBackend`] type with a [`Dialect`].
//!
//! Five tables (`simba_session`, `simba_lease`, `simba_member`, the fair-lock queue
//! `simba_queue` and the run-once jobs' `simba_job`, optionally with a table prefix) hold the state; every time comparison uses the database's clock in UTC epoch
//! milliseconds, independent of the connection's time zone. The schemas are
//! `sql/init-simba-postgresql.sql` and `sql/init-simba-mysql.sql`, embedded and applied by
//! [`SqlBackend::install_schema`].
//!
//! What one call costs (round trips on a warm pooled connection):
//!
//! | operation | PostgreSQL | MySQL / MariaDB |
//! |---|---|---|
//! | `acquire` | 1 (one statement: both session rows locked, the upsert, the version bump, its report) | 2 (a multi-table `UPDATE` taking the row and bumping the versions, then a read of the outcome; 5 the first time a name is used) |
//! | `keep_alive` | 1 (a CTE: the `UPDATE`, the version check, the held leases `FOR SHARE` only after a change) | 2 (the `UPDATE`, then one read listing the leases only after a change) |
//! | `open_session` | 1 (`RETURNING` the remaining time) | 2 (the `INSERT`, then a read of the remaining time) |
//! | `release`, `leave`, `owner`, `members` | 1 | 1 |
//! | `join` | 1 | 1 (2 when already a member) |
//! | `close_session` | 1 | 3 |
//! | `set_value` | 1 (the lease row alone is updated; notifies `a:`) | 1 (2 when the value was already set: the count of changed rows is then 0, a read tells) |
//! | `acquire_with_value` | 1 (the acquire statement's upsert sets the new term's value; 2 for a re-acquire by the holder) | `acquire` + `set_value` |
//!
//! A term's value lives in the lease row (`term_value`, with `value_token`, the token of the
//! term it was set for): `owner` and `list` show it only while that term lasts, so a new term
//! starts without it whatever statement began it. Tables of an earlier version get both
//! columns from [`SqlBackend::install_schema`]; the statements need them, so run it after
//! upgrading (as for the session table's `version`).
//!
//! Deadlocks and serialization failures (PostgreSQL SQLSTATE `40001`/`40P01`, MySQL error
//! 1213) are retried inside the backend, a few times within the query timeout, because every
//! statement is one autocommit transaction that the server rolled back whole. An upsert that
//! raced with a concurrent change of the same lease row (it saw the row change between its
//! snapshot and its row lock) is retried the same way.
//!
//! # Keep-alive cost
//!
//! The session row carries a `version` of the session's leases: every statement that changes
//! which leases a session holds (an acquire that begins a new term, for the acquirer and for
//! the holder it takes over from, and a release) increments it, under an exclusive lock on
//! the session's row and in the same statement as the change. The backend keeps, per
//! session, the list of leases the last listing keep-alive answered and its version, and
//! passes that version to the next keep-alive, which reads the held leases only when it
//! differs; otherwise the backend answers with the list it kept. So a keep-alive costs the
//! same with 1 or 1000 held leases, and a change (also a take-over that a keep-alive waited
//! behind, see the statements) is reported at the next keep-alive. Each keep-alive also
//! checks two of the listed leases in turn (one primary key lookup each): a lease row
//! changed by hand, which no statement counts, is found within ⌈held ÷ 2⌉ keep-alives, at
//! the next one for a session holding at most two. Tables created by earlier versions get the
//! column from [`SqlBackend::install_schema`]; processes of an earlier version on the same
//! tables do not count their changes, so while they run a take-over of theirs racing the
//! holder's keep-alive is found by the sample rather than at once: upgrade the processes
//! sharing a table prefix together.
//!
//! Every remaining time is the database's `expires_at − now`, measured in microseconds by the
//! statement that answers and rounded **down** to whole milliseconds (`expires_at` is whole
//! ms; `now` is not), so `sent_at + remaining` is never later than the database's expiry.
//!
//! # MySQL 8 and MariaDB
//!
//! MySQL 8.0 is the target; MariaDB 10.11 is what the test machines run. Each new connection
//! reads `SELECT VERSION(), @@version_comment`, tells MySQL from MariaDB (see
//! [`SqlBackend::server`]) and refuses MySQL before 8.0 and MariaDB before 10.6 with
//! [`Error::UnsupportedServer`]. The statements are the subset both servers document:
//!
//! | | MySQL 8.0 | MariaDB 10.6+ | used here |
//! |---|---|---|---|
//! | shared row lock | `FOR SHARE`, `LOCK IN SHARE MODE` (kept for compatibility, equivalent) | `LOCK IN SHARE MODE` only | `LOCK IN SHARE MODE` |
//! | upsert referring to the new row | row alias `INSERT … VALUES (…) AS new` (8.0.19+); `VALUES(col)` deprecated in 8.0.20 | `VALUES(col)`; no row alias | `INSERT … SELECT … ON DUPLICATE KEY UPDATE` naming the selected columns (valid on both, neither form needed; `join`) |
//! | `RETURNING` | no | `INSERT`/`DELETE … RETURNING` | not used: a second statement reads the outcome |
//! | affected rows of an unchanged upsert | 0, or 1 with `CLIENT_FOUND_ROWS` | same | not used to decide anything |
//! | statement time limit | `max_execution_time` (ms): read-only `SELECT`s only | `max_statement_time` (s): every statement | the server's own, per flavor |
//! | lock waits | `innodb_lock_wait_timeout` (row locks), `lock_wait_timeout` (metadata locks), whole seconds | same | both, set to the query timeout rounded up |
//! | UTC epoch µs | `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))` | same | fixed at statement start, no time-zone conversion |
//! | named lock | `GET_LOCK(name, seconds)` / `RELEASE_LOCK` | same | schema installation |
//! | multi-table `UPDATE`, one table under two aliases | yes, unless a key column is set | same | acquire and release change the lease row and bump the session versions in one statement |
//! | `STRAIGHT_JOIN … ON` in an `UPDATE` | yes | yes | fixes the order acquire locks its rows in |
//! | `ADD COLUMN IF NOT EXISTS` | no | yes | not used: `install_schema` reads `information_schema.COLUMNS` first |
//!
//! How each statement is bounded: on MariaDB by `max_statement_time` (the query timeout).
//! On MySQL a `SELECT` by `max_execution_time`; an `INSERT`, `UPDATE` or `DELETE` (which
//! `max_execution_time` does not cover) by `innodb_lock_wait_timeout` while it waits for a row
//! lock, by `lock_wait_timeout` while it waits for a metadata lock (a concurrent DDL), and in
//! any case by the client's read/write timeout (query timeout + 2 s), after which the
//! connection is dropped (the server may still finish the statement). On both, the engine's
//! local deadline ends the call's relevance anyway.

mod failure;
mod jobs;
#[cfg(feature = "postgres")]
mod listen;
#[cfg(feature = "mysql")]
mod mysql;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod tls;

use crate::backends::options;
use crate::backends::BackendUrl;
use crate::error::{BoxError, Error, Result};
use crate::spi::url::redact;
use crate::spi::{
    Acquire, GroupInfo, HeldLease, KeepAlive, LeaseBackend, LeaseInfo, Listing, NotifySink, Queued,
    SessionGrant, SessionInfo, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use pool::{Pool, PoolConn};

/// The SQL dialect of a [`SqlBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL 14 or later.
    Postgres,
    /// MySQL 8.0+ or MariaDB 10.6+ (the SQL is the subset both accept).
    Mysql,
}

/// Default statement timeout: the default renew interval.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Default interval between two automatic purges of expired sessions.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of pooled connections.
pub const DEFAULT_POOL_SIZE: usize = 4;
/// The most expired sessions one [`LeaseBackend::purge_expired`] call removes.
pub const PURGE_LIMIT: usize = 1000;

/// Options shared by both dialects; set through [`SqlBackendBuilder`] or URL parameters.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) query_timeout: Duration,
    pub(crate) pool_size: usize,
    pub(crate) table_prefix: String,
    pub(crate) purge_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            table_prefix: String::new(),
            purge_interval: DEFAULT_PURGE_INTERVAL,
        }
    }
}

/// The full table names for a prefix.
#[derive(Clone, Debug)]
pub(crate) struct Tables {
    pub(crate) prefix: String,
    pub(crate) session: String,
    pub(crate) lease: String,
    pub(crate) member: String,
    pub(crate) queue: String,
    pub(crate) job: String,
}

impl Tables {
    pub(crate) fn new(prefix: &str) -> Self {
        Tables {
            prefix: prefix.to_owned(),
            session: format!("{prefix}simba_session"),
            lease: format!("{prefix}simba_lease"),
            member: format!("{prefix}simba_member"),
            queue: format!("{prefix}simba_queue"),
            job: format!("{prefix}simba_job"),
        }
    }

    /// The schema script with the prefix applied to every table and index name.
    pub(crate) fn script(&self, script: &str) -> Vec<String> {
        let p = &self.prefix;
        script
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .split(';')
            .map(|s| {
                s.replace("simba_", &format!("{p}simba_"))
                    .replace("idx_", &format!("{p}idx_"))
                    .trim()
                    .to_owned()
            })
            .filter(|s| !s.is_empty())
            .collect()
    }
}

/// A failure classified for the retry loop.
#[derive(Debug)]
pub(crate) struct DbError {
    pub(crate) kind: Kind,
    pub(crate) source: BoxError,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Deadlock or serialization failure: the statement was rolled back; run it again.
    Retry,
    /// The server cancelled the statement at its timeout.
    Timeout,
    /// The connection is unusable.
    Connection,
    /// A table of the schema does not exist (PostgreSQL SQLSTATE 42P01, MySQL/MariaDB error
    /// 1146): the schema is not installed (under this table prefix).
    MissingTable,
    /// Anything else (bad SQL, constraint, permission).
    Other,
}

impl DbError {
    pub(crate) fn new(kind: Kind, source: impl Into<BoxError>) -> Self {
        DbError {
            kind,
            source: source.into(),
        }
    }
}

pub(crate) type DbResult<T> = std::result::Result<T, DbError>;

/// The table a server's "does not exist" message names: the first quoted name
/// (PostgreSQL: `relation "t_simba_lease" does not exist`; MySQL and MariaDB:
/// `Table 'db.t_simba_lease' doesn't exist`, whose database is left out).
pub(crate) fn missing_table(message: &str) -> Option<String> {
    let (quote, rest) = message
        .char_indices()
        .find(|(_, c)| *c == '"' || *c == '\'')
        .map(|(i, c)| (c, &message[i + 1..]))?;
    let name = &rest[..rest.find(quote)?];
    let name = match quote {
        '\'' => name.split_once('.').map_or(name, |(_, table)| table),
        _ => name,
    };
    (!name.is_empty()).then(|| name.to_owned())
}

/// Runs `f` on a pooled connection: bounded checkout, deadlock retries, broken connections
/// discarded.
pub(crate) fn with_conn<C: PoolConn, T>(
    pool: &Pool<C>,
    timeout: Duration,
    mut f: impl FnMut(&mut C) -> DbResult<T>,
) -> DbResult<T> {
    let deadline = options::deadline(timeout);
    let mut attempt = 0u32;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let mut conn = pool.get(wait).map_err(|e| match e {
            Error::Timeout { .. } => DbError::new(Kind::Timeout, e),
            other => DbError::new(Kind::Connection, other),
        })?;
        match f(&mut conn) {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == Kind::Connection => {
                conn.discard();
                return Err(e);
            }
            Err(e) if e.kind == Kind::Retry && attempt < 8 && Instant::now() < deadline => {
                drop(conn);
                attempt += 1;
                log::debug!("retrying after {}: attempt {attempt}", e.source);
                std::thread::sleep(crate::rand::jitter(Duration::from_millis(2 << attempt)));
            }
            Err(e) => return Err(e),
        }
    }
}

/// How many leases of its known list a keep-alive checks when their version is unchanged
/// (a lease row changed by hand, which no statement of the backend counts, is found within
/// ⌈held / SAMPLE⌉ keep-alives).
pub(crate) const SAMPLE: usize = 2;

/// What the backend knows of a session's leases, passed to a keep-alive: the version of the
/// list it keeps and up to [`SAMPLE`] `(name, token)` of that list to check.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Known<'a> {
    pub(crate) version: i64,
    pub(crate) sample: &'a [(String, i64)],
}

/// A renewed session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// The remaining µs.
    pub(crate) remaining_us: i64,
    /// The version of the session's leases the list belongs to (when not listed: the
    /// current one, which the caller passed).
    pub(crate) version: i64,
    /// The `(name, token)` of the leases held, when the version differs from the one passed
    /// (or none was passed) or the sample was not all held; `None`: unchanged.
    pub(crate) leases: Option<Vec<(String, i64)>>,
}

/// Outcome of one acquire statement.
#[derive(Debug)]
pub(crate) enum AcqRow {
    /// The acquirer's session is not live.
    Expired,
    /// The acquirer holds the lease (a new term or the same).
    Acquired { token: i64, remaining_us: i64 },
    /// Another live session holds it.
    Held {
        session: String,
        token: i64,
        remaining_us: i64,
    },
    /// The row changed under the statement; run it again.
    Raced,
}

/// What one acquire statement reported, read from its result in either dialect.
///
/// Remaining times are in microseconds, `expires_at × 1000 − now` with `now` the database's
/// clock in µs, so a session is live exactly when its remaining is positive (the statements'
/// `expires_at > now_ms` with `now_ms = now DIV 1000`).
#[derive(Debug, Default)]
pub(crate) struct AcqReport {
    /// The acquirer's remaining µs; `None` (or not positive) when its session is not live.
    pub(crate) my_remaining: Option<i64>,
    /// The token of the term the statement began, if it reports one (PostgreSQL's
    /// `RETURNING`). MySQL leaves it `None`: the lease row read after the `UPDATE` decides.
    pub(crate) new_token: Option<i64>,
    /// The lease row as the report read it: holder session, token, holder's remaining µs.
    pub(crate) holder: Option<String>,
    pub(crate) token: Option<i64>,
    pub(crate) holder_remaining: Option<i64>,
}

impl AcqReport {
    /// The outcome for the acquirer `id`.
    pub(crate) fn outcome(self, id: &str) -> AcqRow {
        let Some(my_rem) = self.my_remaining.filter(|r| *r > 0) else {
            return AcqRow::Expired;
        };
        if let Some(t) = self.new_token {
            return AcqRow::Acquired {
                token: t,
                remaining_us: my_rem,
            };
        }
        let holder = self.holder.map(|s| s.trim_end().to_owned());
        match (holder, self.token, self.holder_remaining) {
            (Some(s), Some(t), _) if s == id => AcqRow::Acquired {
                token: t,
                remaining_us: my_rem,
            },
            (Some(s), Some(t), Some(rem)) if rem > 0 => AcqRow::Held {
                session: s,
                token: t,
                remaining_us: rem,
            },
            _ => AcqRow::Raced,
        }
    }
}

/// Everything live, as [`Driver::list`] read it (remaining times in µs).
#[derive(Debug, Default)]
pub(crate) struct RawListing {
    /// `(session id, remaining µs, metadata)`.
    pub(crate) sessions: Vec<(String, i64, String)>,
    /// `(name, holder, token, holder's remaining µs, term value)`.
    pub(crate) leases: Vec<(String, String, i64, i64, String)>,
    /// `(group, member session id, metadata)`, sorted by group then session.
    pub(crate) members: Vec<(String, String, String)>,
}

/// What [`SqlBackend::probe_connections`] saw: server-side connection ids (PostgreSQL backend
/// pids, MySQL connection ids) of two client connections A and B of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionProbe {
    /// A's id in each of its three transactions: two back to back, then one while B keeps a
    /// transaction open.
    pub own: Vec<u64>,
    /// B's id, read inside the transaction it keeps open.
    pub other: u64,
    /// The `statement_timeout` the server applies on A (PostgreSQL; `None` on MySQL). The
    /// backend asks for its query timeout in the connection's startup options.
    pub statement_timeout: Option<Duration>,
}

impl ConnectionProbe {
    /// Whether the client connections are not the server's: A changed server connection
    /// between transactions, or B ran on one A had used. Either is impossible on a direct
    /// connection and is what a transaction-mode pooler (PgBouncer, pgcat, Supavisor,
    /// ProxySQL multiplexing) does: reusing the most recently freed server connection, B gets
    /// A's; taking the least recently freed, A's second transaction gets another.
    pub fn pooled(&self) -> bool {
        self.own.windows(2).any(|w| w[0] != w[1]) || self.own.contains(&self.other)
    }
}

/// The dialect-specific statements; each method is one backend operation.
pub(crate) trait Driver: Send + Sync + 'static {
    fn install_schema(&self) -> DbResult<()>;
    fn drop_tables(&self) -> DbResult<()>;
    /// Inserts the session; returns its remaining µs as the database measured it.
    fn open_session(&self, id: &str, lease_ms: i64, metadata: &str) -> DbResult<i64>;
    /// Renews the session; lists its leases only when their version differs from `known`'s
    /// (always without `known`) or a lease of its sample is no longer held. `None` when the
    /// session is not live.
    fn keep_alive(
        &self,
        id: &str,
        lease_ms: i64,
        known: Option<Known<'_>>,
    ) -> DbResult<Option<Renewed>>;
    /// Deletes the session, frees its leases, deletes its memberships.
    fn remove_session(&self, id: &str) -> DbResult<()>;
    fn acquire(&self, id: &str, name: &str) -> DbResult<AcqRow>;
    /// [`Driver::acquire`] that gives a new term `value` in the same statement where the
    /// dialect can; whether it did (the default cannot).
    fn acquire_with_value(&self, id: &str, name: &str, value: &str) -> DbResult<(AcqRow, bool)> {
        let _ = value;
        Ok((self.acquire(id, name)?, false))
    }
    fn release(&self, id: &str, name: &str, token: i64) -> DbResult<bool>;
    /// The live holder: session, token, remaining µs, the term's value (empty for none).
    fn owner(&self, name: &str) -> DbResult<Option<(String, i64, i64, String)>>;
    /// Sets the value of `id`'s live term of `name` with `token`; whether it is held so
    /// (and the value now set).
    fn set_value(&self, id: &str, name: &str, token: i64, value: &str) -> DbResult<bool>;
    /// `false` when the session is not live.
    fn join(&self, id: &str, group: &str) -> DbResult<bool>;
    fn leave(&self, id: &str, group: &str) -> DbResult<bool>;
    fn members(&self, group: &str) -> DbResult<Vec<(String, String)>>;
    /// Queues `id` behind `name` (once) and keeps its place `patience_ms` longer, deleting
    /// the dead places of `name`; how many live places are ahead, `None` when the session is
    /// not live. Text statements (not prepared with the others), so tables from before the
    /// queue table still serve everything else.
    fn queue_place(&self, id: &str, name: &str, patience_ms: i64) -> DbResult<Option<i64>>;
    /// Deletes `id`'s place behind `name`; whether it had one.
    fn queue_leave(&self, id: &str, name: &str) -> DbResult<bool>;
    /// The sessions of the live places behind `name`, first first.
    fn queue_list(&self, name: &str) -> DbResult<Vec<String>>;
    /// Run-once jobs (see [`jobs`]): the claim; the token and remaining µs when it took the
    /// row.
    fn job_claim(&self, id: &str, name: &str, at_most_ms: i64) -> DbResult<Option<(i64, i64)>>;
    /// The job row as `id` sees it.
    fn job_report(&self, id: &str, name: &str) -> DbResult<jobs::JobReport>;
    /// Inserts the free job row if missing.
    fn job_create(&self, name: &str) -> DbResult<()>;
    /// Finishes `id`'s running claim with `token`; whether it did.
    fn job_finish(&self, id: &str, name: &str, token: i64, at_least_ms: i64) -> DbResult<bool>;
    fn purge(&self, limit: usize) -> DbResult<usize>;
    /// A prepared `SELECT 1`.
    fn ping(&self) -> DbResult<()>;
    fn connection_ids(&self) -> Vec<u64>;
    /// A server setting by name (PostgreSQL `current_setting`, MySQL a global variable);
    /// `None` when the server has no such setting.
    fn setting(&self, name: &str) -> DbResult<Option<String>>;
    /// `(table, column, collation)` of the text key columns of the three tables.
    fn key_collations(&self) -> DbResult<Vec<(String, String, String)>>;
    /// Every live session, held lease and membership.
    fn list(&self) -> DbResult<RawListing>;
    /// The database server's clock now (not the statement's start), as UTC epoch ms.
    fn clock_ms(&self) -> DbResult<i64>;
    /// See [`SqlBackend::probe_connections`].
    fn probe_connections(&self) -> DbResult<ConnectionProbe>;
    /// The server detected on connect, where the dialect detects it.
    fn server(&self) -> Option<ServerVersion> {
        None
    }
    /// Registers a notification sink; `None` where the dialect has no notifications.
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        let _ = sink;
        Ok(None)
    }
    /// The `application_name` of the listening connection, where there is one.
    fn listener_name(&self) -> Option<String> {
        None
    }
}

/// The kind of database server behind a [`SqlBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Flavor {
    /// Oracle MySQL (8.0 or later).
    MySql,
    /// MariaDB (10.6 or later).
    MariaDb,
}

/// The database server a [`SqlBackend`] connected to, as detected from `SELECT VERSION(),
/// @@version_comment` on every new connection (MySQL dialect).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerVersion {
    /// MySQL or MariaDB.
    pub flavor: Flavor,
    /// `(major, minor, patch)`, e.g. `(10, 11, 19)`.
    pub version: (u32, u32, u32),
    /// The version string as the server reported it, e.g. `10.11.19-MariaDB-0+deb12u1`.
    pub reported: String,
}

/// Leases, sessions and groups in PostgreSQL or MySQL/MariaDB tables.
///
/// Built from a URL with [`crate::connect`] or with [`SqlBackend::builder`]; call
/// [`SqlBackend::install_schema`] once (it is idempotent) or apply the scripts under `sql/`
/// yourself.
///
/// ```no_run
/// use simba_lease::backends::SqlBackend;
/// use simba_lease::{Config, Session};
/// use std::{sync::Arc, time::Duration};
///
/// let backend = SqlBackend::builder("postgres://simba@127.0.0.1:5432/app")
///     .query_timeout(Duration::from_secs(3))
///     .pool_size(2)
///     .build()?;
/// backend.install_schema()?;
/// let session = Session::open(Arc::new(backend), Config::default())?;
/// # Ok::<(), simba_lease::Error>(())
/// ```
///
/// # Operating notes
///
/// * The backend keeps its own small pool (`pool_size`, default 4; 2–4 per process is
///   plenty): a mutex over idle connections, no background threads, no ping on every checkout
///   (only for a connection idle longer than 30 s). A keep-alive that waits for a connection
///   longer than `query_timeout` fails, and the session goes to Jeopardy: don't share the
///   backend with unrelated heavy traffic.
/// * Set `query_timeout` to the session's renew interval when you change that.
/// * Use a direct connection, not a transaction-mode pooler (PgBouncer `transaction`): the
///   backend prepares statements per connection.
/// * Tokens are as durable as the database's commits: keep fencing strict across failovers
///   with synchronous replication.
/// * The `postgres` crate runs a private current-thread tokio runtime per connection, which
///   cannot block inside another runtime: a call made on a thread inside a tokio runtime (an
///   async task, a `#[tokio::main]` body, `spawn_blocking`) runs on a short-lived thread of
///   the backend's own (one thread start per call; it still blocks the caller), and a
///   connection dropped there is closed on one. Prefer calling it from plain threads or
///   `spawn_blocking` (see the crate's "Using it from async code").
/// * TLS (feature `tls`, rustls): URL options `sslmode`, `ca`, `cert`, `key` (see
///   [`SqlBackendBuilder`]); the default is plaintext.
/// * PostgreSQL pushes releases, new terms and membership changes (`pg_notify` in the
///   statement that makes the change, one channel per table prefix) to one dedicated
///   listening connection per backend, opened by the first [`LeaseBackend::subscribe`]
///   (see [`SqlBackend::listener_name`]); a failed connection is reported as
///   [`Notification::Resync`](crate::spi::Notification::Resync) and reopened with backoff.
///   MySQL/MariaDB have no equivalent: `subscribe` returns `None` and the engine polls.
pub struct SqlBackend {
    dialect: Dialect,
    driver: Arc<dyn Driver>,
    options: Options,
    last_purge: Mutex<Instant>,
    purging: Arc<AtomicBool>,
    /// Per session, the version of its leases the last listing keep-alive answered, and that
    /// list (a keep-alive answering "same version" reuses it).
    known: Mutex<HashMap<SessionId, KnownLeases>>,
}

/// The leases of a session at one version of its lease set.
#[derive(Debug)]
struct KnownLeases {
    version: i64,
    leases: Vec<(LeaseName, Token)>,
    /// Where the next sample starts.
    next: usize,
    /// The last keep-alive that used this list, and its lease: an entry unused for longer is
    /// of a session that expired (or was abandoned) and is dropped.
    used: Instant,
    lease: Duration,
}

impl KnownLeases {
    /// The version and the next [`SAMPLE`] leases to check, in turn.
    fn sample(&mut self) -> (i64, Vec<(String, i64)>) {
        let n = self.leases.len();
        let take = SAMPLE.min(n);
        let sample = (0..take)
            .map(|i| {
                let (name, t) = &self.leases[(self.next + i) % n];
                (
                    name.as_str().to_owned(),
                    i64::try_from(t.get()).unwrap_or(i64::MAX),
                )
            })
            .collect();
        if n > 0 {
            self.next = (self.next + take) % n;
        }
        (self.version, sample)
    }
}

impl std::fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackend")
            .field("dialect", &self.dialect)
            .field("options", &self.options)
            .finish()
    }
}

/// Builds a [`SqlBackend`] from a URL and options.
///
/// URL query parameters set the same options (the builder's calls win):
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `query_timeout` | statement timeout and the longest wait for a pooled connection, e.g. `500ms`, `5s` | `5s` |
/// | `pool_size` | connections kept by the backend | `4` |
/// | `table_prefix` | prefix of the three table names, `[A-Za-z0-9_]`, at most 32 characters | empty |
/// | `purge_interval` | at most one automatic purge of expired sessions per interval | `60s` |
/// | `sslmode` | `disable`, `prefer`, `require`, `verify-ca`, `verify-full` (feature `tls`) | `disable`; `verify-full` when `ca`, `cert` or `key` is given |
/// | `ca` (or `sslrootcert`) | PEM file of the CA certificates to trust | the platform's roots (MySQL: the Mozilla roots) |
/// | `cert`, `key` (or `sslcert`, `sslkey`) | PEM files of a client certificate and its key, both or neither | none |
///
/// TLS modes, with libpq's meanings on both dialects: `disable` is plaintext (also when the
/// server offers TLS, as before TLS was built in); `prefer` uses TLS when the server offers
/// it and is the only mode that falls back to plaintext; `require` insists on TLS and checks
/// the certificate only when `ca` is given (then its chain, as `verify-ca`); `verify-ca`
/// checks the chain and validity period but not the host name; `verify-full` also checks that
/// the URL's host (name or IP address) is one the certificate names. A TLS option with
/// `sslmode=disable`, or a file that cannot be read or holds no PEM certificate (`ca`,
/// `cert`) or key (`key`), fails with [`Error::InvalidConfig`] naming the option; `sslmode`
/// other than `disable` without the `tls` feature fails the same way naming `sslmode`. An
/// unknown CA, an expired certificate or a host-name mismatch fails the build with
/// [`Error::Tls`], and a refused password with [`Error::Authentication`]. The
/// PostgreSQL `LISTEN` connection uses the same settings as the pool. Passwords come from the
/// URL (PostgreSQL: SCRAM-SHA-256, over TLS SCRAM-SHA-256-PLUS bound to the TLS session
/// where the server offers it, or md5, as the server asks) and never appear in an error or
/// `Debug`. On MySQL/MariaDB the `mysql` crate adds
/// its Mozilla roots to `ca`, and connects over TCP only (never its unix socket), so TLS is
/// never skipped.
///
/// URLs: `postgres://user[:password]@host[:port]/database` (also `postgresql://`) and
/// `mysql://user[:password]@host[:port]/database` (also `mariadb://`); a host is
/// `host[:port]` or `[v6][:port]`.
///
/// Durations are written `500ms`, `5s`, `2m`, `1h` or as bare milliseconds. `query_timeout`
/// is at least 1 ms and at most one hour, `purge_interval` at most one week, `pool_size` from
/// 1 to 1000, from the URL and the builder alike; anything else fails with
/// [`Error::InvalidConfig`] naming the option (see [`options`](crate::backends::options)).
/// `Debug` shows the URL with its password masked.
pub struct SqlBackendBuilder {
    url: String,
    options: Options,
    set: Vec<&'static str>,
    /// TLS options set by the builder's methods: (option, value), winning over the URL's.
    tls_set: Vec<(&'static str, String)>,
    #[cfg(feature = "postgres")]
    pg_config: Option<::postgres::Config>,
    #[cfg(feature = "mysql")]
    mysql_opts: Option<::mysql::Opts>,
}

impl std::fmt::Debug for SqlBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SqlBackendBuilder");
        d.field("url", &redact(&self.url))
            .field("options", &self.options)
            .field("set", &self.set)
            .field("tls", &self.tls_set);
        #[cfg(feature = "postgres")]
        d.field("postgres_config", &self.pg_config.as_ref().map(|_| "…"));
        #[cfg(feature = "mysql")]
        d.field("mysql_opts", &self.mysql_opts.as_ref().map(|_| "…"));
        d.finish()
    }
}

/// The largest `pool_size`.
const MAX_POOL_SIZE: usize = 1000;

fn validate(o: &Options) -> Result<()> {
    if o.query_timeout < Duration::from_millis(1) {
        return Err(Error::config("query_timeout", "must be at least 1ms"));
    }
    options::check_timeout("query_timeout", o.query_timeout)?;
    if o.purge_interval > options::MAX_INTERVAL {
        return Err(Error::config(
            "purge_interval",
            format!(
                "{:?} is longer than the {:?} maximum",
                o.purge_interval,
                options::MAX_INTERVAL
            ),
        ));
    }
    if o.pool_size == 0 || o.pool_size > MAX_POOL_SIZE {
        return Err(Error::config("pool_size", "must be between 1 and 1000"));
    }
    if o.table_prefix.len() > 32
        || !o
            .table_prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(Error::config(
            "table_prefix",
            format!(
                "{:?}: at most 32 characters of [A-Za-z0-9_]",
                o.table_prefix
            ),
        ));
    }
    Ok(())
}

impl SqlBackendBuilder {
    fn mark(&mut self, s: &'static str) {
        self.set.push(s);
    }

    /// Statement timeout, also the longest wait for a pooled connection (default 5 s).
    pub fn query_timeout(mut self, t: Duration) -> Self {
        self.options.query_timeout = t;
        self.mark("query_timeout");
        self
    }

    /// Number of pooled connections (default 4).
    pub fn pool_size(mut self, n: usize) -> Self {
        self.options.pool_size = n;
        self.mark("pool_size");
        self
    }

    /// Prefix of the table names, e.g. `app_` for `app_simba_lease` (default empty).
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.table_prefix = prefix.into();
        self.mark("table_prefix");
        self
    }

    /// At most one automatic purge of expired sessions per interval (default 60 s).
    pub fn purge_interval(mut self, t: Duration) -> Self {
        self.options.purge_interval = t;
        self.mark("purge_interval");
        self
    }

    fn tls_option(mut self, option: &'static str, value: String) -> Self {
        self.tls_set.push((option, value));
        self
    }

    /// TLS mode, as the URL option `sslmode`: `disable`, `prefer`, `require`, `verify-ca` or
    /// `verify-full` (feature `tls`; checked by [`build`](Self::build)).
    pub fn sslmode(self, mode: impl Into<String>) -> Self {
        self.tls_option("sslmode", mode.into())
    }

    /// PEM file of the CA certificates to trust, as the URL option `ca` (`sslrootcert`).
    pub fn ca(self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_option("ca", path.as_ref().to_string_lossy().into_owned())
    }

    /// PEM file of a client certificate, as the URL option `cert` (`sslcert`); needs
    /// [`key`](Self::key).
    pub fn cert(self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_option("cert", path.as_ref().to_string_lossy().into_owned())
    }

    /// PEM file of the client certificate's private key, as the URL option `key` (`sslkey`).
    pub fn key(self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_option("key", path.as_ref().to_string_lossy().into_owned())
    }

    /// Starts from a `postgres::Config` of your own (host, credentials, `options` such as a
    /// time zone); the URL's host and credentials are then ignored. TLS still comes from the
    /// URL options (`sslmode`, `ca`, `cert`, `key`), whatever the config's `ssl_mode`.
    #[cfg(feature = "postgres")]
    pub fn postgres_config(mut self, config: ::postgres::Config) -> Self {
        self.pg_config = Some(config);
        self
    }

    /// Starts from `mysql::Opts` of your own (credentials, `init` statements such as a time
    /// zone); the URL's host and credentials are then ignored. Their `ssl_opts` are kept
    /// unless the URL (or the builder) sets `sslmode`, `ca`, `cert` or `key`.
    #[cfg(feature = "mysql")]
    pub fn mysql_opts(mut self, opts: impl Into<::mysql::Opts>) -> Self {
        self.mysql_opts = Some(opts.into());
        self
    }

    /// Connects (one connection, to check the server) and returns the backend.
    pub fn build(self) -> Result<SqlBackend> {
        let mut url = BackendUrl::parse(&self.url)?;
        let mut known = vec![
            "query_timeout",
            "pool_size",
            "table_prefix",
            "purge_interval",
        ];
        known.extend(tls::OPTIONS);
        url.check_params(&known)?;
        for (option, value) in &self.tls_set {
            // The builder's value replaces the URL's, under either name.
            let alias = tls::alias(option);
            url.params.retain(|(k, _)| k != option && k != alias);
            url.params.push(((*option).to_owned(), value.clone()));
        }
        let tls = tls::SqlTls::from_url(&url)?;
        let mut options = Options::default();
        if let Some(v) = url.param("query_timeout") {
            options.query_timeout = options::timeout("query_timeout", v)?;
        }
        if let Some(v) = url.param("purge_interval") {
            options.purge_interval = options::duration("purge_interval", v, options::MAX_INTERVAL)?;
        }
        if let Some(v) = url.param("pool_size") {
            options.pool_size = options::integer("pool_size", v, 1, MAX_POOL_SIZE)?;
        }
        if let Some(v) = url.param("table_prefix") {
            options.table_prefix = v.to_owned();
        }
        for s in &self.set {
            match *s {
                "query_timeout" => options.query_timeout = self.options.query_timeout,
                "pool_size" => options.pool_size = self.options.pool_size,
                "table_prefix" => options.table_prefix = self.options.table_prefix.clone(),
                _ => options.purge_interval = self.options.purge_interval,
            }
        }
        validate(&options)?;
        let tables = Tables::new(&options.table_prefix);
        let (dialect, driver): (Dialect, Arc<dyn Driver>) = match url.scheme.as_str() {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => (
                Dialect::Postgres,
                Arc::new(postgres::PgDriver::new(
                    &url,
                    self.pg_config,
                    &tls,
                    &options,
                    tables,
                )?),
            ),
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => (
                Dialect::Mysql,
                Arc::new(mysql::MyDriver::new(
                    &url,
                    self.mysql_opts,
                    &tls,
                    &options,
                    tables,
                )?),
            ),
            #[cfg(not(feature = "postgres"))]
            "postgres" | "postgresql" => {
                return Err(Error::FeatureDisabled {
                    scheme: url.scheme.clone(),
                    feature: "postgres",
                })
            }
            #[cfg(not(feature = "mysql"))]
            "mysql" | "mariadb" => {
                return Err(Error::FeatureDisabled {
                    scheme: url.scheme.clone(),
                    feature: "mysql",
                })
            }
            other => {
                return Err(url.invalid(format!(
                    "not a SQL scheme: {other:?} (known: postgres, postgresql, mysql, mariadb)"
                )))
            }
        };
        Ok(SqlBackend {
            dialect,
            driver,
            options,
            last_purge: Mutex::new(Instant::now()),
            purging: Arc::new(AtomicBool::new(false)),
            known: Mutex::new(HashMap::new()),
        })
    }
}

/// The longest lease stored, about 139 years: `expires_at × 1000` (µs) must fit in a `BIGINT`.
const MAX_LEASE_MS: i64 = 1 << 42;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(MAX_LEASE_MS, |m| m.min(MAX_LEASE_MS))
}

/// A remaining time measured by the database in microseconds, rounded DOWN to whole
/// milliseconds (never up, so `sent_at + remaining` is never later than the database's
/// expiry); not positive means none left.
fn remaining(us: i64) -> Duration {
    Duration::from_millis(u64::try_from(us.div_euclid(1000)).unwrap_or(0))
}

fn token(t: i64) -> Result<Token> {
    Token::new(u64::try_from(t).unwrap_or(0)).map_err(|_| {
        failure::error(
            "reading a token",
            format!("token {t} in the table is not > 0"),
        )
    })
}

fn session_id(s: &str) -> Result<SessionId> {
    SessionId::parse(s.trim_end()).map_err(|e| failure::error("reading a session id", e))
}

impl SqlBackend {
    /// A builder for `url` (`postgres://…` or `mysql://…`); see [`SqlBackendBuilder`].
    pub fn builder(url: impl Into<String>) -> SqlBackendBuilder {
        SqlBackendBuilder {
            url: url.into(),
            options: Options::default(),
            set: Vec::new(),
            tls_set: Vec::new(),
            #[cfg(feature = "postgres")]
            pg_config: None,
            #[cfg(feature = "mysql")]
            mysql_opts: None,
        }
    }

    /// A PostgreSQL backend for `url` with default options.
    pub fn postgres(url: &str) -> Result<SqlBackend> {
        let b = Self::builder(url).build()?;
        if b.dialect != Dialect::Postgres {
            return Err(Error::config("url", "expected a postgres:// URL"));
        }
        Ok(b)
    }

    /// A MySQL/MariaDB backend for `url` with default options.
    pub fn mysql(url: &str) -> Result<SqlBackend> {
        let b = Self::builder(url).build()?;
        if b.dialect != Dialect::Mysql {
            return Err(Error::config("url", "expected a mysql:// URL"));
        }
        Ok(b)
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The table prefix in use.
    pub fn table_prefix(&self) -> &str {
        &self.options.table_prefix
    }

    /// Creates the five tables (sessions, leases, members, the fair-lock queue, run-once
    /// jobs) and their indexes if they do not exist (idempotent, safe to
    /// run from several processes at once), and adds the `version` column to a session table
    /// and the `term_value` and `value_token` columns to a lease table created by an earlier
    /// version (run it after upgrading; the statements need them).
    pub fn install_schema(&self) -> Result<()> {
        self.driver
            .install_schema()
            .map_err(|e| self.err("installing the schema", e))
    }

    /// Drops the five tables (with every token in them). For tests and teardown only:
    /// tokens restart at 1 afterwards.
    pub fn drop_tables(&self) -> Result<()> {
        self.driver
            .drop_tables()
            .map_err(|e| self.err("dropping the tables", e))
    }

    /// The database server as detected when the backend connected: flavor (MySQL or MariaDB)
    /// and version. `None` on PostgreSQL, where it is not detected.
    pub fn server(&self) -> Option<ServerVersion> {
        self.driver.server()
    }

    /// The `application_name` of the connection that listens for notifications
    /// (`simba-listen/{table_prefix}`), on PostgreSQL; `None` on MySQL, which is polled.
    pub fn listener_name(&self) -> Option<String> {
        self.driver.listener_name()
    }

    /// A server setting, e.g. `synchronous_commit` or `server_version_num` (PostgreSQL
    /// `current_setting`) or `version_comment` or `rpl_semi_sync_master_enabled` (a MySQL
    /// global variable); `None` when the server has no such setting. Names are
    /// `[A-Za-z0-9_.]`, else [`Error::InvalidConfig`]. Used by `simba doctor`.
    pub fn setting(&self, name: &str) -> Result<Option<String>> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            return Err(Error::config("setting", "a setting name is [A-Za-z0-9_.]"));
        }
        self.driver
            .setting(name)
            .map_err(|e| self.err("reading a server setting", e))
    }

    /// The collation of each text key column (`name`, `session_id`, `group_name`) of this
    /// backend's tables as `(table, column, collation)`, sorted; empty when the tables do not
    /// exist. The schema scripts give them `"C"` (PostgreSQL) or a `_bin` collation (MySQL):
    /// names compare byte by byte. Used by `simba doctor`.
    pub fn key_collations(&self) -> Result<Vec<(String, String, String)>> {
        self.driver
            .key_collations()
            .map_err(|e| self.err("reading the tables' collations", e))
    }

    /// The database server's clock now, as UTC epoch milliseconds (PostgreSQL
    /// `clock_timestamp()`, MySQL `UTC_TIMESTAMP(6)`). Leases never depend on it (every
    /// remaining time is measured within one statement); `simba doctor` reports it.
    pub fn server_clock_ms(&self) -> Result<i64> {
        self.driver
            .clock_ms()
            .map_err(|e| self.err("reading the server's clock", e))
    }

    /// Opens two connections of its own (outside the pool) and reads their server-side ids
    /// across transactions, to detect a transaction-mode pooler between the backend and the
    /// database (see [`ConnectionProbe::pooled`]); also reads the statement timeout the
    /// server applies. Uses the simple query protocol (no prepared statements). Used by
    /// `simba doctor`.
    pub fn probe_connections(&self) -> Result<ConnectionProbe> {
        self.driver
            .probe_connections()
            .map_err(|e| self.err("probing connections", e))
    }

    /// The query timeout: every statement's bound, asked of the server per connection.
    pub fn query_timeout(&self) -> Duration {
        self.options.query_timeout
    }

    /// Server-side ids of the idle pooled connections (PostgreSQL backend pids, MySQL
    /// connection ids), to find them in `pg_stat_activity` or `SHOW PROCESSLIST`.
    pub fn connection_ids(&self) -> Vec<u64> {
        self.driver.connection_ids()
    }

    /// An acquire (with `value`, one that gives a new term the value where the dialect can),
    /// run again while it raced a concurrent change of the row; the reply and whether the
    /// value was set.
    fn acquire_valued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: Option<&str>,
    ) -> Result<(Acquire, bool)> {
        let deadline = options::deadline(self.options.query_timeout);
        let mut attempt = 0u32;
        loop {
            let (row, set) = match value {
                None => self
                    .driver
                    .acquire(session.as_str(), name.as_str())
                    .map(|r| (r, false)),
                Some(v) => self
                    .driver
                    .acquire_with_value(session.as_str(), name.as_str(), v),
            }
            .map_err(|e| self.err("acquiring a lease", e))?;
            return match row {
                AcqRow::Expired => Err(Self::expired(session)),
                AcqRow::Acquired {
                    token: t,
                    remaining_us,
                } => Ok((
                    Acquire::Acquired(Term {
                        name: name.clone(),
                        token: token(t)?,
                        remaining: remaining(remaining_us),
                    }),
                    set,
                )),
                AcqRow::Held {
                    session: s,
                    token: t,
                    remaining_us,
                } => Ok((
                    Acquire::Held(Owner {
                        session: session_id(&s)?,
                        token: token(t)?,
                        remaining: remaining(remaining_us),
                        value: String::new(),
                    }),
                    false,
                )),
                AcqRow::Raced if Instant::now() < deadline && attempt < 50 => {
                    attempt += 1;
                    std::thread::sleep(crate::rand::jitter(Duration::from_millis(
                        1 << attempt.min(5),
                    )));
                    continue;
                }
                AcqRow::Raced => Err(Error::Timeout {
                    operation: "acquiring a lease under contention",
                    after: self.options.query_timeout,
                    source: None,
                }),
            };
        }
    }

    fn err(&self, operation: &'static str, e: DbError) -> Error {
        match e.kind {
            Kind::Timeout => match e.source.downcast::<Error>() {
                Ok(inner) => *inner,
                Err(source) => Error::Timeout {
                    operation,
                    after: self.options.query_timeout,
                    source: Some(source),
                },
            },
            Kind::MissingTable => Error::MissingSchema {
                table: missing_table(&e.source.to_string())
                    .unwrap_or_else(|| format!("{}simba_*", self.options.table_prefix)),
                operation,
                source: e.source,
            },
            _ => match e.source.downcast::<Error>() {
                Ok(inner) => *inner,
                Err(source) => failure::error(operation, source),
            },
        }
    }

    fn expired(session: &SessionId) -> Error {
        Error::SessionExpired {
            session: session.clone(),
        }
    }

    /// Starts a purge of expired sessions if the purge interval passed since the last one.
    ///
    /// It runs on a short-lived thread of its own so the keep-alive that triggered it returns
    /// at once; at most one runs at a time, and a failure is logged (the next interval tries
    /// again).
    fn maybe_purge(&self) {
        {
            let mut last = self.last_purge.lock();
            if last.elapsed() < self.options.purge_interval {
                return;
            }
            *last = Instant::now();
        }
        // Lists of sessions not kept alive for a whole lease: expired or abandoned.
        self.known.lock().retain(|_, k| k.used.elapsed() <= k.lease);
        if self.purging.swap(true, Ordering::AcqRel) {
            return;
        }
        let (driver, purging) = (self.driver.clone(), self.purging.clone());
        let spawned = std::thread::Builder::new()
            .name("simba-sql-purge".into())
            .spawn(move || {
                match driver.purge(PURGE_LIMIT) {
                    Ok(n) if n > 0 => log::debug!("purged {n} expired sessions"),
                    Ok(_) => {}
                    Err(e) => log::warn!("purging expired sessions failed: {}", e.source),
                }
                purging.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.purging.store(false, Ordering::Release);
        }
    }
}

impl LeaseBackend for SqlBackend {
    fn kind(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }

    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        crate::backends::options::check_lease(lease)?;
        if self.dialect == Dialect::Postgres && metadata.as_str().contains('\0') {
            return Err(Error::config(
                "metadata",
                "PostgreSQL text cannot hold NUL characters",
            ));
        }
        let id = SessionId::random();
        let us = self
            .driver
            .open_session(id.as_str(), ms(lease), metadata.as_str())
            .map_err(|e| self.err("opening a session", e))?;
        self.maybe_purge();
        Ok(SessionGrant {
            id,
            remaining: remaining(us),
        })
    }

    /// One statement (PostgreSQL) or two (MySQL) whatever the session holds: the leases are
    /// read only when their version (bumped by every acquire of a new term, release and
    /// take-over) differs from the list this backend keeps for the session, or when one of
    /// a sample of two listed leases is no longer held (a row changed by hand).
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        crate::backends::options::check_lease(lease)?;
        let mut ask = true;
        loop {
            let known = if ask {
                self.known.lock().get_mut(session).map(KnownLeases::sample)
            } else {
                None
            };
            let reply = self
                .driver
                .keep_alive(
                    session.as_str(),
                    ms(lease),
                    known.as_ref().map(|(version, sample)| Known {
                        version: *version,
                        sample,
                    }),
                )
                .map_err(|e| self.err("keeping a session alive", e))?;
            let Some(r) = reply else {
                self.known.lock().remove(session);
                self.driver
                    .remove_session(session.as_str())
                    .map_err(|e| self.err("removing an expired session", e))?;
                return Err(Self::expired(session));
            };
            let remaining = remaining(r.remaining_us);
            let held = |leases: &[(LeaseName, Token)]| KeepAlive {
                remaining,
                leases: leases
                    .iter()
                    .map(|(name, token)| HeldLease {
                        name: name.clone(),
                        token: *token,
                        remaining,
                    })
                    .collect(),
            };
            let reply = match r.leases {
                Some(rows) => {
                    let leases = rows
                        .into_iter()
                        .map(|(name, t)| {
                            Ok((
                                LeaseName::new(name)
                                    .map_err(|e| failure::error("reading a lease name", e))?,
                                token(t)?,
                            ))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let reply = held(&leases);
                    self.known.lock().insert(
                        session.clone(),
                        KnownLeases {
                            version: r.version,
                            leases,
                            next: 0,
                            used: Instant::now(),
                            lease,
                        },
                    );
                    reply
                }
                None => {
                    let mut cache = self.known.lock();
                    match cache.get_mut(session) {
                        Some(k) if known.is_some() && k.version == r.version => {
                            k.used = Instant::now();
                            k.lease = lease;
                            held(&k.leases)
                        }
                        // "Unchanged" from a version this backend no longer keeps (a
                        // concurrent keep-alive replaced it): ask again for the full list.
                        _ if known.is_some() => {
                            ask = false;
                            continue;
                        }
                        _ => {
                            return Err(failure::error(
                                "keeping a session alive",
                                "the database answered \"unchanged\" to a keep-alive that knew no leases",
                            ))
                        }
                    }
                }
            };
            self.maybe_purge();
            return Ok(reply);
        }
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.known.lock().remove(session);
        self.driver
            .remove_session(session.as_str())
            .map_err(|e| self.err("closing a session", e))
    }

    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.acquire_valued(session, name, None).map(|(a, _)| a)
    }

    /// PostgreSQL: one statement takes a new term and sets its value (a re-acquire by the
    /// holder sets it with a second one). MySQL: the acquire, then `set_value`.
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        crate::types::check_value(value)?;
        if value.is_empty() {
            return self.acquire(session, name);
        }
        let (reply, set) = self.acquire_valued(session, name, Some(value))?;
        if let (Acquire::Acquired(term), false) = (&reply, set) {
            self.set_value(session, name, term.token, value)?;
        }
        Ok(reply)
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        let t = i64::try_from(token.get()).unwrap_or(i64::MAX);
        self.driver
            .release(session.as_str(), name.as_str(), t)
            .map_err(|e| self.err("releasing a lease", e))
    }

    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        let row = self
            .driver
            .owner(name.as_str())
            .map_err(|e| self.err("reading a lease owner", e))?;
        row.map(|(s, t, us, value)| {
            Ok(Owner {
                session: session_id(&s)?,
                token: token(t)?,
                remaining: remaining(us),
                value,
            })
        })
        .transpose()
    }

    fn supports_values(&self) -> bool {
        true
    }

    /// One statement changing the lease row alone (on MySQL a second read when it changed
    /// nothing: the same value again).
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        crate::types::check_value(value)?;
        let t = i64::try_from(token.get()).unwrap_or(i64::MAX);
        self.driver
            .set_value(session.as_str(), name.as_str(), t, value)
            .map_err(|e| self.err("setting a term value", e))
    }

    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        let live = self
            .driver
            .join(session.as_str(), group.as_str())
            .map_err(|e| self.err("joining a group", e))?;
        if live {
            Ok(())
        } else {
            Err(Self::expired(session))
        }
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.driver
            .leave(session.as_str(), group.as_str())
            .map_err(|e| self.err("leaving a group", e))
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<crate::spi::JobClaim> {
        self.claim_job_sql(session, name, at_most)
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        self.finish_job_sql(session, name, token, at_least)
    }

    fn supports_queues(&self) -> bool {
        true
    }

    /// The place (one statement on PostgreSQL, four on MySQL), then, first in line, the
    /// acquire and the removal of the place; behind others, a read of the owner.
    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        const OP: &str = "acquiring a lease in turn";
        options::check_lease(patience)?;
        let ms = i64::try_from(patience.as_millis()).unwrap_or(i64::MAX);
        let ahead = self
            .driver
            .queue_place(session.as_str(), name.as_str(), ms)
            .map_err(|e| self.err(OP, e))?
            .ok_or_else(|| Self::expired(session))?;
        let ahead = usize::try_from(ahead).unwrap_or(0);
        if ahead > 0 {
            let owner = self.owner(name)?;
            if owner.as_ref().is_none_or(|o| o.session != *session) {
                return Ok(Queued::Waiting { ahead, owner });
            }
        }
        match self.acquire(session, name)? {
            Acquire::Acquired(term) => {
                if let Err(e) = self.driver.queue_leave(session.as_str(), name.as_str()) {
                    // Skipped by the others once its patience runs out.
                    log::warn!(
                        "removing the place of {name} after taking it: {}",
                        self.err(OP, e).report()
                    );
                }
                Ok(Queued::Acquired(term))
            }
            Acquire::Held(owner) => Ok(Queued::Waiting {
                ahead: 0,
                owner: Some(owner),
            }),
        }
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.driver
            .queue_leave(session.as_str(), name.as_str())
            .map_err(|e| self.err("leaving a queue", e))
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.driver
            .queue_list(name.as_str())
            .map_err(|e| self.err("reading a queue", e))?
            .iter()
            .map(|s| session_id(s))
            .collect()
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        let rows = self
            .driver
            .members(group.as_str())
            .map_err(|e| self.err("listing group members", e))?;
        rows.into_iter()
            .map(|(s, m)| {
                Ok(Member {
                    session: session_id(&s)?,
                    metadata: Metadata::new(m)
                        .map_err(|e| failure::error("reading session metadata", e))?,
                })
            })
            .collect()
    }

    fn purge_expired(&self) -> Result<usize> {
        self.driver
            .purge(PURGE_LIMIT)
            .map_err(|e| self.err("purging expired sessions", e))
    }

    /// Three reads (sessions, held leases, memberships); on PostgreSQL in one read-only
    /// repeatable-read transaction, on MySQL one after another.
    fn list(&self) -> Result<Listing> {
        let raw = self
            .driver
            .list()
            .map_err(|e| self.err("listing sessions, leases and groups", e))?;
        let meta =
            |m: String| Metadata::new(m).map_err(|e| failure::error("reading session metadata", e));
        let mut out = Listing::default();
        for (id, us, m) in raw.sessions {
            out.sessions.push(SessionInfo {
                id: session_id(&id)?,
                remaining: remaining(us),
                metadata: meta(m)?,
            });
        }
        for (name, holder, t, us, value) in raw.leases {
            out.leases.push(LeaseInfo {
                name: LeaseName::new(name)
                    .map_err(|e| failure::error("reading a lease name", e))?,
                owner: Owner {
                    session: session_id(&holder)?,
                    token: token(t)?,
                    remaining: remaining(us),
                    value,
                },
            });
        }
        for (group, id, m) in raw.members {
            let member = Member {
                session: session_id(&id)?,
                metadata: meta(m)?,
            };
            match out.groups.last_mut() {
                Some(g) if g.name.as_str() == group => g.members.push(member),
                _ => out.groups.push(GroupInfo {
                    name: GroupName::new(group)
                        .map_err(|e| failure::error("reading a group name", e))?,
                    members: vec![member],
                }),
            }
        }
        Ok(out)
    }

    /// A prepared `SELECT 1` on a pooled connection: one round trip.
    fn ping(&self) -> Result<()> {
        self.driver
            .ping()
            .map_err(|e| self.err("pinging the database", e))
    }

    /// PostgreSQL: releases, new terms and membership changes through `LISTEN/NOTIFY` on one
    /// dedicated connection. MySQL/MariaDB: `None` (no equivalent; the engine polls).
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        self.driver.subscribe(sink)
    }
}

/// Builds the backend for a `postgres://`/`mysql://` URL (the [`crate::connect`] arm).
pub(crate) fn connect_url(url: &str) -> Result<Arc<dyn LeaseBackend>> {
    Ok(Arc::new(SqlBackend::builder(url).build()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_table_is_read_from_the_servers_message() {
        assert_eq!(
            missing_table("db error: ERROR: relation \"app_simba_lease\" does not exist")
                .as_deref(),
            Some("app_simba_lease")
        );
        assert_eq!(
            missing_table(
                "MySqlError { ERROR 1146 (42S02): Table 'test.app_simba_job' doesn't exist }"
            )
            .as_deref(),
            Some("app_simba_job")
        );
        for odd in ["", "no quotes", "relation \"", "Table '' doesn't exist"] {
            assert_eq!(missing_table(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn durations_and_options_are_validated() {
        let bad = Options {
            table_prefix: "x; drop table".into(),
            ..Options::default()
        };
        assert!(validate(&bad).is_err());
        assert!(validate(&Options::default()).is_ok());
        let huge = Options {
            query_timeout: Duration::MAX,
            ..Options::default()
        };
        assert!(validate(&huge).is_err());
    }

    #[test]
    fn remaining_is_rounded_down_to_whole_milliseconds() {
        let ms = Duration::from_millis;
        assert_eq!(
            remaining(9_999_500),
            ms(9_999),
            "0.5 ms left over is dropped"
        );
        assert_eq!(remaining(10_000_000), ms(10_000));
        assert_eq!(remaining(1_999), ms(1));
        assert_eq!(remaining(999), ms(0), "less than 1 ms is nothing");
        assert_eq!(remaining(0), ms(0));
        assert_eq!(remaining(-1), ms(0));
        assert_eq!(remaining(i64::MIN), ms(0));
        // Never more than the microseconds measured.
        for us in [1, 7, 999, 1_000, 1_001, 123_456_789] {
            assert!(remaining(us) <= Duration::from_micros(us as u64), "{us}");
        }
        // Leases are capped so that `expires_at * 1000` cannot overflow.
        assert_eq!(super::ms(Duration::MAX), MAX_LEASE_MS);
        assert_eq!(super::ms(Duration::from_secs(5)), 5_000);
    }

    #[test]
    fn script_gets_the_prefix() {
        let t = Tables::new("t1_");
        let stmts = t.script(include_str!("../../../sql/init-simba-mysql.sql"));
        assert_eq!(stmts.len(), 5);
        assert!(stmts[0].contains("t1_simba_session"));
        assert!(stmts[0].contains("t1_idx_session_expires"));
        assert!(stmts[3].contains("t1_simba_queue") && stmts[3].contains("t1_idx_queue_seq"));
        assert!(stmts[4].contains("t1_simba_job"));
        let pg = t.script(include_str!("../../../sql/init-simba-postgresql.sql"));
        assert_eq!(pg.len(), 9);
        assert!(pg[1].contains("t1_idx_session_expires on t1_simba_session"));
        assert!(pg[7].contains("t1_idx_queue_seq on t1_simba_queue"));
        assert!(pg[8].contains("t1_simba_job"));
    }

    #[test]
    fn unknown_url_options_are_named() {
        let e = SqlBackend::builder("postgres://u@127.0.0.1:1/db?pool=3")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("pool"), "{e}");
    }
}
