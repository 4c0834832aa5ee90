//! ZooKeeper latencies: acquire, release, keep-alive (1 and 1000 leases) and take-over after a
//! release, next to a floor operation (`exists` on the root) measured in the same run against
//! the same server.
//!
//! `SIMBA_ZK_URL=zookeeper://127.0.0.1:2181 cargo bench --features zookeeper --bench zookeeper`
//! (`.ci/servers.sh`'s `ensure_zookeeper` starts such a server).

use simba_lease::backends::ZooKeeperBackend;
use simba_lease::spi::{Acquire, LeaseBackend, Notification};
use simba_lease::{LeaseName, Metadata};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../tests/zk/raw.rs"]
mod raw;

mod common;

use common::{print_table, time, Row};

const N: usize = 300;

fn main() {
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
    let lease = Duration::from_secs(30);
    let s1 = b.open_session(lease, &Metadata::default()).unwrap().id;
    let s2 = b.open_session(lease, &Metadata::default()).unwrap().id;
    let name = LeaseName::new("bench").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let _sub = b
        .subscribe(Arc::new(move |n: &Notification| {
            if let Notification::Released(n) = n {
                let _ = tx.send(n.clone());
            }
        }))
        .unwrap();

    let (mut floor, mut acq, mut rel, mut ka, mut take) = (vec![], vec![], vec![], vec![], vec![]);
    for i in 0..N + 20 {
        let warm = i < 20;
        let (mut f, mut a, mut k, mut r) = (vec![], vec![], vec![], vec![]);
        time(&mut f, || b.ping().unwrap()); // one `exists` of the root: the floor
        let term = match time(&mut a, || b.acquire(&s1, &name).unwrap()) {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        time(&mut k, || b.keep_alive(&s1, lease).unwrap());
        assert!(time(&mut r, || b.release(&s1, &name, term.token).unwrap()));
        // Take-over: s2 waits for the release notification, then acquires.
        let term = match b.acquire(&s1, &name).unwrap() {
            Acquire::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
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
            let at = Instant::now();
            (got, at)
        });
        let t = Instant::now();
        assert!(b.release(&s1, &name, term.token).unwrap());
        let (got, at) = waiter.join().unwrap();
        let d_take = at - t;
        let Acquire::Acquired(t2) = got else {
            panic!("{got:?}")
        };
        assert!(b.release(&s2, &name, t2.token).unwrap());
        if !warm {
            floor.extend(f);
            acq.extend(a);
            ka.extend(k);
            rel.extend(r);
            take.push(d_take);
        }
    }
    // Keep-alive of a session holding 1000 leases, interleaved with the floor and 1 lease.
    let many = b.open_session(lease, &Metadata::default()).unwrap().id;
    for i in 0..1000 {
        let n = LeaseName::new(format!("many-{i}")).unwrap();
        assert!(matches!(
            b.acquire(&many, &n).unwrap(),
            Acquire::Acquired(_)
        ));
    }
    let term = match b.acquire(&s1, &name).unwrap() {
        Acquire::Acquired(t) => t,
        other => panic!("{other:?}"),
    };
    let (mut ka1, mut ka1000) = (vec![], vec![]);
    for i in 0..N + 20 {
        let (mut k1, mut k1000) = (vec![], vec![]);
        let one = time(&mut k1, || b.keep_alive(&s1, lease).unwrap());
        assert_eq!(one.leases.len(), 1);
        let all = time(&mut k1000, || b.keep_alive(&many, lease).unwrap());
        assert_eq!(all.leases.len(), 1000);
        if i >= 20 {
            ka1.extend(k1);
            ka1000.extend(k1000);
        }
    }
    assert!(b.release(&s1, &name, term.token).unwrap());
    b.close_session(&many).unwrap();
    let ratio = common::pct(&ka1000, 0.5).as_secs_f64() / common::pct(&ka1, 0.5).as_secs_f64();
    println!("ZooKeeper at {hosts}, {N} iterations (median / p99, ratio of medians to the floor)");
    print_table(
        &[
            Row::new("floor: ping (exists of the root)", floor).note("1"),
            Row::new("acquire (free)", acq).note("1"),
            // Right after the acquire: it waits for the acquire's `exists` reply too.
            Row::new("keep-alive (1 lease held)", ka).note("1 + exists"),
            Row::new("keep-alive, 1 lease (next to 1000)", ka1).note("1"),
            Row::new("keep-alive, 1000 leases", ka1000).note("1"),
            Row::new("release", rel).note("2"),
            Row::new("take-over after release", take).note("2 + watch"),
        ],
        Some("round trips"),
    );
    println!("keep-alive with 1000 leases / with 1 lease (medians): {ratio:.2}x");
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
    drop(b);
    raw::Raw::connect(&hosts).delete_tree(&root);
}
