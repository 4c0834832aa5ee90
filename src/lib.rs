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
#![warn(missing_docs)]

pub mod backends;
pub mod engine;
mod error;
pub mod primitives;
mod rand;
pub mod spi;
#[cfg(feature = "tck")]
pub mod tck;
mod types;

pub use backends::connect;
pub use engine::{
    Clock, Config, ConfigBuilder, Event, LossReason, ManualClock, Session, SessionState,
    SystemClock,
};
pub use error::{BoxError, Error, Result};
pub use primitives::{Election, Group, LockGuard, Membership, Observer};
pub use types::{
    GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token, MAX_NAME_LEN,
};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
