//! Lock-delay cases of read-write locks: a write term whose session expired blocks every new
//! term of its name for the session's delay, a read term new writers only; a release, a
//! close and a waiting writer's registration leave no delay. Each case checks what the
//! backend says (`Busy` naming the ended term, `rw_state` listing it with the delay left),
//! never wall-clock timing.

use super::backend_cases::wait_expired;
use super::delay_cases::{open_delayed, supported_or_refused};
use super::gate::GatedOpens;
use super::{lease_name, Harness};
use crate::engine::{Config, Session, SessionState};
use crate::spi::{LeaseBackend, RwAcquire, RwMode};
use crate::types::{LeaseName, SessionId, Term};
use crate::Result;
use std::sync::Arc;
use std::time::Duration;

/// Whether `b` keeps read-write locks and lock-delays (the refusals of each are checked by
/// their own cases).
fn both(h: &Harness, b: &Arc<dyn LeaseBackend>) -> bool {
    b.supports_rw_locks() && supported_or_refused(h, b)
}

fn take(b: &dyn LeaseBackend, s: &SessionId, name: &LeaseName, mode: RwMode) -> Term {
    match b.acquire_rw(s, name, mode, Duration::ZERO) {
        Ok(RwAcquire::Acquired(t)) => t,
        other => panic!("a {} term of {name}: {other:?}", mode.as_str()),
    }
}

/// The delay left of `session`'s `mode` term `token` of `name`, as `rw_state` lists it; no
/// other delayed term and no live holder may be listed.
fn delay_left(
    b: &dyn LeaseBackend,
    name: &LeaseName,
    session: &SessionId,
    mode: RwMode,
    token: &Term,
    delay: Duration,
) -> Result<Option<Duration>> {
    let st = b.rw_state(name)?;
    assert!(st.writer.is_none(), "a live writer of {name}: {st:?}");
    assert!(
        st.delayed.len() <= 1,
        "more than one delayed term of {name}: {st:?}"
    );
    Ok(st.delayed.first().map(|d| {
        assert_eq!(
            (&d.session, d.mode, d.token),
            (session, mode, token.token),
            "{name}: {st:?}"
        );
        assert!(
            d.remaining <= delay,
            "{name}: more than the delay left: {st:?}"
        );
        d.remaining
    }))
}

/// A release by an expired session is refused or changes nothing.
fn release_refused(b: &dyn LeaseBackend, s: &SessionId, name: &LeaseName, mode: RwMode, t: &Term) {
    match b.release_rw(s, name, mode, t.token) {
        Ok(false) => {}
        Err(e) if e.is_session_expired() => {}
        other => panic!("an expired session's release of {name}: {other:?}"),
    }
}

/// A write term whose session expired blocks its name for the session's lock-delay: a
/// reader and a writer of another session are `Busy` naming the expired writer, and
/// `rw_state` lists the term with at most the delay left (with a long delay, more than any
/// lease it had); a read term's delay blocks writers while new readers are granted. Purging
/// expired sessions changes nothing, nor does a release by the expired session. With a
/// short delay a writer takes the name once the backend says it ran out, with a greater
/// token.
pub fn rw_lock_delay_blocks_after_an_expired_writer_or_reader(h: &Harness) {
    let b = h.backend();
    if !both(h, &b) {
        return;
    }
    let (long, short) = (h.long_lease(), h.lease);
    let other = h.open(&*b, h.long_lease());
    let open = |d| open_delayed(&*b, h.lease, d);
    let (w_long, r_long, w_short, r_short) = (open(long), open(long), open(short), open(short));
    let (x, z) = (lease_name("rwd-w-long"), lease_name("rwd-r-long"));
    let (y, v) = (lease_name("rwd-w-short"), lease_name("rwd-r-short"));
    let tx = take(&*b, &w_long, &x, RwMode::Write);
    let tz = take(&*b, &r_long, &z, RwMode::Read);
    let ty = take(&*b, &w_short, &y, RwMode::Write);
    let tv = take(&*b, &r_short, &v, RwMode::Read);
    for s in [&w_long, &r_long, &w_short, &r_short] {
        wait_expired(h, &*b, s);
    }
    release_refused(&*b, &w_long, &x, RwMode::Write, &tx);
    release_refused(&*b, &r_long, &z, RwMode::Read, &tz);

    // The long write delay: no reader, no writer, for longer than any lease it had.
    let writer_delay = |b: &dyn LeaseBackend| {
        h.until_ok("the expired writer's term is in its delay", || {
            for mode in [RwMode::Read, RwMode::Write] {
                match b.acquire_rw(&other, &x, mode, Duration::ZERO)? {
                    RwAcquire::Busy { writer, .. } => {
                        assert_eq!(writer.as_ref(), Some(&w_long), "{}", mode.as_str())
                    }
                    RwAcquire::Acquired(t) => {
                        panic!(
                            "a {} term in a write delay: {t:?} after {tx:?}",
                            mode.as_str()
                        )
                    }
                }
            }
            let left = delay_left(b, &x, &w_long, RwMode::Write, &tx, long)?;
            Ok(left.is_some_and(|d| d > h.lease))
        })
    };
    // The long read delay: new readers share it, writers wait.
    let reader_delay = |b: &dyn LeaseBackend| {
        let t = take(b, &other, &z, RwMode::Read);
        assert!(t.token > tz.token, "{t:?} after {tz:?}");
        assert!(b.release_rw(&other, &z, RwMode::Read, t.token).unwrap());
        h.until_ok("the expired reader's term is in its delay", || {
            match b.acquire_rw(&other, &z, RwMode::Write, Duration::ZERO)? {
                RwAcquire::Busy {
                    writer, readers, ..
                } => assert_eq!((writer, readers), (None, 1), "one delayed reader"),
                RwAcquire::Acquired(t) => panic!("a writer in a read delay: {t:?} after {tz:?}"),
            }
            let left = delay_left(b, &z, &r_long, RwMode::Read, &tz, long)?;
            Ok(left.is_some_and(|d| d > h.lease))
        })
    };
    writer_delay(&*b);
    reader_delay(&*b);
    b.purge_expired().unwrap();
    writer_delay(&*b);
    reader_delay(&*b);

    // The short delays run out: every answer before names the ended term.
    for (name, holder, mode, ended) in [
        (&y, &w_short, RwMode::Write, &ty),
        (&v, &r_short, RwMode::Read, &tv),
    ] {
        let mut taken = None;
        h.until_ok("the name is free after the delay", || {
            match b.acquire_rw(&other, name, RwMode::Write, Duration::ZERO)? {
                RwAcquire::Busy {
                    writer, readers, ..
                } => {
                    let blocker = match mode {
                        RwMode::Write => (Some(holder.clone()), 0),
                        RwMode::Read => (None, 1),
                    };
                    assert_eq!((writer, readers), blocker, "{name}");
                    delay_left(&*b, name, holder, mode, ended, short)?;
                }
                RwAcquire::Acquired(t) => taken = Some(t),
            }
            Ok(taken.is_some())
        });
        let taken = taken.expect("taken");
        assert!(taken.token > ended.token, "{taken:?} after {ended:?}");
        assert!(b.rw_state(name).unwrap().delayed.is_empty());
        assert!(b
            .release_rw(&other, name, RwMode::Write, taken.token)
            .unwrap());
    }
    b.close_session(&other).unwrap();
}

/// A release and a close of the live session free the name at once, however long the
/// session's lock-delay, and a waiting writer whose session expired leaves no delay.
pub fn rw_lock_delay_does_not_follow_a_release_a_close_or_a_wait(h: &Harness) {
    let b = h.backend();
    if !both(h, &b) {
        return;
    }
    let holder = open_delayed(&*b, h.long_lease(), h.long_lease());
    let other = h.open(&*b, h.long_lease());
    let (x, y, z) = (
        lease_name("rwd-release"),
        lease_name("rwd-close-r"),
        lease_name("rwd-close-w"),
    );
    let free = |name: &LeaseName, after: &Term| {
        let t = take(&*b, &other, name, RwMode::Write);
        assert!(t.token > after.token, "{t:?} after {after:?}");
        assert!(b.rw_state(name).unwrap().delayed.is_empty());
        assert!(b.release_rw(&other, name, RwMode::Write, t.token).unwrap());
    };
    let tx = take(&*b, &holder, &x, RwMode::Write);
    assert!(b.release_rw(&holder, &x, RwMode::Write, tx.token).unwrap());
    free(&x, &tx);
    let ty = take(&*b, &holder, &y, RwMode::Read);
    let tz = take(&*b, &holder, &z, RwMode::Write);
    b.close_session(&holder).unwrap();
    free(&y, &ty);
    free(&z, &tz);

    // A writer with a delay waits behind a reader, then its session expires.
    let w = lease_name("rwd-waiter");
    let waiter = open_delayed(&*b, h.lease, h.long_lease());
    let tr = take(&*b, &other, &w, RwMode::Read);
    let r = b.acquire_rw(&waiter, &w, RwMode::Write, h.long_lease());
    assert!(matches!(r, Ok(RwAcquire::Busy { .. })), "{r:?}");
    wait_expired(h, &*b, &waiter);
    assert!(b.release_rw(&other, &w, RwMode::Read, tr.token).unwrap());
    let tw = take(&*b, &other, &w, RwMode::Write);
    assert!(tw.token > tr.token, "{tw:?} after {tr:?}");
    assert!(b.rw_state(&w).unwrap().delayed.is_empty());
    assert!(b.release_rw(&other, &w, RwMode::Write, tw.token).unwrap());
    b.close_session(&other).unwrap();
}

/// A write term of an engine session whose keep-alives stopped gets the delay: its local
/// expiry does not end the term on the backend, which keeps it blocked past its lease.
pub fn rw_lock_delay_holds_a_lost_write_term_of_an_engine_session(h: &Harness) {
    let b = h.backend();
    if !both(h, &b) {
        return;
    }
    let gate = Arc::new(GatedOpens::new(b.clone(), h.patience));
    let gated: Arc<dyn LeaseBackend> = gate.clone();
    let config = Config::builder()
        .lease(h.lease)
        .renew_interval(h.lease / 5)
        .reopen_on_expiry(false)
        .lock_delay(h.long_lease())
        .build()
        .expect("valid config");
    let s = Session::open(gated, config).expect("open with a lock-delay");
    let name = lease_name("rwd-engine");
    let guard = s.rw_lock(&name).unwrap().write().expect("write");
    let id = s.id();
    gate.keep_alives.hold();
    h.until("the session expires locally", || {
        s.state() == SessionState::Expired
    });
    let other = h.open(&*b, h.long_lease());
    h.until_ok("the lost write term is in its delay", || {
        match b.acquire_rw(&other, &name, RwMode::Read, Duration::ZERO)? {
            RwAcquire::Busy { writer, .. } => assert_eq!(writer.as_ref(), Some(&id)),
            RwAcquire::Acquired(t) => panic!("the lost write term was freed at once: {t:?}"),
        }
        // Live on the backend a little longer than locally, then in its delay.
        let st = b.rw_state(&name)?;
        if let Some(w) = &st.writer {
            assert_eq!(w, &(id.clone(), guard.token()), "{st:?}");
            return Ok(false);
        }
        let left = delay_left(&*b, &name, &id, RwMode::Write, guard.term(), h.long_lease())?;
        Ok(left.is_some_and(|d| d > h.lease))
    });
    // The guard's release, queued after the loss, changes nothing on the backend.
    drop(guard);
    gate.keep_alives.pass();
    s.close().unwrap();
    let r = b.acquire_rw(&other, &name, RwMode::Write, Duration::ZERO);
    assert!(matches!(r, Ok(RwAcquire::Busy { .. })), "{r:?}");
    b.close_session(&other).unwrap();
}
