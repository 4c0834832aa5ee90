//! Leader metadata: two services campaign, each with its address as
//! its term value; a client observes who leads and where to reach it, sees the leader publish
//! a new version, lists the candidates, and follows the failover to the other service.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature (checked on Redis, and on PostgreSQL once its tables exist:
//! `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example leader_value
//! cargo run --example leader_value --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! cargo run --example leader_value --features postgres -- postgres://user@127.0.0.1:5432/db
//! ```

use simba_lease::{connect, Config, Event, Session};
use std::time::{Duration, Instant};

fn main() -> Result<(), simba_lease::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let config = |name: &str| {
        Config::builder()
            .lease(Duration::from_secs(3))
            .renew_interval(Duration::from_secs(1))
            .metadata(name)
            .build()
    };
    let a = Session::open(backend.clone(), config("service a")?)?;
    let b = Session::open(backend.clone(), config("service b")?)?;
    let client = Session::open(backend, config("client")?)?;

    // The client follows the leader and its address.
    let observer = client.observe("api")?;
    let follow = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok(e) = observer.events().recv_timeout(Duration::from_secs(3)) {
            if let Event::LeaderChanged { owner, .. } = e {
                match owner {
                    Some(o) if o.value.is_empty() => {} // a term whose value is not set yet
                    Some(o) => {
                        println!("client: leader token {} at {:?}", o.token, o.value);
                        seen.push(o.value);
                    }
                    None => println!("client: no leader"),
                }
            }
        }
        seen
    });

    let ea = a.election_with_value("api", "10.0.0.1:8080 v1")?;
    let term = ea.wait_elected(Duration::from_secs(5))?;
    println!("service a: leading with token {}", term.token);
    let eb = b.election_with_value("api", "10.0.0.2:8080 v1")?;

    // The leader publishes its new version; the term (and its token) stays.
    ea.set_value("10.0.0.1:8080 v2")?;

    // Who campaigns: both services (their session metadata says which).
    let until = Instant::now() + Duration::from_secs(5);
    while eb.candidates()?.len() < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    for m in eb.candidates()? {
        println!("candidate: {} ({})", m.metadata, m.session);
    }

    // Failover: b's term starts with b's own address, never a's.
    ea.resign()?;
    let next = eb.wait_elected(Duration::from_secs(10))?;
    println!("service b: leading with token {}", next.token);
    let leader = eb.leader()?.expect("b leads");
    assert_eq!(leader.value, "10.0.0.2:8080 v1");

    let seen = follow.join().expect("the client thread");
    assert_eq!(seen.last().map(String::as_str), Some("10.0.0.2:8080 v1"));
    eb.resign()?;
    for s in [a, b, client] {
        s.close()?;
    }
    Ok(())
}
