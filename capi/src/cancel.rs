//! Cancellation tokens for the `*_cancellable` waits.

use crate::args::{out, put};
use crate::handles::{free, get, register};
use crate::objects::CancelObj;
use crate::status::{ffi, R};
use crate::types::{simba_cancel, simba_status, SIMBA_FOREVER};
use lease::Cancel;
use std::time::Duration;

/// A new cancellation token, not fired: pass it to any number of `*_cancellable` waits
/// (on any sessions and threads), then [`simba_cancel_fire`] it to end them all.
/// `*out_cancel` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_cancel_new(out_cancel: *mut *mut simba_cancel) -> simba_status {
    ffi(|| {
        let o = out(out_cancel, "out_cancel")?;
        put(o, std::ptr::null_mut());
        put(o, register(CancelObj(Cancel::new()))?);
        Ok(())
    })
}

/// Fires the token: every `*_cancellable` wait given it, now or later, returns
/// `SIMBA_CANCELLED` (a wait in progress within about 10 ms, plus at most one backend call
/// in flight). Callable from any thread, never blocks on the backend, idempotent; a fired
/// token stays fired (make a new one for the next waits). Not async-signal-safe (it looks
/// the handle up under a lock): from a signal handler, wake a thread that fires it.
#[no_mangle]
pub unsafe extern "C" fn simba_cancel_fire(cancel: *const simba_cancel) -> simba_status {
    ffi(|| {
        get::<CancelObj, _>(cancel)?.0.cancel();
        Ok(())
    })
}

/// Whether the token was fired.
#[no_mangle]
pub unsafe extern "C" fn simba_cancel_is_fired(
    cancel: *const simba_cancel,
    out_fired: *mut bool,
) -> simba_status {
    ffi(|| {
        let o = out(out_fired, "out_fired")?;
        put(o, get::<CancelObj, _>(cancel)?.0.is_cancelled());
        Ok(())
    })
}

/// Frees the token. A wait already given it keeps its own reference and can no longer be
/// cancelled through this handle (fire before freeing to end it).
#[no_mangle]
pub unsafe extern "C" fn simba_cancel_free(cancel: *mut simba_cancel) -> simba_status {
    ffi(|| free::<CancelObj, _>(cancel))
}

/// The token behind a handle (cloned: the wait keeps it even if the handle is freed).
pub(crate) fn cancel_of(cancel: *const simba_cancel) -> R<Cancel> {
    Ok(get::<CancelObj, _>(cancel)?.0.clone())
}

/// A `*_cancellable` timeout: `SIMBA_FOREVER` is no deadline.
pub(crate) fn deadline(timeout_ms: u64) -> Option<Duration> {
    (timeout_ms != SIMBA_FOREVER).then(|| Duration::from_millis(timeout_ms))
}
