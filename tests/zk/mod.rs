//! Shared helpers of the ZooKeeper tests.
#![allow(dead_code)]

pub mod proxy;
pub mod raw;

use simba_lease::backends::zookeeper::{ZooKeeperBackend, ZooKeeperBuilder};
use simba_lease::spi::Delegate;
use simba_lease::spi::{LeaseBackend, Notification, Subscription};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The notifications of `b`, delivered into a channel while the returned subscription lives.
pub fn notifications(
    b: &dyn LeaseBackend,
) -> (crossbeam_channel::Receiver<Notification>, Subscription) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let sub = b
        .subscribe(Arc::new(move |n: &Notification| {
            let _ = tx.send(n.clone());
        }))
        .unwrap()
        .expect("notifications");
    (rx, sub)
}

/// Waits up to `patience` for a notification `want` accepts, skipping others; panics with
/// `what` when none came.
pub fn wait_for(
    rx: &crossbeam_channel::Receiver<Notification>,
    patience: Duration,
    what: &str,
    want: impl Fn(&Notification) -> bool,
) {
    let end = Instant::now() + patience;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let n = rx.recv_timeout(left).unwrap_or_else(|_| panic!("{what}"));
        if want(&n) {
            return;
        }
    }
}

/// `host:port,…` of the standalone server: `SIMBA_ZK_URL` (as `.ci/servers.sh` exports it)
/// or `127.0.0.1:2181`.
pub fn hosts() -> String {
    hosts_of("SIMBA_ZK_URL", "127.0.0.1:2181")
}

/// `host:port,…` of the 3-node ensemble: `SIMBA_ZK_ENSEMBLE` or loopback 2281-2283.
pub fn ensemble_hosts() -> String {
    hosts_of(
        "SIMBA_ZK_ENSEMBLE",
        "127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283",
    )
}

fn hosts_of(var: &str, default: &str) -> String {
    let url = std::env::var(var).unwrap_or_default();
    let rest = url
        .strip_prefix("zookeeper://")
        .or_else(|| url.strip_prefix("zk://"))
        .unwrap_or(&url);
    let rest = rest.split(['/', '?']).next().unwrap_or("");
    if rest.is_empty() {
        default.to_owned()
    } else {
        rest.to_owned()
    }
}

/// A random root for one test.
pub fn random_root(prefix: &str) -> String {
    format!("/simba-test/{}", simba_lease::tck::unique(prefix))
}

/// Prepares `/simba-test` on `hosts` once per process: creates it with an open ACL (so a
/// test with a creator-only ACL never creates it for its identity only) and deletes test roots
/// left behind by earlier runs (a TCK case may leak its backend on purpose, e.g. by forgetting
/// a handle) that are older than 10 minutes (so concurrent test runs are never touched).
pub fn prepare(hosts: &str) {
    static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if done.iter().any(|h| h == hosts) {
        return;
    }
    done.push(hosts.to_owned());
    let mut raw = raw::Raw::connect(hosts);
    let _ = raw.create("/simba-test", b"", 0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for child in raw.children("/simba-test") {
        let path = format!("/simba-test/{child}");
        if raw.ctime(&path).is_some_and(|t| now - t > 600_000) {
            raw.delete_tree(&path);
        }
    }
}

/// A backend under its own random root; dropping it closes its sessions and deletes the root.
pub struct Isolated {
    backend: Option<ZooKeeperBackend>,
    hosts: String,
    root: String,
    auth: Option<(String, Vec<u8>)>,
    /// The CA file of a TLS-only server: the clean-up then connects over TLS.
    tls_ca: Option<String>,
}

impl Isolated {
    /// A backend built by `f` from a builder under a fresh root on `hosts`.
    pub fn new(
        hosts: &str,
        auth: Option<(&str, &[u8])>,
        f: impl FnOnce(ZooKeeperBuilder) -> ZooKeeperBuilder,
    ) -> Isolated {
        Self::via(hosts, hosts, auth, f)
    }

    /// Like [`Isolated::new`], with the backend connecting to `connect` (e.g. a proxy) and
    /// the clean-up to `hosts`.
    pub fn via(
        hosts: &str,
        connect: &str,
        auth: Option<(&str, &[u8])>,
        f: impl FnOnce(ZooKeeperBuilder) -> ZooKeeperBuilder,
    ) -> Isolated {
        prepare(hosts);
        let root = random_root("root");
        let builder = ZooKeeperBackend::builder(connect)
            .root(root.clone())
            .connection_timeout(Duration::from_secs(20));
        let backend = f(builder).build().expect("ZooKeeper backend");
        Isolated {
            backend: Some(backend),
            hosts: hosts.to_owned(),
            root,
            auth: auth.map(|(s, c)| (s.to_owned(), c.to_vec())),
            tls_ca: None,
        }
    }

    /// A backend over TLS (trusting `ca`) built by `f` under a fresh root on `hosts`, a
    /// TLS-only server; the clean-up connects over TLS too.
    #[cfg(feature = "tls")]
    pub fn tls(
        hosts: &str,
        ca: &str,
        auth: Option<(&str, &[u8])>,
        f: impl FnOnce(ZooKeeperBuilder) -> ZooKeeperBuilder,
    ) -> Isolated {
        let root = random_root("tls");
        let builder = ZooKeeperBackend::builder(hosts)
            .tls(true)
            .ca(ca)
            .root(root.clone())
            .connection_timeout(Duration::from_secs(20));
        let backend = f(builder).build().expect("ZooKeeper backend over TLS");
        Isolated {
            backend: Some(backend),
            hosts: hosts.to_owned(),
            root,
            auth: auth.map(|(s, c)| (s.to_owned(), c.to_vec())),
            tls_ca: Some(ca.to_owned()),
        }
    }

    /// The backend.
    pub fn b(&self) -> &ZooKeeperBackend {
        self.backend.as_ref().expect("live")
    }

    /// The root.
    pub fn root(&self) -> &str {
        &self.root
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        drop(self.backend.take());
        if let Some(_ca) = &self.tls_ca {
            #[cfg(feature = "tls")]
            tls_delete_tree(&self.hosts, _ca, None, self.auth.as_ref(), &self.root);
            return;
        }
        let mut raw = raw::Raw::connect(&self.hosts);
        if let Some((scheme, cred)) = &self.auth {
            raw.auth(scheme, cred);
        }
        raw.delete_tree(&self.root);
    }
}

impl Delegate for Isolated {
    fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
        f(self.b())
    }
}

/// Deletes `root` and everything under it on a TLS-only server (with `zookeeper-client`
/// directly; a backend's build installed the process's rustls provider), trusting `ca`, with
/// the client certificate and key files of `identity` and the auth info `auth`.
#[cfg(feature = "tls")]
pub fn tls_delete_tree(
    hosts: &str,
    ca: &str,
    identity: Option<(&str, &str)>,
    auth: Option<&(String, Vec<u8>)>,
    root: &str,
) {
    use zookeeper_client as zkc;
    let read = |f: &str| std::fs::read_to_string(f).expect("PEM file");
    let mut options = zkc::TlsOptions::new().with_pem_ca(&read(ca)).expect("CA");
    if let Some((cert, key)) = identity {
        options = options
            .with_pem_identity(&read(cert), &read(key))
            .expect("client certificate");
    }
    futures_lite::future::block_on(async {
        let mut connector = zkc::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_tls(options);
        if let Some((scheme, cred)) = auth {
            connector = connector.with_auth(scheme, cred);
        }
        let connect = connector.secure_connect(hosts);
        let client = connect.await.expect("clean-up connection over TLS");
        // Every node under root, parents before children; deleted children first.
        let mut nodes = vec![root.to_owned()];
        let mut i = 0;
        while i < nodes.len() {
            let children = client.list_children(&nodes[i]).await.unwrap_or_default();
            let parent = nodes[i].clone();
            nodes.extend(children.into_iter().map(|c| format!("{parent}/{c}")));
            i += 1;
        }
        for node in nodes.iter().rev() {
            let _ = client.delete(node, None).await;
        }
    });
}
