//! Which failures are TLS or authentication failures: the generic half. [`classify`] walks an
//! error chain (also into the error an `io::Error` or an `Arc` wraps, where `source` does not
//! lead) and asks, at each link, the backend's own test (each backend knows its driver's
//! error type and codes: `backends::<name>::failure`), then the tests that hold for every
//! driver: a rustls error (the TLS stack every backend uses), and two causes known by their
//! whole text only (tokio-postgres builds them from strings), so any error whose message is
//! exactly `server does not support TLS` or `password missing` is typed as such, also one a
//! third-party backend passes to [`Error::backend`].

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

/// A backend's own test of one link of a chain (its driver's error type and codes).
pub(crate) type Own = fn(&(dyn StdError + 'static)) -> Option<Failure>;

/// The test of a backend that knows no driver error of its own.
pub(crate) fn no_own(_: &(dyn StdError + 'static)) -> Option<Failure> {
    None
}

/// The TLS or authentication failure anywhere in `e`'s chain, if any, by `own` and the
/// generic tests.
pub(crate) fn classify(e: &(dyn StdError + 'static), own: Own) -> Option<Failure> {
    walk(e, own, 0)
}

fn walk(e: &(dyn StdError + 'static), own: Own, depth: usize) -> Option<Failure> {
    let mut next = Some(e);
    for d in depth..MAX_DEPTH {
        let e = next?;
        if let Some(f) = own(e).or_else(|| generic(e)) {
            return Some(f);
        }
        if let Some(f) = wrapped(e).and_then(|w| walk(w, own, d + 1)) {
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

/// The failure `e` itself names, whatever the driver.
fn generic(e: &(dyn StdError + 'static)) -> Option<Failure> {
    #[cfg(feature = "tls")]
    if let Some(r) = e.downcast_ref::<rustls::Error>() {
        return Some(Failure::Tls(of_rustls(r)));
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
pub(crate) fn of_rustls(e: &rustls::Error) -> TlsFailure {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_errors_are_neither() {
        let e: Box<dyn StdError + Send + Sync> = "connection refused".into();
        assert_eq!(classify(&*e, no_own), None);
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(classify(&io, no_own), None);
    }

    #[test]
    fn driver_words_kept_only_as_text_are_read() {
        let e: Box<dyn StdError + Send + Sync> = "server does not support TLS".into();
        assert_eq!(
            classify(&*e, no_own),
            Some(Failure::Tls(TlsFailure::NotOffered))
        );
        let e: Box<dyn StdError + Send + Sync> = "password missing".into();
        assert_eq!(classify(&*e, no_own), Some(Failure::Authentication));
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
            assert_eq!(classify(&io, no_own), Some(Failure::Tls(want)), "{io}");
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
            assert_eq!(classify(&Wrap(io), no_own), Some(Failure::Tls(want)));
        }
    }
}
