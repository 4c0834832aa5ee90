//! The threaded engine under faults: a keep-alive that hangs, acquires that hang.

use simba_lease::backends::MemoryBackend;
use simba_lease::spi::LeaseBackend;
use simba_lease::spi::{Call, Delegate};
use simba_lease::{
    Config, Error, Event, GroupName, LeaseName, LossReason, Result, Session, SessionId,
    SessionState,
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
    /// Acquires that reached the gate.
    acquires_started: AtomicUsize,
    /// Keep-alives of this session only hang (while `hang_keep_alive` is set).
    hang_only: Mutex<Option<SessionId>>,
    /// A join waits before reaching the backend / after it joined (a slow reply).
    hang_before_join: AtomicBool,
    hang_after_join: AtomicBool,
    joins_started: AtomicUsize,
    joins_done: AtomicUsize,
    /// The next acquire / keep-alive panics (a faulty backend or driver).
    panic_acquire: AtomicBool,
    panic_keep_alive: AtomicBool,
    /// Opens fail with a configuration error (as a server granting less than the lease).
    refuse_opens: AtomicBool,
    /// Subscriptions made.
    subscribes: AtomicUsize,
    /// The threads that ran releases, leaves and session closes.
    io_threads: Mutex<Vec<(&'static str, std::thread::ThreadId)>>,
}

impl Gate {
    fn io(&self, what: &'static str) {
        let me = std::thread::current().id();
        self.io_threads.lock().unwrap().push((what, me));
    }

    fn io_done(&self, what: &str) -> Vec<std::thread::ThreadId> {
        let calls = self.io_threads.lock().unwrap();
        calls
            .iter()
            .filter(|(w, _)| *w == what)
            .map(|(_, t)| *t)
            .collect()
    }
}

fn hang_while(flag: &AtomicBool) {
    while flag.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Delegate for Gate {
    fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
        f(&self.inner)
    }
    fn call<T>(&self, call: Call<'_>, f: impl FnOnce(&dyn LeaseBackend) -> Result<T>) -> Result<T> {
        let inner: &dyn LeaseBackend = &self.inner;
        match call {
            Call::Open(_) if self.refuse_opens.load(Ordering::SeqCst) => Err(Error::config(
                "lease",
                "the server grants less than the lease",
            )),
            Call::KeepAlive { session, .. } => {
                let only = self.hang_only.lock().unwrap().clone();
                if only.is_none_or(|o| &o == session) {
                    hang_while(&self.hang_keep_alive);
                }
                self.keep_alives.fetch_add(1, Ordering::SeqCst);
                if self.panic_keep_alive.swap(false, Ordering::SeqCst) {
                    panic!("keep-alive exploded");
                }
                f(inner)
            }
            Call::Acquire { .. } | Call::AcquireWithValue { .. } => {
                self.acquires_started.fetch_add(1, Ordering::SeqCst);
                hang_while(&self.hang_acquire);
                if self.panic_acquire.swap(false, Ordering::SeqCst) {
                    panic!("acquire exploded");
                }
                f(inner)
            }
            Call::Join { .. } => {
                self.joins_started.fetch_add(1, Ordering::SeqCst);
                hang_while(&self.hang_before_join);
                let r = f(inner);
                self.joins_done.fetch_add(1, Ordering::SeqCst);
                hang_while(&self.hang_after_join);
                r
            }
            Call::CloseSession { .. } | Call::Release { .. } | Call::Leave { .. } => {
                let r = f(inner);
                self.io(match call {
                    Call::CloseSession { .. } => "close",
                    Call::Release { .. } => "release",
                    _ => "leave",
                });
                r
            }
            Call::Subscribe => {
                self.subscribes.fetch_add(1, Ordering::SeqCst);
                f(inner)
            }
            _ => f(inner),
        }
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
    // A keep-alive sent after the grant renewed the term with its session (two: the first
    // may have been sent before the grant), so the term ends with the session: under load
    // the term's own deadline could come first (`Expired`).
    let seen = gate.keep_alives.load(Ordering::SeqCst);
    until("two keep-alives after the grant", || {
        gate.keep_alives.load(Ordering::SeqCst) >= seen + 2
    });
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
    // Ten renew intervals: longer than the lease.
    while gate.keep_alives.load(Ordering::SeqCst) < before + 10 {
        assert!(
            Instant::now() < end,
            "keep-alives stalled behind hanging acquires"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(session.state(), SessionState::Valid);
    gate.hang_acquire.store(false, Ordering::SeqCst);
    // The grant arrived after its term's local deadline: not handed out (and released).
    assert!(!blocked.join().unwrap().unwrap());
    let end = Instant::now() + PATIENCE;
    while session.try_lock("slow").unwrap().is_none() {
        assert!(Instant::now() < end, "the late grant was never released");
        std::thread::sleep(Duration::from_millis(5));
    }
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
    simba_lease::tck::until(PATIENCE, what, cond);
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

#[test]
fn a_panicking_callback_does_not_stop_later_events() {
    let session = Session::open(Arc::new(MemoryBackend::new()), config()).unwrap();
    let events = session.events();
    session.on_event(|e| panic!("callback exploded on {e:?}"));
    let (tx, rx) = crossbeam_channel::unbounded();
    session.on_event(move |e| tx.send(e.clone()).unwrap());
    let e = session.election("after-a-panic").unwrap();
    let term = e.wait_elected(PATIENCE).unwrap();
    e.resign().unwrap();
    let got: Vec<Event> = (0..2).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert!(
        matches!(&got[..], [Event::Elected { .. }, Event::Revoked { term: t, .. }] if *t == term)
    );
    session.close().unwrap();
    // The event thread lived on to the end: every receiver saw Closed, then disconnects.
    let all: Vec<Event> = events.iter().collect();
    assert!(matches!(all.last(), Some(Event::Closed { .. })), "{all:?}");
}

#[test]
fn a_panicking_backend_call_is_an_error_and_the_session_lives_on() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    let events = session.events();
    gate.panic_acquire.store(true, Ordering::SeqCst);
    let r = session.try_lock("boom");
    assert!(matches!(&r, Err(Error::Backend { .. })), "{r:?}");
    assert!(r.unwrap_err().report().to_string().contains("panicked"));
    // A panic on the work thread (a candidate's attempt) and on the keep-alive thread.
    gate.panic_acquire.store(true, Ordering::SeqCst);
    gate.panic_keep_alive.store(true, Ordering::SeqCst);
    let e = session.election("boom-e").unwrap();
    e.wait_elected(PATIENCE)
        .expect("the candidate tries again after the panic");
    until("the panicking keep-alive happened", || {
        !gate.panic_keep_alive.load(Ordering::SeqCst)
    });
    let seen: Vec<Event> = std::iter::from_fn(|| events.recv_timeout(PATIENCE).ok())
        .take_while(|e| !matches!(e, Event::Recovered { .. }))
        .collect();
    assert!(
        seen.iter().any(|e| matches!(e, Event::Jeopardy { .. })),
        "{seen:?}"
    );
    assert_eq!(session.state(), SessionState::Valid);
    assert!(
        session.try_lock("boom").unwrap().is_some(),
        "acquires work again"
    );
    session.close().unwrap();
}

#[test]
fn dropping_handles_and_the_session_does_no_io_on_the_dropping_thread() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    let guard = session.try_lock("dropped").unwrap().unwrap();
    let e = session.election("dropped-e").unwrap();
    e.wait_elected(PATIENCE).unwrap();
    let membership = session.group("dropped-g").unwrap().join().unwrap();
    let me = std::thread::current().id();
    drop(guard);
    drop(e);
    drop(membership);
    // The leaves: the group's and the election's candidates group's.
    until("two releases and two leaves ran", || {
        gate.io_done("release").len() == 2 && gate.io_done("leave").len() == 2
    });
    let owner = gate
        .inner
        .owner(&LeaseName::new("dropped").unwrap())
        .unwrap();
    assert_eq!(owner, None);
    drop(session);
    until("the session was closed", || {
        gate.io_done("close").len() == 1
    });
    for (what, t) in gate.io_threads.lock().unwrap().iter() {
        assert_ne!(*t, me, "{what} ran on the dropping thread");
    }
    // unlock() and resign() still run on the caller's thread and report the result.
    let session = Session::open(gate.clone(), config()).unwrap();
    session.try_lock("kept").unwrap().unwrap().unlock().unwrap();
    assert_eq!(gate.io_done("release").last(), Some(&me));
}

#[test]
fn every_group_watch_gets_every_event_and_a_resigned_election_can_campaign_again() {
    let session = Session::open(Arc::new(MemoryBackend::new()), config()).unwrap();
    let group = session.group("watched").unwrap();
    let (a, b) = (group.watch().unwrap(), group.watch().unwrap());
    let size = |rx: &crossbeam_channel::Receiver<Event>| match rx.recv_timeout(PATIENCE) {
        Ok(Event::MembersChanged { members, .. }) => members.len(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (size(&a), size(&b)),
        (0, 0),
        "each receiver gets the first view"
    );
    let _m = group.join().unwrap();
    assert_eq!((size(&a), size(&b)), (1, 1), "each receiver gets the join");
    let e = session.election("again").unwrap();
    let t1 = e.wait_elected(PATIENCE).unwrap();
    e.resign().unwrap();
    assert!(matches!(
        e.wait_elected(PATIENCE),
        Err(Error::NotCandidate { .. })
    ));
    e.campaign().unwrap();
    let t2 = e.wait_elected(PATIENCE).unwrap();
    assert!(t2.token > t1.token);
}

#[test]
fn sessions_of_one_backend_share_one_subscription_and_a_waiter_is_woken_by_its_name() {
    let gate = Arc::new(Gate::default());
    let backend: Arc<dyn LeaseBackend> = gate.clone();
    // A long retry interval: a waiter that is not woken by the notification polls only
    // after 20 s.
    let slow = Config::builder()
        .lease(Duration::from_secs(120))
        .renew_interval(Duration::from_secs(40))
        .build()
        .unwrap();
    let sessions: Vec<Session> = (0..5)
        .map(|_| Session::open(backend.clone(), slow.clone()).unwrap())
        .collect();
    assert_eq!(gate.subscribes.load(Ordering::SeqCst), 1, "one per backend");
    let held = sessions[0].lock("routed").unwrap();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            sessions[1]
                .lock_timeout("routed", Duration::from_secs(10))
                .map(|g| g.token())
        });
        until("the waiter waits", || {
            gate.inner
                .owner(&LeaseName::new("routed").unwrap())
                .unwrap()
                .is_some()
        });
        // Releases of other names in other sessions do not disturb it.
        for i in 0..20 {
            sessions[2]
                .try_lock(format!("other-{i}"))
                .unwrap()
                .unwrap()
                .unlock()
                .unwrap();
        }
        held.unlock().unwrap();
        let token = waiter
            .join()
            .unwrap()
            .expect("woken by the release of its name");
        assert_eq!(token.get(), 2);
    });
    let _late = Session::open(backend.clone(), slow).unwrap();
    assert_eq!(gate.subscribes.load(Ordering::SeqCst), 1, "still one");
}

#[test]
fn a_reopen_that_cannot_succeed_makes_expiry_terminal() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    gate.refuse_opens.store(true, Ordering::SeqCst);
    gate.inner.close_session(&session.id()).unwrap(); // expired behind the engine's back
    until("the engine saw the expiry", || {
        session.state() == SessionState::Expired
    });
    let start = Instant::now();
    let r = session.wait_valid(PATIENCE);
    assert!(matches!(r, Err(Error::SessionExpired { .. })), "{r:?}");
    assert!(
        start.elapsed() < PATIENCE,
        "failed at once, not after the timeout"
    );
    assert!(matches!(
        session.lock_timeout("x", PATIENCE),
        Err(Error::SessionExpired { .. })
    ));
}

#[test]
fn a_value_changed_while_an_attempt_hangs_is_set_on_the_term_it_wins() {
    let gate = Arc::new(Gate::default());
    let session = Session::open(gate.clone(), config()).unwrap();
    gate.hang_acquire.store(true, Ordering::SeqCst);
    let e = session.election_with_value("valued", "v1").unwrap();
    until("the attempt (with v1) hangs", || {
        gate.acquires_started.load(Ordering::SeqCst) == 1
    });
    // Not the leader yet: the new value is kept for the term being taken.
    e.set_value("v2").unwrap();
    gate.hang_acquire.store(false, Ordering::SeqCst);
    let term = e.wait_elected(PATIENCE).unwrap();
    until("the term shows the newer value", || {
        e.leader()
            .unwrap()
            .is_some_and(|o| o.token == term.token && o.value == "v2")
    });
    assert_eq!(e.value(), "v2");
    session.close().unwrap();
}
