//! Three candidates in one process elect a leader; each leader
//! serves a little, then resigns, and the next one takes over with a greater fencing token.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example election
//! cargo run --example election --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example election --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Event, Session};
use std::time::Duration;

fn main() -> Result<(), simba_lease::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let config = Config::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .build()?;
    let sessions: Vec<Session> = (0..3)
        .map(|_| Session::open(backend.clone(), config.clone()))
        .collect::<Result<_, _>>()?;
    let observer = sessions[0].observe("scheduler")?;
    let mut elections = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        elections.push((
            i,
            s.election_with("scheduler", move |e| match e {
                Event::Elected { term } => println!("candidate {i}: elected, token {}", term.token),
                Event::Revoked { term, reason } => {
                    println!("candidate {i}: term {} ended ({reason:?})", term.token)
                }
                _ => {}
            })?,
        ));
    }
    for _round in 0..3 {
        let leader = loop {
            if let Some(i) = elections.iter().position(|(_, e)| e.is_leader()) {
                break i;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        std::thread::sleep(Duration::from_millis(200));
        let (id, election) = elections.remove(leader);
        println!("candidate {id}: resigning");
        election.resign()?;
    }
    for e in observer.events().try_iter() {
        if let Event::LeaderChanged { owner, .. } = e {
            match owner {
                Some(o) => println!("observer: leader {} with token {}", o.session, o.token),
                None => println!("observer: no leader"),
            }
        }
    }
    Ok(())
}
