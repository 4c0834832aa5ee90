//! The `LeaseBackend` trait and its reply types.

use super::notify::{NotifySink, Subscription};
use crate::error::{Error, Result};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use std::time::Duration;

/// Reply to [`LeaseBackend::open_session`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionGrant {
    /// The new session's id.
    pub id: SessionId,
    /// Time the session has left by the backend's clock.
    pub remaining: Duration,
}

/// What a new session is ([`LeaseBackend::open`]): how long it lives unless kept alive, its
/// metadata, and its lock-delay.
///
/// ```
/// use simba_lease::spi::SessionSpec;
/// use simba_lease::Metadata;
/// use std::time::Duration;
/// let m = Metadata::new("worker 7").unwrap();
/// let spec = SessionSpec::new(Duration::from_secs(15), &m).lock_delay(Duration::from_secs(5));
/// assert_eq!(spec.lock_delay, Duration::from_secs(5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSpec<'a> {
    /// How long the session lives unless kept alive.
    pub lease: Duration,
    /// The session's metadata (who holds its terms, for operators).
    pub metadata: &'a Metadata,
    /// How long a term of the session that ends with its expiry keeps blocking its name
    /// (zero: none).
    pub lock_delay: Duration,
}

impl<'a> SessionSpec<'a> {
    /// A session of `lease` with `metadata`, without a lock-delay.
    pub fn new(lease: Duration, metadata: &'a Metadata) -> Self {
        SessionSpec {
            lease,
            metadata,
            lock_delay: Duration::ZERO,
        }
    }

    /// The same with a lock-delay of `d`.
    pub fn lock_delay(self, d: Duration) -> Self {
        SessionSpec {
            lock_delay: d,
            ..self
        }
    }

    /// For a backend without lock-delays (named `backend`): [`Error::Unsupported`] unless
    /// the spec asks for none.
    pub fn without_lock_delay(&self, backend: &'static str) -> Result<()> {
        match self.lock_delay.is_zero() {
            true => Ok(()),
            false => Err(Error::Unsupported {
                operation: "lock-delay",
                backend,
            }),
        }
    }
}

/// A lease a session holds, as listed in a keep-alive reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLease {
    /// The lease.
    pub name: LeaseName,
    /// Its current token.
    pub token: Token,
    /// Time the term has left by the backend's clock (normally the session's).
    pub remaining: Duration,
}

/// A read-write lock term a session holds, as listed in a keep-alive reply (it lasts as
/// long as its session: the reply's `remaining`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldRw {
    /// The read-write lock (a name of its own, apart from the lease of the same name).
    pub name: LeaseName,
    /// Which side the term is on.
    pub mode: RwMode,
    /// Its token.
    pub token: Token,
}

/// Reply to [`LeaseBackend::keep_alive`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepAlive {
    /// Time the session has left after the renewal, by the backend's clock.
    pub remaining: Duration,
    /// Every lease the session holds after the renewal.
    pub leases: Vec<HeldLease>,
    /// Every read-write lock term the session holds after the renewal (none on a backend
    /// without read-write locks), so a term the engine does not know (a grant whose reply
    /// was lost, a release that failed) is found and released as a lease's is, and one the
    /// engine holds that is not listed is lost.
    pub rw: Vec<HeldRw>,
}

/// Reply to [`LeaseBackend::acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The session holds the lease: a new term, or the same term if it already held it.
    Acquired(Term),
    /// Another live session holds it.
    Held(Owner),
}

/// Reply to [`LeaseBackend::acquire_queued`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Queued {
    /// The session holds the lease: a new term, or the same term if it already held it.
    /// Its place in the queue is gone.
    Acquired(Term),
    /// The session waits in the queue.
    Waiting {
        /// How many live waiters are ahead of it (0: it is next).
        ahead: usize,
        /// The live holder, if the lease is held.
        owner: Option<Owner>,
    },
}

/// Reply to [`LeaseBackend::claim_job`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobClaim {
    /// The session holds the job's claim: it may run the job now.
    Claimed {
        /// The claim's fencing token: > 0, strictly increasing with every claim of the name,
        /// never reset (a sequence of its own, apart from the lease of the same name).
        token: Token,
        /// Time the claim has left by the backend's clock (its `at_most`).
        remaining: Duration,
    },
    /// Another session runs the job now, or ran it within its `at_least`.
    Busy {
        /// Time until the name is free at the latest, by the backend's clock (a running
        /// claim may end sooner: when its job finishes, or its session ends).
        remaining: Duration,
    },
}

/// Which side of a read-write lock a term is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RwMode {
    /// Shared: any number of readers together, never with a writer.
    Read,
    /// Exclusive: one writer, with no reader.
    Write,
}

impl RwMode {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

/// Reply to [`LeaseBackend::acquire_rw`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RwAcquire {
    /// The session holds a term of that mode: a new one, or the same term if it already
    /// held it. A writer's registration as waiting is gone.
    Acquired(Term),
    /// Not granted now.
    Busy {
        /// The writer, if one holds the name: live, or its session expired and its term is in
        /// its lock-delay.
        writer: Option<SessionId>,
        /// How many readers hold it: live, or (their session expired) in their lock-delay.
        readers: usize,
        /// How many live writers wait for it (a writer that asked counts itself).
        writers_waiting: usize,
    },
}

/// A read-write lock as [`LeaseBackend::rw_state`] sees it: live holders and waiters only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RwState {
    /// The live writer and its term's token, if one holds the name.
    pub writer: Option<(SessionId, Token)>,
    /// The live readers and their terms' tokens, in session order.
    pub readers: Vec<(SessionId, Token)>,
    /// The live writers waiting for the name, first in line first.
    pub writers_waiting: Vec<SessionId>,
    /// The newest token handed out on the name (0: none yet).
    pub last_token: u64,
    /// Terms of expired sessions still in their lock-delay, in session order (see
    /// [`LeaseBackend::acquire_rw`]): they block the name as holders until their delay ends.
    pub delayed: Vec<RwDelayed>,
}

/// A read or write term that ended with its session's expiry and still blocks its name for
/// that session's lock-delay ([`RwState::delayed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwDelayed {
    /// The expired session.
    pub session: SessionId,
    /// The side its term was on: a write term blocks every new term, a read term new writers.
    pub mode: RwMode,
    /// The ended term's token.
    pub token: Token,
    /// The delay left, by the backend's clock.
    pub remaining: Duration,
}

/// A live session as [`LeaseBackend::list`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session's id.
    pub id: SessionId,
    /// Time it has left by the backend's clock (on ZooKeeper, which does not expose it for
    /// another client's session, the server's session timeout).
    pub remaining: Duration,
    /// Its metadata as the session gave it.
    pub metadata: Metadata,
}

/// A held lease as [`LeaseBackend::list`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The lease.
    pub name: LeaseName,
    /// Its live holder.
    pub owner: Owner,
}

/// A group with its live members as [`LeaseBackend::list`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group.
    pub name: GroupName,
    /// Its live members, sorted by session id.
    pub members: Vec<Member>,
}

/// Reply to [`LeaseBackend::list`]: everything live in the backend (under its prefix, table
/// prefix or root), each part sorted by id or name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Live sessions.
    pub sessions: Vec<SessionInfo>,
    /// Held leases (free ones, and names only in a lock-delay, are left out).
    pub leases: Vec<LeaseInfo>,
    /// Groups with at least one live member.
    pub groups: Vec<GroupInfo>,
}

/// A lease store: sessions, leases with fencing tokens, and group memberships.
///
/// The contract (checked by the TCK in [`crate::tck`]):
/// 1. A session expires once it was not kept alive for its lease; it is never revived:
///    `keep_alive`, `acquire` and `join` on it fail with [`Error::SessionExpired`](crate::Error::SessionExpired).
/// 2. A lease belongs to a session only while that session is live.
/// 3. A token is > 0, strictly increases with every new term, and never resets.
///    Acquire by the holder returns the same term.
/// 4. Every remaining time is measured by the backend's clock.
///
/// Implementations are object safe and shared between threads (`Arc<dyn LeaseBackend>`).
pub trait LeaseBackend: Send + Sync {
    /// A short name for diagnostics, e.g. `"memory"` or `"postgres"`.
    fn kind(&self) -> &'static str;

    /// Opens a session as `spec` says: it lives for `spec.lease` unless kept alive, with
    /// `spec.metadata`; with a lock-delay above zero, a term of this session that ends
    /// because the session expired (or the term lapsed) keeps its name blocked until the end
    /// of the term plus the delay, by the backend's clock.
    ///
    /// Meanwhile [`acquire`](Self::acquire) by any session answers [`Acquire::Held`] naming
    /// the ended term's session and token, with the delay left as `remaining`, and
    /// [`owner`](Self::owner) answers the same owner; the delay's end is not notified. A
    /// [`release`](Self::release) and a [`close_session`](Self::close_session) of the live
    /// session free the name at once, as without a delay; closing a session that already
    /// expired changes nothing. Tokens keep increasing. Fails with
    /// [`Error::InvalidConfig`] for a delay over
    /// [`Config::MAX_LOCK_DELAY`](crate::Config::MAX_LOCK_DELAY); a backend without
    /// lock-delays fails with [`Error::Unsupported`] for one above zero
    /// ([`SessionSpec::without_lock_delay`]).
    fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant>;

    /// [`open`](Self::open) of a session without a lock-delay: a shorthand, not to be
    /// implemented.
    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        self.open(&SessionSpec::new(lease, metadata))
    }

    /// Whether the backend keeps lock-delays ([`SessionSpec::lock_delay`] above zero).
    fn supports_lock_delay(&self) -> bool {
        false
    }

    /// Renews the session for another `lease` and lists the leases it holds.
    /// Fails with `SessionExpired` (and forgets the session) once it expired.
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive>;

    /// Deletes the session, frees its leases (tokens kept) and its memberships.
    /// Closing an unknown or expired session succeeds.
    fn close_session(&self, session: &SessionId) -> Result<()>;

    /// Takes `name` for `session` if it is free or its holder's session expired
    /// (a new term, token + 1); returns the same term if `session` already holds it.
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire>;

    /// Frees `name` if `session` holds it with `token`; the token is kept.
    /// Returns whether it was freed; a wrong session or token changes nothing.
    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool>;

    /// The live holder of `name`, if any.
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>>;

    /// Adds `session` to `group` (idempotent); fails with `SessionExpired` on an expired session.
    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()>;

    /// Removes `session` from `group`; returns whether it was a member.
    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool>;

    /// The live members of `group` (empty for a group nobody joined).
    fn members(&self, group: &GroupName) -> Result<Vec<Member>>;

    /// Removes expired sessions with their memberships; returns how many were removed.
    /// Tokens are never affected.
    fn purge_expired(&self) -> Result<usize>;

    /// Whether the backend keeps term values ([`set_value`](Self::set_value),
    /// [`acquire_with_value`](Self::acquire_with_value), [`Owner::value`]).
    fn supports_values(&self) -> bool {
        false
    }

    /// Sets the value of `session`'s term of `name` with `token` (at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes; the caller checks). Only the live
    /// holder of that very term may: returns whether it was set (`false`: the term is not
    /// held, or has another token). The value belongs to the term: a new term starts
    /// without it (release and take-over leave nothing behind). A change is notified as
    /// [`Notification::Acquired`](super::Notification::Acquired) where the backend notifies,
    /// so observers read the owner again. The default fails with [`Error::Unsupported`].
    fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        let _ = (session, name, token, value);
        Err(Error::Unsupported {
            operation: "term values",
            backend: self.kind(),
        })
    }

    /// [`acquire`](Self::acquire), then, if the session holds the lease and `value` is not
    /// empty, [`set_value`](Self::set_value) on the term: two round trips, between which
    /// observers may see the term without its value. A backend may override it to do both
    /// at once. A failure of the second step is returned (the grant is then a stray that
    /// the engine releases at its next keep-alive); `false` from it (the term was lost at
    /// once) still returns the grant, whose loss the next keep-alive reports.
    fn acquire_with_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        let reply = self.acquire(session, name)?;
        if let Acquire::Acquired(term) = &reply {
            if !value.is_empty() {
                self.set_value(session, name, term.token, value)?;
            }
        }
        Ok(reply)
    }

    /// Whether the backend keeps waiting queues ([`acquire_queued`](Self::acquire_queued),
    /// [`leave_queue`](Self::leave_queue), [`queue`](Self::queue)) for fair locks.
    fn supports_queues(&self) -> bool {
        false
    }

    /// Takes `name` for `session` in arrival order (fair locks).
    ///
    /// The first call queues `session` behind `name`; every call keeps its place for
    /// `patience` more (by the backend's clock). A place is live while its session is live
    /// (where the backend can tell) and its patience has not run out; dead places are skipped
    /// and removed. The session takes the lease, as [`acquire`](Self::acquire) would, only
    /// when no live place is ahead of its own; taking it (or already holding it) removes its
    /// place. Plain `acquire` ignores the queue.
    fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
    ) -> Result<Queued> {
        let _ = (session, name, patience);
        Err(Error::Unsupported {
            operation: "fair locks (waiting queues)",
            backend: self.kind(),
        })
    }

    /// Removes `session`'s place in `name`'s queue; returns whether it had one.
    fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        let _ = (session, name);
        Err(Error::Unsupported {
            operation: "fair locks (waiting queues)",
            backend: self.kind(),
        })
    }

    /// The sessions with a live place in `name`'s queue, first first.
    fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        let _ = name;
        Err(Error::Unsupported {
            operation: "fair locks (waiting queues)",
            backend: self.kind(),
        })
    }

    /// Whether the backend keeps run-once job claims ([`claim_job`](Self::claim_job),
    /// [`finish_job`](Self::finish_job)).
    fn supports_jobs(&self) -> bool {
        false
    }

    /// Whether a running job claim ends with its holder's session (true on every backend
    /// but a Redis Cluster, or Redis routed by slot, where the session lives in another slot
    /// and a running claim lasts until its `at_most`).
    fn job_claims_end_with_session(&self) -> bool {
        true
    }

    /// Claims the run-once job `name` for `session` for at most `at_most` (by the backend's
    /// clock).
    ///
    /// A job record lives apart from the lease of the same name and is never deleted. It is
    /// free when it was never claimed, when its `until` (backend time) passed, or when it is
    /// in the running phase and its holder's session ended (where the backend can tell; on a
    /// Redis Cluster it cannot, so a running claim lasts until `at_most`). Claiming a free
    /// record sets holder = `session`, token = previous token + 1, started = now,
    /// until = now + `at_most`, phase running; a record that is not free answers
    /// [`JobClaim::Busy`] (also for the session holding it). Fails with `SessionExpired` on an
    /// expired session, and with [`Error::InvalidConfig`] for an `at_most` under 1 ms or over
    /// [`Config::MAX_LEASE`](crate::Config::MAX_LEASE).
    fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        let _ = (session, name, at_most);
        Err(Error::Unsupported {
            operation: "run-once jobs",
            backend: self.kind(),
        })
    }

    /// Finishes `session`'s running claim of `name` with `token`: the record stays taken
    /// until started + `at_least` (by the backend's clock; free at once if that passed) and
    /// no longer depends on the session (closing it keeps the name taken until then).
    ///
    /// Returns whether `session` held that claim: a wrong session or token, a claim that
    /// ran out (`at_most`) or ended with its session changes nothing.
    fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        let _ = (session, name, token, at_least);
        Err(Error::Unsupported {
            operation: "run-once jobs",
            backend: self.kind(),
        })
    }

    /// Whether the backend keeps read-write locks ([`acquire_rw`](Self::acquire_rw),
    /// [`release_rw`](Self::release_rw), [`leave_rw_queue`](Self::leave_rw_queue)).
    fn supports_rw_locks(&self) -> bool {
        false
    }

    /// One attempt to take the read-write lock `name` for `session` in `mode`, in the fewest
    /// round trips the backend allows (one on PostgreSQL and Redis, a short transaction on
    /// MySQL, one to three on ZooKeeper: see each backend's design notes); a name of its own,
    /// apart from the lease, queue and job of the same name.
    ///
    /// A record per name keeps one token counter (never reset), the live writer, the live
    /// readers and the waiting writers, each bound to its session (a session that ended holds
    /// and waits for nothing). A waiting writer's registration also lasts `patience` from its
    /// last attempt (by the backend's clock). A session holds at most one term of a name.
    ///
    /// - Read: granted when no live writer holds the name and no live writer waits (writer
    ///   preference).
    /// - Write: granted when no live writer or reader holds the name and no live writer
    ///   registered before `session` waits; otherwise `session` is registered as waiting (or
    ///   its registration renewed) and the reply is `Busy`. A zero `patience` (a one-time
    ///   try) registers nothing. A read term is never upgraded: a session holding one that
    ///   asks to write counts as a reader and waits (the engine never asks so: a session
    ///   holds at most one term of a name).
    ///
    /// Every new term (read or write) takes the counter + 1 as its token, so a write term's
    /// token is above every token handed out before and a read term's is above the last
    /// write term's. A session asking again for the mode it holds gets the same term. Fails
    /// with `SessionExpired` on an expired session.
    ///
    /// Lock-delay ([`SessionSpec::lock_delay`]): a term of a
    /// session with a delay `d` that ends because the session expired keeps blocking the name
    /// until the session's end plus `d`, by the backend's clock (on ZooKeeper, as for leases,
    /// from when another session first saw it gone). A write term in its delay blocks every
    /// new term (read or write); a read term in its delay blocks new write terms only (new
    /// readers do not conflict with it). `Busy` counts them as holders and
    /// [`rw_state`](Self::rw_state) lists them in [`RwState::delayed`]; purging expired
    /// sessions keeps them. A release by the live session and a close of the live session
    /// free the name at once; a release by an expired session changes nothing; a waiting
    /// writer's registration ends with its session, with no delay.
    fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        let _ = (session, name, mode, patience);
        Err(Error::Unsupported {
            operation: "read-write locks",
            backend: self.kind(),
        })
    }

    /// Ends `session`'s `mode` term of `name` with `token` (one round trip); returns whether
    /// it held it. A wrong session, mode or token changes nothing.
    fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        let _ = (session, name, mode, token);
        Err(Error::Unsupported {
            operation: "read-write locks",
            backend: self.kind(),
        })
    }

    /// Removes `session`'s registration as a writer waiting for `name` (a writer that timed
    /// out, was cancelled or failed); returns whether it had one.
    fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        let _ = (session, name);
        Err(Error::Unsupported {
            operation: "read-write locks",
            backend: self.kind(),
        })
    }

    /// The read-write lock `name` as the backend sees it now (a read; for tools such as
    /// `simba status`): its live writer, readers and waiting writers, its newest token, and
    /// the terms of expired sessions still in their lock-delay. A name never used is the
    /// default (empty) state.
    fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        let _ = name;
        Err(Error::Unsupported {
            operation: "read-write locks",
            backend: self.kind(),
        })
    }

    /// The backend's cheapest round trip (e.g. `PING`, `SELECT 1`), the floor benchmarks
    /// compare against. The default reads the owner of a name nobody uses.
    fn ping(&self) -> Result<()> {
        let probe = LeaseName::new("simba-ping").expect("valid name");
        self.owner(&probe).map(drop)
    }

    /// Every live session, held lease and group with members, for inspection (`simba
    /// status`). Not atomic across its parts on every backend, and it reads everything: meant
    /// for people, not for a hot path. The default fails with [`Error::Unsupported`].
    fn list(&self) -> Result<Listing> {
        Err(Error::Unsupported {
            operation: "listing sessions, leases and groups",
            backend: self.kind(),
        })
    }

    /// Registers `sink` for release and group-change notifications.
    ///
    /// Returns `Ok(None)` when the backend has no notifications (the engine then polls);
    /// otherwise the subscription lasts until the returned handle is dropped. The sink must
    /// return quickly and never call back into the backend.
    fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        let _ = sink;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Implements only the required methods.
    struct Minimal;

    impl LeaseBackend for Minimal {
        fn kind(&self) -> &'static str {
            "minimal"
        }
        fn open(&self, spec: &SessionSpec<'_>) -> Result<SessionGrant> {
            spec.without_lock_delay(self.kind())?;
            Err(Error::Closed)
        }
        fn keep_alive(&self, _: &SessionId, _: Duration) -> Result<KeepAlive> {
            Err(Error::Closed)
        }
        fn close_session(&self, _: &SessionId) -> Result<()> {
            Err(Error::Closed)
        }
        fn acquire(&self, _: &SessionId, _: &LeaseName) -> Result<Acquire> {
            Err(Error::Closed)
        }
        fn release(&self, _: &SessionId, _: &LeaseName, _: Token) -> Result<bool> {
            Err(Error::Closed)
        }
        fn owner(&self, _: &LeaseName) -> Result<Option<Owner>> {
            Err(Error::Closed)
        }
        fn join(&self, _: &SessionId, _: &GroupName) -> Result<()> {
            Err(Error::Closed)
        }
        fn leave(&self, _: &SessionId, _: &GroupName) -> Result<bool> {
            Err(Error::Closed)
        }
        fn members(&self, _: &GroupName) -> Result<Vec<Member>> {
            Err(Error::Closed)
        }
        fn purge_expired(&self) -> Result<usize> {
            Err(Error::Closed)
        }
    }

    #[test]
    fn rw_locks_are_unsupported_by_default() {
        let s = SessionId::random();
        let n = LeaseName::new("rw").unwrap();
        let t = Token::new(1).unwrap();
        assert!(!Minimal.supports_rw_locks());
        let errors = [
            Minimal
                .acquire_rw(&s, &n, RwMode::Read, Duration::from_secs(1))
                .map(drop)
                .unwrap_err(),
            Minimal
                .release_rw(&s, &n, RwMode::Write, t)
                .map(drop)
                .unwrap_err(),
            Minimal.leave_rw_queue(&s, &n).map(drop).unwrap_err(),
            Minimal.rw_state(&n).map(drop).unwrap_err(),
        ];
        for e in errors {
            assert!(
                matches!(
                    e,
                    Error::Unsupported {
                        backend: "minimal",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
    }

    #[test]
    fn list_is_unsupported_by_default() {
        let e = Minimal.list().unwrap_err();
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    backend: "minimal",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(!e.is_transient());
        assert_eq!(
            e.to_string(),
            "the minimal backend does not support listing sessions, leases and groups"
        );
    }

    #[test]
    fn a_lock_delay_is_unsupported_by_default_and_zero_opens_a_plain_session() {
        let m = Metadata::default();
        let lease = Duration::from_secs(1);
        assert!(!Minimal.supports_lock_delay());
        // Zero: the plain open (which fails with Closed here).
        let r = Minimal.open(&SessionSpec::new(lease, &m).lock_delay(Duration::ZERO));
        assert!(matches!(r, Err(Error::Closed)), "{r:?}");
        let e = Minimal
            .open(&SessionSpec::new(lease, &m).lock_delay(Duration::from_millis(1)))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the minimal backend does not support lock-delay"
        );
    }
}
