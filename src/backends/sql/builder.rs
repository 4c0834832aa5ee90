//! [`SqlBackendBuilder`]: the options of both dialects from the URL and the builder's calls,
//! their limits, and the choice of driver by the URL's scheme. Everything a bad URL or
//! option can fail with is found here, before a statement runs.

use super::driver::Driver;
use super::tables::Tables;
use super::{tls, Dialect, SqlBackend};
use super::{DEFAULT_POOL_SIZE, DEFAULT_PURGE_INTERVAL, DEFAULT_QUERY_TIMEOUT};
use crate::backends::options;
use crate::backends::BackendUrl;
use crate::error::{Error, Result};
use crate::spi::url::redact;
use std::sync::Arc;
use std::time::Duration;

/// Options shared by both dialects; set through [`SqlBackendBuilder`] or URL parameters.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) query_timeout: Duration,
    pub(crate) pool_size: usize,
    pub(crate) table_prefix: String,
    pub(crate) purge_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            table_prefix: String::new(),
            purge_interval: DEFAULT_PURGE_INTERVAL,
        }
    }
}

/// Builds a [`SqlBackend`] from a URL and options.
///
/// URL query parameters set the same options (the builder's calls win):
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `query_timeout` | statement timeout and the longest wait for a pooled connection, e.g. `500ms`, `5s` | `5s` |
/// | `pool_size` | connections kept by the backend | `4` |
/// | `table_prefix` | prefix of the three table names, `[A-Za-z0-9_]`, at most 32 characters | empty |
/// | `purge_interval` | at most one automatic purge of expired sessions per interval | `60s` |
/// | `sslmode` | `disable`, `prefer`, `require`, `verify-ca`, `verify-full` (feature `tls`) | `disable`; `verify-full` when `ca`, `cert` or `key` is given |
/// | `ca` (or `sslrootcert`) | PEM file of the CA certificates to trust | the platform's roots (MySQL: the Mozilla roots) |
/// | `cert`, `key` (or `sslcert`, `sslkey`) | PEM files of a client certificate and its key, both or neither | none |
///
/// TLS modes, with libpq's meanings on both dialects: `disable` is plaintext (also when the
/// server offers TLS, as before TLS was built in); `prefer` uses TLS when the server offers
/// it and is the only mode that falls back to plaintext; `require` insists on TLS and checks
/// the certificate only when `ca` is given (then its chain, as `verify-ca`); `verify-ca`
/// checks the chain and validity period but not the host name; `verify-full` also checks that
/// the URL's host (name or IP address) is one the certificate names. A TLS option with
/// `sslmode=disable`, or a file that cannot be read or holds no PEM certificate (`ca`,
/// `cert`) or key (`key`), fails with [`Error::InvalidConfig`] naming the option; `sslmode`
/// other than `disable` without the `tls` feature fails the same way naming `sslmode`. An
/// unknown CA, an expired certificate or a host-name mismatch fails the build with
/// [`Error::Tls`], and a refused password with [`Error::Authentication`]. The
/// PostgreSQL `LISTEN` connection uses the same settings as the pool. Passwords come from the
/// URL (PostgreSQL: SCRAM-SHA-256, over TLS SCRAM-SHA-256-PLUS bound to the TLS session
/// where the server offers it, or md5, as the server asks) and never appear in an error or
/// `Debug`. On MySQL/MariaDB the `mysql` crate adds
/// its Mozilla roots to `ca`, and connects over TCP only (never its unix socket), so TLS is
/// never skipped.
///
/// URLs: `postgres://user[:password]@host[:port]/database` (also `postgresql://`) and
/// `mysql://user[:password]@host[:port]/database` (also `mariadb://`); a host is
/// `host[:port]` or `[v6][:port]`.
///
/// Durations are written `500ms`, `5s`, `2m`, `1h` or as bare milliseconds. `query_timeout`
/// is at least 1 ms and at most one hour, `purge_interval` at most one week, `pool_size` from
/// 1 to 1000, from the URL and the builder alike; anything else fails with
/// [`Error::InvalidConfig`] naming the option (see [`options`](crate::backends::options)).
/// `Debug` shows the URL with its password masked.
pub struct SqlBackendBuilder {
    url: String,
    options: Options,
    set: Vec<&'static str>,
    /// TLS options set by the builder's methods: (option, value), winning over the URL's.
    tls_set: Vec<(&'static str, String)>,
    #[cfg(feature = "postgres")]
    pg_config: Option<::postgres::Config>,
    #[cfg(feature = "mysql")]
    mysql_opts: Option<::mysql::Opts>,
}

impl std::fmt::Debug for SqlBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SqlBackendBuilder");
        d.field("url", &redact(&self.url))
            .field("options", &self.options)
            .field("set", &self.set)
            .field("tls", &self.tls_set);
        #[cfg(feature = "postgres")]
        d.field("postgres_config", &self.pg_config.as_ref().map(|_| "…"));
        #[cfg(feature = "mysql")]
        d.field("mysql_opts", &self.mysql_opts.as_ref().map(|_| "…"));
        d.finish()
    }
}

/// The largest `pool_size`.
const MAX_POOL_SIZE: usize = 1000;

fn validate(o: &Options) -> Result<()> {
    if o.query_timeout < Duration::from_millis(1) {
        return Err(Error::config("query_timeout", "must be at least 1ms"));
    }
    options::check_timeout("query_timeout", o.query_timeout)?;
    if o.purge_interval > options::MAX_INTERVAL {
        return Err(Error::config(
            "purge_interval",
            format!(
                "{:?} is longer than the {:?} maximum",
                o.purge_interval,
                options::MAX_INTERVAL
            ),
        ));
    }
    if o.pool_size == 0 || o.pool_size > MAX_POOL_SIZE {
        return Err(Error::config("pool_size", "must be between 1 and 1000"));
    }
    if o.table_prefix.len() > 32
        || !o
            .table_prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(Error::config(
            "table_prefix",
            format!(
                "{:?}: at most 32 characters of [A-Za-z0-9_]",
                o.table_prefix
            ),
        ));
    }
    Ok(())
}

impl SqlBackendBuilder {
    fn mark(&mut self, s: &'static str) {
        self.set.push(s);
    }

    /// Statement timeout, also the longest wait for a pooled connection (default 5 s).
    pub fn query_timeout(mut self, t: Duration) -> Self {
        self.options.query_timeout = t;
        self.mark("query_timeout");
        self
    }

    /// Number of pooled connections (default 4).
    pub fn pool_size(mut self, n: usize) -> Self {
        self.options.pool_size = n;
        self.mark("pool_size");
        self
    }

    /// Prefix of the table names, e.g. `app_` for `app_simba_lease` (default empty).
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.table_prefix = prefix.into();
        self.mark("table_prefix");
        self
    }

    /// At most one automatic purge of expired sessions per interval (default 60 s).
    pub fn purge_interval(mut self, t: Duration) -> Self {
        self.options.purge_interval = t;
        self.mark("purge_interval");
        self
    }

    fn tls_option(mut self, option: &'static str, value: String) -> Self {
        self.tls_set.push((option, value));
        self
    }

    /// TLS mode, as the URL option `sslmode`: `disable`, `prefer`, `require`, `verify-ca` or
    /// `verify-full` (feature `tls`; checked by [`build`](Self::build)).
    pub fn sslmode(self, mode: impl Into<String>) -> Self {
        self.tls_option("sslmode", mode.into())
    }

    /// PEM file of the CA certificates to trust, as the URL option `ca` (`sslrootcert`).
    pub fn ca(self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_option("ca", path.as_ref().to_string_lossy().into_owned())
    }

    /// PEM file of a client certificate, as the URL option `cert` (`sslcert`); needs
    /// [`key`](Self::key).
    pub fn cert(self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_option("cert", path.as_ref().to_string_lossy().into_owned())
    }

    /// PEM file of the client certificate's private key, as the URL option `key` (`sslkey`).
    pub fn key(self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_option("key", path.as_ref().to_string_lossy().into_owned())
    }

    /// Starts from a `postgres::Config` of your own (host, credentials, `options` such as a
    /// time zone); the URL's host and credentials are then ignored. TLS still comes from the
    /// URL options (`sslmode`, `ca`, `cert`, `key`), whatever the config's `ssl_mode`.
    #[cfg(feature = "postgres")]
    pub fn postgres_config(mut self, config: ::postgres::Config) -> Self {
        self.pg_config = Some(config);
        self
    }

    /// Starts from `mysql::Opts` of your own (credentials, `init` statements such as a time
    /// zone); the URL's host and credentials are then ignored. Their `ssl_opts` are kept
    /// unless the URL (or the builder) sets `sslmode`, `ca`, `cert` or `key`.
    #[cfg(feature = "mysql")]
    pub fn mysql_opts(mut self, opts: impl Into<::mysql::Opts>) -> Self {
        self.mysql_opts = Some(opts.into());
        self
    }

    /// Connects (one connection, to check the server) and returns the backend.
    pub fn build(self) -> Result<SqlBackend> {
        let mut url = BackendUrl::parse(&self.url)?;
        let mut known = vec![
            "query_timeout",
            "pool_size",
            "table_prefix",
            "purge_interval",
        ];
        known.extend(tls::OPTIONS);
        url.check_params(&known)?;
        for (option, value) in &self.tls_set {
            // The builder's value replaces the URL's, under either name.
            let alias = tls::alias(option);
            url.params.retain(|(k, _)| k != option && k != alias);
            url.params.push(((*option).to_owned(), value.clone()));
        }
        let tls = tls::SqlTls::from_url(&url)?;
        let mut options = Options::default();
        if let Some(v) = url.param("query_timeout") {
            options.query_timeout = options::timeout("query_timeout", v)?;
        }
        if let Some(v) = url.param("purge_interval") {
            options.purge_interval = options::duration("purge_interval", v, options::MAX_INTERVAL)?;
        }
        if let Some(v) = url.param("pool_size") {
            options.pool_size = options::integer("pool_size", v, 1, MAX_POOL_SIZE)?;
        }
        if let Some(v) = url.param("table_prefix") {
            options.table_prefix = v.to_owned();
        }
        for s in &self.set {
            match *s {
                "query_timeout" => options.query_timeout = self.options.query_timeout,
                "pool_size" => options.pool_size = self.options.pool_size,
                "table_prefix" => options.table_prefix = self.options.table_prefix.clone(),
                _ => options.purge_interval = self.options.purge_interval,
            }
        }
        validate(&options)?;
        let tables = Tables::new(&options.table_prefix);
        let (dialect, driver): (Dialect, Arc<dyn Driver>) = match url.scheme.as_str() {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => (
                Dialect::Postgres,
                Arc::new(super::postgres::PgDriver::new(
                    &url,
                    self.pg_config,
                    &tls,
                    &options,
                    tables,
                )?),
            ),
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => (
                Dialect::Mysql,
                Arc::new(super::mysql::MyDriver::new(
                    &url,
                    self.mysql_opts,
                    &tls,
                    &options,
                    tables,
                )?),
            ),
            #[cfg(not(feature = "postgres"))]
            "postgres" | "postgresql" => {
                return Err(Error::FeatureDisabled {
                    scheme: url.scheme.clone(),
                    feature: "postgres",
                })
            }
            #[cfg(not(feature = "mysql"))]
            "mysql" | "mariadb" => {
                return Err(Error::FeatureDisabled {
                    scheme: url.scheme.clone(),
                    feature: "mysql",
                })
            }
            other => {
                return Err(url.invalid(format!(
                    "not a SQL scheme: {other:?} (known: postgres, postgresql, mysql, mariadb)"
                )))
            }
        };
        Ok(SqlBackend::new(dialect, driver, options))
    }
}

impl SqlBackend {
    /// A builder for `url` (`postgres://…` or `mysql://…`); see [`SqlBackendBuilder`].
    pub fn builder(url: impl Into<String>) -> SqlBackendBuilder {
        SqlBackendBuilder {
            url: url.into(),
            options: Options::default(),
            set: Vec::new(),
            tls_set: Vec::new(),
            #[cfg(feature = "postgres")]
            pg_config: None,
            #[cfg(feature = "mysql")]
            mysql_opts: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_options_are_validated() {
        let bad = Options {
            table_prefix: "x; drop table".into(),
            ..Options::default()
        };
        assert!(validate(&bad).is_err());
        assert!(validate(&Options::default()).is_ok());
        let huge = Options {
            query_timeout: Duration::MAX,
            ..Options::default()
        };
        assert!(validate(&huge).is_err());
    }

    #[test]
    fn unknown_url_options_are_named() {
        let e = SqlBackend::builder("postgres://u@127.0.0.1:1/db?pool=3")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("pool"), "{e}");
    }
}
