//! The memory backend's own unit tests (the TCK covers the contract).

use super::*;
use crate::ManualClock;

/// The window boundaries on a manual clock: a claim ends exactly at `at_most`, a
/// finished one exactly at started + `at_least`, a running one with its session.
#[test]
fn job_claims_end_at_their_bounds() {
    let clock = Arc::new(ManualClock::new());
    let b = MemoryBackend::with_clock(clock.clone());
    let (m, s) = (Metadata::default(), Duration::from_secs);
    let a = b.open_session(s(100), &m).unwrap().id;
    let c = b.open_session(s(100), &m).unwrap().id;
    let n = LeaseName::new("job").unwrap();
    let claimed = |r: JobClaim| match r {
        JobClaim::Claimed { token, remaining } => (token.get(), remaining),
        other => panic!("{other:?}"),
    };
    let left = |r: JobClaim| match r {
        JobClaim::Busy { remaining } => remaining,
        other => panic!("{other:?}"),
    };
    assert_eq!(claimed(b.claim_job(&a, &n, s(10)).unwrap()), (1, s(10)));
    clock.advance(s(4));
    assert_eq!(left(b.claim_job(&c, &n, s(10)).unwrap()), s(6));
    clock.advance(s(6));
    // at_most passed: free, and the late finish changes nothing.
    let t2 = claimed(b.claim_job(&c, &n, s(10)).unwrap()).0;
    assert_eq!(t2, 2);
    let one = Token::new(1).unwrap();
    assert!(!b.finish_job(&a, &n, one, s(0)).unwrap());
    clock.advance(s(1));
    assert!(b.finish_job(&c, &n, Token::new(2).unwrap(), s(3)).unwrap());
    assert_eq!(left(b.claim_job(&a, &n, s(10)).unwrap()), s(2));
    b.close_session(&c).unwrap();
    assert_eq!(left(b.claim_job(&a, &n, s(10)).unwrap()), s(2));
    clock.advance(s(2));
    assert_eq!(claimed(b.claim_job(&a, &n, s(10)).unwrap()).0, 3);
    // A running claim ends with its session.
    b.close_session(&a).unwrap();
    let d = b.open_session(s(100), &m).unwrap().id;
    assert_eq!(claimed(b.claim_job(&d, &n, s(10)).unwrap()).0, 4);
    // A finish whose at_least already passed frees the name at once.
    clock.advance(s(5));
    assert!(b.finish_job(&d, &n, Token::new(4).unwrap(), s(1)).unwrap());
    assert_eq!(claimed(b.claim_job(&d, &n, s(10)).unwrap()).0, 5);
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        crate::types::limits::MAX_LEASE * 2,
    ] {
        assert!(matches!(
            b.claim_job(&d, &n, bad),
            Err(Error::InvalidConfig { .. })
        ));
    }
}

/// The lock-delay's bounds on a manual clock: the name is blocked from the holder's
/// expiry until exactly expiry + delay, also after the holder's row was purged; a release
/// and a close of the live session free it at once.
#[test]
fn a_lock_delay_blocks_until_expiry_plus_delay() {
    let clock = Arc::new(ManualClock::new());
    let b = MemoryBackend::with_clock(clock.clone());
    let (m, s) = (Metadata::default(), Duration::from_secs);
    let n = LeaseName::new("delayed").unwrap();
    let other = b.open_session(s(1000), &m).unwrap().id;
    let held_by = |r: Acquire| match r {
        Acquire::Held(o) => (o.session, o.token.get(), o.remaining),
        other => panic!("{other:?}"),
    };
    for purged in [false, true] {
        let a = b
            .open(&crate::spi::SessionSpec::new(s(10), &m).lock_delay(s(5)))
            .unwrap()
            .id;
        let Acquire::Acquired(t) = b.acquire(&a, &n).unwrap() else {
            panic!("free");
        };
        clock.advance(s(10));
        if purged {
            assert_eq!(b.purge_expired().unwrap(), 1);
            assert!(!b.tables.lock().sessions.contains_key(&a));
        }
        let expect = (a.clone(), t.token.get(), s(5));
        assert_eq!(held_by(b.acquire(&other, &n).unwrap()), expect);
        let o = b.owner(&n).unwrap().unwrap();
        assert_eq!((o.session, o.token.get(), o.remaining), expect);
        // Closing the expired session changes nothing.
        b.close_session(&a).unwrap();
        clock.advance(s(4));
        assert_eq!(held_by(b.acquire(&other, &n).unwrap()).2, s(1));
        clock.advance(s(1));
        assert_eq!(b.owner(&n).unwrap(), None);
        let Acquire::Acquired(next) = b.acquire(&other, &n).unwrap() else {
            panic!("free after the delay");
        };
        assert!(next.token > t.token);
        assert!(b.release(&other, &n, next.token).unwrap());
    }
    // A release and a close of the live session free at once.
    let a = b
        .open(&crate::spi::SessionSpec::new(s(10), &m).lock_delay(s(5)))
        .unwrap()
        .id;
    let Acquire::Acquired(t) = b.acquire(&a, &n).unwrap() else {
        panic!("free");
    };
    assert!(b.release(&a, &n, t.token).unwrap());
    assert!(
        matches!(b.acquire(&other, &n).unwrap(), Acquire::Acquired(t) if b.release(&other, &n, t.token).unwrap())
    );
    assert!(matches!(b.acquire(&a, &n).unwrap(), Acquire::Acquired(_)));
    b.close_session(&a).unwrap();
    assert!(matches!(
        b.acquire(&other, &n).unwrap(),
        Acquire::Acquired(_)
    ));
    assert!(matches!(
        b.open(
            &crate::spi::SessionSpec::new(s(10), &m)
                .lock_delay(crate::types::limits::MAX_LOCK_DELAY * 2)
        ),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn opens_purge_crashed_sessions_at_most_once_per_interval() {
    let clock = Arc::new(ManualClock::new());
    let b = MemoryBackend::with_clock(clock.clone());
    let m = Metadata::default();
    let g = GroupName::new("g").unwrap();
    let crashed = b.open_session(Duration::from_secs(1), &m).unwrap().id;
    b.join(&crashed, &g).unwrap();
    clock.advance(Duration::from_secs(2));
    b.open_session(Duration::from_secs(100), &m).unwrap();
    assert!(
        b.tables.lock().sessions.contains_key(&crashed),
        "purged too early"
    );
    clock.advance(PURGE_INTERVAL);
    b.open_session(Duration::from_secs(100), &m).unwrap();
    assert!(!b.tables.lock().sessions.contains_key(&crashed));
    assert!(!b.tables.lock().groups.contains_key(&g));
}
