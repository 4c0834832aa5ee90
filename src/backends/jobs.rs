//! Checks shared by every backend's run-once job calls.

pub(crate) use crate::types::limits::{check_at_least, check_at_most};

/// Whole milliseconds of a checked duration, rounded down.
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper"
))]
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}
