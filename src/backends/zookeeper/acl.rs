//! Who may touch the backend's nodes: [`Perms`], one [`Acl`] entry, and the [`AclPolicy`]
//! that gives every node the backend creates (parents included) its ACL. Kept apart because
//! the default, the open ACL, is unsafe on a shared ensemble (see the module docs).

use std::sync::Arc;
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

    pub(super) fn from_zk(acl: &zk::Acl) -> Self {
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

    pub(super) fn for_path(&self, path: &str) -> Vec<zk::Acl> {
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
