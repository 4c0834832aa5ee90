//! Elections, locks, read-write locks, semaphores, run-once jobs, observers and groups: thin handles over a session's engine.

mod election;
mod group;
mod guard;
mod leader_value;
mod lock;
mod observer;
mod run_once;
mod rw_lock;
mod semaphore;

pub use election::Election;
pub use group::{Group, Membership};
pub use lock::LockGuard;
pub use observer::Observer;
pub use run_once::{check_job_window, Job};
pub use rw_lock::{RwGuard, RwLock};
pub use semaphore::{Permit, Semaphore, MAX_PERMITS};

use crate::error::Result;
use crate::types::{GroupName, LeaseName};

/// A lease name, or something validated into one: `&str`, `String`, `LeaseName`, `&LeaseName`.
pub trait IntoLeaseName {
    /// Validates and converts.
    fn into_lease_name(self) -> Result<LeaseName>;
}

/// A group name, or something validated into one: `&str`, `String`, `GroupName`, `&GroupName`.
pub trait IntoGroupName {
    /// Validates and converts.
    fn into_group_name(self) -> Result<GroupName>;
}

macro_rules! into_name {
    ($tr:ident, $f:ident, $ty:ident) => {
        impl $tr for $ty {
            fn $f(self) -> Result<$ty> {
                Ok(self)
            }
        }
        impl $tr for &$ty {
            fn $f(self) -> Result<$ty> {
                Ok(self.clone())
            }
        }
        impl $tr for &str {
            fn $f(self) -> Result<$ty> {
                $ty::new(self)
            }
        }
        impl $tr for String {
            fn $f(self) -> Result<$ty> {
                $ty::new(self)
            }
        }
        impl $tr for &String {
            fn $f(self) -> Result<$ty> {
                $ty::new(self.as_str())
            }
        }
    };
}

into_name!(IntoLeaseName, into_lease_name, LeaseName);
into_name!(IntoGroupName, into_group_name, GroupName);
