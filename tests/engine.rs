//! The threaded engine under faults: a keep-alive that hangs, acquires that hang.

use simba_lease::backends::MemoryBackend;
use simba_lease::spi::{Acquire, KeepAlive, LeaseBackend, SessionGrant};
use simba_lease::{
    Config, Error, Event, GroupName, LeaseName, LossReason, Member, Metadata, Owner, Result,
    Session, SessionId, SessionState, Token,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Memory backend whose keep-alives or acquires can be made to hang.
#[derive(Default)]
struct Gate {
    inner: MemoryBackend,
    hang_keep_alive: AtomicBool,
    hang_acquire: AtomicBool,
    keep_alives: AtomicUsize,
    /// Keep-alives of this session only hang (while `hang_keep_alive` is set).
    hang_only: Mutex<Option<SessionId>>,
    /// A join waits before reaching the backend / after it joined (a slow reply).
    hang_before_join: AtomicBool,
    hang_after_join: AtomicBool,
    joins_started: AtomicUsize,
    joins_done: AtomicUsize,
}

fn hang_while(flag: &AtomicBool) {
    while flag.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl LeaseBackend for Gate {
    fn kind(&self) -> &'static str {
        "gate"
    }
    fn open_session(&self, lease: Duration, m: &Metadata) -> Result<SessionGrant> {
        self.inner.open_session(lease, m)
    }
    fn keep_alive(&self, s: &SessionId, lease: Duration) -> Result<KeepAlive> {
        let only = self.hang_only.lock().unwrap().clone();
        if only.is_none_or(|o| &o == s) {
            hang_while(&self.hang_keep_alive);
        }
        self.keep_alives.fetch_add(1, Ordering::SeqCst);
        self.inner.keep_alive(s, lease)
    }
    fn close_session(&self, s: &SessionId) -> Result<()> {
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &LeaseName) -> Result<Acquire> {
        hang_while(&self.hang_acquire);
        self.inner.acquire(s, n)
    }
    fn release(&self, s: &SessionId, n: &LeaseName, t: Token) -> Result<bool> {
        self.inner.release(s, n, t)
    }
    fn owner(&self, n: &LeaseName) -> Result<Option<Owner>> {
        self.inner.owner(n)
    }
    fn join(&self, s: &SessionId, g: &GroupName) -> Result<()> {
        self.joins_started.fetch_add(1, Ordering::SeqCst);
        hang_while(&self.hang_before_join);
        let r = self.inner.join(s, g);
        self.joins_done.fetch_add(1, Ordering::SeqCst);
        hang_while(&self.hang_after_join);
        r
    }
    fn leave(&self, s: &SessionId, g: &GroupName) -> Result<bool> {
        self.inner.leave(s, g)
    }
    fn members(&self, g: &GroupName) -> Result<Vec<Member>> {
        self.inner.members(g)
    }
    fn purge_expired(&self) -> Result<usize> {
        self.inner.purge_expired()
    }
}

fn config() -> Config {
    Config::builder()
        .lease(Duration::from_millis(400))
        .renew_interval(Duration::from_millis(80))
        .build()
        .unwrap()
}

fn terminal() -> Config {
    Config::builder()
        .lease(Duration::from_millis(400))
        .renew_interval(Duration::from_millis(80))
        .reopen_on_expiry(false)
        .build()
        .unwrap()
}

const PATIENCE: Duration = Duration::from_secs(20);

#[test]
fn a_hanging_keep_alive_leads_to_jeopardy_then_loss_at_the_local_deadline() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), terminal()).unwrap();
    let events = session.events();
    let guard = session.lock("job").unwrap();
    gate.hang_keep_alive.store(true, Ordering::SeqCst);
    let jeopardy = events.recv_timeout(PATIENCE).unwrap();
    assert!(matches!(jeopardy, Event::Jeopardy { .. }), "{jeopardy:?}");
    assert!(guard.is_valid(), "still valid inside the window");
    let lost = events.recv_timeout(PATIENCE).unwrap();
    assert!(
        matches!(
            lost,
            Event::LockLost {
                reason: LossReason::SessionExpired,
                ..
            }
        ),
        "{lost:?}"
    );
    assert!(matches!(
        events.recv_timeout(PATIENCE).unwrap(),
        Event::SessionExpired { .. }
    ));
    // The keep-alive is still hanging: the loss did not wait for it.
    assert!(gate.hang_keep_alive.load(Ordering::SeqCst));
    assert!(!guard.is_valid());
    assert_eq!(session.state(), SessionState::Expired);
    gate.hang_keep_alive.store(false, Ordering::SeqCst);
    assert!(matches!(
        session.try_lock("other"),
        Err(Error::SessionExpired { .. })
    ));
}

#[test]
fn keep_alives_continue_while_acquires_hang() {
    let gate = Arc::new(Gate::default());
    let session = Arc::new(Session::open(gate.clone(), config()).unwrap());
    gate.hang_acquire.store(true, Ordering::SeqCst);
    let s = session.clone();
    let blocked = std::thread::spawn(move || s.try_lock("slow").map(|g| g.is_some()));
    let _candidate = session.election("slow-election").unwrap();
    let before = gate.keep_alives.load(Ordering::SeqCst);
    let end = Instant::now() + PATIENCE;
    while gate.keep_alives.load(Ordering::SeqCst) < before + 5 {
        assert!(
            Instant::now() < end,
            "keep-alives stalled behind hanging acquires"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(session.state(), SessionState::Valid);
    gate.hang_acquire.store(false, Ordering::SeqCst);
    assert!(blocked.join().unwrap().unwrap());
}

#[test]
fn a_keep_alive_failure_then_recovery_is_reported() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    let events = session.events();
    let guard = session.lock("job").unwrap();
    gate.hang_keep_alive.store(true, Ordering::SeqCst);
    assert!(matches!(
        events.recv_timeout(PATIENCE).unwrap(),
        Event::Jeopardy { .. }
    ));
    gate.hang_keep_alive.store(false, Ordering::SeqCst);
    let next = events.recv_timeout(PATIENCE).unwrap();
    // Recovery wins unless the machine stalled for most of a lease.
    if matches!(next, Event::Recovered { .. }) {
        assert!(guard.is_valid());
        session.wait_valid(PATIENCE).unwrap();
    } else {
        assert!(matches!(next, Event::LockLost { .. }), "{next:?}");
    }
}

#[test]
fn callbacks_receive_events_in_order_on_the_event_thread() {
    let backend = Arc::new(MemoryBackend::new());
    let session = Session::open(backend, config()).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let main = std::thread::current().id();
    session.on_event(move |e| {
        assert_ne!(std::thread::current().id(), main);
        tx.send(e.clone()).unwrap();
    });
    let e = session.election("ordered").unwrap();
    let term = e.wait_elected(PATIENCE).unwrap();
    e.resign().unwrap();
    session.close().unwrap();
    let got: Vec<Event> = rx.try_iter().collect();
    assert_eq!(
        got,
        vec![
            Event::Elected { term: term.clone() },
            Event::Revoked {
                term,
                reason: LossReason::Resigned
            },
            Event::Closed {
                session: session.id().clone()
            },
        ]
    );
}

/// Waits until `cond` holds, or panics with `what` after [`PATIENCE`].
fn until(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < end, "not true within {PATIENCE:?}: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn next_reopen(events: &crossbeam_channel::Receiver<Event>) {
    loop {
        let e = events.recv_timeout(PATIENCE).expect("SessionReopened");
        if matches!(e, Event::SessionReopened { .. }) {
            return;
        }
    }
}

#[test]
fn close_from_a_callback_still_delivers_the_final_events() {
    let session = Arc::new(Session::open(Arc::new(MemoryBackend::new()), config()).unwrap());
    let events = session.events();
    let guard = session.try_lock("job").unwrap().unwrap();
    let lost = guard.lost().clone();
    let slot = Arc::new(Mutex::new(Some(session.clone())));
    session.on_event(move |e| {
        if matches!(e, Event::LeaderChanged { .. }) {
            if let Some(s) = slot.lock().unwrap().take() {
                s.close().unwrap();
            }
        }
    });
    let _observer = session.observe("other").unwrap(); // its first read emits LeaderChanged
    let seen: Vec<Event> = events.iter().collect(); // ends when the receivers disconnect
    assert!(
        matches!(seen.last(), Some(Event::Closed { .. })),
        "{seen:?}"
    );
    assert!(matches!(
        lost.recv_timeout(PATIENCE),
        Ok(Event::LockLost {
            reason: LossReason::Closed,
            ..
        })
    ));
}

#[test]
fn a_join_racing_a_reopen_is_a_membership_of_the_new_session() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    let events = session.events();
    let group = session.group("workers").unwrap();
    let g = GroupName::new("workers").unwrap();
    gate.hang_after_join.store(true, Ordering::SeqCst);
    std::thread::scope(|sc| {
        let joining = sc.spawn(|| group.join());
        until("the join reached the backend", || {
            gate.joins_done.load(Ordering::SeqCst) == 1
        });
        gate.hang_keep_alive.store(true, Ordering::SeqCst);
        next_reopen(&events);
        gate.hang_keep_alive.store(false, Ordering::SeqCst);
        gate.hang_after_join.store(false, Ordering::SeqCst);
        let membership = joining.join().unwrap().expect("the join succeeded");
        until("the new session is a member", || {
            gate.inner
                .members(&g)
                .unwrap()
                .iter()
                .any(|m| m.session == session.id())
        });
        drop(membership);
    });
}

#[test]
fn a_leave_racing_a_reopen_leaves_no_member_behind() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    let events = session.events();
    let g = GroupName::new("workers").unwrap();
    let membership = session.group("workers").unwrap().join().unwrap();
    gate.hang_before_join.store(true, Ordering::SeqCst); // the reopen's re-join waits
    gate.hang_keep_alive.store(true, Ordering::SeqCst);
    next_reopen(&events);
    gate.hang_keep_alive.store(false, Ordering::SeqCst);
    until("the re-join started", || {
        gate.joins_started.load(Ordering::SeqCst) == 2
    });
    drop(membership);
    gate.hang_before_join.store(false, Ordering::SeqCst);
    until("the re-join landed", || {
        gate.joins_done.load(Ordering::SeqCst) == 2
    });
    until("nobody holds a membership, so nobody is a member", || {
        gate.inner.members(&g).unwrap().is_empty()
    });
}

#[test]
fn a_keep_alive_hanging_for_an_expired_session_does_not_starve_its_successor() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    let events = session.events();
    let old = session.id();
    *gate.hang_only.lock().unwrap() = Some(old.clone());
    gate.hang_keep_alive.store(true, Ordering::SeqCst);
    next_reopen(&events);
    assert_ne!(session.id(), old);
    // The old keep-alive still hangs; the new session is kept alive regardless.
    let before = gate.keep_alives.load(Ordering::SeqCst);
    until("the new session is kept alive", || {
        gate.keep_alives.load(Ordering::SeqCst) >= before + 10
    });
    assert!(gate.hang_keep_alive.load(Ordering::SeqCst));
    assert!(events
        .try_iter()
        .all(|e| !matches!(e, Event::SessionExpired { .. })));
    gate.hang_keep_alive.store(false, Ordering::SeqCst);
}

#[test]
fn huge_timeouts_mean_no_deadline_instead_of_a_panic() {
    let session = Session::open(Arc::new(MemoryBackend::new()), config()).unwrap();
    assert!(session.lock_timeout("x", Duration::MAX).unwrap().is_valid());
    let e = session.election("y").unwrap();
    assert_eq!(e.wait_elected(Duration::MAX).unwrap().name.as_str(), "y");
    session.wait_valid(Duration::MAX).unwrap();
    assert!(matches!(
        Config::builder().lease(Duration::MAX).build(),
        Err(Error::InvalidConfig { .. })
    ));
}
