//! A worker waits for a lock another session holds; a supervisor thread gives up on it with
//! a `Cancel` token (it could as well be a signal handler: `cancel()` is one atomic store).
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example cancel
//! cargo run --example cancel --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example cancel --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Cancel, Config, Error, Session};
use std::time::{Duration, Instant};

fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let owner = Session::open(backend.clone(), Config::default())?;
    let worker = Session::open(backend, Config::default())?;
    let held = owner.lock("nightly-report")?;
    println!("owner holds nightly-report with token {}", held.token());

    let cancel = Cancel::new();
    let supervisor = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            println!("supervisor: shutting down, cancelling the wait");
            cancel.cancel();
        })
    };
    let start = Instant::now();
    match worker.lock_cancellable("nightly-report", None, &cancel) {
        Err(Error::Cancelled { operation }) => {
            println!(
                "worker: cancelled while {operation} after {:?}",
                start.elapsed()
            )
        }
        Ok(g) => println!("worker: got the lock with token {}", g.token()),
        Err(e) => return Err(e),
    }
    supervisor.join().expect("the supervisor thread");
    // Locks are not reentrant: the owner's own thread gets an error, not a deadlock.
    match owner.lock("nightly-report") {
        Err(Error::AlreadyHeld { name }) => {
            println!("owner: {name} is already held by this thread")
        }
        other => println!("owner: unexpected {other:?}"),
    }
    held.unlock()?;
    owner.close()?;
    worker.close()
}
