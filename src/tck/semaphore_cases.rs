//! Contract cases of semaphores: permits are leases, so they hold on every backend.

use super::{lease_name, Harness};
use crate::engine::Session;
use crate::Error;
use std::time::Duration;

fn session(h: &Harness, b: &std::sync::Arc<dyn crate::spi::LeaseBackend>) -> Session {
    Session::open(b.clone(), h.config()).expect("open session")
}

/// A semaphore of 2 admits two holders with distinct permits and fencing tokens, lists
/// them, makes a third wait until a permit is released, gives a crashed holder's permit back
/// once its session expires, and never lets more than 2 threads in at once.
pub fn semaphore_admits_at_most_its_permits(h: &Harness) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let b = h.backend();
    let (a, c, d) = (session(h, &b), session(h, &b), session(h, &b));
    let name = lease_name("sem");
    assert!(matches!(
        a.semaphore(&name, 0),
        Err(Error::InvalidConfig { .. })
    ));
    let (sa, sc, sd) = (
        a.semaphore(&name, 2).unwrap(),
        c.semaphore(&name, 2).unwrap(),
        d.semaphore(&name, 2).unwrap(),
    );
    let pa = sa.try_acquire().unwrap().expect("a free permit");
    let pc = sc.try_acquire().unwrap().expect("the other free permit");
    assert_ne!(pa.index(), pc.index());
    assert!(
        sd.try_acquire().unwrap().is_none(),
        "both permits are taken"
    );
    let mut holders: Vec<_> = sd
        .holders()
        .unwrap()
        .into_iter()
        .map(|(i, o)| (i, o.session, o.token))
        .collect();
    holders.sort();
    let mut expected = vec![
        (pa.index(), a.id(), pa.token()),
        (pc.index(), c.id(), pc.token()),
    ];
    expected.sort();
    assert_eq!(holders, expected);
    // A waiter gets the permit that is released, with a greater token.
    let (index, token) = (pa.index(), pa.token());
    let patience = h.patience;
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| sd.acquire_timeout(patience));
        pa.release().unwrap();
        let pd = waiter.join().unwrap().expect("the released permit");
        assert_eq!(pd.index(), index);
        assert!(pd.token() > token);
        pd.release().unwrap();
    });
    // A crashed holder's permit comes back once its session expires.
    let crashed_index = pc.index();
    std::mem::forget(pc);
    c.abandon();
    let again = sa.acquire_timeout(h.patience).expect("a permit");
    let other = sd
        .acquire_timeout(h.patience)
        .expect("the crashed holder's permit, after its session expired");
    let got: std::collections::BTreeSet<u32> = [again.index(), other.index()].into();
    assert!(got.contains(&crashed_index), "{got:?}");
    drop((again, other));
    // Threads of two sessions take permits in turns: never more than 2 inside.
    let inside = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for s in [&sa, &sd, &sa, &sd] {
            let inside = &inside;
            let patience = h.patience;
            scope.spawn(move || {
                for _ in 0..4 {
                    let p = s.acquire_timeout(patience).expect("a permit");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= 2, "{now} holders of 2 permits");
                    // Held a moment so that holders overlap (arranging, not asserting).
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().unwrap();
                }
            });
        }
    });
}

/// A blocked `acquire` waits while an expired session is reopened (the reopen held back by
/// the test), then takes a permit on the new session.
pub fn semaphore_waits_for_the_reopened_session(h: &Harness) {
    use super::gate::GatedOpens;
    use crate::engine::SessionState;
    use crate::spi::LeaseBackend;
    use std::sync::Arc;
    let gate = Arc::new(GatedOpens::new(h.backend(), h.patience));
    let b: Arc<dyn LeaseBackend> = gate.clone();
    let s = session(h, &b);
    let old = s.id();
    let pool = s.semaphore(lease_name("sem-reopen"), 1).unwrap();
    gate.hold();
    b.close_session(&old).unwrap();
    h.until("the engine saw the expiry", || {
        s.state() == SessionState::Expired
    });
    assert!(
        matches!(pool.try_acquire(), Err(Error::SessionExpired { .. })),
        "try_acquire does not wait"
    );
    let (calling_tx, calling_rx) = crossbeam_channel::bounded::<()>(1);
    let opener = std::thread::spawn({
        let gate = gate.clone();
        move || {
            let _ = calling_rx.recv();
            gate.pass();
        }
    });
    calling_tx.send(()).unwrap();
    let permit = pool
        .acquire_timeout(h.patience)
        .expect("the permit waits for the reopened session");
    opener.join().unwrap();
    assert_ne!(s.id(), old);
    assert!(permit.is_valid());
    let holders = pool.holders().unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].1.session, s.id());
}
