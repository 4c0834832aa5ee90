//! Locks: taking one (plain, try, with a timeout, cancellable), the held lock's calls, and a
//! fair lock's queue of waiters.

use crate::args::{fill, out, put, put_text, text, value_arg};
use crate::cancel::{cancel_of, deadline};
use crate::handles::{get, register};
use crate::objects::{
    held_check, held_end, held_free, held_is_valid, held_next_event, held_term, held_token,
    LockObj, SessionObj,
};
use crate::results::{free_result, hand_out, items_ptr, WAITER_LIST};
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{
    simba_cancel, simba_event, simba_lock, simba_session, simba_status, simba_waiter,
    simba_waiter_list, SIMBA_SESSION_ID_LEN,
};
use lease::{LockGuard, Session};
use std::ffi::c_char;
use std::time::Duration;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{observer::simba_observer_leader_value, session::simba_session_next_event};

fn lock_with(
    session: *const simba_session,
    name: *const c_char,
    out_lock: *mut *mut simba_lock,
    how: impl FnOnce(&Session, &str) -> R<LockGuard>,
) -> simba_status {
    ffi(|| {
        let o = out(out_lock, "out_lock")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let name = text(name, "name")?;
        let guard = how(&s.session, name)?;
        put(o, register(LockObj::new(guard))?);
        Ok(())
    })
}

/// Takes the lock `name` (NUL-terminated UTF-8), waiting as long as it takes.
/// `*out_lock` is the held lock. There is no time limit: the call ends early only when
/// another thread closes or frees the session (`SIMBA_CLOSED`); use
/// [`simba_session_lock_timeout`] for a bound, [`simba_session_lock_cancellable`] to end it
/// from another thread.
#[no_mangle]
pub unsafe extern "C" fn simba_session_lock(
    session: *const simba_session,
    name: *const c_char,
    out_lock: *mut *mut simba_lock,
) -> simba_status {
    lock_with(session, name, out_lock, |s, n| Ok(s.lock(n)?))
}

/// Takes the lock `name` (NUL-terminated UTF-8) if it is free now; `SIMBA_BUSY` (and
/// `*out_lock` NULL) if someone holds it.
#[no_mangle]
pub unsafe extern "C" fn simba_session_try_lock(
    session: *const simba_session,
    name: *const c_char,
    out_lock: *mut *mut simba_lock,
) -> simba_status {
    lock_with(session, name, out_lock, |s, n| {
        s.try_lock(n)?
            .ok_or_else(|| Fail::new(SIMBA_BUSY, format!("lock {n} is held by someone else")))
    })
}

/// Takes the lock `name` (NUL-terminated UTF-8), waiting at most `timeout_ms`
/// (`SIMBA_TIMEOUT` after that).
#[no_mangle]
pub unsafe extern "C" fn simba_session_lock_timeout(
    session: *const simba_session,
    name: *const c_char,
    timeout_ms: u64,
    out_lock: *mut *mut simba_lock,
) -> simba_status {
    lock_with(session, name, out_lock, |s, n| {
        Ok(s.lock_timeout(n, Duration::from_millis(timeout_ms))?)
    })
}

/// Takes the lock `name` (NUL-terminated UTF-8), waiting at most `timeout_ms`
/// (`SIMBA_TIMEOUT` after that; `SIMBA_FOREVER`: no limit) or until `cancel` is fired by any
/// thread (`SIMBA_CANCELLED`, at once if it was fired before the call), or the session is
/// closed or freed (`SIMBA_CLOSED`). `*out_lock` is the held lock; NULL on any failure
/// (nothing is held then). `cancel` NULL gives `SIMBA_NULL_ARGUMENT` (use
/// [`simba_session_lock_timeout`] for no token).
#[no_mangle]
pub unsafe extern "C" fn simba_session_lock_cancellable(
    session: *const simba_session,
    name: *const c_char,
    timeout_ms: u64,
    cancel: *const simba_cancel,
    out_lock: *mut *mut simba_lock,
) -> simba_status {
    lock_with(session, name, out_lock, |s, n| {
        let cancel = cancel_of(cancel)?;
        Ok(s.lock_cancellable(n, deadline(timeout_ms), &cancel)?)
    })
}

/// The lock's fencing token (also after it was lost or unlocked): pass it to the protected
/// resource, which rejects tokens lower than the highest it has seen.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_token(
    lock: *const simba_lock,
    out_token: *mut u64,
) -> simba_status {
    held_token::<LockGuard, _>(lock, out_token)
}

/// Writes the lock's name (NUL-terminated) into `buf` of `buf_len` bytes (at least
/// `SIMBA_NAME_LEN` always suffices).
#[no_mangle]
pub unsafe extern "C" fn simba_lock_name(
    lock: *const simba_lock,
    buf: *mut c_char,
    buf_len: usize,
) -> simba_status {
    ffi(|| {
        let buf = out(buf, "buf")?;
        put_text(&get::<LockObj, _>(lock)?.name, buf, buf_len)
    })
}

/// Whether the lock is still held (session live, term's local deadline ahead); false once
/// lost or unlocked.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_is_valid(
    lock: *const simba_lock,
    out_valid: *mut bool,
) -> simba_status {
    held_is_valid::<LockGuard, _>(lock, out_valid)
}

/// The fencing token if the lock is still held, else `SIMBA_LEASE_LOST`: call it before
/// every protected write.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_check(
    lock: *const simba_lock,
    out_token: *mut u64,
) -> simba_status {
    held_check::<LockGuard, _>(lock, out_token)
}

/// The lock's term if it is still held: `*out_token` its fencing token and `*out_valid_ms`
/// how long it stays valid from now if no keep-alive succeeds meanwhile (each one that does
/// moves it ahead; a protected write that would take longer should not start).
/// `SIMBA_LEASE_LOST` if the lock was lost or unlocked. Either out-pointer may be NULL.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_term(
    lock: *const simba_lock,
    out_token: *mut u64,
    out_valid_ms: *mut u64,
) -> simba_status {
    held_term::<LockGuard, _>(lock, out_token, out_valid_ms)
}

/// Sets the value of this lock's term (`value_len` bytes of UTF-8 at `value`, no NUL
/// needed; NULL allowed when `value_len` is 0, which clears it; at most
/// `SIMBA_MAX_VALUE_LEN`, else `SIMBA_INVALID_ARGUMENT`), e.g. who holds it and why, on the
/// backend before returning (one backend call): every read of the owner
/// ([`simba_observer_leader_value`]) shows it until the term ends, and observers get a
/// `LEADER_CHANGED`. `SIMBA_LEASE_LOST` if the lock is no longer held. Not kept after the
/// call. The backend call does not block the handle's other calls: `simba_lock_free`,
/// `simba_lock_is_valid`, `simba_lock_check` and `simba_lock_term` on other threads (or in
/// a callback) return without waiting for it; [`simba_lock_unlock`] waits for it.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_set_value(
    lock: *const simba_lock,
    value: *const c_char,
    value_len: usize,
) -> simba_status {
    ffi(|| {
        let l = get::<LockObj, _>(lock)?;
        let value = value_arg(value, value_len)?;
        // The backend call runs outside the handle's mutex.
        Ok(l.shared()?.set_value(value)?)
    })
}

/// Releases the lock now (one backend call), reporting a failure; `SIMBA_LEASE_LOST` if it
/// was already lost. A second unlock gives `SIMBA_CLOSED`. If a [`simba_lock_set_value`] on
/// this lock is in flight on another thread, unlock waits until it returned (bounded by the
/// URL's time limits), then releases. The handle stays allocated: free it with
/// [`simba_lock_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_lock_unlock(lock: *const simba_lock) -> simba_status {
    held_end::<LockGuard, _>(lock)
}

/// Waits up to `timeout_ms` for this lock's loss event (`LOCK_LOST`); see
/// [`simba_session_next_event`] for the results.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_next_event(
    lock: *const simba_lock,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    held_next_event::<LockGuard, _>(lock, timeout_ms, out_event)
}

/// Frees the lock handle; a lock still held is released at once locally and on the
/// backend from the session's work thread (no network call on this thread, and no wait for
/// one). If a [`simba_lock_set_value`] on this lock is in flight on another thread, the
/// release happens when that call returns.
#[no_mangle]
pub unsafe extern "C" fn simba_lock_free(lock: *mut simba_lock) -> simba_status {
    held_free::<LockGuard, _>(lock)
}

/// A waiter list with its items; `c` first, so a pointer to the box is a pointer to the C
/// struct.
#[repr(C)]
struct WaitersBox {
    c: simba_waiter_list,
    _items: Vec<simba_waiter>,
}

/// The sessions waiting for the fair lock `name` (NUL-terminated UTF-8), first first (see
/// `simba_config.fair_locks`); one backend call. `*out_list` is a list to free with
/// [`simba_waiter_list_free`]. `SIMBA_UNSUPPORTED` on a backend without queues.
#[no_mangle]
pub unsafe extern "C" fn simba_session_lock_queue(
    session: *const simba_session,
    name: *const c_char,
    out_list: *mut *mut simba_waiter_list,
) -> simba_status {
    ffi(|| {
        let o = out(out_list, "out_list")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let name = text(name, "name")?;
        let items: Vec<simba_waiter> = s
            .session
            .lock_queue(name)?
            .iter()
            .map(|id| {
                let mut w = simba_waiter {
                    session: [0; SIMBA_SESSION_ID_LEN],
                };
                fill(&mut w.session, id.as_str());
                w
            })
            .collect();
        let b = WaitersBox {
            c: simba_waiter_list {
                items: items_ptr(&items),
                len: items.len(),
            },
            _items: items,
        };
        put(o, hand_out(b, WAITER_LIST).cast());
        Ok(())
    })
}

/// Frees a list from [`simba_session_lock_queue`]. NULL is ignored; a list freed already
/// gives `SIMBA_INVALID_HANDLE` unless its memory was reused by a newer list. Reading the
/// list after this is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn simba_waiter_list_free(list: *mut simba_waiter_list) -> simba_status {
    ffi(|| free_result::<WaitersBox, _>(list, WAITER_LIST))
}
