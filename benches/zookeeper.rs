//! ZooKeeper latencies as ratios to the server's raw operations, measured in the same run
//! with the operations round-robin per iteration (in a new order each iteration): acquire ÷ raw `create`, release ÷ raw
//! `delete`, keep-alive (1 and 1000 leases) ÷ raw `exists`; and the take-over after a clean
//! release, on the backend (the waiter acquires on the `Released` notification) and through
//! the engine (`Session::lock` waiting in one session while another unlocks), next to raw
//! `exists` samples taken in the same rounds. Two more backends on roots of their own
//! measure an acquire without a delay where sessions with a lock-delay work: one right after
//! another session's acquire and release with a delay (the gate's create wrote `{root}/delays`,
//! so the acquire's `check` fails and it asserts again in full), one while such a session
//! holds another name (a gate stands: the full assertion); and the acquire with a delay.
//!
//! The raw operations run on a `zookeeper-client` client of their own (the crate and
//! runtime the backend uses, so the same client-side hops): `exists` of the bench root,
//! `create` of an ephemeral node under it (open ACL, empty data), `delete` of that node
//! (any version); "raw exists + delete" runs the two one after the other, the shape of a
//! release that checks its node before deleting it. "raw multi: …" rows send the acquire's
//! multi shapes (the create alone, with the `check`, with the gate path's create and delete;
//! a lease node's create with an `exists` queued behind it, not waited for and waited for,
//! which is what an acquire waits for on a server before 3.8.2, see ZOOKEEPER-4026).
//! The ratio column is of the medians;
//! the spread is the lowest and highest ratio over five consecutive blocks of the run (the
//! machine is shared: compare ratios, not µs).
//!
//! ```sh
//! export SIMBA_CI_DIR=/work/ci-servers   # or any directory; see .ci/servers.sh
//! source .ci/servers.sh && ensure_zookeeper
//! cargo bench --features zookeeper --bench zookeeper
//! ```
//!
//! Reads `SIMBA_ZK_URL` (default `zookeeper://127.0.0.1:2181`); `SIMBA_BENCH_ITERS` (default
//! 500) sets the iterations. See `benches/README.md` for the figures and what they mean.

use futures_lite::future::block_on;
use simba_lease::backends::ZooKeeperBackend;
use simba_lease::spi::{Acquire, LeaseBackend, Notification};
use simba_lease::{Config, LeaseName, Metadata, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

#[allow(dead_code)]
#[path = "../tests/zk/raw.rs"]
mod raw;

mod common;

use common::{print_ratios, time, Row};

const BLOCKS: usize = 5;
const EXISTS: &str = "floor: raw exists";
const CREATE: &str = "floor: raw create (ephemeral)";
const DELETE: &str = "floor: raw delete";
const TEXISTS: &str = "floor: raw exists, in the take-over rounds";

fn acquired(a: Acquire) -> simba_lease::Term {
    match a {
        Acquire::Acquired(t) => t,
        other => panic!("{other:?}"),
    }
}

fn main() {
    let iters = common::iterations(500, 20);
    let url = std::env::var("SIMBA_ZK_URL").unwrap_or_else(|_| "zookeeper://127.0.0.1:2181".into());
    let hosts = url
        .trim_start_matches("zookeeper://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_owned();
    let root = format!("/simba-bench/{:08x}", std::process::id());
    let b = Arc::new(
        ZooKeeperBackend::builder(hosts.as_str())
            .root(root.as_str())
            .build()
            .expect("backend"),
    );
    let raw = block_on(
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(&hosts),
    )
    .expect("raw client");
    let raw_node = format!("{root}/raw");
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let lease = Duration::from_secs(30);
    let open = || b.open_session(lease, &Metadata::default()).unwrap().id;
    // `s1` acquires and releases `bench`; `one` holds one lease and `many` 1000, unchanged.
    let (s1, s2, one, many) = (open(), open(), open(), open());
    let name = LeaseName::new("bench").unwrap();
    // Roots where sessions with a lock-delay work: `mixed` acquires and releases with a delay
    // between the plain acquires; on `gated` a session with a delay holds a name throughout.
    let mixed = ZooKeeperBackend::builder(hosts.as_str())
        .root(format!("{root}-mixed"))
        .build()
        .expect("backend");
    let gated = ZooKeeperBackend::builder(hosts.as_str())
        .root(format!("{root}-gated"))
        .build()
        .expect("backend");
    let m = Metadata::default();
    let delay = Duration::from_secs(5);
    let (mp, md) = (
        mixed.open_session(lease, &m).unwrap().id,
        mixed
            .open(&simba_lease::spi::SessionSpec::new(lease, &m).lock_delay(delay))
            .unwrap()
            .id,
    );
    let (gp, gd) = (
        gated.open_session(lease, &m).unwrap().id,
        gated
            .open(&simba_lease::spi::SessionSpec::new(lease, &m).lock_delay(delay))
            .unwrap()
            .id,
    );
    let dname = LeaseName::new("delayed").unwrap();
    acquired(gated.acquire(&gd, &dname).unwrap());
    acquired(
        b.acquire(&one, &LeaseName::new("bench-held").unwrap())
            .unwrap(),
    );
    for i in 0..1000 {
        acquired(
            b.acquire(&many, &LeaseName::new(format!("many-{i}")).unwrap())
                .unwrap(),
        );
    }
    b.keep_alive(&one, lease).unwrap();
    b.keep_alive(&many, lease).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let _sub = b
        .subscribe(Arc::new(move |n: &Notification| {
            if let Notification::Released(n) = n {
                let _ = tx.send(n.clone());
            }
        }))
        .unwrap();

    let names = [
        EXISTS,
        CREATE,
        DELETE,
        "raw exists + delete",
        "ping (exists of the root, reader)",
        "acquire (free)",
        "release",
        "keep-alive, 1 lease",
        "keep-alive, 1000 leases",
        "keep-alive right after an acquire",
        "acquire (free), right after a gate's create",
        "acquire (free), while a gate stands",
        "acquire with a lock-delay (free)",
        "raw multi: create",
        "raw multi: create, check",
        "raw multi: create, create, delete",
        "raw create, an exists queued behind",
        "raw multi: create in leases, check; exists behind",
        "  the same, waiting for the exists too",
    ];
    let lease_node = format!("{root}/leases/raw");
    let check_node = format!("{root}/delays");
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let gate_node = format!("{root}/delays/raw");
    let mut rows: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..iters + iters / 10 {
        let mut it: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
        for unit in common::shuffled(9, &mut rng) {
            match unit {
                0 => {
                    time(&mut it[0], || block_on(raw.check_stat(&root)).unwrap());
                }
                1 => {
                    time(&mut it[1], || {
                        block_on(raw.create(&raw_node, &[], &ephemeral)).unwrap()
                    });
                    time(&mut it[2], || {
                        block_on(raw.delete(&raw_node, None)).unwrap()
                    });
                    block_on(raw.create(&raw_node, &[], &ephemeral)).unwrap();
                    time(&mut it[3], || {
                        let stat = block_on(raw.check_stat(&raw_node)).unwrap().unwrap();
                        block_on(raw.delete(&raw_node, Some(stat.version))).unwrap()
                    });
                }
                2 => time(&mut it[4], || b.ping().unwrap()),
                3 => {
                    let term = acquired(time(&mut it[5], || b.acquire(&s1, &name).unwrap()));
                    // Right after the acquire: it waits for the acquire's `exists` reply too.
                    time(&mut it[9], || b.keep_alive(&s1, lease).unwrap());
                    assert!(time(&mut it[6], || b
                        .release(&s1, &name, term.token)
                        .unwrap()));
                }
                8 => {
                    let multi = |ops: u8| {
                        let mut w = raw.new_multi_writer();
                        w.add_create(&raw_node, &[], &ephemeral).unwrap();
                        if ops == 1 {
                            w.add_check_version(&check_node, 0).unwrap();
                        } else if ops == 2 {
                            w.add_create(&gate_node, &[], &persistent).unwrap();
                            w.add_delete(&gate_node, None).unwrap();
                        }
                        block_on(w.commit()).unwrap();
                    };
                    for (row, ops) in [(13, 0), (14, 1), (15, 2)] {
                        time(&mut it[row], || multi(ops));
                        block_on(raw.delete(&raw_node, None)).unwrap();
                    }
                    let seen = time(&mut it[16], || {
                        let created = raw.create(&raw_node, &[], &ephemeral);
                        let seen = raw.check_and_watch_stat(&raw_node);
                        block_on(created).unwrap();
                        seen
                    });
                    drop(block_on(seen));
                    block_on(raw.delete(&raw_node, None)).unwrap();
                    // The acquire's multi with an `exists` queued behind it; `wait`: its reply
                    // waited for too, what an acquire waits for on a server whose multi answers
                    // a create without its stat (ZOOKEEPER-4026, before 3.8.2).
                    for (row, wait) in [(17, false), (18, true)] {
                        let seen = time(&mut it[row], || {
                            let mut w = raw.new_multi_writer();
                            w.add_create(&lease_node, b"0123456789abcdef\n", &ephemeral)
                                .unwrap();
                            w.add_check_version(&check_node, 0).unwrap();
                            let created = w.commit();
                            let seen = raw.check_and_watch_stat(&lease_node);
                            block_on(created).unwrap();
                            if wait {
                                drop(block_on(seen));
                                None
                            } else {
                                Some(seen)
                            }
                        });
                        drop(seen.map(block_on));
                        block_on(raw.delete(&lease_node, None)).unwrap();
                    }
                }
                6 => {
                    let t = acquired(time(&mut it[12], || mixed.acquire(&md, &dname).unwrap()));
                    assert!(mixed.release(&md, &dname, t.token).unwrap());
                    let t = acquired(time(&mut it[10], || mixed.acquire(&mp, &name).unwrap()));
                    assert!(mixed.release(&mp, &name, t.token).unwrap());
                    // Untimed: the sessions of the other roots live through a long run.
                    for (x, id) in [(&mixed, &mp), (&mixed, &md), (&gated, &gp), (&gated, &gd)] {
                        x.keep_alive(id, lease).unwrap();
                    }
                    b.keep_alive(&s2, lease).unwrap();
                }
                7 => {
                    let t = acquired(time(&mut it[11], || gated.acquire(&gp, &name).unwrap()));
                    assert!(gated.release(&gp, &name, t.token).unwrap());
                }
                4 => {
                    let k = time(&mut it[7], || b.keep_alive(&one, lease).unwrap());
                    assert_eq!(k.leases.len(), 1);
                }
                _ => {
                    let k = time(&mut it[8], || b.keep_alive(&many, lease).unwrap());
                    assert_eq!(k.leases.len(), 1000);
                }
            }
        }
        if i >= iters / 10 {
            for (row, x) in rows.iter_mut().zip(it) {
                row.extend(x);
            }
        }
    }

    // Take-over on the backend: s2 waits for the release notification, then acquires.
    let rounds = (iters / 5).max(10);
    let (mut take, mut texists) = (vec![], vec![]);
    for i in 0..rounds + 5 {
        let mut f = vec![];
        time(&mut f, || block_on(raw.check_stat(&root)).unwrap());
        let term = acquired(b.acquire(&s1, &name).unwrap());
        while rx.try_recv().is_ok() {}
        let (b2, s2c, n2) = (b.clone(), s2.clone(), name.clone());
        let rx2 = rx.clone();
        let waiter = std::thread::spawn(move || {
            loop {
                let n = rx2
                    .recv_timeout(Duration::from_secs(10))
                    .expect("release notification");
                if n == n2 {
                    break;
                }
            }
            let got = b2.acquire(&s2c, &n2).unwrap();
            (got, Instant::now())
        });
        let t = Instant::now();
        assert!(b.release(&s1, &name, term.token).unwrap());
        let (got, at) = waiter.join().unwrap();
        let t2 = acquired(got);
        assert!(b.release(&s2, &name, t2.token).unwrap());
        if i >= 5 {
            take.push(at - t);
            texists.extend(f);
        }
    }
    let (etake, eunlock, eexists) = engine_take_over(b.clone(), &raw, &root, iters);
    for id in [&s1, &s2, &one, &many] {
        b.close_session(id).unwrap();
    }
    for (x, ids) in [(&mixed, [&mp, &md]), (&gated, [&gp, &gd])] {
        for id in ids {
            x.close_session(id).unwrap();
        }
    }

    println!("ZooKeeper at {hosts}, {iters} iterations");
    let vs = |n: &'static str| match n {
        EXISTS | CREATE | DELETE => None,
        "raw exists + delete" | "release" => Some(DELETE),
        n if n.starts_with("acquire")
            || n.starts_with("raw multi")
            || n.starts_with("raw create")
            || n.starts_with("  the same") =>
        {
            Some(CREATE)
        }
        _ => Some(EXISTS),
    };
    let mut table: Vec<Row> = names
        .iter()
        .zip(rows)
        .map(|(&n, s)| {
            let r = Row::new(n, s);
            match vs(n) {
                Some(f) => r.vs(f),
                None => r,
            }
        })
        .collect();
    table.extend([
        Row::new(TEXISTS, texists),
        Row::new("take-over on the backend (notification)", take).vs(TEXISTS),
        Row::new("floor: raw exists, in the engine rounds", eexists),
        Row::new("take-over through the engine", etake)
            .vs("floor: raw exists, in the engine rounds"),
        Row::new("  of which unlock()", eunlock).vs("floor: raw exists, in the engine rounds"),
    ]);
    print_ratios(&table, BLOCKS, None);
    drop(raw);
    drop(b);
    drop((mixed, gated));
    let mut raw = raw::Raw::connect(&hosts);
    for r in [
        root.clone(),
        format!("{root}-mixed"),
        format!("{root}-gated"),
    ] {
        raw.delete_tree(&r);
    }
}

/// Take-over after a clean release through the engine: one session's `lock` waits while
/// the other unlocks; from the start of `unlock` until the waiter's `lock` returns, and
/// `unlock` alone, with one raw `exists` sample per round.
fn engine_take_over(
    b: Arc<ZooKeeperBackend>,
    raw: &zk::Client,
    root: &str,
    iters: usize,
) -> (Vec<Duration>, Vec<Duration>, Vec<Duration>) {
    let rounds = (iters / 10).max(10);
    let backend: Arc<dyn LeaseBackend> = b;
    let config = Config::default();
    let x = Session::open(backend.clone(), config.clone()).unwrap();
    let y = Session::open(backend, config).unwrap();
    let (mut took, mut unlocked, mut floors) = (vec![], vec![], vec![]);
    for i in 0..rounds + 2 {
        let mut f = vec![];
        time(&mut f, || block_on(raw.check_stat(root)).unwrap());
        let n = LeaseName::new(format!("takeover-{i}")).unwrap();
        let (a, c) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
        let held = a.try_lock(&n).unwrap().expect("a fresh name is free");
        let (t, u) = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let g = c.lock(&n).unwrap();
                let at = Instant::now();
                g.unlock().unwrap();
                at
            });
            // Let the waiter's first attempt find the lock held.
            std::thread::sleep(Duration::from_millis(30));
            let t = Instant::now();
            held.unlock().unwrap();
            let u = t.elapsed();
            (waiter.join().unwrap() - t, u)
        });
        if i >= 2 {
            took.push(t);
            unlocked.push(u);
            floors.extend(f);
        }
    }
    x.close().unwrap();
    y.close().unwrap();
    (took, unlocked, floors)
}
