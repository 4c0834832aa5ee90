//! Building a [`ZooKeeperBackend`]: the [`ZooKeeperBuilder`] with its checks (root path,
//! timeouts, TLS files only with TLS), the `zookeeper://` and `zookeeper+tls://` URL
//! options, and the start of the reader and the backend's threads.

use super::acl::AclPolicy;
use super::connect::{Cfg, Reader};
use super::failure;
use super::session::Sessions;
#[cfg(feature = "tls")]
use super::tls;
use super::watch::{watch_loop, watchdog_loop};
use super::ZooKeeperBackend;
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::Subscribers;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Options of a [`ZooKeeperBackend`]; start with [`ZooKeeperBackend::builder`].
///
/// Timeouts must be more than zero and at most one hour
/// ([`MAX_TIMEOUT`](crate::backends::options::MAX_TIMEOUT)): [`build`](Self::build) fails with
/// [`Error::InvalidConfig`] naming the setting otherwise. `Debug` shows the auth schemes, never
/// their credentials.
#[derive(Clone)]
pub struct ZooKeeperBuilder {
    connect: String,
    root: String,
    auth: Vec<(String, Vec<u8>)>,
    acl: Option<AclPolicy>,
    connection_timeout: Duration,
    request_timeout: Duration,
    reader_session_timeout: Duration,
    tls: bool,
    /// `ca`, `cert`, `key`: paths of PEM files.
    tls_files: [Option<String>; 3],
    create_root: bool,
}

/// The names of the TLS file options, in the order of `ZooKeeperBuilder::tls_files`.
const TLS_FILES: [&str; 3] = ["ca", "cert", "key"];

impl std::fmt::Debug for ZooKeeperBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBuilder")
            .field("connect", &self.connect)
            .field("root", &self.root)
            .field(
                "auth_schemes",
                &self.auth.iter().map(|a| &a.0).collect::<Vec<_>>(),
            )
            .field("connection_timeout", &self.connection_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("tls", &self.tls)
            .field("tls_files", &self.tls_files)
            .finish()
    }
}

impl ZooKeeperBuilder {
    /// The root path under which all nodes live (default `/simba`).
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// Adds an auth info (`scheme`, credentials) that every client of the backend sends.
    pub fn auth(mut self, scheme: impl Into<String>, credentials: impl Into<Vec<u8>>) -> Self {
        self.auth.push((scheme.into(), credentials.into()));
        self
    }

    /// Adds `digest` auth as `user:password`. Without an explicit [`acl`](Self::acl), nodes
    /// then get [`AclPolicy::creator_all`].
    pub fn digest(self, user: &str, password: &str) -> Self {
        self.auth("digest", format!("{user}:{password}"))
    }

    /// The ACL of every node the backend creates. Default: [`AclPolicy::creator_all`] when auth
    /// infos are set, otherwise [`AclPolicy::open`] (unsafe on a shared ensemble).
    pub fn acl(mut self, policy: AclPolicy) -> Self {
        self.acl = Some(policy);
        self
    }

    /// Bounds how long opening a session (and the backend's own connection) may take
    /// (default 15 s; URL option `connection_timeout`, or `connect_timeout` as on Redis).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// The same as [`connection_timeout`](Self::connection_timeout), under the name the Redis
    /// backend gives this bound.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        self.connection_timeout(timeout)
    }

    /// Bounds every other ZooKeeper call (default 5 s; calls of a session are also bounded by
    /// its lease).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The session timeout of the backend's reader, the client that reads owners and members
    /// and carries the watches (default 10 s). When its session expires the reader reconnects
    /// with a new one and subscribers get
    /// [`Notification::Resync`](crate::spi::Notification::Resync).
    pub fn reader_session_timeout(mut self, timeout: Duration) -> Self {
        self.reader_session_timeout = timeout;
        self
    }

    /// Whether [`build`](Self::build) creates the root and its `leases`, `groups`, `delays`
    /// and `rw` nodes when they are missing (default `true`, with the [`AclPolicy`]). Off,
    /// building only reads: the nodes are created by the first lease or group write instead,
    /// and [`ZooKeeperBackend::acls`] lists the ones that exist (`simba doctor` builds its
    /// backend this way, and reports missing nodes instead of creating them).
    pub fn create_root(mut self, on: bool) -> Self {
        self.create_root = on;
        self
    }

    /// Connects over TLS to the servers' secure client port (feature `tls`; as the
    /// `zookeeper+tls://` URL scheme): every server's certificate must lead to [`ca`](Self::ca)
    /// (default: the platform's roots), be valid now and name the host (name or IP address)
    /// of the connect string. Never falls back to plaintext.
    ///
    /// ```no_run
    /// use simba_lease::backends::zookeeper::ZooKeeperBackend;
    /// let backend = ZooKeeperBackend::builder("zk1:2281,zk2:2281")
    ///     .tls(true)
    ///     .ca("/etc/zookeeper/ca.pem")
    ///     .digest("simba", "secret")
    ///     .build()?;
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// PEM file of the CA certificates to trust, as the URL option `ca`; needs
    /// [`tls`](Self::tls).
    pub fn ca(mut self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_files[0] = Some(path.as_ref().to_string_lossy().into_owned());
        self
    }

    /// PEM file of a client certificate, as the URL option `cert`; needs [`key`](Self::key)
    /// and [`tls`](Self::tls).
    pub fn cert(mut self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_files[1] = Some(path.as_ref().to_string_lossy().into_owned());
        self
    }

    /// PEM file of the client certificate's private key, as the URL option `key`.
    pub fn key(mut self, path: impl AsRef<std::path::Path>) -> Self {
        self.tls_files[2] = Some(path.as_ref().to_string_lossy().into_owned());
        self
    }

    /// Connects the backend's reader (members, owners, watches) and creates the root's
    /// `leases`, `groups`, `delays` and `rw` nodes if missing (see
    /// [`create_root`](Self::create_root)).
    ///
    /// With [`tls`](Self::tls), the PEM files are read first (one that cannot be read or
    /// holds no certificate or key is an [`Error::InvalidConfig`] naming its option), then a
    /// handshake with the servers is tried: when none completes one, `build` fails with
    /// [`Error::Tls`] naming the [`TlsFailure`](crate::TlsFailure).
    pub fn build(self) -> Result<ZooKeeperBackend> {
        if self.connect.trim().is_empty() {
            return Err(Error::config("connect", "no ZooKeeper host given"));
        }
        let root = self.root.trim_end_matches('/').to_owned();
        let valid = root.starts_with('/')
            && root[1..]
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..");
        if !valid {
            return Err(Error::config(
                "root",
                format!(
                    "{:?} is not an absolute ZooKeeper path other than /",
                    self.root
                ),
            ));
        }
        for (what, d) in [
            ("connection_timeout", self.connection_timeout),
            ("request_timeout", self.request_timeout),
            ("reader_session_timeout", self.reader_session_timeout),
        ] {
            options::check_timeout(what, d)?;
        }
        #[cfg(feature = "tls")]
        let tls = self.tls_config()?;
        #[cfg(not(feature = "tls"))]
        self.tls_config()?;
        let acl = self.acl.clone().unwrap_or_else(|| {
            if self.auth.is_empty() {
                AclPolicy::open()
            } else {
                AclPolicy::creator_all()
            }
        });
        let cfg = Arc::new(Cfg {
            #[cfg(feature = "tls")]
            tls,
            connect: self.connect.clone(),
            leases: format!("{root}/leases"),
            groups: format!("{root}/groups"),
            delays: format!("{root}/delays"),
            rw: format!("{root}/rw"),
            root,
            auth: self.auth.clone(),
            acl,
            connection_timeout: self.connection_timeout,
            request_timeout: self.request_timeout,
            reader_session_timeout: self.reader_session_timeout,
            create_root: self.create_root,
        });
        let reader = Arc::new(Reader {
            client: RwLock::new(None),
            stopped: AtomicBool::new(false),
        });
        let subscribers = Arc::new(Subscribers::default());
        let (client, watcher) = cfg.open_reader()?;
        *reader.client.write() = Some(client);
        {
            let (cfg, reader, subs) = (cfg.clone(), reader.clone(), subscribers.clone());
            std::thread::Builder::new()
                .name("simba-zk-watch".into())
                .spawn(move || watch_loop(cfg, reader, subs, watcher))
                .map_err(|e| failure::error("spawning the ZooKeeper watch thread", e))?;
        }
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        let inner = Arc::new(Sessions {
            cfg,
            reader,
            subscribers,
            sessions: Mutex::new(HashMap::new()),
            wake: wake_tx,
            place_delete_faults: std::sync::atomic::AtomicU32::new(0),
            rw_unsent_faults: std::sync::atomic::AtomicU32::new(0),
            rw_reply_faults: std::sync::atomic::AtomicU32::new(0),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("simba-zk-watchdog".into())
            .spawn(move || watchdog_loop(weak, wake_rx))
            .map_err(|e| failure::error("spawning the ZooKeeper watchdog", e))?;
        Ok(ZooKeeperBackend { inner })
    }

    /// The checked TLS settings, `None` without [`tls`](Self::tls); a diagnosing handshake
    /// fails fast on servers whose certificate is refused.
    #[cfg(feature = "tls")]
    fn tls_config(&self) -> Result<Option<Arc<tls::ZkTls>>> {
        self.check_tls_files()?;
        if !self.tls {
            return Ok(None);
        }
        let [ca, cert, key] = self.tls_files.each_ref().map(Option::as_deref);
        let t = tls::ZkTls::new(&self.connect, ca, cert, key)?;
        if let Some(e) = t.diagnose(self.connection_timeout, None) {
            return Err(e);
        }
        Ok(Some(Arc::new(t)))
    }

    /// Without the feature `tls`: refuses TLS.
    #[cfg(not(feature = "tls"))]
    fn tls_config(&self) -> Result<()> {
        self.check_tls_files()?;
        if self.tls {
            return Err(Error::config(
                "tls",
                "TLS to ZooKeeper needs the `tls` feature of simba-lease",
            ));
        }
        Ok(())
    }

    /// TLS files without TLS are refused, never ignored.
    fn check_tls_files(&self) -> Result<()> {
        if self.tls {
            return Ok(());
        }
        if self.connect.contains("tcp+tls://") {
            return Err(Error::config(
                "connect",
                "`tcp+tls://` needs TLS (a zookeeper+tls:// URL or `tls(true)`)",
            ));
        }
        match TLS_FILES
            .iter()
            .zip(&self.tls_files)
            .find(|(_, f)| f.is_some())
        {
            Some((option, _)) => Err(Error::config(
                *option,
                "TLS options need TLS (a zookeeper+tls:// URL or `tls(true)`)",
            )),
            None => Ok(()),
        }
    }
}

impl ZooKeeperBackend {
    /// A builder for the ensemble at `connect` (`host:port,host:port`, as ZooKeeper's
    /// connect string, without a chroot).
    pub fn builder(connect: impl Into<String>) -> ZooKeeperBuilder {
        ZooKeeperBuilder {
            connect: connect.into(),
            root: "/simba".into(),
            auth: Vec::new(),
            acl: None,
            connection_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(5),
            reader_session_timeout: Duration::from_secs(10),
            tls: false,
            tls_files: [None, None, None],
            create_root: true,
        }
    }

    /// A backend from a `zookeeper://` or `zookeeper+tls://` URL, as [`crate::connect`]
    /// builds it, but typed (for [`acls`](Self::acls) and
    /// [`server_clock_ms`](Self::server_clock_ms)).
    pub fn from_url(url: &str) -> Result<Self> {
        from_url(&crate::backends::BackendUrl::parse(url)?)
    }

    /// The builder of a `zookeeper://` or `zookeeper+tls://` URL (what [`from_url`](Self::from_url)
    /// builds), to change before building, e.g. with
    /// [`create_root(false)`](ZooKeeperBuilder::create_root).
    pub fn builder_from_url(url: &str) -> Result<ZooKeeperBuilder> {
        builder_from_url(&crate::backends::BackendUrl::parse(url)?)
    }

    /// A backend with the default options under `/simba` (open ACL).
    pub fn connect(connect: &str) -> Result<Self> {
        Self::builder(connect).build()
    }
}

/// Builds a backend from `zookeeper://[user:password@]h1:2181,h2:2181[/root][?options]` or
/// `zookeeper+tls://…` (default port 2281).
pub(crate) fn from_url(u: &crate::backends::BackendUrl) -> Result<ZooKeeperBackend> {
    builder_from_url(u)?.build()
}

/// The builder [`from_url`] builds.
pub(super) fn builder_from_url(u: &crate::backends::BackendUrl) -> Result<ZooKeeperBuilder> {
    u.check_params(&[
        "connection_timeout",
        "connect_timeout",
        "request_timeout",
        "acl",
        "ca",
        "cert",
        "key",
    ])?;
    let tls = match u.scheme.as_str() {
        "zookeeper" | "zk" => false,
        "zookeeper+tls" | "zk+tls" if cfg!(feature = "tls") => true,
        "zookeeper+tls" | "zk+tls" => {
            return Err(u.invalid("TLS (zookeeper+tls://) needs the `tls` feature of simba-lease"))
        }
        other => return Err(u.invalid(format!("not a ZooKeeper URL scheme: {other:?}"))),
    };
    if u.hosts.is_empty() {
        return Err(u.invalid("no ZooKeeper host given"));
    }
    let port = if tls { 2281 } else { 2181 };
    let hosts: Vec<String> = u.host_ports().iter().map(|h| h.with_port(port)).collect();
    let mut b = ZooKeeperBackend::builder(hosts.join(",")).tls(tls);
    if let Some(o) = TLS_FILES.into_iter().find(|o| !tls && u.param(o).is_some()) {
        return Err(Error::config(o, "TLS options need a zookeeper+tls:// URL"));
    }
    if let Some(v) = u.param("ca") {
        b = b.ca(v);
    }
    if let Some(v) = u.param("cert") {
        b = b.cert(v);
    }
    if let Some(v) = u.param("key") {
        b = b.key(v);
    }
    if !u.path.is_empty() && u.path != "/" {
        b = b.root(u.path.clone());
    }
    if let Some(user) = &u.user {
        b = b.digest(user, u.password.as_deref().unwrap_or(""));
    }
    // `connect_timeout`: the name the Redis backend gives the same bound.
    if u.param("connect_timeout").is_some() && u.param("connection_timeout").is_some() {
        return Err(Error::config(
            "connect_timeout",
            "the same as `connection_timeout`: give one of them",
        ));
    }
    for option in ["connect_timeout", "connection_timeout"] {
        if let Some(v) = u.param(option) {
            b = b.connection_timeout(options::timeout(option, v)?);
        }
    }
    if let Some(v) = u.param("request_timeout") {
        b = b.request_timeout(options::timeout("request_timeout", v)?);
    }
    match u.param("acl") {
        None => {}
        Some("open") => b = b.acl(AclPolicy::open()),
        Some("creator") => b = b.acl(AclPolicy::creator_all()),
        Some(other) => {
            return Err(Error::config(
                "acl",
                format!("{}: expected open or creator", options::quote(other)),
            ))
        }
    }
    Ok(b)
}
