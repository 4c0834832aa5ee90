//! Cases under network faults, on a real server behind a [`FaultProxy`]: one process reaches
//! the server through the proxy, another directly. They are not in [`tck_suite!`] (each
//! backend's test file builds the two backends on the proxy's address and the server's); see
//! `tests/faults.rs`.
//!
//! [`tck_suite!`]: crate::tck_suite

use super::net::FaultProxy;
use super::{lease_name, until};
use crate::engine::{Config, Event, Session, SessionState};
use crate::spi::LeaseBackend;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two views of one server: `through` reaches it through `proxy`, `direct` does not (another
/// process, the network between it and the server healthy).
pub struct Faulty {
    /// The proxy in front of the server.
    pub proxy: FaultProxy,
    /// A backend whose connections go through the proxy.
    pub through: Arc<dyn LeaseBackend>,
    /// A backend on the same server and names, connected directly.
    pub direct: Arc<dyn LeaseBackend>,
    /// The sessions' lease.
    pub lease: Duration,
    /// The bound of every wait.
    pub patience: Duration,
}

impl std::fmt::Debug for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faulty")
            .field("proxy", &self.proxy)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// What a fault case measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    /// How long after the guard's local deadline (as the guard reported it when the fault
    /// began) its loss event arrived (zero if before).
    pub loss_after_deadline: Duration,
    /// From the heal to the cut-off process holding the name again (after the other
    /// released it).
    pub takeover_after_heal: Duration,
}

impl Faulty {
    fn config(&self) -> Config {
        Config::builder()
            .lease(self.lease)
            .renew_interval(self.lease / 5)
            .build()
            .expect("valid fault-case config")
    }
}

/// A blackhole between a lock's holder and the server: the holder hears `LockLost` by its
/// local deadline (plus scheduling), and its guard is invalid before another process, whose
/// network is healthy, is granted the name (with a higher token). Healed, the cut-off
/// process's session finds itself expired, reopens, and takes the name again after the
/// other released it, with a higher token still.
pub fn a_blackhole_ends_the_lock_before_another_process_takes_it(f: &Faulty) -> Figures {
    let cfg = f.config();
    let a = Session::open(f.through.clone(), cfg.clone()).expect("session through the proxy");
    let b = Session::open(f.direct.clone(), cfg).expect("direct session");
    let events = a.events();
    let name = lease_name("fault-blackhole");
    let held = a.lock(&name).expect("lock through the proxy");
    let first = held.token();
    let old = a.id();

    f.proxy.blackhole();
    let deadline = Instant::now() + held.valid_for().expect("valid when the fault began");
    let lost = held.lost().recv_timeout(f.patience);
    let heard = Instant::now();
    assert!(
        matches!(lost, Ok(Event::LockLost { .. })),
        "no loss reported within {:?} of a blackhole: {lost:?}",
        f.patience
    );
    assert!(!held.is_valid(), "invalid once its loss was heard");
    let loss_after_deadline = heard.saturating_duration_since(deadline);

    // The other process takes the name once the server expired the cut-off session; the
    // cut-off guard was invalid before.
    let taken = b.lock_timeout(&name, f.patience).expect("taken over");
    assert!(!held.is_valid(), "two believed they held the lock");
    assert!(taken.token() > first, "{} after {first}", taken.token());

    // Healed: the cut-off session learns it expired and opens a new one.
    f.proxy.heal();
    let healed = Instant::now();
    until(f.patience, "the cut-off session reopened", || {
        a.id() != old && a.state() == SessionState::Valid
    });
    let seen: Vec<Event> = events.try_iter().collect();
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::SessionExpired { session } if *session == old)),
        "{seen:?}"
    );
    // The lost guard keeps its name reserved in this thread until dropped.
    drop(held);
    let second = taken.token();
    taken.unlock().expect("unlock");
    let again = a.lock_timeout(&name, f.patience).expect("taken back");
    let takeover_after_heal = healed.elapsed();
    assert!(again.token() > second, "{} after {second}", again.token());
    again.unlock().expect("unlock");
    a.close().expect("close");
    b.close().expect("close");
    Figures {
        loss_after_deadline,
        takeover_after_heal,
    }
}
