//! How the backend reaches the ensemble: [`Cfg`], the settings every client is opened with
//! (connect string, auth infos, ACL policy, timeouts, TLS) and the node paths, with the
//! connect that names a refused TLS handshake; and the [`Reader`], the one shared client
//! that reads owners and members and carries the root's watch.

use super::acl::AclPolicy;
use super::facade::{backend as zk_err, call};
#[cfg(feature = "tls")]
use super::tls;
use crate::error::{Error, Result};
use crate::types::{GroupName, LeaseName};
use parking_lot::RwLock;
use std::sync::atomic::AtomicBool;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// The settings every client of the backend is opened with, and the paths of its nodes.
pub(super) struct Cfg {
    #[cfg(feature = "tls")]
    pub(super) tls: Option<Arc<tls::ZkTls>>,
    pub(super) connect: String,
    pub(super) root: String,
    pub(super) leases: String,
    pub(super) groups: String,
    /// `{root}/delays`: the lock-delay gates (see `delay`).
    pub(super) delays: String,
    /// `{root}/rw`: the read-write locks' counter nodes (see `rw`).
    pub(super) rw: String,
    pub(super) auth: Vec<(String, Vec<u8>)>,
    pub(super) acl: AclPolicy,
    pub(super) connection_timeout: Duration,
    pub(super) request_timeout: Duration,
    pub(super) reader_session_timeout: Duration,
    pub(super) create_root: bool,
}

impl Cfg {
    pub(super) fn connector(&self, session_timeout: Duration) -> zk::Connector {
        let mut c = zk::Client::connector().with_session_timeout(session_timeout);
        for (scheme, cred) in &self.auth {
            c = c.with_auth(scheme, cred);
        }
        c
    }

    pub(super) fn connect(&self, session_timeout: Duration) -> Result<zk::Client> {
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

    pub(super) fn open_reader(&self) -> Result<(zk::Client, zk::PersistentWatcher)> {
        let client = self.connect(self.reader_session_timeout)?;
        if self.create_root {
            self.mkdirs(&client, &self.leases, self.request_timeout)?;
            self.mkdirs(&client, &self.groups, self.request_timeout)?;
            self.mkdirs(&client, &self.delays, self.request_timeout)?;
            self.mkdirs(&client, &self.rw, self.request_timeout)?;
        }
        let w = client.watch(&self.root, zk::AddWatchMode::PersistentRecursive);
        let watcher = call("watching the root", self.request_timeout, w)?
            .map_err(|e| zk_err("watching the root", e))?;
        Ok((client, watcher))
    }

    /// Creates `path` and its missing ancestors, each with the policy's ACL.
    pub(super) fn mkdirs(&self, client: &zk::Client, path: &str, limit: Duration) -> Result<()> {
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

    pub(super) fn lease_path(&self, name: &LeaseName) -> String {
        format!("{}/{}", self.leases, name.as_str())
    }

    /// The lock-delay gate of `name` (see `delay`).
    pub(super) fn gate_path(&self, name: &LeaseName) -> String {
        format!("{}/{}", self.delays, name.as_str())
    }

    pub(super) fn group_path(&self, group: &GroupName) -> String {
        format!("{}/{}", self.groups, group.as_str())
    }
}

/// The shared client that reads owners and members and carries the watches.
pub(super) struct Reader {
    pub(super) client: RwLock<Option<zk::Client>>,
    pub(super) stopped: AtomicBool,
}

impl Reader {
    pub(super) fn client(&self) -> Result<zk::Client> {
        self.client.read().clone().ok_or(Error::Closed)
    }
}
