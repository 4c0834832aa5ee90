//! A backend wrapper that turns a panic inside a backend call into an error, so a faulty
//! backend (or driver) never kills a session's keep-alive or work thread.

use crate::error::{Error, Result};
use crate::spi::{Call, Delegate, LeaseBackend};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Forwards every call; a panic becomes [`Error::Backend`] naming the operation.
pub(crate) struct PanicGuard(pub(crate) Arc<dyn LeaseBackend>);

/// The message a panic carried, if it was a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".into())
}

fn guard<T>(operation: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = panic_message(&*payload);
        log::error!("the backend panicked while {operation}: {message}");
        Err(Error::backend(
            operation,
            format!("the backend panicked: {message}"),
        ))
    })
}

impl Delegate for PanicGuard {
    fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
        f(&*self.0)
    }
    fn call<T>(&self, call: Call<'_>, f: impl FnOnce(&dyn LeaseBackend) -> Result<T>) -> Result<T> {
        guard(call.operation(), || f(&*self.0))
    }
}
