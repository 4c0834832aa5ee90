//! A PostgreSQL connection as the pool holds it ([`PgConn`], with its prepared statements
//! and server pid), how it uses TLS ([`PgTls`]), and the driver's error classification and
//! value decoding. The `postgres` crate blocks on a private tokio runtime, which panics
//! inside another runtime: [`outside_runtime`] and `PgConn`'s `Drop` are why the backend
//! still works, and closes its connections, when called from async code.

use super::statements::Stmts;
use crate::backends::sql::driver::{self, DbError, DbResult, Kind};
use crate::backends::sql::failure;
use crate::backends::sql::pool::{Pool, PoolConn};
use crate::backends::sql::tls::{SqlTls, SslMode};
use crate::error::Result;
use ::postgres::config::SslMode as PgSslMode;
use ::postgres::error::SqlState;
use ::postgres::types::FromSql;
use ::postgres::{Client, Config, NoTls, Row};
use std::time::Duration;

/// How this backend's connections (the pool's and the listener's) use TLS: the URL's
/// `sslmode`, `ca`, `cert` and `key` (see `backends::sql::tls`).
#[derive(Clone)]
pub(super) struct PgTls {
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
                _ => Some(crate::backends::sql::tls::rustls_config::client_config(
                    tls,
                )?),
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
            return config.connect(crate::backends::sql::tls::pg::MakeRustls(c.clone()));
        }
        config.connect(NoTls)
    }
}

pub(crate) struct PgConn {
    /// `Some` until the connection is dropped (see `Drop`).
    pub(super) client: Option<Client>,
    /// Prepared on first use (the tables may not exist when the connection opens).
    pub(super) stmts: Option<Stmts>,
    /// The read-write lock statements, prepared on the first read-write call.
    pub(super) rw: Option<super::rw::RwStmts>,
    pub(super) pid: u32,
}

impl PgConn {
    pub(super) fn client(&mut self) -> DbResult<&mut Client> {
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
pub(super) fn outside_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T> {
    if !in_tokio_runtime() {
        return Ok(f());
    }
    std::thread::scope(|scope| {
        let call = std::thread::Builder::new()
            .name("simba-pg-call".into())
            .spawn_scoped(scope, f)
            .map_err(|e| {
                failure::error(
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

/// [`driver::with_conn`] off any tokio runtime (see [`outside_runtime`]).
pub(super) fn with_conn<T: Send>(
    pool: &Pool<PgConn>,
    timeout: Duration,
    f: impl FnMut(&mut PgConn) -> DbResult<T> + Send,
) -> DbResult<T> {
    outside_runtime(|| driver::with_conn(pool, timeout, f))
        .map_err(|e| DbError::new(Kind::Other, e))?
}

pub(super) fn classify(e: ::postgres::Error) -> DbError {
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
pub(super) fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> DbResult<T> {
    row.try_get(i).map_err(|e| DbError::new(Kind::Other, e))
}

/// A count from the database as a `usize`; a negative one is an error.
pub(super) fn count(n: i64) -> DbResult<usize> {
    usize::try_from(n).map_err(|_| DbError::new(Kind::Other, format!("count {n} from PostgreSQL")))
}

/// The first column of the first row of `sql`, over the simple query protocol (no prepared
/// statement, which a transaction-mode pooler may lose between transactions).
pub(super) fn simple_value(client: &mut Client, sql: &str) -> DbResult<Option<String>> {
    let rows = client.simple_query(sql).map_err(classify)?;
    Ok(rows.iter().find_map(|m| match m {
        ::postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    }))
}

/// `pg_backend_pid()` of the connection, over the simple query protocol.
pub(super) fn pid(client: &mut Client) -> DbResult<u64> {
    simple_value(client, "SELECT pg_backend_pid()")?
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| DbError::new(Kind::Other, "pg_backend_pid() gave no number"))
}
