//! Which PostgreSQL and MySQL driver errors are authentication or TLS failures, for the
//! generic chain walk beside [`Error`]; every SQL error is built here. PostgreSQL names them
//! by SQLSTATE (`28P01`, `28000`); the `mysql` crate by server code, or in its own TLS and
//! codec variants, whose `source` chain stops at the top, so they are read here.

#[cfg(feature = "mysql")]
use crate::error::classify::classify;
use crate::error::classify::Failure;
#[cfg(feature = "mysql")]
use crate::error::TlsFailure;
use crate::error::{BoxError, Error};
use std::error::Error as StdError;

/// A SQL failure of `operation`, typed as TLS or authentication where its chain says so.
pub(crate) fn error(operation: &'static str, source: impl Into<BoxError>) -> Error {
    Error::classified(operation, source, own)
}

/// The failure a driver error itself names.
fn own(e: &(dyn StdError + 'static)) -> Option<Failure> {
    #[cfg(feature = "postgres")]
    if let Some(pg) = e.downcast_ref::<::postgres::Error>() {
        use ::postgres::error::SqlState;
        let code = pg.code()?;
        return (*code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
            .then_some(Failure::Authentication);
    }
    #[cfg(feature = "mysql")]
    if let Some(my) = e.downcast_ref::<::mysql::Error>() {
        return of_mysql(my);
    }
    let _ = e;
    None
}

/// What a `mysql` error means (its `source` chain ends at the top, so it is read here).
#[cfg(feature = "mysql")]
fn of_mysql(e: &::mysql::Error) -> Option<Failure> {
    match e {
        // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR, ER_MUST_CHANGE_PASSWORD
        // (-_LOGIN), ER_ACCOUNT_HAS_BEEN_LOCKED, and MySQL 8's ER_SECURE_TRANSPORT_REQUIRED
        // (a plaintext connection to a server with `require_secure_transport`; MariaDB
        // answers 1045 there).
        ::mysql::Error::MySqlError(m)
            if matches!(m.code, 1045 | 1698 | 1820 | 1862 | 3118 | 3159) =>
        {
            Some(Failure::Authentication)
        }
        ::mysql::Error::DriverError(::mysql::DriverError::TlsNotSupported) => {
            Some(Failure::Tls(TlsFailure::NotOffered))
        }
        #[cfg(feature = "tls")]
        ::mysql::Error::TlsError(t) => Some(match t {
            ::mysql::error::tls::TlsError::Tls(r) => {
                Failure::Tls(crate::error::classify::of_rustls(r))
            }
            _ => Failure::Tls(TlsFailure::Handshake),
        }),
        ::mysql::Error::IoError(io) => classify(io, own),
        ::mysql::Error::CodecError(codec) => classify(codec, own),
        _ => None,
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use super::*;

    #[test]
    fn refused_logins_are_authentication_failures() {
        let denied = ::mysql::Error::MySqlError(::mysql::MySqlError {
            state: "28000".into(),
            code: 1045,
            message: "Access denied".into(),
        });
        assert!(matches!(
            error("connecting", denied),
            Error::Authentication { .. }
        ));
        let other = ::mysql::Error::MySqlError(::mysql::MySqlError {
            state: "42S02".into(),
            code: 1146,
            message: "no such table".into(),
        });
        assert!(matches!(error("reading", other), Error::Backend { .. }));
    }
}
