//! A backend wrapper for engine cases: holds calls back on demand (opens, acquires,
//! keep-alives), counts them, and makes acquires fail, so a case can act while a session is
//! reopened, an acquire is in flight or the backend hangs.

use crate::error::{Error, Result};
use crate::spi::{Call, Delegate, LeaseBackend};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One kind of call that can be held back: calls wait while it is held (at most the
/// patience, then they proceed), and are counted as they enter and leave.
#[derive(Default)]
pub struct Gate {
    held: Mutex<bool>,
    changed: Condvar,
    entered: AtomicUsize,
    left: AtomicUsize,
}

impl Gate {
    /// Makes calls wait from now on.
    pub fn hold(&self) {
        *self.held.lock() = true;
    }

    /// Lets waiting and future calls through.
    pub fn pass(&self) {
        *self.held.lock() = false;
        self.changed.notify_all();
    }

    /// How many calls entered so far.
    pub fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    /// How many calls returned so far.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::SeqCst)
    }

    fn through<R>(&self, patience: Duration, call: impl FnOnce() -> R) -> R {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + patience;
        let mut held = self.held.lock();
        while *held && !self.changed.wait_until(&mut held, until).timed_out() {}
        drop(held);
        let r = call();
        self.left.fetch_add(1, Ordering::SeqCst);
        r
    }
}

/// Forwards every call to the backend it wraps, through its gates.
pub struct GatedOpens {
    inner: parking_lot::RwLock<Arc<dyn LeaseBackend>>,
    /// `open_session`.
    pub opens: Gate,
    /// `acquire` and `acquire_with_value`.
    pub acquires: Gate,
    /// `keep_alive`.
    pub keep_alives: Gate,
    /// While set, `acquire` fails with a transient error instead of calling the backend.
    pub fail_acquires: AtomicBool,
    patience: Duration,
}

impl GatedOpens {
    /// Wraps `inner`; every call passes until a gate is held.
    pub fn new(inner: Arc<dyn LeaseBackend>, patience: Duration) -> Self {
        GatedOpens {
            inner: parking_lot::RwLock::new(inner),
            opens: Gate::default(),
            acquires: Gate::default(),
            keep_alives: Gate::default(),
            fail_acquires: AtomicBool::new(false),
            patience,
        }
    }

    /// Makes `open_session` wait from now on.
    pub fn hold(&self) {
        self.opens.hold();
    }

    /// Forwards every later call to `backend` instead (a server restarted without its data:
    /// its sessions and tokens are gone).
    pub fn replace(&self, backend: Arc<dyn LeaseBackend>) {
        *self.inner.write() = backend;
    }

    fn current(&self) -> Arc<dyn LeaseBackend> {
        self.inner.read().clone()
    }

    /// Lets waiting and future `open_session` calls through.
    pub fn pass(&self) {
        self.opens.pass();
    }

    fn acquire_through<T>(&self, call: impl FnOnce(&dyn LeaseBackend) -> Result<T>) -> Result<T> {
        self.acquires.through(self.patience, || {
            if self.fail_acquires.load(Ordering::SeqCst) {
                return Err(Error::backend(
                    "acquiring (injected by the TCK)",
                    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected failure"),
                ));
            }
            call(&*self.current())
        })
    }
}

impl Delegate for GatedOpens {
    fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
        f(&*self.current())
    }
    fn call<T>(&self, call: Call<'_>, f: impl FnOnce(&dyn LeaseBackend) -> Result<T>) -> Result<T> {
        match call {
            Call::Open(_) => self.opens.through(self.patience, || f(&*self.current())),
            Call::KeepAlive { .. } => self
                .keep_alives
                .through(self.patience, || f(&*self.current())),
            Call::Acquire { .. } | Call::AcquireWithValue { .. } => self.acquire_through(f),
            _ => f(&*self.current()),
        }
    }
}
