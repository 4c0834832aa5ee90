//! Deterministic simulation of the engine with injected faults, and a contract checker
//! (feature `sim`).
//!
//! [`run`] drives several sessions' real engine cores (`Core`), each with election
//! candidates (with term values they change), observers, locks, a fair lock, a semaphore, a
//! run-once job, a read-write lock (read most of the time, written now and then) and a group
//! watch, against a [`Model`] backend, through a network that
//! delays and loses requests and replies, on one virtual clock and one seeded [`Rng`]: the
//! same seed gives the same history, bit for bit. No threads, no sleeps. The driver's
//! decisions are the shipped ones (`engine::driver`): the routing of the core's outputs
//! (keep-alives on their own channel; attempts, releases and the reopen after an expiry one
//! at a time on the work queue), which replies reach the engine (only those of the session
//! they were sent for), when to reopen, what a failed open leads to and how long it waits,
//! the re-join plan, the lock and permit callers' wait-and-retry loop (with deadlines), a
//! fair acquire's reply, a semaphore's rounds over its permits, a read-write lock call's
//! attempts (a writer's patience, its reply taken into the engine, the writers' queue left by
//! a writer that gave up, on the same wait), a job claim's deadline and validity, and the
//! write of a candidate's value that changed during an attempt. Locks, reads, writes,
//! unlocks, resigns, jobs and values come from their callers; some processes keep expiry
//! terminal (`reopen_on_expiry(false)`), some give their terms a lock-delay
//! (`Config::lock_delay`: the model keeps a name blocked that long after its holder's
//! expiry, a read-write term's against the terms it conflicts with, and the engine leaves an
//! expired session to expire on the backend), and an unlock
//! whose release finds its term gone must report it once. Client processes pause for longer than their lease and resume as if
//! nothing happened, and their clocks run at a rate `1 ± d` within the drift bound. The
//! [`Premises`] break the backend (or a process's setup) on purpose, so the tests show the
//! checker finds what it must.
//!
//! The [checker](check) then verifies the contract over what every session *believed*
//! ([`Belief`]: exactly when the engine's `is_valid` holds, mapped to the backend's true time):
//! one believer per lease and job at every true instant, strictly increasing tokens, nothing
//! after expiry, no silent loss (every loss reaches its holder at the step the term stops
//! being valid), an unlock's loss only of a term the backend had ended before the release,
//! resign and close ending terms, observers never seeing a token go back nor a value not
//! written for the term they see (or one of an older term), no session renewed after it
//! ended, fair locks granted in queue order, never more permits held than a semaphore has,
//! no job run again within the window of a finished run, and a read-write lock's writer
//! believing alone (no read or write term of the name believed by another at the same
//! instant) with tokens by the read-write rule (a write's above every token before, a
//! read's above the last write's), and no new term of a name within the lock-delay after a
//! term of it ended with its session's expiry (backend clock; for read-write terms, no term
//! after a write term and no write term after a read term).
//!
//! ```
//! use simba_lease::sim::{run, Premises, SimConfig};
//! for seed in 0..5 {
//!     let outcome = run(seed, &SimConfig::for_seed(seed, Premises::default()), false);
//!     assert!(outcome.violations.is_empty(), "{}", outcome.report());
//! }
//! ```
//!
//! Replay a seed with its trace:
//! `SIMBA_SIM_SEED=123 cargo test --features sim --test sim replay -- --nocapture`;
//! run the nightly 100 000 seeds:
//! `SIMBA_SIM_SEEDS=100000 cargo test --release --features sim --test sim seeds -- --nocapture`.
//! See [`failure_modes`] for what the simulation shows.

pub mod check;
mod config;
mod model;
mod rng;
mod world;

pub use check::{Belief, Held, Kind, Violation};
pub use config::{Faults, Premises, SimConfig, MIXES};
pub use model::{
    session_id, session_no, DelayEntry, DelayStep, Grant, JobEntry, Model, ModelBackend,
    QueueEntry, QueueStep, RwDelayEntry, RwGrant,
};
pub use rng::Rng;
pub use world::{run, Outcome, Stats, TraceLine};

#[doc = include_str!("failure_modes.md")]
pub mod failure_modes {}
