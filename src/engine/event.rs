//! Events a session reports: state changes, terms won and lost, leader and member changes.

use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Term, Token};

/// Why a term ended without the holder asking for it (or how it ended when it did).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The session expired, or its local deadline passed without a successful keep-alive.
    SessionExpired,
    /// The term's own deadline passed.
    Expired,
    /// The backend's keep-alive reply no longer listed the lease.
    Missing,
    /// The candidate resigned.
    Resigned,
    /// The session was closed.
    Closed,
}

/// Something that happened to a session or one of its handles.
///
/// Every event reaches the session's listeners ([`Session::events`](crate::Session::events)),
/// and the handle it concerns (an election, a lock, an observer, a group) gets it on its own
/// receiver too. Events arrive in order: on a channel at once, when they happen; on a
/// callback in order on a queue of that callback's own, so a slow callback delays only its
/// own later events. Callbacks should not block (a run longer than the retry interval is
/// logged); hand slow work, such as a backend call, to a thread of your own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Keep-alives are failing; leases stay valid until the local deadline.
    Jeopardy {
        /// The session.
        session: SessionId,
    },
    /// A keep-alive succeeded again after [`Event::Jeopardy`].
    Recovered {
        /// The session.
        session: SessionId,
    },
    /// The session expired (terminal): every term it held was lost.
    SessionExpired {
        /// The session.
        session: SessionId,
    },
    /// After an expiry, the engine opened a new backend session (a new id) and re-entered
    /// its elections, observers and groups on it; locks held under the old one stay lost.
    SessionReopened {
        /// The expired session.
        old: SessionId,
        /// The new session.
        new: SessionId,
    },
    /// The session was closed; this is its last event.
    Closed {
        /// The session.
        session: SessionId,
    },
    /// An election won a term.
    Elected {
        /// The term and its fencing token.
        term: Term,
    },
    /// An elected candidate lost its term.
    Revoked {
        /// The lost term.
        term: Term,
        /// Why.
        reason: LossReason,
    },
    /// A held lock was lost before its guard was dropped.
    LockLost {
        /// The lost term.
        term: Term,
        /// Why.
        reason: LossReason,
    },
    /// An observed lease changed hands (or became free: `owner` is `None`), or its holder
    /// changed the term's value: then `owner` has the same session and token as before and
    /// the new [`Owner::value`].
    LeaderChanged {
        /// The lease.
        name: LeaseName,
        /// The new holder with its token and term value.
        owner: Option<Owner>,
    },
    /// The backend granted `term` with a token not greater than `seen`, a token this
    /// process saw granted for the same name before: the backend lost data (a failover to
    /// a replica that missed writes, a restart without persistence, an eviction). The term
    /// is held, but a resource that saw `seen` rejects its token, and a former holder in
    /// another process may still believe it holds the name. Logged as an error too.
    TokenRegressed {
        /// The term granted.
        term: Term,
        /// The highest token this process saw granted for the name before.
        seen: Token,
    },
    /// A watched group's membership changed.
    MembersChanged {
        /// The group.
        group: GroupName,
        /// The members now.
        members: Vec<Member>,
        /// Who joined since the last view.
        joined: Vec<Member>,
        /// Who left since the last view.
        left: Vec<Member>,
    },
}
