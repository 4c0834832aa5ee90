//! The TCK on ZooKeeper (standalone server of `.ci/servers.sh`: `SIMBA_ZK_URL`).
//! Each case runs under its own random root, deleted afterwards.

mod zk;

use simba_lease::spi::LeaseBackend;
use std::sync::Arc;
use std::time::Duration;

fn isolated() -> Arc<dyn LeaseBackend> {
    Arc::new(zk::Isolated::new(&zk::hosts(), None, |b| b))
}

// 1 s: above the CI server's minSessionTimeout (200 ms) with room for a loaded machine.
simba_lease::tck_suite!(isolated, lease = Duration::from_secs(1));
