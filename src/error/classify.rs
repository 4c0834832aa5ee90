//! Which driver failures are TLS or authentication failures: [`Error::backend`] asks
//! [`classify`] so that every backend, on every path (connect, and every pooled connection
//! opened later), reports them as [`Error::Tls`] or [`Error::Authentication`]. Two causes
//! are known by their whole text only (tokio-postgres builds them from strings), so any
//! error whose message is exactly `server does not support TLS` or `password missing` is
//! typed as such, also one a third-party backend passes to [`Error::backend`].
//!
//! The drivers keep the cause in different places: rustls's error inside an `io::Error`
//! (PostgreSQL, Redis, ZooKeeper's diagnosing handshake), inside `mysql::Error::TlsError`
//! (whose `source` chain stops at the top), or as a server error code (`28P01`, MySQL 1045,
//! Redis `WRONGPASS`).

use crate::error::TlsFailure;
use std::error::Error as StdError;

/// What [`classify`] found in an error chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// TLS could not be set up.
    Tls(TlsFailure),
    /// The server refused the credentials.
    Authentication,
}

/// The deepest chain walked (a cyclic or absurd chain must not hang a caller).
const MAX_DEPTH: usize = 16;

/// The TLS or authentication failure anywhere in `e`'s chain, if any.
pub(crate) fn classify(e: &(dyn StdError + 'static)) -> Option<Failure> {
    let mut next = Some(e);
    for _ in 0..MAX_DEPTH {
        let e = next?;
        if let Some(f) = one(e) {
            return Some(f);
        }
        if let Some(f) = wrapped(e).and_then(classify) {
            return Some(f);
        }
        next = e.source();
    }
    None
}

/// The error `e` wraps where `source` does not lead to it: `io::Error::source` skips the
/// error it wraps, and the `redis` crate's source is an `Arc` of the error.
fn wrapped<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io.get_ref().map(|inner| inner as &(dyn StdError + 'static));
    }
    if let Some(arc) = e.downcast_ref::<std::sync::Arc<dyn StdError + Send + Sync>>() {
        return Some(&**arc);
    }
    None
}

/// The failure `e` itself names.
fn one(e: &(dyn StdError + 'static)) -> Option<Failure> {
    #[cfg(feature = "tls")]
    if let Some(r) = e.downcast_ref::<rustls::Error>() {
        return Some(Failure::Tls(of_rustls(r)));
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = e.downcast_ref::<postgres::Error>() {
        if let Some(code) = pg.code() {
            use postgres::error::SqlState;
            if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            {
                return Some(Failure::Authentication);
            }
        }
    }
    #[cfg(feature = "mysql")]
    if let Some(my) = e.downcast_ref::<mysql::Error>() {
        return of_mysql(my);
    }
    #[cfg(feature = "redis")]
    if let Some(r) = e.downcast_ref::<redis::RedisError>() {
        if r.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(r.code(), Some("WRONGPASS" | "NOAUTH"))
        {
            return Some(Failure::Authentication);
        }
    }
    // ZooKeeper checks no digest password when it is added: a wrong one is an identity the
    // creator-only ACL of the root's nodes refuses (`NoAuth`).
    #[cfg(feature = "zookeeper")]
    if let Some(zookeeper_client::Error::AuthFailed | zookeeper_client::Error::NoAuth) =
        e.downcast_ref::<zookeeper_client::Error>()
    {
        return Some(Failure::Authentication);
    }
    // Drivers that keep these causes only as text (tokio-postgres builds both from strings).
    match e.to_string().as_str() {
        "server does not support TLS" => Some(Failure::Tls(TlsFailure::NotOffered)),
        "password missing" => Some(Failure::Authentication),
        _ => None,
    }
}

/// What a rustls error means for the user.
#[cfg(feature = "tls")]
fn of_rustls(e: &rustls::Error) -> TlsFailure {
    use rustls::{AlertDescription as A, CertificateError as C, Error as R};
    match e {
        R::InvalidCertificate(C::UnknownIssuer) => TlsFailure::UnknownIssuer,
        R::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => TlsFailure::Expired,
        R::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            TlsFailure::NameMismatch
        }
        R::InvalidCertificate(_) => TlsFailure::BadCertificate,
        R::AlertReceived(
            A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::AccessDenied,
        ) => TlsFailure::ClientCertificate,
        R::InvalidMessage(_) | R::InappropriateMessage { .. } => TlsFailure::NotOffered,
        _ => TlsFailure::Handshake,
    }
}

/// What a `mysql` error means (its `source` chain ends at the top, so it is read here).
#[cfg(feature = "mysql")]
fn of_mysql(e: &mysql::Error) -> Option<Failure> {
    match e {
        // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR, ER_MUST_CHANGE_PASSWORD
        // (-_LOGIN), ER_ACCOUNT_HAS_BEEN_LOCKED, and MySQL 8's ER_SECURE_TRANSPORT_REQUIRED
        // (a plaintext connection to a server with `require_secure_transport`; MariaDB
        // answers 1045 there).
        mysql::Error::MySqlError(m)
            if matches!(m.code, 1045 | 1698 | 1820 | 1862 | 3118 | 3159) =>
        {
            Some(Failure::Authentication)
        }
        mysql::Error::DriverError(mysql::DriverError::TlsNotSupported) => {
            Some(Failure::Tls(TlsFailure::NotOffered))
        }
        #[cfg(feature = "tls")]
        mysql::Error::TlsError(t) => Some(match t {
            mysql::error::tls::TlsError::Tls(r) => Failure::Tls(of_rustls(r)),
            _ => Failure::Tls(TlsFailure::Handshake),
        }),
        mysql::Error::IoError(io) => classify(io),
        mysql::Error::CodecError(codec) => classify(codec),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_errors_are_neither() {
        let e: Box<dyn StdError + Send + Sync> = "connection refused".into();
        assert_eq!(classify(&*e), None);
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(classify(&io), None);
    }

    #[test]
    fn driver_words_kept_only_as_text_are_read() {
        let e: Box<dyn StdError + Send + Sync> = "server does not support TLS".into();
        assert_eq!(classify(&*e), Some(Failure::Tls(TlsFailure::NotOffered)));
        let e: Box<dyn StdError + Send + Sync> = "password missing".into();
        assert_eq!(classify(&*e), Some(Failure::Authentication));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rustls_errors_inside_io_errors_are_found() {
        use rustls::{AlertDescription, CertificateError, Error as R};
        let cases = [
            (
                R::InvalidCertificate(CertificateError::UnknownIssuer),
                TlsFailure::UnknownIssuer,
            ),
            (
                R::InvalidCertificate(CertificateError::Expired),
                TlsFailure::Expired,
            ),
            (
                R::InvalidCertificate(CertificateError::NotValidForName),
                TlsFailure::NameMismatch,
            ),
            (
                R::InvalidCertificate(CertificateError::Revoked),
                TlsFailure::BadCertificate,
            ),
            (
                R::AlertReceived(AlertDescription::CertificateRequired),
                TlsFailure::ClientCertificate,
            ),
            (
                R::AlertReceived(AlertDescription::UnknownCA),
                TlsFailure::ClientCertificate,
            ),
            (
                R::AlertReceived(AlertDescription::HandshakeFailure),
                TlsFailure::Handshake,
            ),
        ];
        for (r, want) in cases {
            let io = std::io::Error::new(std::io::ErrorKind::InvalidData, r);
            assert_eq!(classify(&io), Some(Failure::Tls(want)), "{io}");
            // Deeper: a driver error whose source is that io::Error.
            #[derive(Debug)]
            struct Wrap(std::io::Error);
            impl std::fmt::Display for Wrap {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("driver failed")
                }
            }
            impl StdError for Wrap {
                fn source(&self) -> Option<&(dyn StdError + 'static)> {
                    Some(&self.0)
                }
            }
            assert_eq!(classify(&Wrap(io)), Some(Failure::Tls(want)));
        }
    }
}
