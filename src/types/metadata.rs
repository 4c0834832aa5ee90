//! Session metadata.

use crate::error::{Error, Result};
use std::fmt;

/// Free-form session metadata shown to group members (e.g. a host and port): at most
/// [`Metadata::MAX_LEN`] bytes of UTF-8.
///
/// ```
/// use simba_lease::Metadata;
/// assert_eq!(Metadata::new("10.0.0.7:8080")?.as_str(), "10.0.0.7:8080");
/// assert!(Metadata::new("x".repeat(1025)).is_err());
/// # Ok::<(), simba_lease::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Metadata(String);

impl Metadata {
    /// The limit in bytes.
    pub const MAX_LEN: usize = 1024;

    /// Validates the length.
    pub fn new(metadata: impl Into<String>) -> Result<Self> {
        let metadata = metadata.into();
        if metadata.len() > Self::MAX_LEN {
            return Err(Error::InvalidMetadata {
                len: metadata.len(),
                max: Self::MAX_LEN,
            });
        }
        Ok(Metadata(metadata))
    }

    /// The metadata as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
