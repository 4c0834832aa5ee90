//! # simba-lease
//!
//! Distributed coordination for synchronous Rust: **sessions** kept alive by one keep-alive
//! each, **leases** with fencing tokens, and on top of them **elections**, **locks**,
//! **semaphores**, **run-once jobs**, **observers** and **groups**, over one backend SPI
//! ([`spi::LeaseBackend`]) with an in-memory backend built in and PostgreSQL, MySQL/MariaDB,
//! Redis and ZooKeeper behind features. No async runtime in the API: every call blocks, and
//! losses are reported on `crossbeam-channel` receivers and callbacks.
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
//! [`connect`] builds a backend from a URL: `memory://` (a fresh world per call),
//! `memory://name` (shared in the process), `postgres://`, `mysql://`, `redis://`,
//! `redis+cluster://`, `zookeeper://`; a URL whose Cargo feature is off fails with
//! [`Error::FeatureDisabled`] naming it.
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
//! What a backend needs to keep (3) across its own failures differs:
//! [`guide::choosing`].
//!
//! ## How a session keeps its leases
//!
//! A [`Session`] has one thread of its own, its keep-alive thread, which acquires and
//! callbacks never delay; backend work, timers and event delivery run on pools shared by
//! every session of the process ([`guide::threads`]). Every decision is made by a pure state
//! machine (`engine::core::Core`, crate-private) on the monotonic clock:
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
//! Defaults ([`Config::default`]): lease 15 s, renew interval 5 s, drift 1 %; candidates and
//! blocked locks retry every [`Config::retry_interval`] (half the renew interval) plus jitter,
//! or at once on a pushed release. A crashed holder's lease is free one lease after its last
//! keep-alive.
//!
//! Always check [`LockGuard::is_valid`] or, better, pass the fencing token
//! ([`LockGuard::token`], [`Term::token`]) to the protected resource and let it reject
//! tokens lower than the highest it has seen ([`guide::fencing`]): [`fence`] does that check
//! where the data lives, in a PostgreSQL or MySQL table (in your own transaction), a Redis
//! key or a directory.
//!
//! ## The guide
//!
//! * [`guide::losses`]: validity, events, and what each handle does when dropped.
//! * [`guide::fencing`]: checking the token in an SQL table, a Redis script, a file or an
//!   object store, with the helpers of [`fence`].
//! * [`guide::primitives`]: fair locks, semaphores, run-once jobs, leader values.
//! * [`guide::rw_locks`]: read-write locks, their token rule, crashes and costs.
//! * [`guide::choosing`] and [`guide::operating`]: choosing and running a backend.
//! * [`guide::tls`]: TLS and authentication.
//! * [`guide::threads`] and [`guide::async_code`]: threads, scale, and calling from async
//!   code (run the blocking calls with `spawn_blocking`).
//! * [`metrics`]: the figures published with feature `metrics`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod backends;
mod connect;
pub mod engine;
mod error;
pub mod fence;
/// The guide: how to use the library well, one topic per page (Markdown files in
/// `src/guide/`). Every example on these pages is compiled and run as a doc test.
///
/// | page | what it holds |
/// |---|---|
/// | [`losses`](crate::guide::losses) | when a term is valid, how its loss is reported, events, what each handle does on drop |
/// | [`fencing`](crate::guide::fencing) | checking the fencing token in the protected resource ([`fence`]): SQL, Redis, files and object stores |
/// | [`primitives`](crate::guide::primitives) | fair locks, semaphores, run-once jobs, leader values, and where each primitive is documented |
/// | [`rw_locks`](crate::guide::rw_locks) | read-write locks: the token rule a resource checks, writer preference, crashes, round trips, lock-delay |
/// | [`choosing`](crate::guide::choosing) | choosing a backend: durability of tokens, whose clock, failover time, notifications |
/// | [`operating`](crate::guide::operating) | operating notes per backend, `memory://` included |
/// | [`tls`](crate::guide::tls) | TLS and authentication on every backend |
/// | [`threads`](crate::guide::threads) | threads and scale |
/// | [`async_code`](crate::guide::async_code) | using the blocking API from async code |
pub mod guide {
    #[doc = include_str!("guide/losses.md")]
    pub mod losses {}
    #[doc = include_str!("guide/fencing.md")]
    pub mod fencing {}
    #[doc = include_str!("guide/primitives.md")]
    pub mod primitives {}
    #[doc = include_str!("guide/rw_locks.md")]
    pub mod rw_locks {}
    #[doc = include_str!("guide/choosing.md")]
    pub mod choosing {}
    #[doc = include_str!("guide/operating.md")]
    pub mod operating {}
    #[doc = include_str!("guide/tls.md")]
    pub mod tls {}
    #[doc = include_str!("guide/threads.md")]
    pub mod threads {}
    #[doc = include_str!("guide/async_code.md")]
    pub mod async_code {}
}
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
pub use primitives::{
    Election, Group, Job, LockGuard, Membership, Observer, Permit, RwGuard, RwLock, Semaphore,
};
pub use types::{
    check_value, Clock, GroupName, LeaseName, ManualClock, Member, Metadata, Owner, SessionId,
    SystemClock, Term, Token, MAX_NAME_LEN, MAX_VALUE_LEN,
};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
