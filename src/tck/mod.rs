//! The conformance kit: the contract as named test cases, written once against
//! [`LeaseBackend`] and the engine, run by every backend's test file in one line.
//!
//! ```
//! // tests/my_backend.rs (here with the in-memory backend, isolated by being new)
//! simba_lease::tck_suite!(|| std::sync::Arc::new(simba_lease::backends::MemoryBackend::new()));
//! # fn main() {}
//! ```
//!
//! The factory is called once per case and must return a backend isolated from every other
//! case (its own key prefix, schema or root). Timing cases use [`Harness::lease`] (default
//! 600 ms); pass a longer one where the backend's minimum session time is longer:
//! `tck_suite!(factory, lease = Duration::from_secs(2))`.

mod backend_cases;
mod delay_cases;
mod engine_cases;
mod event_cases;
mod fair_cases;
mod fault_cases;
mod gate;
pub mod history;
mod job_cases;
pub mod net;
mod rw_cases;
mod rw_delay_cases;
mod semaphore_cases;
mod value_cases;

pub use backend_cases::*;
pub use delay_cases::*;
pub use engine_cases::*;
pub use event_cases::*;
pub use fair_cases::*;
pub use fault_cases::*;
pub use job_cases::*;
pub use rw_cases::*;
pub use rw_delay_cases::*;
pub use semaphore_cases::*;
pub use value_cases::*;

use crate::engine::Config;
use crate::spi::LeaseBackend;
use crate::types::{LeaseName, Metadata, SessionId};
use crate::{Error, GroupName};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a case needs: a backend factory and the timing of short leases.
pub struct Harness {
    factory: Box<dyn Fn() -> Arc<dyn LeaseBackend>>,
    /// The lease of timing cases.
    pub lease: Duration,
    /// The bound within which a condition must become true.
    pub patience: Duration,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("lease", &self.lease)
            .field("patience", &self.patience)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// A harness with a 600 ms lease and 20 s of patience.
    pub fn new(factory: impl Fn() -> Arc<dyn LeaseBackend> + 'static) -> Self {
        Harness {
            factory: Box::new(factory),
            lease: Duration::from_millis(600),
            patience: Duration::from_secs(20),
        }
    }

    /// Sets the lease of timing cases.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// A fresh, isolated backend.
    pub fn backend(&self) -> Arc<dyn LeaseBackend> {
        (self.factory)()
    }

    /// A session config with the short lease and renew = lease / 5.
    pub fn config(&self) -> Config {
        Config::builder()
            .lease(self.lease)
            .renew_interval(self.lease / 5)
            .build()
            .expect("valid TCK config")
    }

    /// [`Harness::config`] with expiry terminal (`reopen_on_expiry(false)`).
    pub fn terminal_config(&self) -> Config {
        Config::builder()
            .lease(self.lease)
            .renew_interval(self.lease / 5)
            .reopen_on_expiry(false)
            .build()
            .expect("valid TCK config")
    }

    /// A long lease for sessions that must outlive the case.
    pub fn long_lease(&self) -> Duration {
        self.patience * 3
    }

    /// Opens a backend session with `lease`.
    pub fn open(&self, b: &dyn LeaseBackend, lease: Duration) -> SessionId {
        b.open_session(lease, &Metadata::default())
            .expect("open_session")
            .id
    }

    /// Waits until `cond` holds, polling every few milliseconds; panics with `what` after
    /// [`Harness::patience`].
    pub fn until(&self, what: &str, cond: impl FnMut() -> bool) {
        until(self.patience, what, cond);
    }

    /// [`until`](Self::until) for a condition read from the backend: a transient error (a
    /// call that timed out on a loaded machine) is read again, any other fails the case.
    pub fn until_ok(&self, what: &str, mut cond: impl FnMut() -> crate::Result<bool>) {
        self.until(what, || match cond() {
            Ok(holds) => holds,
            Err(e) if e.is_transient() => false,
            Err(e) => panic!("{what}: {}", e.report()),
        });
    }
}

/// Waits until `cond` holds, polling every few milliseconds; panics with `what` after
/// `patience`. Tests wait for a condition with this, never for a fixed time.
///
/// ```
/// let start = std::time::Instant::now();
/// simba_lease::tck::until(std::time::Duration::from_secs(5), "a millisecond passed", || {
///     start.elapsed() >= std::time::Duration::from_millis(1)
/// });
/// ```
pub fn until(patience: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + patience;
    while !cond() {
        assert!(Instant::now() < end, "not true within {patience:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A prefix unique to one case and stamped with the time it was made:
/// `<tag><unix seconds, hex>r<8 random hex digits>_`. It is valid in a SQL identifier, a
/// Redis key and a ZooKeeper path, and [`prefix_age`] reads the stamp back, so a later run
/// can sweep what a crashed case left behind on a shared server.
///
/// ```
/// use simba_lease::tck::{prefix_age, stamped_prefix};
/// let p = stamped_prefix("t");
/// assert!(p.starts_with('t') && p.ends_with('_'));
/// assert!(prefix_age("t", &p).unwrap() < std::time::Duration::from_secs(60));
/// ```
pub fn stamped_prefix(tag: &str) -> String {
    let random = SessionId::random();
    let random: String = random
        .as_str()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(8)
        .collect();
    format!("{tag}{:x}r{random}_", unix_seconds())
}

/// How long ago [`stamped_prefix`]`(tag)` made `name` (or a name that starts with such a
/// prefix); `None` when `name` is not one.
pub fn prefix_age(tag: &str, name: &str) -> Option<Duration> {
    let (stamp, _) = name.strip_prefix(tag)?.split_once('r')?;
    let made = u64::from_str_radix(stamp, 16).ok()?;
    Some(Duration::from_secs(unix_seconds().saturating_sub(made)))
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A unique name for a case (so cases sharing a server never collide).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &SessionId::random().as_str()[..8])
}

/// A unique lease name.
pub fn lease_name(prefix: &str) -> LeaseName {
    LeaseName::new(unique(prefix)).expect("valid name")
}

/// A unique group name.
pub fn group_name(prefix: &str) -> GroupName {
    GroupName::new(unique(prefix)).expect("valid name")
}

fn expired(r: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::SessionExpired { .. }))
}

/// Expands to one `#[test]` per TCK case, each calling the case with a fresh [`Harness`].
///
/// `tck_suite!(factory)` or `tck_suite!(factory, lease = duration)`.
#[macro_export]
macro_rules! tck_suite {
    ($factory:expr) => {
        $crate::tck_suite!($factory, lease = ::std::time::Duration::from_millis(600));
    };
    ($factory:expr, lease = $lease:expr) => {
        $crate::tck_suite!(@cases $factory, $lease;
            session_open_keep_alive_expiry_never_revived,
            remaining_is_measured_and_bounded_by_lease,
            close_frees_leases_and_memberships,
            keep_alive_lists_held_leases,
            acquire_free_held_and_reacquire,
            release_with_wrong_token_or_session_has_no_effect,
            release_and_leave_on_an_expired_or_closed_session_return_false,
            owner_only_while_live,
            take_over_after_expiry_and_keep_alive_reports_gone,
            names_are_case_sensitive,
            contending_sessions_exactly_one_holder,
            token_increases_across_100_terms,
            token_increases_across_expiry,
            token_increases_across_purge,
            group_join_leave_expiry_empty,
            release_and_group_changes_are_notified,
            names_and_metadata_are_validated_before_io,
            election_failover_after_crash,
            resign_elects_another_candidate,
            observe_reports_leader_changes_with_tokens,
            lock_guard_drop_releases,
            lock_excludes_threads_of_one_session,
            lock_waiter_takes_over_after_release,
            a_release_wakes_a_waiter_of_this_process_before_its_retry,
            locks_exclude_across_sessions_with_increasing_tokens,
            session_expiry_is_reported_in_order,
            expired_session_reopens_and_reenters_elections_and_groups,
            close_ends_terms_in_order_and_is_idempotent,
            group_watch_reports_changes,
            unlock_or_resign_of_a_lost_term_says_so_and_reports_it_once,
            lock_and_election_wait_for_the_reopened_session,
            observer_sees_short_terms_where_the_backend_pushes,
            a_resigning_leader_lets_another_session_take_the_next_term,
            out_of_range_leases_are_rejected,
            cancel_ends_lock_and_election_waits_promptly,
            locking_a_name_this_thread_holds_fails_instead_of_waiting,
            queued_acquires_take_the_lease_in_arrival_order,
            fair_locks_are_granted_in_arrival_order,
            semaphore_admits_at_most_its_permits,
            semaphore_waits_for_the_reopened_session,
            list_shows_live_sessions_leases_and_groups,
            run_once_claims_once_per_window_with_increasing_tokens,
            run_once_at_least_keeps_the_name_taken_after_a_fast_job,
            run_once_at_most_ends_an_overrunning_claim,
            run_once_claim_of_an_ended_session_is_freed,
            term_values_belong_to_their_term,
            observers_see_leader_values_and_candidates,
            a_blocking_callback_holds_back_no_channel_or_other_callback,
            wait_elected_hands_out_only_a_valid_term,
            one_elected_per_term_across_resign_and_campaign,
            resign_and_unlock_return_after_their_event_reached_the_callbacks,
            a_timeout_after_failed_acquires_keeps_the_last_failure,
            a_token_not_above_one_seen_before_is_reported,
            lock_delay_blocks_the_name_after_its_holders_expiry,
            lock_delay_does_not_follow_a_release_or_a_close,
            lock_delay_holds_a_lost_lock_of_an_engine_session,
            rw_backend_readers_share_writers_wait_and_tokens_follow_the_rule,
            rw_keep_alive_lists_the_sessions_read_and_write_terms,
            rw_locks_exclude_under_contention,
            rw_readers_hold_in_parallel,
            rw_a_waiting_writer_blocks_new_readers,
            rw_crashed_holders_and_waiting_writers_free_the_name,
            rw_cancel_ends_waits_and_withdraws_the_writer,
            rw_lock_delay_blocks_after_an_expired_writer_or_reader,
            rw_lock_delay_does_not_follow_a_release_a_close_or_a_wait,
            rw_lock_delay_holds_a_lost_write_term_of_an_engine_session,
        );
    };
    (@cases $factory:expr, $lease:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let harness = $crate::tck::Harness::new($factory).with_lease($lease);
                $crate::tck::$case(&harness);
            }
        )*
    };
}
