//! What the two dialects share: the [`Driver`] trait (one method per backend operation,
//! implemented by `postgres::PgDriver` and `mysql::MyDriver`), the rows its methods answer
//! with, what it reports of the server, and the [`DbError`] classification that
//! [`with_conn`]'s retry loop reads. [`SqlBackend`](super::SqlBackend) turns these into the
//! SPI's types, so a dialect only speaks SQL.

use super::jobs;
use super::pool::{Pool, PoolConn};
use super::rw::{RwRow, RwStateRow};
use crate::backends::options;
use crate::error::{BoxError, Error, Result};
use crate::spi::{NotifySink, Subscription};
use std::time::{Duration, Instant};

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

/// How many entries of its known list (leases, then read-write terms) a keep-alive checks
/// when their version is unchanged (a lease or term row changed by hand, which no statement
/// of the backend counts, is found within ⌈listed / SAMPLE⌉ keep-alives).
pub(crate) const SAMPLE: usize = 2;

/// The `side` of a [`Holding`] that is a lease (a read-write term's is the `writer` column
/// of its row: 0 read, 1 write).
pub(crate) const LEASE: i64 = -1;

/// One thing a session holds, as the dialects read and check it: `(name, token, side)`,
/// `side` [`LEASE`] for a lease, 0 for a read term, 1 for a write term.
pub(crate) type Holding = (String, i64, i64);

/// What the backend knows of a session's holdings, passed to a keep-alive: the version of
/// the list it keeps, up to [`SAMPLE`] entries of that list to check, and whether that list
/// came from a keep-alive that read the read-write terms (`rw`; not where their tables do
/// not exist). A dialect that reads them now while the list did not (or the reverse) lists
/// again, whatever the version.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Known<'a> {
    pub(crate) version: i64,
    pub(crate) sample: &'a [Holding],
    pub(crate) rw: bool,
}

impl<'a> Known<'a> {
    /// The version and sample to pass to a keep-alive that reads the read-write terms or
    /// not (`rw`): none when the list was read the other way.
    pub(crate) fn for_statement(known: Option<Self>, rw: bool) -> (Option<i64>, &'a [Holding]) {
        match known {
            Some(k) if k.rw == rw => (Some(k.version), k.sample),
            _ => (None, &[]),
        }
    }
}

/// A renewed session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// The remaining µs.
    pub(crate) remaining_us: i64,
    /// The version of the session's holdings the list belongs to (when not listed: the
    /// current one, which the caller passed).
    pub(crate) version: i64,
    /// Whether the keep-alive read the read-write terms (their tables exist).
    pub(crate) rw: bool,
    /// The leases and read-write terms held, when the version differs from the one passed
    /// (or none was passed) or the sample was not all held; `None`: unchanged.
    pub(crate) held: Option<Vec<Holding>>,
}

/// Outcome of one acquire statement.
#[derive(Debug)]
pub(crate) enum AcqRow {
    /// The acquirer's session is not live.
    Expired,
    /// The acquirer holds the lease (a new term or the same).
    Acquired { token: i64, remaining_us: i64 },
    /// Another live session holds it, or an expired one's term is in its lock-delay.
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

/// What [`SqlBackend::probe_connections`](super::SqlBackend::probe_connections) saw:
/// server-side connection ids (PostgreSQL backend pids, MySQL connection ids) of two client
/// connections A and B of its own.
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
    /// Inserts the session with its lock-delay; returns its remaining µs as the database
    /// measured it.
    fn open_session(
        &self,
        id: &str,
        lease_ms: i64,
        lock_delay_ms: i64,
        metadata: &str,
    ) -> DbResult<i64>;
    /// Renews the session; lists its leases and read-write terms only when their version
    /// differs from `known`'s (always without `known`) or an entry of its sample is no
    /// longer held. `None` when the session is not live. Where the tables of read-write
    /// locks do not exist (an earlier schema), the leases alone (`Renewed::rw` false).
    fn keep_alive(
        &self,
        id: &str,
        lease_ms: i64,
        known: Option<Known<'_>>,
    ) -> DbResult<Option<Renewed>>;
    /// Deletes its memberships; deletes the session and frees its leases, unless it expired
    /// and its lock-delay has not run out (its row and leases then stay until the purge
    /// after the delay).
    fn remove_session(&self, id: &str) -> DbResult<()>;
    fn acquire(&self, id: &str, name: &str) -> DbResult<AcqRow>;
    /// [`Driver::acquire`] that gives a new term `value` in the same statement where the
    /// dialect can; whether it did (the default cannot).
    fn acquire_with_value(&self, id: &str, name: &str, value: &str) -> DbResult<(AcqRow, bool)> {
        let _ = value;
        Ok((self.acquire(id, name)?, false))
    }
    fn release(&self, id: &str, name: &str, token: i64) -> DbResult<bool>;
    /// The live holder, or the expired one while its term is in its lock-delay: session,
    /// token, remaining µs (of the session or of the delay), the term's value (empty for
    /// none).
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
    /// Read-write locks (see [`super::rw`]): one attempt of `id` to take `name` (`write`:
    /// the write side) with a waiting writer's `patience_ms`. A grant bumps the version of
    /// `id`'s holdings with it.
    fn rw_acquire(&self, id: &str, name: &str, write: bool, patience_ms: i64) -> DbResult<RwRow>;
    /// Ends `id`'s term of `name` of that side with `token`, bumping the version of `id`'s
    /// holdings with it; whether it held it.
    fn rw_release(&self, id: &str, name: &str, write: bool, token: i64) -> DbResult<bool>;
    /// Deletes `id`'s place among `name`'s waiting writers; whether it was live.
    fn rw_leave(&self, id: &str, name: &str) -> DbResult<bool>;
    /// The token counter, the live terms, the live waiting writers and the terms in their
    /// lock-delay of `name`.
    fn rw_state(&self, name: &str) -> DbResult<Vec<RwStateRow>>;
    /// Deletes the places of the session `id` (which ended) and its terms not in their
    /// lock-delay, waking their names' waiters.
    fn rw_end_session(&self, id: &str) -> DbResult<()>;
    /// Removes expired sessions (at most `limit`), and the read-write terms and places of
    /// every session that is no longer live (where the tables exist).
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
    /// See [`SqlBackend::probe_connections`](super::SqlBackend::probe_connections).
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

/// The kind of database server behind a [`SqlBackend`](super::SqlBackend).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Flavor {
    /// Oracle MySQL (8.0 or later).
    MySql,
    /// MariaDB (10.6 or later).
    MariaDb,
}

/// The database server a [`SqlBackend`](super::SqlBackend) connected to, as detected from
/// `SELECT VERSION(), @@version_comment` on every new connection (MySQL dialect).
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
}
