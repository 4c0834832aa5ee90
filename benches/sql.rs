//! SQL backends: acquire, release and keep-alive (a session holding 1 and 1000 leases) next
//! to the floor (a prepared `SELECT 1` on the same pool), measured in the same run, with the
//! ratios; and the take-over after a clean release through the engine (`Session::lock`
//! waiting in one session while another unlocks, default lease and renew interval): pushed by
//! `LISTEN/NOTIFY` on PostgreSQL, polled on MySQL (fewer rounds there, each takes about a
//! second or two). Runs on every database that answers (`SIMBA_POSTGRES_URL`, `SIMBA_MYSQL_URL`,
//! loopback defaults as in the tests), on tables with a random prefix dropped afterwards.
//!
//! `cargo bench --bench sql --features postgres,mysql` (`SIMBA_BENCH_ITERS`, default 1000).

use simba_lease::backends::SqlBackend;
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{Config, LeaseName, Metadata, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{print_table, time, Row};

fn bench(url: &str, iters: usize) {
    let prefix = format!("bench{}_", std::process::id());
    let b = match SqlBackend::builder(url).table_prefix(&prefix).build() {
        Ok(b) => Arc::new(b),
        Err(e) => {
            println!("skipping {url}: {e}");
            return;
        }
    };
    b.install_schema().expect("install_schema");
    let lease = Duration::from_secs(60);
    let s = b.open_session(lease, &Metadata::default()).unwrap().id;
    let name = LeaseName::new("bench").unwrap();
    let (mut floor, mut acq, mut rel, mut ka1) = (vec![], vec![], vec![], vec![]);
    let extra = LeaseName::new("bench-held").unwrap();
    b.acquire(&s, &extra).unwrap();
    for i in 0..iters + iters / 10 {
        let warm = i < iters / 10;
        let (mut f, mut a, mut r, mut k) = (vec![], vec![], vec![], vec![]);
        time(&mut f, || b.ping().unwrap());
        let t = match time(&mut a, || b.acquire(&s, &name).unwrap()) {
            Acquire::Acquired(t) => t,
            Acquire::Held(o) => panic!("held by {o:?}"),
        };
        assert!(time(&mut r, || b.release(&s, &name, t.token).unwrap()));
        time(&mut k, || b.keep_alive(&s, lease).unwrap());
        if !warm {
            floor.extend(f);
            acq.extend(a);
            rel.extend(r);
            ka1.extend(k);
        }
    }
    // A second session holding 1000 leases.
    let big = b.open_session(lease, &Metadata::default()).unwrap().id;
    for i in 0..1000 {
        b.acquire(&big, &LeaseName::new(format!("many-{i}")).unwrap())
            .unwrap();
    }
    let mut ka1000 = vec![];
    for i in 0..(iters / 5).max(20) {
        let mut k = vec![];
        let reply = time(&mut k, || b.keep_alive(&big, lease).unwrap());
        assert_eq!(reply.leases.len(), 1000);
        if i >= 5 {
            ka1000.extend(k);
        }
    }
    b.close_session(&big).unwrap();
    b.close_session(&s).unwrap();
    let takeover = take_over(b.clone(), iters);
    println!("{} ({url}), {iters} iterations", b.kind());
    print_table(
        &[
            Row::new("floor (SELECT 1)", floor),
            Row::new("acquire (new term)", acq),
            Row::new("release", rel),
            Row::new("keep-alive, 1 lease", ka1),
            Row::new("keep-alive, 1000 leases", ka1000),
            Row::new("take-over after release (engine)", takeover),
        ],
        None,
    );
    b.drop_tables().unwrap();
}

/// Take-over after a clean release: one session's `lock` waits while the other unlocks;
/// from the start of `unlock` until the waiter's `lock` returns.
fn take_over(b: Arc<SqlBackend>, iters: usize) -> Vec<Duration> {
    let pushed = b
        .subscribe(Arc::new(|_: &simba_lease::spi::Notification| {}))
        .unwrap()
        .is_some();
    let rounds = if pushed { (iters / 40).max(10) } else { 5 };
    let backend: Arc<dyn LeaseBackend> = b;
    let config = Config::default();
    let x = Session::open(backend.clone(), config.clone()).unwrap();
    let y = Session::open(backend, config).unwrap();
    let mut samples = vec![];
    for i in 0..rounds {
        let n = LeaseName::new(format!("takeover-{i}")).unwrap();
        let (a, c) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
        let held = a.try_lock(&n).unwrap().expect("a fresh name is free");
        let took = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let g = c.lock(&n).unwrap();
                let at = Instant::now();
                g.unlock().unwrap();
                at
            });
            // Let the waiter's first attempt find the lock held.
            std::thread::sleep(Duration::from_millis(50));
            let t = Instant::now();
            held.unlock().unwrap();
            waiter.join().unwrap() - t
        });
        samples.push(took);
    }
    x.close().unwrap();
    y.close().unwrap();
    samples
}

fn main() {
    let iters = common::iterations(1000, 20);
    let pg = std::env::var("SIMBA_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let my = std::env::var("SIMBA_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".into());
    bench(&pg, iters);
    bench(&my, iters);
}
