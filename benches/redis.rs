//! Redis latency: acquire, release, keep-alive (1 and 1000 leases) and take-over after a
//! release, on one server, on a primary with `wait_replicas = 1` and on the 3-master
//! cluster, next to the floor (EVALSHA of a trivial script on the same connections) measured
//! in the same run.
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
    let (mut floor, mut acq, mut rel, mut held, mut ka1) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..iters {
        time(&mut floor, || b.ping_script().unwrap());
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
    out.push(Row::new("floor: EVALSHA return 1", floor));
    out.push(Row::new("acquire (new term)", acq));
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
