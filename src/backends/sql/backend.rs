//! [`SqlBackend`] and its [`LeaseBackend`] impl: one type for both dialects, turning the
//! [`Driver`]'s rows into the SPI's types (remaining times rounded down, tokens and ids
//! checked), keeping per session the lease list its keep-alives reuse, retrying a raced
//! acquire, and starting the automatic purge. The dialects differ only behind [`Driver`].

use super::builder::Options;
use super::driver::{missing_table, AcqRow, DbError, Driver, Kind, Known, LEASE};
use super::known::KnownLeases;
use super::{failure, Dialect, PURGE_LIMIT};
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::{
    Acquire, GroupInfo, HeldLease, HeldRw, KeepAlive, LeaseBackend, LeaseInfo, Listing, NotifySink,
    Queued, RwAcquire, RwMode, RwState, SessionGrant, SessionInfo, SessionSpec, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
///   [`SqlBackendBuilder`](super::SqlBackendBuilder)); the default is plaintext.
/// * PostgreSQL pushes releases, new terms and membership changes (`pg_notify` in the
///   statement that makes the change, one channel per table prefix) to one dedicated
///   listening connection per backend, opened by the first [`LeaseBackend::subscribe`]
///   (see [`SqlBackend::listener_name`]); a failed connection is reported as
///   [`Notification::Resync`](crate::spi::Notification::Resync) and reopened with backoff.
///   MySQL/MariaDB have no equivalent: `subscribe` returns `None` and the engine polls.
pub struct SqlBackend {
    pub(super) dialect: Dialect,
    pub(super) driver: Arc<dyn Driver>,
    pub(super) options: Options,
    last_purge: Mutex<Instant>,
    purging: Arc<AtomicBool>,
    /// Per session, the version of its holdings the last listing keep-alive answered, and
    /// its leases and read-write terms (a keep-alive answering "same version" reuses them).
    known: Mutex<HashMap<SessionId, KnownLeases>>,
    /// The sessions that asked for a read-write lock through this backend: their end
    /// deletes their read-write rows (see [`SqlBackend::end_rw_session`]).
    pub(super) rw_sessions: Mutex<HashSet<SessionId>>,
}

impl std::fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackend")
            .field("dialect", &self.dialect)
            .field("options", &self.options)
            .finish()
    }
}

/// The longest lease stored, about 139 years: `expires_at × 1000` (µs) must fit in a `BIGINT`.
const MAX_LEASE_MS: i64 = 1 << 42;

pub(super) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(MAX_LEASE_MS, |m| m.min(MAX_LEASE_MS))
}

/// Whole milliseconds rounded UP (a lock-delay is never stored shorter than asked).
fn ms_up(d: Duration) -> i64 {
    i64::try_from(d.as_nanos().div_ceil(1_000_000)).map_or(MAX_LEASE_MS, |m| m.min(MAX_LEASE_MS))
}

/// A remaining time measured by the database in microseconds, rounded DOWN to whole
/// milliseconds (never up, so `sent_at + remaining` is never later than the database's
/// expiry); not positive means none left.
pub(super) fn remaining(us: i64) -> Duration {
    Duration::from_millis(u64::try_from(us.div_euclid(1000)).unwrap_or(0))
}

pub(super) fn token(t: i64) -> Result<Token> {
    Token::new(u64::try_from(t).unwrap_or(0)).map_err(|_| {
        failure::error(
            "reading a token",
            format!("token {t} in the table is not > 0"),
        )
    })
}

pub(super) fn session_id(s: &str) -> Result<SessionId> {
    SessionId::parse(s.trim_end()).map_err(|e| failure::error("reading a session id", e))
}

impl SqlBackend {
    /// The backend over `driver`, with nothing known of any session yet.
    pub(super) fn new(dialect: Dialect, driver: Arc<dyn Driver>, options: Options) -> Self {
        SqlBackend {
            dialect,
            driver,
            options,
            last_purge: Mutex::new(Instant::now()),
            purging: Arc::new(AtomicBool::new(false)),
            known: Mutex::new(HashMap::new()),
            rw_sessions: Mutex::new(HashSet::new()),
        }
    }

    /// An acquire (with `value`, one that gives a new term the value where the dialect can),
    /// run again while it raced a concurrent change of the row; the reply and whether the
    /// value was set.
    pub(super) fn acquire_valued(
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

    pub(super) fn err(&self, operation: &'static str, e: DbError) -> Error {
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

    pub(super) fn expired(session: &SessionId) -> Error {
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

    fn supports_lock_delay(&self) -> bool {
        true
    }

    /// One statement (PostgreSQL) or two (MySQL), as without a delay: the delay is a column
    /// of the session's row, which acquire, owner and purge read with the expiry.
    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
        let SessionSpec {
            lease,
            metadata,
            lock_delay,
        } = *spec;
        crate::backends::options::check_lease(lease)?;
        crate::types::limits::check_lock_delay(lock_delay)?;
        if self.dialect == Dialect::Postgres && metadata.as_str().contains('\0') {
            return Err(Error::config(
                "metadata",
                "PostgreSQL text cannot hold NUL characters",
            ));
        }
        let id = SessionId::random();
        let us = self
            .driver
            .open_session(id.as_str(), ms(lease), ms_up(lock_delay), metadata.as_str())
            .map_err(|e| self.err("opening a session", e))?;
        self.maybe_purge();
        Ok(SessionGrant {
            id,
            remaining: remaining(us),
        })
    }

    /// One statement (PostgreSQL) or two (MySQL) whatever the session holds: its leases and
    /// read-write terms are read only when their version (bumped by every acquire of a new
    /// term, release and take-over, and by every read-write grant and release) differs from
    /// the list this backend keeps for the session, or when one of a sample of two listed
    /// entries is no longer held (a row changed by hand).
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
                    known.as_ref().map(|(version, sample, rw)| Known {
                        version: *version,
                        sample,
                        rw: *rw,
                    }),
                )
                .map_err(|e| self.err("keeping a session alive", e))?;
            let Some(r) = reply else {
                self.known.lock().remove(session);
                self.driver
                    .remove_session(session.as_str())
                    .map_err(|e| self.err("removing an expired session", e))?;
                self.end_rw_session(session);
                return Err(Self::expired(session));
            };
            let remaining = remaining(r.remaining_us);
            let held = |k: &KnownLeases| KeepAlive {
                remaining,
                leases: k
                    .leases
                    .iter()
                    .map(|(name, token)| HeldLease {
                        name: name.clone(),
                        token: *token,
                        remaining,
                    })
                    .collect(),
                rw: k.rw.clone(),
            };
            let reply = match r.held {
                Some(rows) => {
                    let mut k = KnownLeases {
                        version: r.version,
                        leases: Vec::new(),
                        rw: Vec::new(),
                        rw_listed: r.rw,
                        next: 0,
                        used: Instant::now(),
                        lease,
                    };
                    for (name, t, side) in rows {
                        let name = LeaseName::new(name)
                            .map_err(|e| failure::error("reading a lease name", e))?;
                        let t = token(t)?;
                        match side {
                            LEASE => k.leases.push((name, t)),
                            0 | 1 => k.rw.push(HeldRw {
                                name,
                                mode: if side == 1 {
                                    RwMode::Write
                                } else {
                                    RwMode::Read
                                },
                                token: t,
                            }),
                            other => {
                                return Err(failure::error(
                                    "keeping a session alive",
                                    format!("a held term of side {other}"),
                                ))
                            }
                        }
                    }
                    let reply = held(&k);
                    self.known.lock().insert(session.clone(), k);
                    reply
                }
                None => {
                    let mut cache = self.known.lock();
                    match cache.get_mut(session) {
                        Some(k) if known.is_some() && k.version == r.version && k.rw_listed == r.rw => {
                            k.used = Instant::now();
                            k.lease = lease;
                            held(k)
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
            .map_err(|e| self.err("closing a session", e))?;
        self.end_rw_session(session);
        Ok(())
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

    fn supports_rw_locks(&self) -> bool {
        true
    }

    /// PostgreSQL: one statement. MySQL/MariaDB: a transaction of four to six statements
    /// (two more the first time a name is used; see the design notes). A grant bumps the
    /// version of the session's holdings in it, so the next keep-alive lists the term.
    fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        self.acquire_rw_sql(session, name, mode, patience)
    }

    /// One statement, which bumps the version of the session's holdings (the next
    /// keep-alive no longer lists the term).
    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        self.release_rw_sql(session, name, mode, token)
    }

    /// One statement.
    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.leave_rw_sql(session, name)
    }

    /// One statement.
    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        self.rw_state_sql(name)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
