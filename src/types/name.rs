//! Validated lease and group names.

use crate::error::{Error, Result};
use std::fmt;

/// Longest allowed name, in characters (all allowed characters are ASCII, so also bytes).
pub const MAX_NAME_LEN: usize = 128;

fn validate(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_NAME_LEN {
        "longer than 128 characters"
    } else if name == "." || name == ".." {
        "`.` and `..` are reserved"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        "only the characters [A-Za-z0-9._:-] are allowed"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.to_owned(),
        reason,
    })
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident) => {
        $(#[$doc])*
        // Shared text: names are cloned on every keep-alive and notification, so a clone
        // is a reference count, not an allocation.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $ty(std::sync::Arc<str>);

        impl $ty {
            /// Validates `name`: 1–128 characters of `[A-Za-z0-9._:-]`, not `.` or `..`.
            /// Case-sensitive.
            pub fn new(name: impl Into<String>) -> Result<Self> {
                let name = name.into();
                validate(&name)?;
                Ok(Self(name.into()))
            }

            /// The name as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = Error;
            fn try_from(s: String) -> Result<Self> {
                Self::new(s)
            }
        }

    };
}

name_type! {
    /// The name of a lease (and so of an election or a lock).
    ///
    /// ```
    /// use simba_lease::LeaseName;
    /// let name = LeaseName::new("orders:leader")?;
    /// assert_eq!(name.as_str(), "orders:leader");
    /// assert_ne!(LeaseName::new("Job")?, LeaseName::new("job")?);
    /// assert!(LeaseName::new("..").is_err());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    LeaseName
}

name_type! {
    /// The name of a membership group; same rules as [`LeaseName`].
    ///
    /// ```
    /// use simba_lease::GroupName;
    /// assert!(GroupName::new("workers").is_ok());
    /// assert!(GroupName::new("").is_err());
    /// ```
    GroupName
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_allowed_alphabet() {
        for ok in ["a", "A-z_0.9:x", "...", ".a", &"x".repeat(128)] {
            assert!(LeaseName::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_with_the_offending_value() {
        for bad in ["", ".", "..", "a b", "é", "a/b", &"x".repeat(129)] {
            match LeaseName::new(bad) {
                Err(Error::InvalidName { name, .. }) => assert_eq!(name, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
