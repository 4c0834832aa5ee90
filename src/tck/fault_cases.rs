//! Cases under network faults, on a real server behind a [`FaultProxy`]: one process reaches
//! the server through the proxy, another directly. They are not in [`tck_suite!`] (each
//! backend's test file builds the two backends on the proxy's address and the server's); see
//! `tests/faults.rs`.
//!
//! [`tck_suite!`]: crate::tck_suite

use super::net::{Draw, FaultProxy};
use super::{lease_name, until};
use crate::engine::{Config, Event, Session, SessionState};
use crate::spi::{LeaseBackend, RwMode};
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

/// Many processes on one server, each its own session through a proxy of its own, locking a
/// few names while a seeded schedule breaks their networks in turn.
pub struct Clients<'a> {
    /// The server's address, which each client's proxy fronts.
    pub upstream: String,
    /// A backend reaching the server at the given address (a proxy's), on names shared by
    /// every client.
    pub connect: &'a (dyn Fn(&str) -> Arc<dyn LeaseBackend> + Sync),
    /// The sessions' lease.
    pub lease: Duration,
    /// How many clients.
    pub clients: usize,
    /// How long the workload runs.
    pub run: Duration,
    /// The schedule's seed (printed by the case).
    pub seed: u64,
}

impl std::fmt::Debug for Clients<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("upstream", &self.upstream)
            .field("clients", &self.clients)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// The faults the schedule applies, by name.
const FAULTS: [&str; 7] = [
    "blackhole",
    "latency",
    "requests lost",
    "replies lost",
    "cut",
    "cut mid-reply",
    "trickle",
];

/// Many clients lock two names, and read or write a third (a read-write lock), under faults (blackholes, latency, one-way partitions, cuts,
/// cuts in the middle of a reply, trickles, each healed after a while): the recorded history
/// keeps the rules of [`history::check`](super::history::check) (no two clients believe
/// they hold a name at once; tokens increase with the grants). A client's belief ends at
/// its unlock, or at the deadline its guard promised once the guard is found invalid.
/// Returns what the history held.
pub fn a_history_under_faults_keeps_the_contract(c: &Clients) -> super::history::Summary {
    use super::history::{check, History, Step};
    println!("fault history: seed {}", c.seed);
    let cfg = Config::builder()
        .lease(c.lease)
        .renew_interval(c.lease / 5)
        .build()
        .expect("valid config");
    let proxies: Vec<FaultProxy> = (0..c.clients)
        .map(|i| FaultProxy::start(c.upstream.as_str(), c.seed ^ i as u64).expect("proxy"))
        .collect();
    let sessions: Vec<Session> = (proxies.iter())
        .map(|p| Session::open((c.connect)(&p.addr().to_string()), cfg.clone()).expect("open"))
        .collect();
    let names = [lease_name("fault-h0"), lease_name("fault-h1")];
    let rw_name = lease_name("fault-rw");
    let history = History::default();
    let end = Instant::now() + c.run;
    std::thread::scope(|scope| {
        for (i, s) in sessions.iter().enumerate() {
            let (names, rw_name, history) = (&names, &rw_name, &history);
            let mut draw = Draw(c.seed.wrapping_mul(31).wrapping_add(i as u64) | 1);
            scope.spawn(move || {
                while Instant::now() < end {
                    // A lock of one of two names, or a read or write term of a third.
                    let pick = draw.below(6) as usize;
                    let mode = match pick {
                        0..=2 => None,
                        3 | 4 => Some(RwMode::Read),
                        _ => Some(RwMode::Write),
                    };
                    let name = match mode {
                        None => &names[pick % 2],
                        Some(_) => rw_name,
                    };
                    let taken = match mode {
                        None => s.lock_timeout(name, c.lease).map(Held::Lock),
                        Some(RwMode::Read) => s
                            .rw_lock(name)
                            .and_then(|l| l.read_timeout(c.lease))
                            .map(Held::Rw),
                        Some(RwMode::Write) => s
                            .rw_lock(name)
                            .and_then(|l| l.write_timeout(c.lease))
                            .map(Held::Rw),
                    };
                    let guard = match taken {
                        Ok(g) => g,
                        Err(e) => {
                            history.record(i, name, Step::Failed(e.to_string()));
                            std::thread::sleep(draw.between(MS, 20 * MS));
                            continue;
                        }
                    };
                    let step = match mode {
                        None => Step::Granted(guard.token()),
                        Some(m) => Step::GrantedRw(guard.token(), m),
                    };
                    history.record(i, name, step);
                    // Some holds outlast a lease: a fault meanwhile ends them.
                    let hold = Instant::now() + draw.between(MS, c.lease * 3);
                    let mut promised = Instant::now();
                    loop {
                        match guard.valid_for() {
                            Some(left) if guard.not_lost() => {
                                promised = Instant::now() + left;
                            }
                            _ => {
                                // Believed until the deadline the guard last promised.
                                let at = promised.min(Instant::now());
                                history.record_at(at, i, name, Step::Lost);
                                break;
                            }
                        }
                        if Instant::now() >= hold {
                            history.record(i, name, Step::Unlocking);
                            guard.unlock();
                            break;
                        }
                        std::thread::sleep(2 * MS);
                    }
                }
            });
        }
        let (proxies, mut draw) = (&proxies, Draw(c.seed | 1));
        scope.spawn(move || {
            while Instant::now() < end {
                // One fault (a blackhole, which ends terms, two times in five), on each
                // client's network with even odds.
                let fault = match draw.below(5) < 2 {
                    true => "blackhole",
                    false => FAULTS[draw.below(FAULTS.len() as u64) as usize],
                };
                let hit: Vec<&FaultProxy> =
                    (proxies.iter()).filter(|_| draw.below(2) == 0).collect();
                let delay = draw.between(MS, c.lease / 4);
                for p in &hit {
                    match fault {
                        "blackhole" => p.blackhole(),
                        "latency" => p.latency(delay, 20 * MS),
                        "requests lost" => p.partition(super::net::Direction::ToServer),
                        "replies lost" => p.partition(super::net::Direction::ToClient),
                        "cut" => p.cut(),
                        "cut mid-reply" => p.cut_mid_reply(),
                        _ => p.trickle(64),
                    }
                }
                std::thread::sleep(draw.between(c.lease / 2, c.lease * 5 / 2));
                hit.iter().for_each(|p| p.heal());
                std::thread::sleep(draw.between(10 * MS, c.lease / 2));
            }
        });
    });
    for p in &proxies {
        p.heal();
    }
    for s in sessions {
        let _ = s.close();
    }
    let entries = history.entries();
    match check(&entries) {
        Ok(summary) => {
            println!("fault history: seed {}: {summary:?}", c.seed);
            assert!(summary.grants > 0, "no grant in the whole run");
            summary
        }
        Err(e) => panic!("seed {}: {e}", c.seed),
    }
}

const MS: Duration = Duration::from_millis(1);

/// A guard of either kind, as the workload holds it.
enum Held {
    Lock(crate::LockGuard),
    Rw(crate::RwGuard),
}

impl Held {
    fn token(&self) -> crate::types::Token {
        match self {
            Held::Lock(g) => g.token(),
            Held::Rw(g) => g.token(),
        }
    }

    fn valid_for(&self) -> Option<Duration> {
        match self {
            Held::Lock(g) => g.valid_for(),
            Held::Rw(g) => g.valid_for(),
        }
    }

    fn not_lost(&self) -> bool {
        match self {
            Held::Lock(g) => g.lost().is_empty(),
            Held::Rw(g) => g.lost().is_empty(),
        }
    }

    fn unlock(self) {
        let _ = match self {
            Held::Lock(g) => g.unlock(),
            Held::Rw(g) => g.unlock(),
        };
    }
}

/// A broken backend for the checker's teeth: it answers every keep-alive as renewed,
/// listing the leases it granted, without renewing anything on `inner` (a backend that
/// extends leases it should not). Its sessions expire on the server while their process
/// believes them live.
pub struct NeverRenews {
    inner: Arc<dyn LeaseBackend>,
    granted: parking_lot::Mutex<Vec<(crate::types::SessionId, crate::spi::HeldLease)>>,
}

impl NeverRenews {
    /// `inner`, broken.
    pub fn new(inner: Arc<dyn LeaseBackend>) -> Self {
        let granted = parking_lot::Mutex::new(Vec::new());
        NeverRenews { inner, granted }
    }
}

impl std::fmt::Debug for NeverRenews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NeverRenews").finish_non_exhaustive()
    }
}

impl LeaseBackend for NeverRenews {
    fn kind(&self) -> &'static str {
        "never-renews"
    }
    fn open(&self, spec: &crate::spi::SessionSpec<'_>) -> crate::Result<crate::spi::SessionGrant> {
        self.inner.open(spec)
    }
    fn keep_alive(
        &self,
        session: &crate::types::SessionId,
        lease: Duration,
    ) -> crate::Result<crate::spi::KeepAlive> {
        let leases = (self.granted.lock().iter())
            .filter(|(s, _)| s == session)
            .map(|(_, l)| crate::spi::HeldLease {
                remaining: lease,
                ..l.clone()
            })
            .collect();
        Ok(crate::spi::KeepAlive {
            remaining: lease,
            leases,
            rw: Vec::new(),
        })
    }
    fn close_session(&self, session: &crate::types::SessionId) -> crate::Result<()> {
        self.inner.close_session(session)
    }
    fn acquire(
        &self,
        session: &crate::types::SessionId,
        name: &crate::types::LeaseName,
    ) -> crate::Result<crate::spi::Acquire> {
        let r = self.inner.acquire(session, name)?;
        if let crate::spi::Acquire::Acquired(t) = &r {
            let held = crate::spi::HeldLease {
                name: t.name.clone(),
                token: t.token,
                remaining: t.remaining,
            };
            let mut g = self.granted.lock();
            g.retain(|(s, l)| !(s == session && l.name == t.name));
            g.push((session.clone(), held));
        }
        Ok(r)
    }
    fn release(
        &self,
        session: &crate::types::SessionId,
        name: &crate::types::LeaseName,
        token: crate::types::Token,
    ) -> crate::Result<bool> {
        (self.granted.lock()).retain(|(s, l)| !(s == session && &l.name == name));
        self.inner.release(session, name, token)
    }
    fn owner(&self, name: &crate::types::LeaseName) -> crate::Result<Option<crate::types::Owner>> {
        self.inner.owner(name)
    }
    fn join(
        &self,
        session: &crate::types::SessionId,
        group: &crate::types::GroupName,
    ) -> crate::Result<()> {
        self.inner.join(session, group)
    }
    fn leave(
        &self,
        session: &crate::types::SessionId,
        group: &crate::types::GroupName,
    ) -> crate::Result<bool> {
        self.inner.leave(session, group)
    }
    fn members(&self, group: &crate::types::GroupName) -> crate::Result<Vec<crate::types::Member>> {
        self.inner.members(group)
    }
    fn purge_expired(&self) -> crate::Result<usize> {
        self.inner.purge_expired()
    }
}
