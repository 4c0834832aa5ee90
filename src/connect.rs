//! `connect(url)`: builds the backend a URL names (the composition root: the only module
//! that names every backend), and the process-wide `memory://name` registry.

use crate::backends::MemoryBackend;
use crate::engine::{Config, Session};
use crate::error::{Error, Result};
use crate::spi::url::BackendUrl;
use crate::spi::LeaseBackend;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

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
/// * `memory://` — a new, empty in-memory backend at every call: two sessions connected to
///   `memory://` do not see each other (each gets every lock). `memory://name` — the
///   backend called `name` in this process, shared by every `connect` of that URL while any
///   handle to it (the returned `Arc`, or a session on it) lives; after the last one is
///   dropped, the next `connect` starts a new one (tokens from 1 again). See
///   [`guide::operating`](crate::guide::operating).
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
/// * Every backend parses its options with one parser ([`options`](crate::backends::options)):
///   durations with a unit, `250ms`, `5s`, `2m`, `1h` (timeouts at most one hour),
///   bounded integers, booleans `true`/`false`; hosts `host[:port]` or `[v6][:port]`. An
///   unknown or bad option fails with [`Error::InvalidConfig`] naming it; a URL that cannot
///   be parsed fails with [`Error::InvalidUrl`]. No error or `Debug` output contains the
///   password.
/// * `zookeeper://[user:password@]host:port[,host:port…][/root][?options]` (also `zk://`):
///   root defaults to `/simba`; `user:password` adds `digest` auth and makes nodes
///   creator-only; options `connect_timeout` (alias `connection_timeout`), `request_timeout`
///   (e.g. `5s`, `500ms`) and
///   `acl` (`open` or `creator`). `zookeeper+tls://` (also `zk+tls://`; default port 2281)
///   connects to the servers' secure client port (feature `tls`; options `ca`, `cert`,
///   `key`). See `backends::zookeeper`.
///
/// ```
/// use simba_lease::{connect, Config, Error, Session};
/// let backend = connect("memory://")?;
/// let session = Session::open(backend, Config::default())?;
/// assert!(matches!(connect("etcd://localhost"), Err(Error::InvalidUrl { .. })));
///
/// // `memory://` is a new world at every call; `memory://name` is shared.
/// let a = Session::open(connect("memory://")?, Config::default())?;
/// let b = Session::open(connect("memory://")?, Config::default())?;
/// let _held = a.lock("job")?;
/// assert!(b.try_lock("job")?.is_some()); // two worlds
/// let c = Session::open(connect("memory://team")?, Config::default())?;
/// let d = Session::open(connect("memory://team")?, Config::default())?;
/// let _held = c.lock("job")?;
/// assert!(d.try_lock("job")?.is_none()); // one world: c holds it
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
        "postgres" | "postgresql" => crate::backends::sql_connect_url(url),
        #[cfg(not(feature = "postgres"))]
        "postgres" | "postgresql" => Err(disabled(&u.scheme, "postgres")),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => crate::backends::sql_connect_url(url),
        #[cfg(not(feature = "mysql"))]
        "mysql" | "mariadb" => Err(disabled(&u.scheme, "mysql")),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            Ok(Arc::new(crate::backends::redis::RedisBackend::from_url(&u)?))
        }
        #[cfg(not(feature = "redis"))]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => Err(disabled(&u.scheme, "redis")),
        #[cfg(feature = "zookeeper")]
        "zookeeper" | "zk" | "zookeeper+tls" | "zk+tls" => {
            Ok(Arc::new(crate::backends::zookeeper::from_url(&u)?))
        }
        #[cfg(not(feature = "zookeeper"))]
        "zookeeper" | "zk" | "zookeeper+tls" | "zk+tls" => Err(disabled(&u.scheme, "zookeeper")),
        other => Err(u.invalid(format!(
            "unknown scheme {other:?} (known: memory, postgres, mysql, redis, redis+cluster, zookeeper)"
        ))),
    }
}

impl Session {
    /// Builds the backend from `url` (see [`connect`](crate::connect)) and opens a session.
    ///
    /// ```
    /// use simba_lease::{Config, Session};
    /// let session = Session::connect("memory://", Config::default())?;
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn connect(url: &str, config: Config) -> Result<Session> {
        Session::open(crate::connect(url)?, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spi::url::redact;

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
