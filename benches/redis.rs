//! Redis latency: acquire, release, keep-alive (1, 16 and 1000 leases), the engine's
//! `try_lock` and take-over after a release, on one server, on a primary with
//! `wait_replicas = 1` and on the 3-master cluster, as ratios to the floor measured in the
//! same run, round-robin per iteration: the server's cheapest round trip to the lease's node
//! (PING; on a cluster a keyed EXISTS), next to a trivial script and a raw `SET NX PX`.
//!
//! ```sh
//! .ci/servers.sh is sourced by .ci/test; or start the servers yourself, then:
//! cargo bench --features redis --bench redis
//! ```
//!
//! Reads `SIMBA_REDIS_URL`, `SIMBA_REDIS_PRIMARY_URL` and `SIMBA_REDIS_CLUSTER_URL` (loopback defaults as in the tests);
//! `SIMBA_BENCH_ITERS` (default 2000) sets the iterations of the fast operations.

use simba_lease::backends::redis::{RedisBackend, Role};
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{Config, LeaseName, Metadata, Session, SessionId};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{print_table, time, Row};

fn cleanup(b: &RedisBackend, prefix: &str) {
    let keys = b
        .scripting()
        .scan(&format!("{prefix}:*"), 1_000_000)
        .unwrap_or_default();
    for k in keys {
        let _ = b.scripting().command(Role::Other, &["DEL", &k]);
    }
}

fn run(label: &str, url: &str, iters: usize) -> Vec<Row> {
    let prefix = format!("simbabench-{}", &SessionId::random().as_str()[..8]);
    let sep = if url.contains('?') { '&' } else { '?' };
    let full = format!("{url}{sep}prefix={prefix}");
    let b = match RedisBackend::connect(&full) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("{label}: skipped ({e})");
            return Vec::new();
        }
    };
    let lease = Duration::from_secs(60);
    let s = b.open_session(lease, &Metadata::default()).unwrap().id;
    let other = b.open_session(lease, &Metadata::default()).unwrap().id;
    let name = LeaseName::new("bench").unwrap();
    for _ in 0..200 {
        b.ping_script().unwrap();
    }
    let mut out = Vec::new();
    // The floor: the server's cheapest round trip on the connections the operations use, to
    // the node that serves the lease (PING on one server; on a cluster a keyed EXISTS, which
    // goes to the slot's node as the lease's scripts do). A raw `SET NX PX` (a lock with
    // neither token nor session) shows what fencing and sessions cost on top.
    let lease_key = format!("{prefix}:lease:{{bench}}");
    let raw_key = format!("{prefix}:raw:{{bench}}");
    let floor_cmd: Vec<&str> = if b.scripting().clustered() {
        vec!["EXISTS", &lease_key]
    } else {
        vec!["PING"]
    };
    let session: Arc<dyn LeaseBackend> = b.clone();
    let engine = Session::open(session, Config::default()).unwrap();
    let engine_name = LeaseName::new("bench-engine").unwrap();
    let (mut floor, mut script, mut raw, mut acq, mut rel, mut held, mut ka1, mut try_lock) = (
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
    );
    for _ in 0..iters {
        time(&mut floor, || {
            b.scripting().command(Role::Other, &floor_cmd).unwrap()
        });
        time(&mut script, || b.ping_script().unwrap());
        time(&mut raw, || {
            b.scripting()
                .command(Role::Other, &["SET", &raw_key, "x", "NX", "PX", "60000"])
                .unwrap()
        });
        b.scripting()
            .command(Role::Other, &["DEL", &raw_key])
            .unwrap();
        let guard = time(&mut try_lock, || engine.try_lock(&engine_name).unwrap());
        guard.expect("free").unlock().unwrap();
        let t = match time(&mut acq, || b.acquire(&s, &name).unwrap()) {
            Acquire::Acquired(t) => t,
            Acquire::Held(_) => panic!("held"),
        };
        let got = time(&mut held, || b.acquire(&other, &name).unwrap());
        assert!(matches!(got, Acquire::Held(_)));
        let ka = time(&mut ka1, || b.keep_alive(&s, lease).unwrap());
        assert_eq!(ka.leases.len(), 1);
        assert!(time(&mut rel, || b.release(&s, &name, t.token).unwrap()));
    }
    engine.close().unwrap();
    out.push(Row::new(
        if b.scripting().clustered() {
            "floor: EXISTS on the slot's node"
        } else {
            "floor: PING"
        },
        floor,
    ));
    out.push(Row::new("EVALSHA of `return 1`", script));
    out.push(Row::new("raw SET NX PX (no token, no session)", raw));
    out.push(Row::new("acquire (new term)", acq));
    out.push(Row::new("engine try_lock (new term)", try_lock));
    out.push(Row::new("acquire (held by another)", held));
    out.push(Row::new("release", rel));
    out.push(Row::new("keep-alive, 1 lease", ka1));
    // 16 leases: on a cluster they span the three masters (all but 0.5 % of the time), so
    // 1000 ÷ 16 is the growth beyond one script per node.
    let some = b.open_session(lease, &Metadata::default()).unwrap().id;
    for i in 0..16 {
        let n = LeaseName::new(format!("some-{i}")).unwrap();
        assert!(matches!(
            b.acquire(&some, &n).unwrap(),
            Acquire::Acquired(_)
        ));
    }
    let mut ka16 = vec![];
    for _ in 0..(iters / 10).max(20) {
        let ka = time(&mut ka16, || b.keep_alive(&some, lease).unwrap());
        assert_eq!(ka.leases.len(), 16);
    }
    out.push(Row::new("keep-alive, 16 leases", ka16));
    b.close_session(&some).unwrap();
    let many = b.open_session(lease, &Metadata::default()).unwrap().id;
    for i in 0..1000 {
        let n = LeaseName::new(format!("many-{i}")).unwrap();
        assert!(matches!(
            b.acquire(&many, &n).unwrap(),
            Acquire::Acquired(_)
        ));
    }
    let mut ka1000 = vec![];
    for _ in 0..(iters / 10).max(20) {
        let ka = time(&mut ka1000, || b.keep_alive(&many, lease).unwrap());
        assert_eq!(ka.leases.len(), 1000);
    }
    out.push(Row::new("keep-alive, 1000 leases", ka1000));
    b.close_session(&many).unwrap();

    // Take-over after a clean release, through the engine and the release notification.
    let config = Config::builder()
        .lease(Duration::from_secs(15))
        .renew_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let backend: Arc<dyn LeaseBackend> = b.clone();
    let (x, y) = (
        Session::open(backend.clone(), config.clone()).unwrap(),
        Session::open(backend, config).unwrap(),
    );
    let mut takeover = vec![];
    for i in 0..(iters / 40).max(10) {
        let n = LeaseName::new(format!("takeover-{i}")).unwrap();
        let (a, c) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
        let ea = a.election(&n).unwrap();
        ea.wait_elected(Duration::from_secs(10)).unwrap();
        let ec = c.election(&n).unwrap();
        while b.owner(&n).unwrap().map(|o| o.session) != Some(a.id()) {}
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        ea.resign().unwrap();
        ec.wait_elected(Duration::from_secs(10)).unwrap();
        takeover.push(t.elapsed());
        ec.resign().unwrap();
    }
    out.push(Row::new("take-over after release (engine)", takeover));
    x.close().unwrap();
    y.close().unwrap();
    b.close_session(&s).unwrap();
    b.close_session(&other).unwrap();
    cleanup(&b, &prefix);
    out
}

fn main() {
    let iters = common::iterations(2000, 40);
    let targets = [
        (
            "standalone",
            std::env::var("SIMBA_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        ),
        (
            "primary + 1 replica, wait_replicas=1",
            format!(
                "{}?wait_replicas=1",
                std::env::var("SIMBA_REDIS_PRIMARY_URL")
                    .unwrap_or_else(|_| "redis://127.0.0.1:6380".into())
            ),
        ),
        (
            "cluster",
            std::env::var("SIMBA_REDIS_CLUSTER_URL").unwrap_or_else(|_| {
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002".into()
            }),
        ),
    ];
    for (label, url) in targets {
        let rows = run(label, &url, iters);
        if rows.is_empty() {
            continue;
        }
        println!("\n{label} ({url})");
        print_table(&rows, None);
    }
}
