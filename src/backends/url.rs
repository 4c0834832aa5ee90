//! Building a backend from a URL: `memory://`, `postgres://`, `mysql://`, `redis://`,
//! `redis+cluster://`, `zookeeper://host:port,host:port/root`.

use super::memory::MemoryBackend;
use super::options;
use crate::error::{Error, Result};
use crate::spi::LeaseBackend;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

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

fn named_memory(name: &str) -> Arc<MemoryBackend> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Weak<MemoryBackend>>>> = OnceLock::new();
    let mut reg = REGISTRY.get_or_init(Default::default).lock();
    reg.retain(|_, w| w.strong_count() > 0);
    if let Some(b) = reg.get(name).and_then(Weak::upgrade) {
        return b;
    }
    let b = Arc::new(MemoryBackend::new());
    reg.insert(name.to_owned(), Arc::downgrade(&b));
    b
}

#[cfg_attr(
    all(
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "zookeeper"
    ),
    allow(dead_code)
)]
fn disabled(scheme: &str, feature: &'static str) -> Error {
    Error::FeatureDisabled {
        scheme: scheme.to_owned(),
        feature,
    }
}

/// Builds a backend from a URL.
///
/// * `memory://` — a new in-memory backend; `memory://name` — the process-wide one called
///   `name` (shared while any handle to it lives).
/// * `redis://host:6379[/db]` and `redis+cluster://h1:7000,h2:7001` (feature `redis`): see
///   `backends::redis` for the options (`prefix`, `wait_replicas`,
///   `query_timeout`, `connect_timeout`, `route_by_slot`, `pool_size`); `rediss://` and
///   `rediss+cluster://` (TLS, feature `tls`; options `ca`, `cert`, `key`).
/// * `postgres://user[:password]@host[:port]/db` (also `postgresql://`) and
///   `mysql://user[:password]@host[:port]/db` (also `mariadb://`) — a
///   `SqlBackend` (features `postgres`, `mysql`); options `query_timeout`, `pool_size`,
///   `table_prefix`, `purge_interval` as query parameters, and for TLS (feature `tls`)
///   `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`), `ca`
///   (`sslrootcert`), `cert` (`sslcert`) and `key` (`sslkey`) (see `SqlBackendBuilder`). The
///   tables are not created: call `install_schema` or apply `sql/init-simba-*.sql`.
/// * A URL whose backend's Cargo feature is off fails with [`Error::FeatureDisabled`]
///   naming the feature.
/// * Every backend parses its options with one parser ([`options`](super::options)):
///   durations `250ms`, `5s`, `2m`, `1h` or bare milliseconds (timeouts at most one hour),
///   bounded integers, booleans `true`/`false`; hosts `host[:port]` or `[v6][:port]`. An
///   unknown or bad option fails with [`Error::InvalidConfig`] naming it; a URL that cannot
///   be parsed fails with [`Error::InvalidUrl`]. No error or `Debug` output contains the
///   password.
/// * `zookeeper://[user:password@]host:port[,host:port…][/root][?options]` (also `zk://`):
///   root defaults to `/simba`; `user:password` adds `digest` auth and makes nodes
///   creator-only; options `connection_timeout`, `request_timeout` (e.g. `5s`, `500ms`) and
///   `acl` (`open` or `creator`). `zookeeper+tls://` (also `zk+tls://`; default port 2281)
///   connects to the servers' secure client port (feature `tls`; options `ca`, `cert`,
///   `key`). See `backends::zookeeper`.
///
/// ```
/// use simba_lease::{connect, Config, Error, Session};
/// let backend = connect("memory://")?;
/// let session = Session::open(backend, Config::default())?;
/// assert!(matches!(connect("etcd://localhost"), Err(Error::InvalidUrl { .. })));
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub fn connect(url: &str) -> Result<Arc<dyn LeaseBackend>> {
    let u = BackendUrl::parse(url)?;
    match u.scheme.as_str() {
        "memory" => {
            u.check_params(&[])?;
            if u.hosts.len() > 1 || !u.path.is_empty() {
                return Err(u.invalid("expected `memory://` or `memory://name`"));
            }
            Ok(match u.hosts.first() {
                Some(name) => named_memory(name),
                None => Arc::new(MemoryBackend::new()),
            })
        }
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => super::sql::connect_url(url),
        #[cfg(not(feature = "postgres"))]
        "postgres" | "postgresql" => Err(disabled(&u.scheme, "postgres")),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => super::sql::connect_url(url),
        #[cfg(not(feature = "mysql"))]
        "mysql" | "mariadb" => Err(disabled(&u.scheme, "mysql")),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            Ok(Arc::new(super::redis::RedisBackend::from_url(&u)?))
        }
        #[cfg(not(feature = "redis"))]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => Err(disabled(&u.scheme, "redis")),
        #[cfg(feature = "zookeeper")]
        "zookeeper" | "zk" | "zookeeper+tls" | "zk+tls" => {
            Ok(Arc::new(super::zookeeper::from_url(&u)?))
        }
        #[cfg(not(feature = "zookeeper"))]
        "zookeeper" | "zk" | "zookeeper+tls" | "zk+tls" => Err(disabled(&u.scheme, "zookeeper")),
        other => Err(u.invalid(format!(
            "unknown scheme {other:?} (known: memory, postgres, mysql, redis, redis+cluster, zookeeper)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_credentials_and_redacts_them() {
        let u = BackendUrl::parse("redis://bob:s%40cret@h1:6379/0?x=1").unwrap();
        assert_eq!(u.user.as_deref(), Some("bob"));
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        assert!(!format!("{u:?}").contains("cret"));
    }

    #[test]
    fn redaction_masks_a_password_before_a_later_scheme_separator() {
        let r = redact("postgres:/:s3cr3t-PW@://@");
        assert!(!r.contains("s3cr3t"), "{r}");
        let r = redact("x y://u:s3cr3t@h");
        assert!(!r.contains("s3cr3t"), "{r}");
    }

    #[test]
    fn redaction_masks_everything_before_the_last_at() {
        for (raw, shown) in [
            ("u:pw@h:1", "u:***@h:1"),
            ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:pw@h", "redis://:***@h"),
            ("redis://u:p/w?x@y@h/0?a=1", "redis://u:***@h/0?a=1"),
            ("u:pw@host://x", "u:***@host://x"),
            ("redis://u@h", "redis://u@h"),
            ("redis://h/0", "redis://h/0"),
        ] {
            assert_eq!(redact(raw), shown, "{raw}");
        }
    }

    #[test]
    fn a_password_may_hold_slashes_question_marks_and_ats() {
        let u = BackendUrl::parse("redis://bob:p/w?x@y@h:1/0?prefix=a").unwrap();
        assert_eq!(u.password.as_deref(), Some("p/w?x@y"));
        assert_eq!(u.hosts, ["h:1"]);
        assert_eq!(u.path, "/0");
        assert_eq!(u.param("prefix"), Some("a"));
        assert_eq!(u.redacted(), "redis://bob:***@h:1/0?prefix=a");
    }

    #[test]
    fn url_errors_never_show_the_password() {
        for url in [
            "localhost:5432",
            "bob:s3cr3t-PW@localhost:5432",
            "re dis://bob:s3cr3t-PW@h",
            "redis://bob:s3cr3t-PW%zz@h",
            "redis://bob:s3cr3t-PW%ff@h",
            "redis://bob:s3cr3t-PW@h:99999",
            "redis://bob:s3cr3t-PW/x@h:99999",
            "etcd://bob:s3cr3t-PW@h",
        ] {
            let e = BackendUrl::parse(url)
                .map(drop)
                .and_then(|_| connect(url).map(drop))
                .unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e:?}");
            let text = format!("{e} {e:?}");
            assert!(!text.contains("s3cr3t"), "{url}: {text}");
        }
    }

    #[test]
    fn names_what_is_wrong() {
        let e = BackendUrl::parse("localhost:5432").unwrap_err().to_string();
        assert!(e.contains("scheme://"), "{e}");
        let e = BackendUrl::parse("redis://h:99999")
            .unwrap_err()
            .to_string();
        assert!(e.contains("99999"), "{e}");
        let e = connect("memory://?pool=3").err().unwrap().to_string();
        assert!(e.contains("pool"), "{e}");
    }

    #[test]
    fn disabled_features_are_named() {
        let cases = [
            (
                "postgres://localhost/test",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            ("mysql://localhost/test", "mysql", cfg!(feature = "mysql")),
            ("redis://localhost", "redis", cfg!(feature = "redis")),
            (
                "redis+cluster://localhost:7000",
                "redis",
                cfg!(feature = "redis"),
            ),
            (
                "zookeeper://localhost:2181/simba",
                "zookeeper",
                cfg!(feature = "zookeeper"),
            ),
        ];
        for (url, feature, _) in cases.iter().filter(|c| !c.2) {
            match connect(url) {
                Err(Error::FeatureDisabled { feature: f, .. }) => assert_eq!(f, *feature),
                other => panic!("{url}: {:?}", other.map(|_| ())),
            }
        }
    }

    #[cfg(feature = "zookeeper")]
    #[test]
    fn zookeeper_urls_are_checked_before_io() {
        for (url, needle) in [
            ("zookeeper://h:2181/simba?pool=3", "pool"),
            ("zk:///simba", "host"),
            (
                "zookeeper://h:2181/simba?request_timeout=5x",
                "request_timeout",
            ),
            (
                "zookeeper://h:2181/simba?connection_timeout=soon",
                "connection_timeout",
            ),
            ("zookeeper://h:2181/simba?acl=everyone", "acl"),
            ("zookeeper://h:2181/a//b", "root"),
            (
                "zookeeper://h:2181/simba?ca=/x.pem",
                "`ca`: TLS options need",
            ),
            (
                "zk+tls://h/simba?ca=/nonexistent/ca.pem",
                if cfg!(feature = "tls") {
                    "`ca`: cannot read"
                } else {
                    "the `tls` feature"
                },
            ),
        ] {
            let e = connect(url).err().expect(url).to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }

    #[test]
    fn named_memory_backends_are_shared() {
        let a = connect("memory://shared-test").unwrap();
        let b = connect("memory://shared-test").unwrap();
        let c = connect("memory://").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
