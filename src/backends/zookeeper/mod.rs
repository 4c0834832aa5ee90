//! The ZooKeeper backend (feature `zookeeper`).
//!
//! # Nodes
//!
//! | path | kind | content |
//! |---|---|---|
//! | `{root}/leases/{name}` | ephemeral | the holder's session id, a line feed and the term's value (empty until set; the node lives one term); owner = `ephemeralOwner`, token = `czxid` |
//! | `{root}/groups/{group}` | container | — |
//! | `{root}/groups/{group}/{sessionId}` | ephemeral | the member session's metadata |
//! | `{root}/queues/{name}/q-{sessionId}-{n}` | ephemeral sequential | a fair-lock waiter's place: its patience in ms (see `queue.rs`) |
//!
//! `root` defaults to `/simba`; missing parents are created with the ACL policy.
//!
//! # Sessions
//!
//! A Simba session is one ZooKeeper session on a dedicated client that is never reconnected
//! to another session (an expired ZooKeeper session stays expired). Its id is the ZooKeeper
//! session id as 16 hex digits. The requested session timeout is the lease; when the servers
//! grant less (a lease above their `maxSessionTimeout`), opening fails with
//! [`Error::InvalidConfig`] naming both, since sessions would expire between keep-alives. The
//! remaining time reported is `min(lease, negotiated timeout)`. While the client is
//! disconnected, keep-alive, acquire and join fail at once, so the engine's local deadline runs
//! out; when ZooKeeper reports the session expired, the session is expired, and release and
//! leave on it return `false`. Because the client heartbeats on its own, a local watchdog
//! closes every session that no keep-alive renewed within its lease. Closing waits for the
//! server's confirmation only while the client is connected: a disconnected client sends the
//! close once it reconnects, or the server expires the session.
//!
//! # Round trips
//!
//! acquire: 1 (a create, with an `exists` with a watch sent behind it, whose reply the next
//! keep-alive applies: a request sent right after an acquire waits for it); keep-alive: 1 (an
//! `exists` of `{root}/leases`, or of the few lease nodes whose create's outcome is unknown),
//! whatever the number of leases held, plus 1 when a held node's watch fired (see below);
//! release: 2
//! (read owner and czxid, then delete that version); set a term value: 2 (read owner and
//! czxid, then `setData` of that version; the holder's next keep-alive reads the node once,
//! its watch having fired); acquire with a value: 3 (the create, then the value); join: 1
//! (2–3 when the group node is missing); leave: 1; owner: 1; members: 3 (sync, children, multi read); ping: 1 (`exists` of
//! the root); list: 4 plus 3 per group (sync, children of `leases` and `groups`, one multi
//! read of the lease nodes, then each group's members).
//!
//! # Watches
//!
//! Each session's client keeps a data watch on every lease node it holds (armed by the
//! acquire's `exists`); a keep-alive reports the held leases whose watch has not fired without
//! reading them, and reads again only those whose watch fired (deleted, re-created, data
//! changed): ZooKeeper delivers a watch event before the reply of any later request of the
//! session, so a lease lost before a keep-alive is never reported by it (the proof is in
//! `held.rs`). After a reconnect the client sets its watches again (`SetWatches`), and the
//! server fires those of the nodes changed meanwhile before answering anything else. The
//! price: one watch per held lease on the servers.
//!
//! One shared reader client per backend (its own ZooKeeper session, which holds no nodes and
//! is replaced if it expires) reads owners and members and carries a single persistent
//! recursive watch on `{root}`. The backend adds it again after a reconnect of the same
//! session (`zookeeper-client` 0.11 sets only data, exist and child watches again), and a
//! recursive one sees a member node created under a group that did not exist
//! yet without any per-group bookkeeping; a lease node's creation (a new term) becomes
//! [`Notification::Acquired`] (so does a change of its data: a new term value), its deletion
//! [`Notification::Released`], a member node's creation or deletion
//! [`Notification::GroupChanged`], and a reconnect of the reader [`Notification::Resync`] (events during a disconnection may be lost, ZOOKEEPER-4698). The
//! price: every node change under the root is sent to every backend instance's reader.
//!
//! # TLS
//!
//! Feature `tls` (rustls, `ring` provider):
//! `zookeeper+tls://[user:password@]h1:2281,h2:2281[/root][?options]` (also `zk+tls://`;
//! default port 2281), or [`ZooKeeperBuilder::tls`], connects to every server's secure client
//! port; never to a plaintext one.
//!
//! | option | builder | meaning |
//! |---|---|---|
//! | `ca` | [`ca`](ZooKeeperBuilder::ca) | PEM file of the CA certificates to trust (default: the platform's roots) |
//! | `cert` | [`cert`](ZooKeeperBuilder::cert) | PEM file of a client certificate (chain); needs `key` |
//! | `key` | [`key`](ZooKeeperBuilder::key) | PEM file of its private key; needs `cert` |
//!
//! The host (name or IP address) of each server must be one its certificate names (there is no
//! `verify-ca` mode: `zookeeper-client` skips the host check only through an `unsafe` call).
//! A file that cannot be read or holds no PEM certificate (`ca`, `cert`) or private key (`key`),
//! a key that does not fit its certificate, or a TLS option on a `zookeeper://` URL (or without
//! [`tls`](ZooKeeperBuilder::tls)) is an [`Error::InvalidConfig`] naming the option. Since
//! `zookeeper-client` retries a refused handshake without saying why until its deadline, the
//! backend shakes hands itself (the same trust, client certificate and host check) when it is
//! built and whenever a connect fails: an unknown CA, an expired certificate, a wrong host name
//! or a client certificate the server refused fails with [`Error::Tls`] naming the
//! [`TlsFailure`](crate::TlsFailure) and the server. A `zookeeper://` URL (feature `tls` on)
//! whose server answers a TLS handshake fails with an [`Error::Backend`] saying so. Digest
//! auth works over TLS as without.
//!
//! # Security
//!
//! By default nodes get the open ACL (`world:anyone` ALL): **unsafe on a shared ensemble**,
//! since any client can then delete or pre-create lease nodes and forge group members. Use
//! [`ZooKeeperBuilder::digest`] (or [`ZooKeeperBuilder::auth`]) and
//! [`AclPolicy::creator_all`]: every client the backend opens adds the auth infos, and every
//! node it creates (including parents) gets the policy's ACL. Parents that already exist keep
//! their ACL; the ACL of `{root}/leases` and `{root}/groups/{group}` decides who may create or
//! delete leases and members.

mod facade;
mod failure;
mod held;
mod jobs;
mod queue;
#[cfg(feature = "tls")]
mod tls;

use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::{
    Acquire, GroupInfo, HeldLease, KeepAlive, LeaseBackend, LeaseInfo, Listing, Notification,
    NotifySink, Queued, SessionGrant, SessionInfo, Subscribers, Subscription,
};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use facade::{backend as zk_err, call, state_error};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// Permissions of an [`Acl`] entry (ZooKeeper's `READ | WRITE | CREATE | DELETE | ADMIN`);
/// combine them with `|`.
///
/// ```
/// use simba_lease::backends::zookeeper::Perms;
/// assert_eq!(Perms::READ | Perms::WRITE | Perms::CREATE | Perms::DELETE | Perms::ADMIN, Perms::ALL);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Perms(u8);

impl std::ops::BitOr for Perms {
    type Output = Perms;

    fn bitor(self, other: Perms) -> Perms {
        Perms(self.0 | other.0)
    }
}

impl Perms {
    /// Read data and list children.
    pub const READ: Perms = Perms(1);
    /// Set data.
    pub const WRITE: Perms = Perms(2);
    /// Create children.
    pub const CREATE: Perms = Perms(4);
    /// Delete children.
    pub const DELETE: Perms = Perms(8);
    /// Set the ACL.
    pub const ADMIN: Perms = Perms(16);
    /// Everything.
    pub const ALL: Perms = Perms(31);

    fn to_zk(self) -> zk::Permission {
        [
            (1, zk::Permission::READ),
            (2, zk::Permission::WRITE),
            (4, zk::Permission::CREATE),
            (8, zk::Permission::DELETE),
            (16, zk::Permission::ADMIN),
        ]
        .into_iter()
        .filter(|(bit, _)| self.0 & bit != 0)
        .fold(zk::Permission::NONE, |acc, (_, p)| acc | p)
    }
}

/// One ACL entry: permissions for an identity (`scheme:id`, e.g. `digest:simba:base64hash`,
/// `world:anyone`, or `auth:` for "whoever created the node").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Acl {
    /// What the identity may do.
    pub perms: Perms,
    /// The scheme: `world`, `auth`, `digest`, `ip`, `sasl`, …
    pub scheme: String,
    /// The identity within the scheme.
    pub id: String,
}

impl Acl {
    /// An entry for `scheme:id`.
    pub fn new(perms: Perms, scheme: impl Into<String>, id: impl Into<String>) -> Self {
        Acl {
            perms,
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    fn to_zk(&self) -> zk::Acl {
        zk::Acl::new(self.perms.to_zk(), zk::AuthId::new(&self.scheme, &self.id))
    }

    fn from_zk(acl: &zk::Acl) -> Self {
        let p = acl.permission();
        let perms = [
            (zk::Permission::READ, Perms::READ),
            (zk::Permission::WRITE, Perms::WRITE),
            (zk::Permission::CREATE, Perms::CREATE),
            (zk::Permission::DELETE, Perms::DELETE),
            (zk::Permission::ADMIN, Perms::ADMIN),
        ]
        .into_iter()
        .filter(|(z, _)| p.has(*z))
        .fold(Perms(0), |acc, (_, ours)| acc | ours);
        Acl::new(perms, acl.scheme(), acl.id())
    }

    /// Whether this entry lets anyone (`world:anyone`) create or delete nodes.
    pub fn is_open(&self) -> bool {
        self.scheme == "world" && self.id == "anyone" && self.perms.0 & (4 | 8) != 0
    }
}

type AclFn = dyn Fn(&str) -> Vec<Acl> + Send + Sync;

/// The ACL given to every node the backend creates, parents included. It must leave the
/// backend's own identity READ, CREATE and DELETE on them.
///
/// ```
/// use simba_lease::backends::zookeeper::{Acl, AclPolicy, Perms};
/// let _open = AclPolicy::open(); // the default: unsafe on a shared ensemble
/// let _mine = AclPolicy::creator_all(); // needs auth infos on the backend
/// let _custom = AclPolicy::per_path(|path| {
///     vec![Acl::new(Perms::ALL, "auth", ""), Acl::new(Perms::READ, "world", "anyone")]
/// });
/// ```
#[derive(Clone)]
pub struct AclPolicy(Arc<AclFn>);

impl AclPolicy {
    /// `world:anyone` with every permission (ZooKeeper's `OPEN_ACL_UNSAFE`).
    pub fn open() -> Self {
        Self::fixed(vec![Acl::new(Perms::ALL, "world", "anyone")])
    }

    /// Every permission for the creating identity only (ZooKeeper's `CREATOR_ALL_ACL`);
    /// the backend must be given auth infos.
    pub fn creator_all() -> Self {
        Self::fixed(vec![Acl::new(Perms::ALL, "auth", "")])
    }

    /// The same ACL for every path.
    pub fn fixed(acl: Vec<Acl>) -> Self {
        AclPolicy(Arc::new(move |_| acl.clone()))
    }

    /// An ACL chosen per node path (like Curator's `ACLProvider`).
    pub fn per_path(f: impl Fn(&str) -> Vec<Acl> + Send + Sync + 'static) -> Self {
        AclPolicy(Arc::new(f))
    }

    fn for_path(&self, path: &str) -> Vec<zk::Acl> {
        (self.0)(path).iter().map(Acl::to_zk).collect()
    }
}

impl Default for AclPolicy {
    fn default() -> Self {
        Self::open()
    }
}

impl std::fmt::Debug for AclPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AclPolicy")
    }
}

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
    /// with a new one and subscribers get [`Notification::Resync`].
    pub fn reader_session_timeout(mut self, timeout: Duration) -> Self {
        self.reader_session_timeout = timeout;
        self
    }

    /// Whether [`build`](Self::build) creates the root and its `leases` and `groups` nodes
    /// when they are missing (default `true`, with the [`AclPolicy`]). Off, building only
    /// reads: the nodes are created by the first lease or group write instead, and
    /// [`ZooKeeperBackend::acls`] lists the ones that exist (`simba doctor` builds its backend
    /// this way, and reports missing nodes instead of creating them).
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
    /// `leases` and `groups` nodes if missing.
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
        let inner = Arc::new(Inner {
            cfg,
            reader,
            subscribers,
            sessions: Mutex::new(HashMap::new()),
            wake: wake_tx,
            place_delete_faults: std::sync::atomic::AtomicU32::new(0),
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

struct Cfg {
    #[cfg(feature = "tls")]
    tls: Option<Arc<tls::ZkTls>>,
    connect: String,
    root: String,
    leases: String,
    groups: String,
    auth: Vec<(String, Vec<u8>)>,
    acl: AclPolicy,
    connection_timeout: Duration,
    request_timeout: Duration,
    reader_session_timeout: Duration,
    create_root: bool,
}

impl Cfg {
    fn connector(&self, session_timeout: Duration) -> zk::Connector {
        let mut c = zk::Client::connector().with_session_timeout(session_timeout);
        for (scheme, cred) in &self.auth {
            c = c.with_auth(scheme, cred);
        }
        c
    }

    fn connect(&self, session_timeout: Duration) -> Result<zk::Client> {
        #[cfg(feature = "tls")]
        if let Some(t) = &self.tls {
            let connector = self.connector(session_timeout).with_tls(t.options.clone());
            let fut = connector.secure_connect(&self.connect);
            let e = match call(tls::CONNECTING, self.connection_timeout, fut) {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(e)) => zk_err(tls::CONNECTING, e),
                Err(e) => e,
            };
            // The client does not say why: a refused handshake is worth naming.
            let linger = Some(Duration::from_secs(1));
            return Err(t.diagnose(self.connection_timeout, linger).unwrap_or(e));
        }
        let fut = self.connector(session_timeout).connect(&self.connect);
        let e = match call("connecting to ZooKeeper", self.connection_timeout, fut) {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => zk_err("connecting to ZooKeeper", e),
            Err(e) => e,
        };
        // A plaintext client on a secure client port only sees the connection close; a TLS
        // server answers a handshake within a round trip, so a second bounds the look.
        #[cfg(feature = "tls")]
        if let Some(tls_port) = tls::plaintext_to_tls_port(
            &self.connect,
            self.connection_timeout.min(Duration::from_secs(1)),
        ) {
            return Err(tls_port);
        }
        Err(e)
    }

    fn open_reader(&self) -> Result<(zk::Client, zk::PersistentWatcher)> {
        let client = self.connect(self.reader_session_timeout)?;
        if self.create_root {
            self.mkdirs(&client, &self.leases, self.request_timeout)?;
            self.mkdirs(&client, &self.groups, self.request_timeout)?;
        }
        let w = client.watch(&self.root, zk::AddWatchMode::PersistentRecursive);
        let watcher = call("watching the root", self.request_timeout, w)?
            .map_err(|e| zk_err("watching the root", e))?;
        Ok((client, watcher))
    }

    /// Creates `path` and its missing ancestors, each with the policy's ACL.
    fn mkdirs(&self, client: &zk::Client, path: &str, limit: Duration) -> Result<()> {
        let mut prefix = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            prefix.push('/');
            prefix.push_str(part);
            let acl = self.acl.for_path(&prefix);
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
            match call(
                "creating parents",
                limit,
                client.create(&prefix, &[], &opts),
            )? {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(zk_err("creating parents", e)),
            }
        }
        Ok(())
    }

    fn lease_path(&self, name: &LeaseName) -> String {
        format!("{}/{}", self.leases, name.as_str())
    }

    fn group_path(&self, group: &GroupName) -> String {
        format!("{}/{}", self.groups, group.as_str())
    }
}

/// The shared client that reads owners and members and carries the watches.
struct Reader {
    client: RwLock<Option<zk::Client>>,
    stopped: AtomicBool,
}

impl Reader {
    fn client(&self) -> Result<zk::Client> {
        self.client.read().clone().ok_or(Error::Closed)
    }
}

/// One Simba session: a dedicated ZooKeeper client.
struct ZkSession {
    id: SessionId,
    raw: i64,
    negotiated: Duration,
    metadata: Metadata,
    client: Mutex<Option<zk::Client>>,
    states: zk::StateWatcher,
    /// The watchdog deadline: last keep-alive sent + lease.
    deadline: Mutex<Instant>,
    lease: Mutex<Duration>,
    /// The possibly-owned lease names and the watches of the held ones.
    possibly: Mutex<held::Leases>,
    releasing: Mutex<()>,
    closed: Mutex<bool>,
    /// Own queue places (path, data version) whose delete after a grant failed: the next
    /// keep-alive deletes them at that version (see `queue`).
    orphans: Mutex<Vec<(String, i32)>>,
}

impl ZkSession {
    fn client(&self) -> Result<zk::Client> {
        self.client.lock().clone().ok_or_else(|| self.expired())
    }

    fn expired(&self) -> Error {
        Error::SessionExpired {
            session: self.id.clone(),
        }
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock()
    }

    /// The time limit of this session's calls.
    fn limit(&self, cfg: &Cfg) -> Duration {
        cfg.request_timeout.min(*self.lease.lock())
    }

    /// Time left as of `at`: never beyond the negotiated timeout or the watchdog deadline.
    fn remaining_at(&self, at: Instant) -> Duration {
        let left = self.deadline().saturating_duration_since(at);
        left.min(self.negotiated).max(Duration::from_millis(1))
    }

    fn gone(&self) -> bool {
        Instant::now() >= self.deadline() || self.states.peek_state().is_terminated()
    }

    /// Fails unless the client is connected (a disconnected session must not look renewed).
    fn check_connected(&self, operation: &'static str) -> Result<()> {
        match self.states.peek_state() {
            zk::SessionState::SyncConnected => Ok(()),
            s if s.is_terminated() => Err(self.expired()),
            s => Err(state_error(
                operation,
                format!("ZooKeeper session {} is {s}", self.id),
            )),
        }
    }

    /// Forgets a possibly-owned name unless another create of it was sent since `seq`.
    fn forget(&self, name: &LeaseName, seq: u64) {
        self.possibly.lock().forget(name, seq);
    }

    /// Records a successful keep-alive: the watchdog deadline moves to `until`. Fails once
    /// the session is closed (or closing): the renewal must then not count.
    fn renew(&self, until: Instant, lease: Duration) -> bool {
        let closed = self.closed.lock();
        if *closed {
            return false;
        }
        *self.lease.lock() = lease;
        let mut d = self.deadline.lock();
        *d = (*d).max(until);
        true
    }

    /// Drops this session's client (which sends CloseSession once no call uses it any more),
    /// without waiting.
    fn begin_close(&self) {
        drop(self.client.lock().take());
        self.possibly.lock().drop_sent();
    }

    /// Closes the ZooKeeper session and, while the client is connected, waits (until `end`)
    /// for the server to confirm it, so its ephemeral nodes are gone when this returns
    /// normally. A client that is disconnected (or whose session already ended) is not waited
    /// for: the close cannot reach the server now; the dropped client sends it once it
    /// reconnects, or the server expires the session. With `only_if_gone`, the session is
    /// closed only if it is still [`gone`](Self::gone) under the lifecycle lock (a renewal may
    /// have won the race). Returns whether the session is closed.
    fn shutdown_until(&self, end: Instant, only_if_gone: bool) -> bool {
        let mut closed = self.closed.lock();
        if *closed {
            return true;
        }
        if only_if_gone && !self.gone() {
            return false;
        }
        self.begin_close();
        let mut states = self.states.clone();
        loop {
            match states.state() {
                s if s.is_terminated() => break,
                zk::SessionState::Disconnected => {
                    log::debug!(
                        "ZooKeeper session {} closed while disconnected: the server ends it",
                        self.id
                    );
                    break;
                }
                _ => {}
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || facade::block_on_for(states.changed(), left).is_none() {
                log::warn!("closing ZooKeeper session {} not confirmed", self.id);
                break;
            }
        }
        *closed = true;
        true
    }
}

struct Inner {
    cfg: Arc<Cfg>,
    reader: Arc<Reader>,
    subscribers: Arc<Subscribers>,
    sessions: Mutex<HashMap<SessionId, Arc<ZkSession>>>,
    wake: crossbeam_channel::Sender<()>,
    /// Deletes of own queue places to fail on purpose (tests).
    place_delete_faults: std::sync::atomic::AtomicU32,
}

impl Inner {
    fn expired(id: &SessionId) -> Error {
        Error::SessionExpired {
            session: id.clone(),
        }
    }

    /// Closes `s` and forgets it.
    fn expire(&self, s: &ZkSession) {
        s.shutdown_until(options::deadline(self.cfg.request_timeout), false);
        self.sessions.lock().remove(&s.id);
    }

    /// Closes and forgets `s` if it is still gone (expired, or its lease ran out without a
    /// keep-alive) once it holds the lifecycle lock; returns whether it did.
    fn expire_if_gone(&self, s: &ZkSession) -> bool {
        let end = options::deadline(self.cfg.request_timeout);
        if s.shutdown_until(end, true) {
            self.sessions.lock().remove(&s.id);
            true
        } else {
            false
        }
    }

    /// The session if it is live; an expired one is closed and forgotten.
    fn live(&self, id: &SessionId) -> Result<Arc<ZkSession>> {
        let s = self
            .sessions
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| Self::expired(id))?;
        if s.gone() && self.expire_if_gone(&s) {
            return Err(Self::expired(id));
        }
        Ok(s)
    }

    /// [`Inner::fail`] for release and leave, which change nothing on a session that ended
    /// (meanwhile): `Ok(false)`, as the contract says.
    fn fail_unchanged(&self, s: &ZkSession, operation: &'static str, e: zk::Error) -> Result<bool> {
        match self.fail(s, operation, e) {
            Error::SessionExpired { .. } => Ok(false),
            e => Err(e),
        }
    }

    /// The session if it is known and live, for release and leave; `None` (nothing to
    /// change) for an unknown, closed or expired one, which is then closed and forgotten.
    fn live_or_none(&self, id: &SessionId) -> Option<Arc<ZkSession>> {
        let s = self.sessions.lock().get(id).cloned()?;
        if s.gone() && self.expire_if_gone(&s) {
            return None;
        }
        Some(s)
    }

    /// Maps a ZooKeeper error of a session call; an expired session is closed and forgotten.
    fn fail(&self, s: &ZkSession, operation: &'static str, e: zk::Error) -> Error {
        match e {
            zk::Error::SessionExpired | zk::Error::SessionMoved | zk::Error::ClientClosed => {
                self.expire(s);
                s.expired()
            }
            e => zk_err(operation, e),
        }
    }

    fn local_session_by_raw(&self, raw: i64) -> Option<Arc<ZkSession>> {
        let id = SessionId::from_u64(raw as u64);
        self.sessions.lock().get(&id).cloned()
    }

    fn owner_of(&self, stat: &zk::Stat) -> Result<Owner> {
        // A persistent node (no ephemeral owner) was not created by a session of this
        // backend: it never goes away by itself, so it is no holder with a remaining time.
        if stat.ephemeral_owner == 0 {
            return Err(failure::error(
                "reading a lease node",
                "the lease node is not ephemeral (created outside simba-lease); delete it",
            ));
        }
        let remaining = self.remaining_of(stat.ephemeral_owner);
        Ok(Owner {
            session: SessionId::from_u64(stat.ephemeral_owner as u64),
            token: token(stat)?,
            remaining,
            value: String::new(),
        })
    }

    /// [`Inner::owner_of`] with the term's value from the node's data.
    fn owner_with_value(&self, data: &[u8], stat: &zk::Stat) -> Result<Owner> {
        let mut owner = self.owner_of(stat)?;
        owner.value = value_of(data);
        Ok(owner)
    }

    /// The time the session with ZooKeeper id `raw` has left: known for a session of this
    /// backend; for another client's, the reader's negotiated session timeout stands in.
    fn remaining_of(&self, raw: i64) -> Duration {
        match self.local_session_by_raw(raw) {
            Some(s) => s.remaining_at(Instant::now()),
            None => self
                .reader
                .client()
                .map(|c| c.session_timeout())
                .unwrap_or(self.cfg.request_timeout),
        }
    }

    fn sweep(&self) -> (usize, Option<Instant>) {
        let all: Vec<Arc<ZkSession>> = self.sessions.lock().values().cloned().collect();
        let mut n = 0;
        let mut next: Option<Instant> = None;
        for s in all {
            if s.gone() && self.expire_if_gone(&s) {
                log::debug!("watchdog: closed ZooKeeper session {}", s.id);
                n += 1;
            } else {
                let d = s.deadline();
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        (n, next)
    }
}

/// A lease node's data: the holder's session id, then after a line feed the term's value
/// (none until the holder sets one; the node lives for one term only).
fn lease_data(session: &SessionId, value: &str) -> Vec<u8> {
    format!("{session}\n{value}").into_bytes()
}

/// The term value in a lease node's data (empty when there is none, or it is not UTF-8).
fn value_of(data: &[u8]) -> String {
    std::str::from_utf8(data)
        .ok()
        .and_then(|d| d.split_once('\n'))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default()
}

/// The token of a lease node: its czxid, which is positive (a zxid of 0 or below is no
/// creation a server could have made).
fn token(stat: &zk::Stat) -> Result<Token> {
    u64::try_from(stat.czxid)
        .ok()
        .and_then(|z| Token::new(z).ok())
        .ok_or_else(|| {
            failure::error(
                "reading a lease node",
                format!("lease node with czxid {}", stat.czxid),
            )
        })
}

type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<Vec<held::Seen>, zk::Error>> + Send + 'a>>;

/// Sends an `exists` with a watch of each name's lease node at once (requests are queued when
/// their futures are created), or an `exists` of `{root}/leases` when there is none; the
/// future resolves once every reply is in.
fn read_leases<'a>(
    client: &'a zk::Client,
    cfg: &Cfg,
    names: &[(LeaseName, u64)],
) -> ReadFuture<'a> {
    if names.is_empty() {
        let f = client.check_stat(&cfg.leases);
        return Box::pin(async move { f.await.map(|_| Vec::new()) });
    }
    let reads: Vec<_> = names
        .iter()
        .map(|(n, _)| client.check_and_watch_stat(&cfg.lease_path(n)))
        .collect();
    Box::pin(async move {
        let mut seen = Vec::with_capacity(reads.len());
        for r in reads {
            seen.push(r.await?);
        }
        Ok(seen)
    })
}

/// Leases, sessions and groups in ZooKeeper: see the [module docs](self).
///
/// ```no_run
/// use simba_lease::backends::zookeeper::{AclPolicy, ZooKeeperBackend};
/// use simba_lease::{Config, Session};
/// use std::{sync::Arc, time::Duration};
/// let backend = ZooKeeperBackend::builder("zk1:2181,zk2:2181,zk3:2181")
///     .root("/simba")
///     .digest("simba", "secret")
///     .acl(AclPolicy::creator_all())
///     .connection_timeout(Duration::from_secs(10))
///     .build()?;
/// let session = Session::open(Arc::new(backend), Config::default())?;
/// # Ok::<(), simba_lease::Error>(())
/// ```
pub struct ZooKeeperBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("connect", &self.inner.cfg.connect)
            .field("root", &self.inner.cfg.root)
            .finish()
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

    /// The root path.
    pub fn root(&self) -> &str {
        &self.inner.cfg.root
    }

    /// Makes the next `n` deletes of queue places fail as a lost connection would (for tests
    /// of the retry).
    #[doc(hidden)]
    pub fn fail_place_deletes(&self, n: u32) {
        self.inner.fail_place_deletes(n);
    }

    /// The ACLs of the root and of its `leases` and `groups` nodes, as `(path, entries)`
    /// (read by the backend's reader with its auth infos); a node that does not exist (see
    /// [`ZooKeeperBuilder::create_root`]) is left out. Used by `simba doctor`.
    pub fn acls(&self) -> Result<Vec<(String, Vec<Acl>)>> {
        const OP: &str = "reading ACLs";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        let mut out = Vec::new();
        for path in [&inner.cfg.root, &inner.cfg.leases, &inner.cfg.groups] {
            let (acl, _) = match call(OP, inner.cfg.request_timeout, client.get_acl(path))? {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(zk_err(OP, e)),
            };
            out.push((path.clone(), acl.iter().map(Acl::from_zk).collect()));
        }
        Ok(out)
    }

    /// The ensemble's clock: creates an ephemeral node under the root (with the ACL policy)
    /// and deletes it. Returns its `mtime` (UTC epoch ms, set by the server that ordered the
    /// write) and this host's wall clock at the midpoint of the create's round trip (UTC
    /// epoch ms). Leases never depend on it; `simba doctor` reports the difference.
    pub fn server_clock_ms(&self) -> Result<(i64, i64)> {
        const OP: &str = "reading the server's clock";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        let path = format!(
            "{}/simba-clock-{}",
            inner.cfg.root,
            &SessionId::random().as_str()[..16]
        );
        let acl = inner.cfg.acl.for_path(&path);
        let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
        let sent = unix_ms();
        let created = call(
            OP,
            inner.cfg.request_timeout,
            client.create(&path, &[], &opts),
        )?;
        let local = (sent + unix_ms()) / 2;
        let (stat, _) = created.map_err(|e| zk_err(OP, e))?;
        match call(OP, inner.cfg.request_timeout, client.delete(&path, None))? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_err(OP, e)),
        }
        Ok((stat.mtime, local))
    }
}

/// This host's wall clock as UTC epoch ms.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

impl Drop for ZooKeeperBackend {
    fn drop(&mut self) {
        self.inner.reader.stopped.store(true, Ordering::SeqCst);
        self.inner.reader.client.write().take();
        let sessions: Vec<_> = self.inner.sessions.lock().drain().map(|(_, s)| s).collect();
        // Close all at once, then wait for the confirmations under one deadline.
        sessions.iter().for_each(|s| s.begin_close());
        let end = options::deadline(self.inner.cfg.request_timeout);
        for s in sessions {
            s.shutdown_until(end, false);
        }
    }
}

impl LeaseBackend for ZooKeeperBackend {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        crate::backends::options::check_lease(lease)?;
        let inner = &self.inner;
        let sent = Instant::now();
        let client = inner.cfg.connect(lease)?;
        let raw = client.session_id().0;
        let negotiated = client.session_timeout();
        let id = SessionId::from_u64(raw as u64);
        // ZooKeeper gets the lease in whole milliseconds and clamps it into the servers'
        // [minSessionTimeout, maxSessionTimeout]. Clamped down, the session would live less
        // than the lease, and a renew interval valid for the lease could exceed it: every
        // session would then expire between keep-alives.
        if negotiated.as_millis() < lease.as_millis() {
            drop(client); // closes the ZooKeeper session in the background
            return Err(Error::config(
                "lease",
                format!(
                    "ZooKeeper granted a session timeout of {negotiated:?}, shorter than the \
                     lease {lease:?} (the servers' maxSessionTimeout): sessions would expire \
                     between keep-alives; use a lease of at most {negotiated:?} or raise \
                     maxSessionTimeout"
                ),
            ));
        }
        let s = Arc::new(ZkSession {
            id: id.clone(),
            raw,
            negotiated,
            metadata: metadata.clone(),
            states: client.state_watcher(),
            client: Mutex::new(Some(client)),
            deadline: Mutex::new(sent + lease),
            lease: Mutex::new(lease),
            possibly: Mutex::new(held::Leases::default()),
            releasing: Mutex::new(()),
            closed: Mutex::new(false),
            orphans: Mutex::new(Vec::new()),
        });
        let remaining = s.remaining_at(sent);
        inner.sessions.lock().insert(id.clone(), s);
        let _ = inner.wake.send(());
        Ok(SessionGrant { id, remaining })
    }

    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        crate::backends::options::check_lease(lease)?;
        const OP: &str = "keep-alive";
        let inner = &self.inner;
        let s = inner.live(session)?;
        s.check_connected(OP)?;
        let client = s.client()?;
        let sent = Instant::now();
        let limit = s.limit(&inner.cfg);
        // The names to read are chosen and their reads (or the one `exists`) sent under one
        // lock, so every create counted was queued before them: see `held` for why the
        // watches of the other held leases make reading them unnecessary.
        let (reads, mark, fut) = {
            let mut p = s.possibly.lock();
            let (reads, mark) = p.unsure();
            let fut = read_leases(&client, &inner.cfg, &reads);
            (reads, mark, fut)
        };
        let seen = match call(OP, limit, fut)? {
            Ok(r) => r,
            Err(e) => return Err(inner.fail(&s, OP, e)),
        };
        if !s.renew(sent + lease, lease) {
            // The watchdog (or a close) won the race: the nodes may be gone already.
            return Err(s.expired());
        }
        let (mut held, again) = {
            let mut p = s.possibly.lock();
            for ((name, seq), seen) in reads.iter().zip(seen) {
                p.observe(name, *seq, s.raw, seen)?;
            }
            let mut again = p.collect_sent(mark, s.raw)?;
            let (held, fired) = p.settled();
            again.extend(fired);
            (held, again)
        };
        if !again.is_empty() {
            // Watches fired (those nodes changed, maybe after the requests), or an acquire's
            // `exists` failed: read them again.
            let fut = read_leases(&client, &inner.cfg, &again);
            let seen = match call(OP, limit, fut)? {
                Ok(r) => r,
                Err(e) => return Err(inner.fail(&s, OP, e)),
            };
            let mut p = s.possibly.lock();
            for ((name, seq), seen) in again.into_iter().zip(seen) {
                if let Some(token) = p.observe(&name, seq, s.raw, seen)? {
                    held.push((name, token));
                }
            }
        }
        inner.delete_orphans(&s, &client);
        let remaining = lease.min(s.negotiated);
        let leases = held
            .into_iter()
            .map(|(name, token)| HeldLease {
                name,
                token,
                remaining,
            })
            .collect();
        Ok(KeepAlive { remaining, leases })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        let s = self.inner.sessions.lock().get(session).cloned();
        if let Some(s) = s {
            self.inner.expire(&s);
        }
        Ok(())
    }

    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        const OP: &str = "acquiring a lease";
        let inner = &self.inner;
        let s = inner.live(session)?;
        let path = inner.cfg.lease_path(name);
        let acl = inner.cfg.acl.for_path(&path);
        let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
        let limit = s.limit(&inner.cfg);
        for _ in 0..8 {
            s.check_connected(OP)?;
            let client = s.client()?;
            let sent = Instant::now();
            // The name counts as possibly owned from the moment its create is sent. An `exists`
            // with a watch is queued right behind the create: the server runs it after the
            // create, so it shows the node's owner either way and arms the watch that spares
            // keep-alives reading the node (see `held`).
            let (seq, created, seen) = {
                let mut p = s.possibly.lock();
                let seq = p.creating(name);
                let created = client.create(&path, &lease_data(session, ""), &opts);
                (seq, created, held::Sent::exists(&client, path.clone()))
            };
            match call(OP, limit, created)? {
                Ok((stat, _)) => {
                    // The `exists` reply is not waited for: the next keep-alive applies it
                    // (its own reply comes after it).
                    // It holds a clone of the client: never stashed once closing began.
                    let mut p = s.possibly.lock();
                    if s.client.lock().is_some() {
                        p.stash(name, seq, seen);
                    }
                    return Ok(Acquire::Acquired(Term {
                        name: name.clone(),
                        token: token(&stat)?,
                        remaining: s.remaining_at(sent),
                    }));
                }
                Err(zk::Error::NodeExists) => {
                    let seen = match call(OP, limit, seen.reply())? {
                        Ok(seen) => seen,
                        Err(e) => return Err(inner.fail(&s, OP, e)),
                    };
                    let Some(stat) = seen.0 else {
                        continue; // released meanwhile: try again
                    };
                    s.possibly.lock().observe(name, seq, s.raw, seen)?;
                    if stat.ephemeral_owner == s.raw {
                        return Ok(Acquire::Acquired(Term {
                            name: name.clone(),
                            token: token(&stat)?,
                            remaining: s.remaining_at(sent),
                        }));
                    }
                    return Ok(Acquire::Held(inner.owner_of(&stat)?));
                }
                Err(zk::Error::NoNode) => inner.cfg.mkdirs(&client, &inner.cfg.leases, limit)?,
                Err(e) => return Err(inner.fail(&s, OP, e)),
            }
        }
        Err(failure::error(OP, format!("{name} kept changing hands")))
    }

    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        const OP: &str = "releasing a lease";
        let inner = &self.inner;
        let Some(s) = inner.live_or_none(session) else {
            return Ok(false);
        };
        // One release of a session at a time: between the owner check and the delete, only
        // this session could delete (and so re-create) its own node.
        let _one = s.releasing.lock();
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let limit = s.limit(&inner.cfg);
        let path = inner.cfg.lease_path(name);
        let seq = s.possibly.lock().seq_of(name);
        let stat = match call(OP, limit, client.check_stat(&path))? {
            Ok(Some(stat)) => stat,
            Ok(None) => return Ok(false),
            Err(e) => return inner.fail_unchanged(&s, OP, e),
        };
        if stat.ephemeral_owner != s.raw || stat.czxid as u64 != token.get() {
            return Ok(false);
        }
        match call(OP, limit, client.delete(&path, Some(stat.version)))? {
            Ok(()) => {
                if let Some(seq) = seq {
                    s.forget(name, seq);
                }
                Ok(true)
            }
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => inner.fail_unchanged(&s, OP, e),
        }
    }

    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        const OP: &str = "reading a lease owner";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        let path = inner.cfg.lease_path(name);
        match call(OP, inner.cfg.request_timeout, client.get_data(&path))? {
            Ok((data, stat)) => Ok(Some(inner.owner_with_value(&data, &stat)?)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(zk_err(OP, e)),
        }
    }

    fn supports_values(&self) -> bool {
        true
    }

    /// Two round trips on the session's own client: the node's stat (its owner and czxid
    /// must be the session and the token), then a `setData` of that node version. The data
    /// change fires the holder's watch (its next keep-alive reads the node once) and the
    /// readers' recursive watch ([`Notification::Acquired`]).
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        const OP: &str = "setting a term value";
        crate::types::check_value(value)?;
        let inner = &self.inner;
        let Some(s) = inner.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let limit = s.limit(&inner.cfg);
        let path = inner.cfg.lease_path(name);
        let data = lease_data(session, value);
        for _ in 0..8 {
            let stat = match call(OP, limit, client.check_stat(&path))? {
                Ok(Some(stat)) => stat,
                Ok(None) => return Ok(false),
                Err(e) => return inner.fail_unchanged(&s, OP, e),
            };
            if stat.ephemeral_owner != s.raw || stat.czxid as u64 != token.get() {
                return Ok(false);
            }
            match call(OP, limit, client.set_data(&path, &data, Some(stat.version)))? {
                Ok(_) => return Ok(true),
                // Another value set meanwhile (by this session): read the version again.
                Err(zk::Error::BadVersion) => continue,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return inner.fail_unchanged(&s, OP, e),
            }
        }
        Err(failure::error(
            OP,
            format!("lease node {name} kept changing"),
        ))
    }

    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        const OP: &str = "joining a group";
        let inner = &self.inner;
        let s = inner.live(session)?;
        let gpath = inner.cfg.group_path(group);
        let mpath = format!("{gpath}/{}", s.id);
        let acl = inner.cfg.acl.for_path(&mpath);
        let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
        let limit = s.limit(&inner.cfg);
        for _ in 0..8 {
            s.check_connected(OP)?;
            let client = s.client()?;
            let data = s.metadata.as_str().as_bytes();
            match call(OP, limit, client.create(&mpath, data, &opts))? {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) => {
                    let gacl = inner.cfg.acl.for_path(&gpath);
                    let gopts = zk::CreateMode::Container.with_acls(zk::Acls::new(&gacl));
                    match call(OP, limit, client.create(&gpath, &[], &gopts))? {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(zk::Error::NoNode) => {
                            inner.cfg.mkdirs(&client, &inner.cfg.groups, limit)?
                        }
                        Err(e) => return Err(inner.fail(&s, OP, e)),
                    }
                }
                Err(e) => return Err(inner.fail(&s, OP, e)),
            }
        }
        Err(failure::error(
            OP,
            format!("group node {gpath} kept vanishing"),
        ))
    }

    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        const OP: &str = "leaving a group";
        let inner = &self.inner;
        let Some(s) = inner.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let mpath = format!("{}/{}", inner.cfg.group_path(group), s.id);
        match call(OP, s.limit(&inner.cfg), client.delete(&mpath, None))? {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => inner.fail_unchanged(&s, OP, e),
        }
    }

    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        const OP: &str = "reading group members";
        let inner = &self.inner;
        let limit = inner.cfg.request_timeout;
        let client = inner.reader.client()?;
        let gpath = inner.cfg.group_path(group);
        // Sync first: a join that just returned (on any server) is then in the view.
        match call(OP, limit, client.sync(&gpath))? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_err(OP, e)),
        }
        let children = match call(OP, limit, client.list_children(&gpath))? {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(zk_err(OP, e)),
        };
        let ids: Vec<SessionId> = children
            .iter()
            .filter_map(|c| {
                SessionId::parse(c)
                    .ok()
                    .filter(|id| id.as_str().len() == 16)
            })
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut r = client.new_multi_reader();
        for id in &ids {
            r.add_get_data(&format!("{gpath}/{id}"))
                .map_err(|e| zk_err(OP, e))?;
        }
        let results = call(OP, limit, r.commit())?.map_err(|e| zk_err(OP, e))?;
        let mut members = Vec::new();
        for (id, r) in ids.into_iter().zip(results) {
            if let zk::MultiReadResult::Data { data, stat } = r {
                // Only a node the member's own session created counts.
                if SessionId::from_u64(stat.ephemeral_owner as u64) != id {
                    continue;
                }
                let metadata = String::from_utf8(data)
                    .ok()
                    .and_then(|m| Metadata::new(m).ok())
                    .unwrap_or_default();
                members.push(Member {
                    session: id,
                    metadata,
                });
            }
        }
        members.sort();
        Ok(members)
    }

    fn supports_jobs(&self) -> bool {
        true
    }

    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<crate::spi::JobClaim> {
        self.inner.claim_job(session, name, at_most)
    }

    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        self.inner.finish_job(session, name, token, at_least)
    }

    fn supports_queues(&self) -> bool {
        true
    }

    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        options::check_lease(patience)?;
        self.inner
            .acquire_queued(session, name, patience, || self.acquire(session, name))
    }

    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.inner.leave_queue(session, name)
    }

    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.inner.queue(name)
    }

    /// Lease nodes (one multi read), then each group's members. ZooKeeper does not list
    /// sessions to clients: the sessions shown are those holding a lease or in a group, with
    /// the metadata of their member nodes (or of this backend's own session), and the time
    /// left as for [`owner`](LeaseBackend::owner).
    fn list(&self) -> Result<Listing> {
        const OP: &str = "listing sessions, leases and groups";
        let inner = &self.inner;
        let limit = inner.cfg.request_timeout;
        let client = inner.reader.client()?;
        let mut out = Listing::default();
        match call(OP, limit, client.sync(&inner.cfg.root))? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_err(OP, e)),
        }
        let children = |path: &str| -> Result<Vec<String>> {
            match call(OP, limit, client.list_children(path))? {
                Ok(c) => Ok(c),
                Err(zk::Error::NoNode) => Ok(Vec::new()),
                Err(e) => Err(zk_err(OP, e)),
            }
        };
        let names: Vec<LeaseName> = children(&inner.cfg.leases)?
            .into_iter()
            .filter_map(|n| LeaseName::new(n).ok())
            .collect();
        if !names.is_empty() {
            let mut r = client.new_multi_reader();
            for n in &names {
                r.add_get_data(&inner.cfg.lease_path(n))
                    .map_err(|e| zk_err(OP, e))?;
            }
            let results = call(OP, limit, r.commit())?.map_err(|e| zk_err(OP, e))?;
            for (name, r) in names.into_iter().zip(results) {
                if let zk::MultiReadResult::Data { data, stat } = r {
                    match inner.owner_with_value(&data, &stat) {
                        Ok(owner) => out.leases.push(LeaseInfo { name, owner }),
                        Err(e) => log::warn!("lease node {name}: {}", e.report()),
                    }
                }
            }
        }
        for g in children(&inner.cfg.groups)? {
            let Ok(name) = GroupName::new(g) else {
                continue;
            };
            let members = self.members(&name)?;
            if !members.is_empty() {
                out.groups.push(GroupInfo { name, members });
            }
        }
        let mut sessions: std::collections::BTreeMap<SessionId, Metadata> = Default::default();
        for l in &out.leases {
            let id = &l.owner.session;
            let own = inner.sessions.lock().get(id).map(|s| s.metadata.clone());
            sessions
                .entry(id.clone())
                .or_insert(own.unwrap_or_default());
        }
        for m in out.groups.iter().flat_map(|g| &g.members) {
            sessions.insert(m.session.clone(), m.metadata.clone());
        }
        out.sessions = sessions
            .into_iter()
            .map(|(id, metadata)| {
                let raw = u64::from_str_radix(id.as_str(), 16).unwrap_or_default() as i64;
                SessionInfo {
                    remaining: inner.remaining_of(raw),
                    id,
                    metadata,
                }
            })
            .collect();
        out.leases.sort_by(|a, b| a.name.cmp(&b.name));
        out.groups.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn purge_expired(&self) -> Result<usize> {
        // ZooKeeper removes expired sessions and their nodes itself; this closes the local
        // sessions whose lease ran out without a keep-alive.
        Ok(self.inner.sweep().0)
    }

    /// One `exists` of the root on the reader: the floor round trip.
    fn ping(&self) -> Result<()> {
        const OP: &str = "ping";
        let inner = &self.inner;
        let client = inner.reader.client()?;
        match call(
            OP,
            inner.cfg.request_timeout,
            client.check_stat(&inner.cfg.root),
        )? {
            Ok(_) => Ok(()),
            Err(e) => Err(zk_err(OP, e)),
        }
    }

    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        Ok(Some(self.inner.subscribers.add(sink)))
    }
}

/// Closes sessions that no keep-alive renewed within their lease.
fn watchdog_loop(weak: Weak<Inner>, wake: crossbeam_channel::Receiver<()>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let (_, next) = inner.sweep();
        drop(inner);
        let wait = next
            .map(|n| n.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        match wake.recv_timeout(wait + Duration::from_millis(1)) {
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            _ => continue,
        }
    }
}

/// Forwards the reader's recursive watch on the root to the subscribers; reconnects the
/// reader (a new session: it holds no ephemeral nodes) when its session ends.
fn watch_loop(
    cfg: Arc<Cfg>,
    reader: Arc<Reader>,
    subs: Arc<Subscribers>,
    mut watcher: zk::PersistentWatcher,
) {
    let leases = format!("{}/", cfg.leases);
    let groups = format!("{}/", cfg.groups);
    let queues = format!("{}/queues/", cfg.root);
    let mut disconnected = false;
    loop {
        let ev = futures_lite::future::block_on(watcher.changed());
        match ev.event_type {
            zk::EventType::Session => match ev.session_state {
                zk::SessionState::Disconnected => disconnected = true,
                zk::SessionState::SyncConnected if disconnected => {
                    // Events during the disconnection may be lost (ZOOKEEPER-4698).
                    disconnected = false;
                    if let Some(w) = rewatch(&cfg, &reader) {
                        watcher = w;
                    }
                    subs.publish(&Notification::Resync);
                }
                s if s.is_terminated() => {
                    if reader.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    log::warn!("ZooKeeper reader session ended ({s}); reconnecting");
                    loop {
                        if reader.stopped.load(Ordering::SeqCst) {
                            return;
                        }
                        match cfg.open_reader() {
                            Ok((client, w)) => {
                                *reader.client.write() = Some(client);
                                watcher = w;
                                break;
                            }
                            Err(e) => {
                                log::warn!("reconnecting the ZooKeeper reader: {}", e.report());
                                std::thread::sleep(Duration::from_millis(200));
                            }
                        }
                    }
                    if reader.stopped.load(Ordering::SeqCst) {
                        reader.client.write().take();
                        return;
                    }
                    subs.publish(&Notification::Resync);
                }
                _ => {}
            },
            zk::EventType::NodeDeleted if ev.path.starts_with(&leases) => {
                if let Ok(name) = LeaseName::new(&ev.path[leases.len()..]) {
                    subs.publish(&Notification::Released(name));
                }
            }
            // A lease node is created only for a new term (a re-acquire finds it existing);
            // its data changes only with the term's value.
            zk::EventType::NodeCreated | zk::EventType::NodeDataChanged
                if ev.path.starts_with(&leases) =>
            {
                if let Ok(name) = LeaseName::new(&ev.path[leases.len()..]) {
                    subs.publish(&Notification::Acquired(name));
                }
            }
            // A place given up or taken: the next in line may go now.
            zk::EventType::NodeDeleted if ev.path.starts_with(&queues) => {
                let rest = &ev.path[queues.len()..];
                if let Some((n, _place)) = rest.split_once('/') {
                    if let Ok(name) = LeaseName::new(n) {
                        subs.publish(&Notification::Released(name));
                    }
                }
            }
            zk::EventType::NodeCreated | zk::EventType::NodeDeleted
                if ev.path.starts_with(&groups) =>
            {
                let rest = &ev.path[groups.len()..];
                if let Some((g, _member)) = rest.split_once('/') {
                    if let Ok(g) = GroupName::new(g) {
                        subs.publish(&Notification::GroupChanged(g));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Adds the reader's persistent recursive watch on the root again after a reconnect of the
/// same session: `zookeeper-client` 0.11 does not (its `resend_watches` sends only data, exist
/// and child watches), so the server would send no more events. `None` when the reader is
/// stopped or disconnected again (the next reconnect retries).
fn rewatch(cfg: &Cfg, reader: &Reader) -> Option<zk::PersistentWatcher> {
    loop {
        if reader.stopped.load(Ordering::SeqCst) {
            return None;
        }
        let client = reader.client().ok()?;
        let w = client.watch(&cfg.root, zk::AddWatchMode::PersistentRecursive);
        match call("watching the root", cfg.request_timeout, w) {
            Ok(Ok(w)) => return Some(w),
            Ok(Err(e)) => log::warn!("watching the root again: {e}"),
            Err(e) => log::warn!("watching the root again: {}", e.report()),
        }
        if client.state() != zk::SessionState::SyncConnected {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Builds a backend from `zookeeper://[user:password@]h1:2181,h2:2181[/root][?options]` or
/// `zookeeper+tls://…` (default port 2281).
pub(crate) fn from_url(u: &crate::backends::BackendUrl) -> Result<ZooKeeperBackend> {
    builder_from_url(u)?.build()
}

/// The builder [`from_url`] builds.
fn builder_from_url(u: &crate::backends::BackendUrl) -> Result<ZooKeeperBuilder> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(czxid: i64) -> zk::Stat {
        zk::Stat {
            czxid,
            mzxid: czxid,
            pzxid: czxid,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 0,
            num_children: 0,
        }
    }

    #[test]
    fn tokens_are_positive_czxids() {
        assert_eq!(token(&stat(7)).unwrap().get(), 7);
        for bad in [0, -1, i64::MIN] {
            assert!(
                matches!(token(&stat(bad)), Err(Error::Backend { .. })),
                "{bad}"
            );
        }
    }
}
