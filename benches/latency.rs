//! Latency of acquire, release, keep-alive, lock/unlock and take-over, next to the
//! backend's floor (its cheapest round trip, `LeaseBackend::ping`), measured in the same run.
//!
//! `SIMBA_BENCH_URL=memory:// cargo bench --bench latency` (any backend URL whose feature is
//! enabled; `SIMBA_BENCH_ITERS` sets the iteration count, default 2000).

use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{connect, Config, LeaseName, Metadata, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{print_table, time, Row};

fn main() {
    let url = std::env::var("SIMBA_BENCH_URL").unwrap_or_else(|_| "memory://".into());
    let iters = common::iterations(2000, 20);
    let backend: Arc<dyn LeaseBackend> = connect(&url).expect("backend URL");
    let lease = Duration::from_secs(30);
    let a = backend
        .open_session(lease, &Metadata::default())
        .unwrap()
        .id;
    let name = LeaseName::new(format!("bench-{}", std::process::id())).unwrap();
    let (mut floor, mut acq, mut rel, mut ka) = (vec![], vec![], vec![], vec![]);
    for i in 0..iters + iters / 10 {
        let warm = i < iters / 10;
        let mut f = vec![];
        time(&mut f, || backend.ping().unwrap());
        let mut s1 = vec![];
        let term = match time(&mut s1, || backend.acquire(&a, &name).unwrap()) {
            Acquire::Acquired(t) => t,
            Acquire::Held(o) => panic!("bench lease held by {o:?}"),
        };
        let mut s2 = vec![];
        assert!(time(&mut s2, || backend
            .release(&a, &name, term.token)
            .unwrap()));
        let mut s3 = vec![];
        time(&mut s3, || backend.keep_alive(&a, lease).unwrap());
        if !warm {
            floor.extend(f);
            acq.extend(s1);
            rel.extend(s2);
            ka.extend(s3);
        }
    }
    let session = Session::open(backend.clone(), Config::default()).unwrap();
    let (mut lock, mut unlock) = (vec![], vec![]);
    for _ in 0..iters {
        let g = time(&mut lock, || session.lock(&name).unwrap());
        // `unlock()` releases before returning (a drop would release in the background,
        // and the next `lock` would wait for that release).
        time(&mut unlock, || g.unlock().unwrap());
    }
    // Take-over: a second session blocks in `lock`; measured from the holder's release
    // returning to the waiter's lock returning.
    let other = Session::open(backend.clone(), Config::default()).unwrap();
    let mut takeover = vec![];
    for _ in 0..(iters / 20).max(5) {
        let g = session.lock(&name).unwrap();
        std::thread::scope(|s| {
            let w = s.spawn(|| {
                let g = other.lock(&name).unwrap();
                (Instant::now(), g)
            });
            std::thread::sleep(Duration::from_millis(5));
            let released = {
                g.unlock().unwrap();
                Instant::now()
            };
            let (got, g2) = w.join().unwrap();
            takeover.push(got.saturating_duration_since(released));
            drop(g2);
        });
    }
    println!("backend {} ({url}), {iters} iterations", backend.kind());
    print_table(
        &[
            Row::new("floor (ping)", floor),
            Row::new("acquire", acq),
            Row::new("release", rel),
            Row::new("keep-alive", ka),
            Row::new("lock (engine)", lock),
            Row::new("unlock (engine)", unlock),
            Row::new("take-over", takeover),
        ],
        None,
    );
    backend.close_session(&a).unwrap();
}
