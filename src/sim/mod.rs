//! Deterministic simulation of the engine with injected faults, and a contract checker
//! (feature `sim`).
//!
//! [`run`] drives several sessions' real engine cores (`Core`),
//! each with election candidates, observers, locks and a group watch, against a
//! [`Model`] backend, through a network that delays and loses requests and replies, on one
//! virtual clock and one seeded [`Rng`]: the same seed gives the same history, bit for bit.
//! No threads, no sleeps. The driver's decisions are the shipped ones (`engine::driver`):
//! the routing of the core's outputs (keep-alives on their own channel; attempts, releases
//! and the reopen after an expiry one at a time on the work queue), which replies reach the
//! engine (only those of the session they were sent for), when to reopen and what a failed
//! open leads to, and the lock callers' wait-and-retry loop; locks, unlocks and resigns come
//! from their callers, some processes keep expiry terminal (`reopen_on_expiry(false)`), and
//! an unlock whose release finds its term gone must report it once. Client processes pause for longer than their
//! lease and resume as if nothing happened, and their clocks run at a rate `1 ± d` within the
//! drift bound. Three [`Premises`] break the backend on purpose (lost writes, a clock step, a
//! term value kept into the next term) so the tests show the checker finds what it must.
//!
//! The [checker](check) then verifies the contract over what every session *believed*
//! ([`Belief`]: exactly when the engine's `is_valid` holds, mapped to the backend's true time):
//! one believer per lease at every true instant, strictly increasing tokens, nothing after
//! expiry but the losses, no silent loss (every loss reaches its holder at the step the term
//! stops being valid), resign and close ending terms, observers never seeing a token go back
//! nor a term with a value its holder did not give it (candidates of even-numbered sessions
//! take their terms with a value, the others without), and no session renewed after it
//! ended.
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

pub use check::{Belief, Kind, Violation};
pub use config::{Faults, Premises, SimConfig, MIXES};
pub use model::{session_id, session_no, Grant, Model};
pub use rng::Rng;
pub use world::{run, Outcome, Stats, TraceLine};

#[doc = include_str!("failure_modes.md")]
pub mod failure_modes {}
