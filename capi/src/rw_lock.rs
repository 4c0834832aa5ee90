//! Read-write locks: the lock of a name (`simba_rw_lock`), taking a read or a write term
//! (plain, try, with a timeout, cancellable), and the held term's calls (`simba_rw_guard`).

use crate::args::{out, put, put_text, text};
use crate::cancel::{cancel_of, deadline};
use crate::handles::{free, get, register};
use crate::objects::{
    held_check, held_end, held_free, held_is_valid, held_next_event, held_term, held_token,
    RwGuardObj, RwLockObj, SessionObj,
};
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{
    simba_cancel, simba_event, simba_rw_guard, simba_rw_lock, simba_rw_mode, simba_session,
    simba_status,
};
use lease::spi::RwMode;
use lease::{RwGuard, RwLock};
use std::ffi::c_char;
use std::time::Duration;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{lock::simba_lock_term, session::simba_session_next_event};

/// The C mode of a term.
pub(crate) fn mode_of(mode: RwMode) -> simba_rw_mode {
    match mode {
        RwMode::Read => simba_rw_mode::SIMBA_RW_READ,
        RwMode::Write => simba_rw_mode::SIMBA_RW_WRITE,
    }
}

/// The read-write lock `name` (NUL-terminated UTF-8) of this session: no backend call until
/// a read or write. Any number of readers (each on a session of its own) hold a name
/// together, a writer holds it alone; a waiting writer makes new readers wait (writer
/// preference), and a crashed holder's or waiting writer's claim ends with its session.
/// A read-write lock's name is its own: a plain lock of the same name does not conflict.
/// Every term carries a fencing token from one counter per name: a write term's token is
/// greater than every token handed out before on the name, a read term's is greater than
/// the last write term's, so a resource that keeps the newest write token it saw refuses
/// a term older than that write. Reads and writes give `SIMBA_UNSUPPORTED` on a backend
/// without read-write locks. `*out_rw_lock` is the new handle, freed by
/// [`simba_rw_lock_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_session_rw_lock(
    session: *const simba_session,
    name: *const c_char,
    out_rw_lock: *mut *mut simba_rw_lock,
) -> simba_status {
    ffi(|| {
        let o = out(out_rw_lock, "out_rw_lock")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let lock = s.session.rw_lock(text(name, "name")?)?;
        put(o, register(RwLockObj(lock))?);
        Ok(())
    })
}

fn take_with(
    rw_lock: *const simba_rw_lock,
    out_guard: *mut *mut simba_rw_guard,
    how: impl FnOnce(&RwLock) -> R<RwGuard>,
) -> simba_status {
    ffi(|| {
        let o = out(out_guard, "out_guard")?;
        put(o, std::ptr::null_mut());
        let lock = get::<RwLockObj, _>(rw_lock)?;
        let guard = how(&lock.0)?;
        put(o, register(RwGuardObj::new(guard))?);
        Ok(())
    })
}

fn busy(lock: &RwLock, what: &str) -> Fail {
    Fail::new(
        SIMBA_BUSY,
        format!("no {what} term of {} can be had now", lock.name()),
    )
}

/// Takes a read term, waiting as long as it takes (while a writer holds the name or waits
/// for it). There is no time limit: the call ends early only when another thread closes or
/// frees the session (`SIMBA_CLOSED`); use [`simba_rw_lock_read_timeout`] for a bound,
/// [`simba_rw_lock_read_cancellable`] to end it from another thread. `*out_guard` is the
/// held term. A session holds at most one term of a name: asking again from the thread
/// that holds or is taking it gives `SIMBA_ALREADY_HELD`.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_read(
    rw_lock: *const simba_rw_lock,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| Ok(l.read()?))
}

/// Takes a read term if one can be had now (one backend call); `SIMBA_BUSY` (and
/// `*out_guard` NULL) while a writer holds the name or waits for it.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_try_read(
    rw_lock: *const simba_rw_lock,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| {
        l.try_read()?.ok_or_else(|| busy(l, "read"))
    })
}

/// Takes a read term, waiting at most `timeout_ms` (`SIMBA_TIMEOUT` after that).
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_read_timeout(
    rw_lock: *const simba_rw_lock,
    timeout_ms: u64,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| {
        Ok(l.read_timeout(Duration::from_millis(timeout_ms))?)
    })
}

/// Takes a read term, waiting at most `timeout_ms` (`SIMBA_TIMEOUT` after that;
/// `SIMBA_FOREVER`: no limit) or until `cancel` is fired by any thread (`SIMBA_CANCELLED`, at
/// once if it was fired before the call), or the session is closed or freed
/// (`SIMBA_CLOSED`). `*out_guard` is NULL on any failure (nothing is held then). `cancel`
/// NULL gives `SIMBA_NULL_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_read_cancellable(
    rw_lock: *const simba_rw_lock,
    timeout_ms: u64,
    cancel: *const simba_cancel,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| {
        let cancel = cancel_of(cancel)?;
        Ok(l.read_cancellable(deadline(timeout_ms), &cancel)?)
    })
}

/// Takes the write term, waiting as long as it takes (while readers or another writer hold
/// the name, or writers that came first wait); meanwhile this writer makes new readers wait.
/// There is no time limit: the call ends early only when another thread closes or frees the
/// session (`SIMBA_CLOSED`); use [`simba_rw_lock_write_timeout`] for a bound,
/// [`simba_rw_lock_write_cancellable`] to end it from another thread. `*out_guard` is the
/// held term.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_write(
    rw_lock: *const simba_rw_lock,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| Ok(l.write()?))
}

/// Takes the write term if it can be had now (one backend call; a try does not register as
/// a waiting writer); `SIMBA_BUSY` (and `*out_guard` NULL) otherwise.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_try_write(
    rw_lock: *const simba_rw_lock,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| {
        l.try_write()?.ok_or_else(|| busy(l, "write"))
    })
}

/// Takes the write term, waiting at most `timeout_ms` (`SIMBA_TIMEOUT` after that; the
/// writer then no longer makes readers wait).
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_write_timeout(
    rw_lock: *const simba_rw_lock,
    timeout_ms: u64,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| {
        Ok(l.write_timeout(Duration::from_millis(timeout_ms))?)
    })
}

/// [`simba_rw_lock_write_timeout`] that also ends when `cancel` is fired by any thread
/// (`SIMBA_CANCELLED`, at once if it was fired before the call; nothing is taken then), or
/// the session is closed or freed (`SIMBA_CLOSED`); `SIMBA_FOREVER`: no time limit.
/// `cancel` NULL gives `SIMBA_NULL_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_write_cancellable(
    rw_lock: *const simba_rw_lock,
    timeout_ms: u64,
    cancel: *const simba_cancel,
    out_guard: *mut *mut simba_rw_guard,
) -> simba_status {
    take_with(rw_lock, out_guard, |l| {
        let cancel = cancel_of(cancel)?;
        Ok(l.write_cancellable(deadline(timeout_ms), &cancel)?)
    })
}

/// Frees the read-write lock handle; terms taken through it stay held until their own
/// [`simba_rw_guard_unlock`] or [`simba_rw_guard_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_rw_lock_free(rw_lock: *mut simba_rw_lock) -> simba_status {
    ffi(|| free::<RwLockObj, _>(rw_lock))
}

/// Whether the held term is a read or a write term (also after it was lost or unlocked).
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_mode(
    guard: *const simba_rw_guard,
    out_mode: *mut simba_rw_mode,
) -> simba_status {
    ffi(|| {
        let o = out(out_mode, "out_mode")?;
        let mode = match get::<RwGuardObj, _>(guard)?.index {
            0 => simba_rw_mode::SIMBA_RW_READ,
            _ => simba_rw_mode::SIMBA_RW_WRITE,
        };
        put(o, mode);
        Ok(())
    })
}

/// The term's fencing token (also after it was lost or unlocked): pass it to the protected
/// resource, which refuses a term older than the newest write term it saw (see
/// [`simba_session_rw_lock`]).
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_token(
    guard: *const simba_rw_guard,
    out_token: *mut u64,
) -> simba_status {
    held_token::<RwGuard, _>(guard, out_token)
}

/// Writes the lock's name (NUL-terminated) into `buf` of `buf_len` bytes (at least
/// `SIMBA_NAME_LEN` always suffices).
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_name(
    guard: *const simba_rw_guard,
    buf: *mut c_char,
    buf_len: usize,
) -> simba_status {
    ffi(|| {
        let buf = out(buf, "buf")?;
        put_text(&get::<RwGuardObj, _>(guard)?.name, buf, buf_len)
    })
}

/// Whether the term is still held (session live, its local deadline ahead); false once
/// lost or unlocked.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_is_valid(
    guard: *const simba_rw_guard,
    out_valid: *mut bool,
) -> simba_status {
    held_is_valid::<RwGuard, _>(guard, out_valid)
}

/// The fencing token if the term is still held, else `SIMBA_LEASE_LOST`: call it before
/// every protected read or write.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_check(
    guard: *const simba_rw_guard,
    out_token: *mut u64,
) -> simba_status {
    held_check::<RwGuard, _>(guard, out_token)
}

/// The term if it is still held: `*out_token` its fencing token and `*out_valid_ms` how long
/// it stays valid from now if no keep-alive succeeds meanwhile (as for
/// [`simba_lock_term`]). `SIMBA_LEASE_LOST` if it was lost or unlocked. Either out-pointer
/// may be NULL.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_term(
    guard: *const simba_rw_guard,
    out_token: *mut u64,
    out_valid_ms: *mut u64,
) -> simba_status {
    held_term::<RwGuard, _>(guard, out_token, out_valid_ms)
}

/// Releases the term now (one backend call), reporting a failure; `SIMBA_LEASE_LOST` if it
/// was already lost. A second unlock gives `SIMBA_CLOSED`. The handle stays allocated: free
/// it with [`simba_rw_guard_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_unlock(guard: *const simba_rw_guard) -> simba_status {
    held_end::<RwGuard, _>(guard)
}

/// Waits up to `timeout_ms` for this term's loss event (`LOCK_LOST`); see
/// [`simba_session_next_event`] for the results.
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_next_event(
    guard: *const simba_rw_guard,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    held_next_event::<RwGuard, _>(guard, timeout_ms, out_event)
}

/// Frees the guard handle; a term still held is released at once locally and on the
/// backend from the session's work thread (no network call on this thread).
#[no_mangle]
pub unsafe extern "C" fn simba_rw_guard_free(guard: *mut simba_rw_guard) -> simba_status {
    held_free::<RwGuard, _>(guard)
}
