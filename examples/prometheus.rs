//! Publishes a session's figures (feature `metrics`) through the Prometheus exporter and
//! prints the scrape text after a few lock rounds.
//!
//! A real service would serve `handle.render()` on its metrics endpoint.
//!
//! Features: `metrics`. URL: `memory://` unless a backend URL is the first argument, which
//! needs that backend's feature too (checked on Redis, and on PostgreSQL once its tables
//! exist: `simba schema install URL` or `sql/init-simba-postgresql.sql`):
//!
//! ```text
//! cargo run --example prometheus --features metrics
//! cargo run --example prometheus --features metrics,redis -- 'redis://127.0.0.1:6379?prefix=ex'
//! cargo run --example prometheus --features metrics,postgres -- postgres://u@127.0.0.1/db
//! ```

use metrics_exporter_prometheus::PrometheusBuilder;
use simba_lease::{connect, Config, Session};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let config = Config::builder()
        .lease(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(200))
        .build()?;
    let session = Session::open(connect(&url)?, config)?;
    let election = session.election("example-leader")?;
    election.wait_elected(Duration::from_secs(10))?;
    for _ in 0..3 {
        let guard = session.lock("example-lock")?;
        std::thread::sleep(Duration::from_millis(300));
        guard.unlock()?;
    }
    session.close()?;
    print!("{}", handle.render());
    Ok(())
}
