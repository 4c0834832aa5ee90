//! The TCK on ZooKeeper (standalone server of `.ci/servers.sh`: `SIMBA_ZK_URL`).
//! Each case runs under its own random root, deleted afterwards.

mod zk;

use simba_lease::spi::LeaseBackend;
use std::sync::Arc;
use std::time::Duration;

fn isolated() -> Arc<dyn LeaseBackend> {
    Arc::new(zk::Isolated::new(&zk::hosts(), None, |b| b))
}

// 1 s: above the CI server's minSessionTimeout (200 ms) with room for a loaded machine.
simba_lease::tck_suite!(isolated, lease = Duration::from_secs(1));

/// Digest auth and creator-only ACL: another client (no or other credentials) cannot delete a
/// lease node, pre-create one, or forge a group member; the backend's own sessions work.
mod acl {
    use super::zk::{self, raw};
    use simba_lease::backends::zookeeper::AclPolicy;
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{tck, Metadata};
    use std::time::Duration;

    #[test]
    fn creator_only_nodes_refuse_other_clients() {
        let hosts = zk::hosts();
        let cred: &[u8] = b"simba:s3cret";
        let b = zk::Isolated::new(&hosts, Some(("digest", cred)), |b| {
            b.digest("simba", "s3cret").acl(AclPolicy::creator_all())
        });
        let lease = Duration::from_secs(30);
        let meta = Metadata::new("host-a:1").unwrap();
        let s = b.open_session(lease, &meta).unwrap().id;
        let (name, group) = (tck::lease_name("acl"), tck::group_name("acl"));
        let t = match b.acquire(&s, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        b.join(&s, &group).unwrap();
        let lease_path = format!("{}/leases/{name}", b.root());
        let group_path = format!("{}/groups/{group}", b.root());

        let mut anonymous = raw::Raw::connect(&hosts);
        let mut other = raw::Raw::connect(&hosts);
        assert_eq!(other.auth("digest", b"mallory:guess"), 0);
        for c in [&mut anonymous, &mut other] {
            assert_eq!(c.delete(&lease_path), raw::NO_AUTH, "deleting a lease node");
            let forged = format!("{group_path}/00000000deadbeef");
            assert_eq!(c.create(&forged, b"", 1), raw::NO_AUTH, "forging a member");
            let squat = format!("{}/leases/squat", b.root());
            assert_eq!(
                c.create(&squat, b"", 1),
                raw::NO_AUTH,
                "pre-creating a lease"
            );
            let leases_dir = format!("{}/leases", b.root());
            assert_eq!(
                c.delete(&leases_dir),
                raw::NO_AUTH,
                "deleting {{root}}/leases"
            );
        }

        // The backend's own sessions (and its reader) still work.
        let ka = b.keep_alive(&s, lease).unwrap();
        assert_eq!(ka.leases.len(), 1);
        assert_eq!(ka.leases[0].token, t.token);
        assert_eq!(b.owner(&name).unwrap().unwrap().session, s);
        let members = b.members(&group).unwrap();
        assert_eq!(members.len(), 1);
        assert_eq!((&members[0].session, &members[0].metadata), (&s, &meta));
        let s2 = b.open_session(lease, &Metadata::default()).unwrap().id;
        assert!(matches!(b.acquire(&s2, &name).unwrap(), Acquire::Held(o) if o.session == s));
        assert!(b.release(&s, &name, t.token).unwrap());
        match b.acquire(&s2, &name).unwrap() {
            Acquire::Acquired(t2) => assert!(t2.token > t.token),
            other => panic!("{other:?}"),
        }
        b.join(&s2, &group).unwrap();
        assert_eq!(b.members(&group).unwrap().len(), 2);
        b.close_session(&s).unwrap();
        b.close_session(&s2).unwrap();
    }

    /// The URL form: credentials in the URL give digest auth and creator-only nodes.
    #[test]
    fn url_with_credentials_makes_creator_only_nodes() {
        let hosts = zk::hosts();
        let root = zk::random_root("url");
        let url = format!("zookeeper://simba:s3cret@{hosts}{root}?connection_timeout=20s");
        let b = simba_lease::connect(&url).expect("connect by URL");
        let s = b
            .open_session(Duration::from_secs(30), &Metadata::default())
            .unwrap()
            .id;
        let name = tck::lease_name("url");
        assert!(matches!(
            b.acquire(&s, &name).unwrap(),
            Acquire::Acquired(_)
        ));
        let mut anonymous = raw::Raw::connect(&hosts);
        assert_eq!(
            anonymous.delete(&format!("{root}/leases/{name}")),
            raw::NO_AUTH
        );
        drop(b);
        let mut admin = raw::Raw::connect(&hosts);
        admin.auth("digest", b"simba:s3cret");
        admin.delete_tree(&root);
        assert!(admin.ctime(&root).is_none(), "test root cleaned up");
    }
}

/// Take-over after a clean release happens on the release watch, not at the next poll.
mod watch {
    use super::zk;
    use simba_lease::{tck, Config, Session};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn take_over_after_release_is_woken_by_the_watch() {
        let b: Arc<dyn simba_lease::spi::LeaseBackend> =
            Arc::new(zk::Isolated::new(&zk::hosts(), None, |b| b));
        // Candidates poll every renew/2 = 20 s (plus jitter) without a notification.
        let cfg = Config::builder()
            .lease(Duration::from_secs(60))
            .renew_interval(Duration::from_secs(40))
            .build()
            .unwrap();
        let (a, c) = (
            Session::open(b.clone(), cfg.clone()).unwrap(),
            Session::open(b.clone(), cfg).unwrap(),
        );
        let name = tck::lease_name("wake");
        let ea = a.election(&name).unwrap();
        let ta = ea.wait_elected(Duration::from_secs(10)).unwrap();
        let ec = c.election(&name).unwrap();
        assert!(!ec.is_leader());
        ea.resign().unwrap();
        // Well inside the first poll (20 s): only the watch can have woken the candidate.
        let tc = ec
            .wait_elected(Duration::from_secs(8))
            .expect("elected on the release watch");
        assert!(tc.token > ta.token);
        a.close().unwrap();
        c.close().unwrap();
    }
}
