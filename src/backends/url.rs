//! Building a backend from a URL: `memory://`, `postgres://`, `mysql://`, `redis://`,
//! `redis+cluster://`, `zookeeper://host:port,host:port/root`.

use super::memory::MemoryBackend;
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
}

impl std::fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

fn decode(s: &str, url: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(v) = hex else {
                return Err(Error::InvalidUrl {
                    url: url.to_owned(),
                    reason: format!("bad percent-encoding in {s:?}"),
                });
            };
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::InvalidUrl {
        url: url.to_owned(),
        reason: format!("{s:?} does not decode to UTF-8"),
    })
}

impl BackendUrl {
    /// Parses `url`; errors name what is wrong.
    pub fn parse(url: &str) -> Result<Self> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::InvalidUrl {
                url: url.to_owned(),
                reason: "expected `scheme://…`".into(),
            });
        };
        let valid_scheme = !scheme.is_empty()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !valid_scheme {
            return Err(Error::InvalidUrl {
                url: url.to_owned(),
                reason: format!("bad scheme {scheme:?}"),
            });
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let redacted = match userinfo {
            Some(u) => url.replacen(u, &format!("{}:***", u.split(':').next().unwrap_or("")), 1),
            None => url.to_owned(),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((a, p)) => (Some(decode(a, &redacted)?), Some(decode(p, &redacted)?)),
                None => (Some(decode(u, &redacted)?), None),
            },
            None => (None, None),
        };
        let hosts: Vec<String> = hostlist
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        for h in &hosts {
            if let Some((_, port)) = h.rsplit_once(':').filter(|_| !h.ends_with(']')) {
                if port.parse::<u16>().is_err() {
                    return Err(Error::InvalidUrl {
                        url: redacted,
                        reason: format!("bad port {port:?} in host {h:?}"),
                    });
                }
            }
        }
        let mut params = Vec::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            params.push((decode(k, &redacted)?, decode(v, &redacted)?));
        }
        Ok(BackendUrl {
            scheme: scheme.to_ascii_lowercase(),
            user,
            password,
            hosts,
            path: decode(path, &redacted)?,
            params,
            redacted,
        })
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

    /// Fails with [`Error::InvalidUrl`] naming the first parameter not in `known`.
    pub fn check_params(&self, known: &[&str]) -> Result<()> {
        match self
            .params
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            Some((k, _)) => Err(self.invalid(format!(
                "unknown option {k:?} (known: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))),
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
///   `query_timeout`, `connect_timeout`, `route_by_slot`, `pool_size`); `rediss://` (TLS)
///   is refused because this build has no TLS.
/// * `postgres://user[:password]@host[:port]/db` (also `postgresql://`) and
///   `mysql://user[:password]@host[:port]/db` (also `mariadb://`) — a
///   `SqlBackend` (features `postgres`, `mysql`); options `query_timeout`, `pool_size`,
///   `table_prefix`, `purge_interval` as query parameters (see `SqlBackendBuilder`). The
///   tables are not created: call `install_schema` or apply `sql/init-simba-*.sql`.
/// * A URL whose backend's Cargo feature is off fails with [`Error::FeatureDisabled`]
///   naming the feature.
/// * `zookeeper://[user:password@]host:port[,host:port…][/root][?options]` (also `zk://`):
///   root defaults to `/simba`; `user:password` adds `digest` auth and makes nodes
///   creator-only; options `connection_timeout`, `request_timeout` (e.g. `5s`, `500ms`) and
///   `acl` (`open` or `creator`). See `backends::zookeeper`.
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
        "zookeeper" | "zk" => Ok(Arc::new(super::zookeeper::from_url(&u)?)),
        #[cfg(not(feature = "zookeeper"))]
        "zookeeper" | "zk" => Err(disabled(&u.scheme, "zookeeper")),
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
