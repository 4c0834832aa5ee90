//! ZooKeeper checks, read only: the `conf` four-letter word (session timeouts against the
//! lease, `maxClientCnxns`), the ACLs of the nodes the backend uses, and a session with the
//! lease.

use super::{Args, Findings, Level};
use simba_lease::backends::zookeeper::{Acl, ZooKeeperBackend};
use simba_lease::backends::BackendUrl;
use simba_lease::spi::LeaseBackend;
use simba_lease::Result;
use std::time::Duration;

/// The first `host:port` of a `zookeeper://` URL.
fn first_zk_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let hosts = rest.split(['/', '?']).next()?;
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    let first = hosts.split(',').next()?;
    Some(if first.contains(':') {
        first.to_owned()
    } else {
        format!("{first}:2181")
    })
}

/// The `conf` four-letter word of the first server (it must be whitelisted:
/// `4lw.commands.whitelist=...,conf`): session timeouts against the lease, `maxClientCnxns`.
fn four_letter_conf(a: &Args, f: &mut Findings) {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    let Some(host) = first_zk_host(&a.url) else {
        return;
    };
    let conf = (|| -> std::io::Result<String> {
        let addr = host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"conf")?;
        let mut out = String::new();
        s.take(64 * 1024).read_to_string(&mut out)?;
        Ok(out)
    })();
    let conf = match conf {
        Ok(c) if c.contains("maxSessionTimeout") => c,
        Ok(_) | Err(_) => {
            f.add(
                Level::Unknown,
                "server conf",
                format!(
                    "`conf` four-letter word refused by {host} (add it to 4lw.commands.whitelist)"
                ),
            );
            return;
        }
    };
    let field = |k: &str| -> Option<u64> {
        conf.lines()
            .find_map(|l| l.trim().strip_prefix(k)?.strip_prefix('='))
            .and_then(|v| v.trim().parse().ok())
    };
    if let Some(min) = field("minSessionTimeout") {
        let min = Duration::from_millis(min);
        if a.lease() < min {
            f.add(
                Level::Trap,
                "minSessionTimeout",
                format!(
                    "{min:?} is longer than the lease {:?}: the server keeps a crashed holder's \
                     session (and its leases) for {min:?}; fix: lower minSessionTimeout or use a \
                     longer lease",
                    a.lease()
                ),
            );
        } else {
            f.add(
                Level::Ok,
                "minSessionTimeout",
                format!("{min:?} ≤ lease {:?}", a.lease()),
            );
        }
    }
    match field("maxClientCnxns") {
        Some(0) => f.add(Level::Ok, "maxClientCnxns", "unlimited"),
        Some(n) if n < 60 => f.add(
            Level::Info,
            "maxClientCnxns",
            format!(
                "{n} connections per client address: each backend in a process holds one \
                 connection per session; more sessions from one host are refused"
            ),
        ),
        Some(n) => f.add(Level::Ok, "maxClientCnxns", format!("{n}")),
        None => {}
    }
}

/// `scheme:id` of an ACL entry without secrets (a digest id is `user:hash`: the user only).
fn acl_identity(acl: &Acl) -> String {
    let id = if acl.scheme == "digest" {
        acl.id.split(':').next().unwrap_or_default()
    } else {
        acl.id.as_str()
    };
    format!("{}:{id}", acl.scheme)
}

/// Whether the nodes the backend of `a.url` creates get the open ACL: no credentials in the
/// URL (or `acl=open`), unless `acl=creator`.
fn creates_open(a: &Args) -> bool {
    let Ok(u) = BackendUrl::parse(&a.url) else {
        return true;
    };
    match u.param("acl") {
        Some("open") => true,
        Some(_) => false,
        None => u.user.is_none(),
    }
}

/// `world:anyone` allowed to create or delete under the root, `leases`, `groups`, `delays`
/// (lock-delay gates) or `rw` (read-write locks); the nodes that do not exist are reported
/// (doctor never creates them): the first session creates them, with the open ACL when the
/// URL has no credentials (a trap).
fn zk_acls(a: &Args, b: &ZooKeeperBackend, f: &mut Findings) {
    let acls = match b.acls() {
        Ok(a) => a,
        Err(e) => {
            f.add(
                Level::Unknown,
                "acl",
                format!("could not read the ACLs: {}", e.report()),
            );
            return;
        }
    };
    let root = b.root();
    let missing: Vec<String> = [
        root.to_owned(),
        format!("{root}/leases"),
        format!("{root}/groups"),
        format!("{root}/delays"),
        format!("{root}/rw"),
    ]
    .into_iter()
    .filter(|p| !acls.iter().any(|(path, _)| path == p))
    .collect();
    if !missing.is_empty() {
        let missing = missing.join(", ");
        if creates_open(a) {
            f.add(
                Level::Trap,
                "root",
                format!(
                    "{missing} missing (not created by doctor): the first session creates them \
                     open to world:anyone, as this URL has no credentials, and any client could \
                     then delete lease nodes (ending their terms) or forge group members; fix: \
                     digest credentials in the URL (`zookeeper://user:password@hosts{root}`: the \
                     nodes are then creator-only), or create them with a restricted ACL"
                ),
            );
        } else {
            f.add(
                Level::Info,
                "root",
                format!(
                    "{missing} missing (not created by doctor): the first session creates them, \
                     readable and writable by this URL's identity only"
                ),
            );
        }
    }
    if acls.is_empty() {
        return;
    }
    let open: Vec<&str> = acls
        .iter()
        .filter(|(_, entries)| entries.iter().any(Acl::is_open))
        .map(|(path, _)| path.as_str())
        .collect();
    if open.is_empty() {
        let mut who: Vec<String> = acls
            .iter()
            .flat_map(|(_, e)| e.iter().map(acl_identity))
            .collect();
        who.sort();
        who.dedup();
        f.add(
            Level::Ok,
            "acl",
            format!("{} restricted to {}", root, who.join(", ")),
        );
    } else {
        f.add(
            Level::Trap,
            "acl",
            format!(
                "{} open to world:anyone: any client can delete lease nodes (ending their terms), \
                 create them or forge group members; fix: digest credentials in the URL \
                 (`zookeeper://user:password@hosts{root}`: the nodes it creates are then \
                 creator-only), and for existing nodes in zkCli: `addauth digest user:password` \
                 then `setAcl -R {root} auth::cdrwa`",
                open.join(", "),
            ),
        );
    }
}

/// Read only: the backend is built without creating the root
/// ([`create_root(false)`](simba_lease::backends::zookeeper::ZooKeeperBuilder::create_root)),
/// and the server's clock (which ZooKeeper shows only in the `mtime` of a write) is not read.
pub(super) fn check(a: &Args, f: &mut Findings) -> Result<()> {
    let b = ZooKeeperBackend::builder_from_url(&a.url)?
        .create_root(false)
        .build()?;
    b.ping()?;
    f.add(Level::Ok, "connect", "the ensemble answers");
    four_letter_conf(a, f);
    zk_acls(a, &b, f);
    f.add(
        Level::Info,
        "clock",
        "not read: ZooKeeper shows its clock only in a write, and doctor writes nothing \
         (leases are measured by the ensemble's session timeouts, not by clocks)",
    );
    // A session with the lease (a connection: no node is written) checks the server's
    // maxSessionTimeout.
    let lease = a.lease();
    match b.open_session(lease, &Default::default()) {
        Ok(g) => {
            f.add(
                Level::Ok,
                "session timeout",
                format!("a {lease:?} lease fits the server's session timeouts"),
            );
            let _ = b.close_session(&g.id);
        }
        Err(e) => f.add(
            Level::Trap,
            "session timeout",
            format!(
                "{}; fix: raise maxSessionTimeout or shorten the lease",
                e.report()
            ),
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_identities_never_show_a_digest_hash() {
        let digest = Acl::new(
            simba_lease::backends::zookeeper::Perms::ALL,
            "digest",
            "app:F6Y+U5gIoCbNNoLQExmvxRFeatA=",
        );
        assert_eq!(acl_identity(&digest), "digest:app");
        let world = Acl::new(
            simba_lease::backends::zookeeper::Perms::READ,
            "world",
            "anyone",
        );
        assert_eq!(acl_identity(&world), "world:anyone");
        assert!(!world.is_open());
    }
}
