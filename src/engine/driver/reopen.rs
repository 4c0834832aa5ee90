//! Reopening an expired session: whether to, and what a failed open leads to.

use crate::engine::core::State;
use crate::error::Error;
use std::time::Duration;

/// What the driver knows about a session besides its core's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags {
    /// `Config::reopen_on_expiry`.
    pub(crate) reopen_on_expiry: bool,
    /// A reopen is queued or running.
    pub(crate) reopening: bool,
    /// The session was closed.
    pub(crate) closed: bool,
    /// A reopen failed with an error retrying cannot fix: expiry is terminal.
    pub(crate) failed: bool,
}

/// Whether to queue a reopen now.
pub(crate) fn should_reopen(state: State, f: Flags) -> bool {
    state == State::Expired && f.reopen_on_expiry && !f.reopening && !f.closed && !f.failed
}

/// Whether waiting on a session can still succeed while its core is expired: a reopen
/// will come.
pub(crate) fn reopen_coming(f: Flags) -> bool {
    f.reopen_on_expiry && !f.closed && !f.failed
}

/// What follows a failed `open_session` of a reopen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterOpenError {
    /// Try again after a retry delay, logging an error: the fix is made outside the process
    /// (a renewed certificate, a restored password).
    RetryLoudly,
    /// Try again after a retry delay (the error may pass).
    Retry,
    /// Retrying cannot help (e.g. the server grants less than the lease): expiry is terminal.
    Terminal,
}

/// What follows a reopen's failed open with `e`.
pub(crate) fn after_open_error(e: &Error) -> AfterOpenError {
    match e {
        Error::Tls { .. } | Error::Authentication { .. } => AfterOpenError::RetryLoudly,
        e if !e.is_transient() => AfterOpenError::Terminal,
        _ => AfterOpenError::Retry,
    }
}

/// How long the reopen waits after a failed open before it tries again: the retry
/// interval `retry` plus jitter drawn by `jitter` (given its bound).
pub(crate) fn retry_in(retry: Duration, jitter: impl FnOnce(Duration) -> Duration) -> Duration {
    super::retry_delay(retry, jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopens_only_an_expired_session_that_may_be_reopened() {
        let f = Flags {
            reopen_on_expiry: true,
            ..Flags::default()
        };
        assert!(should_reopen(State::Expired, f));
        assert!(!should_reopen(State::Valid, f));
        for g in [
            Flags {
                reopening: true,
                ..f
            },
            Flags { closed: true, ..f },
            Flags { failed: true, ..f },
            Flags::default(),
        ] {
            assert!(!should_reopen(State::Expired, g), "{g:?}");
        }
        assert!(reopen_coming(Flags {
            reopening: true,
            ..f
        }));
        assert!(!reopen_coming(Flags { failed: true, ..f }));
    }

    #[test]
    fn a_failed_open_is_retried_unless_retrying_cannot_help() {
        let transient = Error::Timeout {
            operation: "opening",
            after: std::time::Duration::from_secs(1),
            source: None,
        };
        assert_eq!(after_open_error(&transient), AfterOpenError::Retry);
        assert_eq!(
            after_open_error(&Error::config("lease", "too long")),
            AfterOpenError::Terminal
        );
    }
}
