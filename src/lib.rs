//! # simba-lease
//!
//! Distributed coordination for synchronous Rust: **sessions** kept alive by one keep-alive
//! thread each, **leases** with fencing tokens, and on top of them **elections**, **locks**,
//! **observers** and **groups**, over one backend SPI ([`spi::LeaseBackend`]) with an
//! in-memory backend built in and PostgreSQL, MySQL, Redis and ZooKeeper behind features.
//! No async runtime in the API: every call blocks, loss is reported on
//! `crossbeam-channel` receivers and callbacks.
//!
//! ```
//! use simba_lease::{connect, Config, Event, Session};
//! use std::time::Duration;
//!
//! let backend = connect("memory://")?;
//! let session = Session::open(backend, Config::default())?;
//!
//! // Leader election with fencing tokens.
//! let election = session.election("scheduler")?;
//! let term = election.wait_elected(Duration::from_secs(5))?;
//! assert!(term.token.get() >= 1);
//!
//! // A lock; the guard releases on drop.
//! let guard = session.lock("nightly-report")?;
//! assert!(guard.is_valid());
//! drop(guard);
//!
//! // Group membership.
//! let workers = session.group("workers")?;
//! let _membership = workers.join()?; // leaves on drop
//! assert_eq!(workers.members()?.len(), 1);
//!
//! session.close()?; // ends every term, waits for the final events
//! # Ok::<(), simba_lease::Error>(())
//! ```
//!
//! ## The contract (every backend, checked by the [TCK](crate::tck) with feature `tck`)
//!
//! 1. A session expires once it was not kept alive for its lease; an expired backend session
//!    is never revived.
//! 2. A lease belongs to a session only while that session is live.
//! 3. A token is > 0, strictly increases with every new term and never resets (not on
//!    release, expiry, purge or re-creation of the name). Acquire by the holder returns the
//!    same term.
//! 4. Every remaining time is measured by the backend's clock.
//! 5. Names: 1–128 characters of `[A-Za-z0-9._:-]`, not `.` or `..`, case-sensitive; metadata
//!    and term values at most 1024 bytes. Bad input is a typed [`Error`] before any I/O.
//! 6. A term's value ([`Owner::value`], set by its holder: [`Election::set_value`],
//!    [`LockGuard::set_value`]) belongs to that term: only its live holder sets it, and a
//!    new term starts without it.
//!
//! ## How a session keeps its leases
//!
//! A [`Session`] owns four threads: a keep-alive thread (never delayed by acquires), a work
//! thread (candidates' attempts, observers, releases), a ticker (deadlines) and an event
//! thread (callbacks, in order, never under an internal lock). Every decision is made by a
//! pure state machine (`engine::core::Core`, crate-private) on the monotonic clock:
//!
//! * a term is valid locally until `send instant + remaining × (1 − drift)` of the request
//!   that last confirmed it — never later than the backend's own expiry, so at most one
//!   process believes it holds a lease at any instant (given clock-rate drift within
//!   [`Config::drift`]);
//! * keep-alives failing → [`SessionState::Jeopardy`] ([`Event::Jeopardy`]), still valid;
//! * at the local deadline, even while a backend call hangs → every term is lost
//!   ([`Event::Revoked`], [`Event::LockLost`]) and the session expires
//!   ([`Event::SessionExpired`]); by default a new backend session is opened and elections,
//!   observers and group memberships are re-entered ([`Event::SessionReopened`]); locks stay
//!   lost. [`ConfigBuilder::reopen_on_expiry`] makes expiry terminal instead;
//! * a lease missing from a keep-alive reply is lost at once; a lease the reply lists that
//!   the engine does not know (a grant whose reply was lost) is released.
//!
//! Always check [`LockGuard::is_valid`] or, better, pass the fencing token
//! ([`LockGuard::token`], [`Term::token`]) to the protected resource and let it reject
//! tokens lower than the highest it has seen.
//!
//! ## Using it from async code
//!
//! Every call blocks its thread (a lock waits, a backend call takes a round trip), so from
//! async code run it off the executor: `tokio::task::spawn_blocking(move || session.lock(..))`
//! (or a plain thread), and read events with a blocking `recv` there too, or forward them
//! into an async channel from a callback ([`Session::on_event`]). Called directly inside an
//! async task or a `#[tokio::main]` body it still works on every backend, but blocks that
//! executor thread for as long as the call takes (a current-thread runtime runs nothing
//! else meanwhile). The PostgreSQL driver blocks on a tokio runtime of its own and would
//! panic inside another one: the backend notices a caller inside a tokio runtime
//! (`spawn_blocking` threads included) and runs its calls on a short-lived thread of its
//! own, costing a thread start per call. The library's own
//! threads (keep-alive, work, events, pool connects, PostgreSQL's `LISTEN`) are plain
//! threads outside any runtime.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod backends;
mod connect;
pub mod engine;
mod error;
pub mod metrics;
pub mod primitives;
mod rand;
#[cfg(feature = "sim")]
pub mod sim;
pub mod spi;
#[cfg(feature = "tck")]
pub mod tck;
mod types;

pub use connect::connect;
pub use engine::{Cancel, Config, ConfigBuilder, Event, Health, LossReason, Session, SessionState};
pub use error::{BoxError, Error, Report, Result, TlsFailure};
pub use primitives::{Election, Group, Job, LockGuard, Membership, Observer, Permit, Semaphore};
pub use types::{
    check_value, Clock, GroupName, LeaseName, ManualClock, Member, Metadata, Owner, SessionId,
    SystemClock, Term, Token, MAX_NAME_LEN, MAX_VALUE_LEN,
};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
