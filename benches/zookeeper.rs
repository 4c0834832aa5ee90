//! ZooKeeper latencies as ratios to the server's raw operations, measured in the same run
//! with the operations round-robin per iteration (in a new order each iteration): acquire ÷ raw `create`, release ÷ raw
//! `delete`, keep-alive (1 and 1000 leases) ÷ raw `exists`; and the take-over after a clean
//! release, on the backend (the waiter acquires on the `Released` notification) and through
//! the engine (`Session::lock` waiting in one session while another unlocks), next to raw
//! `exists` samples taken in the same rounds.
//!
//! The raw operations run on a `zookeeper-client` client of their own (the crate and
//! runtime the backend uses, so the same client-side hops): `exists` of the bench root,
//! `create` of an ephemeral node under it (open ACL, empty data), `delete` of that node
//! (any version); "raw exists + delete" runs the two one after the other, the shape of a
//! release that checks its node before deleting it. The ratio column is of the medians;
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
    ];
    let mut rows: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..iters + iters / 10 {
        let mut it: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
        for unit in common::shuffled(6, &mut rng) {
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

    println!("ZooKeeper at {hosts}, {iters} iterations");
    let vs = |n: &'static str| match n {
        EXISTS | CREATE | DELETE => None,
        "raw exists + delete" | "release" => Some(DELETE),
        "acquire (free)" => Some(CREATE),
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
    raw::Raw::connect(&hosts).delete_tree(&root);
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
