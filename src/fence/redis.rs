//! The Redis fence: a token key and a data key in one hash slot, written by one Lua script
//! (`redis_put.lua`) that compares and writes atomically, through the caller's own `redis`
//! connection (one server or a Cluster).

use super::{check_key, outcome, Fenced};
use crate::error::{Error, Result};
use crate::types::Token;
use redis::ConnectionLike;

/// The script of [`RedisFence::put`].
const PUT: &str = include_str!("redis_put.lua");

/// A fence on Redis, one server or a Cluster: per fenced key, a token key holding the newest
/// token (decimal) and a data key holding the value, named
/// `<prefix>{<key>}:token` and `<prefix>{<key>}`: the key is the hash tag of both, so a
/// Cluster keeps them in one slot and the script can touch both.
///
/// Every write is one script (`EVALSHA`; the `redis` crate loads it on a node's first
/// `NOSCRIPT`): Redis runs it atomically, so it compares the writer's token with the token
/// key and writes both keys or neither. Tokens compare exactly over the whole `u64` range.
/// The keys have no expiry: they must outlive every lease, so the server must not evict
/// them (`maxmemory-policy noeviction` or a `volatile-*` policy), and they are as durable as
/// that server's persistence and failover (see the [operating notes](crate::guide::operating)).
///
/// ```no_run
/// use simba_lease::fence::RedisFence;
/// use simba_lease::{Config, Error, Session};
///
/// let session = Session::connect("redis://cache:6379", Config::default())?;
/// let mut con = redis::Client::open("redis://cache:6379")?.get_connection()?;
/// // A Cluster: redis::cluster::ClusterClient::new(nodes)?.get_connection()? works the same.
/// let fence = RedisFence::new("app:")?;
///
/// let guard = session.lock("report")?;
/// match fence.put(&mut con, "report", guard.token(), b"totals") {
///     Ok(()) => {}                                  // written
///     Err(Error::StaleToken { newest, .. }) => {    // a newer term wrote: stop
///         eprintln!("lost the lock: token {newest} wrote since");
///     }
///     Err(e) => return Err(e.into()),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedisFence {
    prefix: String,
    script: redis::Script,
}

impl RedisFence {
    /// A fence whose keys start with `prefix` (any bytes but `{` and `}`, which would change
    /// the keys' hash tag; else [`Error::InvalidConfig`]). Nothing is sent.
    pub fn new(prefix: &str) -> Result<Self> {
        if prefix.contains(['{', '}']) {
            let shown: String = prefix.chars().take(64).collect();
            return Err(Error::config(
                "prefix",
                format!("{shown:?} contains a brace: the fenced key is the keys' hash tag"),
            ));
        }
        Ok(RedisFence {
            prefix: prefix.to_owned(),
            script: redis::Script::new(PUT),
        })
    }

    /// The data key of `key`: `<prefix>{<key>}` (readers may `GET` it directly).
    pub fn data_key(&self, key: &str) -> Result<String> {
        check_key(key)?;
        Ok(format!("{}{{{key}}}", self.prefix))
    }

    /// The token key of `key`: `<prefix>{<key>}:token`, the newest token in decimal.
    pub fn token_key(&self, key: &str) -> Result<String> {
        Ok(format!("{}:token", self.data_key(key)?))
    }

    /// The Lua source of the write, for a script of your own that fences more writes
    /// (`KEYS` the token key, the data key; `ARGV` the token, the value; returns the newest
    /// token after the call, the writer's own when applied).
    pub fn script_source() -> &'static str {
        PUT
    }

    /// Writes `value` to the data key of `key` if `token` is not below the newest token
    /// recorded in its token key, and records `token`; [`Error::StaleToken`] otherwise
    /// (nothing changed).
    pub fn put(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        token: Token,
        value: &[u8],
    ) -> Result<()> {
        let data = self.data_key(key)?;
        let newest: String = self
            .script
            .key(format!("{data}:token"))
            .key(&data)
            .arg(token.get().to_string())
            .arg(value)
            .invoke(con)
            .map_err(|e| Error::backend("fencing a write", e))?;
        outcome(key, token, parse_token(key, &newest)?)
    }

    /// The newest token recorded for `key` and the value stored with it (one `MGET`, both
    /// keys read at one instant); `None` when nothing was recorded.
    pub fn get(&self, con: &mut dyn ConnectionLike, key: &str) -> Result<Option<Fenced>> {
        let data = self.data_key(key)?;
        let (token, value): (Option<String>, Option<Vec<u8>>) = redis::cmd("MGET")
            .arg(format!("{data}:token"))
            .arg(&data)
            .query(con)
            .map_err(|e| Error::backend("reading a fence", e))?;
        let Some(token) = token else {
            return Ok(None);
        };
        Ok(Some(Fenced {
            token: parse_token(key, &token)?,
            value: value.unwrap_or_default(),
        }))
    }
}

/// A token as the script or the token key holds it (decimal).
fn parse_token(key: &str, text: &str) -> Result<Token> {
    text.parse::<u64>()
        .ok()
        .and_then(|v| Token::new(v).ok())
        .ok_or_else(|| Error::Backend {
            operation: "reading a fence",
            source: format!(
                "the token key of {key:?} holds {:?}, which is not a token",
                text.chars().take(32).collect::<String>()
            )
            .into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_keys_share_the_fenced_key_as_hash_tag() {
        let f = RedisFence::new("app:").unwrap();
        assert_eq!(f.data_key("report").unwrap(), "app:{report}");
        assert_eq!(f.token_key("report").unwrap(), "app:{report}:token");
        assert!(matches!(
            RedisFence::new("a{b}"),
            Err(Error::InvalidConfig { .. })
        ));
        assert!(matches!(f.data_key("a}b"), Err(Error::InvalidName { .. })));
    }

    #[test]
    fn a_token_key_that_holds_no_token_is_an_error() {
        assert_eq!(
            parse_token("k", "18446744073709551615").unwrap().get(),
            u64::MAX
        );
        for bad in ["0", "-1", "x", "", "18446744073709551616"] {
            assert!(
                matches!(parse_token("k", bad), Err(Error::Backend { .. })),
                "{bad:?}"
            );
        }
    }
}
