//! The driver's decisions, as pure functions of what the caller gives them (time, jitter,
//! replies): where each output of the core goes, which replies reach the engine, when to
//! reopen and what to do after a failed open ([`reopen`]), the wait-and-retry loop of
//! locks, fair locks and permits ([`wait`]), a read-write lock's attempts, replies and
//! writers' queue ([`rw`], on the same wait), how long a run-once claim holds ([`jobs`]) and
//! which term a candidate's value is written on ([`values`]). The threaded
//! [`Session`](crate::Session), its primitives and the deterministic simulation all call
//! them, so the simulation checks the driver that ships.

pub(crate) mod acquire;
pub(crate) mod attempt;
pub(crate) mod groups;
pub(crate) mod jobs;
pub(crate) mod release;
pub(crate) mod reopen;
pub(crate) mod reserve;
pub(crate) mod rw;
pub(crate) mod tokens;
pub(crate) mod values;
pub(crate) mod wait;

use super::core::{HandleId, Output, Task};
use super::event::Event;
use crate::spi::RwMode;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Duration;

/// Backend work that an output of the core asks for, run in order on the session's work
/// queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// A candidate's attempt, an observer's read, a group watch's read.
    Run(Task),
    /// The release of a term the engine gave up (or a stray grant).
    Release(LeaseName, Token),
    /// The release of a read-write lock's term of a mode (a dropped guard's, or a grant the
    /// engine did not take).
    ReleaseRw(LeaseName, RwMode, Token),
    /// Deleting the backend session (after `close`).
    CloseBackend,
}

/// Where one output of the core goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// To the session's keep-alive thread.
    KeepAlive,
    /// To the session's serial work queue.
    Work(Work),
    /// To the listeners of the session and of the handle.
    Emit(Option<HandleId>, Event),
}

/// Where `output` goes.
pub(crate) fn route(output: Output) -> Route {
    match output {
        Output::KeepAlive => Route::KeepAlive,
        Output::Run(task) => Route::Work(Work::Run(task)),
        Output::Release(name, token) => Route::Work(Work::Release(name, token)),
        Output::ReleaseRw(name, mode, token) => Route::Work(Work::ReleaseRw(name, mode, token)),
        Output::CloseBackend => Route::Work(Work::CloseBackend),
        Output::Emit(handle, event) => Route::Emit(handle, event),
    }
}

/// Whether a reply to a call made for backend session `sent_for` may reach the engine of
/// the `current` backend session: a reply for an expired predecessor (before a reopen) must
/// not touch its successor; its grants die with it.
pub(crate) fn accepts(current: &SessionId, sent_for: &SessionId) -> bool {
    current == sent_for
}

/// How long to wait before trying again: the retry interval plus up to half of it of
/// jitter, drawn by `jitter` (given the bound), so that waiters of many sessions spread out.
pub(crate) fn retry_delay(retry: Duration, jitter: impl FnOnce(Duration) -> Duration) -> Duration {
    retry + jitter(retry / 2).min(retry / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_go_where_the_driver_sends_them() {
        assert_eq!(route(Output::KeepAlive), Route::KeepAlive);
        assert_eq!(route(Output::CloseBackend), Route::Work(Work::CloseBackend));
        let (a, b) = (SessionId::random(), SessionId::random());
        assert!(accepts(&a, &a));
        assert!(!accepts(&a, &b));
        let retry = Duration::from_millis(100);
        assert_eq!(retry_delay(retry, |_| Duration::ZERO), retry);
        assert_eq!(retry_delay(retry, |max| max * 3), retry + retry / 2);
    }
}
