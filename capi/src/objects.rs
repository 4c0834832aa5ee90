//! The objects behind the handles, and the `simba_lock_*`/`simba_permit_*`/`simba_rw_guard_*`
//! bodies that locks, permits and read-write terms share (`Held`).

use crate::args::{millis, out, put, put_opt};
use crate::handles::{get, locked, lookup, Kind};
use crate::results::event_call;
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{simba_event, simba_status};
use crossbeam_channel::Receiver;
use lease::spi::LeaseBackend;
use lease::{
    Cancel, Election, Error, Event, Group, LeaseName, LockGuard, Membership, Observer, Permit,
    RwGuard, RwLock, Semaphore, Session, Token,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct BackendObj(pub(crate) Arc<dyn LeaseBackend>);
impl Kind for BackendObj {
    const NAME: &'static str = "simba_backend";
}

pub(crate) struct SessionObj {
    pub(crate) session: Session,
    /// The session's event queue, started by the first `simba_session_next_event`.
    pub(crate) events: Mutex<Option<Receiver<Event>>>,
}
impl Kind for SessionObj {
    const NAME: &'static str = "simba_session";
}

/// A held term of a lock, a permit or a read-write lock: what the `simba_lock_*`,
/// `simba_permit_*` and `simba_rw_guard_*` functions share.
pub(crate) trait Held: Send + Sync + 'static {
    /// What it is, in messages ("lock", "permit", "read-write lock").
    const WHAT: &'static str;
    /// What ending it is called, in messages ("unlocked", "released").
    const ENDED: &'static str;
    fn name(&self) -> &LeaseName;
    fn token(&self) -> Token;
    /// A permit's index; a read-write term's mode (`simba_rw_mode`); 0 for a lock.
    fn index(&self) -> u32;
    fn is_valid(&self) -> bool;
    fn valid_for(&self) -> Option<Duration>;
    fn check(&self) -> lease::Result<Token>;
    fn lost(&self) -> &Receiver<Event>;
    /// Ends the term now on the backend (`unlock`, `release`).
    fn end(self) -> lease::Result<()>;
}

/// `impl Held` by delegation to the type's own methods of the same names, but for its
/// name (`$name`), its index and how it ends (`$end`).
macro_rules! impl_held {
    ($t:ty, $what:literal, $ended:literal, $name:ident, |$g:ident| $index:expr, $end:ident) => {
        impl Held for $t {
            const WHAT: &'static str = $what;
            const ENDED: &'static str = $ended;
            fn name(&self) -> &LeaseName {
                self.$name()
            }
            fn token(&self) -> Token {
                self.token()
            }
            fn index(&self) -> u32 {
                let $g = self;
                $index
            }
            fn is_valid(&self) -> bool {
                self.is_valid()
            }
            fn valid_for(&self) -> Option<Duration> {
                self.valid_for()
            }
            fn check(&self) -> lease::Result<Token> {
                self.check()
            }
            fn lost(&self) -> &Receiver<Event> {
                self.lost()
            }
            fn end(self) -> lease::Result<()> {
                self.$end()
            }
        }
    };
}

impl_held!(LockGuard, "lock", "unlocked", name, |_lock| 0, unlock);
impl_held!(Permit, "permit", "released", lease, |p| p.index(), release);
impl_held!(
    RwGuard,
    "read-write lock",
    "unlocked",
    name,
    |g| crate::rw_lock::mode_of(g.mode()) as u32,
    unlock
);

/// The object behind a `simba_lock`, `simba_permit` or `simba_rw_guard` handle.
pub(crate) struct HeldObj<G> {
    /// The guard until it is unlocked, released or freed. Its mutex is held only to read or
    /// swap it, never across a backend call: a backend call on it (`simba_lock_set_value`)
    /// clones the `Arc` out first.
    pub(crate) held: Mutex<Option<Arc<G>>>,
    // Read after the guard is gone.
    pub(crate) token: u64,
    pub(crate) name: String,
    /// [`Held::index`].
    pub(crate) index: u32,
    lost: Receiver<Event>,
}

pub(crate) type LockObj = HeldObj<LockGuard>;
impl Kind for LockObj {
    const NAME: &'static str = "simba_lock";
}

pub(crate) type PermitObj = HeldObj<Permit>;
impl Kind for PermitObj {
    const NAME: &'static str = "simba_permit";
}

pub(crate) type RwGuardObj = HeldObj<RwGuard>;
impl Kind for RwGuardObj {
    const NAME: &'static str = "simba_rw_guard";
}

pub(crate) struct RwLockObj(pub(crate) RwLock);
impl Kind for RwLockObj {
    const NAME: &'static str = "simba_rw_lock";
}

impl<G: Held> HeldObj<G> {
    pub(crate) fn new(guard: G) -> Self {
        HeldObj {
            token: guard.token().get(),
            name: guard.name().to_string(),
            index: guard.index(),
            lost: guard.lost().clone(),
            held: Mutex::new(Some(Arc::new(guard))),
        }
    }

    fn ended(&self, status: simba_status, already: &str) -> Fail {
        Fail::new(
            status,
            format!("{} {} was {already}{}", G::WHAT, self.name, G::ENDED),
        )
    }

    /// Runs `f` on the guard under the mutex (local reads only: no backend call), or
    /// `SIMBA_LEASE_LOST` once it ended.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&G) -> R<T>) -> R<T> {
        match locked(&self.held).as_deref() {
            Some(g) => f(g),
            None => Err(self.ended(SIMBA_LEASE_LOST, "")),
        }
    }

    /// The guard for a backend call, outside the mutex; `SIMBA_LEASE_LOST` once it ended.
    pub(crate) fn shared(&self) -> R<Arc<G>> {
        let g = locked(&self.held).clone();
        g.ok_or_else(|| self.ended(SIMBA_LEASE_LOST, ""))
    }

    fn is_valid(&self) -> bool {
        locked(&self.held).as_deref().is_some_and(G::is_valid)
    }

    fn term(&self) -> R<(Token, Duration)> {
        self.with(|g| {
            let token = g.check()?;
            // Lost between the two reads: as lost as `check` would have said.
            let valid = g.valid_for().ok_or_else(|| Error::LeaseLost {
                name: g.name().clone(),
                token,
            })?;
            Ok((token, valid))
        })
    }

    /// Ends the term on the backend now; `SIMBA_CLOSED` the second time. A backend call on
    /// the guard in flight on another thread (`simba_lock_set_value`) is waited for first.
    fn end(&self) -> R {
        let Some(mut g) = locked(&self.held).take() else {
            return Err(self.ended(SIMBA_CLOSED, "already "));
        };
        // No new clone can be made now; the ones in flight end within a backend call.
        let g = loop {
            match Arc::try_unwrap(g) {
                Ok(g) => break g,
                Err(again) => g = again,
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        Ok(g.end()?)
    }

    /// Drops the guard (its `*_free`): released locally now and on the backend from the
    /// session's work thread, or when a backend call in flight on it returns.
    fn drop_guard(&self) {
        drop(locked(&self.held).take());
    }
}

/// `simba_lock_is_valid`, `simba_permit_is_valid` and `simba_rw_guard_is_valid`.
pub(crate) fn held_is_valid<G: Held, H>(handle: *const H, out_valid: *mut bool) -> simba_status
where
    HeldObj<G>: Kind,
{
    ffi(|| {
        let o = out(out_valid, "out_valid")?;
        put(o, get::<HeldObj<G>, _>(handle)?.is_valid());
        Ok(())
    })
}

/// `simba_lock_check`, `simba_permit_check` and `simba_rw_guard_check`.
pub(crate) fn held_check<G: Held, H>(handle: *const H, out_token: *mut u64) -> simba_status
where
    HeldObj<G>: Kind,
{
    ffi(|| {
        let o = out(out_token, "out_token")?;
        let token = get::<HeldObj<G>, _>(handle)?.with(|g| Ok(g.check()?))?;
        put(o, token.get());
        Ok(())
    })
}

/// `simba_lock_token`, `simba_permit_token` and `simba_rw_guard_token`.
pub(crate) fn held_token<G: Held, H>(handle: *const H, out_token: *mut u64) -> simba_status
where
    HeldObj<G>: Kind,
{
    ffi(|| {
        let o = out(out_token, "out_token")?;
        put(o, get::<HeldObj<G>, _>(handle)?.token);
        Ok(())
    })
}

/// `simba_lock_term`, `simba_permit_term` and `simba_rw_guard_term`.
pub(crate) fn held_term<G: Held, H>(
    handle: *const H,
    out_token: *mut u64,
    out_valid_ms: *mut u64,
) -> simba_status
where
    HeldObj<G>: Kind,
{
    ffi(|| {
        let (token, valid) = get::<HeldObj<G>, _>(handle)?.term()?;
        put_opt(out_token, token.get());
        put_opt(out_valid_ms, millis(valid));
        Ok(())
    })
}

/// `simba_lock_unlock`, `simba_permit_release` and `simba_rw_guard_unlock`.
pub(crate) fn held_end<G: Held, H>(handle: *const H) -> simba_status
where
    HeldObj<G>: Kind,
{
    ffi(|| get::<HeldObj<G>, _>(handle)?.end())
}

/// `simba_lock_next_event`, `simba_permit_next_event` and `simba_rw_guard_next_event`.
pub(crate) fn held_next_event<G: Held, H>(
    handle: *const H,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status
where
    HeldObj<G>: Kind,
{
    event_call(out_event, timeout_ms, || {
        Ok(get::<HeldObj<G>, _>(handle)?.lost.clone())
    })
}

/// `simba_lock_free`, `simba_permit_free` and `simba_rw_guard_free`.
pub(crate) fn held_free<G: Held, H>(handle: *mut H) -> simba_status
where
    HeldObj<G>: Kind,
{
    ffi(|| {
        // Released now even if another thread still holds the object for a moment.
        lookup::<HeldObj<G>, _>(handle, true)?.drop_guard();
        Ok(())
    })
}

pub(crate) struct ElectionObj(pub(crate) Election);
impl Kind for ElectionObj {
    const NAME: &'static str = "simba_election";
}

pub(crate) struct ObserverObj(pub(crate) Observer);
impl Kind for ObserverObj {
    const NAME: &'static str = "simba_observer";
}

pub(crate) struct GroupObj {
    pub(crate) group: Group,
    /// The watch of `simba_group_next_event`, once started; locked only to read or set it.
    pub(crate) watch: Mutex<Option<Receiver<Event>>>,
    /// Held while the watch is started, so that it is started once, without holding `watch`.
    pub(crate) starting: Mutex<()>,
}
impl Kind for GroupObj {
    const NAME: &'static str = "simba_group";
}

impl GroupObj {
    /// The watch's queue, started by the first call. `None` if another thread is starting it
    /// and `timeout_ms` is 0 (such a call must not wait).
    pub(crate) fn watch_rx(&self, timeout_ms: u64) -> R<Option<Receiver<Event>>> {
        if let Some(rx) = locked(&self.watch).as_ref() {
            return Ok(Some(rx.clone()));
        }
        let _starting = if timeout_ms == 0 {
            match self.starting.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
            }
        } else {
            locked(&self.starting)
        };
        if let Some(rx) = locked(&self.watch).as_ref() {
            return Ok(Some(rx.clone()));
        }
        let rx = self.group.watch()?;
        *locked(&self.watch) = Some(rx.clone());
        Ok(Some(rx))
    }
}

pub(crate) struct MembershipObj(pub(crate) Mutex<Option<Membership>>);
impl Kind for MembershipObj {
    const NAME: &'static str = "simba_membership";
}

pub(crate) struct SemaphoreObj(pub(crate) Semaphore);
impl Kind for SemaphoreObj {
    const NAME: &'static str = "simba_semaphore";
}

pub(crate) struct CancelObj(pub(crate) Cancel);
impl Kind for CancelObj {
    const NAME: &'static str = "simba_cancel";
}
