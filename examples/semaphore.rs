//! A semaphore of 2 permits shared by three workers: at most two work at once, each permit a
//! lease with its own fencing token, and `holders` shows who holds what.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example semaphore
//! cargo run --example semaphore --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example semaphore --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Error, Session};
use std::time::Duration;

fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let workers: Vec<Session> = (0..3)
        .map(|_| Session::open(backend.clone(), Config::default()))
        .collect::<Result<_, _>>()?;
    std::thread::scope(|scope| -> Result<(), Error> {
        let mut running = Vec::new();
        for (i, w) in workers.iter().enumerate() {
            running.push(scope.spawn(move || -> Result<(), Error> {
                let pool = w.semaphore("gpu", 2)?;
                let permit = pool.acquire_timeout(Duration::from_secs(10))?;
                println!(
                    "worker {i}: permit {} with token {}; holders now: {}",
                    permit.index(),
                    permit.token(),
                    pool.holders()?.len()
                );
                std::thread::sleep(Duration::from_millis(100));
                permit.release()
            }));
        }
        for r in running {
            r.join().expect("a worker panicked")?;
        }
        Ok(())
    })?;
    for w in workers {
        w.close()?;
    }
    Ok(())
}
