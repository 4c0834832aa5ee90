//! Tokens, terms, owners and members.

use super::{LeaseName, Metadata, SessionId};
use crate::error::{Error, Result};
use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

/// A fencing token: greater than zero, strictly increasing with every new term of a lease.
///
/// Pass it with every write to the protected resource and let the resource reject any token
/// lower than the highest it has seen.
///
/// ```
/// use simba_lease::Token;
/// assert!(Token::new(0).is_err());
/// assert!(Token::new(2)? > Token::new(1)?);
/// # Ok::<(), simba_lease::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(NonZeroU64);

impl Token {
    /// A token from its value; zero is rejected.
    pub fn new(value: u64) -> Result<Self> {
        NonZeroU64::new(value)
            .map(Token)
            .ok_or(Error::InvalidToken { value })
    }

    /// The value.
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.0)
    }
}

/// One term of a lease held by a session: the name, its fencing token, and the time it has
/// left as measured by the backend's clock when the reply was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// The lease.
    pub name: LeaseName,
    /// The term's fencing token.
    pub token: Token,
    /// Time left by the backend's clock.
    pub remaining: Duration,
}

/// The current holder of a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The holding session.
    pub session: SessionId,
    /// The holder's fencing token.
    pub token: Token,
    /// Time left by the backend's clock.
    pub remaining: Duration,
    /// The value the holder attached to this term (e.g. its address), empty when none: see
    /// [`Election::set_value`](crate::Election::set_value). Every backend's
    /// [`owner`](crate::spi::LeaseBackend::owner) and [`list`](crate::spi::LeaseBackend::list)
    /// fill it; the holder named by an acquire that found the lease taken may leave it empty.
    pub value: String,
}

/// The longest term value, in bytes of UTF-8.
pub const MAX_VALUE_LEN: usize = 1024;

/// Checks a term value: at most [`MAX_VALUE_LEN`] bytes, else [`Error::InvalidValue`].
///
/// ```
/// use simba_lease::{check_value, Error};
/// assert!(check_value("10.0.0.7:8080").is_ok());
/// assert!(matches!(check_value(&"x".repeat(1025)), Err(Error::InvalidValue { len: 1025, .. })));
/// ```
pub fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::InvalidValue {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

/// A live member of a group.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    /// The member's session.
    pub session: SessionId,
    /// The member session's metadata.
    pub metadata: Metadata,
}
