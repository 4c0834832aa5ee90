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
    use simba_lease::{tck, LeaseName, Metadata, SessionId};
    use std::sync::Arc;
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
        b.ping().unwrap();
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

    /// ZooKeeper checks no digest password: a wrong one is another identity, which the
    /// creator-only nodes refuse: `Error::Authentication` at the first call that reads them,
    /// with no password in any error text.
    #[test]
    fn a_wrong_password_is_an_authentication_error() {
        let (url, root, b, s, name) = held_by_url("wrong-pw");
        let pw = "Wr0ng-Pa55word";
        let wrong = url.replacen("s3cret", pw, 1);
        let e = match simba_lease::connect(&wrong) {
            Err(e) => e,
            Ok(other) => {
                let s2 = other.open_session(Duration::from_secs(30), &Metadata::default());
                let e = match s2 {
                    Err(e) => e,
                    Ok(s2) => other.acquire(&s2.id, &name).expect_err("refused"),
                };
                drop(other);
                e
            }
        };
        assert!(
            matches!(e, simba_lease::Error::Authentication { .. }),
            "{e:?}"
        );
        for text in [e.to_string(), format!("{e:?}"), e.report().to_string()] {
            assert!(!text.contains(pw), "{text}");
        }
        b.close_session(&s).unwrap();
        drop(b);
        delete_as_simba(&root);
    }

    /// A backend connected by a URL with the credentials `simba:s3cret` under a fresh root,
    /// and a session of it holding a new lease: (URL, root, backend, session, lease name).
    fn held_by_url(label: &str) -> (String, String, Arc<dyn LeaseBackend>, SessionId, LeaseName) {
        let hosts = zk::hosts();
        zk::prepare(&hosts);
        let root = zk::random_root(label);
        // `connect_timeout`: the Redis name of `connection_timeout`, accepted as well.
        let url = format!("zookeeper://simba:s3cret@{hosts}{root}?connect_timeout=20s");
        let b = simba_lease::connect(&url).expect("connect by URL");
        let s = b
            .open_session(Duration::from_secs(30), &Metadata::default())
            .unwrap()
            .id;
        let name = tck::lease_name(label);
        assert!(matches!(
            b.acquire(&s, &name).unwrap(),
            Acquire::Acquired(_)
        ));
        (url, root, b, s, name)
    }

    /// Deletes a [`held_by_url`] root as the user that created it.
    fn delete_as_simba(root: &str) {
        let mut admin = raw::Raw::connect(&zk::hosts());
        admin.auth("digest", b"simba:s3cret");
        admin.delete_tree(root);
        assert!(admin.ctime(root).is_none(), "test root cleaned up");
    }

    /// The URL form: credentials in the URL give digest auth and creator-only nodes.
    #[test]
    fn url_with_credentials_makes_creator_only_nodes() {
        let (_, root, b, _, name) = held_by_url("url");
        let mut anonymous = raw::Raw::connect(&zk::hosts());
        assert_eq!(
            anonymous.delete(&format!("{root}/leases/{name}")),
            raw::NO_AUTH
        );
        drop(b);
        delete_as_simba(&root);
    }
}

/// A fair-lock place whose delete after its grant failed does not hold the queue up: the
/// session's next keep-alive deletes it.
mod orphan_places {
    use super::zk::{self, raw::Raw};
    use simba_lease::spi::{Acquire, LeaseBackend, Queued};
    use simba_lease::{tck, Metadata};
    use std::time::Duration;

    #[test]
    fn a_place_left_by_a_failed_delete_goes_with_the_next_keep_alive() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let lease = Duration::from_secs(30);
        let open = || b.open_session(lease, &Metadata::default()).unwrap().id;
        let (holder, waiter) = (open(), open());
        let name = tck::lease_name("orphan");
        let patience = Duration::from_secs(30);
        let t = match b.acquire(&holder, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            b.acquire_queued(&waiter, &name, patience).unwrap(),
            Queued::Waiting { .. }
        ));
        let dir = format!("{}/queues/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        assert_eq!(raw.children(&dir).len(), 1, "the waiter's place");
        assert!(b.release(&holder, &name, t.token).unwrap());
        b.b().fail_place_deletes(1);
        assert!(matches!(
            b.acquire_queued(&waiter, &name, patience).unwrap(),
            Queued::Acquired(_)
        ));
        // The delete after the grant failed: the place is still there, and would make the
        // next waiter wait until it is a patience old.
        assert_eq!(raw.children(&dir).len(), 1, "the orphaned place");
        b.keep_alive(&waiter, lease).unwrap();
        assert!(raw.children(&dir).is_empty(), "deleted by the keep-alive");

        // An orphaned place that a new wait of the same session takes up again (renewing it)
        // before the keep-alive is kept: it is that wait's place in the queue now.
        let take = |s: &simba_lease::SessionId| match b.acquire(s, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        let mine = match b.acquire_queued(&waiter, &name, patience).unwrap() {
            Queued::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        assert!(b.release(&waiter, &name, mine.token).unwrap());
        let t = take(&holder);
        assert!(matches!(
            b.acquire_queued(&waiter, &name, patience).unwrap(),
            Queued::Waiting { .. }
        ));
        assert!(b.release(&holder, &name, t.token).unwrap());
        b.b().fail_place_deletes(1);
        let mine = match b.acquire_queued(&waiter, &name, patience).unwrap() {
            Queued::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        let orphan = raw.children(&dir);
        assert_eq!(orphan.len(), 1, "orphaned again");
        assert!(b.release(&waiter, &name, mine.token).unwrap());
        let t = take(&holder);
        assert!(matches!(
            b.acquire_queued(&waiter, &name, patience).unwrap(),
            Queued::Waiting { .. }
        ));
        b.keep_alive(&waiter, lease).unwrap();
        assert_eq!(raw.children(&dir), orphan, "the renewed place stays");
        assert!(b.release(&holder, &name, t.token).unwrap());
        for s in [&holder, &waiter] {
            b.close_session(s).unwrap();
        }
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

/// The client's connection is cut (through a proxy) while it holds a lease.
mod fault {
    use super::zk::{self, proxy::Proxy};
    use simba_lease::backends::ZooKeeperBackend;
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{tck, Config, Event, LossReason, Session, SessionState};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn cut_connection_jeopardy_then_lost_and_never_two_holders() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let a_backend = zk::Isolated::via(&hosts, proxy.addr(), None, |b| b);
        let root = a_backend.root().to_owned();
        let a_backend: Arc<dyn LeaseBackend> = Arc::new(a_backend);
        let b_backend: Arc<dyn LeaseBackend> = Arc::new(
            ZooKeeperBackend::builder(hosts.as_str())
                .root(root)
                .build()
                .unwrap(),
        );
        let cfg = Config::builder()
            .lease(Duration::from_secs(2))
            .renew_interval(Duration::from_millis(400))
            .build()
            .unwrap();
        let a = Session::open(a_backend.clone(), cfg.clone()).unwrap();
        let events = a.events();
        let c = Session::open(b_backend.clone(), cfg).unwrap();
        let name = tck::lease_name("cut");
        let ga = a.lock(&name).unwrap();
        let t1 = ga.token();
        assert!(c.try_lock(&name).unwrap().is_none());

        proxy.cut();
        // The other session takes the lease once ZooKeeper expired a's session and deleted
        // its node; a's guard must be invalid by then (its local deadline came first).
        let gc = c
            .lock_timeout(&name, Duration::from_secs(30))
            .expect("c takes over after a's session expired");
        assert!(
            !ga.is_valid(),
            "two holders: a still believes it holds the lease"
        );
        assert!(gc.token() > t1, "{} after {t1}", gc.token());
        let owner = b_backend.owner(&name).unwrap().expect("held");
        assert_eq!((owner.session, owner.token), (c.id(), gc.token()));

        // a went Jeopardy, then lost the lock and the session at its local deadline.
        let mut seen = Vec::new();
        let end = Instant::now() + Duration::from_secs(30);
        while !matches!(seen.last(), Some(Event::SessionExpired { .. })) {
            let left = end.saturating_duration_since(Instant::now());
            seen.push(events.recv_timeout(left).expect("a's SessionExpired event"));
        }
        let pos = |f: &dyn Fn(&Event) -> bool| seen.iter().position(f);
        let jeopardy = pos(&|e| matches!(e, Event::Jeopardy { .. })).expect("Jeopardy");
        let lost = pos(&|e| {
            matches!(
                e,
                Event::LockLost {
                    reason: LossReason::SessionExpired | LossReason::Expired,
                    ..
                }
            )
        })
        .expect("LockLost");
        assert!(jeopardy < lost, "{seen:?}");
        assert_eq!(a.state(), SessionState::Expired);
        assert!(
            !seen.iter().any(|e| matches!(e, Event::Recovered { .. })),
            "{seen:?}"
        );

        drop(ga);
        proxy.heal();
        gc.unlock().unwrap();
        a.close().unwrap();
        c.close().unwrap();
    }
}

/// A 3-node loopback ensemble (`SIMBA_ZK_ENSEMBLE`; pid files and `start.sh` per node under
/// `SIMBA_ZK_ENSEMBLE_DIR`, as `.ci/servers.sh` writes them): failover and leader change.
mod ensemble {
    use super::zk;
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{tck, Config, Event, Metadata, Session, SessionId};
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    struct Node {
        dir: PathBuf,
        port: u16,
    }

    fn nodes() -> Vec<Node> {
        let base = std::env::var("SIMBA_ZK_ENSEMBLE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ci/zk-ensemble")
            });
        (1..=3)
            .map(|i| {
                let dir = base.join(format!("zk{i}"));
                let port = std::fs::read_to_string(dir.join("port"))
                    .unwrap_or_else(|e| panic!("{}: {e} (run .ci/servers.sh)", dir.display()))
                    .trim()
                    .parse()
                    .unwrap();
                Node { dir, port }
            })
            .collect()
    }

    fn four(port: u16, word: &str) -> String {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.write_all(word.as_bytes());
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn mode(n: &Node) -> Option<String> {
        four(n.port, "srvr")
            .lines()
            .find_map(|l| l.strip_prefix("Mode: ").map(str::to_owned))
            .filter(|m| m == "leader" || m == "follower")
    }

    /// The node a ZooKeeper session is connected to, per `cons`.
    fn node_of(nodes: &[Node], id: &SessionId) -> Option<usize> {
        let raw = u64::from_str_radix(id.as_str(), 16).unwrap();
        nodes.iter().position(|n| {
            four(n.port, "cons").split("sid=0x").skip(1).any(|rest| {
                let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
                u64::from_str_radix(&hex, 16).ok() == Some(raw)
            })
        })
    }

    fn kill(n: &Node) {
        let pid = std::fs::read_to_string(n.dir.join("pid")).unwrap();
        let ok = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {}", pid.trim());
    }

    fn restart(n: &Node) {
        let ok = std::process::Command::new("bash")
            .arg(n.dir.join("start.sh"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "restarting {}", n.dir.display());
        let mut h = tck::Harness::new(|| unreachable!());
        h.patience = Duration::from_secs(90);
        h.until("the restarted server serves", || mode(n).is_some());
    }

    fn acquired(b: &dyn LeaseBackend, s: &SessionId, name: &simba_lease::LeaseName) -> u64 {
        match b.acquire(s, name).unwrap() {
            Acquire::Acquired(t) => t.token.get(),
            other => panic!("{other:?}"),
        }
    }

    /// The tests of this module one at a time (the failover test stops nodes).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A harness of isolated backends on the ensemble with a 2 s lease, once every node
    /// serves.
    fn serving_harness() -> tck::Harness {
        let nodes = nodes();
        let h = tck::Harness::new(|| {
            Arc::new(zk::Isolated::new(&zk::ensemble_hosts(), None, |b| b)) as Arc<dyn LeaseBackend>
        })
        .with_lease(Duration::from_secs(2));
        h.until("all ensemble nodes serve", || {
            nodes.iter().all(|n| mode(n).is_some())
        });
        h
    }

    /// Read-write locks with sessions on followers (whose reads may lag the leader: the
    /// compare-and-set of every grant catches a decision made on a stale read).
    #[test]
    fn rw_locks_exclude_and_follow_the_token_rule_on_the_ensemble() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let h = serving_harness();
        tck::rw_backend_readers_share_writers_wait_and_tokens_follow_the_rule(&h);
        tck::rw_keep_alive_lists_the_sessions_read_and_write_terms(&h);
        tck::rw_locks_exclude_under_contention(&h);
        tck::rw_a_waiting_writer_blocks_new_readers(&h);
    }

    /// Lock-delay of read-write terms with sessions on followers: a stamp written through one
    /// server times the delay that an attempt through another sees.
    #[test]
    fn rw_lock_delay_holds_on_the_ensemble() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let h = serving_harness();
        tck::rw_lock_delay_blocks_after_an_expired_writer_or_reader(&h);
        tck::rw_lock_delay_does_not_follow_a_release_a_close_or_a_wait(&h);
        tck::rw_lock_delay_holds_a_lost_write_term_of_an_engine_session(&h);
    }

    #[test]
    fn failover_keeps_sessions_and_tokens_increase_across_leader_change() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let nodes = nodes();
        let mut h = tck::Harness::new(|| unreachable!());
        h.patience = Duration::from_secs(60);
        h.until("all ensemble nodes serve", || {
            nodes.iter().all(|n| mode(n).is_some())
        });
        let b = Arc::new(zk::Isolated::new(&zk::ensemble_hosts(), None, |b| b));
        let lease = Duration::from_secs(8);
        let cfg = Config::builder()
            .lease(lease)
            .renew_interval(lease / 5)
            .build()
            .unwrap();
        let s = Session::open(b.clone(), cfg).unwrap();
        let events = s.events();
        let guard = s.lock(tck::lease_name("ens-lock")).unwrap();
        // `members` syncs first: a join that just returned (through whichever server the
        // member's session uses) is in the view read through the backend's reader.
        let group = tck::group_name("ens");
        let members: Vec<SessionId> = (0..6)
            .map(|_| b.open_session(lease, &Metadata::default()).unwrap().id)
            .collect();
        for (i, m) in members.iter().enumerate() {
            b.join(m, &group).unwrap();
            assert_eq!(
                b.members(&group).unwrap().len(),
                i + 1,
                "join {i} not in the view"
            );
        }
        for m in &members {
            b.close_session(m).unwrap();
        }
        assert!(b.members(&group).unwrap().is_empty());

        let raw = b.open_session(lease, &Metadata::default()).unwrap().id;
        let name = tck::lease_name("ens");
        let t1 = acquired(&*b, &raw, &name);

        // Kill the server the raw session is connected to: it fails over, same session.
        let mut on = None;
        h.until("the session shows on a server", || {
            on = node_of(&nodes, &raw);
            on.is_some()
        });
        let killed = on.unwrap();
        kill(&nodes[killed]);
        let mut ka = None;
        h.until("a keep-alive succeeds after the failover", || {
            match b.keep_alive(&raw, lease) {
                Ok(k) => {
                    ka = Some(k);
                    true
                }
                Err(e) => {
                    assert!(!e.is_session_expired(), "session lost in failover: {e}");
                    false
                }
            }
        });
        let held: Vec<_> = ka
            .unwrap()
            .leases
            .into_iter()
            .map(|l| (l.name, l.token.get()))
            .collect();
        assert_eq!(
            held,
            vec![(name.clone(), t1)],
            "the lease survived the failover"
        );
        assert_ne!(node_of(&nodes, &raw), Some(killed));
        restart(&nodes[killed]);

        // Tokens strictly increase across a leader change.
        assert!(b
            .release(&raw, &name, simba_lease::Token::new(t1).unwrap())
            .unwrap());
        let t2 = acquired(&*b, &raw, &name);
        assert!(b
            .release(&raw, &name, simba_lease::Token::new(t2).unwrap())
            .unwrap());
        let leader = nodes
            .iter()
            .position(|n| mode(n).as_deref() == Some("leader"))
            .expect("a leader");
        kill(&nodes[leader]);
        let mut t3 = 0;
        let start = Instant::now();
        h.until("a new term after the leader change", || {
            let _ = b.keep_alive(&raw, lease);
            match b.acquire(&raw, &name) {
                Ok(Acquire::Acquired(t)) => {
                    t3 = t.token.get();
                    true
                }
                Ok(other) => panic!("{other:?}"),
                Err(e) => {
                    assert!(!e.is_session_expired(), "session lost in the election: {e}");
                    false
                }
            }
        });
        log::info!("new term {:?} after the leader was killed", start.elapsed());
        assert!(t2 > t1 && t3 > t2, "tokens {t1}, {t2}, {t3}");
        restart(&nodes[leader]);

        // The engine's session kept its lock through both kills.
        assert!(guard.is_valid());
        let lost: Vec<Event> = events
            .try_iter()
            .filter(|e| matches!(e, Event::LockLost { .. } | Event::SessionExpired { .. }))
            .collect();
        assert!(lost.is_empty(), "{lost:?}");
        guard.unlock().unwrap();
        s.close().unwrap();
        b.close_session(&raw).unwrap();
    }
}

/// A create whose reply is lost: the name counts as possibly owned, the next keep-alive
/// reports the lease after checking the node's owner, and the engine releases it.
mod lost_reply {
    use super::zk::{self, proxy::Proxy};
    use simba_lease::backends::ZooKeeperBackend;
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{tck, Config, Error, Metadata, Session};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn keep_alive_reports_a_lease_whose_create_reply_was_lost() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_millis(500))
        });
        let direct = ZooKeeperBackend::builder(hosts.as_str())
            .root(b.root())
            .build()
            .unwrap();
        let h = tck::Harness::new(|| unreachable!());
        let lease = Duration::from_secs(20);
        let s = b.open_session(lease, &Metadata::default()).unwrap().id;
        let name = tck::lease_name("lost");

        proxy.hold_replies();
        let r = b.acquire(&s, &name);
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        h.until("the create took effect on the server", || {
            direct.owner(&name).unwrap().is_some()
        });
        let owner = direct.owner(&name).unwrap().unwrap();
        assert_eq!(owner.session, s);
        proxy.release_replies();

        let mut listed = None;
        h.until("a keep-alive succeeds", || match b.keep_alive(&s, lease) {
            Ok(ka) => {
                listed = Some(ka.leases);
                true
            }
            Err(_) => false,
        });
        let listed: Vec<_> = listed
            .unwrap()
            .into_iter()
            .map(|l| (l.name, l.token))
            .collect();
        assert_eq!(listed, vec![(name, owner.token)]);
        b.close_session(&s).unwrap();
    }

    #[test]
    fn the_engine_releases_a_lease_whose_grant_reply_was_lost() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_millis(500))
        });
        let direct = ZooKeeperBackend::builder(hosts.as_str())
            .root(b.root())
            .build()
            .unwrap();
        let b: Arc<dyn LeaseBackend> = Arc::new(b);
        let h = tck::Harness::new(|| unreachable!());
        let cfg = Config::builder()
            .lease(Duration::from_secs(20))
            .renew_interval(Duration::from_secs(1))
            .build()
            .unwrap();
        let s = Session::open(b, cfg).unwrap();
        let name = tck::lease_name("stray");
        proxy.hold_replies();
        assert!(matches!(s.try_lock(&name), Err(Error::Timeout { .. })));
        h.until("the create took effect on the server", || {
            direct.owner(&name).unwrap().is_some()
        });
        proxy.release_replies();
        h.until("the engine released the stray lease", || {
            direct.owner(&name).unwrap().is_none()
        });
        s.close().unwrap();
    }
}

/// The backend's reader loses its session: it reconnects with a new one, subscribers get a
/// `Resync`, and watches and reads work again.
mod reader {
    use super::zk::{self, proxy::Proxy};
    use simba_lease::backends::ZooKeeperBackend;
    use simba_lease::spi::{Acquire, LeaseBackend, Notification};
    use simba_lease::{tck, Metadata};
    use std::time::Duration;

    #[test]
    fn expired_reader_reconnects_and_resyncs() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let a = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.reader_session_timeout(Duration::from_secs(1))
        });
        let b = ZooKeeperBackend::builder(hosts.as_str())
            .root(a.root())
            .build()
            .unwrap();
        let (rx, _sub) = zk::notifications(&a);
        let h = tck::Harness::new(|| unreachable!());
        // A session of `a` with a longer timeout than the reader's: once the server expired
        // it (its node is gone), it expired the reader too.
        let sa = a
            .open_session(Duration::from_secs(2), &Metadata::default())
            .unwrap()
            .id;
        let marker = tck::lease_name("marker");
        assert!(matches!(
            a.acquire(&sa, &marker).unwrap(),
            Acquire::Acquired(_)
        ));
        proxy.cut();
        h.until("the server expired a's sessions", || {
            b.owner(&marker).unwrap().is_none()
        });
        while rx.try_recv().is_ok() {}
        proxy.heal();
        zk::wait_for(
            &rx,
            h.patience,
            "Resync after the reader reconnected",
            |n| *n == Notification::Resync,
        );
        // The new reader's watch and reads work.
        let sb = b
            .open_session(Duration::from_secs(30), &Metadata::default())
            .unwrap()
            .id;
        let name = tck::lease_name("after");
        let t = match b.acquire(&sb, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        h.until("a reads the new owner", || {
            a.owner(&name).unwrap().map(|o| o.session) == Some(sb.clone())
        });
        assert!(b.release(&sb, &name, t.token).unwrap());
        zk::wait_for(&rx, h.patience, "release notified by the new reader", |n| {
            *n == Notification::Released(name.clone())
        });
        b.close_session(&sb).unwrap();
    }

    /// The reader's connection drops and comes back on the same session: after the `Resync`,
    /// releases are notified again (the persistent watch is added again).
    #[test]
    fn reader_watch_works_after_a_reconnect_of_the_same_session() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let a = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_millis(500))
        });
        let b = ZooKeeperBackend::builder(hosts.as_str())
            .root(a.root())
            .build()
            .unwrap();
        let (rx, _sub) = zk::notifications(&a);
        let h = tck::Harness::new(|| unreachable!());
        let sb = b
            .open_session(Duration::from_secs(30), &Metadata::default())
            .unwrap()
            .id;
        let notified = |what: &str, want: &dyn Fn(&Notification) -> bool| {
            zk::wait_for(&rx, h.patience, what, want)
        };
        let release = |prefix: &str| {
            let name = tck::lease_name(prefix);
            let Acquire::Acquired(t) = b.acquire(&sb, &name).unwrap() else {
                panic!("acquire {name}")
            };
            assert!(b.release(&sb, &name, t.token).unwrap());
            name
        };
        let name = release("before");
        notified("release notified", &|n| {
            *n == Notification::Released(name.clone())
        });
        proxy.cut();
        h.until("the reader is disconnected", || a.ping().is_err());
        proxy.heal();
        notified("Resync after the reconnect", &|n| {
            *n == Notification::Resync
        });
        let name = release("after");
        notified("release notified after the reconnect", &|n| {
            *n == Notification::Released(name.clone())
        });
        b.close_session(&sb).unwrap();
    }
}

/// `connection_timeout` bounds opening a session when no server answers.
mod connecting {
    use super::zk::{self, proxy::Proxy};
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{backends::ZooKeeperBackend, Error, Metadata};
    use std::time::Duration;

    #[test]
    fn opening_fails_within_the_connection_timeout() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.connection_timeout(Duration::from_millis(800))
        });
        proxy.cut();
        let r = b.open_session(Duration::from_secs(5), &Metadata::default());
        assert!(
            matches!(r, Err(Error::Timeout { .. } | Error::Backend { .. })),
            "{r:?}"
        );
        let r = ZooKeeperBackend::builder(proxy.addr())
            .connection_timeout(Duration::from_millis(800))
            .build();
        assert!(r.is_err(), "{r:?}");
        proxy.heal();
        let s = b.open_session(Duration::from_secs(5), &Metadata::default());
        b.close_session(&s.expect("opens once the server answers").id)
            .unwrap();
    }
}

/// The server ends a session while its client is cut off: release and leave change nothing
/// and return `false`, as on every backend (issue 9.7).
mod expired_on_server {
    use super::zk::{self, proxy::Proxy};
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{tck, Metadata};
    use std::time::{Duration, Instant};

    #[test]
    fn release_and_leave_after_the_server_expired_the_session_return_false() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_secs(60))
        });
        let h = tck::Harness::new(|| unreachable!());
        // ZooKeeper session timeouts of 1 s, but local leases of 2 minutes (the keep-alives
        // below): only the server can end these sessions during the test.
        let open = || {
            b.open_session(Duration::from_secs(1), &Metadata::default())
                .unwrap()
                .id
        };
        let (s1, s2) = (open(), open());
        let (name, group) = (tck::lease_name("srv-exp"), tck::group_name("srv-exp"));
        let t = match b.acquire(&s1, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        b.join(&s2, &group).unwrap();
        for s in [&s1, &s2] {
            b.keep_alive(s, Duration::from_secs(120)).unwrap();
        }
        proxy.cut();
        // A call may fail like any call on a cut connection (it is then tried again); once
        // the client is disconnected, a call waits for it, and it gives up reconnecting after
        // 1.4 × the session timeout and finds its session expired.
        let retried = |f: &dyn Fn() -> simba_lease::Result<bool>| {
            let end = Instant::now() + h.patience;
            loop {
                match f() {
                    Err(e) if !e.is_session_expired() && Instant::now() < end => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    r => return r,
                }
            }
        };
        let (released, left) = std::thread::scope(|sc| {
            let r = sc.spawn(|| retried(&|| b.release(&s1, &name, t.token)));
            let l = sc.spawn(|| retried(&|| b.leave(&s2, &group)));
            (r.join().unwrap(), l.join().unwrap())
        });
        assert!(
            matches!((&released, &left), (Ok(false), Ok(false))),
            "release: {released:?}, leave: {left:?}"
        );
        proxy.heal();
        for s in [&s1, &s2] {
            let r = b.keep_alive(s, Duration::from_secs(120));
            assert!(matches!(&r, Err(e) if e.is_session_expired()), "{r:?}");
        }
        let s3 = b
            .open_session(Duration::from_secs(30), &Metadata::default())
            .unwrap()
            .id;
        let mut t3 = None;
        h.until("the lease is free for the next session", || {
            if let Acquire::Acquired(t) = b.acquire(&s3, &name).unwrap() {
                t3 = Some(t.token);
            }
            t3.is_some()
        });
        assert!(t3.unwrap() > t.token);
        assert!(b.members(&group).unwrap().is_empty());
        b.close_session(&s3).unwrap();
    }
}

/// A negotiated session timeout below the lease would make every session expire between
/// keep-alives: opening fails with a typed error naming both (issue 9.8).
mod negotiated {
    use super::zk;
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{Config, Error, Metadata, Session};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_lease_above_the_servers_max_session_timeout_fails_open_session() {
        let b = Arc::new(zk::Isolated::new(&zk::hosts(), None, |b| b));
        // The test server's maxSessionTimeout is 120 s (.ci/servers.sh): it grants no more.
        let lease = Duration::from_secs(150);
        let check = |r: simba_lease::Result<_>| match r {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "lease");
                assert!(reason.contains("150s"), "{reason}");
                assert!(reason.contains("120s"), "{reason}");
            }
            Err(e) => panic!("expected InvalidConfig, got {e}"),
            Ok(_) => panic!("opened a session the server would expire between keep-alives"),
        };
        check(b.open_session(lease, &Metadata::default()).map(drop));
        let cfg = Config::builder()
            .lease(lease)
            .renew_interval(Duration::from_secs(50))
            .build()
            .unwrap();
        check(Session::open(b.clone(), cfg).map(drop));
        // At the maximum, and below the minimum (200 ms, negotiated up): fine.
        for lease in [Duration::from_secs(120), Duration::from_millis(100)] {
            let g = b.open_session(lease, &Metadata::default()).unwrap();
            assert!(g.remaining <= lease, "{:?} > {lease:?}", g.remaining);
            b.close_session(&g.id).unwrap();
        }
    }
}

/// Closing a session whose client cannot reach the server returns at once: the dropped
/// client closes the session when it reconnects, or the server expires it (issue 9.9).
mod closing {
    use super::zk::{self, proxy::Proxy};
    use simba_lease::backends::ZooKeeperBackend;
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{tck, Metadata};
    use std::time::{Duration, Instant};

    #[test]
    fn closing_a_disconnected_session_does_not_wait_for_the_server() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let request_timeout = Duration::from_secs(120);
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(request_timeout)
        });
        let direct = ZooKeeperBackend::builder(hosts.as_str())
            .root(b.root())
            .build()
            .unwrap();
        let h = tck::Harness::new(|| unreachable!());
        // The client keeps trying to reconnect for 1.4 × 60 s.
        let lease = Duration::from_secs(60);
        let s = b.open_session(lease, &Metadata::default()).unwrap().id;
        let name = tck::lease_name("close-cut");
        assert!(matches!(
            b.acquire(&s, &name).unwrap(),
            Acquire::Acquired(_)
        ));
        proxy.cut();
        let start = Instant::now();
        b.close_session(&s).unwrap();
        let took = start.elapsed();
        assert!(
            took < request_timeout / 3,
            "close waited {took:?} for a server it cannot reach"
        );
        let r = b.keep_alive(&s, lease);
        assert!(matches!(&r, Err(e) if e.is_session_expired()), "{r:?}");
        proxy.heal();
        // Well before the session timeout (60 s): the dropped client closed it on reconnecting.
        h.until("the closed session's lease is freed", || {
            direct.owner(&name).unwrap().is_none()
        });
    }
}

/// A new term is notified as `Acquired`; a re-acquire by the holder is not (issue 9.15).
mod acquired_notification {
    use super::zk;
    use simba_lease::spi::{Acquire, LeaseBackend, Notification};
    use simba_lease::{tck, Metadata};
    use std::time::{Duration, Instant};

    #[test]
    fn a_new_term_is_notified_as_acquired() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let (rx, _sub) = zk::notifications(&b);
        let lease = Duration::from_secs(30);
        let s1 = b.open_session(lease, &Metadata::default()).unwrap().id;
        let s2 = b.open_session(lease, &Metadata::default()).unwrap().id;
        let name = tck::lease_name("acq-note");
        let acquired = |s| match b.acquire(s, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        let t1 = acquired(&s1);
        assert_eq!(acquired(&s1).token, t1.token, "re-acquire: same term");
        assert!(b.release(&s1, &name, t1.token).unwrap());
        let t2 = acquired(&s2);
        assert!(t2.token > t1.token);
        // Watch events arrive in zxid order: the re-acquire created nothing.
        let expected = [
            Notification::Acquired(name.clone()),
            Notification::Released(name.clone()),
            Notification::Acquired(name.clone()),
        ];
        let mut seen = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while seen.len() < expected.len() {
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Notification::Acquired(l) | Notification::Released(l)) if l != name => {}
                Ok(n @ (Notification::Acquired(_) | Notification::Released(_))) => seen.push(n),
                Ok(_) => {}
                Err(_) => panic!("notifications missing: saw {seen:?}"),
            }
        }
        assert_eq!(seen, expected);
        b.close_session(&s1).unwrap();
        b.close_session(&s2).unwrap();
    }
}

/// Issue 12: TLS to the secure client port of the TLS-only servers of `.ci/servers.sh`
/// (`SIMBA_ZK_TLS_URL` and friends; certificates in `SIMBA_ZK_TLS_DIR`).
#[cfg(feature = "tls")]
mod tls {
    use super::zk;
    use simba_lease::backends::zookeeper::{AclPolicy, ZooKeeperBackend};
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{tck, Error, Metadata, TlsFailure};
    use std::sync::Arc;
    use std::time::Duration;

    fn env_url(var: &str, port: u16) -> String {
        std::env::var(var).unwrap_or_else(|_| format!("zookeeper+tls://127.0.0.1:{port}"))
    }

    pub(super) fn url() -> String {
        env_url("SIMBA_ZK_TLS_URL", 2291)
    }

    /// `host:port` of a `zookeeper+tls://` URL.
    fn hosts(url: &str) -> String {
        url.trim_start_matches("zookeeper+tls://").to_owned()
    }

    pub(super) fn file(name: &str) -> String {
        let dir = std::env::var("SIMBA_ZK_TLS_DIR").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/target/ci/redis-tls").to_owned()
        });
        format!("{dir}/{name}")
    }

    /// `url` under a fresh root, with `opts`.
    fn with(url: &str, opts: &str) -> String {
        at(url, &zk::random_root("tls-url"), opts)
    }

    /// `url` under `root`, with `opts`.
    fn at(url: &str, root: &str, opts: &str) -> String {
        format!("{url}{root}?{opts}")
    }

    /// The options trusting the CI's CA, then `opts` (may be empty).
    fn ca_and(opts: &str) -> String {
        let sep = if opts.is_empty() { "" } else { "&" };
        format!("ca={}&connection_timeout=5s{sep}{opts}", file("ca.pem"))
    }

    /// `url` under a fresh root, trusting the CI's CA, with `opts` (may be empty).
    fn trusted(url: &str, opts: &str) -> String {
        with(url, &ca_and(opts))
    }

    pub(super) fn isolated() -> Arc<dyn LeaseBackend> {
        Arc::new(zk::Isolated::tls(
            &hosts(&url()),
            &file("ca.pem"),
            None,
            |b| b,
        ))
    }

    mod tck_over_tls {
        simba_lease::tck_suite!(super::isolated, lease = std::time::Duration::from_secs(1));
    }

    fn connect_error(url: &str) -> Error {
        match simba_lease::connect(url) {
            Ok(b) => match b.ping() {
                Ok(()) => panic!("{url}: connected"),
                Err(e) => e,
            },
            Err(e) => e,
        }
    }

    /// `connect` fails with `Error::Tls` for `failure`, naming the server it shook hands with:
    /// the backend diagnoses the handshake itself (left to the client, a refused handshake
    /// is retried until the 60 s connection timeout, and ends as `Error::Timeout`).
    fn assert_handshake_fails(url: &str, failure: TlsFailure) {
        let sep = if url.ends_with('?') { "" } else { "&" };
        let e = connect_error(&format!("{url}{sep}connection_timeout=60s"));
        assert!(
            matches!(&e, Error::Tls { failure: f, .. } if *f == failure),
            "{url}: {e:?}"
        );
        let report = e.report().to_string();
        assert!(report.contains("TLS handshake with 127.0.0.1:"), "{report}");
    }

    #[test]
    fn tls_with_the_ca_answers_over_tls_only() {
        let root = zk::random_root("tls-url");
        let b = simba_lease::connect(&at(&url(), &root, &ca_and(""))).unwrap();
        b.ping().unwrap();
        let s = b
            .open_session(Duration::from_secs(5), &Metadata::default())
            .unwrap();
        let name = tck::lease_name("tls");
        assert!(matches!(
            b.acquire(&s.id, &name).unwrap(),
            Acquire::Acquired(_)
        ));
        b.close_session(&s.id).unwrap();
        drop(b);
        zk::tls_delete_tree(&hosts(&url()), &file("ca.pem"), None, None, &root);
        // The server has no plaintext port: the connection really is TLS.
        let plain = url().replacen("zookeeper+tls://", "zookeeper://", 1);
        let e = connect_error(&with(&plain, "connection_timeout=2s"));
        assert!(matches!(e, Error::Backend { .. }), "{e:?}");
        let report = e.report().to_string();
        assert!(report.contains("answers a TLS handshake"), "{report}");
    }

    #[test]
    fn tls_without_the_ca_fails() {
        // The platform's roots do not hold the CI's throwaway CA.
        assert_handshake_fails(&with(&url(), ""), TlsFailure::UnknownIssuer);
    }

    #[test]
    fn tls_with_another_ca_fails() {
        let opts = format!("ca={}", file("other-ca.pem"));
        assert_handshake_fails(&with(&url(), &opts), TlsFailure::UnknownIssuer);
        // Credentials never show in the error.
        let pw = "Wr0ng-Pa55word";
        let u = url().replacen(
            "zookeeper+tls://",
            &format!("zookeeper+tls://simba:{pw}@"),
            1,
        );
        let e = connect_error(&with(&u, &opts));
        for text in [e.to_string(), format!("{e:?}"), e.report().to_string()] {
            assert!(!text.contains(pw), "{text}");
        }
    }

    #[test]
    fn tls_certificate_for_another_host_fails() {
        let url = env_url("SIMBA_ZK_TLS_WRONG_HOST_URL", 2293);
        assert_handshake_fails(&trusted(&url, ""), TlsFailure::NameMismatch);
    }

    #[test]
    fn tls_expired_certificate_fails() {
        let url = env_url("SIMBA_ZK_TLS_EXPIRED_URL", 2292);
        assert_handshake_fails(&trusted(&url, ""), TlsFailure::Expired);
    }

    #[test]
    fn tls_to_a_plaintext_port_fails() {
        let plain = super::zk::hosts();
        let first = plain.split(',').next().unwrap();
        let e = connect_error(&trusted(&format!("zookeeper+tls://{first}"), ""));
        assert!(
            matches!(
                e,
                Error::Tls {
                    failure: TlsFailure::NotOffered,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.report().to_string().contains("not a TLS port"),
            "{}",
            e.report()
        );
    }

    #[test]
    fn tls_client_certificate() {
        // This server requires a client certificate signed by the CA.
        let auth_url = env_url("SIMBA_ZK_TLS_CLIENT_AUTH_URL", 2294);
        let (cert, key) = (file("client.pem"), file("client.key"));
        let opts = format!("cert={cert}&key={key}");
        let root = zk::random_root("tls-url");
        let b = simba_lease::connect(&at(&auth_url, &root, &ca_and(&opts))).unwrap();
        b.ping().unwrap();
        let s = b
            .open_session(Duration::from_secs(5), &Metadata::default())
            .unwrap();
        b.close_session(&s.id).unwrap();
        drop(b);
        let identity = Some((cert.as_str(), key.as_str()));
        zk::tls_delete_tree(&hosts(&auth_url), &file("ca.pem"), identity, None, &root);
        // Without one: the handshake completes on our side (TLS 1.3), then the server's
        // alert is named.
        assert_handshake_fails(&trusted(&auth_url, ""), TlsFailure::ClientCertificate);
    }

    #[test]
    fn tls_digest_auth_and_creator_acl() {
        let pw = "s3cret-Pa55";
        let cred = format!("simba:{pw}");
        let auth = Some(("digest", cred.as_bytes()));
        let b = zk::Isolated::tls(&hosts(&url()), &file("ca.pem"), auth, |b| {
            b.digest("simba", pw).acl(AclPolicy::creator_all())
        });
        assert!(!format!("{:?}", b.b()).contains(pw), "{:?}", b.b());
        let s = b
            .open_session(Duration::from_secs(5), &Metadata::default())
            .unwrap();
        let name = tck::lease_name("tls-acl");
        assert!(matches!(
            b.acquire(&s.id, &name).unwrap(),
            Acquire::Acquired(_)
        ));
        assert_eq!(b.owner(&name).unwrap().unwrap().session, s.id);
        b.close_session(&s.id).unwrap();
    }

    #[test]
    fn tls_files_are_checked() {
        let not_pem = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        for (opts, setting) in [
            ("ca=/nonexistent/ca.pem".to_owned(), "ca"),
            (format!("ca={not_pem}"), "ca"),
            (format!("ca={}", file("client.key")), "ca"),
            (format!("cert={}", file("client.pem")), "key"),
            (format!("key={}", file("client.key")), "cert"),
            (format!("cert={}&key={not_pem}", file("client.pem")), "key"),
            (format!("cert={not_pem}&key={}", file("client.key")), "cert"),
            // A key that does not belong to the certificate.
            (
                format!("cert={}&key={}", file("client.pem"), file("server.key")),
                "key",
            ),
        ] {
            let e = simba_lease::connect(&with(&url(), &opts)).err().unwrap();
            assert!(
                matches!(&e, Error::InvalidConfig { setting: s, .. } if s == setting),
                "{opts}: {e:?}"
            );
        }
        // The same through the builder: TLS options without TLS, a plaintext entry with TLS.
        let h = hosts(&url());
        let e = ZooKeeperBackend::builder(h.as_str())
            .ca(file("ca.pem"))
            .build();
        assert!(
            matches!(&e, Err(Error::InvalidConfig { setting, .. }) if setting == "ca"),
            "{e:?}"
        );
        let e = ZooKeeperBackend::builder(format!("tcp://{h}"))
            .tls(true)
            .build();
        assert!(
            matches!(&e, Err(Error::InvalidConfig { setting, .. }) if setting == "connect"),
            "{e:?}"
        );
        // TLS options on a plaintext URL: refused, never ignored.
        let plain = url().replacen("zookeeper+tls://", "zookeeper://", 1);
        let e = simba_lease::connect(&with(&plain, &format!("ca={}", file("ca.pem"))))
            .err()
            .unwrap();
        assert!(
            matches!(&e, Error::InvalidConfig { setting, .. } if setting == "ca"),
            "{e:?}"
        );
    }
}

/// A keep-alive reads no held lease node: each carries a watch, and a lease whose node was
/// deleted, re-created or changed behind the session's back is checked again, so it is never
/// reported by a keep-alive sent after the change.
mod watched_leases {
    use super::zk::{self, proxy::Proxy, raw::Raw};
    use simba_lease::spi::{Acquire, KeepAlive, LeaseBackend};
    use simba_lease::{tck, LeaseName, Metadata, SessionId, Token};
    use std::collections::BTreeMap;
    use std::time::Duration;

    const LEASE: Duration = Duration::from_secs(30);

    fn acquire_all(b: &dyn LeaseBackend, s: &SessionId, n: usize) -> BTreeMap<LeaseName, Token> {
        (0..n)
            .map(|i| {
                let name = tck::lease_name(&format!("w{i}"));
                match b.acquire(s, &name).unwrap() {
                    Acquire::Acquired(t) => (name, t.token),
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    fn listed(ka: KeepAlive) -> BTreeMap<LeaseName, Token> {
        let n = ka.leases.len();
        let m: BTreeMap<_, _> = ka.leases.into_iter().map(|l| (l.name, l.token)).collect();
        assert_eq!(m.len(), n, "a lease listed twice");
        m
    }

    fn path(b: &zk::Isolated, name: &LeaseName) -> String {
        format!("{}/leases/{}", b.root(), name.as_str())
    }

    #[test]
    fn a_lease_node_deleted_or_recreated_behind_the_sessions_back_is_lost_at_the_next_keep_alive() {
        let hosts = zk::hosts();
        let b = zk::Isolated::new(&hosts, None, |b| b);
        let s = b.open_session(LEASE, &Metadata::default()).unwrap().id;
        let mut held = acquire_all(&b, &s, 40);
        assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held);
        let mut raw = Raw::connect(&hosts);
        let names: Vec<LeaseName> = held.keys().cloned().collect();
        for (i, name) in names.iter().enumerate() {
            // The server has applied the change when the raw client's call returns; the very
            // next keep-alive must not report the lease (many rounds, to catch a race).
            assert_eq!(raw.delete(&path(&b, name)), 0);
            if i % 2 == 1 {
                // Re-created by another session: same path, another owner and token.
                assert_eq!(raw.create(&path(&b, name), b"other", 1), 0);
            }
            held.remove(name);
            assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held, "round {i}");
            let again = b.acquire(&s, name).unwrap();
            if i % 2 == 1 {
                assert!(matches!(again, Acquire::Held(_)), "{again:?}");
            } else {
                let Acquire::Acquired(t) = again else {
                    panic!("{again:?}")
                };
                held.insert(name.clone(), t.token);
                assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held);
                assert!(b.release(&s, name, t.token).unwrap());
                held.remove(name);
            }
        }
        assert!(listed(b.keep_alive(&s, LEASE).unwrap()).is_empty());
        b.close_session(&s).unwrap();
    }

    /// The deletion's event reaches the client in the same burst as the keep-alive's reply
    /// (the proxy holds both back): it is applied before the reply is used.
    #[test]
    fn an_event_that_arrives_with_the_reply_is_applied_before_it() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = std::sync::Arc::new(zk::Isolated::via(&hosts, proxy.addr(), None, |b| b));
        let h = tck::Harness::new(|| unreachable!());
        let s = b.open_session(LEASE, &Metadata::default()).unwrap().id;
        let mut held = acquire_all(&*b, &s, 10);
        let mut raw = Raw::connect(&hosts);
        let names: Vec<LeaseName> = held.keys().cloned().collect();
        for name in names.iter().take(5) {
            assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held);
            proxy.hold_replies();
            assert_eq!(raw.delete(&path(&b, name)), 0);
            held.remove(name);
            let before = proxy.sent_bytes();
            let (b2, s2) = (b.clone(), s.clone());
            let ka = std::thread::spawn(move || b2.keep_alive(&s2, LEASE));
            h.until("the keep-alive request went out", || {
                proxy.sent_bytes() > before
            });
            proxy.release_replies();
            assert_eq!(listed(ka.join().unwrap().unwrap()), held);
        }
        b.close_session(&s).unwrap();
    }

    #[test]
    fn a_lease_node_whose_data_changed_stays_held_with_its_token() {
        let hosts = zk::hosts();
        let b = zk::Isolated::new(&hosts, None, |b| b);
        let s = b.open_session(LEASE, &Metadata::default()).unwrap().id;
        let held = acquire_all(&b, &s, 5);
        let mut raw = Raw::connect(&hosts);
        for (round, name) in held.keys().enumerate() {
            assert_eq!(raw.set_data(&path(&b, name), b"changed"), 0);
            assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held, "{round}");
            // The watch was armed again: a deletion after the change is seen too.
            assert_eq!(raw.set_data(&path(&b, name), b"again"), 0);
            assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held, "{round}");
        }
        let name = held.keys().next().unwrap();
        assert_eq!(raw.delete(&path(&b, name)), 0);
        let mut left = held.clone();
        left.remove(name);
        assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), left);
        b.close_session(&s).unwrap();
    }

    #[test]
    fn a_lease_node_deleted_while_disconnected_is_lost_after_the_reconnect() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_millis(500))
        });
        let h = tck::Harness::new(|| unreachable!());
        let s = b.open_session(LEASE, &Metadata::default()).unwrap().id;
        let mut held = acquire_all(&b, &s, 10);
        assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held);
        proxy.cut();
        h.until("the keep-alive sees the disconnection", || {
            b.keep_alive(&s, LEASE).is_err()
        });
        let mut raw = Raw::connect(&hosts);
        let gone: Vec<LeaseName> = held.keys().take(3).cloned().collect();
        for name in &gone {
            assert_eq!(raw.delete(&path(&b, name)), 0);
            held.remove(name);
        }
        proxy.heal();
        let mut ka = None;
        h.until("a keep-alive succeeds after the reconnect", || {
            match b.keep_alive(&s, LEASE) {
                Ok(k) => {
                    ka = Some(k);
                    true
                }
                Err(_) => false,
            }
        });
        assert_eq!(listed(ka.unwrap()), held);
        b.close_session(&s).unwrap();
    }

    #[test]
    fn a_keep_alive_does_not_read_every_held_lease() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| b);
        let s = b.open_session(LEASE, &Metadata::default()).unwrap().id;
        let held = acquire_all(&b, &s, 200);
        assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held);
        let path_bytes: usize = held.keys().map(|n| path(&b, n).len()).sum();
        for _ in 0..5 {
            let before = proxy.sent_bytes();
            assert_eq!(listed(b.keep_alive(&s, LEASE).unwrap()), held);
            let sent = proxy.sent_bytes() - before;
            // One `exists` of the leases root (and maybe a ping): not a path per lease.
            assert!(
                sent < 400,
                "a keep-alive sent {sent} bytes; the lease paths are {path_bytes}"
            );
        }
        b.close_session(&s).unwrap();
    }
}

/// Lock-delay gates (see the backend's `delay` module): which nodes each step leaves, and a
/// session the servers expire (not the watchdog) leaves its gate too.
mod lock_delay {
    use super::zk::{self, proxy::Proxy, raw};
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{tck, LeaseName, Metadata, SessionId, Term};
    use std::time::{Duration, Instant};

    fn acquired(b: &dyn LeaseBackend, s: &SessionId, name: &LeaseName) -> Term {
        match b.acquire(s, name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gates_come_and_go_with_their_terms_and_a_stamp_times_the_delay() {
        let hosts = zk::hosts();
        let b = zk::Isolated::new(&hosts, None, |b| b);
        let mut raw = raw::Raw::connect(&hosts);
        let delays = format!("{}/delays", b.root());
        let (m, long) = (Metadata::default(), Duration::from_secs(60));
        let plain = b.open_session(long, &m).unwrap().id;
        let delayed = b
            .open(&simba_lease::spi::SessionSpec::new(long, &m).lock_delay(long))
            .unwrap()
            .id;
        let name = tck::lease_name("gate");
        let gate = format!("{delays}/{name}");
        // A session without a delay leaves no gate.
        let t = acquired(&b, &plain, &name);
        assert!(raw.children(&delays).is_empty());
        assert!(b.release(&plain, &name, t.token).unwrap());
        // With a delay: the gate and its holder's child, gone with a release and a close.
        let t = acquired(&b, &delayed, &name);
        assert_eq!(raw.children(&gate), [format!("h-{delayed}")]);
        assert!(
            matches!(b.acquire(&plain, &name).unwrap(), Acquire::Held(o) if o.session == delayed)
        );
        assert!(b.release(&delayed, &name, t.token).unwrap());
        assert!(raw.children(&delays).is_empty());
        acquired(&b, &delayed, &name);
        b.close_session(&delayed).unwrap();
        assert!(raw.children(&delays).is_empty());
        let t = acquired(&b, &plain, &name);
        assert!(b.release(&plain, &name, t.token).unwrap());
        // Ended by the watchdog: the gate stays; the first look stamps it.
        let short = Duration::from_secs(1);
        let d = Duration::from_secs(3);
        let crashed = b
            .open(&simba_lease::spi::SessionSpec::new(short, &m).lock_delay(d))
            .unwrap()
            .id;
        let t = acquired(&b, &crashed, &name);
        let probe = tck::lease_name("probe");
        tck::until(Duration::from_secs(20), "the session expires", || {
            b.acquire(&crashed, &probe).is_err()
        });
        let holder = format!("{gate}/h-{crashed}");
        let stamp = format!("{holder}/ended");
        assert_eq!(raw.ctime(&stamp), None);
        let o = b.owner(&name).unwrap().expect("in its delay");
        assert_eq!(
            (&o.session, o.token, o.remaining <= d),
            (&crashed, t.token, true)
        );
        let stamped = raw.ctime(&stamp).expect("stamped by the first look");
        match b.acquire(&plain, &name).unwrap() {
            Acquire::Held(o) => assert!(o.session == crashed && o.remaining <= d, "{o:?}"),
            other => panic!("taken in its delay: {other:?}"),
        }
        assert_eq!(raw.ctime(&stamp), Some(stamped), "stamped once");
        let mut next = None;
        tck::until(Duration::from_secs(20), "taken after the delay", || {
            if let Acquire::Acquired(t) = b.acquire(&plain, &name).unwrap() {
                next = Some(t);
            }
            next.is_some()
        });
        assert!(next.unwrap().token > t.token);
        // The take removed the gate (the taker has no delay); the probe's stays in its delay.
        assert_eq!(raw.children(&delays), [probe.to_string()]);
        b.close_session(&plain).unwrap();
    }

    #[test]
    fn a_session_the_servers_expire_leaves_its_gate() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_secs(60))
        });
        // A ZooKeeper session timeout of 1 s, but a local lease of 2 minutes: only the server
        // can end it during the test.
        let long = Duration::from_secs(60);
        let s = b
            .open(
                &simba_lease::spi::SessionSpec::new(Duration::from_secs(1), &Metadata::default())
                    .lock_delay(long),
            )
            .unwrap()
            .id;
        let name = tck::lease_name("srv-gate");
        let t = acquired(&b, &s, &name);
        b.keep_alive(&s, Duration::from_secs(120)).unwrap();
        proxy.cut();
        let end = Instant::now() + Duration::from_secs(20);
        while !b
            .keep_alive(&s, Duration::from_secs(120))
            .is_err_and(|e| e.is_session_expired())
        {
            assert!(Instant::now() < end, "the server expires the session");
            std::thread::sleep(Duration::from_millis(20));
        }
        proxy.heal();
        // Another backend on the same root sees the name in its delay.
        let other = zk::Isolated::new(&hosts, None, |x| x.root(b.root().to_owned()));
        let o = other.open_session(long, &Metadata::default()).unwrap().id;
        match other.acquire(&o, &name).unwrap() {
            Acquire::Held(h) => {
                assert_eq!((&h.session, h.token), (&s, t.token));
                assert!(h.remaining > Duration::from_secs(1) && h.remaining <= long);
            }
            got => panic!("taken in its delay: {got:?}"),
        }
        other.close_session(&o).unwrap();
    }
}

/// Read-write locks beyond the TCK: a waiting writer whose session lives but that stopped
/// asking, releases and leaves as notifications, and grants whose reply was lost.
mod rw {
    use super::zk::{self, proxy::Proxy, raw::Raw};
    use simba_lease::spi::{HeldRw, LeaseBackend, Notification, RwAcquire, RwMode};
    use simba_lease::{tck, Config, Error, Metadata, Session, SessionId, Term};
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    const LONG: Duration = Duration::from_secs(30);

    fn open(b: &zk::Isolated) -> SessionId {
        b.open_session(LONG, &Metadata::default()).unwrap().id
    }

    fn granted(r: RwAcquire) -> Term {
        match r {
            RwAcquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        }
    }

    /// A release of a term whose session has a lock-delay deletes the term and its gate in
    /// one multi: subscribers hear one `Released`, not one per node. A later release of
    /// another name bounds the wait (events arrive in zxid order).
    #[test]
    fn a_release_with_a_lock_delay_is_notified_once() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let (rx, _sub) = zk::notifications(&b);
        let delayed = b
            .open(&simba_lease::spi::SessionSpec::new(LONG, &Metadata::default()).lock_delay(LONG))
            .unwrap()
            .id;
        let plain = open(&b);
        let (name, marker) = (tck::lease_name("rw-note"), tck::lease_name("rw-note-end"));
        let t = granted(b.acquire_rw(&delayed, &name, RwMode::Write, LONG).unwrap());
        let m = granted(b.acquire_rw(&plain, &marker, RwMode::Read, LONG).unwrap());
        assert!(b
            .release_rw(&delayed, &name, RwMode::Write, t.token)
            .unwrap());
        assert!(b
            .release_rw(&plain, &marker, RwMode::Read, m.token)
            .unwrap());
        let mut released = 0;
        loop {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(Notification::Released(n)) if n == marker => break,
                Ok(Notification::Released(n)) if n == name => released += 1,
                Ok(_) => {}
                Err(_) => panic!("the later release was not notified"),
            }
        }
        assert_eq!(released, 1, "one release, one notification");
        b.close_session(&delayed).unwrap();
        b.close_session(&plain).unwrap();
    }

    #[test]
    fn a_writer_that_stopped_asking_frees_readers_after_its_patience_and_queues_again_at_the_back()
    {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let [r1, r2, w1, w2] = [(); 4].map(|_| open(&b));
        let name = tck::lease_name("rw-lapse");
        let read = |s: &SessionId| b.acquire_rw(s, &name, RwMode::Read, LONG).unwrap();
        let t1 = granted(read(&r1));
        let short = Duration::from_secs(1);
        assert!(matches!(
            b.acquire_rw(&w1, &name, RwMode::Write, short).unwrap(),
            RwAcquire::Busy {
                writers_waiting: 1,
                ..
            }
        ));
        assert!(
            matches!(read(&r2), RwAcquire::Busy { .. }),
            "the writer waits"
        );
        assert_eq!(b.rw_state(&name).unwrap().writers_waiting, vec![w1.clone()]);
        // Its session lives, but it asks no more: a patience later readers get in.
        let mut t2 = None;
        tck::until(Duration::from_secs(20), "a reader after the lapse", || {
            t2 = match read(&r2) {
                RwAcquire::Acquired(t) => Some(t),
                _ => None,
            };
            t2.is_some()
        });
        let t2 = t2.unwrap();
        let state = b.rw_state(&name).unwrap();
        assert!(state.writers_waiting.is_empty(), "{state:?}");
        assert_eq!(state.readers.len(), 2, "{state:?}");
        // Its node is still there (only ignored); its next attempt queues it at the back.
        let dir = format!("{}/rw/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        assert!(raw.children(&dir).contains(&format!("q-{w1}")));
        let write = |s: &SessionId| b.acquire_rw(s, &name, RwMode::Write, LONG).unwrap();
        assert!(matches!(write(&w2), RwAcquire::Busy { .. }));
        assert!(matches!(write(&w1), RwAcquire::Busy { .. }));
        assert_eq!(
            b.rw_state(&name).unwrap().writers_waiting,
            vec![w2.clone(), w1.clone()],
            "the lapsed writer is behind the one that asked since"
        );
        assert!(b.release_rw(&r1, &name, RwMode::Read, t1.token).unwrap());
        assert!(b.release_rw(&r2, &name, RwMode::Read, t2.token).unwrap());
        assert!(matches!(write(&w1), RwAcquire::Busy { .. }), "w2 is ahead");
        let tw = granted(write(&w2));
        assert!(tw.token > t2.token);
        assert_eq!(b.rw_state(&name).unwrap().writers_waiting, vec![w1.clone()]);
        for s in [r1, r2, w1, w2] {
            b.close_session(&s).unwrap();
        }
    }

    #[test]
    fn releases_and_leaves_are_notified_as_released() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let (rx, _sub) = zk::notifications(&b);
        let (r, w) = (open(&b), open(&b));
        let name = tck::lease_name("rw-note");
        let released = |what: &str| {
            zk::wait_for(&rx, Duration::from_secs(20), what, |n| {
                *n == Notification::Released(name.clone())
            })
        };
        let t = granted(b.acquire_rw(&r, &name, RwMode::Read, LONG).unwrap());
        assert!(b.release_rw(&r, &name, RwMode::Read, t.token).unwrap());
        released("a read term released");
        let t = granted(b.acquire_rw(&r, &name, RwMode::Read, LONG).unwrap());
        assert!(matches!(
            b.acquire_rw(&w, &name, RwMode::Write, LONG).unwrap(),
            RwAcquire::Busy { .. }
        ));
        assert!(b.leave_rw_queue(&w, &name).unwrap());
        released("a waiting writer left");
        assert!(b.release_rw(&r, &name, RwMode::Read, t.token).unwrap());
        let tw = granted(b.acquire_rw(&w, &name, RwMode::Write, LONG).unwrap());
        assert!(tw.token > t.token);
        b.close_session(&w).unwrap();
        released("a writer's session closed");
        b.close_session(&r).unwrap();
    }

    #[test]
    fn a_leave_after_the_patience_ran_out_answers_false() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let (r, w) = (open(&b), open(&b));
        let name = tck::lease_name("rw-leave");
        let t = granted(b.acquire_rw(&r, &name, RwMode::Read, LONG).unwrap());
        let short = Duration::from_secs(1);
        let wait = |patience| b.acquire_rw(&w, &name, RwMode::Write, patience).unwrap();
        assert!(matches!(wait(short), RwAcquire::Busy { .. }));
        assert!(b.leave_rw_queue(&w, &name).unwrap(), "waiting");
        assert!(matches!(wait(short), RwAcquire::Busy { .. }));
        tck::until(Duration::from_secs(20), "the patience runs out", || {
            b.rw_state(&name).unwrap().writers_waiting.is_empty()
        });
        assert!(
            !b.leave_rw_queue(&w, &name).unwrap(),
            "not waiting any more"
        );
        assert!(!b.leave_rw_queue(&w, &name).unwrap(), "gone");
        assert!(b.release_rw(&r, &name, RwMode::Read, t.token).unwrap());
        for s in [r, w] {
            b.close_session(&s).unwrap();
        }
    }

    /// Lock-delay gates of read-write terms (see the backend's `rw` module): which nodes each
    /// step leaves, and the stamp that times the delay.
    #[test]
    fn rw_gates_come_and_go_with_their_terms_and_a_stamp_times_the_delay() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let mut raw = Raw::connect(&zk::hosts());
        let name = tck::lease_name("rw-gate");
        let dir = format!("{}/rw/{name}", b.root());
        let children = |raw: &mut Raw| {
            let mut c = raw.children(&dir);
            c.sort();
            c
        };
        let m = Metadata::default();
        let delayed = |lease, delay| {
            b.open(&simba_lease::spi::SessionSpec::new(lease, &m).lock_delay(delay))
                .unwrap()
                .id
        };
        let take = |s: &SessionId, mode| granted(b.acquire_rw(s, &name, mode, LONG).unwrap());
        let plain = open(&b);
        // A session without a delay leaves no gate.
        let t = take(&plain, RwMode::Write);
        assert_eq!(children(&mut raw), [format!("w-{plain}-{}", t.token)]);
        assert!(b.release_rw(&plain, &name, RwMode::Write, t.token).unwrap());
        // With a delay: the term's node and its gate, gone together with a release, a close
        // and the release of a grant whose reply was lost (the keep-alive lists it).
        let ms = LONG.as_millis();
        let s = delayed(LONG, LONG);
        let t = take(&s, RwMode::Write);
        let (tw, tg) = (
            format!("w-{s}-{}", t.token),
            format!("gw-{s}-{}-{ms}", t.token),
        );
        assert_eq!(children(&mut raw), [tg, tw]);
        assert!(b.release_rw(&s, &name, RwMode::Write, t.token).unwrap());
        assert!(raw.children(&dir).is_empty());
        let t = take(&s, RwMode::Read);
        let (tr, tg) = (
            format!("r-{s}-{}", t.token),
            format!("gr-{s}-{}-{ms}", t.token),
        );
        assert_eq!(children(&mut raw), [tg, tr]);
        b.close_session(&s).unwrap();
        assert!(raw.children(&dir).is_empty());
        let s = delayed(LONG, LONG);
        b.b().lose_rw_grant_replies(1);
        assert!(b.acquire_rw(&s, &name, RwMode::Read, LONG).is_err());
        assert_eq!(raw.children(&dir).len(), 2, "the grant ran");
        let ka = b.keep_alive(&s, LONG).unwrap();
        let [lost] = &ka.rw[..] else { panic!("{ka:?}") };
        assert_eq!((&lost.name, lost.mode), (&name, RwMode::Read), "listed");
        assert!(b.release_rw(&s, &name, RwMode::Read, lost.token).unwrap());
        assert!(raw.children(&dir).is_empty(), "released with its gate");
        b.close_session(&s).unwrap();

        // Ended by the watchdog: the gate stays; the first look stamps it, once.
        let (short, d) = (Duration::from_secs(1), Duration::from_secs(3));
        let crashed = delayed(short, d);
        let t = take(&crashed, RwMode::Write);
        let probe = tck::lease_name("rw-probe");
        tck::until(Duration::from_secs(20), "the session expires", || {
            b.acquire_rw(&crashed, &probe, RwMode::Read, LONG).is_err()
        });
        let gate = format!("{dir}/gw-{crashed}-{}-{}", t.token, d.as_millis());
        let stamp = format!("{gate}/ended");
        assert_eq!(
            children(&mut raw),
            [format!("gw-{crashed}-{}-3000", t.token)]
        );
        assert_eq!(raw.ctime(&stamp), None);
        let st = b.rw_state(&name).unwrap();
        let [ended] = &st.delayed[..] else {
            panic!("{st:?}")
        };
        assert_eq!(
            (&ended.session, ended.mode, ended.token),
            (&crashed, RwMode::Write, t.token)
        );
        assert!(ended.remaining <= d, "{st:?}");
        let stamped = raw.ctime(&stamp).expect("stamped by the first look");
        assert!(matches!(
            b.acquire_rw(&plain, &name, RwMode::Read, Duration::ZERO).unwrap(),
            RwAcquire::Busy { writer: Some(w), .. } if w == crashed
        ));
        assert_eq!(raw.ctime(&stamp), Some(stamped), "stamped once");
        let mut next = None;
        tck::until(Duration::from_secs(20), "taken after the delay", || {
            if let RwAcquire::Acquired(t) = b
                .acquire_rw(&plain, &name, RwMode::Write, Duration::ZERO)
                .unwrap()
            {
                next = Some(t);
            }
            next.is_some()
        });
        let next = next.unwrap();
        assert!(next.token > t.token);
        // The take deleted the gate with its stamp.
        assert_eq!(children(&mut raw), [format!("w-{plain}-{}", next.token)]);
        b.close_session(&plain).unwrap();
    }

    /// A grant whose reply was lost is listed by the next keep-alive (for the engine to
    /// release it), and so is one the next attempt takes up: once, with its token.
    #[test]
    fn a_grant_whose_reply_was_lost_is_listed_by_the_next_keep_alive() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let (s, w) = (open(&b), open(&b));
        let name = tck::lease_name("rw-lost");
        let dir = format!("{}/rw/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        b.b().lose_rw_grant_replies(1);
        let r = b.acquire_rw(&s, &name, RwMode::Read, LONG);
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        let stray = raw.children(&dir);
        assert_eq!(stray.len(), 1, "the grant ran: {stray:?}");
        assert!(matches!(
            b.acquire_rw(&w, &name, RwMode::Write, Duration::ZERO)
                .unwrap(),
            RwAcquire::Busy { readers: 1, .. }
        ));
        let ka = b.keep_alive(&s, LONG).unwrap();
        let [lost] = &ka.rw[..] else { panic!("{ka:?}") };
        assert_eq!((&lost.name, lost.mode), (&name, RwMode::Read));
        assert_eq!(stray, vec![format!("r-{s}-{}", lost.token)]);
        assert_eq!(b.keep_alive(&s, LONG).unwrap().rw, ka.rw, "unchanged");
        assert!(b.release_rw(&s, &name, RwMode::Read, lost.token).unwrap());
        assert!(b.keep_alive(&s, LONG).unwrap().rw.is_empty(), "released");
        let tw = granted(b.acquire_rw(&w, &name, RwMode::Write, LONG).unwrap());
        assert!(b.release_rw(&w, &name, RwMode::Write, tw.token).unwrap());

        // Taken up by the next attempt before a keep-alive: listed once, with its token.
        b.b().lose_rw_grant_replies(1);
        assert!(b.acquire_rw(&s, &name, RwMode::Read, LONG).is_err());
        let t = granted(b.acquire_rw(&s, &name, RwMode::Read, LONG).unwrap());
        assert!(t.token > tw.token);
        let held = vec![HeldRw {
            name: name.clone(),
            mode: RwMode::Read,
            token: t.token,
        }];
        assert_eq!(b.keep_alive(&s, LONG).unwrap().rw, held);
        assert_eq!(raw.children(&dir), vec![format!("r-{s}-{}", t.token)]);
        assert!(b.release_rw(&s, &name, RwMode::Read, t.token).unwrap());
        assert!(raw.children(&dir).is_empty());
        for s in [s, w] {
            b.close_session(&s).unwrap();
        }
    }

    /// Through the engine: the term of a grant whose reply was lost is listed by the next
    /// keep-alive, and the engine releases it.
    #[test]
    fn the_engine_releases_a_read_write_term_whose_grant_reply_was_lost() {
        let b = Arc::new(zk::Isolated::new(&zk::hosts(), None, |b| b));
        let name = tck::lease_name("rw-stray");
        let dir = format!("{}/rw/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        let cfg = Config::builder()
            .lease(Duration::from_secs(20))
            .renew_interval(Duration::from_millis(300))
            .build()
            .unwrap();
        let s = Session::open(b.clone() as Arc<dyn LeaseBackend>, cfg).unwrap();
        b.b().lose_rw_grant_replies(1);
        let lock = s.rw_lock(&name).unwrap();
        assert!(lock.try_write().is_err());
        assert_eq!(raw.children(&dir).len(), 1, "the grant ran");
        tck::until(Duration::from_secs(20), "the engine released it", || {
            raw.children(&dir).is_empty()
        });
        let guard = lock.try_write().unwrap().expect("free again");
        drop(guard);
        s.close().unwrap();
    }

    /// A release without an answer keeps its term in the session's bookkeeping: a keep-alive
    /// lists it exactly while its node stands (for the engine to release it again), whether
    /// the release ran (its reply lost) or not (the connection cut before it was sent).
    #[test]
    fn a_release_without_an_answer_is_listed_while_its_term_stands() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| {
            b.request_timeout(Duration::from_millis(500))
        });
        let h = tck::Harness::new(|| unreachable!());
        let s = open(&b);
        let mut raw = Raw::connect(&hosts);
        let (x, y) = (
            tck::lease_name("rw-unanswered"),
            tck::lease_name("rw-unsent"),
        );
        let tx = granted(b.acquire_rw(&s, &x, RwMode::Write, LONG).unwrap());
        let ty = granted(b.acquire_rw(&s, &y, RwMode::Read, LONG).unwrap());
        let dir = |n: &simba_lease::LeaseName| format!("{}/rw/{n}", b.root());
        let keep_alive = || {
            let mut ka = None;
            h.until("a keep-alive succeeds", || match b.keep_alive(&s, LONG) {
                Ok(k) => {
                    ka = Some(k.rw);
                    true
                }
                Err(_) => false,
            });
            ka.unwrap()
        };
        assert_eq!(keep_alive().len(), 2);
        // The release runs, its reply is lost: not listed once the node is gone.
        proxy.hold_replies();
        let r = b.release_rw(&s, &x, RwMode::Write, tx.token);
        assert!(r.is_err(), "{r:?}");
        h.until("the release ran", || raw.children(&dir(&x)).is_empty());
        proxy.release_replies();
        let ry = HeldRw {
            name: y.clone(),
            mode: RwMode::Read,
            token: ty.token,
        };
        assert_eq!(keep_alive(), vec![ry.clone()]);
        // The connection is cut before the release: listed while the node stands.
        proxy.cut();
        h.until("the keep-alive sees the disconnection", || {
            b.keep_alive(&s, LONG).is_err()
        });
        let r = b.release_rw(&s, &y, RwMode::Read, ty.token);
        proxy.heal();
        let listed = keep_alive();
        let stands = !raw.children(&dir(&y)).is_empty();
        match r {
            Ok(true) => assert!(listed.is_empty() && !stands, "{listed:?}"),
            _ if stands => {
                assert_eq!(listed, vec![ry]);
                assert!(b.release_rw(&s, &y, RwMode::Read, ty.token).unwrap());
                assert!(keep_alive().is_empty());
            }
            _ => assert!(listed.is_empty(), "{listed:?}"),
        }
        b.close_session(&s).unwrap();
    }

    /// Each term's node carries a watch: a keep-alive reads none of them, and one whose node
    /// is deleted behind the session's back is gone from the very next keep-alive.
    #[test]
    fn a_term_deleted_behind_the_sessions_back_is_gone_from_the_next_keep_alive() {
        let hosts = zk::hosts();
        let proxy = Proxy::start(hosts.split(',').next().unwrap());
        let b = zk::Isolated::via(&hosts, proxy.addr(), None, |b| b);
        let s = open(&b);
        let mut raw = Raw::connect(&hosts);
        let listed = |s: &SessionId| {
            let rw = b.keep_alive(s, LONG).unwrap().rw;
            let n = rw.len();
            let m: BTreeMap<_, _> = rw
                .into_iter()
                .map(|t| (t.name, (t.mode, t.token)))
                .collect();
            assert_eq!(m.len(), n, "a term listed twice");
            m
        };
        let mut held = BTreeMap::new();
        for i in 0..60 {
            let name = tck::lease_name(&format!("rw-w{i}"));
            let mode = [RwMode::Read, RwMode::Write][i % 2];
            let t = granted(b.acquire_rw(&s, &name, mode, LONG).unwrap());
            held.insert(name, (mode, t.token));
        }
        assert_eq!(listed(&s), held);
        let path_bytes: usize = held.keys().map(|n| n.as_str().len() + 40).sum();
        for _ in 0..3 {
            let before = proxy.sent_bytes();
            assert_eq!(listed(&s), held);
            let sent = proxy.sent_bytes() - before;
            // One `exists` of the leases root (and maybe a ping): not a path per term.
            assert!(
                sent < 400,
                "a keep-alive sent {sent} bytes; the term paths are over {path_bytes}"
            );
        }
        let names: Vec<_> = held.keys().take(10).cloned().collect();
        for (i, name) in names.iter().enumerate() {
            let (mode, token) = held.remove(name).unwrap();
            let tag = if mode == RwMode::Read { 'r' } else { 'w' };
            let path = format!("{}/rw/{name}/{tag}-{s}-{token}", b.root());
            // The server applied the delete when the raw call returns: the very next
            // keep-alive must not list the term.
            assert_eq!(raw.delete(&path), 0);
            assert_eq!(listed(&s), held, "round {i}");
        }
        b.close_session(&s).unwrap();
    }

    /// A grant that never reached the server leaves the counter where it was, so the
    /// session's next attempt gets the same token, hence the same path: once granted, that
    /// term is held, listed once by the keep-alive, and stays.
    #[test]
    fn a_lost_grant_retried_on_the_same_path_is_held_and_listed_once() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let m = Metadata::default();
        let name = tck::lease_name("rw-retried");
        let dir = format!("{}/rw/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        let w = open(&b);
        // Without a lock-delay (the term's node alone) and with one (its gate too).
        for (mode, delay) in [(RwMode::Read, None), (RwMode::Write, Some(LONG))] {
            let s = match delay {
                Some(d) => {
                    b.open(&simba_lease::spi::SessionSpec::new(LONG, &m).lock_delay(d))
                        .unwrap()
                        .id
                }
                None => open(&b),
            };
            b.b().lose_rw_grants_unsent(1);
            let r = b.acquire_rw(&s, &name, mode, LONG);
            assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
            assert!(raw.children(&dir).is_empty(), "never ran");
            let before = b.rw_state(&name).unwrap().last_token;
            let t = granted(b.acquire_rw(&s, &name, mode, LONG).unwrap());
            assert_eq!(t.token.get(), before + 1, "the lost grant's token");
            let mut held = raw.children(&dir);
            held.sort();
            assert_eq!(held.len(), 1 + usize::from(delay.is_some()), "{held:?}");
            let listed = b.keep_alive(&s, LONG).unwrap().rw;
            let want = HeldRw {
                name: name.clone(),
                mode,
                token: t.token,
            };
            assert_eq!(listed, vec![want], "listed once, with its token");
            let mut after = raw.children(&dir);
            after.sort();
            assert_eq!(after, held, "the held term and its gate stay");
            let other = b.acquire_rw(&w, &name, RwMode::Write, Duration::ZERO);
            assert!(
                matches!(other, Ok(RwAcquire::Busy { .. })),
                "a writer while {s} holds {}: {other:?}",
                t.token
            );
            assert!(b.release_rw(&s, &name, mode, t.token).unwrap());
            assert!(raw.children(&dir).is_empty());
            b.close_session(&s).unwrap();
        }
        b.close_session(&w).unwrap();
    }

    /// A read term whose session ended counts in a reader's `Busy` only while its delay
    /// lasts, as in the memory backend.
    #[test]
    fn a_reader_kept_out_counts_read_terms_in_their_delay_only_while_it_lasts() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let m = Metadata::default();
        let name = tck::lease_name("rw-reader-delay");
        let dir = format!("{}/rw/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        let (short, d) = (Duration::from_secs(1), Duration::from_secs(2));
        let crashed = b
            .open(&simba_lease::spi::SessionSpec::new(short, &m).lock_delay(d))
            .unwrap()
            .id;
        granted(b.acquire_rw(&crashed, &name, RwMode::Read, LONG).unwrap());
        let probe = tck::lease_name("rw-probe-reader");
        tck::until(Duration::from_secs(20), "the session expires", || {
            b.acquire_rw(&crashed, &probe, RwMode::Read, LONG).is_err()
        });
        // The first look times the delay from now; the writer waits in line.
        let w = open(&b);
        let busy = b.acquire_rw(&w, &name, RwMode::Write, LONG).unwrap();
        assert!(
            matches!(
                busy,
                RwAcquire::Busy {
                    writer: None,
                    readers: 1,
                    writers_waiting: 1
                }
            ),
            "{busy:?}"
        );
        tck::until(Duration::from_secs(20), "the delay runs out", || {
            b.rw_state(&name).is_ok_and(|s| s.delayed.is_empty())
        });
        let r = open(&b);
        let busy = b
            .acquire_rw(&r, &name, RwMode::Read, Duration::ZERO)
            .unwrap();
        assert!(
            matches!(
                busy,
                RwAcquire::Busy {
                    writer: None,
                    readers: 0,
                    writers_waiting: 1
                }
            ),
            "the delay ran out: {busy:?}"
        );
        assert!(b.rw_state(&name).unwrap().delayed.is_empty());
        let t = granted(b.acquire_rw(&w, &name, RwMode::Write, LONG).unwrap());
        assert_eq!(raw.children(&dir), vec![format!("w-{w}-{}", t.token)]);
        for s in [w, r] {
            b.close_session(&s).unwrap();
        }
    }

    /// On a name only readers use, the gate of a read term whose delay ran out goes with the
    /// next read grant (with its stamp), as a write grant's would.
    #[test]
    fn a_read_grant_deletes_read_gates_whose_delay_ran_out() {
        let b = zk::Isolated::new(&zk::hosts(), None, |b| b);
        let m = Metadata::default();
        let name = tck::lease_name("rw-read-only");
        let dir = format!("{}/rw/{name}", b.root());
        let mut raw = Raw::connect(&zk::hosts());
        let children = |raw: &mut Raw| {
            let mut c = raw.children(&dir);
            c.sort();
            c
        };
        let (short, d) = (Duration::from_secs(1), Duration::from_secs(1));
        let crashed = b
            .open(&simba_lease::spi::SessionSpec::new(short, &m).lock_delay(d))
            .unwrap()
            .id;
        let t0 = granted(b.acquire_rw(&crashed, &name, RwMode::Read, LONG).unwrap());
        let probe = tck::lease_name("rw-probe-read-only");
        tck::until(Duration::from_secs(20), "the session expires", || {
            b.acquire_rw(&crashed, &probe, RwMode::Read, LONG).is_err()
        });
        let gate = format!("gr-{crashed}-{}-{}", t0.token, d.as_millis());
        // Granted in the delay (a read term's keeps no reader out), which it times.
        let r1 = open(&b);
        let t1 = granted(b.acquire_rw(&r1, &name, RwMode::Read, LONG).unwrap());
        assert_eq!(
            children(&mut raw),
            [gate.clone(), format!("r-{r1}-{}", t1.token)]
        );
        assert!(raw.ctime(&format!("{dir}/{gate}/ended")).is_some(), "timed");
        tck::until(Duration::from_secs(20), "the delay runs out", || {
            b.rw_state(&name).is_ok_and(|s| s.delayed.is_empty())
        });
        let r2 = open(&b);
        let t2 = granted(b.acquire_rw(&r2, &name, RwMode::Read, LONG).unwrap());
        let mut readers = [
            format!("r-{r1}-{}", t1.token),
            format!("r-{r2}-{}", t2.token),
        ];
        readers.sort();
        assert_eq!(children(&mut raw), readers, "the gate went with the grant");
        for s in [r1, r2] {
            b.close_session(&s).unwrap();
        }
    }
}
