//! The service-provider interface every backend implements: [`LeaseBackend`].
//!
//! Each method is one atomic backend operation. A backend never schedules, retries or keeps
//! timers of its own (the engine does); every remaining time it returns is measured by the
//! backend's own clock.

mod backend;
mod delegate;
mod notify;
pub mod options;
pub(crate) mod url;

pub use backend::{
    Acquire, GroupInfo, HeldLease, HeldRw, JobClaim, KeepAlive, LeaseBackend, LeaseInfo, Listing,
    Queued, RwAcquire, RwDelayed, RwMode, RwState, SessionGrant, SessionInfo, SessionSpec,
};
pub use delegate::{Call, Delegate};
pub use notify::{Notification, NotifySink, Subscribers, Subscription};
