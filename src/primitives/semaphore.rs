//! Counting semaphores: `Session::semaphore`. Permit `i` of semaphore `name` is the lease
//! `{name}.permit-{i}`, so each permit is a term with its own fencing token, released when its
//! [`Permit`] is dropped and lost with its session (a crashed holder's permits come back once
//! its session expires: no orphaned permits), on every backend.

use super::lock::{waited, LockGuard};
use super::IntoLeaseName;
use crate::engine::handle::{EngineHandle, Form, Spec, Want};
use crate::engine::{Cancel, Session};
use crate::error::{Error, Result};
use crate::types::{LeaseName, Owner, Term, Token};
use crate::Event;
use crossbeam_channel::Receiver;
use std::time::Duration;

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
        self.take(Form::Try, "taking a permit", None)
    }

    /// A permit, waiting as long as it takes (until the session is lost).
    pub fn acquire(&self) -> Result<Permit> {
        let op = "taking a permit";
        waited(self.take(Form::Wait(None), op, None), op)
    }

    /// A permit, waiting at most `timeout`; [`Error::Timeout`] after that.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Permit> {
        let op = "waiting for a permit";
        waited(self.take(Form::Wait(Some(timeout)), op, None), op)
    }

    /// A permit, waiting until `timeout` passes (`None`: no deadline) or `cancel` is
    /// cancelled ([`Error::Cancelled`]).
    pub fn acquire_cancellable(
        &self,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Result<Permit> {
        let op = "waiting for a permit";
        waited(self.take(Form::Wait(timeout), op, Some(cancel)), op)
    }

    /// The live holders, by permit index (one backend read per permit).
    pub fn holders(&self) -> Result<Vec<(u32, Owner)>> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(o) = self.inner.reads().owner(slot)? {
                out.push((i as u32, o));
            }
        }
        Ok(out)
    }

    /// A permit in `form`, through the engine's acquire call: rounds over the permits from
    /// a random one on (plain acquires: a queue per permit would order nothing), waiting
    /// for a release of any.
    fn take(
        &self,
        form: Form,
        operation: &'static str,
        cancel: Option<&Cancel>,
    ) -> Result<Option<Permit>> {
        let spec = Spec {
            want: Want::Permit,
            names: self.slots.clone(),
            form,
            operation,
        };
        Ok(self.inner.acquire(spec, cancel)?.map(|won| Permit {
            index: won.index as u32,
            guard: LockGuard::new(&self.inner, won),
        }))
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
