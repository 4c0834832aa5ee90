//! Fenced writes: the protected resource checks the fencing token where its data lives.
//!
//! A [`Token`] protects nothing by itself: a holder that paused (a GC, a stopped VM, a
//! partition) can wake after its term ended and write over the work of the next holder. The
//! resource must refuse it. Every helper here applies one rule, atomically, where the data
//! lives:
//!
//! > **A write with token `t` to a resource is applied only if `t` is not below the newest
//! > token recorded for that resource, and applying it records `t`.**
//!
//! So the holder's own re-writes (equal tokens) pass, a later term's writes (greater tokens)
//! pass, and once a later term wrote, every write of an earlier term is refused with
//! [`Error::StaleToken`] naming both tokens. Each helper returns `Ok(())` when the write was
//! applied, `Err(Error::StaleToken { .. })` when it was refused (nothing changed), and another
//! error when the resource could not be reached (for a write in the caller's own
//! transaction: roll it back).
//!
//! | resource | helper | feature | round trips per write |
//! |---|---|---|---|
//! | PostgreSQL table | [`PostgresFence`] | `postgres` | 1 statement |
//! | MySQL 8 / MariaDB table | [`MysqlFence`] | `mysql` | 1 statement |
//! | Redis key (one server or Cluster) | [`RedisFence`] | `redis` | 1 script |
//! | files in a local or shared directory | [`FileFence`] | always | no server |
//!
//! The SQL fences also check-and-record a token inside the caller's own transaction, so
//! that the caller's own `UPDATE` is fenced ([`PostgresFence::check_and_record`],
//! [`MysqlFence::check_and_record`]). Tokens of different locks are unrelated: fence one
//! resource with one lock's tokens. Keys follow the naming rule of lease names (1–128
//! characters of `[A-Za-z0-9._:-]`, not `.` or `..`), checked before any I/O.
//!
//! [`check`] is the rule itself, for a resource of your own:
//!
//! ```
//! use simba_lease::{fence, Config, Error, Session, Token};
//! use std::collections::HashMap;
//!
//! /// A resource that keeps the newest token it accepted per key.
//! #[derive(Default)]
//! struct Store { data: HashMap<String, (Token, String)> }
//!
//! impl Store {
//!     fn put(&mut self, key: &str, token: Token, value: &str) -> Result<(), Error> {
//!         fence::check(key, self.data.get(key).map(|(t, _)| *t), token)?;
//!         self.data.insert(key.to_owned(), (token, value.to_owned()));
//!         Ok(())
//!     }
//! }
//!
//! let a = Session::connect("memory://fence-doc", Config::default())?;
//! let b = Session::connect("memory://fence-doc", Config::default())?;
//! let mut store = Store::default();
//!
//! let old = a.lock("report")?;
//! let stale = old.token();
//! store.put("report", stale, "first")?;
//! drop(old); // the term ends (in real life: it expired while its holder was paused)
//!
//! let new = b.lock("report")?; // a later term: a greater token
//! store.put("report", new.token(), "second")?;
//! store.put("report", new.token(), "second, again")?; // equal tokens pass
//! let err = store.put("report", stale, "late write of the old holder").unwrap_err();
//! assert!(matches!(err, Error::StaleToken { token, newest, .. }
//!     if token == stale && newest == new.token()));
//! assert_eq!(store.data["report"].1, "second, again");
//! # Ok::<(), Error>(())
//! ```
//!
//! The [fencing guide](crate::guide::fencing) explains why the check must sit in the
//! resource and what each backend's tokens guarantee.

use crate::error::{Error, Result};
use crate::types::{LeaseName, Token};

mod file;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql;

pub use file::FileFence;
#[cfg(feature = "mysql")]
pub use mysql::MysqlFence;
#[cfg(feature = "postgres")]
pub use postgres::PostgresFence;
#[cfg(feature = "redis")]
pub use redis::RedisFence;

/// The fencing rule: `Ok(())` if a write with `token` may be applied to `key`, whose newest
/// recorded token is `newest` (`None`: nothing recorded yet); else [`Error::StaleToken`].
///
/// ```
/// use simba_lease::{fence, Token};
/// let (five, seven) = (Token::new(5)?, Token::new(7)?);
/// assert!(fence::check("k", None, five).is_ok());
/// assert!(fence::check("k", Some(five), five).is_ok()); // the holder's own re-write
/// assert!(fence::check("k", Some(five), seven).is_ok()); // a later term
/// assert!(fence::check("k", Some(seven), five).is_err()); // a former holder
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub fn check(key: &str, newest: Option<Token>, token: Token) -> Result<()> {
    match newest {
        Some(newest) if token < newest => Err(stale(key, token, newest)),
        _ => Ok(()),
    }
}

/// A fenced value as stored: the token of the write that stored it and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fenced {
    /// The newest token recorded for the key (the token of the write that stored `value`).
    pub token: Token,
    /// The value; empty when the key only had tokens recorded (`check_and_record`).
    pub value: Vec<u8>,
}

/// The error of a refused write.
fn stale(key: &str, token: Token, newest: Token) -> Error {
    Error::StaleToken {
        key: key.to_owned(),
        token,
        newest,
    }
}

/// Checks a fence key: the naming rule of lease names ([`Error::InvalidName`] otherwise).
fn check_key(key: &str) -> Result<()> {
    LeaseName::new(key).map(drop)
}

/// The outcome of a write that recorded `newest` as the newest token after it ran: applied
/// when that is the writer's own token.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
fn outcome(key: &str, token: Token, newest: Token) -> Result<()> {
    if newest == token {
        Ok(())
    } else if newest > token {
        Err(stale(key, token, newest))
    } else {
        Err(Error::Backend {
            operation: "fencing a write",
            source: format!(
                "the fence recorded token {newest} for {key:?} after a write with token \
                 {token}: the fence's table or key was changed by something else"
            )
            .into(),
        })
    }
}

/// A token as read back from a fence (a non-positive value means the fence was changed by
/// something else).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn token_from(key: &str, value: i128) -> Result<Token> {
    u64::try_from(value)
        .ok()
        .and_then(|v| Token::new(v).ok())
        .ok_or_else(|| Error::Backend {
            operation: "reading a fence",
            source: format!("the fence holds {value} for {key:?}, which is not a token").into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: u64) -> Token {
        Token::new(v).unwrap()
    }

    #[test]
    fn the_rule_admits_equal_and_greater_tokens_and_names_both_when_it_refuses() {
        assert!(check("k", None, t(1)).is_ok());
        assert!(check("k", Some(t(3)), t(3)).is_ok());
        assert!(check("k", Some(t(3)), t(4)).is_ok());
        match check("k", Some(t(9)), t(4)) {
            Err(Error::StaleToken { key, token, newest }) => {
                assert_eq!((key.as_str(), token, newest), ("k", t(4), t(9)));
            }
            other => panic!("expected StaleToken, got {other:?}"),
        }
        let e = check("ledger", Some(t(9)), t(4)).unwrap_err();
        assert!(!e.is_transient());
        let shown = e.report().to_string();
        assert!(shown.contains("\"ledger\"") && shown.contains("token 4"));
        assert!(shown.contains("token 9") && shown.contains("acquire the lock again"));
    }

    #[test]
    fn keys_follow_the_naming_rule() {
        assert!(check_key("account:7").is_ok());
        for bad in ["", ".", "..", "a b", "{tag}", "a/b"] {
            assert!(
                matches!(check_key(bad), Err(Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }
}
