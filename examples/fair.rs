//! Fair locks: three workers queue for a lock another session holds and get it in the order
//! they asked, while `lock_queue` shows who waits.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example fair
//! cargo run --example fair --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example fair --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Error, Session};
use std::time::{Duration, Instant};

fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let config = Config::builder().fair_locks(true).build()?;
    let owner = Session::open(backend.clone(), config.clone())?;
    let held = owner.lock("printer")?;
    println!("owner holds printer with token {}", held.token());

    let workers: Vec<Session> = (0..3)
        .map(|_| Session::open(backend.clone(), config.clone()))
        .collect::<Result<_, _>>()?;
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|scope| -> Result<(), Error> {
        for (i, w) in workers.iter().enumerate() {
            let tx = tx.clone();
            scope.spawn(move || {
                let guard = w.lock("printer").expect("the lock in turn");
                tx.send((i, guard.token())).expect("main is listening");
            });
            // Wait until worker i has its place, so the arrival order is 0, 1, 2.
            let start = Instant::now();
            while !owner.lock_queue("printer")?.contains(&w.id()) {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "worker {i} never queued"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        println!("waiting: {} sessions", owner.lock_queue("printer")?.len());
        held.unlock()?;
        for _ in 0..3 {
            let (i, token) = rx.recv().expect("every worker gets the lock");
            println!("worker {i} printed with token {token}");
        }
        Ok(())
    })?;
    for w in workers {
        w.close()?;
    }
    owner.close()
}
