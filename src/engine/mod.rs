//! The session engine: a pure, clock-injected state machine (`core`) and the threads that
//! carry its inputs and outputs ([`Session`]): one keep-alive thread per session; the process's
//! shared timer, work and event pools (`executor`); one notification router per backend
//! (`router`); backend calls guarded against panics (`guarded`).

pub(crate) mod acquire;
mod cancel;
mod config;
pub(crate) mod core;
pub(crate) mod driver;
mod event;
mod executor;
mod guarded;
pub(crate) mod handle;
mod listeners;
pub(crate) mod metrics;
mod router;
pub(crate) mod session;
mod watermark;

pub use self::core::{HandleId, Health, Holder};
pub use crate::types::{Clock, ManualClock, SystemClock};
pub use cancel::Cancel;
pub use config::{Config, ConfigBuilder};
pub use event::{Event, LossReason};
pub use session::{Session, SessionState};
