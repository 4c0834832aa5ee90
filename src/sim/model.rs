//! The model backend: the contract of [`LeaseBackend`](crate::spi::LeaseBackend) on the
//! simulation's virtual clock, with the two premises that break it on request.
//!
//! It is a separate small model rather than [`MemoryBackend`](crate::backends::MemoryBackend)
//! on a virtual [`Clock`](crate::Clock) for three reasons: session ids must come from the seed
//! (the memory backend draws them from the operating system), the `token_reset` premise needs
//! to roll the whole state back to an older snapshot (an asynchronous replica), and the checker
//! needs the log of every grant the backend made.

use crate::error::{Error, Result};
use crate::spi::{Acquire, HeldLease, KeepAlive};
use crate::types::{GroupName, LeaseName, Member, Metadata, Owner, SessionId, Term, Token};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A session id from a small number (32 hex digits, as on SQL and Redis).
pub fn session_id(n: u64) -> SessionId {
    SessionId::parse(&format!("{n:032x}")).expect("32 hex digits")
}

/// The small number of a session id made by [`session_id`].
pub fn session_no(id: &SessionId) -> u64 {
    u64::from_str_radix(id.as_str(), 16).unwrap_or(u64::MAX)
}

#[derive(Clone, Debug)]
struct SessionRow {
    expires: u64,
    leases: BTreeSet<LeaseName>,
}

#[derive(Clone, Debug)]
struct LeaseRow {
    session: Option<SessionId>,
    token: u64,
    /// The current term's value (a new term starts without one).
    value: String,
}

/// The backend's tables (cloned whole for a replica snapshot).
#[derive(Clone, Debug, Default)]
struct Tables {
    sessions: BTreeMap<SessionId, SessionRow>,
    leases: BTreeMap<LeaseName, LeaseRow>,
    groups: BTreeMap<GroupName, BTreeSet<SessionId>>,
}

/// One lease grant the backend made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// True time of the grant (ns).
    pub at: u64,
    /// The lease.
    pub name: LeaseName,
    /// The session it went to.
    pub session: SessionId,
    /// The token.
    pub token: Token,
    /// Whether it began a new term (false: the holder asked again).
    pub new_term: bool,
}

/// Sessions and fenced leases on a virtual clock.
#[derive(Debug)]
pub struct Model {
    tables: Tables,
    replica: Option<Tables>,
    next_session: u64,
    offset: u64,
    /// Every grant, in true-time order.
    pub grants: Vec<Grant>,
    /// Sessions known to have ended (closed, or found expired): the checker's knowledge,
    /// which a failover does not roll back.
    ended: BTreeSet<SessionId>,
    /// Successful keep-alives or acquires of a session after it ended: (true time, session).
    pub revivals: Vec<(u64, SessionId)>,
    /// Premise `stale_values`: a new term keeps the previous term's value.
    pub stale_values: bool,
}

impl Model {
    /// An empty backend whose clock equals true time.
    pub fn new() -> Self {
        Model {
            tables: Tables::default(),
            replica: None,
            next_session: 1,
            offset: 0,
            grants: Vec::new(),
            ended: BTreeSet::new(),
            revivals: Vec::new(),
            stale_values: false,
        }
    }

    /// The backend clock at true time `t`.
    pub fn clock(&self, t: u64) -> u64 {
        t + self.offset
    }

    /// Premise `clock_step`: the backend clock jumps forward by `by` ns.
    pub fn step_clock(&mut self, by: u64) {
        self.offset += by;
    }

    /// Takes the snapshot an asynchronous replica would have.
    pub fn snapshot(&mut self) {
        self.replica = Some(self.tables.clone());
    }

    /// Premise `token_reset`: fails over to the replica, losing every write since the
    /// snapshot. Returns the names whose token went back.
    pub fn fail_over(&mut self) -> Vec<LeaseName> {
        let Some(old) = self.replica.take() else {
            return Vec::new();
        };
        let back = self
            .tables
            .leases
            .iter()
            .filter(|(n, l)| old.leases.get(*n).map_or(0, |o| o.token) < l.token)
            .map(|(n, _)| n.clone())
            .collect();
        self.tables = old;
        back
    }

    fn live(&self, id: &SessionId, now: u64) -> Option<&SessionRow> {
        self.tables.sessions.get(id).filter(|s| s.expires > now)
    }

    fn expired(id: &SessionId) -> Error {
        Error::SessionExpired {
            session: id.clone(),
        }
    }

    /// Removes a session; returns the names it freed.
    fn remove(&mut self, id: &SessionId) -> Vec<LeaseName> {
        self.ended.insert(id.clone());
        let Some(row) = self.tables.sessions.remove(id) else {
            return Vec::new();
        };
        for members in self.tables.groups.values_mut() {
            members.remove(id);
        }
        let mut freed = Vec::new();
        for name in row.leases {
            if let Some(l) = self.tables.leases.get_mut(&name) {
                if l.session.as_ref() == Some(id) {
                    l.session = None;
                    freed.push(name);
                }
            }
        }
        freed
    }

    /// Opens a session for `lease` at true time `t`.
    pub fn open_session(&mut self, t: u64, lease: Duration) -> (SessionId, Duration) {
        let id = session_id(self.next_session);
        self.next_session += 1;
        let expires = self.clock(t) + lease.as_nanos() as u64;
        self.tables.sessions.insert(
            id.clone(),
            SessionRow {
                expires,
                leases: BTreeSet::new(),
            },
        );
        (id, lease)
    }

    /// Keeps `id` alive; on an expired session, removes it (returning the names freed).
    pub fn keep_alive(
        &mut self,
        t: u64,
        id: &SessionId,
        lease: Duration,
    ) -> (Result<KeepAlive>, Vec<LeaseName>) {
        let now = self.clock(t);
        let Some(row) = self.tables.sessions.get_mut(id).filter(|s| s.expires > now) else {
            return (Err(Self::expired(id)), self.remove(id));
        };
        row.expires = now + lease.as_nanos() as u64;
        if self.ended.contains(id) {
            self.revivals.push((t, id.clone()));
        }
        let leases = row
            .leases
            .iter()
            .filter_map(|name| {
                let l = self.tables.leases.get(name)?;
                (l.session.as_ref() == Some(id)).then(|| HeldLease {
                    name: name.clone(),
                    token: Token::new(l.token).expect("tokens start at 1"),
                    remaining: lease,
                })
            })
            .collect();
        (
            Ok(KeepAlive {
                remaining: lease,
                leases,
            }),
            Vec::new(),
        )
    }

    /// Closes `id`; returns the names freed.
    pub fn close_session(&mut self, id: &SessionId) -> Vec<LeaseName> {
        self.remove(id)
    }

    /// Acquires `name` for `id` at true time `t`.
    pub fn acquire(&mut self, t: u64, id: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.acquire_with_value(t, id, name, "")
    }

    /// Acquires `name` for `id` at true time `t`; the term held then gets `value` unless it
    /// is empty (in one step, as `LeaseBackend::acquire_with_value` may).
    pub fn acquire_with_value(
        &mut self,
        t: u64,
        id: &SessionId,
        name: &LeaseName,
        value: &str,
    ) -> Result<Acquire> {
        let now = self.clock(t);
        let Some(me) = self.live(id, now) else {
            self.ended.insert(id.clone());
            return Err(Self::expired(id));
        };
        let remaining = Duration::from_nanos(me.expires - now);
        if self.ended.contains(id) {
            self.revivals.push((t, id.clone()));
        }
        let row = self.tables.leases.get(name).cloned();
        if let Some(LeaseRow {
            session: Some(holder),
            token,
            value: held_value,
        }) = &row
        {
            if holder != id {
                if let Some(h) = self.live(holder, now) {
                    return Ok(Acquire::Held(Owner {
                        session: holder.clone(),
                        token: Token::new(*token).expect("held leases have a token"),
                        remaining: Duration::from_nanos(h.expires - now),
                        value: held_value.clone(),
                    }));
                }
            }
        }
        let lease = self.tables.leases.entry(name.clone()).or_insert(LeaseRow {
            session: None,
            token: 0,
            value: String::new(),
        });
        let new_term = lease.session.as_ref() != Some(id);
        if new_term {
            lease.token += 1;
            lease.session = Some(id.clone());
            if !self.stale_values {
                lease.value.clear();
            }
        }
        if !value.is_empty() {
            value.clone_into(&mut lease.value);
        }
        let token = Token::new(lease.token).expect("token advanced above zero");
        if let Some(row) = self.tables.sessions.get_mut(id) {
            row.leases.insert(name.clone());
        }
        self.grants.push(Grant {
            at: t,
            name: name.clone(),
            session: id.clone(),
            token,
            new_term,
        });
        Ok(Acquire::Acquired(Term {
            name: name.clone(),
            token,
            remaining,
        }))
    }

    /// Releases `name` if `id` holds it with `token`.
    pub fn release(&mut self, id: &SessionId, name: &LeaseName, token: Token) -> bool {
        let freed = match self.tables.leases.get_mut(name) {
            Some(l) if l.session.as_ref() == Some(id) && l.token == token.get() => {
                l.session = None;
                true
            }
            _ => false,
        };
        if freed {
            if let Some(row) = self.tables.sessions.get_mut(id) {
                row.leases.remove(name);
            }
        }
        freed
    }

    /// The live holder of `name` at true time `t`.
    pub fn owner(&self, t: u64, name: &LeaseName) -> Option<Owner> {
        let now = self.clock(t);
        let l = self.tables.leases.get(name)?;
        let s = l.session.as_ref()?;
        let row = self.live(s, now)?;
        Some(Owner {
            session: s.clone(),
            token: Token::new(l.token).ok()?,
            remaining: Duration::from_nanos(row.expires - now),
            value: l.value.clone(),
        })
    }
}

impl Model {
    /// Adds `id` to `group`; fails once the session expired.
    pub fn join(&mut self, t: u64, id: &SessionId, group: &GroupName) -> Result<()> {
        if self.live(id, self.clock(t)).is_none() {
            self.ended.insert(id.clone());
            return Err(Self::expired(id));
        }
        if self.ended.contains(id) {
            self.revivals.push((t, id.clone()));
        }
        let members = self.tables.groups.entry(group.clone()).or_default();
        members.insert(id.clone());
        Ok(())
    }

    /// The live members of `group` at true time `t`.
    pub fn members(&self, t: u64, group: &GroupName) -> Vec<Member> {
        let now = self.clock(t);
        let Some(ids) = self.tables.groups.get(group) else {
            return Vec::new();
        };
        ids.iter()
            .filter(|id| self.live(id, now).is_some())
            .map(|id| Member {
                session: id.clone(),
                metadata: Metadata::default(),
            })
            .collect()
    }
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}
