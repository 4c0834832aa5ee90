//! Latency of acquire, release, keep-alive, lock/unlock and take-over, next to the
//! backend's floor (its cheapest round trip, `LeaseBackend::ping`), measured in the same run.
//!
//! `SIMBA_BENCH_URL=memory:// cargo bench --bench latency` (any backend URL whose feature is
//! enabled; `SIMBA_BENCH_ITERS` sets the iteration count, default 2000).

use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{connect, Config, LeaseName, Metadata, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Stats {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Stats {
    fn pct(&self, p: f64) -> Duration {
        let mut s = self.samples.clone();
        s.sort();
        s[((s.len() - 1) as f64 * p) as usize]
    }
}

fn time<T>(samples: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    samples.push(t.elapsed());
    r
}

fn main() {
    let url = std::env::var("SIMBA_BENCH_URL").unwrap_or_else(|_| "memory://".into());
    let iters: usize = std::env::var("SIMBA_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    // `cargo test --benches` runs this with `--bench` absent: keep that run short.
    let iters = if std::env::args().any(|a| a == "--bench") {
        iters
    } else {
        20
    };
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
        time(&mut unlock, || drop(g));
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
                drop(g);
                Instant::now()
            };
            let (got, g2) = w.join().unwrap();
            takeover.push(got.saturating_duration_since(released));
            drop(g2);
        });
    }
    let floor = Stats {
        name: "floor (ping)",
        samples: floor,
    };
    let f50 = floor.pct(0.5).as_secs_f64();
    println!("backend {} ({url}), {iters} iterations", backend.kind());
    println!(
        "{:<22} {:>10} {:>10} {:>8}",
        "operation", "p50 µs", "p99 µs", "p50/floor"
    );
    for s in [
        floor,
        Stats {
            name: "acquire",
            samples: acq,
        },
        Stats {
            name: "release",
            samples: rel,
        },
        Stats {
            name: "keep-alive",
            samples: ka,
        },
        Stats {
            name: "lock (engine)",
            samples: lock,
        },
        Stats {
            name: "unlock (engine)",
            samples: unlock,
        },
        Stats {
            name: "take-over",
            samples: takeover,
        },
    ] {
        let (p50, p99) = (s.pct(0.5), s.pct(0.99));
        println!(
            "{:<22} {:>10.1} {:>10.1} {:>8.2}",
            s.name,
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            p50.as_secs_f64() / f50.max(1e-9)
        );
    }
    backend.close_session(&a).unwrap();
}
