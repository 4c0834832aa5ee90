//! Counting semaphores: `Session::semaphore`. Permit `i` of semaphore `name` is the lease
//! `{name}.permit-{i}`, so each permit is a term with its own fencing token, released when its
//! [`Permit`] is dropped and lost with its session (a crashed holder's permits come back once
//! its session expires: no orphaned permits), on every backend.

use super::lock::{lock_until, try_once, waiting, LockGuard, WaitingForRelease};
use super::IntoLeaseName;
use crate::engine::driver::wait::{self, LockWait, PermitRound, Step};
use crate::engine::handle::EngineHandle;
use crate::engine::{Cancel, Session};
use crate::error::{Error, Result};
use crate::types::{LeaseName, Owner, Term, Token};
use crate::Event;
use crossbeam_channel::Receiver;
use std::time::{Duration, Instant};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1000;

impl Session {
    /// A counting semaphore of `permits` (1 to [`MAX_PERMITS`]) leased permits named `name`.
    ///
    /// Every process using the semaphore must give the same number of permits: permit `i` is
    /// the lease `{name}.permit-{i}`, so a process that counts more permits admits more
    /// holders. Fails with [`Error::InvalidConfig`] for 0 or too many permits, and with
    /// [`Error::InvalidName`] when `{name}.permit-{permits - 1}` is longer than a name may be.
    ///
    /// ```
    /// use simba_lease::{Config, Session};
    /// let a = Session::connect("memory://", Config::default())?;
    /// let pool = a.semaphore("db-connections", 2)?;
    /// let first = pool.try_acquire()?.expect("a free permit");
    /// let second = pool.try_acquire()?.expect("another one");
    /// assert!(pool.try_acquire()?.is_none()); // both taken
    /// assert_ne!(first.index(), second.index());
    /// assert_eq!(pool.holders()?.len(), 2);
    /// drop(first); // released (in the background)
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn semaphore(&self, name: impl IntoLeaseName, permits: u32) -> Result<Semaphore> {
        let name = name.into_lease_name()?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::config(
                "permits",
                format!("{permits} is outside 1..={MAX_PERMITS}"),
            ));
        }
        let slots = (0..permits)
            .map(|i| LeaseName::new(format!("{name}.permit-{i}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Semaphore {
            inner: self.inner.clone(),
            name,
            slots,
        })
    }
}

/// A counting semaphore whose permits are leases of one session (see
/// [`Session::semaphore`]). Cheap to keep; taking a permit tries the permits' leases from a
/// random one on (one backend call each) and, when all are held, waits for a release of any.
pub struct Semaphore {
    inner: EngineHandle,
    name: LeaseName,
    slots: Vec<LeaseName>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.slots.len())
            .finish()
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &LeaseName {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.slots.len() as u32
    }

    /// A permit if one is free now; `Ok(None)` if all are held.
    pub fn try_acquire(&self) -> Result<Option<Permit>> {
        try_once(|until, once, cancel, last| self.acquire_until(until, once, cancel, last))
    }

    /// A permit, waiting as long as it takes (until the session is lost).
    pub fn acquire(&self) -> Result<Permit> {
        waiting(
            "taking a permit",
            None,
            None,
            |until, once, cancel, last| self.acquire_until(until, once, cancel, last),
        )
    }

    /// A permit, waiting at most `timeout`; [`Error::Timeout`] after that.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Permit> {
        let op = "waiting for a permit";
        waiting(op, Some(timeout), None, |until, once, cancel, last| {
            self.acquire_until(until, once, cancel, last)
        })
    }

    /// A permit, waiting until `timeout` passes (`None`: no deadline) or `cancel` is
    /// cancelled ([`Error::Cancelled`]).
    pub fn acquire_cancellable(
        &self,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Result<Permit> {
        let op = "waiting for a permit";
        waiting(op, timeout, Some(cancel), |until, once, cancel, last| {
            self.acquire_until(until, once, cancel, last)
        })
    }

    /// The live holders, by permit index (one backend read per permit).
    pub fn holders(&self) -> Result<Vec<(u32, Owner)>> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(o) = self.inner.backend().owner(slot)? {
                out.push((i as u32, o));
            }
        }
        Ok(out)
    }

    fn acquire_until(
        &self,
        until: Option<Instant>,
        once: bool,
        cancel: Option<&Cancel>,
        last: &mut Option<Error>,
    ) -> Result<Option<Permit>> {
        const OP: &str = "taking a permit";
        let inner = &self.inner;
        let n = self.slots.len();
        let start = wait::first_permit(crate::rand::u64(), n);
        let mut wait = LockWait::new(once, inner.config().retry_interval())
            .waiting_from_start()
            .until(until);
        // Registered before the first round, so a release during it is not missed.
        let _waiting: Vec<WaitingForRelease<'_>> = if once {
            Vec::new()
        } else {
            self.slots
                .iter()
                .map(|s| WaitingForRelease::new(inner, s))
                .collect()
        };
        loop {
            Cancel::check(cancel, OP)?;
            // While an expired session is reopened, wait for the new one.
            if !once && !inner.wait_live(until, false, cancel, OP)? {
                Cancel::check(cancel, OP)?;
                return Ok(None);
            }
            let seen = inner.releases_seen(&self.slots);
            // One round over the permits, each tried once; the round's outcome goes through
            // the lock calls' wait-and-retry policy.
            let mut round = PermitRound::new(start, n);
            while let Some(i) = round.next() {
                // Plain acquires: a queue per permit would order nothing.
                let slot = self.slots[i].clone();
                match lock_until(
                    inner,
                    slot,
                    Some(Instant::now()),
                    true,
                    false,
                    None,
                    &mut None,
                ) {
                    Ok(Some(guard)) => {
                        return Ok(Some(Permit {
                            guard,
                            index: i as u32,
                        }))
                    }
                    Ok(None) => round.busy(),
                    Err(e) => round.failed(e),
                }
            }
            let round = round.outcome();
            let expired = matches!(round, Err(Error::SessionExpired { .. }));
            let coming = expired && inner.will_reopen();
            let next = match wait.on_reply(round, coming, inner.now(), crate::rand::jitter) {
                Step::Busy => return Ok(None),
                Step::Fail(e) => return Err(e),
                Step::RetryNow | Step::WaitForReleases | Step::Acquired(_) => continue,
                Step::RetryAt(at) => at,
            };
            *last = wait.take_last();
            if wait.timed_out(inner.now()) {
                return Ok(None);
            }
            inner.wait_for_change(next, cancel, |v| {
                self.slots
                    .iter()
                    .zip(&seen)
                    .any(|(n, seen)| v.releases_of(n) != *seen)
            });
            if wait.timed_out(inner.now()) {
                return Ok(None);
            }
        }
    }
}

/// A held permit: a lock on one of the semaphore's permit leases. Dropping it releases the
/// permit (on the session's work queue); [`Permit::release`] releases it before returning.
#[derive(Debug)]
pub struct Permit {
    guard: LockGuard,
    index: u32,
}

impl Permit {
    /// Which permit this is (0 to permits − 1).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The permit's lease (`{name}.permit-{index}`).
    pub fn lease(&self) -> &LeaseName {
        self.guard.name()
    }

    /// The term's fencing token (it increases with every holder of this permit).
    pub fn token(&self) -> Token {
        self.guard.token()
    }

    /// The term as granted.
    pub fn term(&self) -> &Term {
        self.guard.term()
    }

    /// Whether the permit is still held (see [`LockGuard::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.guard.is_valid()
    }

    /// How long the permit stays valid from now (see [`LockGuard::valid_for`]).
    pub fn valid_for(&self) -> Option<Duration> {
        self.guard.valid_for()
    }

    /// The fencing token if still held, otherwise [`Error::LeaseLost`].
    pub fn check(&self) -> Result<Token> {
        self.guard.check()
    }

    /// Receives [`Event::LockLost`] if the permit is lost before it is dropped.
    pub fn lost(&self) -> &Receiver<Event> {
        self.guard.lost()
    }

    /// Releases the permit now, reporting a backend failure (see [`LockGuard::unlock`]).
    pub fn release(self) -> Result<()> {
        self.guard.unlock()
    }
}
