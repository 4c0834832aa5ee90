//! Which `redis` crate errors are authentication failures (`WRONGPASS`, `NOAUTH`), for the
//! generic chain walk beside [`Error`]; every Redis error is built here, so each path
//! (connect, every pooled or cluster connection opened later) types them alike.

use crate::error::classify::Failure;
use crate::error::{BoxError, Error};
use std::error::Error as StdError;

/// A Redis failure of `operation`, typed as TLS or authentication where its chain says so.
pub(crate) fn error(operation: &'static str, source: impl Into<BoxError>) -> Error {
    Error::classified(operation, source, own)
}

/// The failure a `redis::RedisError` itself names.
fn own(e: &(dyn StdError + 'static)) -> Option<Failure> {
    let r = e.downcast_ref::<redis::RedisError>()?;
    (r.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(r.code(), Some("WRONGPASS" | "NOAUTH")))
    .then_some(Failure::Authentication)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_passwords_are_authentication_failures() {
        let e = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "auth"));
        assert!(matches!(
            error("connecting", e),
            Error::Authentication { .. }
        ));
        let e = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        assert!(matches!(error("connecting", e), Error::Backend { .. }));
    }
}
