//! Semaphores: counting semaphores of leased permits, their holders, and the held permit's
//! calls.

use crate::args::{fill, millis, out, put, text};
use crate::cancel::{cancel_of, deadline};
use crate::handles::{free, get, register};
use crate::objects::{
    held_check, held_end, held_free, held_is_valid, held_next_event, held_term, held_token,
    PermitObj, SemaphoreObj, SessionObj,
};
use crate::results::{free_result, hand_out, items_ptr, HOLDER_LIST};
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{
    simba_cancel, simba_event, simba_holder, simba_holder_list, simba_owner, simba_permit,
    simba_semaphore, simba_session, simba_status, SIMBA_SESSION_ID_LEN,
};
use lease::{Permit, Semaphore};
use std::ffi::c_char;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{lock::simba_lock_term, session::simba_session_next_event};

/// A counting semaphore of `permits` (1 to 1000) leased permits named `name`
/// (NUL-terminated UTF-8; no backend call). Permit `i` is the lease `{name}.permit-{i}`, so
/// every process using the semaphore must give the same number of permits.
/// `SIMBA_INVALID_ARGUMENT` for 0 or more than 1000 permits, or when `{name}.permit-{i}` is
/// longer than a name may be. `*out_semaphore` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_session_semaphore(
    session: *const simba_session,
    name: *const c_char,
    permits: u32,
    out_semaphore: *mut *mut simba_semaphore,
) -> simba_status {
    ffi(|| {
        let o = out(out_semaphore, "out_semaphore")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let sem = s.session.semaphore(text(name, "name")?, permits)?;
        put(o, register(SemaphoreObj(sem))?);
        Ok(())
    })
}

fn acquire_with(
    semaphore: *const simba_semaphore,
    out_permit: *mut *mut simba_permit,
    how: impl FnOnce(&Semaphore) -> R<Permit>,
) -> simba_status {
    ffi(|| {
        let o = out(out_permit, "out_permit")?;
        put(o, std::ptr::null_mut());
        let sem = get::<SemaphoreObj, _>(semaphore)?;
        let permit = how(&sem.0)?;
        put(o, register(PermitObj::new(permit))?);
        Ok(())
    })
}

/// Takes a permit if one is free now (one backend call per permit tried, from a random one
/// on); `SIMBA_BUSY` (and `*out_permit` NULL) if all are held.
#[no_mangle]
pub unsafe extern "C" fn simba_semaphore_try_acquire(
    semaphore: *const simba_semaphore,
    out_permit: *mut *mut simba_permit,
) -> simba_status {
    acquire_with(semaphore, out_permit, |sem| {
        sem.try_acquire()?.ok_or_else(|| {
            Fail::new(
                SIMBA_BUSY,
                format!("every permit of {} is held", sem.name()),
            )
        })
    })
}

/// Takes a permit, waiting at most `timeout_ms` (`SIMBA_TIMEOUT` after that;
/// `SIMBA_FOREVER`: no limit) for a release of any; ends early with `SIMBA_CLOSED` when
/// another thread closes or frees the session. `*out_permit` is the held permit.
#[no_mangle]
pub unsafe extern "C" fn simba_semaphore_acquire_timeout(
    semaphore: *const simba_semaphore,
    timeout_ms: u64,
    out_permit: *mut *mut simba_permit,
) -> simba_status {
    acquire_with(semaphore, out_permit, |sem| {
        Ok(match deadline(timeout_ms) {
            Some(t) => sem.acquire_timeout(t)?,
            None => sem.acquire()?,
        })
    })
}

/// [`simba_semaphore_acquire_timeout`] that also ends when `cancel` is fired by any thread
/// (`SIMBA_CANCELLED`, at once if it was fired before the call; nothing is taken then).
/// `cancel` NULL gives `SIMBA_NULL_ARGUMENT` (use [`simba_semaphore_acquire_timeout`] for
/// no token).
#[no_mangle]
pub unsafe extern "C" fn simba_semaphore_acquire_cancellable(
    semaphore: *const simba_semaphore,
    timeout_ms: u64,
    cancel: *const simba_cancel,
    out_permit: *mut *mut simba_permit,
) -> simba_status {
    acquire_with(semaphore, out_permit, |sem| {
        let cancel = cancel_of(cancel)?;
        Ok(sem.acquire_cancellable(deadline(timeout_ms), &cancel)?)
    })
}

/// How many permits the semaphore has.
#[no_mangle]
pub unsafe extern "C" fn simba_semaphore_permits(
    semaphore: *const simba_semaphore,
    out_permits: *mut u32,
) -> simba_status {
    ffi(|| {
        let o = out(out_permits, "out_permits")?;
        put(o, get::<SemaphoreObj, _>(semaphore)?.0.permits());
        Ok(())
    })
}

/// A holder list with the values it points into; `c` first, so a pointer to the box is a
/// pointer to the C struct.
#[repr(C)]
struct HoldersBox {
    c: simba_holder_list,
    _items: Vec<simba_holder>,
    _values: Vec<Vec<u8>>,
}

/// The permits held now, by any session, by permit index: one backend read per permit, one
/// after the other, so the call takes up to permits × the URL's `query_timeout` (1000
/// permits: up to 1000 reads). `*out_holders` is a list to free with
/// [`simba_holder_list_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_semaphore_holders(
    semaphore: *const simba_semaphore,
    out_holders: *mut *mut simba_holder_list,
) -> simba_status {
    ffi(|| {
        let o = out(out_holders, "out_holders")?;
        put(o, std::ptr::null_mut());
        let holders = get::<SemaphoreObj, _>(semaphore)?.0.holders()?;
        let values: Vec<Vec<u8>> = holders
            .iter()
            .map(|(_, owner)| {
                let mut v = owner.value.as_bytes().to_vec();
                v.push(0);
                v
            })
            .collect();
        let items: Vec<simba_holder> = holders
            .iter()
            .zip(&values)
            .map(|((index, owner), value)| {
                let mut c = simba_owner {
                    held: true,
                    token: owner.token.get(),
                    remaining_ms: millis(owner.remaining),
                    session: [0; SIMBA_SESSION_ID_LEN],
                };
                fill(&mut c.session, owner.session.as_str());
                simba_holder {
                    index: *index,
                    owner: c,
                    value: value.as_ptr().cast(),
                    value_len: value.len() - 1,
                }
            })
            .collect();
        let b = HoldersBox {
            c: simba_holder_list {
                items: items_ptr(&items),
                len: items.len(),
            },
            _items: items,
            _values: values,
        };
        put(o, hand_out(b, HOLDER_LIST).cast());
        Ok(())
    })
}

/// Frees a list from [`simba_semaphore_holders`]. NULL is ignored; a list freed already
/// gives `SIMBA_INVALID_HANDLE` unless its memory was reused by a newer list. Reading the list (its items or their values) after this is
/// undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn simba_holder_list_free(list: *mut simba_holder_list) -> simba_status {
    ffi(|| free_result::<HoldersBox, _>(list, HOLDER_LIST))
}

/// Frees the semaphore handle; permits taken through it stay held until their own
/// [`simba_permit_release`] or [`simba_permit_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_semaphore_free(semaphore: *mut simba_semaphore) -> simba_status {
    ffi(|| free::<SemaphoreObj, _>(semaphore))
}

/// Which permit this is (0 to permits − 1; also after it was lost or released).
#[no_mangle]
pub unsafe extern "C" fn simba_permit_index(
    permit: *const simba_permit,
    out_index: *mut u32,
) -> simba_status {
    ffi(|| {
        let o = out(out_index, "out_index")?;
        put(o, get::<PermitObj, _>(permit)?.index);
        Ok(())
    })
}

/// The permit's fencing token (also after it was lost or released; it increases with every
/// holder of this permit).
#[no_mangle]
pub unsafe extern "C" fn simba_permit_token(
    permit: *const simba_permit,
    out_token: *mut u64,
) -> simba_status {
    held_token::<Permit, _>(permit, out_token)
}

/// Whether the permit is still held (session live, term's local deadline ahead); false once
/// lost or released.
#[no_mangle]
pub unsafe extern "C" fn simba_permit_is_valid(
    permit: *const simba_permit,
    out_valid: *mut bool,
) -> simba_status {
    held_is_valid::<Permit, _>(permit, out_valid)
}

/// The fencing token if the permit is still held, else `SIMBA_LEASE_LOST`: call it before
/// every protected use.
#[no_mangle]
pub unsafe extern "C" fn simba_permit_check(
    permit: *const simba_permit,
    out_token: *mut u64,
) -> simba_status {
    held_check::<Permit, _>(permit, out_token)
}

/// The permit's term if it is still held: `*out_token` its fencing token and
/// `*out_valid_ms` how long it stays valid from now if no keep-alive succeeds meanwhile (as
/// for [`simba_lock_term`]). `SIMBA_LEASE_LOST` if it was lost or released. Either
/// out-pointer may be NULL.
#[no_mangle]
pub unsafe extern "C" fn simba_permit_term(
    permit: *const simba_permit,
    out_token: *mut u64,
    out_valid_ms: *mut u64,
) -> simba_status {
    held_term::<Permit, _>(permit, out_token, out_valid_ms)
}

/// Releases the permit now (one backend call), reporting a failure; `SIMBA_LEASE_LOST` if
/// it was already lost. A second release gives `SIMBA_CLOSED`. The handle stays allocated:
/// free it with [`simba_permit_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_permit_release(permit: *const simba_permit) -> simba_status {
    held_end::<Permit, _>(permit)
}

/// Waits up to `timeout_ms` for this permit's loss event (`LOCK_LOST`, `name` the permit's
/// lease `{name}.permit-{index}`); see [`simba_session_next_event`] for the results.
#[no_mangle]
pub unsafe extern "C" fn simba_permit_next_event(
    permit: *const simba_permit,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    held_next_event::<Permit, _>(permit, timeout_ms, out_event)
}

/// Frees the permit handle; a permit still held is released at once locally and on the
/// backend from the session's work thread (no network call on this thread).
#[no_mangle]
pub unsafe extern "C" fn simba_permit_free(permit: *mut simba_permit) -> simba_status {
    held_free::<Permit, _>(permit)
}
