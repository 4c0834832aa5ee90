//! Members join and leave a group while a watcher prints every change.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example group
//! cargo run --example group --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example group --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Event, Session};
use std::time::Duration;

fn main() -> Result<(), simba_lease::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let watcher = Session::open(backend.clone(), Config::default())?;
    let view = watcher.group("workers")?;
    let changes = view.watch()?;
    let printer = std::thread::spawn(move || {
        for e in changes.iter() {
            if let Event::MembersChanged {
                members,
                joined,
                left,
                ..
            } = e
            {
                for m in &joined {
                    println!("joined: {} ({})", m.session, m.metadata);
                }
                for m in &left {
                    println!("left:   {} ({})", m.session, m.metadata);
                }
                println!("now {} member(s)", members.len());
            }
        }
    });
    let mut members = Vec::new();
    for i in 0..3 {
        let config = Config::builder()
            .metadata(format!("10.0.0.{i}:8080"))
            .build()?;
        let session = Session::open(backend.clone(), config)?;
        let membership = session.group("workers")?.join()?;
        members.push((session, membership));
        std::thread::sleep(Duration::from_millis(100));
    }
    while let Some((session, membership)) = members.pop() {
        if members.len() % 2 == 0 {
            membership.leave()?;
        } else {
            session.close()?; // closing a session also ends its memberships
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    watcher.close()?;
    printer.join().expect("printer panicked");
    Ok(())
}
