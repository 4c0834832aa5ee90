//! Backends that wrap a backend: a [`Delegate`] names the backend it forwards to and may act
//! around each call; the blanket `LeaseBackend` impl forwards every SPI method, so a method
//! added to the SPI reaches every wrapper (panic guards, test gates, isolating wrappers)
//! instead of silently falling back to its default in one of them.

use super::backend::{
    Acquire, JobClaim, KeepAlive, LeaseBackend, Listing, Queued, RwAcquire, RwMode, RwState,
    SessionGrant, SessionSpec,
};
use super::notify::{NotifySink, Subscription};
use crate::error::Result;
use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Token};
use std::time::Duration;

/// One fallible call of [`LeaseBackend`], as a [`Delegate`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Call<'a> {
    /// [`LeaseBackend::open`].
    Open(SessionSpec<'a>),
    /// [`LeaseBackend::keep_alive`].
    KeepAlive {
        /// The session.
        session: &'a SessionId,
        /// The lease asked for.
        lease: Duration,
    },
    /// [`LeaseBackend::close_session`].
    CloseSession {
        /// The session.
        session: &'a SessionId,
    },
    /// [`LeaseBackend::acquire`].
    Acquire {
        /// The session.
        session: &'a SessionId,
        /// The lease's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::release`].
    Release {
        /// The session.
        session: &'a SessionId,
        /// The lease's name.
        name: &'a LeaseName,
        /// The term's token.
        token: Token,
    },
    /// [`LeaseBackend::owner`].
    Owner {
        /// The lease's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::join`].
    Join {
        /// The session.
        session: &'a SessionId,
        /// The group.
        group: &'a GroupName,
    },
    /// [`LeaseBackend::leave`].
    Leave {
        /// The session.
        session: &'a SessionId,
        /// The group.
        group: &'a GroupName,
    },
    /// [`LeaseBackend::members`].
    Members {
        /// The group.
        group: &'a GroupName,
    },
    /// [`LeaseBackend::purge_expired`].
    PurgeExpired,
    /// [`LeaseBackend::set_value`].
    SetValue {
        /// The session.
        session: &'a SessionId,
        /// The lease's name.
        name: &'a LeaseName,
        /// The term's token.
        token: Token,
    },
    /// [`LeaseBackend::acquire_with_value`].
    AcquireWithValue {
        /// The session.
        session: &'a SessionId,
        /// The lease's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::acquire_queued`].
    AcquireQueued {
        /// The session.
        session: &'a SessionId,
        /// The lease's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::leave_queue`].
    LeaveQueue {
        /// The session.
        session: &'a SessionId,
        /// The lease's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::queue`].
    Queue {
        /// The lease's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::claim_job`].
    ClaimJob {
        /// The session.
        session: &'a SessionId,
        /// The job's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::finish_job`].
    FinishJob {
        /// The session.
        session: &'a SessionId,
        /// The job's name.
        name: &'a LeaseName,
        /// The claim's token.
        token: Token,
    },
    /// [`LeaseBackend::acquire_rw`].
    AcquireRw {
        /// The session.
        session: &'a SessionId,
        /// The read-write lock's name.
        name: &'a LeaseName,
        /// Read or write.
        mode: RwMode,
    },
    /// [`LeaseBackend::release_rw`].
    ReleaseRw {
        /// The session.
        session: &'a SessionId,
        /// The read-write lock's name.
        name: &'a LeaseName,
        /// Read or write.
        mode: RwMode,
        /// The term's token.
        token: Token,
    },
    /// [`LeaseBackend::leave_rw_queue`].
    LeaveRwQueue {
        /// The session.
        session: &'a SessionId,
        /// The read-write lock's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::rw_state`].
    RwState {
        /// The read-write lock's name.
        name: &'a LeaseName,
    },
    /// [`LeaseBackend::ping`].
    Ping,
    /// [`LeaseBackend::list`].
    List,
    /// [`LeaseBackend::subscribe`].
    Subscribe,
}

impl Call<'_> {
    /// What the call does, in the words errors use ("acquiring a lease").
    pub fn operation(self) -> &'static str {
        match self {
            Call::Open(spec) if spec.lock_delay.is_zero() => "opening a session",
            Call::Open(_) => "opening a session with a lock-delay",
            Call::KeepAlive { .. } => "keeping a session alive",
            Call::CloseSession { .. } => "closing a session",
            Call::Acquire { .. } => "acquiring a lease",
            Call::Release { .. } => "releasing a lease",
            Call::Owner { .. } => "reading a lease's owner",
            Call::Join { .. } => "joining a group",
            Call::Leave { .. } => "leaving a group",
            Call::Members { .. } => "reading a group's members",
            Call::PurgeExpired => "purging expired sessions",
            Call::SetValue { .. } => "setting a term's value",
            Call::AcquireWithValue { .. } => "acquiring a lease with a value",
            Call::AcquireQueued { .. } => "acquiring a fair lock",
            Call::LeaveQueue { .. } => "leaving a fair lock's queue",
            Call::Queue { .. } => "reading a fair lock's queue",
            Call::ClaimJob { .. } => "claiming a run-once job",
            Call::FinishJob { .. } => "finishing a run-once job",
            Call::AcquireRw { .. } => "acquiring a read-write lock",
            Call::ReleaseRw { .. } => "releasing a read-write lock",
            Call::LeaveRwQueue { .. } => "leaving a read-write lock's writer queue",
            Call::RwState { .. } => "reading a read-write lock's state",
            Call::Ping => "pinging the backend",
            Call::List => "listing sessions, leases and groups",
            Call::Subscribe => "subscribing to notifications",
        }
    }
}

/// A backend that forwards to another one; every type that implements it is a
/// [`LeaseBackend`] that forwards every SPI method through [`Delegate::call`].
///
/// ```
/// use simba_lease::backends::MemoryBackend;
/// use simba_lease::spi::{Call, Delegate, LeaseBackend};
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// /// Counts acquires.
/// struct Counting(MemoryBackend, AtomicUsize);
///
/// impl Delegate for Counting {
///     fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
///         f(&self.0)
///     }
///     fn call<T>(
///         &self,
///         call: Call<'_>,
///         f: impl FnOnce(&dyn LeaseBackend) -> simba_lease::Result<T>,
///     ) -> simba_lease::Result<T> {
///         if matches!(call, Call::Acquire { .. }) {
///             self.1.fetch_add(1, Ordering::Relaxed);
///         }
///         f(&self.0)
///     }
/// }
///
/// let b = Counting(MemoryBackend::new(), AtomicUsize::new(0));
/// assert_eq!(b.kind(), "memory");
/// ```
pub trait Delegate: Send + Sync {
    /// Runs `f` on the wrapped backend (the calls that only say what it is or supports).
    fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T;

    /// Runs one fallible call on the wrapped backend; a wrapper acts around it here (hold
    /// it back, count it, fail it, catch a panic). The default only forwards.
    fn call<T>(&self, call: Call<'_>, f: impl FnOnce(&dyn LeaseBackend) -> Result<T>) -> Result<T> {
        let _ = call;
        self.with(f)
    }
}

impl<D: Delegate> LeaseBackend for D {
    fn kind(&self) -> &'static str {
        self.with(|b| b.kind())
    }
    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
        self.call(Call::Open(*spec), |b| b.open(spec))
    }
    fn supports_lock_delay(&self) -> bool {
        self.with(|b| b.supports_lock_delay())
    }
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        self.call(Call::KeepAlive { session, lease }, |b| {
            b.keep_alive(session, lease)
        })
    }
    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.call(Call::CloseSession { session }, |b| b.close_session(session))
    }
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.call(Call::Acquire { session, name }, |b| {
            b.acquire(session, name)
        })
    }
    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        self.call(
            Call::Release {
                session,
                name,
                token,
            },
            |b| b.release(session, name, token),
        )
    }
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.call(Call::Owner { name }, |b| b.owner(name))
    }
    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        self.call(Call::Join { session, group }, |b| b.join(session, group))
    }
    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.call(Call::Leave { session, group }, |b| b.leave(session, group))
    }
    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        self.call(Call::Members { group }, |b| b.members(group))
    }
    fn purge_expired(&self) -> Result<usize> {
        self.call(Call::PurgeExpired, |b| b.purge_expired())
    }
    fn supports_values(&self) -> bool {
        self.with(|b| b.supports_values())
    }
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        self.call(
            Call::SetValue {
                session,
                name,
                token,
            },
            |b| b.set_value(session, name, token, value),
        )
    }
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        self.call(Call::AcquireWithValue { session, name }, |b| {
            b.acquire_with_value(session, name, value)
        })
    }
    fn supports_queues(&self) -> bool {
        self.with(|b| b.supports_queues())
    }
    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        self.call(Call::AcquireQueued { session, name }, |b| {
            b.acquire_queued(session, name, patience)
        })
    }
    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.call(Call::LeaveQueue { session, name }, |b| {
            b.leave_queue(session, name)
        })
    }
    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.call(Call::Queue { name }, |b| b.queue(name))
    }
    fn supports_jobs(&self) -> bool {
        self.with(|b| b.supports_jobs())
    }
    fn job_claims_end_with_session(&self) -> bool {
        self.with(|b| b.job_claims_end_with_session())
    }
    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        self.call(Call::ClaimJob { session, name }, |b| {
            b.claim_job(session, name, at_most)
        })
    }
    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        self.call(
            Call::FinishJob {
                session,
                name,
                token,
            },
            |b| b.finish_job(session, name, token, at_least),
        )
    }
    fn supports_rw_locks(&self) -> bool {
        self.with(|b| b.supports_rw_locks())
    }
    fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        self.call(
            Call::AcquireRw {
                session,
                name,
                mode,
            },
            |b| b.acquire_rw(session, name, mode, patience),
        )
    }
    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        self.call(
            Call::ReleaseRw {
                session,
                name,
                mode,
                token,
            },
            |b| b.release_rw(session, name, mode, token),
        )
    }
    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        self.call(Call::LeaveRwQueue { session, name }, |b| {
            b.leave_rw_queue(session, name)
        })
    }
    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        self.call(Call::RwState { name }, |b| b.rw_state(name))
    }
    fn ping(&self) -> Result<()> {
        self.call(Call::Ping, |b| b.ping())
    }
    fn list(&self) -> Result<Listing> {
        self.call(Call::List, |b| b.list())
    }
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        self.call(Call::Subscribe, |b| b.subscribe(sink))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// A backend that grants every name with token 7 and answers every other call plainly
    /// (the SPI layer's test names no backend module).
    struct Stub;

    impl LeaseBackend for Stub {
        fn kind(&self) -> &'static str {
            "stub"
        }
        fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
            Ok(SessionGrant {
                id: SessionId::random(),
                remaining: spec.lease,
            })
        }
        fn keep_alive(&self, _: &SessionId, lease: Duration) -> Result<KeepAlive> {
            Ok(KeepAlive {
                remaining: lease,
                leases: Vec::new(),
                rw: Vec::new(),
            })
        }
        fn close_session(&self, _: &SessionId) -> Result<()> {
            Ok(())
        }
        fn acquire(&self, _: &SessionId, name: &LeaseName) -> Result<Acquire> {
            Ok(Acquire::Acquired(crate::types::Term {
                name: name.clone(),
                token: Token::new(7)?,
                remaining: Duration::from_secs(5),
            }))
        }
        fn release(&self, _: &SessionId, _: &LeaseName, token: Token) -> Result<bool> {
            Ok(token.get() == 7)
        }
        fn owner(&self, _: &LeaseName) -> Result<Option<Owner>> {
            Ok(None)
        }
        fn join(&self, _: &SessionId, _: &GroupName) -> Result<()> {
            Ok(())
        }
        fn leave(&self, _: &SessionId, _: &GroupName) -> Result<bool> {
            Ok(true)
        }
        fn members(&self, _: &GroupName) -> Result<Vec<Member>> {
            Ok(Vec::new())
        }
        fn purge_expired(&self) -> Result<usize> {
            Ok(0)
        }
    }

    /// Records every call it forwards.
    struct Recording(Stub, Mutex<Vec<&'static str>>);

    impl Delegate for Recording {
        fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
            f(&self.0)
        }
        fn call<T>(
            &self,
            call: Call<'_>,
            f: impl FnOnce(&dyn LeaseBackend) -> Result<T>,
        ) -> Result<T> {
            self.1.lock().push(call.operation());
            f(&self.0)
        }
    }

    #[test]
    fn every_call_reaches_the_wrapped_backend_through_call() {
        let b = Recording(Stub, Mutex::new(Vec::new()));
        let grant = b
            .open_session(Duration::from_secs(5), &crate::types::Metadata::default())
            .unwrap();
        let name = LeaseName::new("delegate").unwrap();
        let Acquire::Acquired(term) = b.acquire(&grant.id, &name).unwrap() else {
            panic!("the stub grants every name");
        };
        assert_eq!(term.token.get(), 7);
        assert_eq!(b.owner(&name).unwrap(), None);
        assert!(b.release(&grant.id, &name, term.token).unwrap());
        b.keep_alive(&grant.id, Duration::from_secs(5)).unwrap();
        b.close_session(&grant.id).unwrap();
        assert_eq!(
            *b.1.lock(),
            [
                "opening a session",
                "acquiring a lease",
                "reading a lease's owner",
                "releasing a lease",
                "keeping a session alive",
                "closing a session"
            ]
        );
        assert_eq!(b.supports_values(), b.0.supports_values());
        assert_eq!(b.kind(), "stub");
    }
}
