//! Lock-delay cases: a term that ends with its session's expiry keeps its name blocked for
//! the session's delay (by the backend's clock); a release or a close does not. Each case
//! checks what the backend says (`Held` with the delay left), never wall-clock timing, and
//! on a backend without lock-delay checks that asking for one fails with `Unsupported`.

use super::backend_cases::{acquired, wait_expired};
use super::gate::GatedOpens;
use super::{lease_name, Harness};
use crate::engine::{Config, Session, SessionState};
use crate::spi::{Acquire, LeaseBackend, SessionSpec};
use crate::types::{LeaseName, Metadata, Owner, SessionId, Term};
use crate::Error;
use std::sync::Arc;
use std::time::Duration;

/// Opens a backend session with `lease` and `delay`.
pub(super) fn open_delayed(b: &dyn LeaseBackend, lease: Duration, delay: Duration) -> SessionId {
    b.open(&SessionSpec::new(lease, &Metadata::default()).lock_delay(delay))
        .expect("open with a lock-delay")
        .id
}

/// Whether `b` keeps lock-delays; if not, checks that asking for one fails at open (on the
/// SPI and on the engine) with `Unsupported`, and that a zero delay opens a plain session.
pub(super) fn supported_or_refused(h: &Harness, b: &Arc<dyn LeaseBackend>) -> bool {
    if b.supports_lock_delay() {
        return true;
    }
    let d = Duration::from_secs(1);
    let r = b.open(&SessionSpec::new(h.lease, &Metadata::default()).lock_delay(d));
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    let config = Config::builder()
        .lease(h.lease)
        .renew_interval(h.lease / 5)
        .lock_delay(d)
        .build()
        .expect("valid config");
    let r = Session::open(b.clone(), config);
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    let s = open_delayed(&**b, h.lease, Duration::ZERO);
    b.close_session(&s).unwrap();
    false
}

/// `owner` is `holder`'s term `term`, with at most `delay` left.
fn in_delay(o: &Owner, holder: &SessionId, term: &Term, delay: Duration) -> bool {
    &o.session == holder && o.token == term.token && o.remaining <= delay
}

/// A term whose session expired blocks its name for the session's lock-delay: an acquire by
/// another session answers `Held` naming the expired session and its token, with the delay
/// left (at most the delay, which with a long delay also exceeds the lease: the expired
/// session is named, not a live one), `owner` says the same, and purging expired sessions
/// changes nothing. With a short delay the name is taken once the backend says it ran out,
/// with a greater token. On a backend without lock-delay, opening with one fails with
/// `Unsupported`.
pub fn lock_delay_blocks_the_name_after_its_holders_expiry(h: &Harness) {
    let b = h.backend();
    if !supported_or_refused(h, &b) {
        return;
    }
    let (long, short) = (h.long_lease(), h.lease);
    let other = h.open(&*b, h.long_lease());
    // Both holders expire together: the long delay is checked, the short one runs out.
    let (held_long, held_short) = (
        open_delayed(&*b, h.lease, long),
        open_delayed(&*b, h.lease, short),
    );
    let (x, y) = (lease_name("delay-long"), lease_name("delay-short"));
    let (tx, ty) = (
        acquired(&*b, &held_long, &x),
        acquired(&*b, &held_short, &y),
    );
    wait_expired(h, &*b, &held_long);
    wait_expired(h, &*b, &held_short);
    // The long delay: held by the expired session, for longer than any lease it had.
    let until_delay = |b: &dyn LeaseBackend| {
        let mut seen = None;
        h.until_ok("the expired session's term is in its delay", || {
            Ok(match b.acquire(&other, &x)? {
                Acquire::Held(o) => {
                    assert!(in_delay(&o, &held_long, &tx, long), "{o:?} for {tx:?}");
                    let past_lease = o.remaining > h.lease;
                    seen = Some(o);
                    past_lease
                }
                Acquire::Acquired(t) => panic!("taken in its lock-delay: {t:?} after {tx:?}"),
            })
        });
        seen.expect("seen")
    };
    until_delay(&*b);
    let o = b.owner(&x).unwrap().expect("the owner in the delay");
    assert!(in_delay(&o, &held_long, &tx, long), "{o:?} for {tx:?}");
    b.purge_expired().unwrap();
    until_delay(&*b);
    // The short delay: every answer before the take names the expired term, then it is free.
    let mut taken = None;
    h.until_ok("the name is free after the delay", || {
        match b.acquire(&other, &y)? {
            Acquire::Held(o) => {
                assert!(in_delay(&o, &held_short, &ty, short), "{o:?} for {ty:?}")
            }
            Acquire::Acquired(t) => taken = Some(t),
        }
        Ok(taken.is_some())
    });
    let taken = taken.expect("taken");
    assert!(taken.token > ty.token, "{taken:?} after {ty:?}");
    b.close_session(&other).unwrap();
}

/// A release, and a close of the live session, free the name at once, however long the
/// session's lock-delay.
pub fn lock_delay_does_not_follow_a_release_or_a_close(h: &Harness) {
    let b = h.backend();
    if !supported_or_refused(h, &b) {
        return;
    }
    let holder = open_delayed(&*b, h.long_lease(), h.long_lease());
    let other = h.open(&*b, h.long_lease());
    let (x, y) = (lease_name("delay-release"), lease_name("delay-close"));
    let (tx, ty) = (acquired(&*b, &holder, &x), acquired(&*b, &holder, &y));
    // The holder re-acquiring gets the same term.
    assert_eq!(acquired(&*b, &holder, &x).token, tx.token);
    assert!(b.release(&holder, &x, tx.token).unwrap());
    let free = |name: &LeaseName, after: &Term| {
        let t = acquired(&*b, &other, name);
        assert!(t.token > after.token, "{t:?} after {after:?}");
    };
    free(&x, &tx);
    b.close_session(&holder).unwrap();
    free(&y, &ty);
    b.close_session(&other).unwrap();
}

/// A delay over the maximum is rejected at open; the engine opens its sessions with the
/// config's delay (a backend without lock-delay refuses it), and a lock of an engine
/// session whose keep-alives stopped gets the delay: its local expiry does not close the
/// backend session, which expires there, so the lock stays blocked past its lease.
pub fn lock_delay_holds_a_lost_lock_of_an_engine_session(h: &Harness) {
    let b = h.backend();
    if !supported_or_refused(h, &b) {
        return;
    }
    let over = Config::MAX_LOCK_DELAY + Duration::from_secs(1);
    let r = b.open(&SessionSpec::new(h.lease, &Metadata::default()).lock_delay(over));
    assert!(matches!(r, Err(Error::InvalidConfig { .. })), "{r:?}");
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
    let name = lease_name("delay-engine");
    let guard = s.lock(&name).expect("lock");
    let id = s.id();
    gate.keep_alives.hold();
    h.until("the session expires locally", || {
        s.state() == SessionState::Expired
    });
    let other = h.open(&*b, h.long_lease());
    h.until_ok("the lost lock is in its delay", || {
        Ok(match b.acquire(&other, &name)? {
            Acquire::Held(o) => {
                assert_eq!((&o.session, o.token), (&id, guard.token()), "{o:?}");
                o.remaining > h.lease
            }
            Acquire::Acquired(t) => panic!("the lost lock was freed at once: {t:?}"),
        })
    });
    gate.keep_alives.pass();
    drop(guard);
    s.close().unwrap();
    b.close_session(&other).unwrap();
}
