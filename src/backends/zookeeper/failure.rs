//! Which `zookeeper-client` errors are authentication failures, for the generic chain walk
//! beside [`Error`]; every ZooKeeper error is built here. ZooKeeper checks no digest password
//! when it is added: a wrong one is an identity the creator-only ACL of the root's nodes
//! refuses (`NoAuth`).

use crate::error::classify::Failure;
use crate::error::{BoxError, Error};
use std::error::Error as StdError;

/// A ZooKeeper failure of `operation`, typed as TLS or authentication where its chain says so.
pub(crate) fn error(operation: &'static str, source: impl Into<BoxError>) -> Error {
    Error::classified(operation, source, own)
}

/// The failure a `zookeeper_client::Error` itself names.
fn own(e: &(dyn StdError + 'static)) -> Option<Failure> {
    match e.downcast_ref::<zookeeper_client::Error>()? {
        zookeeper_client::Error::AuthFailed | zookeeper_client::Error::NoAuth => {
            Some(Failure::Authentication)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_identities_are_authentication_failures() {
        let e = zookeeper_client::Error::NoAuth;
        assert!(matches!(error("creating", e), Error::Authentication { .. }));
        let e = zookeeper_client::Error::ConnectionLoss;
        assert!(matches!(error("creating", e), Error::Backend { .. }));
    }
}
