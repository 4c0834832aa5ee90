//! Session ids.

use crate::error::{Error, Result};
use std::fmt;

/// A backend session's id: 32 lowercase hex digits (random 128 bits) on SQL, Redis and memory,
/// 16 hex digits (the ZooKeeper session id) on ZooKeeper.
///
/// ```
/// use simba_lease::SessionId;
/// let id = SessionId::random();
/// assert_eq!(id.as_str().len(), 32);
/// assert_eq!(SessionId::parse(id.as_str())?, id);
/// assert!(SessionId::parse("XYZ").is_err());
/// # Ok::<(), simba_lease::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh random 128-bit id (32 hex digits) from the operating system's random source.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        crate::rand::fill(&mut bytes);
        SessionId(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Parses an id of 16 or 32 lowercase hex digits.
    pub fn parse(id: &str) -> Result<Self> {
        let hex = id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex && (id.len() == 16 || id.len() == 32) {
            Ok(SessionId(id.to_owned()))
        } else {
            Err(Error::InvalidSessionId { id: id.to_owned() })
        }
    }

    /// The id formatted from a 64-bit ZooKeeper session id (16 hex digits).
    pub fn from_u64(id: u64) -> Self {
        SessionId(format!("{id:016x}"))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}
