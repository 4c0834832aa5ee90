//! Three nodes share a schedule: every 100 ms each one asks to run the "compact-logs" job.
//! The job runs on one node per window: `at_least` keeps the name taken for a while after a
//! fast run (so a node whose timer fires a bit later does not run it again), `at_most` caps
//! a run that hangs. The job writes with its fencing token, which a store checks.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example run_once
//! cargo run --example run_once --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example run_once --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Session, Token};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn main() -> Result<(), simba_lease::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    // The highest token the "store" accepted, and every accepted run.
    let store: Arc<Mutex<(Option<Token>, Vec<String>)>> = Arc::default();
    let (at_most, at_least) = (Duration::from_secs(2), Duration::from_millis(250));
    let nodes: Vec<_> = (0..3)
        .map(|node| {
            let (backend, store) = (backend.clone(), store.clone());
            std::thread::spawn(move || -> Result<(), simba_lease::Error> {
                let session = Session::open(backend, Config::default())?;
                for tick in 0..10 {
                    let ran = session.run_once("compact-logs", at_most, at_least, |job| {
                        // ... the work; check the claim before a write that matters.
                        std::thread::sleep(Duration::from_millis(20));
                        let token = job.check()?;
                        let mut s = store.lock().unwrap();
                        if s.0.is_some_and(|highest| token < highest) {
                            return Err(simba_lease::Error::LeaseLost {
                                name: job.name().clone(),
                                token,
                            });
                        }
                        s.0 = Some(token);
                        s.1.push(format!("node {node} tick {tick} token {token}"));
                        Ok(())
                    })?;
                    match ran {
                        Some(result) => {
                            result?;
                            println!("node {node} tick {tick}: ran the job");
                        }
                        None => println!("node {node} tick {tick}: taken elsewhere"),
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                session.close()
            })
        })
        .collect();
    for n in nodes {
        n.join().expect("node panicked")?;
    }
    let runs = store.lock().unwrap().1.len();
    println!("{runs} runs in about a second of 3 nodes x 10 ticks (one per 250 ms window)");
    Ok(())
}
