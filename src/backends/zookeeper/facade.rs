//! The small blocking facade over the async `zookeeper-client`: every call is driven to
//! completion on the caller's thread with a deadline, so nothing async leaks into the API and
//! no call can hang past its time limit.

use crate::error::{Error, Result};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread until it completes or `limit` has passed (`None`).
///
/// The request behind a `zookeeper-client` future is queued when the future is *created*, so
/// giving up here never reorders requests; a request whose reply is given up on may still be
/// executed by the server (the backend's possibly-owned tracking covers that for creates).
pub(super) fn block_on_for<F: Future>(fut: F, limit: Duration) -> Option<F::Output> {
    let deadline = crate::backends::options::deadline(limit);
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// [`block_on_for`] that turns running out of time into [`Error::Timeout`] (the future's
/// own error, a [`zk::Error`] or a multi's [`zk::MultiWriteError`], is kept inside).
pub(super) fn call<T, E>(
    operation: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<Result<T, E>> {
    block_on_for(fut, limit).ok_or(Error::Timeout {
        operation,
        after: limit,
        source: None,
    })
}

/// A `zookeeper-client` error as [`Error::Backend`].
pub(super) fn backend(operation: &'static str, e: zk::Error) -> Error {
    super::failure::error(operation, e)
}

/// A state problem (disconnected, read-only) as [`Error::Backend`].
pub(super) fn state_error(operation: &'static str, what: String) -> Error {
    super::failure::error(operation, what)
}
