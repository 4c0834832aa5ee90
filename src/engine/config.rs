//! Session configuration.

use crate::error::{Error, Result};
use crate::types::Metadata;
use std::time::Duration;

/// How a [`Session`](crate::Session) keeps itself alive.
///
/// Defaults: lease 15 s, renew interval 5 s, drift 1 %. Built and validated with
/// [`Config::builder`].
///
/// ```
/// use simba_lease::Config;
/// use std::time::Duration;
/// let config = Config::builder()
///     .lease(Duration::from_secs(10))
///     .renew_interval(Duration::from_secs(3))
///     .metadata("worker-7")
///     .build()?;
/// assert_eq!(config.lease(), Duration::from_secs(10));
/// assert!(Config::builder().drift(0.9).build().is_err());
/// assert!(Config::builder().lease(Duration::MAX).build().is_err());
/// assert!(Config::builder().lock_delay(Config::MAX_LOCK_DELAY * 2).build().is_err());
/// # Ok::<(), simba_lease::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    lease: Duration,
    renew_interval: Duration,
    drift: f64,
    metadata: Metadata,
    reopen_on_expiry: bool,
    fair_locks: bool,
    lock_delay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            drift: 0.01,
            metadata: Metadata::default(),
            reopen_on_expiry: true,
            fair_locks: false,
            lock_delay: Duration::ZERO,
        }
    }
}

impl Config {
    /// The longest lease accepted: one week.
    pub const MAX_LEASE: Duration = crate::types::limits::MAX_LEASE;

    /// The longest lock-delay accepted: one week.
    pub const MAX_LOCK_DELAY: Duration = crate::types::limits::MAX_LOCK_DELAY;

    /// A builder starting from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            config: Config::default(),
            metadata: None,
        }
    }

    /// How long the session (and every lease it holds) lives without a keep-alive.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How often the session is kept alive.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// The bound on the rate difference between the local clock and the backend's clock
    /// (0.01 = 1 %); local deadlines are shortened by this fraction.
    pub fn drift(&self) -> f64 {
        self.drift
    }

    /// The session's metadata, visible to group members.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Whether an expired session opens a new backend session and re-enters its elections,
    /// observers and groups (default), or stays expired for good.
    pub fn reopen_on_expiry(&self) -> bool {
        self.reopen_on_expiry
    }

    /// Whether the session's locks are taken in arrival order (default `false`); see
    /// [`ConfigBuilder::fair_locks`].
    pub fn fair_locks(&self) -> bool {
        self.fair_locks
    }

    /// How long a name stays blocked after a term of this session ended with the session's
    /// expiry (zero: not at all, the default); see [`ConfigBuilder::lock_delay`].
    pub fn lock_delay(&self) -> Duration {
        self.lock_delay
    }

    /// How long a candidate or a blocked lock waits between attempts without a release
    /// notification: half the renew interval (plus jitter of up to a quarter of it).
    pub fn retry_interval(&self) -> Duration {
        self.renew_interval / 2
    }
}

/// Builder of [`Config`]; [`ConfigBuilder::build`] validates every value.
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    config: Config,
    metadata: Option<String>,
}

impl ConfigBuilder {
    /// Lease duration (default 15 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Renew interval (default 5 s); must be shorter than the lease minus drift.
    pub fn renew_interval(mut self, renew: Duration) -> Self {
        self.config.renew_interval = renew;
        self
    }

    /// Clock-rate drift bound in `[0, 0.5)` (default 0.01).
    pub fn drift(mut self, drift: f64) -> Self {
        self.config.drift = drift;
        self
    }

    /// After an expiry, open a new backend session (a new id) and re-enter elections,
    /// observers and group memberships on it (default `true`); `false` makes expiry
    /// terminal. Locks held under the expired session stay lost either way.
    pub fn reopen_on_expiry(mut self, reopen: bool) -> Self {
        self.config.reopen_on_expiry = reopen;
        self
    }

    /// Take this session's locks in arrival order (default `false`).
    ///
    /// A fair `lock`, `lock_timeout` or `lock_cancellable` takes a place in the name's queue
    /// on the backend and gets the lock only when no live waiter is ahead of it; `try_lock`
    /// gets it only when nobody is queued ahead (it never keeps a place). A place lives while
    /// its session does and its waiter keeps asking (the engine asks again at least every
    /// retry interval; a place not renewed within one lease is skipped), so a crashed or
    /// cancelled waiter never blocks the queue. Plain locks of other sessions ignore the
    /// queue: every process locking a name must use fair locks for the order to hold.
    /// [`Session::open`](crate::Session::open) fails with
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a backend without queues.
    /// [`Session::lock_queue`](crate::Session::lock_queue) lists the waiters. Semaphores and
    /// elections do not queue.
    pub fn fair_locks(mut self, fair: bool) -> Self {
        self.config.fair_locks = fair;
        self
    }

    /// Keep a name blocked for `delay` after a term of this session ended because the session
    /// expired (default zero: no delay; at most [`Config::MAX_LOCK_DELAY`]), as Chubby's and
    /// Consul's lock-delay.
    ///
    /// The delay belongs to the session (the backend learns it when the session opens) and is
    /// measured by the backend's clock from the end of the term: from the session's expiry
    /// there (on ZooKeeper from the first time an acquirer saw the lease node gone, which is
    /// not earlier). Meanwhile no new term of the name begins: an acquire by another session
    /// answers that the name is held by the expired session's last term, with the delay left
    /// as its remaining time, and [`LeaseBackend::owner`](crate::spi::LeaseBackend::owner) (so
    /// an observer's [`leader`](crate::Observer::leader)) says the same. Read-write locks
    /// keep it too: a write term in its delay blocks readers and writers, a read term writers
    /// only (see [the guide](crate::guide::rw_locks)). A
    /// clean end frees the name at once: a release (unlock, resign, a guard dropped) and
    /// closing the session (`close()`, or dropping it) while it is live. A session that
    /// expired locally does not close its backend session then, so the backend sees the
    /// expiry.
    ///
    /// For a resource that cannot check fencing tokens, this keeps a former holder that was
    /// paused or cut off from overlapping the next holder by up to `delay` beyond its lease.
    /// The cost: the failover after a crash takes up to `lease + delay` instead of `lease`.
    /// [`Session::open`](crate::Session::open) fails with
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a backend without lock-delay (see
    /// [`LeaseBackend::supports_lock_delay`](crate::spi::LeaseBackend::supports_lock_delay)).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.config.lock_delay = delay;
        self
    }

    /// Session metadata (at most 1024 bytes of UTF-8).
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// Validates and returns the configuration.
    pub fn build(self) -> Result<Config> {
        let mut c = self.config;
        if let Some(m) = self.metadata {
            c.metadata = Metadata::new(m)?;
        }
        if c.lease > Config::MAX_LEASE {
            return Err(Error::config(
                "lease",
                format!(
                    "{:?} is longer than the {:?} maximum",
                    c.lease,
                    Config::MAX_LEASE
                ),
            ));
        }
        if c.lease < Duration::from_millis(10) {
            return Err(Error::config(
                "lease",
                format!("{:?} is shorter than the 10 ms minimum", c.lease),
            ));
        }
        crate::types::limits::check_lock_delay(c.lock_delay)?;
        if !(0.0..0.5).contains(&c.drift) || c.drift.is_nan() {
            return Err(Error::config(
                "drift",
                format!("{} is outside [0, 0.5)", c.drift),
            ));
        }
        if c.renew_interval.is_zero() || c.renew_interval >= c.lease.mul_f64(1.0 - c.drift) {
            return Err(Error::config(
                "renew_interval",
                format!(
                    "{:?} must be greater than zero and shorter than the lease {:?} minus drift",
                    c.renew_interval, c.lease
                ),
            ));
        }
        Ok(c)
    }
}
