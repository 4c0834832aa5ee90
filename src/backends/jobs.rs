//! Checks shared by every backend's run-once job calls.

use crate::error::{Error, Result};
use std::time::Duration;

/// The shortest `at_most`: backends store whole milliseconds.
pub(crate) const MIN_AT_MOST: Duration = Duration::from_millis(1);

/// Checks a job's `at_most`: at least 1 ms and at most
/// [`Config::MAX_LEASE`](crate::Config::MAX_LEASE), so no deadline arithmetic can overflow.
pub(crate) fn check_at_most(at_most: Duration) -> Result<()> {
    if at_most < MIN_AT_MOST || at_most > crate::Config::MAX_LEASE {
        return Err(Error::config(
            "at_most",
            format!(
                "{at_most:?} is out of range: at least {MIN_AT_MOST:?} and at most {:?}",
                crate::Config::MAX_LEASE
            ),
        ));
    }
    Ok(())
}

/// Checks a job's `at_least`: at most [`Config::MAX_LEASE`](crate::Config::MAX_LEASE)
/// (zero frees the name as soon as the job finishes).
pub(crate) fn check_at_least(at_least: Duration) -> Result<()> {
    if at_least > crate::Config::MAX_LEASE {
        return Err(Error::config(
            "at_least",
            format!(
                "{at_least:?} is out of range: at most {:?}",
                crate::Config::MAX_LEASE
            ),
        ));
    }
    Ok(())
}

/// Whole milliseconds of a checked duration, rounded down.
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper"
))]
pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}
