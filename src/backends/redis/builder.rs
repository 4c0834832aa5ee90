//! The URL form of a [`RedisBackend`] and its builder: one set of option names for both.

use super::config::MAX_COUNT;
use super::{RedisBackend, RedisConfig, RedisTls};
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::url::{redact, BackendUrl};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The URL options a Redis URL may carry.
const KNOWN: &[&str] = &[
    "prefix",
    "wait_replicas",
    "query_timeout",
    "connect_timeout",
    "route_by_slot",
    "pool_size",
    "ca",
    "cert",
    "key",
];

/// Where a backend connects: the servers' URLs for the driver (options stripped).
pub(super) struct Target {
    clustered: bool,
    tls: bool,
    urls: Vec<String>,
}

impl Target {
    /// Connects with `cfg`.
    pub(super) fn connect(self, cfg: RedisConfig) -> Result<RedisBackend> {
        // Before `cluster` turns `route_by_slot` on: a URL that turns it off is refused.
        cfg.validate(self.clustered)?;
        if self.clustered {
            RedisBackend::cluster(&self.urls, cfg)
        } else {
            RedisBackend::standalone(&self.urls[0], cfg)
        }
    }
}

/// A backend from a parsed URL.
pub(super) fn from_url(u: &BackendUrl) -> Result<RedisBackend> {
    let (mut cfg, target, files) = plan(u)?;
    cfg.tls = files.read(target.tls)?;
    target.connect(cfg)
}

/// The settings (but the TLS material), the target and the TLS files of a parsed URL.
fn plan(u: &BackendUrl) -> Result<(RedisConfig, Target, TlsFiles)> {
    u.check_params(KNOWN)?;
    let (clustered, tls) = match u.scheme.as_str() {
        "redis" => (false, false),
        "redis+cluster" => (true, false),
        "rediss" if cfg!(feature = "tls") => (false, true),
        "rediss+cluster" if cfg!(feature = "tls") => (true, true),
        "rediss" | "rediss+cluster" => {
            return Err(u.invalid("TLS (rediss://) needs the `tls` feature of simba-lease"))
        }
        other => return Err(u.invalid(format!("not a Redis URL scheme: {other:?}"))),
    };
    if u.hosts.is_empty() {
        return Err(u.invalid("expected at least one host"));
    }
    if !clustered && u.hosts.len() > 1 {
        return Err(u.invalid("several hosts need redis+cluster://"));
    }
    if clustered && !u.path.is_empty() && u.path != "/" && u.path != "/0" {
        return Err(u.invalid("a Redis Cluster has only database 0"));
    }
    // The path goes to the driver's URL: only a database number, so that nothing else (such
    // as the driver's `#insecure`, which turns certificate checks off) can pass.
    let db = u.path.strip_prefix('/').unwrap_or(&u.path);
    if !db.is_empty() && (db.len() > 5 || !db.bytes().all(|b| b.is_ascii_digit())) {
        return Err(u.invalid("the path can only be a database number (`/0`)"));
    }
    let mut cfg = RedisConfig {
        route_by_slot: clustered,
        ..RedisConfig::default()
    };
    if let Some(p) = u.param("prefix") {
        cfg.prefix = p.to_owned();
    }
    if let Some(v) = u.param("wait_replicas") {
        cfg.wait_replicas = options::integer("wait_replicas", v, 0, MAX_COUNT as u32)?;
    }
    if let Some(v) = u.param("pool_size") {
        cfg.pool_size = options::integer("pool_size", v, 0, MAX_COUNT)?;
    }
    if let Some(v) = u.param("query_timeout") {
        cfg.query_timeout = options::timeout("query_timeout", v)?;
    }
    if let Some(v) = u.param("connect_timeout") {
        cfg.connect_timeout = options::timeout("connect_timeout", v)?;
    }
    if let Some(v) = u.param("route_by_slot") {
        cfg.route_by_slot = options::boolean("route_by_slot", v)?;
    }
    let files = TlsFiles {
        ca: u.param("ca").map(PathBuf::from),
        cert: u.param("cert").map(PathBuf::from),
        key: u.param("key").map(PathBuf::from),
    };
    let scheme = if tls { "rediss" } else { "redis" };
    let auth = match (&u.user, &u.password) {
        (Some(user), Some(pw)) => format!("{}:{}@", encode(user), encode(pw)),
        (None, Some(pw)) => format!(":{}@", encode(pw)),
        (Some(user), None) => format!("{}@", encode(user)),
        (None, None) => String::new(),
    };
    let path = if clustered { "" } else { u.path.as_str() };
    let urls = u
        .host_ports()
        .iter()
        .map(|h| format!("{scheme}://{auth}{}{path}", h.with_port(6379)))
        .collect();
    let target = Target {
        clustered,
        tls,
        urls,
    };
    Ok((cfg, target, files))
}

/// `n`, unless it is over the bound URLs have for `setting`.
fn at_most(setting: &str, n: usize) -> Result<usize> {
    if n > MAX_COUNT {
        return Err(Error::config(
            setting,
            format!("{n} is more than {MAX_COUNT}"),
        ));
    }
    Ok(n)
}

/// Percent-encodes a user name or password for the driver's URL.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The PEM files named by `ca`, `cert` and `key`.
#[derive(Clone, Debug, Default)]
struct TlsFiles {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl TlsFiles {
    /// The files, read and checked; on a plaintext URL (`tls` false) any of them is refused.
    fn read(&self, tls: bool) -> Result<RedisTls> {
        let named = [("ca", &self.ca), ("cert", &self.cert), ("key", &self.key)];
        if !tls {
            return match named.iter().find(|(_, p)| p.is_some()) {
                Some((option, _)) => {
                    Err(Error::config(*option, "TLS options need a rediss:// URL"))
                }
                None => Ok(RedisTls::default()),
            };
        }
        let read = |option: &str, path: &Option<PathBuf>| path.as_deref().map(|p| pem(option, p));
        let ca = read("ca", &self.ca).transpose()?;
        let client = match (read("cert", &self.cert), read("key", &self.key)) {
            (Some(cert), Some(key)) => {
                let (cert, key) = (cert?, key?);
                pair_check(&cert, &key)?;
                Some((cert, key))
            }
            (None, None) => None,
            (Some(_), None) => return Err(Error::config("key", "`cert` needs `key`")),
            (None, Some(_)) => return Err(Error::config("cert", "`key` needs `cert`")),
        };
        Ok(RedisTls { ca, client })
    }
}

/// The PEM file `path` of `option`, checked to hold a certificate (a private key for `key`).
fn pem(option: &str, path: &Path) -> Result<Vec<u8>> {
    crate::backends::pem::read(option, path, option == "key")
}

/// Checks that `key` is the private key of the certificate `cert` (both PEM, checked), so a
/// wrong pair fails here, naming `key`, not at the first handshake.
#[cfg(feature = "tls")]
fn pair_check(cert: &[u8], key: &[u8]) -> Result<()> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<_> = CertificateDer::pem_slice_iter(cert).flatten().collect();
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| Error::config("key", format!("unusable private key: {e}")))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| super::failure::error("configuring TLS", e))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map_err(|e| Error::config("key", format!("does not fit `cert`: {e}")))?;
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn pair_check(_cert: &[u8], _key: &[u8]) -> Result<()> {
    Ok(())
}

/// A [`RedisBackend`] from a URL and settings: each method overrides the URL option of the
/// same name (see the [module documentation](super)), and [`build`](Self::build) checks them
/// as the URL's and connects. `Debug` masks the URL's password.
///
/// ```no_run
/// use simba_lease::backends::redis::RedisBackend;
/// use std::time::Duration;
/// let backend = RedisBackend::builder("rediss://app:secret@redis.internal:6390")
///     .ca("/etc/ssl/redis-ca.pem")
///     .prefix("billing")
///     .query_timeout(Duration::from_secs(2))
///     .build()?;
/// # Ok::<(), simba_lease::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisBackendBuilder {
    url: String,
    prefix: Option<String>,
    wait_replicas: Option<u32>,
    query_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    route_by_slot: Option<bool>,
    pool_size: Option<usize>,
    tls: TlsFiles,
}

impl std::fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackendBuilder")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("wait_replicas", &self.wait_replicas)
            .field("query_timeout", &self.query_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("route_by_slot", &self.route_by_slot)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .finish()
    }
}

impl RedisBackendBuilder {
    /// A builder for `url` (`redis://`, `redis+cluster://`, `rediss://`, `rediss+cluster://`).
    pub fn new(url: impl Into<String>) -> Self {
        RedisBackendBuilder {
            url: url.into(),
            prefix: None,
            wait_replicas: None,
            query_timeout: None,
            connect_timeout: None,
            route_by_slot: None,
            pool_size: None,
            tls: TlsFiles::default(),
        }
    }

    /// Key prefix (`prefix`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Replicas that must acknowledge a new term (`wait_replicas`).
    pub fn wait_replicas(mut self, n: u32) -> Self {
        self.wait_replicas = Some(n);
        self
    }

    /// Bound of every reply (`query_timeout`).
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = Some(d);
        self
    }

    /// Bound of opening a connection (`connect_timeout`).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// Keep every script call to one hash slot (`route_by_slot`).
    pub fn route_by_slot(mut self, on: bool) -> Self {
        self.route_by_slot = Some(on);
        self
    }

    /// Idle connections kept per role (`pool_size`).
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = Some(n);
        self
    }

    /// PEM file of the CA certificates to trust (`ca`; `rediss://` only).
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// PEM file of a client certificate (`cert`, with [`key`](Self::key); `rediss://` only).
    pub fn cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.cert = Some(path.into());
        self
    }

    /// PEM file of the client certificate's private key (`key`; `rediss://` only).
    pub fn key(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.key = Some(path.into());
        self
    }

    /// Checks the settings as the URL's (same errors: [`Error::InvalidConfig`] naming the
    /// setting), reads the TLS files, and connects.
    pub fn build(self) -> Result<RedisBackend> {
        let u = BackendUrl::parse(&self.url)?;
        let (mut cfg, target, files) = plan(&u)?;
        if let Some(p) = self.prefix {
            cfg.prefix = p;
        }
        if let Some(n) = self.wait_replicas {
            cfg.wait_replicas = at_most("wait_replicas", n as usize)? as u32;
        }
        if let Some(n) = self.pool_size {
            cfg.pool_size = at_most("pool_size", n)?;
        }
        if let Some(d) = self.query_timeout {
            cfg.query_timeout = d;
        }
        if let Some(d) = self.connect_timeout {
            cfg.connect_timeout = d;
        }
        if let Some(on) = self.route_by_slot {
            cfg.route_by_slot = on;
        }
        let given = TlsFiles {
            ca: self.tls.ca.or(files.ca),
            cert: self.tls.cert.or(files.cert),
            key: self.tls.key.or(files.key),
        };
        cfg.tls = given.read(target.tls)?;
        target.connect(cfg)
    }
}
