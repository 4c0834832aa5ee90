//! Contract cases through the engine: sessions, elections, observers, locks, groups.

use super::gate::GatedOpens;
use super::{group_name, lease_name, Harness};
use crate::engine::{Config, Event, LossReason, Session, SessionState};
use crate::spi::LeaseBackend;
use crate::{Error, Metadata};
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn next_event(h: &Harness, rx: &Receiver<Event>, what: &str) -> Event {
    rx.recv_timeout(h.patience)
        .unwrap_or_else(|_| panic!("no event within {:?}: expected {what}", h.patience))
}

/// Next event matching `pred`, skipping others (of the session-wide stream).
fn next_matching(
    h: &Harness,
    rx: &Receiver<Event>,
    what: &str,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    let end = Instant::now() + h.patience;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if pred(&e) => return e,
            Ok(_) => {}
            Err(_) => panic!("no event within {:?}: expected {what}", h.patience),
        }
    }
}

fn session(h: &Harness, b: &std::sync::Arc<dyn crate::spi::LeaseBackend>) -> Session {
    Session::open(b.clone(), h.config()).expect("open session")
}

/// Invalid names and metadata are rejected with a typed error before any I/O.
pub fn names_and_metadata_are_validated_before_io(h: &Harness) {
    let b = h.backend();
    let s = session(h, &b);
    for bad in ["", ".", "..", "a b", "x/y", "é"] {
        assert!(
            matches!(s.try_lock(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
        assert!(matches!(s.election(bad), Err(Error::InvalidName { .. })));
        assert!(matches!(s.group(bad), Err(Error::InvalidName { .. })));
        assert!(matches!(s.observe(bad), Err(Error::InvalidName { .. })));
    }
    let long = "n".repeat(129);
    assert!(matches!(
        s.try_lock(long.as_str()),
        Err(Error::InvalidName { .. })
    ));
    assert!(s.try_lock("n".repeat(128)).unwrap().is_some());
    assert!(matches!(
        Metadata::new("m".repeat(1025)),
        Err(Error::InvalidMetadata { len: 1025, .. })
    ));
    assert!(matches!(
        Config::builder().metadata("m".repeat(1025)).build(),
        Err(Error::InvalidMetadata { .. })
    ));
    assert!(Metadata::new("é".repeat(512)).is_ok());
    s.close().unwrap();
}

/// A crashed leader (session dropped without close) is replaced once its lease runs out.
pub fn election_failover_after_crash(h: &Harness) {
    let b = h.backend();
    let (a, c) = (session(h, &b), session(h, &b));
    let name = lease_name("failover");
    let ea = a.election(&name).unwrap();
    let ta = ea.wait_elected(h.patience).expect("a elected");
    let ec = c.election(&name).unwrap();
    assert!(!ec.is_leader());
    // A crash: no resign, no close; the lease stays held until a's session expires.
    std::mem::forget(ea);
    a.abandon();
    let tc = ec
        .wait_elected(h.patience + h.lease * 2)
        .expect("c takes over");
    assert!(tc.token > ta.token, "{} after {}", tc.token, ta.token);
    c.close().unwrap();
}

/// A leader that resigns is revoked (`Resigned`) and another candidate is elected.
pub fn resign_elects_another_candidate(h: &Harness) {
    let b = h.backend();
    let (a, c) = (session(h, &b), session(h, &b));
    let name = lease_name("resign");
    let ea = a.election(&name).unwrap();
    let ta = ea.wait_elected(h.patience).unwrap();
    let ec = c.election(&name).unwrap();
    ea.resign().unwrap();
    assert_eq!(
        next_event(h, ea.events(), "Elected"),
        Event::Elected { term: ta.clone() }
    );
    match next_event(h, ea.events(), "Revoked") {
        Event::Revoked { term, reason } => {
            assert_eq!((term.token, reason), (ta.token, LossReason::Resigned))
        }
        e => panic!("expected Revoked, got {e:?}"),
    }
    assert!(!ea.is_leader());
    let tc = ec.wait_elected(h.patience).unwrap();
    assert!(tc.token > ta.token);
    a.close().unwrap();
    c.close().unwrap();
}

/// An observer that is not a candidate sees every leader with its token.
pub fn observe_reports_leader_changes_with_tokens(h: &Harness) {
    let b = h.backend();
    let (a, c, o) = (session(h, &b), session(h, &b), session(h, &b));
    let name = lease_name("observe");
    let obs = o.observe(&name).unwrap();
    let leader_is = |what: &str, expect: Option<(&crate::SessionId, crate::Token)>| {
        next_matching(h, obs.events(), what, |e| match e {
            Event::LeaderChanged { owner, .. } => {
                owner.as_ref().map(|o| (&o.session, o.token)) == expect
            }
            _ => false,
        });
    };
    leader_is("no leader", None);
    let ea = a.election(&name).unwrap();
    let ta = ea.wait_elected(h.patience).unwrap();
    leader_is("a leads", Some((&a.id(), ta.token)));
    let ec = c.election(&name).unwrap();
    ea.resign().unwrap();
    let tc = ec.wait_elected(h.patience).unwrap();
    leader_is("c leads", Some((&c.id(), tc.token)));
    assert!(tc.token > ta.token);
    assert_eq!(obs.leader().unwrap().map(|o| o.token), Some(tc.token));
}

/// Dropping a lock guard releases the lock.
pub fn lock_guard_drop_releases(h: &Harness) {
    let b = h.backend();
    let (a, c) = (session(h, &b), session(h, &b));
    let name = lease_name("lock");
    let g = a.try_lock(&name).unwrap().expect("free");
    assert!(g.is_valid());
    assert_eq!(g.check().unwrap(), g.token());
    assert!(c.try_lock(&name).unwrap().is_none());
    let t1 = g.token();
    drop(g); // ends the term at once; the release runs on a's work thread
    let mut g2 = None;
    h.until_ok("released on drop", || {
        g2 = c.try_lock(&name)?;
        Ok(g2.is_some())
    });
    let g2 = g2.unwrap();
    assert!(g2.token() > t1);
    g2.unlock().unwrap();
    assert_eq!(b.owner(&name).unwrap(), None);
}

/// Threads sharing one session exclude each other; locks are not reentrant.
pub fn lock_excludes_threads_of_one_session(h: &Harness) {
    let b = h.backend();
    let s = session(h, &b);
    let name = lease_name("local");
    let g = s.lock(&name).unwrap();
    let short = Duration::from_millis(50);
    // Another thread of the session waits and times out.
    std::thread::scope(|scope| {
        let other = scope.spawn(|| s.lock_timeout(&name, short).map(drop));
        assert!(matches!(other.join().unwrap(), Err(Error::Timeout { .. })));
    });
    assert!(s.try_lock(&name).unwrap().is_none());
    assert!(matches!(s.election(&name), Err(Error::AlreadyHeld { .. })));
    let (patience, name2) = (h.patience, name.clone());
    let s = &s;
    std::thread::scope(|scope| {
        let waiter = scope.spawn(move || s.lock_timeout(&name2, patience).map(|g| g.token()));
        drop(g);
        let t = waiter
            .join()
            .unwrap()
            .expect("the waiting thread gets the lock");
        assert!(t.get() >= 1);
    });
}

/// Threads on several sessions take one lock in turns: never two inside at once, and every
/// critical section sees a greater token than the one before.
pub fn locks_exclude_across_sessions_with_increasing_tokens(h: &Harness) {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let b = h.backend();
    let sessions: Vec<Session> = (0..3).map(|_| session(h, &b)).collect();
    let name = lease_name("mutex");
    let inside = AtomicUsize::new(0);
    let last = Mutex::new(0u64);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for s in &sessions {
            for _ in 0..2 {
                let (name, inside, last, rounds) = (&name, &inside, &last, &rounds);
                let patience = h.patience;
                scope.spawn(move || {
                    for _ in 0..5 {
                        let g = s.lock_timeout(name, patience).expect("lock");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                        let mut l = last.lock().unwrap();
                        assert!(g.token().get() > *l, "token {} after {}", g.token(), *l);
                        *l = g.token().get();
                        drop(l);
                        assert!(g.is_valid());
                        inside.fetch_sub(1, Ordering::SeqCst);
                        rounds.fetch_add(1, Ordering::SeqCst);
                        drop(g);
                    }
                });
            }
        }
    });
    assert_eq!(rounds.load(Ordering::SeqCst), 30);
}

/// A blocked `lock` takes over as soon as the holder releases.
pub fn lock_waiter_takes_over_after_release(h: &Harness) {
    let gate = Arc::new(GatedOpens::new(h.backend(), h.patience));
    let b: Arc<dyn LeaseBackend> = gate.clone();
    let (a, c) = (session(h, &b), session(h, &b));
    let name = lease_name("handover");
    let g = a.lock(&name).unwrap();
    let t1 = g.token();
    let before = gate.acquires.left();
    let patience = h.patience;
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| c.lock_timeout(&name, patience).map(|g| g.token()));
        h.until("the waiter found the name held", || {
            gate.acquires.left() > before
        });
        drop(g);
        let t2 = waiter.join().unwrap().expect("waiter gets the lock");
        assert!(t2 > t1);
    });
}

/// A release wakes a waiter of another session of this process at once, on every backend
/// (whether or not it pushes releases): the waiter takes over before its next retry is due.
pub fn a_release_wakes_a_waiter_of_this_process_before_its_retry(h: &Harness) {
    let gate = Arc::new(GatedOpens::new(h.backend(), h.patience));
    let b: Arc<dyn LeaseBackend> = gate.clone();
    let lease = h.long_lease();
    let config = Config::builder()
        .lease(lease)
        .renew_interval(lease / 3)
        .build()
        .unwrap();
    // Shorter than the first retry (the retry interval plus jitter): only a wake-up gets in.
    let patience = config.retry_interval() * 4 / 5;
    let a = Session::open(b.clone(), config.clone()).unwrap();
    let c = Session::open(b, config).unwrap();
    let name = lease_name("woken");
    let g = a.lock(&name).unwrap();
    let t1 = g.token();
    let before = gate.acquires.left();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| c.lock_timeout(&name, patience).map(|g| g.token()));
        h.until("the waiter found the name held", || {
            gate.acquires.left() > before
        });
        g.unlock().unwrap();
        let t2 = waiter
            .join()
            .unwrap()
            .expect("the release wakes the waiter before its retry");
        assert!(t2 > t1);
    });
}

/// When the backend expires the session, every loss is reported, in order, and the session
/// is never revived (with `reopen_on_expiry(false)`).
pub fn session_expiry_is_reported_in_order(h: &Harness) {
    let b = h.backend();
    let s = Session::open(b.clone(), h.terminal_config()).unwrap();
    let events = s.events();
    let name = lease_name("expiry");
    let guard = s.lock(&name).unwrap();
    let e = s.election(lease_name("expiry-e")).unwrap();
    let term = e.wait_elected(h.patience).unwrap();
    // Delete the session behind the engine's back: its next keep-alive finds it expired.
    b.close_session(&s.id()).unwrap();
    let lost = next_event(h, guard.lost(), "LockLost");
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
    let mut seen = Vec::new();
    loop {
        let ev = next_event(h, &events, "SessionExpired");
        let last = matches!(ev, Event::SessionExpired { .. });
        seen.push(ev);
        if last {
            break;
        }
    }
    assert!(seen.iter().any(|e| matches!(e, Event::Revoked { term: t, reason: LossReason::SessionExpired } if t.token == term.token)), "{seen:?}");
    assert!(seen.iter().any(|e| matches!(e, Event::LockLost { .. })));
    assert!(!guard.is_valid());
    assert!(matches!(guard.check(), Err(Error::LeaseLost { .. })));
    assert!(matches!(e.check(), Err(Error::NotLeader { .. })));
    assert_eq!(s.state(), SessionState::Expired);
    assert!(matches!(
        s.try_lock("other"),
        Err(Error::SessionExpired { .. })
    ));
    assert!(matches!(
        s.election("other"),
        Err(Error::SessionExpired { .. })
    ));
    drop(guard);
    drop(e);
    s.close().unwrap();
}

/// By default an expired session opens a new backend session and re-enters its elections
/// and groups; its locks stay lost.
pub fn expired_session_reopens_and_reenters_elections_and_groups(h: &Harness) {
    let b = h.backend();
    let s = session(h, &b);
    let events = s.events();
    let old = s.id();
    let e = s.election(lease_name("reopen-e")).unwrap();
    let t1 = e.wait_elected(h.patience).unwrap();
    let group = s.group(group_name("reopen-g")).unwrap();
    let _membership = group.join().unwrap();
    let guard = s.lock(lease_name("reopen-l")).unwrap();
    b.close_session(&old).unwrap();
    let new = match next_matching(h, &events, "SessionReopened", |e| {
        matches!(e, Event::SessionReopened { .. })
    }) {
        Event::SessionReopened { old: o, new } => {
            assert_eq!(o, old);
            new
        }
        _ => unreachable!(),
    };
    assert_ne!(new, old);
    assert_eq!(s.id(), new);
    assert!(
        !guard.is_valid(),
        "a lock of the expired session stays lost"
    );
    let t2 = e
        .wait_elected(h.patience)
        .expect("re-elected on the new session");
    assert!(t2.token > t1.token);
    assert_eq!(
        b.owner(&t2.name).unwrap().map(|o| o.session),
        Some(new.clone())
    );
    h.until_ok("the new session is a member", || {
        Ok(group.members()?.iter().map(|m| &m.session).eq([&new]))
    });
    let g2 = s
        .try_lock(lease_name("reopen-l2"))
        .unwrap()
        .expect("locks work again");
    assert!(g2.is_valid());
}

/// `close` ends every term (`Closed`), emits `Closed` last, frees the backend's leases, and
/// is idempotent.
pub fn close_ends_terms_in_order_and_is_idempotent(h: &Harness) {
    let b = h.backend();
    let s = session(h, &b);
    let events = s.events();
    let name = lease_name("close-e");
    let e = s.election(&name).unwrap();
    let term = e.wait_elected(h.patience).unwrap();
    s.close().unwrap();
    s.close().unwrap();
    let got: Vec<Event> = events.try_iter().collect();
    assert_eq!(
        got,
        vec![
            Event::Elected { term: term.clone() },
            Event::Revoked {
                term,
                reason: LossReason::Closed
            },
            Event::Closed { session: s.id() },
        ]
    );
    assert_eq!(b.owner(&name).unwrap(), None);
    assert_eq!(s.state(), SessionState::Closed);
    assert!(matches!(s.try_lock(&name), Err(Error::Closed)));
}

/// A group watch reports the current members, then joins and leaves.
pub fn group_watch_reports_changes(h: &Harness) {
    let b = h.backend();
    let (a, c) = (session(h, &b), session(h, &b));
    let name = group_name("watch");
    let ga = a.group(&name).unwrap();
    let watch = ga.watch().unwrap();
    let members_are = |what: &str, n: usize| {
        next_matching(
            h,
            &watch,
            what,
            |e| matches!(e, Event::MembersChanged { members, .. } if members.len() == n),
        )
    };
    members_are("empty", 0);
    let _ma = ga.join().unwrap();
    members_are("a joined", 1);
    let gc = c.group(&name).unwrap();
    let mc = gc.join().unwrap();
    match members_are("c joined", 2) {
        Event::MembersChanged { joined, .. } => assert_eq!(joined[0].session, c.id()),
        _ => unreachable!(),
    }
    drop(mc);
    match members_are("c left", 1) {
        Event::MembersChanged { left, .. } => assert_eq!(left[0].session, c.id()),
        _ => unreachable!(),
    }
}

/// A term lost on the backend before the engine noticed: `unlock()` and `resign()` say so
/// with [`Error::LeaseLost`], and each loss is reported exactly once.
pub fn unlock_or_resign_of_a_lost_term_says_so_and_reports_it_once(h: &Harness) {
    let b = h.backend();
    let s = Session::open(b.clone(), h.terminal_config()).unwrap();
    let events = s.events();
    let guard = s.lock(lease_name("lost-l")).unwrap();
    let lock_token = guard.token();
    let e = s.election(lease_name("lost-e")).unwrap();
    let term = e.wait_elected(h.patience).unwrap();
    // Delete the session behind the engine's back: whether or not its keep-alive has
    // noticed yet, both terms are gone.
    b.close_session(&s.id()).unwrap();
    let r = guard.unlock();
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "unlock: {r:?}");
    let r = e.resign();
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "resign: {r:?}");
    s.close().unwrap(); // waits until every event was delivered
    let seen: Vec<Event> = events.try_iter().collect();
    let lock_losses: Vec<&LossReason> = seen
        .iter()
        .filter_map(|e| match e {
            Event::LockLost { term, reason } if term.token == lock_token => Some(reason),
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            lock_losses[..],
            [LossReason::Missing | LossReason::SessionExpired]
        ),
        "{seen:?}"
    );
    let revoked = seen
        .iter()
        .filter(|e| matches!(e, Event::Revoked { term: t, .. } if t.token == term.token))
        .count();
    assert_eq!(revoked, 1, "{seen:?}");
}

/// While an expired session is being reopened, `election()` joins the new session and
/// `lock_timeout()` waits for it, instead of failing with `SessionExpired`.
pub fn lock_and_election_wait_for_the_reopened_session(h: &Harness) {
    let gate = Arc::new(GatedOpens::new(h.backend(), h.patience));
    let b: Arc<dyn LeaseBackend> = gate.clone();
    let s = session(h, &b);
    let old = s.id();
    gate.hold();
    b.close_session(&old).unwrap();
    h.until("the engine saw the expiry", || {
        s.state() == SessionState::Expired
    });
    let e = s
        .election(lease_name("reopen-wait-e"))
        .expect("a candidate joins the session being reopened");
    let name = lease_name("reopen-wait-l");
    let (calling_tx, calling_rx) = crossbeam_channel::bounded::<()>(1);
    let opener = std::thread::spawn({
        let gate = gate.clone();
        move || {
            let _ = calling_rx.recv();
            gate.pass();
        }
    });
    calling_tx.send(()).unwrap();
    let guard = s
        .lock_timeout(&name, h.patience)
        .expect("the lock waits for the reopened session");
    opener.join().unwrap();
    assert_ne!(s.id(), old);
    assert!(guard.is_valid());
    assert_eq!(b.owner(&name).unwrap().map(|o| o.session), Some(s.id()));
    let term = e
        .wait_elected(h.patience)
        .expect("elected on the new session");
    assert_eq!(
        b.owner(&term.name).unwrap().map(|o| o.session),
        Some(s.id())
    );
}

/// Where the backend pushes notifications, an observer reports every term, even one that
/// ends long before its next poll (a new term is notified, not only a release).
pub fn observer_sees_short_terms_where_the_backend_pushes(h: &Harness) {
    let b = h.backend();
    if b.subscribe(Arc::new(|_: &crate::spi::Notification| {}))
        .unwrap()
        .is_none()
    {
        log::info!(
            "{} polls: observers see terms that outlast a poll",
            b.kind()
        );
        return;
    }
    // The observer polls every 15 s; each term below is seen long before that, or never.
    let slow = Config::builder()
        .lease(Duration::from_secs(90))
        .renew_interval(Duration::from_secs(30))
        .build()
        .unwrap();
    let o = Session::open(b.clone(), slow).unwrap();
    let holder = session(h, &b);
    let name = lease_name("short");
    let obs = o.observe(&name).unwrap();
    let bound = Duration::from_secs(10);
    let sees = |what: &str, token: Option<crate::Token>| {
        let end = Instant::now() + bound;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match obs.events().recv_timeout(left) {
                Ok(Event::LeaderChanged { owner, .. })
                    if owner.as_ref().map(|o| o.token) == token =>
                {
                    return
                }
                Ok(_) => {}
                Err(_) => panic!("the observer did not see {what} within {bound:?}"),
            }
        }
    };
    sees("no holder", None);
    for round in 0..3 {
        let g = holder.try_lock(&name).unwrap().expect("free");
        sees(&format!("term {round}"), Some(g.token()));
        g.unlock().unwrap();
        sees(&format!("the release of term {round}"), None);
    }
}

/// After a voluntary resign, the same session's next candidate waits two retry intervals,
/// so another session's candidate (which may only poll, every interval plus jitter) takes
/// the next term.
pub fn a_resigning_leader_lets_another_session_take_the_next_term(h: &Harness) {
    let b = h.backend();
    // Retry interval = lease: the margin (half an interval) dwarfs scheduling delays.
    let config = Config::builder()
        .lease(h.lease * 10)
        .renew_interval(h.lease * 2)
        .build()
        .unwrap();
    let a = Session::open(b.clone(), config.clone()).unwrap();
    let c = Session::open(b.clone(), config).unwrap();
    let name = lease_name("turns");
    let ea = a.election(&name).unwrap();
    ea.wait_elected(h.patience).unwrap();
    let ec = c.election(&name).unwrap();
    ea.resign().unwrap();
    let ea = a.election(&name).unwrap(); // competes again at once
    let tc = ec
        .wait_elected(h.patience)
        .expect("the other session's candidate");
    assert_eq!(b.owner(&name).unwrap().map(|o| o.token), Some(tc.token));
    assert!(!ea.is_leader());
    drop(ec);
    ea.wait_elected(h.patience).expect("a's turn again");
}

/// A [`Cancel`](crate::Cancel) ends a `lock_cancellable` waiting behind another session's
/// lock and a `wait_elected_cancellable` behind another leader, from another thread, with
/// `Error::Cancelled` well before the patience bound; the waiter holds nothing afterwards and
/// the candidate still campaigns (it takes over once the leader resigns).
pub fn cancel_ends_lock_and_election_waits_promptly(h: &Harness) {
    use crate::Cancel;
    let b = h.backend();
    let (a, w) = (session(h, &b), session(h, &b));
    let name = lease_name("cancel-lock");
    let held = a.lock(&name).unwrap();
    let elect = lease_name("cancel-elect");
    let leader = a.election(&elect).unwrap();
    leader.wait_elected(h.patience).unwrap();
    let candidate = w.election(&elect).unwrap();
    let patience = h.patience;
    for wait in 0..3 {
        let cancel = Cancel::new();
        let start = std::time::Instant::now();
        let r = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| match wait {
                0 => w.lock_cancellable(&name, None, &cancel).map(drop),
                1 => w
                    .lock_cancellable(&name, Some(patience * 10), &cancel)
                    .map(drop),
                _ => candidate.wait_elected_cancellable(None, &cancel).map(drop),
            });
            // Give the waiter time to block (arranging, not asserting): it must still be
            // waiting, since nothing else ends its wait.
            std::thread::sleep(Duration::from_millis(100));
            assert!(!waiter.is_finished(), "wait {wait} ended before the cancel");
            cancel.cancel();
            waiter.join().unwrap()
        });
        assert!(
            matches!(r, Err(Error::Cancelled { .. })),
            "wait {wait}: {r:?}"
        );
        assert!(
            start.elapsed() < h.patience,
            "wait {wait} ended {:?} after it began",
            start.elapsed()
        );
    }
    // A cancelled token ends the next wait at once.
    let cancelled = Cancel::new();
    cancelled.cancel();
    assert!(matches!(
        w.lock_cancellable(&name, None, &cancelled),
        Err(Error::Cancelled { .. })
    ));
    // The cancelled waiter took nothing; the candidate is still in the race.
    assert_eq!(b.owner(&name).unwrap().map(|o| o.session), Some(a.id()));
    drop(held);
    let g = w
        .lock_cancellable(&name, Some(h.patience), &Cancel::new())
        .expect("the lock once it is free");
    drop(g);
    leader.resign().unwrap();
    candidate
        .wait_elected_cancellable(Some(h.patience), &Cancel::new())
        .expect("the candidate takes over after the resign");
}

/// `lock` and `lock_timeout` of a name the calling thread holds through the session fail
/// with `AlreadyHeld` at once (they used to wait for themselves); `try_lock` answers `None`;
/// another thread still waits; after the unlock the thread locks it again.
pub fn locking_a_name_this_thread_holds_fails_instead_of_waiting(h: &Harness) {
    let b = h.backend();
    let s = session(h, &b);
    let name = lease_name("reentrant");
    let g = s.lock(&name).unwrap();
    assert!(matches!(s.lock(&name), Err(Error::AlreadyHeld { .. })));
    assert!(matches!(
        s.lock_timeout(&name, h.patience),
        Err(Error::AlreadyHeld { .. })
    ));
    assert!(matches!(
        s.lock_cancellable(&name, None, &crate::Cancel::new()),
        Err(Error::AlreadyHeld { .. })
    ));
    assert!(s.try_lock(&name).unwrap().is_none());
    let token = g.token();
    g.unlock().unwrap();
    let again = s.lock(&name).unwrap();
    assert!(again.token() > token);
}
