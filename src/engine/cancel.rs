//! [`Cancel`]: ends blocking waits from another thread or a signal handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cancellation token for blocking waits ([`Session::lock_cancellable`],
/// [`Session::wait_valid_cancellable`], [`Election::wait_elected_cancellable`]): clone it,
/// hand it to the waits, and [`cancel`](Cancel::cancel) it from any thread. A cancelled
/// wait returns [`Error::Cancelled`] within about 10 ms.
///
/// [`cancel`](Cancel::cancel) is one atomic store, so it may be called from a signal
/// handler (e.g. through a `static` token). A token stays cancelled; make a new one for
/// the next waits.
///
/// ```
/// use simba_lease::{connect, Cancel, Config, Error, Session};
/// use std::time::Duration;
///
/// let backend = connect("memory://")?;
/// let (a, b) = (
///     Session::open(backend.clone(), Config::default())?,
///     Session::open(backend, Config::default())?,
/// );
/// let _held = a.lock("jobs")?;
/// let cancel = Cancel::new();
/// let c = cancel.clone();
/// std::thread::spawn(move || {
///     std::thread::sleep(Duration::from_millis(50));
///     c.cancel();
/// });
/// // Waits for `a`'s lock until the other thread cancels.
/// assert!(matches!(b.lock_cancellable("jobs", None, &cancel), Err(Error::Cancelled { .. })));
/// # Ok::<(), simba_lease::Error>(())
/// ```
///
/// [`Session::lock_cancellable`]: crate::Session::lock_cancellable
/// [`Session::wait_valid_cancellable`]: crate::Session::wait_valid_cancellable
/// [`Election::wait_elected_cancellable`]: crate::Election::wait_elected_cancellable
/// [`Error::Cancelled`]: crate::Error::Cancelled
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

/// How often a cancellable wait looks at its token.
const CANCEL_POLL: Duration = Duration::from_millis(10);

impl Cancel {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait given this token (or a clone), now and later. Async-signal-safe.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`cancel`](Cancel::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Err(Cancelled)` once cancelled.
    pub(crate) fn check(cancel: Option<&Cancel>, operation: &'static str) -> crate::Result<()> {
        match cancel {
            Some(c) if c.is_cancelled() => Err(crate::Error::Cancelled { operation }),
            _ => Ok(()),
        }
    }

    /// The instant a cancellable wait until `until` wakes at to look at its token again.
    pub(crate) fn wake_at(until: Option<Instant>) -> Instant {
        let poll = Instant::now() + CANCEL_POLL;
        until.map_or(poll, |u| u.min(poll))
    }
}
