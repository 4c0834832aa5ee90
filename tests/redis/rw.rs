//! Read-write locks: the TCK's rw cases run on every layout (the suites in the root); these
//! check what is Redis's own (notifications, the keep-alive's renewal on a cluster, close).

use crate::common::*;
use simba_lease::backends::redis::{key_slot, RedisBackend};
use simba_lease::spi::{LeaseBackend, Notification, RwAcquire, RwMode};
use simba_lease::{Config, Error, LeaseName, Session, SessionId};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn rw_key(b: &Isolated, name: &LeaseName) -> String {
    format!("{}:rw:{{{name}}}", b.prefix)
}

pub(crate) fn rw_granted(r: RwAcquire, what: &str) -> simba_lease::Term {
    match r {
        RwAcquire::Acquired(t) => t,
        other => panic!("{what}: {other:?}"),
    }
}

/// One server, the keep-alive lists the read-write terms by the session's version: grants
/// and releases bump it (in their scripts), a keep-alive that finds it unchanged bumps nothing
/// and answers the list kept; a lock hash deleted behind the library's back shows in the
/// keep-alive's sample, which bumps the version, and the full list drops it (and the rw index
/// forgets a lock the session neither holds nor waits for).
#[test]
fn one_node_keep_alive_lists_read_write_terms_by_version() {
    let b = standalone();
    let long = Duration::from_secs(30);
    let s = open(&*b, long);
    let (x, y) = (
        LeaseName::new("rw-version-x").unwrap(),
        LeaseName::new("rw-version-y").unwrap(),
    );
    let version = || {
        b.command(&["HGET", &b.session_key(&s), "v"])
            .as_int()
            .unwrap_or(0)
    };
    let index = format!("{}:rw", b.session_key(&s));
    let listed = || -> Vec<(String, RwMode, u64)> {
        let mut v: Vec<_> = b
            .keep_alive(&s, long)
            .unwrap()
            .rw
            .into_iter()
            .map(|t| (t.name.to_string(), t.mode, t.token.get()))
            .collect();
        v.sort();
        v
    };
    let v0 = version();
    let tx = rw_granted(b.acquire_rw(&s, &x, RwMode::Read, long).unwrap(), "x").token;
    let ty = rw_granted(b.acquire_rw(&s, &y, RwMode::Write, long).unwrap(), "y").token;
    rw_granted(b.acquire_rw(&s, &x, RwMode::Read, long).unwrap(), "x again");
    assert_eq!(version(), v0 + 2, "two new terms; asking again is none");
    let both = vec![
        (x.to_string(), RwMode::Read, tx.get()),
        (y.to_string(), RwMode::Write, ty.get()),
    ];
    assert_eq!(listed(), both);
    assert_eq!(listed(), both, "unchanged");
    assert_eq!(version(), v0 + 2, "an unchanged keep-alive bumps nothing");
    b.command(&["DEL", &rw_key(&b, &x)]);
    assert_eq!(
        listed(),
        vec![(y.to_string(), RwMode::Write, ty.get())],
        "a lock deleted behind the library's back"
    );
    assert_eq!(version(), v0 + 3, "found by the sample");
    assert_eq!(
        b.command(&["SISMEMBER", &index, &rw_key(&b, &x)]).as_int(),
        Some(0)
    );
    assert!(b.release_rw(&s, &y, RwMode::Write, ty).unwrap());
    assert_eq!(version(), v0 + 4, "a release");
    assert!(!b.release_rw(&s, &y, RwMode::Write, ty).unwrap());
    assert_eq!(version(), v0 + 4, "a release that ended nothing");
    assert_eq!(listed(), vec![]);
    assert_eq!(b.command(&["EXISTS", &index]).as_int(), Some(0));
    b.close_session(&s).unwrap();
}

/// A release, a writer leaving the queue and a close each publish a release of the name (the
/// path that wakes waiters).
fn rw_releases_leaves_and_closes_are_notified(make: fn() -> Arc<Isolated>) {
    let b = make();
    let (tx, rx) = crossbeam_channel::unbounded();
    let _sub = b
        .subscribe(Arc::new(move |n: &Notification| {
            let _ = tx.send(n.clone());
        }))
        .unwrap()
        .expect("redis has notifications");
    let long = Duration::from_secs(30);
    let (r, w) = (open(&*b, long), open(&*b, long));
    let name = LeaseName::new(format!("rw-notify-{}", &SessionId::random().as_str()[..8])).unwrap();
    let released = |n: &Notification| *n == Notification::Released(name.clone());
    let t = rw_granted(
        b.acquire_rw(&r, &name, RwMode::Read, long).unwrap(),
        "a reader",
    );
    assert!(matches!(
        b.acquire_rw(&w, &name, RwMode::Write, long).unwrap(),
        RwAcquire::Busy { .. }
    ));
    assert!(b.leave_rw_queue(&w, &name).unwrap());
    wait_for(&rx, "the writer left the queue", released);
    assert!(b.release_rw(&r, &name, RwMode::Read, t.token).unwrap());
    wait_for(&rx, "the reader released", released);
    rw_granted(
        b.acquire_rw(&r, &name, RwMode::Read, long).unwrap(),
        "a reader again",
    );
    b.close_session(&r).unwrap();
    wait_for(&rx, "the reader's session closed", released);
    let state = b.rw_state(&name).unwrap();
    assert!(state.readers.is_empty(), "{state:?}");
    assert!(
        b.command(&["HEXISTS", &rw_key(&b, &name), &format!("r:{r}")])
            .as_int()
            == Some(0),
        "close deleted the reader's entry"
    );
    b.close_session(&w).unwrap();
}

#[test]
fn rw_releases_leaves_and_closes_are_notified_standalone() {
    rw_releases_leaves_and_closes_are_notified(standalone);
}

#[test]
fn rw_releases_leaves_and_closes_are_notified_cluster() {
    rw_releases_leaves_and_closes_are_notified(cluster);
}

/// A session kept alive holds its write term for several leases (on a cluster, its
/// keep-alives move the entry's expiry on): another writer stays out all along.
fn rw_terms_last_while_the_session_is_kept_alive(make: fn() -> Arc<Isolated>) {
    let b = make();
    let lease = Duration::from_secs(2);
    let config = Config::builder()
        .lease(lease)
        .renew_interval(lease / 4)
        .build()
        .unwrap();
    let a = Session::open(b.clone(), config).unwrap();
    let other = open(&*b, Duration::from_secs(60));
    let name = LeaseName::new(format!("rw-kept-{}", &SessionId::random().as_str()[..8])).unwrap();
    let g = a.rw_lock(&name).unwrap().write().unwrap();
    let started = Instant::now();
    until("four leases passed", || {
        assert!(
            matches!(
                b.acquire_rw(&other, &name, RwMode::Write, Duration::ZERO)
                    .unwrap(),
                RwAcquire::Busy { .. }
            ),
            "another writer while the holder is kept alive"
        );
        assert!(g.is_valid());
        started.elapsed() > lease * 4
    });
    let token = g.token();
    g.unlock().unwrap();
    until("the other writer gets in", || {
        matches!(
            b.acquire_rw(&other, &name, RwMode::Write, Duration::ZERO).unwrap(),
            RwAcquire::Acquired(t) if t.token > token
        )
    });
    a.close().unwrap();
    b.close_session(&other).unwrap();
}

#[test]
fn rw_terms_last_while_the_session_is_kept_alive_standalone() {
    rw_terms_last_while_the_session_is_kept_alive(standalone);
}

#[test]
fn rw_terms_last_while_the_session_is_kept_alive_cluster() {
    rw_terms_last_while_the_session_is_kept_alive(cluster);
}

/// A cluster keep-alive renews the session's read-write terms and places on every master in
/// the one script per node it sends anyway: their expiries move by most of the new lease, and
/// it lists the terms (not the places).
#[test]
fn cluster_keep_alive_renews_rw_terms_and_places_on_every_master() {
    let b = cluster();
    let owners = slot_owners(&b);
    let short = Duration::from_secs(10);
    let (s, w) = (open(&*b, short), open(&*b, short));
    let names: Vec<LeaseName> = (0..30)
        .map(|i| LeaseName::new(format!("rw-many-{i}")).unwrap())
        .collect();
    let nodes: std::collections::BTreeSet<i64> = names
        .iter()
        .map(|n| master_of(&owners, key_slot(&rw_key(&b, n))))
        .collect();
    assert_eq!(nodes.len(), 3, "the locks span the three masters");
    for n in &names {
        rw_granted(
            b.acquire_rw(&s, n, RwMode::Read, short).unwrap(),
            "a reader",
        );
        assert!(matches!(
            b.acquire_rw(&w, n, RwMode::Write, Duration::from_secs(60))
                .unwrap(),
            RwAcquire::Busy { .. }
        ));
    }
    // The last word of an entry is its expiry (ms).
    let expires = |n: &LeaseName, field: &str| {
        b.command(&["HGET", &rw_key(&b, n), field])
            .as_str()
            .and_then(|v| v.rsplit(' ').next()?.parse::<i64>().ok())
            .unwrap_or_else(|| panic!("{n}: no entry {field}"))
    };
    let (rf, qf) = (format!("r:{s}"), format!("q:{w}"));
    let before: Vec<(i64, i64)> = names
        .iter()
        .map(|n| (expires(n, &rf), expires(n, &qf)))
        .collect();
    let by_node = b.inner.keep_alives_by_node();
    let ka = b.keep_alive(&s, Duration::from_secs(60)).unwrap();
    let waiting = b.keep_alive(&w, Duration::from_secs(60)).unwrap();
    assert_eq!(
        b.inner.keep_alives_by_node(),
        by_node + 2,
        "one script per node, not slot by slot"
    );
    // Every reader's term is listed (from the three masters), the waiting writer's none.
    let mut listed: Vec<(LeaseName, RwMode)> =
        ka.rw.into_iter().map(|t| (t.name, t.mode)).collect();
    listed.sort();
    let mut all: Vec<(LeaseName, RwMode)> =
        names.iter().map(|n| (n.clone(), RwMode::Read)).collect();
    all.sort();
    assert_eq!(listed, all);
    assert!(waiting.rw.is_empty(), "{:?}", waiting.rw);
    for (n, (r, q)) in names.iter().zip(before) {
        let (r2, q2) = (expires(n, &rf), expires(n, &qf));
        assert!(r2 - r >= 40_000, "{n}: reader's expiry {r} -> {r2}");
        assert!(q2 - q >= 40_000, "{n}: waiting writer's expiry {q} -> {q2}");
    }
    b.close_session(&s).unwrap();
    b.close_session(&w).unwrap();
    for n in &names {
        let state = b.rw_state(n).unwrap();
        assert!(
            state.readers.is_empty() && state.writers_waiting.is_empty(),
            "{n}: {state:?}"
        );
        for f in [&rf, &qf] {
            assert_eq!(
                b.command(&["HEXISTS", &rw_key(&b, n), f]).as_int(),
                Some(0),
                "{n}: close deleted {f}"
            );
        }
    }
}

/// Routed, a backend that knows no deadline of a session (opened through another backend
/// instance) reads the session hash first: it grants to the live session, and once that
/// session was closed elsewhere, it answers `SessionExpired` and its release changes nothing.
#[test]
fn cluster_rw_reads_a_session_it_knows_no_deadline_of() {
    let b = cluster();
    let other = RedisBackend::connect(&with_options(
        &cluster_url(),
        &format!("prefix={}", b.prefix),
    ))
    .unwrap();
    let long = Duration::from_secs(30);
    let s = open(&*b, long);
    let name = LeaseName::new(format!("rw-other-{}", &SessionId::random().as_str()[..8])).unwrap();
    let t = rw_granted(
        other.acquire_rw(&s, &name, RwMode::Write, long).unwrap(),
        "a writer through another backend",
    );
    assert_eq!(
        b.rw_state(&name).unwrap().writer,
        Some((s.clone(), t.token))
    );
    assert!(other.release_rw(&s, &name, RwMode::Write, t.token).unwrap());
    let t = rw_granted(
        other.acquire_rw(&s, &name, RwMode::Read, long).unwrap(),
        "a reader through another backend",
    );
    b.close_session(&s).unwrap();
    // `other` still counts on the deadline it read (the reader's entry ends by its own
    // expiry); a backend that never saw the session reads it first.
    let third = RedisBackend::connect(&with_options(
        &cluster_url(),
        &format!("prefix={}", b.prefix),
    ))
    .unwrap();
    assert!(matches!(
        third.acquire_rw(&s, &name, RwMode::Read, long),
        Err(Error::SessionExpired { .. })
    ));
    assert!(!third.release_rw(&s, &name, RwMode::Read, t.token).unwrap());
}

/// Routed, a term without a lock-delay lasts a full lease from its grant on the lock's node
/// (its holder's safety), so one taken late in its session's life outlasts the session there;
/// once this backend found the session expired (here by an acquire), the next read-write call
/// on the name ends the term at once, as the memory backend does. A waiting writer's place
/// goes the same way.
fn rw_entries_of_a_session_found_expired_end_with_the_next_call(make: fn() -> Arc<Isolated>) {
    let b = make();
    let lease = Duration::from_secs(3);
    let long = Duration::from_secs(60);
    let (s, w) = (open(&*b, lease), open(&*b, lease));
    let other = open(&*b, long);
    let opened = Instant::now();
    let name = LeaseName::new(format!("rw-gone-{}", &SessionId::random().as_str()[..8])).unwrap();
    until("most of the session's lease passed", || {
        opened.elapsed() > lease * 2 / 3
    });
    // Its entry ends a full lease from now, well after the session.
    rw_granted(
        b.acquire_rw(&s, &name, RwMode::Read, long).unwrap(),
        "a reader late in its session",
    );
    assert!(matches!(
        b.acquire_rw(&w, &name, RwMode::Write, long).unwrap(),
        RwAcquire::Busy { .. }
    ));
    let probe = LeaseName::new("rw-gone-probe").unwrap();
    for sid in [&s, &w] {
        until("the session is found expired", || {
            matches!(b.acquire(sid, &probe), Err(Error::SessionExpired { .. }))
        });
    }
    // A read of the lock here already judges them so (it writes nothing).
    let st = b.rw_state(&name).unwrap();
    assert!(
        st.readers.is_empty() && st.writers_waiting.is_empty(),
        "{st:?}"
    );
    let t = rw_granted(
        b.acquire_rw(&other, &name, RwMode::Write, Duration::ZERO)
            .unwrap(),
        "a writer at once: the reader and the waiting writer ended with their sessions",
    );
    let st = b.rw_state(&name).unwrap();
    assert!(
        st.readers.is_empty() && st.writers_waiting.is_empty() && st.delayed.is_empty(),
        "{st:?}"
    );
    assert!(b.release_rw(&other, &name, RwMode::Write, t.token).unwrap());
    b.close_session(&other).unwrap();
}

#[test]
fn rw_entries_of_a_session_found_expired_end_with_the_next_call_cluster() {
    rw_entries_of_a_session_found_expired_end_with_the_next_call(cluster);
}

#[test]
fn rw_entries_of_a_session_found_expired_end_with_the_next_call_routed_standalone() {
    rw_entries_of_a_session_found_expired_end_with_the_next_call(routed_standalone);
}
