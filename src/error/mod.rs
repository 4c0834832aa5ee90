//! The one error type of the crate.

use crate::types::{LeaseName, SessionId, Token};

pub(crate) mod classify;
use std::time::Duration;

/// A boxed driver error kept as the source of [`Error::Backend`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure simba-lease reports.
///
/// Bad input is rejected before any I/O with a variant that names the offending value.
///
/// ```
/// use simba_lease::{Error, LeaseName};
/// let err = LeaseName::new("no spaces").unwrap_err();
/// assert!(matches!(err, Error::InvalidName { .. }));
/// assert!(err.to_string().contains("no spaces"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lease or group name broke the naming rule (1–128 characters of `[A-Za-z0-9._:-]`,
    /// not `.` or `..`).
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Session metadata longer than 1024 bytes.
    #[error("invalid metadata ({len} bytes): at most {max} bytes of UTF-8 are allowed")]
    InvalidMetadata {
        /// Length of the rejected metadata in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A term value longer than 1024 bytes (see [`Owner::value`](crate::Owner::value)).
    #[error("invalid term value ({len} bytes): at most {max} bytes of UTF-8 are allowed")]
    InvalidValue {
        /// Length of the rejected value in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A fencing token of zero (tokens start at 1).
    #[error("invalid token {value}: tokens are greater than zero")]
    InvalidToken {
        /// The rejected value.
        value: u64,
    },
    /// A session id that is not 16 or 32 lowercase hex digits.
    #[error("invalid session id {id:?}: expected 16 or 32 lowercase hex digits")]
    InvalidSessionId {
        /// The rejected id.
        id: String,
    },
    /// A configuration value out of range, or a bad URL option on any backend (unknown,
    /// unparsable or out of bounds: see [`backends::options`](crate::backends::options));
    /// names the setting or option and quotes at most 64 characters of the value.
    #[error("invalid configuration `{setting}`: {reason}")]
    InvalidConfig {
        /// The setting (snake_case, as in [`Config`](crate::Config) and URL options).
        setting: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A backend URL that cannot be used (scheme, hosts, percent-encoding, path); a bad
    /// `?option=value` is [`Error::InvalidConfig`] instead.
    #[error("invalid backend URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL with its password masked (`user:***@host`); neither field ever contains
        /// the password.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL names a backend whose Cargo feature is not enabled.
    #[error("the `{scheme}://` backend needs the Cargo feature `{feature}` of simba-lease")]
    FeatureDisabled {
        /// The URL scheme.
        scheme: String,
        /// The Cargo feature to enable.
        feature: &'static str,
    },
    /// The session expired (or was lost locally at its deadline); it is never revived.
    #[error("session {session} expired")]
    SessionExpired {
        /// The expired session's id.
        session: SessionId,
    },
    /// A term is no longer held (lost, resigned or released); its token must not be used.
    #[error("lease {name} (token {token}) is no longer held")]
    LeaseLost {
        /// The lease name.
        name: LeaseName,
        /// The lost term's token.
        token: Token,
    },
    /// This candidate does not lead the election now.
    #[error("not the leader of {name}")]
    NotLeader {
        /// The election.
        name: LeaseName,
    },
    /// The election handle resigned: it no longer campaigns (until
    /// [`Election::campaign`](crate::Election::campaign)).
    #[error("not a candidate in {name} (resigned)")]
    NotCandidate {
        /// The election.
        name: LeaseName,
    },
    /// The lease is held by this session through another handle (locks are not reentrant).
    #[error("lease {name} is already in use by this session")]
    AlreadyHeld {
        /// The lease name.
        name: LeaseName,
    },
    /// An operation did not finish within its time limit.
    #[error("timed out after {after:?} while {operation}{}", maybe_cause(.source))]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The limit that ran out.
        after: Duration,
        /// The driver's error, when the driver reported the timeout.
        #[source]
        source: Option<BoxError>,
    },
    /// The session or handle was closed.
    #[error("closed")]
    Closed,
    /// A wait was ended through its [`Cancel`](crate::Cancel) token.
    #[error("cancelled while {operation}")]
    Cancelled {
        /// What was being waited for.
        operation: &'static str,
    },
    /// The database server is of a version the backend does not support (e.g. MySQL before
    /// 8.0, MariaDB before 10.6); refused when the backend connects.
    #[error("unsupported database server {server:?}: simba-lease needs {required}")]
    UnsupportedServer {
        /// The server's version string as it reported it.
        server: String,
        /// The versions supported.
        required: &'static str,
    },
    /// The backend cannot do this operation (e.g. fair locks on a backend without waiting
    /// queues, or a [`LeaseBackend`](crate::spi::LeaseBackend) without
    /// [`list`](crate::spi::LeaseBackend::list)); refused before any wait, and trying again
    /// will not help.
    #[error("the {backend} backend does not support {operation}")]
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// The backend's [`kind`](crate::spi::LeaseBackend::kind).
        backend: &'static str,
    },
    /// TLS with the server could not be set up: its certificate was refused, it refused
    /// ours, or it does not speak TLS. Nothing was sent in plaintext instead (only
    /// `sslmode=prefer` falls back to plaintext, and only when the server offers no TLS).
    /// [`failure`](TlsFailure) says why; the driver's error is the source.
    ///
    /// Not [transient](Error::is_transient): the same call fails the same way until the
    /// server's certificate or the client's TLS options change.
    #[error("TLS failed while {operation}: {failure}{}", cause(.source))]
    Tls {
        /// What was being done.
        operation: &'static str,
        /// Why.
        failure: TlsFailure,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The server refused the credentials (user name and password, ACL user, client
    /// certificate where the server checks it while authenticating), or they do not grant
    /// access (a ZooKeeper `NoAuth`: an ACL refusing this identity, which is what a wrong
    /// digest password amounts to). Neither this error nor its source holds the password.
    ///
    /// Not [transient](Error::is_transient): the same call fails the same way until the
    /// credentials change.
    #[error("authentication failed or access refused while {operation}{}", cause(.source))]
    Authentication {
        /// What was being done.
        operation: &'static str,
        /// The server's or driver's error.
        #[source]
        source: BoxError,
    },
    /// A table of the SQL schema does not exist (PostgreSQL SQLSTATE 42P01, MySQL/MariaDB
    /// error 1146): the schema was never installed in this database, or under another
    /// table prefix. Install it with `simba schema install URL` (the backend's URL, with its
    /// `table_prefix`), [`SqlBackend::install_schema`](crate::backends::SqlBackend::install_schema)
    /// or the script `sql/init-simba-postgresql.sql` / `sql/init-simba-mysql.sql`; the
    /// server's error is the source.
    ///
    /// Not [transient](Error::is_transient): the same call fails the same way until the
    /// schema is installed.
    #[error(
        "the table `{table}` does not exist (while {operation}): the schema is not installed \
         in this database; fix: `simba schema install URL` with the backend's URL, \
         `SqlBackend::install_schema()`, or sql/init-simba-*.sql"
    )]
    MissingSchema {
        /// The missing table, with its prefix, as the server named it.
        table: String,
        /// What was being done.
        operation: &'static str,
        /// The server's error.
        #[source]
        source: BoxError,
    },
    /// A fenced write was refused: its token is below the newest token already recorded
    /// for that resource, so a newer term of the lock has written there and this writer's
    /// term is over (see [`fence`](crate::fence)). Nothing was written (a
    /// [`FileFence`](crate::fence::FileFence) write refused after its rename was the newest
    /// version for a moment: see there). Stop writing with
    /// this token (its guard is stale); acquire the lock again for a new token if the work
    /// must go on.
    ///
    /// Not [transient](Error::is_transient): the same write with the same token is refused
    /// again.
    ///
    /// ```
    /// use simba_lease::{fence, Error, Token};
    /// let err = fence::check("ledger", Some(Token::new(8)?), Token::new(7)?).unwrap_err();
    /// assert!(matches!(err, Error::StaleToken { .. }));
    /// assert!(err.to_string().contains("token 7") && err.to_string().contains("token 8"));
    /// # Ok::<(), Error>(())
    /// ```
    #[error(
        "stale fencing token: the write to {key:?} with token {token} was refused, token \
         {newest} of a newer term is already recorded there; this holder's term is over: stop \
         writing, and acquire the lock again for a new token"
    )]
    StaleToken {
        /// The fenced resource's key.
        key: String,
        /// The writer's token (its guard's), refused.
        token: Token,
        /// The newest token recorded for the resource, greater than `token`.
        newest: Token,
    },
    /// The backend failed; the driver's error is the source.
    #[error("backend error while {operation}{}", cause(.source))]
    Backend {
        /// What was being done.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
}

/// Why TLS could not be set up (see [`Error::Tls`]).
///
/// ```
/// use simba_lease::{Error, TlsFailure};
/// # fn connect() -> Result<(), Error> { Ok(()) }
/// match connect() {
///     Err(Error::Tls { failure: TlsFailure::UnknownIssuer, .. }) => {
///         eprintln!("give the server's CA with ?ca=/path/to/ca.pem");
///     }
///     Err(Error::Authentication { .. }) => eprintln!("check the user and password"),
///     _ => {}
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate chain does not lead to a trusted CA (`ca`, or the platform's
    /// roots without it).
    UnknownIssuer,
    /// The server's certificate has expired (or is not valid yet).
    Expired,
    /// The server's certificate is not valid for the host name (or IP address) of the URL.
    NameMismatch,
    /// The server's certificate was refused for another reason (revoked, bad signature,
    /// wrong purpose, unreadable).
    BadCertificate,
    /// The server requires a client certificate and none was given (`cert` and `key`), or
    /// it refused the one given. (PostgreSQL and MySQL check client certificates while
    /// authenticating: they refuse with [`Error::Authentication`] instead.)
    ClientCertificate,
    /// The server does not speak TLS on this port, or does not offer it.
    NotOffered,
    /// The handshake failed otherwise (no common protocol version or cipher suite, …).
    Handshake,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFailure::UnknownIssuer => "the server's certificate is not signed by a trusted CA",
            TlsFailure::Expired => "the server's certificate has expired or is not valid yet",
            TlsFailure::NameMismatch => "the server's certificate is not valid for this host name",
            TlsFailure::BadCertificate => "the server's certificate was refused",
            TlsFailure::ClientCertificate => {
                "the server requires a client certificate, or refused the one given"
            }
            TlsFailure::NotOffered => "the server does not speak TLS here",
            TlsFailure::Handshake => "the TLS handshake failed",
        })
    }
}

impl Error {
    /// Wraps a driver error as [`Error::Backend`], or as [`Error::Tls`] or
    /// [`Error::Authentication`] when its chain shows a TLS or authentication failure.
    ///
    /// ```
    /// use simba_lease::Error;
    /// let e = Error::backend("connecting", "connection refused");
    /// assert!(matches!(e, Error::Backend { .. }));
    /// let e = Error::backend("connecting", "password missing");
    /// assert!(matches!(e, Error::Authentication { .. }));
    /// ```
    pub fn backend(operation: &'static str, source: impl Into<BoxError>) -> Self {
        Error::classified(operation, source, classify::no_own)
    }

    /// As [`Error::backend`], with a backend's own test of its driver's errors (each
    /// backend's `failure` module passes its own).
    pub(crate) fn classified(
        operation: &'static str,
        source: impl Into<BoxError>,
        own: classify::Own,
    ) -> Self {
        use classify::{classify, Failure};
        let source = source.into();
        match classify(&*source, own) {
            Some(Failure::Tls(failure)) => Error::Tls {
                operation,
                failure,
                source,
            },
            Some(Failure::Authentication) => Error::Authentication { operation, source },
            None => Error::Backend { operation, source },
        }
    }

    /// Builds an [`Error::InvalidConfig`].
    pub fn config(setting: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            setting: setting.into(),
            reason: reason.into(),
        }
    }

    /// Displays this error with every source behind it (`a: b: c`), for logs. Its
    /// `Display` shows only the innermost source (the driver's own words, on one line).
    ///
    /// ```
    /// use simba_lease::Error;
    /// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    /// let e = Error::backend("acquiring", io);
    /// assert_eq!(e.to_string(), "backend error while acquiring: connection refused");
    /// assert_eq!(e.report().to_string(), "backend error while acquiring: connection refused");
    /// ```
    ///
    /// A source that displays as the one before it (a driver's wrapper showing the error it
    /// wraps) is written once.
    pub fn report(&self) -> Report<'_> {
        Report(self)
    }

    /// Whether this error means the session is gone for good.
    pub fn is_session_expired(&self) -> bool {
        matches!(self, Error::SessionExpired { .. })
    }

    /// Whether an operation ran out of time (the backend may or may not have applied it).
    ///
    /// ```
    /// use simba_lease::Error;
    /// use std::time::Duration;
    /// let e = Error::Timeout { operation: "acquiring", after: Duration::from_secs(5), source: None };
    /// assert!(e.is_timeout() && e.is_transient());
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// Whether trying the same call again later may succeed: a timeout or a backend
    /// failure (connection, server). Bad input, a lost term, an expired or closed session,
    /// configuration errors, TLS and authentication failures are not transient.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::Backend { .. })
    }
}

/// An error with its sources, see [`Error::report`].
#[derive(Debug)]
pub struct Report<'a>(&'a Error);

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.0.to_string();
        let mut source = std::error::Error::source(self.0);
        // The `Display` ends with the innermost source: the chain below says it in its place.
        let head = match source.map(|s| Cause(Some(innermost(s))).to_string()) {
            Some(tail) if !tail.is_empty() => shown.strip_suffix(&tail).unwrap_or(&shown),
            _ => &shown,
        };
        f.write_str(head)?;
        // Drivers that wrap an error often display it as their own: said once.
        let mut last = String::new();
        while let Some(s) = source {
            let text = s.to_string();
            if text != last {
                write!(f, ": {text}")?;
                last = text;
            }
            source = s.source();
        }
        Ok(())
    }
}

/// The last error of the chain that starts at `e`.
fn innermost<'a>(
    mut e: &'a (dyn std::error::Error + 'static),
) -> &'a (dyn std::error::Error + 'static) {
    while let Some(s) = e.source() {
        e = s;
    }
    e
}

/// `: ` and the innermost error of a source's chain on one line (its whitespace runs, line
/// breaks included, made single spaces); nothing without a source or when it says nothing.
struct Cause<'a>(Option<&'a (dyn std::error::Error + 'static)>);

fn cause(source: &BoxError) -> Cause<'_> {
    Cause(Some(&**source))
}

fn maybe_cause(source: &Option<BoxError>) -> Cause<'_> {
    Cause(
        source
            .as_ref()
            .map(|s| &**s as &(dyn std::error::Error + 'static)),
    )
}

impl std::fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(source) = self.0 else {
            return Ok(());
        };
        let text = innermost(source).to_string();
        let mut words = text.split_whitespace();
        if let Some(first) = words.next() {
            write!(f, ": {first}")?;
            for w in words {
                write!(f, " {w}")?;
            }
        }
        Ok(())
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error for a term that is no longer held.
pub(crate) fn lease_lost(term: &crate::types::Term) -> Error {
    Error::LeaseLost {
        name: term.name.clone(),
        token: term.token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver error that displays as the error it wraps.
    #[derive(Debug)]
    struct Wrapper(std::io::Error);

    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }

    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// A driver error wrapping another, each with words of its own.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error connecting to server")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn display_shows_the_innermost_cause_on_one_line_and_report_the_chain() {
        let io = std::io::Error::other("Connection refused\n  (os error 111)");
        let e = Error::backend("opening a session", Outer(io));
        assert_eq!(
            e.to_string(),
            "backend error while opening a session: Connection refused (os error 111)"
        );
        assert_eq!(
            e.report().to_string(),
            "backend error while opening a session: error connecting to server: \
             Connection refused\n  (os error 111)"
        );
        let t = Error::Timeout {
            operation: "acquiring",
            after: Duration::from_secs(5),
            source: None,
        };
        assert_eq!(t.to_string(), "timed out after 5s while acquiring");
        assert_eq!(t.report().to_string(), t.to_string());
        let m = Error::MissingSchema {
            table: "app_simba_session".into(),
            operation: "opening a session",
            source: "relation \"app_simba_session\" does not exist".into(),
        };
        let shown = m.to_string();
        assert!(shown.contains("app_simba_session") && shown.contains("simba schema install"));
        assert!(!m.is_transient());
        assert!(m.report().to_string().ends_with("does not exist"));
    }

    #[test]
    fn a_source_shown_by_its_wrapper_is_reported_once() {
        let io = std::io::Error::other("connection reset");
        let e = Error::backend("reading", Wrapper(io));
        assert_eq!(
            e.report().to_string(),
            "backend error while reading: connection reset"
        );
    }
}
