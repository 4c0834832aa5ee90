//! The longest durations the library accepts, shared by the engine and every backend (so no
//! deadline arithmetic can overflow).

use crate::error::{Error, Result};
use std::time::Duration;

/// The longest lease a session or a backend accepts: 7 days.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest timeout a backend option accepts (`query_timeout`, `connect_timeout`, …): one
/// hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The longest interval a backend option accepts (`purge_interval`): 7 days.
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest lock-delay a session or a backend accepts: the longest lease, 7 days (so
/// `expiry + delay` cannot overflow either).
pub const MAX_LOCK_DELAY: Duration = MAX_LEASE;

/// The shortest `at_most`: backends store whole milliseconds.
pub(crate) const MIN_AT_MOST: Duration = Duration::from_millis(1);

/// Checks a job's `at_most`: at least 1 ms and at most
/// [`Config::MAX_LEASE`](MAX_LEASE), so no deadline arithmetic can overflow.
pub(crate) fn check_at_most(at_most: Duration) -> Result<()> {
    if at_most < MIN_AT_MOST || at_most > MAX_LEASE {
        return Err(Error::config(
            "at_most",
            format!(
                "{at_most:?} is out of range: at least {MIN_AT_MOST:?} and at most {:?}",
                MAX_LEASE
            ),
        ));
    }
    Ok(())
}

/// Checks a job's `at_least`: at most [`Config::MAX_LEASE`](MAX_LEASE)
/// (zero frees the name as soon as the job finishes).
pub(crate) fn check_at_least(at_least: Duration) -> Result<()> {
    if at_least > MAX_LEASE {
        return Err(Error::config(
            "at_least",
            format!("{at_least:?} is out of range: at most {:?}", MAX_LEASE),
        ));
    }
    Ok(())
}

/// Checks a session's lock-delay: at most [`Config::MAX_LOCK_DELAY`](MAX_LOCK_DELAY)
/// (zero: none).
pub(crate) fn check_lock_delay(delay: Duration) -> Result<()> {
    if delay > MAX_LOCK_DELAY {
        return Err(Error::config(
            "lock_delay",
            format!("{delay:?} is out of range: at most {MAX_LOCK_DELAY:?}"),
        ));
    }
    Ok(())
}
