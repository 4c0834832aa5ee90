//! Leader metadata: a value a leader or lock holder attaches to its term, and the candidates
//! of an election.
//!
//! A term's value (at most [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes of UTF-8, e.g. the
//! leader's address and version) is stored by the backend with the term: every
//! [`Owner`] read ([`Election::leader`], [`Observer`](crate::Observer),
//! [`Event::LeaderChanged`](crate::Event::LeaderChanged), `simba status`) carries it, and a
//! new term starts without it. The candidates of an election are the members of a group
//! named after it (see [`Election::candidates`]).

use super::election::Election;
use super::lock::LockGuard;
use super::IntoLeaseName;
use crate::engine::handle::EngineHandle;
use crate::engine::Session;
use crate::error::{lease_lost, Error, Result};
use crate::types::{check_value, GroupName, LeaseName, Member, Owner, MAX_NAME_LEN};

/// The suffix of an election's candidates group.
const CANDIDATES: &str = ":candidates";

/// The group whose members are the candidates of the election `name`: `{name}:candidates`,
/// or, when that is longer than a name may be, the name cut short, a `.`, 16 hex digits of a
/// hash of the whole name (FNV-1a, the same in every process and version) and the suffix.
pub(crate) fn candidates_group(name: &LeaseName) -> GroupName {
    let n = name.as_str();
    let full = if n.len() + CANDIDATES.len() <= MAX_NAME_LEN {
        format!("{n}{CANDIDATES}")
    } else {
        let hash = n.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        // Names are ASCII: any byte index is a character boundary.
        let keep = MAX_NAME_LEN - CANDIDATES.len() - 17;
        format!("{}.{hash:016x}{CANDIDATES}", &n[..keep])
    };
    GroupName::new(full).expect("built from a valid name")
}

/// Leaves the candidates group of `name` (unless another candidate of this session for the
/// name, or a membership, still counts): now if `wait`, else on the work queue.
fn check_supported(inner: &EngineHandle) -> Result<()> {
    if inner.reads().supports_values() {
        return Ok(());
    }
    Err(Error::Unsupported {
        operation: "term values",
        backend: inner.reads().kind(),
    })
}

impl Session {
    /// Like [`Session::election`], with the value every term this candidate wins starts with
    /// (see [`Election::set_value`]).
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let election = session.election_with_value("scheduler", "10.0.0.7:8080")?;
    /// election.wait_elected(Duration::from_secs(5))?;
    /// assert_eq!(election.leader()?.unwrap().value, "10.0.0.7:8080");
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn election_with_value(
        &self,
        name: impl IntoLeaseName,
        value: impl Into<String>,
    ) -> Result<Election> {
        let name = name.into_lease_name()?;
        let value = value.into();
        check_value(&value)?;
        check_supported(&self.inner)?;
        self.election_inner(name, None, Some(value))
    }
}

impl Election {
    /// Sets the value of this candidate's terms (at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes of UTF-8; empty for none): the current
    /// term's on the backend before returning, if this candidate leads now, and every term
    /// it wins later from the start.
    ///
    /// Observers get an [`Event::LeaderChanged`](crate::Event::LeaderChanged) with the same token and the new value.
    /// Fails with [`Error::InvalidValue`] for a longer value, [`Error::Unsupported`] on a
    /// backend without term values, and [`Error::LeaseLost`] if the backend found the term
    /// gone (the value still applies to the next term).
    ///
    /// On backends that cannot take a term and set its value in one step (all but memory,
    /// PostgreSQL and Redis on one server), a term won with a value is set right after it is
    /// taken: observers may briefly see the new leader with an empty value first.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let election = session.election("scheduler")?;
    /// election.wait_elected(Duration::from_secs(5))?;
    /// election.set_value("10.0.0.7:8080 v2")?;
    /// assert_eq!(election.leader()?.unwrap().value, "10.0.0.7:8080 v2");
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn set_value(&self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        let inner = &self.inner;
        check_supported(inner)?;
        inner.set_value(self.handle, &self.name, Some(value))
    }

    /// The value this candidate gives its terms (empty for none).
    pub fn value(&self) -> String {
        self.inner.candidate_value(self.handle)
    }

    /// The current leader (of any session) with its token and term value, read from the
    /// backend; `None` while nobody leads.
    pub fn leader(&self) -> Result<Option<Owner>> {
        self.inner.reads().owner(&self.name)
    }

    /// The live sessions campaigning in this election (the leader among them), with their
    /// session metadata, sorted by session id, read from the backend.
    ///
    /// A candidate's session is a member of the group [`Election::candidates_group`] from
    /// the moment it enters the election until it resigns, is dropped or its session ends
    /// (the join and the leave of a drop run on the session's work queue, so they show
    /// after a short delay; a resign leaves before it returns). A session with several
    /// candidates for the name counts once.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let backend = Arc::new(MemoryBackend::new());
    /// let session = Session::open(backend, Config::default())?;
    /// let election = session.election("scheduler")?;
    /// election.wait_elected(Duration::from_secs(5))?;
    /// let deadline = std::time::Instant::now() + Duration::from_secs(5);
    /// while election.candidates()?.is_empty() && std::time::Instant::now() < deadline {
    ///     std::thread::sleep(Duration::from_millis(5));
    /// }
    /// assert_eq!(election.candidates()?[0].session, session.id());
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn candidates(&self) -> Result<Vec<Member>> {
        let mut members = self.inner.reads().members(&self.candidates_group())?;
        members.sort();
        Ok(members)
    }

    /// The group whose members are this election's candidates: `{name}:candidates` (for a
    /// name longer than 117 characters, the name cut short, a `.` and 16 hex digits of a
    /// hash of it before the suffix). Watch it ([`Session::group`], [`Group::watch`]) to
    /// learn of candidates coming and going.
    ///
    /// [`Group::watch`]: crate::Group::watch
    pub fn candidates_group(&self) -> GroupName {
        candidates_group(&self.name)
    }
}

impl LockGuard {
    /// Sets the value of this lock's term (at most [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN)
    /// bytes of UTF-8; empty for none), e.g. who holds it and why, on the backend before
    /// returning: [`Owner::value`] of every read of the owner shows it until the term ends,
    /// and observers get an [`Event::LeaderChanged`](crate::Event::LeaderChanged) with it. [`Error::LeaseLost`] if the term
    /// is no longer held; [`Error::Unsupported`] on a backend without term values.
    ///
    /// ```
    /// use simba_lease::{Config, Session, backends::MemoryBackend};
    /// use std::sync::Arc;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let guard = session.lock("nightly-report")?;
    /// guard.set_value("host-7, pid 4711")?;
    /// let owner = session.observe("nightly-report")?.leader()?.unwrap();
    /// assert_eq!((owner.token, owner.value.as_str()), (guard.token(), "host-7, pid 4711"));
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn set_value(&self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        check_supported(&self.g.inner)?;
        let g = &self.g;
        if !self.is_valid() {
            return Err(lease_lost(g.term()));
        }
        g.inner.write_value(&g.session, g.term(), &value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_groups_are_valid_names_for_every_election_name() {
        let short = LeaseName::new("scheduler").unwrap();
        assert_eq!(candidates_group(&short).as_str(), "scheduler:candidates");
        let exact = LeaseName::new("a".repeat(MAX_NAME_LEN - CANDIDATES.len())).unwrap();
        assert_eq!(candidates_group(&exact).as_str().len(), MAX_NAME_LEN);
        let long = LeaseName::new("b".repeat(MAX_NAME_LEN)).unwrap();
        let other = LeaseName::new(format!("{}c", "b".repeat(MAX_NAME_LEN - 1))).unwrap();
        let (g1, g2) = (candidates_group(&long), candidates_group(&other));
        assert_eq!(g1.as_str().len(), MAX_NAME_LEN);
        assert!(g1.as_str().ends_with(CANDIDATES));
        assert_ne!(g1, g2, "names with a common start get distinct groups");
        assert_eq!(g1, candidates_group(&long), "the same in every call");
    }
}
