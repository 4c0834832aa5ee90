//! Contract cases on the SPI alone.

use super::{expired, group_name, lease_name, Harness};
use crate::spi::{Acquire, LeaseBackend, Notification};
use crate::types::{LeaseName, Metadata, SessionId, Term, Token};
use crate::Error;
use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;

pub(super) fn acquired(b: &dyn LeaseBackend, s: &SessionId, name: &LeaseName) -> Term {
    match b.acquire(s, name).expect("acquire") {
        Acquire::Acquired(t) => t,
        Acquire::Held(o) => panic!("{name} expected free, held by {o:?}"),
    }
}

/// Acquires `name` for `s` once its previous holder is gone. A lease may outlive its
/// expired session briefly where only durations cross nodes (Redis Cluster: by the delay
/// between the session call and the lease call), so a take-over is awaited, not assumed.
fn take_over(h: &Harness, b: &dyn LeaseBackend, s: &SessionId, name: &LeaseName) -> Term {
    let mut term = None;
    h.until("the lease is free for the next session", || {
        match b.acquire(s, name).expect("acquire") {
            Acquire::Acquired(t) => term = Some(t),
            Acquire::Held(_) => {}
        }
        term.is_some()
    });
    term.expect("acquired")
}

pub(super) fn wait_expired(h: &Harness, b: &dyn LeaseBackend, s: &SessionId) {
    // Probing with `acquire` never renews the session.
    let probe = super::lease_name("probe");
    h.until("the session expires", || expired(&b.acquire(s, &probe)));
}

/// A session lives while kept alive, expires without keep-alives, and is never revived.
pub fn session_open_keep_alive_expiry_never_revived(h: &Harness) {
    let b = h.backend();
    let s = h.open(&*b, h.lease);
    for _ in 0..3 {
        let ka = b
            .keep_alive(&s, h.lease)
            .expect("keep_alive of a live session");
        assert!(ka.leases.is_empty());
    }
    wait_expired(h, &*b, &s);
    for _ in 0..2 {
        assert!(
            expired(&b.keep_alive(&s, h.lease)),
            "an expired session was revived"
        );
    }
    assert!(expired(&b.join(&s, &group_name("g"))));
    assert!(expired(&b.acquire(&s, &lease_name("l"))));
}

/// Remaining times are greater than zero and at most the lease while live.
pub fn remaining_is_measured_and_bounded_by_lease(h: &Harness) {
    let b = h.backend();
    let lease = h.long_lease();
    let g = b.open_session(lease, &Metadata::default()).unwrap();
    assert!(
        g.remaining > Duration::ZERO && g.remaining <= lease,
        "{:?}",
        g.remaining
    );
    let ka = b.keep_alive(&g.id, lease).unwrap();
    assert!(ka.remaining > Duration::ZERO && ka.remaining <= lease);
    let name = lease_name("rem");
    let t = acquired(&*b, &g.id, &name);
    assert!(t.remaining > Duration::ZERO && t.remaining <= lease);
    let o = b.owner(&name).unwrap().expect("owner");
    assert!(o.remaining > Duration::ZERO && o.remaining <= lease);
    let ka = b.keep_alive(&g.id, lease).unwrap();
    assert_eq!(ka.leases.len(), 1);
    assert!(ka.leases[0].remaining > Duration::ZERO && ka.leases[0].remaining <= lease);
    b.close_session(&g.id).unwrap();
}

/// Closing a session frees its leases (token kept) and memberships; closing twice is fine.
pub fn close_frees_leases_and_memberships(h: &Harness) {
    let b = h.backend();
    let (s1, s2) = (h.open(&*b, h.long_lease()), h.open(&*b, h.long_lease()));
    let (name, group) = (lease_name("close"), group_name("close"));
    let t1 = acquired(&*b, &s1, &name);
    b.join(&s1, &group).unwrap();
    b.close_session(&s1).unwrap();
    assert_eq!(b.owner(&name).unwrap(), None);
    assert!(b.members(&group).unwrap().is_empty());
    b.close_session(&s1).unwrap();
    assert!(expired(&b.keep_alive(&s1, h.lease)));
    let t2 = acquired(&*b, &s2, &name);
    assert!(t2.token > t1.token);
    b.close_session(&s2).unwrap();
}

/// A keep-alive lists exactly the leases the session holds, with their tokens.
pub fn keep_alive_lists_held_leases(h: &Harness) {
    let b = h.backend();
    let s = h.open(&*b, h.long_lease());
    let (x, y) = (lease_name("ka-x"), lease_name("ka-y"));
    let (tx, ty) = (acquired(&*b, &s, &x), acquired(&*b, &s, &y));
    let listed = |b: &dyn LeaseBackend| -> BTreeSet<(LeaseName, Token)> {
        let ka = b.keep_alive(&s, h.long_lease()).unwrap();
        ka.leases.into_iter().map(|l| (l.name, l.token)).collect()
    };
    assert_eq!(
        listed(&*b),
        BTreeSet::from([(x.clone(), tx.token), (y.clone(), ty.token)])
    );
    assert!(b.release(&s, &x, tx.token).unwrap());
    assert_eq!(listed(&*b), BTreeSet::from([(y, ty.token)]));
    b.close_session(&s).unwrap();
}

/// A free lease is acquired with a new term; the holder re-acquiring gets the same term;
/// another session sees the holder.
pub fn acquire_free_held_and_reacquire(h: &Harness) {
    let b = h.backend();
    let (s1, s2) = (h.open(&*b, h.long_lease()), h.open(&*b, h.long_lease()));
    let name = lease_name("acq");
    let t1 = acquired(&*b, &s1, &name);
    let again = acquired(&*b, &s1, &name);
    assert_eq!(
        again.token, t1.token,
        "re-acquire by the holder is the same term"
    );
    match b.acquire(&s2, &name).unwrap() {
        Acquire::Held(o) => {
            assert_eq!(o.session, s1);
            assert_eq!(o.token, t1.token);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

/// Release with a wrong token or by another session changes nothing.
pub fn release_with_wrong_token_or_session_has_no_effect(h: &Harness) {
    let b = h.backend();
    let (s1, s2) = (h.open(&*b, h.long_lease()), h.open(&*b, h.long_lease()));
    let name = lease_name("rel");
    let t = acquired(&*b, &s1, &name);
    let wrong = Token::new(t.token.get() + 1).unwrap();
    assert!(!b.release(&s2, &name, t.token).unwrap());
    assert!(!b.release(&s1, &name, wrong).unwrap());
    assert_eq!(b.owner(&name).unwrap().map(|o| o.session), Some(s1.clone()));
    assert!(b.release(&s1, &name, t.token).unwrap());
    assert!(!b.release(&s1, &name, t.token).unwrap());
    assert_eq!(b.owner(&name).unwrap(), None);
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

/// `owner` reports a holder only while its session is live.
pub fn owner_only_while_live(h: &Harness) {
    let b = h.backend();
    let s = h.open(&*b, h.lease);
    let name = lease_name("own");
    let t = acquired(&*b, &s, &name);
    let o = b.owner(&name).unwrap().expect("held");
    assert_eq!((o.session, o.token), (s.clone(), t.token));
    h.until_ok("the owner disappears with its session", || {
        Ok(b.owner(&name)?.is_none())
    });
}

/// After the holder expires another session takes over with a greater token, and the old
/// holder's keep-alive no longer reports the lease.
pub fn take_over_after_expiry_and_keep_alive_reports_gone(h: &Harness) {
    let b = h.backend();
    let s1 = h.open(&*b, h.lease);
    let s2 = h.open(&*b, h.long_lease());
    let name = lease_name("take");
    let t1 = acquired(&*b, &s1, &name);
    let t2 = take_over(h, &*b, &s2, &name);
    assert!(t2.token > t1.token);
    match b.keep_alive(&s1, h.lease) {
        Err(Error::SessionExpired { .. }) => {}
        Ok(ka) => assert!(ka.leases.iter().all(|l| l.name != name), "{ka:?}"),
        Err(e) => panic!("keep_alive: {e}"),
    }
    b.close_session(&s2).unwrap();
}

/// `Job` and `job` are two leases.
pub fn names_are_case_sensitive(h: &Harness) {
    let b = h.backend();
    let (s1, s2) = (h.open(&*b, h.long_lease()), h.open(&*b, h.long_lease()));
    let base = super::unique("case");
    let upper = LeaseName::new(format!("J{base}")).unwrap();
    let lower = LeaseName::new(format!("j{base}")).unwrap();
    acquired(&*b, &s1, &upper);
    acquired(&*b, &s2, &lower);
    let g_upper = crate::GroupName::new(format!("G{base}")).unwrap();
    b.join(&s1, &g_upper).unwrap();
    let g_lower = crate::GroupName::new(format!("g{base}")).unwrap();
    assert!(b.members(&g_lower).unwrap().is_empty());
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

/// Sessions on many threads race for one lease: exactly one holds it.
pub fn contending_sessions_exactly_one_holder(h: &Harness) {
    let b = h.backend();
    let name = lease_name("race");
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (b, name, barrier) = (b.clone(), name.clone(), barrier.clone());
            let s = h.open(&*b, h.long_lease());
            std::thread::spawn(move || {
                barrier.wait();
                let r = (0..20)
                    .map(|_| b.acquire(&s, &name).expect("acquire"))
                    .collect::<Vec<_>>();
                (s, r)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: BTreeSet<_> = results
        .iter()
        .flat_map(|(s, r)| {
            r.iter()
                .filter(|a| matches!(a, Acquire::Acquired(_)))
                .map(move |_| s.clone())
        })
        .collect();
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let tokens: BTreeSet<Token> = results
        .iter()
        .flat_map(|(_, r)| r.iter())
        .map(|a| match a {
            Acquire::Acquired(t) => t.token,
            Acquire::Held(o) => o.token,
        })
        .collect();
    assert_eq!(tokens.len(), 1, "one term only: {tokens:?}");
    for (s, _) in &results {
        b.close_session(s).unwrap();
    }
}

/// Tokens strictly increase across 100 terms alternating between two sessions, and across
/// release and re-acquire by the same session.
pub fn token_increases_across_100_terms(h: &Harness) {
    let b = h.backend();
    let ss = [h.open(&*b, h.long_lease()), h.open(&*b, h.long_lease())];
    let name = lease_name("terms");
    let mut last = 0;
    for i in 0..100 {
        let s = &ss[(i / 3) % 2];
        let t = acquired(&*b, s, &name);
        assert!(t.token.get() > last, "term {i}: {} after {last}", t.token);
        last = t.token.get();
        assert!(b.release(s, &name, t.token).unwrap());
    }
    for s in &ss {
        b.close_session(s).unwrap();
    }
}

/// Tokens increase across the holder's expiry.
pub fn token_increases_across_expiry(h: &Harness) {
    let b = h.backend();
    let name = lease_name("exp");
    let s1 = h.open(&*b, h.lease);
    let t1 = acquired(&*b, &s1, &name);
    wait_expired(h, &*b, &s1);
    let s2 = h.open(&*b, h.long_lease());
    let t2 = take_over(h, &*b, &s2, &name);
    assert!(t2.token > t1.token, "{} after {}", t2.token, t1.token);
    b.close_session(&s2).unwrap();
}

/// Purging expired sessions removes them with their memberships and never resets tokens.
pub fn token_increases_across_purge(h: &Harness) {
    let b = h.backend();
    let (name, group) = (lease_name("purge"), group_name("purge"));
    let s1 = h.open(&*b, h.lease);
    let t1 = acquired(&*b, &s1, &name);
    b.join(&s1, &group).unwrap();
    wait_expired(h, &*b, &s1);
    b.purge_expired().expect("purge_expired");
    assert!(b.members(&group).unwrap().is_empty());
    assert!(expired(&b.keep_alive(&s1, h.lease)));
    let s2 = h.open(&*b, h.long_lease());
    let t2 = take_over(h, &*b, &s2, &name);
    assert!(t2.token > t1.token, "{} after {}", t2.token, t1.token);
    b.close_session(&s2).unwrap();
}

/// Join, leave, expiry and empty groups; members carry their session's metadata.
pub fn group_join_leave_expiry_empty(h: &Harness) {
    let b = h.backend();
    let g = group_name("grp");
    assert!(b.members(&g).unwrap().is_empty());
    let m1 = Metadata::new("host-1:80").unwrap();
    let s1 = b.open_session(h.long_lease(), &m1).unwrap().id;
    let s2 = b
        .open_session(h.lease, &Metadata::new("host-2:80").unwrap())
        .unwrap()
        .id;
    b.join(&s1, &g).unwrap();
    b.join(&s1, &g).unwrap();
    b.join(&s2, &g).unwrap();
    let ids = |b: &dyn LeaseBackend| -> BTreeSet<SessionId> {
        b.members(&g)
            .unwrap()
            .into_iter()
            .map(|m| m.session)
            .collect()
    };
    assert_eq!(ids(&*b), BTreeSet::from([s1.clone(), s2.clone()]));
    let m = b.members(&g).unwrap();
    let one = m.iter().find(|m| m.session == s1).unwrap();
    assert_eq!(one.metadata, m1);
    assert!(b.leave(&s1, &g).unwrap());
    assert!(!b.leave(&s1, &g).unwrap());
    assert_eq!(ids(&*b), BTreeSet::from([s2.clone()]));
    h.until("an expired member leaves the view", || ids(&*b).is_empty());
    assert!(expired(&b.join(&s2, &g)));
    b.close_session(&s1).unwrap();
}

/// Where the backend has notifications, a release and a membership change are notified.
pub fn release_and_group_changes_are_notified(h: &Harness) {
    let b = h.backend();
    let (tx, rx) = crossbeam_channel::unbounded();
    let sub = b
        .subscribe(Arc::new(move |n: &Notification| {
            let _ = tx.send(n.clone());
        }))
        .expect("subscribe");
    let Some(_sub) = sub else {
        log::info!("{} has no notifications: candidates poll", b.kind());
        return;
    };
    let s = h.open(&*b, h.long_lease());
    let (name, group) = (lease_name("note"), group_name("note"));
    let t = acquired(&*b, &s, &name);
    b.join(&s, &group).unwrap();
    assert!(b.release(&s, &name, t.token).unwrap());
    let mut seen = (false, false);
    let end = std::time::Instant::now() + h.patience;
    while seen != (true, true) {
        let left = end.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Notification::Released(n)) if n == name => seen.0 = true,
            Ok(Notification::GroupChanged(g)) if g == group => seen.1 = true,
            Ok(_) => {}
            Err(_) => panic!("missing notifications (release, group): {seen:?}"),
        }
    }
    b.close_session(&s).unwrap();
}

/// Release and leave on an expired or a closed session change nothing: they return `false`
/// (never `SessionExpired`), and the lease is not reported as freed by them.
pub fn release_and_leave_on_an_expired_or_closed_session_return_false(h: &Harness) {
    let b = h.backend();
    let g = group_name("gone");
    // Expired: not kept alive for its lease.
    let s1 = h.open(&*b, h.lease);
    let n1 = lease_name("gone-exp");
    let t1 = acquired(&*b, &s1, &n1);
    b.join(&s1, &g).unwrap();
    wait_expired(h, &*b, &s1);
    assert!(
        !b.release(&s1, &n1, t1.token)
            .expect("release on an expired session"),
        "release on an expired session freed a lease"
    );
    assert!(
        !b.leave(&s1, &g).expect("leave on an expired session"),
        "leave on an expired session left a group"
    );
    // Closed.
    let s2 = h.open(&*b, h.long_lease());
    let n2 = lease_name("gone-closed");
    let t2 = acquired(&*b, &s2, &n2);
    b.join(&s2, &g).unwrap();
    b.close_session(&s2).unwrap();
    assert!(
        !b.release(&s2, &n2, t2.token)
            .expect("release on a closed session"),
        "release on a closed session freed a lease"
    );
    assert!(
        !b.leave(&s2, &g).expect("leave on a closed session"),
        "leave on a closed session left a group"
    );
    // The names are free for the next session, with greater tokens.
    let s3 = h.open(&*b, h.long_lease());
    assert!(take_over(h, &*b, &s3, &n1).token > t1.token);
    assert!(take_over(h, &*b, &s3, &n2).token > t2.token);
    b.close_session(&s3).unwrap();
}

/// A lease of zero or beyond [`Config::MAX_LEASE`](crate::Config::MAX_LEASE) is rejected
/// with `InvalidConfig` naming `lease` (never a panic or an overflowing deadline), on open
/// and on keep-alive.
pub fn out_of_range_leases_are_rejected(h: &Harness) {
    let b = h.backend();
    let huge = crate::Config::MAX_LEASE + Duration::from_secs(1);
    for lease in [Duration::ZERO, huge, Duration::MAX] {
        let r = b.open_session(lease, &Metadata::default());
        assert!(
            matches!(&r, Err(Error::InvalidConfig { setting, .. }) if setting == "lease"),
            "open_session({lease:?}): {r:?}"
        );
    }
    let s = h.open(&*b, h.long_lease());
    for lease in [Duration::ZERO, huge, Duration::MAX] {
        let r = b.keep_alive(&s, lease);
        assert!(
            matches!(&r, Err(Error::InvalidConfig { setting, .. }) if setting == "lease"),
            "keep_alive({lease:?}): {r:?}"
        );
    }
    assert!(
        b.keep_alive(&s, h.long_lease()).is_ok(),
        "the session lives on"
    );
    b.close_session(&s).unwrap();
}

/// [`LeaseBackend::list`], where the backend supports it ([`Error::Unsupported`] otherwise):
/// a live session with its metadata, the lease it holds with its token and its group; once
/// the session is closed, none of them.
pub fn list_shows_live_sessions_leases_and_groups(h: &Harness) {
    let b = h.backend();
    let meta = Metadata::new("listed \"metadata\" é").expect("valid metadata");
    let lease = h.lease.max(Duration::from_secs(10));
    let s = b.open_session(lease, &meta).expect("open_session").id;
    let name = lease_name("list");
    let term = acquired(&*b, &s, &name);
    let group = group_name("list");
    b.join(&s, &group).expect("join");
    let l = match b.list() {
        Err(Error::Unsupported { .. }) => {
            b.close_session(&s).expect("close");
            return;
        }
        r => r.expect("list"),
    };
    let me = l
        .sessions
        .iter()
        .find(|x| x.id == s)
        .unwrap_or_else(|| panic!("session {s} not listed: {l:?}"));
    assert_eq!(me.metadata, meta);
    assert!(
        me.remaining > Duration::ZERO && me.remaining <= lease,
        "{me:?}"
    );
    let held = l
        .leases
        .iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("lease {name} not listed: {l:?}"));
    assert_eq!(held.owner.session, s);
    assert_eq!(held.owner.token, term.token);
    let g = l
        .groups
        .iter()
        .find(|x| x.name == group)
        .unwrap_or_else(|| panic!("group {group} not listed: {l:?}"));
    assert_eq!(g.members.len(), 1, "{g:?}");
    assert_eq!((&g.members[0].session, &g.members[0].metadata), (&s, &meta));
    b.close_session(&s).expect("close");
    h.until(
        "a closed session and what it held are no longer listed",
        || {
            let l = b.list().expect("list");
            !l.sessions.iter().any(|x| x.id == s)
                && !l.leases.iter().any(|x| x.name == name)
                && !l.groups.iter().any(|x| x.name == group)
        },
    );
}
