//! Elections, locks, observers and groups: thin handles over a session's engine.

mod election;
mod group;
mod lock;
mod observer;

pub use election::Election;
pub use group::{Group, Membership};
pub use lock::LockGuard;
pub use observer::Observer;

use crate::error::Error;
use crate::types::{GroupName, LeaseName};

/// Anything that converts into a [`LeaseName`] with validation: `&str`, `String`, `&LeaseName`.
pub trait IntoLeaseName: TryInto<LeaseName, Error = Error> {}
impl<T: TryInto<LeaseName, Error = Error>> IntoLeaseName for T {}

/// Anything that converts into a [`GroupName`] with validation: `&str`, `String`, `&GroupName`.
pub trait IntoGroupName: TryInto<GroupName, Error = Error> {}
impl<T: TryInto<GroupName, Error = Error>> IntoGroupName for T {}
