//! Failures and statuses: `Fail`, the `ffi` entry wrapper (`catch_unwind`, the per-thread
//! last error), `simba_last_error` and `simba_status_name`.

use crate::types::simba_status;
use crate::types::simba_status::*;
use lease::Error;
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A failed call: its status and message.
pub(crate) struct Fail {
    pub(crate) status: simba_status,
    pub(crate) message: String,
}

impl Fail {
    pub(crate) fn new(status: simba_status, message: impl Into<String>) -> Self {
        Fail {
            status,
            message: message.into(),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::InvalidName { .. }
            | Error::InvalidMetadata { .. }
            | Error::InvalidValue { .. }
            | Error::InvalidToken { .. }
            | Error::InvalidSessionId { .. }
            | Error::InvalidConfig { .. }
            | Error::InvalidUrl { .. } => SIMBA_INVALID_ARGUMENT,
            Error::FeatureDisabled { .. } => SIMBA_FEATURE_DISABLED,
            Error::SessionExpired { .. } => SIMBA_SESSION_EXPIRED,
            Error::LeaseLost { .. } => SIMBA_LEASE_LOST,
            Error::NotLeader { .. } => SIMBA_NOT_LEADER,
            Error::NotCandidate { .. } => SIMBA_NOT_CANDIDATE,
            Error::AlreadyHeld { .. } => SIMBA_ALREADY_HELD,
            Error::Timeout { .. } => SIMBA_TIMEOUT,
            Error::Closed => SIMBA_CLOSED,
            Error::UnsupportedServer { .. } => SIMBA_UNSUPPORTED_SERVER,
            Error::Backend { .. } => SIMBA_BACKEND,
            Error::Tls { .. } => SIMBA_TLS,
            Error::Authentication { .. } => SIMBA_AUTHENTICATION,
            Error::Cancelled { .. } => SIMBA_CANCELLED,
            Error::Unsupported { .. } => SIMBA_UNSUPPORTED,
            Error::MissingSchema { .. } => SIMBA_MISSING_SCHEMA,
            Error::StaleToken { .. } => SIMBA_STALE_TOKEN,
            _ => SIMBA_ERROR,
        };
        // `report()` adds the driver's words; it never contains a password.
        Fail::new(status, e.report().to_string())
    }
}

pub(crate) type R<T = ()> = Result<T, Fail>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

/// Runs an entry point: catches panics, records the message of a failure.
pub(crate) fn ffi(f: impl FnOnce() -> R) -> simba_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SIMBA_OK,
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.status
        }
        Err(payload) => {
            let m = format!("internal panic: {}", panic_message(&*payload));
            // Setting the message must not panic again across the boundary.
            let _ = catch_unwind(AssertUnwindSafe(|| set_last_error(&m)));
            SIMBA_PANIC
        }
    }
}

/// The message of the last failed call on this thread: NUL-terminated UTF-8, never NULL
/// (empty if no call failed yet). Owned by the library; valid until the next `simba_*`
/// call on this thread. Successful calls leave it unchanged.
#[no_mangle]
pub extern "C" fn simba_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"".as_ptr())
}

/// Every status, in order of value.
const STATUSES: [(simba_status, &CStr); 24] = [
    (SIMBA_OK, c"SIMBA_OK"),
    (SIMBA_BUSY, c"SIMBA_BUSY"),
    (SIMBA_TIMEOUT, c"SIMBA_TIMEOUT"),
    (SIMBA_NULL_ARGUMENT, c"SIMBA_NULL_ARGUMENT"),
    (SIMBA_INVALID_HANDLE, c"SIMBA_INVALID_HANDLE"),
    (SIMBA_INVALID_UTF8, c"SIMBA_INVALID_UTF8"),
    (SIMBA_INVALID_ARGUMENT, c"SIMBA_INVALID_ARGUMENT"),
    (SIMBA_FEATURE_DISABLED, c"SIMBA_FEATURE_DISABLED"),
    (SIMBA_SESSION_EXPIRED, c"SIMBA_SESSION_EXPIRED"),
    (SIMBA_LEASE_LOST, c"SIMBA_LEASE_LOST"),
    (SIMBA_NOT_LEADER, c"SIMBA_NOT_LEADER"),
    (SIMBA_NOT_CANDIDATE, c"SIMBA_NOT_CANDIDATE"),
    (SIMBA_ALREADY_HELD, c"SIMBA_ALREADY_HELD"),
    (SIMBA_CLOSED, c"SIMBA_CLOSED"),
    (SIMBA_UNSUPPORTED_SERVER, c"SIMBA_UNSUPPORTED_SERVER"),
    (SIMBA_BACKEND, c"SIMBA_BACKEND"),
    (SIMBA_PANIC, c"SIMBA_PANIC"),
    (SIMBA_ERROR, c"SIMBA_ERROR"),
    (SIMBA_TLS, c"SIMBA_TLS"),
    (SIMBA_AUTHENTICATION, c"SIMBA_AUTHENTICATION"),
    (SIMBA_CANCELLED, c"SIMBA_CANCELLED"),
    (SIMBA_UNSUPPORTED, c"SIMBA_UNSUPPORTED"),
    (SIMBA_MISSING_SCHEMA, c"SIMBA_MISSING_SCHEMA"),
    (SIMBA_STALE_TOKEN, c"SIMBA_STALE_TOKEN"),
];

/// The name of a status value (a static NUL-terminated string, e.g. `"SIMBA_TIMEOUT"`;
/// `"SIMBA_UNKNOWN"` for a value that is no status). Takes an `int` so that any value is
/// safe to pass.
#[no_mangle]
pub extern "C" fn simba_status_name(status: i32) -> *const c_char {
    STATUSES
        .iter()
        .find(|(s, _)| *s as i32 == status)
        .map_or(c"SIMBA_UNKNOWN", |(_, name)| name)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let st = ffi(|| panic!("boom"));
        assert_eq!(st, SIMBA_PANIC);
        let m = unsafe { CStr::from_ptr(simba_last_error()) };
        assert_eq!(m.to_str().unwrap(), "internal panic: boom");
        let st = ffi(|| panic!("{}", String::from("formatted")));
        assert_eq!(st, SIMBA_PANIC);
        let m = unsafe { CStr::from_ptr(simba_last_error()) };
        assert_eq!(m.to_str().unwrap(), "internal panic: formatted");
        // The next successful call works as usual.
        assert_eq!(ffi(|| Ok(())), SIMBA_OK);
    }

    #[test]
    fn every_status_has_its_name_and_unknown_values_are_safe() {
        for (i, (st, name)) in STATUSES.iter().enumerate() {
            assert_eq!(*st as i32, i as i32);
            let got = unsafe { CStr::from_ptr(simba_status_name(i as i32)) };
            assert_eq!(got, *name);
        }
        for v in [-1, STATUSES.len() as i32, i32::MAX] {
            let got = unsafe { CStr::from_ptr(simba_status_name(v)) };
            assert_eq!(got, c"SIMBA_UNKNOWN");
        }
    }

    #[test]
    fn messages_with_nul_bytes_stay_whole() {
        set_last_error("a\0b");
        let m = unsafe { CStr::from_ptr(simba_last_error()) };
        assert_eq!(m.to_str().unwrap(), "a\\0b");
    }
}
