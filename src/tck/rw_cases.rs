//! Contract cases of read-write locks, on the backend and through the engine: exclusion,
//! readers together, writer preference, the token rule, crashed holders and waiters, and
//! cancellation. A backend without them must refuse them with `Error::Unsupported`.

use super::{lease_name, Harness};
use crate::engine::{Cancel, Event, Session};
use crate::spi::{Acquire, LeaseBackend, RwAcquire, RwMode, RwState};
use crate::types::{LeaseName, SessionId, Term, Token};
use crate::Error;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn session(h: &Harness, b: &Arc<dyn LeaseBackend>) -> Session {
    Session::open(b.clone(), h.config()).expect("open session")
}

/// On a backend without read-write locks: every call, on the backend and through the
/// engine, is refused with `Unsupported`. Returns whether the backend has them.
fn rw_or_refused(h: &Harness, b: &Arc<dyn LeaseBackend>) -> bool {
    if b.supports_rw_locks() {
        return true;
    }
    let s = h.open(&**b, h.long_lease());
    let name = lease_name("rw-none");
    let unsupported = |r: Result<(), Error>| matches!(r, Err(Error::Unsupported { .. }));
    let token = crate::Token::new(1).unwrap();
    assert!(unsupported(
        b.acquire_rw(&s, &name, RwMode::Read, h.lease).map(drop)
    ));
    assert!(unsupported(
        b.release_rw(&s, &name, RwMode::Write, token).map(drop)
    ));
    assert!(unsupported(b.leave_rw_queue(&s, &name).map(drop)));
    assert!(unsupported(b.rw_state(&name).map(drop)));
    let a = session(h, b);
    let lock = a.rw_lock(&name).unwrap();
    assert!(unsupported(lock.try_read().map(drop)));
    assert!(unsupported(lock.write_timeout(h.lease).map(drop)));
    b.close_session(&s).unwrap();
    false
}

fn granted(r: RwAcquire, what: &str) -> Term {
    match r {
        RwAcquire::Acquired(t) => t,
        other => panic!("{what}: {other:?}"),
    }
}

fn busy(r: &RwAcquire) -> bool {
    matches!(r, RwAcquire::Busy { .. })
}

/// On the backend: readers share, a writer waits and then blocks new readers, the writer
/// takes the name once the readers left, tokens follow the rule, asking again returns the
/// same term, a one-time try registers nothing, releases and leaving check their argument.
pub fn rw_backend_readers_share_writers_wait_and_tokens_follow_the_rule(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    let [r1, r2, r3, w] = [(); 4].map(|_| h.open(&*b, long));
    let name = lease_name("rw");
    assert_eq!(b.rw_state(&name).unwrap(), RwState::default(), "a new name");
    let read = |s: &SessionId| b.acquire_rw(s, &name, RwMode::Read, long).unwrap();
    let write = |s: &SessionId, p| b.acquire_rw(s, &name, RwMode::Write, p).unwrap();
    let t1 = granted(read(&r1), "a first reader");
    let t2 = granted(read(&r2), "a second reader with the first");
    assert!(t2.token > t1.token, "every term takes a new token");
    assert_eq!(granted(read(&r1), "asking again").token, t1.token);
    // A one-time try of a writer registers nothing: readers still get in.
    assert!(busy(&write(&w, Duration::ZERO)));
    let t3 = granted(read(&r3), "a reader after a writer's one-time try");
    assert!(b.release_rw(&r3, &name, RwMode::Read, t3.token).unwrap());
    // A waiting writer blocks new readers.
    match write(&w, long) {
        RwAcquire::Busy {
            writer,
            readers,
            writers_waiting,
        } => {
            assert_eq!(writer, None);
            assert_eq!(readers, 2);
            assert_eq!(writers_waiting, 1);
        }
        other => panic!("a writer while two read: {other:?}"),
    }
    let mut readers = vec![(r1.clone(), t1.token), (r2.clone(), t2.token)];
    readers.sort();
    let mut state = b.rw_state(&name).unwrap();
    state.readers.sort();
    assert_eq!(
        state,
        RwState {
            writer: None,
            readers,
            writers_waiting: vec![w.clone()],
            last_token: t3.token.get(),
            delayed: Vec::new(),
        },
        "the state with two readers and a waiting writer"
    );
    assert!(
        busy(&read(&r3)),
        "a new reader waits behind a waiting writer"
    );
    // Wrong mode or token: nothing.
    assert!(!b.release_rw(&r1, &name, RwMode::Write, t1.token).unwrap());
    assert!(!b.release_rw(&r1, &name, RwMode::Read, t2.token).unwrap());
    assert!(b.release_rw(&r1, &name, RwMode::Read, t1.token).unwrap());
    assert!(busy(&write(&w, long)), "one reader is left");
    assert!(b.release_rw(&r2, &name, RwMode::Read, t2.token).unwrap());
    let tw = granted(write(&w, long), "the writer once the readers left");
    assert!(
        tw.token > t3.token,
        "a write token is above every token before"
    );
    assert_eq!(granted(write(&w, long), "asking again").token, tw.token);
    assert!(busy(&read(&r3)), "no reader with a writer");
    assert!(busy(&write(&r1, Duration::ZERO)), "no second writer");
    assert_eq!(
        b.rw_state(&name).unwrap(),
        RwState {
            writer: Some((w.clone(), tw.token)),
            readers: vec![],
            writers_waiting: vec![],
            last_token: tw.token.get(),
            delayed: Vec::new(),
        },
        "the state with a writer"
    );
    assert!(b.release_rw(&w, &name, RwMode::Write, tw.token).unwrap());
    assert!(!b.release_rw(&w, &name, RwMode::Write, tw.token).unwrap());
    let t4 = granted(read(&r3), "a reader after the writer");
    assert!(
        t4.token > tw.token,
        "a read token is above the last write's"
    );
    // Leaving: a registered writer leaves once; readers get in after it left.
    assert!(busy(&write(&w, long)));
    assert!(busy(&read(&r1)));
    assert!(b.leave_rw_queue(&w, &name).unwrap());
    assert!(!b.leave_rw_queue(&w, &name).unwrap());
    granted(read(&r1), "a reader once the writer left");
    // A session that ended holds nothing and asks nothing.
    b.close_session(&r3).unwrap();
    assert!(matches!(
        b.acquire_rw(&r3, &name, RwMode::Read, long),
        Err(Error::SessionExpired { .. })
    ));
    assert!(!b.release_rw(&r3, &name, RwMode::Read, t4.token).unwrap());
    for s in [r1, r2, w] {
        b.close_session(&s).unwrap();
    }
}

/// A keep-alive lists every read-write term its session holds, read and write, of any number
/// of names, apart from its leases of the same names; each keep-alive after a grant or a
/// release lists the change (a backend that answers "unchanged" from a cache must count
/// read-write terms too), and a writer that only waits holds nothing.
pub fn rw_keep_alive_lists_the_sessions_read_and_write_terms(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    let [a, r, w] = [(); 3].map(|_| h.open(&*b, long));
    let (x, y) = (lease_name("rw-ka-x"), lease_name("rw-ka-y"));
    let listed = |s: &SessionId| -> BTreeSet<(LeaseName, RwMode, Token)> {
        let ka = b.keep_alive(s, long).unwrap();
        ka.rw
            .into_iter()
            .map(|t| (t.name, t.mode, t.token))
            .collect()
    };
    let leases = |s: &SessionId| -> BTreeSet<LeaseName> {
        let ka = b.keep_alive(s, long).unwrap();
        ka.leases.into_iter().map(|l| l.name).collect()
    };
    assert_eq!(listed(&a), BTreeSet::new(), "a new session holds no term");
    let read = |s: &SessionId, n: &LeaseName| b.acquire_rw(s, n, RwMode::Read, long).unwrap();
    let ax = granted(read(&a, &x), "a reader of x");
    assert_eq!(
        listed(&a),
        BTreeSet::from([(x.clone(), RwMode::Read, ax.token)])
    );
    let ay = granted(
        b.acquire_rw(&a, &y, RwMode::Write, long).unwrap(),
        "a writer of y",
    );
    let rx = granted(read(&r, &x), "a second reader of x");
    let both = BTreeSet::from([
        (x.clone(), RwMode::Read, ax.token),
        (y.clone(), RwMode::Write, ay.token),
    ]);
    assert_eq!(listed(&a), both, "after a grant");
    assert_eq!(listed(&a), both, "unchanged");
    assert_eq!(
        listed(&r),
        BTreeSet::from([(x.clone(), RwMode::Read, rx.token)])
    );
    // A lease of the same name is a name of its own: listed with the leases only.
    assert!(matches!(b.acquire(&a, &x).unwrap(), Acquire::Acquired(_)));
    assert_eq!(leases(&a), BTreeSet::from([x.clone()]));
    assert_eq!(
        listed(&a),
        both,
        "a lease of the same name is not a read-write term"
    );
    // A writer that waits holds nothing.
    assert!(busy(&b.acquire_rw(&w, &x, RwMode::Write, long).unwrap()));
    assert_eq!(listed(&w), BTreeSet::new(), "a waiting writer");
    assert!(b.release_rw(&a, &x, RwMode::Read, ax.token).unwrap());
    assert_eq!(
        listed(&a),
        BTreeSet::from([(y.clone(), RwMode::Write, ay.token)]),
        "after a release"
    );
    assert!(b.release_rw(&a, &y, RwMode::Write, ay.token).unwrap());
    assert_eq!(listed(&a), BTreeSet::new(), "after the last release");
    assert_eq!(
        leases(&a),
        BTreeSet::from([x.clone()]),
        "the lease is still held"
    );
    assert!(b.release_rw(&r, &x, RwMode::Read, rx.token).unwrap());
    let wx = granted(
        b.acquire_rw(&w, &x, RwMode::Write, long).unwrap(),
        "the writer",
    );
    assert_eq!(
        listed(&w),
        BTreeSet::from([(x.clone(), RwMode::Write, wx.token)])
    );
    assert_eq!(listed(&r), BTreeSet::new());
    for s in [a, r, w] {
        b.close_session(&s).unwrap();
    }
}

/// Several sessions, each with a reader thread and a writer thread, contend: never a writer
/// with a reader or another writer; a write token is above every token seen before it and
/// a read token above the last write's.
pub fn rw_locks_exclude_under_contention(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let name = lease_name("rw-contend");
    let sessions: Vec<Session> = (0..3).map(|_| session(h, &b)).collect();
    let readers = AtomicI64::new(0);
    let writers = AtomicI64::new(0);
    let max_seen = AtomicU64::new(0);
    let last_write = AtomicU64::new(0);
    let (reads, writes) = (AtomicU64::new(0), AtomicU64::new(0));
    // One reader and one writer per session: a session holds one term of a name.
    let reader_sessions: Vec<Session> = (0..3).map(|_| session(h, &b)).collect();
    let patience = h.patience;
    std::thread::scope(|scope| {
        for s in &sessions {
            let lock = s.rw_lock(&name).unwrap();
            let (readers, writers, max_seen, last_write, writes) =
                (&readers, &writers, &max_seen, &last_write, &writes);
            scope.spawn(move || {
                for _ in 0..8 {
                    let g = lock.write_timeout(patience).expect("a write term");
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with a reader");
                    let t = g.token().get();
                    assert!(t > max_seen.fetch_max(t, Ordering::SeqCst), "write token");
                    last_write.store(t, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::SeqCst);
                    writers.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().expect("unlock");
                }
            });
        }
        for s in &reader_sessions {
            let lock = s.rw_lock(&name).unwrap();
            let (readers, writers, max_seen, last_write, reads) =
                (&readers, &writers, &max_seen, &last_write, &reads);
            scope.spawn(move || {
                for _ in 0..8 {
                    let g = lock.read_timeout(patience).expect("a read term");
                    readers.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    let t = g.token().get();
                    assert!(t > last_write.load(Ordering::SeqCst), "read token");
                    max_seen.fetch_max(t, Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::SeqCst);
                    readers.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().expect("unlock");
                }
            });
        }
    });
    assert_eq!(reads.load(Ordering::SeqCst), 24);
    assert_eq!(writes.load(Ordering::SeqCst), 24);
}

/// Readers of different sessions hold the name together; a writer gets it once both left,
/// with a token above both; closing a session ends its term with `LockLost`.
pub fn rw_readers_hold_in_parallel(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let (a, c, w) = (session(h, &b), session(h, &b), session(h, &b));
    let name = lease_name("rw-parallel");
    let ra = a.rw_lock(&name).unwrap().read().unwrap();
    let rc = c
        .rw_lock(&name)
        .unwrap()
        .try_read()
        .unwrap()
        .expect("a second reader");
    assert!(ra.is_valid() && rc.is_valid(), "both read at once");
    assert_eq!(ra.mode(), RwMode::Read);
    let lock = w.rw_lock(&name).unwrap();
    assert!(
        lock.try_write().unwrap().is_none(),
        "no writer with readers"
    );
    ra.unlock().unwrap();
    assert!(lock.try_write().unwrap().is_none(), "one reader is left");
    let (rc_token, lost) = (rc.token(), rc.lost().clone());
    c.close().unwrap();
    assert!(matches!(
        lost.recv_timeout(h.patience),
        Ok(Event::LockLost { term, .. }) if term.token == rc_token
    ));
    drop(rc);
    let g = lock
        .write_timeout(h.patience)
        .expect("the writer after the readers");
    assert!(g.token() > rc_token);
    assert!(g.check().is_ok());
}

/// A writer that waits makes new readers wait; they read after it wrote, with a token above
/// its token.
pub fn rw_a_waiting_writer_blocks_new_readers(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let (a, w, r) = (session(h, &b), session(h, &b), session(h, &b));
    let name = lease_name("rw-prefer");
    let held = a.rw_lock(&name).unwrap().read().unwrap();
    let wlock = w.rw_lock(&name).unwrap();
    let rlock = r.rw_lock(&name).unwrap();
    let long = h.patience * 2;
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| wlock.write_timeout(long).expect("the writer"));
        // Until the writer registered, a new reader still gets in (and leaves at once).
        h.until("a waiting writer keeps new readers out", || {
            match rlock.try_read().unwrap() {
                Some(g) => {
                    g.unlock().unwrap();
                    false
                }
                None => true,
            }
        });
        let reader = scope.spawn(|| rlock.read_timeout(long).expect("the reader"));
        assert!(!writer.is_finished(), "a writer with a reader");
        held.unlock().unwrap();
        let g = writer.join().unwrap();
        let wt = g.token();
        g.unlock().unwrap();
        let rg = reader.join().unwrap();
        assert!(rg.token() > wt, "a read token above the last write's");
    });
}

/// A crashed reader, a crashed writer and a crashed waiting writer each free the name once
/// their session expired (within a lease).
pub fn rw_crashed_holders_and_waiting_writers_free_the_name(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let name = lease_name("rw-crash");
    let live = session(h, &b);
    let lock = live.rw_lock(&name).unwrap();
    let wait = h.patience + h.lease * 2;
    // A crashed reader: the writer gets in after its session expired.
    let crashed = h.open(&*b, h.lease);
    granted(
        b.acquire_rw(&crashed, &name, RwMode::Read, h.lease)
            .unwrap(),
        "a reader",
    );
    let g = lock
        .write_timeout(wait)
        .expect("a write after the reader crashed");
    g.unlock().unwrap();
    // A crashed writer: a reader gets in after its session expired.
    let crashed = h.open(&*b, h.lease);
    granted(
        b.acquire_rw(&crashed, &name, RwMode::Write, h.lease)
            .unwrap(),
        "a writer",
    );
    let g = lock
        .read_timeout(wait)
        .expect("a read after the writer crashed");
    // A crashed waiting writer (it waits behind this reader): new readers get in after its
    // session expired.
    let crashed = h.open(&*b, h.lease);
    assert!(busy(
        &b.acquire_rw(&crashed, &name, RwMode::Write, h.long_lease())
            .unwrap()
    ));
    let other = session(h, &b);
    let olock = other.rw_lock(&name).unwrap();
    assert!(
        olock.try_read().unwrap().is_none(),
        "the waiting writer keeps readers out"
    );
    let og = olock
        .read_timeout(wait)
        .expect("a read after the waiting writer crashed");
    assert!(g.is_valid() && og.is_valid());
}

/// A cancelled read or write wait ends with `Cancelled`; a cancelled writer no longer keeps
/// readers out.
pub fn rw_cancel_ends_waits_and_withdraws_the_writer(h: &Harness) {
    let b = h.backend();
    if !rw_or_refused(h, &b) {
        return;
    }
    let (a, w, r) = (session(h, &b), session(h, &b), session(h, &b));
    let name = lease_name("rw-cancel");
    let alock = a.rw_lock(&name).unwrap();
    let wlock = w.rw_lock(&name).unwrap();
    let rlock = r.rw_lock(&name).unwrap();
    // A reader waits behind a writer; cancelled.
    let held = alock.write().unwrap();
    let cancel = Cancel::new();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| rlock.read_cancellable(None, &cancel).map(drop));
        cancel.cancel();
        let res = waiter.join().unwrap();
        assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
    });
    held.unlock().unwrap();
    // A writer waits behind a reader; cancelled, it no longer keeps readers out.
    let held = alock.read().unwrap();
    let cancel = Cancel::new();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| wlock.write_cancellable(None, &cancel).map(drop));
        h.until("the writer registered", || {
            match rlock.try_read().unwrap() {
                Some(g) => {
                    g.unlock().unwrap();
                    false
                }
                None => true,
            }
        });
        cancel.cancel();
        let res = waiter.join().unwrap();
        assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
    });
    assert!(
        rlock.try_read().unwrap().is_some(),
        "a cancelled writer keeps no reader out"
    );
    drop(held);
}
