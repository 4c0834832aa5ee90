//! Four workers, each with its own session, take turns on one lock. The protected resource
//! checks the fencing token of every write and rejects any token lower than the highest seen.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example lock
//! cargo run --example lock --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example lock --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Session, Token};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A store that accepts a write only with the highest fencing token seen so far.
#[derive(Default)]
struct FencedStore {
    highest: Option<Token>,
    log: Vec<String>,
}

impl FencedStore {
    fn write(&mut self, token: Token, line: String) -> Result<(), String> {
        if self.highest.is_some_and(|h| token < h) {
            return Err(format!("rejected stale token {token}"));
        }
        self.highest = Some(token);
        self.log.push(line);
        Ok(())
    }
}

fn main() -> Result<(), simba_lease::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let store = Arc::new(Mutex::new(FencedStore::default()));
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let (backend, store) = (backend.clone(), store.clone());
            std::thread::spawn(move || -> Result<(), simba_lease::Error> {
                let session = Session::open(backend, Config::default())?;
                for round in 0..2 {
                    let guard = session.lock_timeout("ledger", Duration::from_secs(30))?;
                    let line = format!("worker {i} round {round} token {}", guard.token());
                    println!("{line}");
                    if guard.is_valid() {
                        store.lock().unwrap().write(guard.token(), line).unwrap();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                session.close()
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker panicked")?;
    }
    println!("{} fenced writes accepted", store.lock().unwrap().log.len());
    Ok(())
}
