//! The session engine: a pure, clock-injected state machine (`core`) and the threads that
//! carry its inputs and outputs ([`Session`]): one keep-alive thread per session; the process's
//! shared timer, work and event pools (`executor`); one notification router per backend
//! (`router`); backend calls guarded against panics (`guarded`).

mod acquire;
mod cancel;
mod config;
// The simulation pumps the core and the call machines themselves; to everything else in the
// crate they are the engine's own (the primitives reach the engine through `handle`).
#[cfg(feature = "sim")]
pub(crate) mod core;
#[cfg(not(feature = "sim"))]
mod core;
#[cfg(feature = "sim")]
pub(crate) mod driver;
#[cfg(not(feature = "sim"))]
mod driver;
mod event;
#[cfg(feature = "sim")]
pub(crate) mod executor;
#[cfg(not(feature = "sim"))]
mod executor;
mod guarded;
pub(crate) mod handle;
// The simulation delivers the core's events through the shipped listeners, on virtual queues.
#[cfg(feature = "sim")]
pub(crate) mod listeners;
#[cfg(not(feature = "sim"))]
mod listeners;
mod metrics;
mod router;
mod session;

pub use self::core::Health;
pub use crate::types::{Clock, ManualClock, SystemClock};
pub use cancel::Cancel;
pub use config::{Config, ConfigBuilder};
pub use event::{Event, LossReason};
pub use session::{Session, SessionState};
