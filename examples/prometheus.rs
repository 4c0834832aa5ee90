//! Publishes a session's figures (feature `metrics`) through the Prometheus exporter and
//! prints the scrape text after a few lock rounds.
//!
//! `cargo run --example prometheus --features metrics` (or pass a backend URL). A real
//! service would serve `handle.render()` on its metrics endpoint.

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
