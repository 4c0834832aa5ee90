//! Contract cases of fair locks (waiting queues), on the backend and through the engine.
//! A backend without queues must refuse them with `Error::Unsupported`, before any wait.

use super::{lease_name, Harness};
use crate::engine::{Config, Session};
use crate::spi::{Acquire, LeaseBackend, Queued};
use crate::Error;
use std::sync::Arc;
use std::time::Duration;

/// A session config with fair locks and five times the harness's lease: the order cases
/// run several seconds with many sessions, and a session that expired and reopened would
/// queue again at the back (correctly, but not what these cases check).
fn fair_config(h: &Harness) -> Config {
    Config::builder()
        .lease(h.lease * 5)
        .renew_interval(h.lease)
        .fair_locks(true)
        .build()
        .expect("valid TCK config")
}

/// On a backend without queues: every queue call and a fair session are refused with
/// `Unsupported`. Returns whether the backend has queues.
fn queues_or_refused(h: &Harness, b: &Arc<dyn LeaseBackend>) -> bool {
    if b.supports_queues() {
        return true;
    }
    let s = h.open(&**b, h.long_lease());
    let name = lease_name("fair-none");
    let unsupported = |r: Result<(), Error>| matches!(r, Err(Error::Unsupported { .. }));
    assert!(unsupported(b.acquire_queued(&s, &name, h.lease).map(drop)));
    assert!(unsupported(b.leave_queue(&s, &name).map(drop)));
    assert!(unsupported(b.queue(&name).map(drop)));
    assert!(unsupported(
        Session::open(b.clone(), fair_config(h)).map(drop)
    ));
    b.close_session(&s).unwrap();
    false
}

/// Places are kept in arrival order; only the first live place takes the lease, and taking
/// it removes the place; a holder asking again gets its own term; a place whose patience
/// ran out is skipped; leaving is idempotent; a gone session is refused.
pub fn queued_acquires_take_the_lease_in_arrival_order(h: &Harness) {
    let b = h.backend();
    if !queues_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    let holder = h.open(&*b, long);
    let [s1, s2, s3] = [(); 3].map(|_| h.open(&*b, long));
    let name = lease_name("fair");
    let first = match b.acquire_queued(&holder, &name, long).unwrap() {
        Queued::Acquired(t) => t,
        other => panic!("an empty queue and a free lease: {other:?}"),
    };
    assert!(
        b.queue(&name).unwrap().is_empty(),
        "the taker keeps no place"
    );
    for (i, s) in [&s1, &s2, &s3].into_iter().enumerate() {
        match b.acquire_queued(s, &name, long).unwrap() {
            Queued::Waiting { ahead, owner } => {
                assert_eq!(ahead, i, "places ahead of waiter {i}");
                assert_eq!(owner.map(|o| o.session), Some(holder.clone()));
            }
            other => panic!("waiter {i} behind a holder: {other:?}"),
        }
    }
    assert_eq!(
        b.queue(&name).unwrap(),
        vec![s1.clone(), s2.clone(), s3.clone()]
    );
    // Asking again keeps the place (no new place at the back).
    assert!(matches!(
        b.acquire_queued(&s1, &name, long).unwrap(),
        Queued::Waiting { ahead: 0, .. }
    ));
    // The holder asking in turn gets its own term back.
    assert!(matches!(
        b.acquire_queued(&holder, &name, long).unwrap(),
        Queued::Acquired(t) if t.token == first.token
    ));
    assert!(b.release(&holder, &name, first.token).unwrap());
    // Free, but s1 is first: s2 and a plain-queued newcomer wait, s1 takes it.
    assert!(matches!(
        b.acquire_queued(&s2, &name, long).unwrap(),
        Queued::Waiting {
            ahead: 1,
            owner: None
        }
    ));
    let t1 = match b.acquire_queued(&s1, &name, long).unwrap() {
        Queued::Acquired(t) => t,
        other => panic!("the first in line takes the free lease: {other:?}"),
    };
    assert!(t1.token > first.token);
    assert_eq!(b.queue(&name).unwrap(), vec![s2.clone(), s3.clone()]);
    // s2 renews its place with a short patience and lets it run out: s3 is first then.
    let short = h.lease;
    assert!(matches!(
        b.acquire_queued(&s2, &name, short).unwrap(),
        Queued::Waiting { ahead: 0, owner: Some(o) } if o.session == s1
    ));
    h.until_ok("a place whose patience ran out is skipped", || {
        Ok(b.queue(&name)? == vec![s3.clone()])
    });
    assert!(b.release(&s1, &name, t1.token).unwrap());
    let t3 = match b.acquire_queued(&s3, &name, long).unwrap() {
        Queued::Acquired(t) => t,
        other => panic!("s3 is first once s2's place ran out: {other:?}"),
    };
    assert!(t3.token > t1.token);
    // Leaving: s2's place is gone already; s1 queues behind s3's term and leaves.
    assert!(!b.leave_queue(&s2, &name).unwrap());
    assert!(matches!(
        b.acquire_queued(&s1, &name, long).unwrap(),
        Queued::Waiting { ahead: 0, .. }
    ));
    assert!(b.leave_queue(&s1, &name).unwrap());
    assert!(!b.leave_queue(&s1, &name).unwrap());
    assert!(b.queue(&name).unwrap().is_empty());
    // Plain acquire ignores the queue; a closed session is refused.
    assert!(matches!(b.acquire(&s3, &name).unwrap(), Acquire::Acquired(t) if t.token == t3.token));
    b.close_session(&s2).unwrap();
    assert!(matches!(
        b.acquire_queued(&s2, &name, long),
        Err(Error::SessionExpired { .. })
    ));
    for s in [&holder, &s1, &s3] {
        b.close_session(s).unwrap();
    }
}

/// Through the engine: waiters that queued one after another get a fair lock in that
/// order; a waiter that timed out leaves the queue; a place never renewed (a crashed
/// waiter) is skipped once its patience runs out; a fair `try_lock` keeps no place.
pub fn fair_locks_are_granted_in_arrival_order(h: &Harness) {
    let b = h.backend();
    if !queues_or_refused(h, &b) {
        return;
    }
    let open = || Session::open(b.clone(), fair_config(h)).expect("open a fair session");
    let name = lease_name("fair-order");
    let a = open();
    let held = a.lock(&name).unwrap();
    let waiters: Vec<Session> = (0..3).map(|_| open()).collect();
    let quitter = open();
    // A waiter that crashed: its place is never renewed.
    let ghost = h.open(&*b, h.long_lease());
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|scope| {
        for (i, w) in waiters.iter().enumerate() {
            if i == 1 {
                assert!(matches!(
                    b.acquire_queued(&ghost, &name, h.lease).unwrap(),
                    Queued::Waiting { ahead: 1, .. }
                ));
                let r = quitter.lock_timeout(&name, Duration::from_millis(200));
                assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
                assert!(
                    !a.lock_queue(&name).unwrap().contains(&quitter.id()),
                    "a waiter that timed out leaves the queue"
                );
            }
            let tx = tx.clone();
            let n = &name;
            scope.spawn(move || {
                let g = w.lock(n).expect("a fair waiter gets the lock");
                tx.send((i, g.token())).unwrap();
            });
            h.until_ok("the waiter is queued", || {
                Ok(a.lock_queue(&name)?.contains(&w.id()))
            });
        }
        let ids: Vec<_> = waiters.iter().map(Session::id).collect();
        let queue = a.lock_queue(&name).unwrap();
        assert_eq!(
            queue.first(),
            Some(&ids[0]),
            "the first waiter is first in line"
        );
        assert!(queue.len() <= 4, "{queue:?}");
        // A fair try_lock answers at once and keeps no place.
        let other = open();
        assert!(other.try_lock(&name).unwrap().is_none());
        assert!(!a.lock_queue(&name).unwrap().contains(&other.id()));
        drop(held);
        let order: Vec<(usize, crate::Token)> = (0..3)
            .map(|_| {
                rx.recv_timeout(h.patience * 2)
                    .expect("every waiter gets the lock in time")
            })
            .collect();
        assert_eq!(
            order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![0, 1, 2],
            "arrival order"
        );
        assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
    });
    b.close_session(&ghost).unwrap();
}
