//! Contract cases for event delivery and for what blocking calls hand out: channels never
//! wait for callbacks, one `Elected` per term, only valid terms, timeouts that keep their
//! cause.

use super::gate::GatedOpens;
use super::{lease_name, Harness};
use crate::engine::{Event, LossReason, Session};
use crate::spi::LeaseBackend;
use crate::Error;
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn gated(h: &Harness) -> (Arc<GatedOpens>, Arc<dyn LeaseBackend>) {
    let gate = Arc::new(GatedOpens::new(h.backend(), h.patience));
    let b: Arc<dyn LeaseBackend> = gate.clone();
    (gate, b)
}

fn next(h: &Harness, rx: &Receiver<Event>, what: &str) -> Event {
    rx.recv_timeout(h.patience)
        .unwrap_or_else(|_| panic!("no event within {:?}: expected {what}", h.patience))
}

/// A callback that forwards every event to a channel.
fn forward(tx: Sender<Event>) -> impl FnMut(&Event) + Send + 'static {
    move |e| {
        let _ = tx.send(e.clone());
    }
}

/// A session callback blocked on an event (as one making a backend call while the backend
/// hangs) holds back neither the channels nor the other callbacks: the loss of a term
/// reaches them at once, and the blocked callback gets every event later, in order.
pub fn a_blocking_callback_holds_back_no_channel_or_other_callback(h: &Harness) {
    let (gate, b) = gated(h);
    let s = Session::open(b, h.terminal_config()).unwrap();
    let (unblock_tx, unblock_rx) = crossbeam_channel::bounded::<()>(1);
    let (blocked_tx, blocked_rx) = crossbeam_channel::unbounded::<Event>();
    let patience = h.patience;
    let mut first = true;
    s.on_event(move |e| {
        if std::mem::take(&mut first) {
            let _ = unblock_rx.recv_timeout(patience * 2);
        }
        let _ = blocked_tx.send(e.clone());
    });
    let (other_tx, other_rx) = crossbeam_channel::unbounded();
    let e = s
        .election_with(lease_name("blocked-cb"), forward(other_tx))
        .unwrap();
    let term = e.wait_elected(h.patience).unwrap();
    let elected = next(h, e.events(), "Elected on the channel, callback blocked");
    assert_eq!(elected, Event::Elected { term: term.clone() });
    assert_eq!(next(h, &other_rx, "Elected on the other callback"), elected);
    // The backend hangs: the session's deadline passes.
    gate.keep_alives.hold();
    let revoked = next(h, e.events(), "Revoked on the channel, callback blocked");
    assert!(
        matches!(&revoked, Event::Revoked { term: t, reason: LossReason::SessionExpired | LossReason::Expired } if t.token == term.token),
        "{revoked:?}"
    );
    assert_eq!(next(h, &other_rx, "Revoked on the other callback"), revoked);
    assert!(
        blocked_rx.try_recv().is_err(),
        "the blocked callback returned"
    );
    // Unblocked, the callback gets its events in order.
    unblock_tx.send(()).unwrap();
    assert_eq!(
        next(h, &blocked_rx, "the blocked callback's first"),
        elected
    );
    let mut rest = Vec::new();
    while !rest.contains(&revoked) {
        rest.push(next(h, &blocked_rx, "Revoked on the unblocked callback"));
    }
    gate.keep_alives.pass();
    s.close().unwrap();
}

/// An acquire whose reply arrives after its term's local deadline (slower than the lease)
/// hands out nothing: `wait_elected` returns only a term valid when it returns, and that
/// term is the one `Elected` announced first.
pub fn wait_elected_hands_out_only_a_valid_term(h: &Harness) {
    let (gate, b) = gated(h);
    let s = Session::open(b, h.config()).unwrap();
    gate.acquires.hold();
    let e = s.election(lease_name("late-grant")).unwrap();
    h.until("the candidate's acquire is in flight", || {
        gate.acquires.entered() >= 1
    });
    let entered = Instant::now();
    h.until("the acquire in flight outlived the lease", || {
        Instant::now() > entered + h.lease + h.lease / 10
    });
    let waiter = {
        let e = &e;
        let patience = h.patience;
        std::thread::scope(|scope| {
            let w = scope.spawn(move || {
                let t = e.wait_elected(patience);
                (t, e.valid_term())
            });
            gate.acquires.pass();
            w.join().unwrap()
        })
    };
    let (term, valid) = waiter;
    let term = term.unwrap();
    let valid = valid.map(|(t, _)| t.token);
    assert_eq!(valid, Some(term.token), "wait_elected handed out {term:?}");
    match next(h, e.events(), "Elected") {
        Event::Elected { term: t } => assert_eq!(t.token, term.token, "an expired term first"),
        other => panic!("expected Elected, got {other:?}"),
    }
    e.resign().unwrap();
    s.close().unwrap();
}

/// `resign()` then `campaign()` while the candidate's acquire is in flight: the second
/// attempt gets the term the first one won, and `Elected` is announced once.
pub fn one_elected_per_term_across_resign_and_campaign(h: &Harness) {
    let (gate, b) = gated(h);
    let s = Session::open(b, h.config()).unwrap();
    gate.acquires.hold();
    let e = s.election(lease_name("once")).unwrap();
    h.until("the first acquire is in flight", || {
        gate.acquires.entered() >= 1
    });
    e.resign().unwrap();
    e.campaign().unwrap();
    // A tick after `campaign` (the one sending a keep-alive) starts the second attempt.
    let ticks = gate.keep_alives.entered();
    h.until("a tick after campaign", || {
        gate.keep_alives.entered() > ticks
    });
    gate.acquires.pass();
    let term = e.wait_elected(h.patience).unwrap();
    h.until("both attempts returned", || gate.acquires.left() >= 2);
    let ticks = gate.keep_alives.left();
    h.until("two keep-alives after the second reply", || {
        gate.keep_alives.left() >= ticks + 2
    });
    assert_eq!(e.term().map(|t| t.token), Some(term.token));
    e.resign().unwrap();
    let mut seen = Vec::new();
    loop {
        let ev = next(h, e.events(), "Revoked after resign");
        let revoked = matches!(ev, Event::Revoked { .. });
        seen.push(ev);
        if revoked {
            break;
        }
    }
    let elected = seen
        .iter()
        .filter(|ev| matches!(ev, Event::Elected { .. }))
        .count();
    assert_eq!(elected, 1, "{seen:?}");
    s.close().unwrap();
}

/// `resign()` and `unlock()` return once their final event reached the callbacks (as
/// `close()` does), even a slow callback.
pub fn resign_and_unlock_return_after_their_event_reached_the_callbacks(h: &Harness) {
    let b = h.backend();
    let s = Session::open(b.clone(), h.terminal_config()).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded::<Event>();
    let slow = |tx: Sender<Event>| {
        move |e: &Event| {
            if matches!(
                e,
                Event::Revoked { .. } | Event::LockLost { .. } | Event::SessionExpired { .. }
            ) {
                // A callback with work to do.
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = tx.send(e.clone());
        }
    };
    let e = s
        .election_with(lease_name("resign-cb"), slow(tx.clone()))
        .unwrap();
    let term = e.wait_elected(h.patience).unwrap();
    e.resign().unwrap();
    let seen: Vec<Event> = rx.try_iter().collect();
    assert!(
        seen.contains(&Event::Revoked {
            term,
            reason: LossReason::Resigned
        }),
        "resign returned before its callback ran: {seen:?}"
    );
    s.on_event(slow(tx));
    let guard = s.lock(lease_name("unlock-cb")).unwrap();
    // The term disappears behind the engine's back: unlock finds it gone.
    b.close_session(&s.id()).unwrap();
    assert!(matches!(guard.unlock(), Err(Error::LeaseLost { .. })));
    // Its final event is the term's `LockLost`, or, when a keep-alive found the session gone
    // while the release was in flight, the `SessionExpired` that ends every term (nothing
    // follows it): either has reached the (slow) callback when unlock returns.
    let seen: Vec<Event> = rx.try_iter().collect();
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::LockLost { .. } | Event::SessionExpired { .. })),
        "unlock returned before its final event reached the callback: {seen:?}"
    );
    s.close().unwrap();
}

/// A lock or permit wait that ends while every acquire failed keeps the last failure as the
/// source of its `Timeout`, as `try_lock` would have returned it.
pub fn a_timeout_after_failed_acquires_keeps_the_last_failure(h: &Harness) {
    let (gate, b) = gated(h);
    let s = Session::open(b.clone(), h.config()).unwrap();
    gate.fail_acquires
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let name = lease_name("failing");
    let tried = s.try_lock(name.clone());
    assert!(matches!(tried, Err(Error::Backend { .. })), "{tried:?}");
    let cause = |r: Error| match r {
        Error::Timeout {
            source: Some(source),
            ..
        } => source.to_string(),
        other => panic!("expected a Timeout with a source, got {other:?}"),
    };
    let r = s.lock_timeout(name, h.lease).unwrap_err();
    let text = cause(r);
    assert!(text.contains("injected"), "{text}");
    let sem = s.semaphore(lease_name("failing-sem"), 2).unwrap();
    let text = cause(sem.acquire_timeout(h.lease).unwrap_err());
    assert!(text.contains("injected"), "{text}");
    gate.fail_acquires
        .store(false, std::sync::atomic::Ordering::SeqCst);
    // Acquires work again: a timeout that found the lock held has no source.
    let name = lease_name("held");
    let guard = s.lock(name.clone()).unwrap();
    let other = Session::open(b, h.config()).unwrap();
    match other.lock_timeout(name, h.lease / 2) {
        Err(Error::Timeout { source: None, .. }) => {}
        r => panic!("expected a Timeout without a source, got {r:?}"),
    }
    drop(guard);
    other.close().unwrap();
    s.close().unwrap();
}

/// A backend that lost its data (here: replaced by an empty one, as a server restarted
/// without persistence) grants tokens again from the start: a grant whose token does not
/// exceed one this process saw for the name is reported (`TokenRegressed`), never adopted
/// silently; a grant above it is not.
pub fn a_token_not_above_one_seen_before_is_reported(h: &Harness) {
    let (gate, b) = gated(h);
    let s = Session::open(b, h.config()).unwrap();
    let events = s.events();
    let name = lease_name("regress");
    let mut before = None;
    for _ in 0..3 {
        let g = s.lock(name.clone()).unwrap();
        before = Some(g.token());
        g.unlock().unwrap();
    }
    let before = before.unwrap();
    gate.replace(h.backend());
    // Its sessions are gone too: the session expires and is reopened on the empty backend.
    let after = s.lock_timeout(name.clone(), h.patience).unwrap();
    let regressed = after.token() <= before;
    s.close().unwrap();
    let reports: Vec<Event> = events
        .try_iter()
        .filter(|e| matches!(e, Event::TokenRegressed { .. }))
        .collect();
    if regressed {
        assert_eq!(
            reports,
            vec![Event::TokenRegressed {
                term: after.term().clone(),
                seen: before
            }]
        );
    } else {
        assert!(
            reports.is_empty(),
            "token {} after {before}: {reports:?}",
            after.token()
        );
    }
}
