//! Contract cases of leader metadata: term values and the candidates of an election.

use super::{lease_name, Harness};
use crate::engine::Session;
use crate::spi::{Acquire, LeaseBackend};
use crate::types::{LeaseName, Owner, SessionId, Term};
use crate::{Error, Event};
use crossbeam_channel::Receiver;
use std::time::{Duration, Instant};

fn granted(r: Result<Acquire, Error>) -> Term {
    match r {
        Ok(Acquire::Acquired(t)) => t,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn owner(b: &dyn LeaseBackend, name: &LeaseName) -> Option<Owner> {
    b.owner(name).expect("owner")
}

/// A value given at acquire is the term's; only the live holder of that very term changes
/// it (a wrong token or another session cannot); a new term, after a release or a take-over
/// after expiry, starts without it; [`LeaseBackend::list`] shows it; a value too long is
/// refused before any I/O. Skipped on a backend without term values.
pub fn term_values_belong_to_their_term(h: &Harness) {
    let b = h.backend();
    if !b.supports_values() {
        return;
    }
    let long = h.long_lease();
    let (s1, s2) = (h.open(&*b, long), h.open(&*b, long));
    let name = lease_name("value");
    let t1 = granted(b.acquire_with_value(&s1, &name, "10.0.0.1:80 v1"));
    let o = owner(&*b, &name).expect("held");
    assert_eq!(
        (&o.session, o.token, o.value.as_str()),
        (&s1, t1.token, "10.0.0.1:80 v1")
    );
    // A re-acquire by the holder keeps the term and its value.
    assert_eq!(granted(b.acquire(&s1, &name)).token, t1.token);
    assert_eq!(owner(&*b, &name).expect("held").value, "10.0.0.1:80 v1");
    // The holder updates it (also to the same value again, and with UTF-8 beyond ASCII).
    let v2 = "10.0.0.1:81 v2 \"é\"";
    assert!(b.set_value(&s1, &name, t1.token, v2).expect("set_value"));
    assert!(b
        .set_value(&s1, &name, t1.token, v2)
        .expect("set_value again"));
    assert_eq!(owner(&*b, &name).expect("held").value, v2);
    // Nobody else, and no other token.
    let wrong = crate::Token::new(t1.token.get() + 1).expect("token");
    assert!(!b.set_value(&s1, &name, wrong, "wrong token").unwrap());
    assert!(!b.set_value(&s2, &name, t1.token, "not the holder").unwrap());
    assert!(matches!(
        b.set_value(&s1, &name, t1.token, &"x".repeat(crate::MAX_VALUE_LEN + 1)),
        Err(Error::InvalidValue { .. })
    ));
    assert_eq!(owner(&*b, &name).expect("held").value, v2);
    // A re-acquire with a value by the holder keeps the term and sets the value.
    let again = granted(b.acquire_with_value(&s1, &name, "re-acquired"));
    assert_eq!(again.token, t1.token);
    assert_eq!(owner(&*b, &name).expect("held").value, "re-acquired");
    assert!(b.set_value(&s1, &name, t1.token, v2).expect("set_value"));
    // Another session's acquire with a value takes nothing and sets nothing.
    assert!(matches!(
        b.acquire_with_value(&s2, &name, "not mine"),
        Ok(Acquire::Held(o)) if o.session == s1
    ));
    match b.list() {
        Err(Error::Unsupported { .. }) => {}
        r => {
            let l = r.expect("list");
            let listed = l.leases.iter().find(|x| x.name == name).expect("listed");
            assert_eq!(listed.owner.value, v2);
        }
    }
    // Released: the next term (another session's) starts without it, and the old holder
    // can no longer set one.
    assert!(b.release(&s1, &name, t1.token).unwrap());
    assert!(!b.set_value(&s1, &name, t1.token, "released").unwrap());
    let t2 = granted(b.acquire(&s2, &name));
    assert!(t2.token > t1.token);
    let o = owner(&*b, &name).expect("held");
    assert_eq!((&o.session, o.token, o.value.as_str()), (&s2, t2.token, ""));
    assert!(!b.set_value(&s1, &name, t1.token, "old term").unwrap());
    assert_eq!(owner(&*b, &name).expect("held").value, "");
    assert!(b.release(&s2, &name, t2.token).unwrap());
    // The same session's next term starts without its previous value too.
    let t3 = granted(b.acquire_with_value(&s2, &name, "first"));
    assert!(b.release(&s2, &name, t3.token).unwrap());
    let t4 = granted(b.acquire(&s2, &name));
    assert!(t4.token > t3.token);
    assert_eq!(owner(&*b, &name).expect("held").value, "");
    // Taken over after the holder's session expired: the new term starts without it.
    let short = h.open(&*b, h.lease);
    let other = lease_name("value-expiry");
    let t5 = granted(b.acquire_with_value(&short, &other, "expiring"));
    assert_eq!(owner(&*b, &other).expect("held").value, "expiring");
    let mut taken = None;
    h.until("the expired holder's lease is taken over", || {
        match b.acquire(&s1, &other).expect("acquire") {
            Acquire::Acquired(t) => {
                taken = Some(t);
                true
            }
            Acquire::Held(_) => false,
        }
    });
    let t6 = taken.expect("taken over");
    assert!(t6.token > t5.token);
    let o = owner(&*b, &other).expect("held");
    assert_eq!((&o.session, o.value.as_str()), (&s1, ""));
    assert!(!b.set_value(&short, &other, t5.token, "too late").unwrap());
    assert_eq!(owner(&*b, &other).expect("held").value, "");
    for s in [s1, s2] {
        b.close_session(&s).expect("close");
    }
}

/// Waits for an event matching `pred` on `rx`; every `LeaderChanged` seen meanwhile is
/// checked by `check`.
fn wait_event(
    h: &Harness,
    rx: &Receiver<Event>,
    what: &str,
    mut check: impl FnMut(&Event),
    mut pred: impl FnMut(&Event) -> bool,
) -> Event {
    let end = Instant::now() + h.patience;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        assert!(
            left > Duration::ZERO,
            "not seen within {:?}: {what}",
            h.patience
        );
        if let Ok(e) = rx.recv_timeout(left.min(Duration::from_millis(100))) {
            check(&e);
            if pred(&e) {
                return e;
            }
        }
    }
}

fn leads(e: &Event, session: &SessionId, value: &str) -> bool {
    matches!(e, Event::LeaderChanged { owner: Some(o), .. } if &o.session == session && o.value == value)
}

/// Through the engine: a candidate elected with a value is observed with it; its update
/// reaches observers (same token, new value); the next leader's term shows its own value,
/// never the previous leader's; [`Election::candidates`](crate::Election::candidates) lists
/// both campaigning sessions and drops the one that resigned; a lock holder's value is seen
/// by observers too. Skipped on a backend without term values.
pub fn observers_see_leader_values_and_candidates(h: &Harness) {
    let b = h.backend();
    if !b.supports_values() {
        return;
    }
    let a = Session::open(b.clone(), h.config()).expect("open a");
    let c = Session::open(b.clone(), h.config()).expect("open c");
    let name = lease_name("leader-value");
    let observer = c.observe(&name).expect("observe");
    let ea = a.election_with_value(&name, "a:1").expect("candidate a");
    let term = ea.wait_elected(h.patience).expect("a elected");
    assert_eq!(ea.value(), "a:1");
    let rx = observer.events();
    // Before the value is set (backends with two steps), the term may show without it.
    let no_other = |e: &Event| {
        if let Event::LeaderChanged { owner: Some(o), .. } = e {
            if o.session == a.id() {
                assert!(["", "a:1", "a:2"].contains(&o.value.as_str()), "{e:?}");
            }
        }
    };
    wait_event(h, rx, "a leads with a:1", no_other, |e| {
        leads(e, &a.id(), "a:1")
    });
    ea.set_value("a:2").expect("set_value");
    let e = wait_event(h, rx, "a leads with a:2", no_other, |e| {
        leads(e, &a.id(), "a:2")
    });
    // An update keeps the term, unless the term was lost meanwhile (a slow machine) and the
    // candidate won the next one, which starts with its value.
    if let Event::LeaderChanged { owner: Some(o), .. } = &e {
        if o.token != term.token {
            let lost = ea
                .events()
                .try_iter()
                .any(|x| matches!(&x, Event::Revoked { term: t, .. } if t.token == term.token));
            assert!(lost, "an update keeps the term: {e:?} after {term:?}");
        }
    }
    assert_eq!(ea.leader().expect("leader").expect("led").value, "a:2");
    // A second candidate; both are listed.
    let ec = c.election_with_value(&name, "c:1").expect("candidate c");
    h.until("both sessions are listed as candidates", || {
        let ids: Vec<SessionId> = ec
            .candidates()
            .expect("candidates")
            .into_iter()
            .map(|m| m.session)
            .collect();
        ids.contains(&a.id()) && ids.contains(&c.id()) && ids.len() == 2
    });
    assert!(matches!(
        ea.set_value("x".repeat(crate::MAX_VALUE_LEN + 1)),
        Err(Error::InvalidValue { .. })
    ));
    // a resigns: c leads with its own value; a term of c never shows a's.
    ea.resign().expect("resign");
    let next = ec.wait_elected(h.patience).expect("c elected");
    assert!(next.token > term.token);
    let c_only = |e: &Event| {
        if let Event::LeaderChanged { owner: Some(o), .. } = e {
            if o.session == c.id() {
                assert!(["", "c:1"].contains(&o.value.as_str()), "{e:?}");
            }
        }
    };
    wait_event(h, rx, "c leads with c:1", c_only, |e| {
        leads(e, &c.id(), "c:1")
    });
    h.until("the resigned candidate is no longer listed", || {
        let ids: Vec<SessionId> = ec
            .candidates()
            .expect("candidates")
            .into_iter()
            .map(|m| m.session)
            .collect();
        ids == [c.id()]
    });
    drop(ec);
    h.until("a dropped candidate is no longer listed", || {
        ea.candidates().expect("candidates").is_empty()
    });
    // A lock holder's value.
    let lock = lease_name("lock-value");
    let lock_observer = c.observe(&lock).expect("observe the lock");
    let guard = a.lock(&lock).expect("lock");
    guard.set_value("a holds it").expect("lock value");
    wait_event(
        h,
        lock_observer.events(),
        "the lock holder's value",
        |_| {},
        |e| leads(e, &a.id(), "a holds it"),
    );
    guard.unlock().expect("unlock");
    a.close().expect("close a");
    c.close().expect("close c");
}
