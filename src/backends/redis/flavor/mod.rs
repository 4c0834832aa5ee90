//! The two topologies of the Redis backend, its flavors (as in `crossbeam-channel`): one node,
//! where every script of an operation reaches the session hash and a term is bound to it
//! ([`OneNode`]), and routed by slot, where each script keeps to one hash slot and a term is
//! bound to its session's anchor on the lease's node ([`Routed`], required on a Redis
//! Cluster). [`Flavor`] dispatches each operation that differs, once; the backend does the
//! rest alike.

mod anchors;
mod one_node;
mod routed;
mod routed_keep_alive;
mod rw_known;
mod slot_map;

pub(super) use routed::Routed;

use super::backend::Base;
use super::keys::Keys;
use super::reply::Acquired;
use crate::error::Result;
use crate::spi::KeepAlive;
use crate::types::{GroupName, LeaseName, Member, SessionId, Token};
use one_node::OneNode;
use std::time::{Duration, Instant};

/// One node, or routed by slot (`route_by_slot`, or a cluster), with what each keeps.
pub(super) enum Flavor {
    /// Every key of an operation on one node: one script an operation.
    OneNode(OneNode),
    /// Every script call to one hash slot.
    Routed(Box<Routed>),
}

impl Flavor {
    /// The flavor of a backend that `routed` by slot, or not.
    pub(super) fn new(routed: bool) -> Self {
        if routed {
            Flavor::Routed(Box::default())
        } else {
            Flavor::OneNode(OneNode::default())
        }
    }

    /// A session was opened for `lease` with a lock-delay of `delay_ms`: it lives at least
    /// until `deadline` (routed: read-write and lease acquires count on that).
    pub(super) fn session_opened(
        &self,
        sid: &SessionId,
        deadline: Instant,
        lease: Option<Duration>,
        delay_ms: u64,
    ) {
        if let Flavor::Routed(f) = self {
            f.rw.renewed(sid, deadline, lease);
            f.rw.delay_known(sid, delay_ms);
        }
    }

    /// Whether every key is on one node: terms and job claims there end with their session
    /// hash.
    pub(super) fn is_one_node(&self) -> bool {
        matches!(self, Flavor::OneNode(_))
    }

    /// The prefix of session keys a script finds live sessions by (one node), or nothing
    /// (routed: session hashes live on other slots).
    pub(super) fn live_sessions_prefix(&self, keys: &Keys) -> String {
        match self {
            Flavor::OneNode(_) => keys.session_prefix(),
            Flavor::Routed(_) => String::new(),
        }
    }

    /// Whether `sid` is still live, checked before a job call (see [`Routed::live`]); one
    /// node: the script checks it itself, so always true here.
    pub(super) fn live_before_change(&self, b: &Base, sid: &SessionId) -> Result<bool> {
        match self {
            Flavor::OneNode(_) => Ok(true),
            Flavor::Routed(f) => f.live(b, sid),
        }
    }

    /// Acquires `name` for `sid`, queued with `patience` (fair locks), and with `value` (no
    /// `patience`) the new term's value set with it.
    pub(super) fn acquire(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        value: Option<&str>,
    ) -> Result<Acquired> {
        match self {
            Flavor::OneNode(f) => f.acquire(b, sid, name, patience, value),
            Flavor::Routed(f) => f.acquire(b, sid, name, patience, value),
        }
    }

    /// Renews the session and what it holds for `lease`.
    pub(super) fn keep_alive(
        &self,
        b: &Base,
        session: &SessionId,
        lease: Duration,
    ) -> Result<KeepAlive> {
        match self {
            Flavor::OneNode(f) => f.keep_alive(b, session, lease),
            Flavor::Routed(f) => f.keep_alive(b, session, lease),
        }
    }

    /// Ends the session, its terms and its memberships.
    pub(super) fn close(&self, b: &Base, session: &SessionId) -> Result<()> {
        match self {
            Flavor::OneNode(f) => f.close(b, session),
            Flavor::Routed(f) => f.close(b, session),
        }
    }

    /// Releases the term `token` of `name` held by `session`.
    pub(super) fn release(
        &self,
        b: &Base,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        match self {
            Flavor::OneNode(f) => f.release(b, session, name, token),
            Flavor::Routed(f) => f.release(b, session, name, token),
        }
    }

    /// Makes `session` a member of `group`.
    pub(super) fn join(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<()> {
        match self {
            Flavor::OneNode(f) => f.join(b, session, group),
            Flavor::Routed(f) => f.join(b, session, group),
        }
    }

    /// Ends the membership of `session` in `group`.
    pub(super) fn leave(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<bool> {
        match self {
            Flavor::OneNode(f) => f.leave(b, session, group),
            Flavor::Routed(f) => f.leave(b, session, group),
        }
    }

    /// The live members of `group`, with their metadata.
    pub(super) fn members(&self, b: &Base, group: &GroupName) -> Result<Vec<Member>> {
        match self {
            Flavor::OneNode(f) => f.members(b, group),
            Flavor::Routed(f) => f.members(b, group),
        }
    }

    /// How many keep-alives went one script per node (routed; none on one node).
    pub(super) fn keep_alives_by_node(&self) -> u64 {
        match self {
            Flavor::OneNode(_) => 0,
            Flavor::Routed(f) => f.keep_alives_by_node(),
        }
    }

    /// Forgets the slot map (routed; one node keeps none).
    pub(super) fn forget_slot_map(&self) {
        if let Flavor::Routed(f) = self {
            f.slot_maps.forget();
        }
    }
}
