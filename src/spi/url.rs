//! Backend URLs: `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?k=v&…]`,
//! parsed once for every backend, and redacted for every message.

use super::options;
use crate::error::{Error, Result};

/// A parsed backend URL: `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?k=v&…]`.
///
/// Percent-encoded user, password, path and query values are decoded.
///
/// ```
/// use simba_lease::backends::BackendUrl;
/// let url = BackendUrl::parse("zookeeper://zk1:2181,zk2:2181/simba?connection_timeout=5s")?;
/// assert_eq!(url.scheme, "zookeeper");
/// assert_eq!(url.hosts, ["zk1:2181", "zk2:2181"]);
/// assert_eq!(url.path, "/simba");
/// assert_eq!(url.param("connection_timeout"), Some("5s"));
/// # Ok::<(), simba_lease::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BackendUrl {
    /// The scheme, lowercase.
    pub scheme: String,
    /// The user name, if any.
    pub user: Option<String>,
    /// The password, if any.
    pub password: Option<String>,
    /// `host[:port]` entries, in order.
    pub hosts: Vec<String>,
    /// The path including its leading `/`, or empty.
    pub path: String,
    /// Query parameters, in order.
    pub params: Vec<(String, String)>,
    redacted: String,
    host_ports: Vec<options::HostPort>,
}

impl std::fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// `raw` with everything that may be a password masked, for messages: the text between
/// `scheme://` (or the start, without one) and the last `@` keeps only its user part, as
/// `user:***@`. Works on any string, also one that is not a valid URL.
pub(crate) fn redact(raw: &str) -> String {
    let Some(at) = raw.rfind('@') else {
        return raw.to_owned();
    };
    // After `scheme://` only when what precedes it is a scheme: in `a:/:pw@://@` the password
    // sits before the first `://`.
    let start = match raw.find("://") {
        Some(i)
            if i < at
                && i > 0
                && raw[..i]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) =>
        {
            i + 3
        }
        _ => 0,
    };
    let userinfo = &raw[start..at];
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &raw[..start], &raw[at..]),
        None => raw.to_owned(),
    }
}

/// Percent-decodes `s`; `what` names it in the error, which never quotes a secret.
fn decode(s: &str, what: &str, secret: bool, url: &str) -> Result<String> {
    let bad = |why: &str| Error::InvalidUrl {
        url: url.to_owned(),
        reason: if secret {
            format!("the {what} {why}")
        } else {
            format!("the {what} {} {why}", options::quote(s))
        },
    };
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(v) = hex else {
                return Err(bad("has a bad percent-encoding"));
            };
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad("does not decode to UTF-8"))
}

impl BackendUrl {
    /// Parses `url`; errors name what is wrong and never contain the password.
    ///
    /// Everything before the last `@` is the user and password, so a password may hold `/`,
    /// `?` or `@` as they are; an `@` in the path or a query value must be written `%40`.
    /// Hosts are `host`, `host:port`, `[v6]` or `[v6]:port`.
    pub fn parse(url: &str) -> Result<Self> {
        let redacted = redact(url);
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::InvalidUrl {
                url: redacted,
                reason: "expected `scheme://…`".into(),
            });
        };
        let valid_scheme = !scheme.is_empty()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !valid_scheme {
            return Err(Error::InvalidUrl {
                url: redacted,
                reason: "bad scheme: expected letters, digits, `+`, `-` or `.` before `://`".into(),
            });
        }
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((u, r)) => (Some(u), r),
            None => (None, rest),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hostlist, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((a, p)) => (
                    Some(decode(a, "user", false, &redacted)?),
                    Some(decode(p, "password", true, &redacted)?),
                ),
                None => (Some(decode(u, "user", false, &redacted)?), None),
            },
            None => (None, None),
        };
        let hosts: Vec<String> = hostlist
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        let mut host_ports = Vec::with_capacity(hosts.len());
        for h in &hosts {
            host_ports.push(options::host_port(h).map_err(|reason| Error::InvalidUrl {
                url: redacted.clone(),
                reason,
            })?);
        }
        let mut params = Vec::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            params.push((
                decode(k, "option name", false, &redacted)?,
                decode(v, "option value", false, &redacted)?,
            ));
        }
        Ok(BackendUrl {
            scheme: scheme.to_ascii_lowercase(),
            user,
            password,
            hosts,
            path: decode(path, "path", false, &redacted)?,
            params,
            redacted,
            host_ports,
        })
    }

    /// The hosts, parsed.
    #[cfg_attr(not(any(feature = "redis", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn host_ports(&self) -> &[options::HostPort] {
        &self.host_ports
    }

    /// The last value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The URL with the password replaced by `***`, for messages.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// Fails with [`Error::InvalidConfig`] naming the first option not in `known` (the
    /// error of every bad URL option, see `backends::options`).
    pub fn check_params(&self, known: &[&str]) -> Result<()> {
        match self
            .params
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            Some((k, _)) => Err(Error::config(
                options::cut(k),
                format!(
                    "unknown URL option {} (known: {})",
                    options::quote(k),
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )),
            None => Ok(()),
        }
    }

    /// An [`Error::InvalidUrl`] about this URL.
    pub fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::InvalidUrl {
            url: self.redacted.clone(),
            reason: reason.into(),
        }
    }
}
