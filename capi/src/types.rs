//! The constants and `#[repr(C)]` types of the header: statuses, states, event kinds,
//! loss reasons, the versioned `simba_config`, the plain result structs and the opaque handle
//! types.

use std::ffi::{c_char, c_void};
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{
    cancel::{simba_cancel_free, simba_cancel_new},
    election::simba_election_free,
    fence::{
        simba_fence_file, simba_fence_free, simba_fence_mysql, simba_fence_postgres,
        simba_fence_redis,
    },
    group::{simba_group_free, simba_membership_free},
    lock::{simba_lock_free, simba_lock_unlock, simba_session_lock_queue},
    observer::{simba_observer_free, simba_observer_leader},
    results::simba_event_value,
    rw_lock::{
        simba_rw_guard_free, simba_rw_guard_unlock, simba_rw_lock_free, simba_session_rw_lock,
    },
    semaphore::{
        simba_permit_free, simba_permit_release, simba_semaphore_free, simba_semaphore_holders,
        simba_session_semaphore,
    },
    session::{
        simba_backend_free, simba_config_default, simba_connect, simba_session_close,
        simba_session_connect, simba_session_free, simba_session_open,
    },
    status::simba_last_error,
};

/// Size of a buffer for a session id: 32 hex digits and the NUL.
pub const SIMBA_SESSION_ID_LEN: usize = 33;
/// Size of a buffer for a lease or group name: 128 ASCII characters and the NUL.
pub const SIMBA_NAME_LEN: usize = 129;
/// A timeout that never runs out.
pub const SIMBA_FOREVER: u64 = u64::MAX;
/// The longest term value, in bytes of UTF-8.
pub const SIMBA_MAX_VALUE_LEN: usize = 1024;
/// Size of a buffer that holds any term value: `SIMBA_MAX_VALUE_LEN` bytes and the NUL.
pub const SIMBA_VALUE_LEN: usize = SIMBA_MAX_VALUE_LEN + 1;
// The library's limit, spelled out above for cbindgen.
const _: () = assert!(SIMBA_MAX_VALUE_LEN == lease::MAX_VALUE_LEN);

/// What a call returned. `SIMBA_OK` is 0; every other value comes with a message from
/// [`simba_last_error`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum simba_status {
    /// Success.
    SIMBA_OK = 0,
    /// `try_lock`: someone else holds the lock (the out handle is NULL); likewise a
    /// semaphore's `try_acquire` and a read-write lock's `try_read` / `try_write`.
    SIMBA_BUSY = 1,
    /// The time limit ran out (also: no event within the timeout).
    SIMBA_TIMEOUT = 2,
    /// A required pointer argument was NULL.
    SIMBA_NULL_ARGUMENT = 3,
    /// A handle that is freed, never created, or of another kind.
    SIMBA_INVALID_HANDLE = 4,
    /// A string argument was not UTF-8.
    SIMBA_INVALID_UTF8 = 5,
    /// A bad name, metadata, configuration value, URL or buffer size.
    SIMBA_INVALID_ARGUMENT = 6,
    /// The URL names a backend this library was built without.
    SIMBA_FEATURE_DISABLED = 7,
    /// The session expired; it is never revived.
    SIMBA_SESSION_EXPIRED = 8,
    /// The lock or term is no longer held; its token must not be used.
    SIMBA_LEASE_LOST = 9,
    /// The candidate does not lead now.
    SIMBA_NOT_LEADER = 10,
    /// The election handle resigned (campaign again first).
    SIMBA_NOT_CANDIDATE = 11,
    /// Waiting could not help: a lock call (`simba_session_lock`, `_lock_timeout`,
    /// `_lock_cancellable`) by the thread that already holds or is taking that name through
    /// this session, as a lock or as a candidate it entered (locks are not reentrant; the
    /// session's other threads wait for the name instead, and `simba_session_try_lock` gives
    /// `SIMBA_BUSY`), or a second candidate (`simba_session_election*`,
    /// `simba_election_campaign`) for a name this session already uses, from any thread; a
    /// read or write of a read-write lock by the thread that already holds or is taking a
    /// term of that name through this session.
    SIMBA_ALREADY_HELD = 12,
    /// The session (or the handle, or an event queue) was closed.
    SIMBA_CLOSED = 13,
    /// The database server's version is not supported.
    SIMBA_UNSUPPORTED_SERVER = 14,
    /// The backend failed (connection, server); trying again later may succeed.
    SIMBA_BACKEND = 15,
    /// A panic inside the library was caught at the boundary (a bug: please report it).
    SIMBA_PANIC = 16,
    /// Any other error.
    SIMBA_ERROR = 17,
    /// TLS could not be set up (the server's certificate was refused, or the server refused
    /// the client's, or it does not speak TLS); the message says why. Not transient.
    SIMBA_TLS = 18,
    /// The server refused the credentials (user, password). Not transient.
    SIMBA_AUTHENTICATION = 19,
    /// A `*_cancellable` wait ended because its `simba_cancel` was fired (before or during
    /// the call); nothing was taken.
    SIMBA_CANCELLED = 20,
    /// The backend cannot do this at all (e.g. term values or fair locks on a custom backend
    /// without them); trying again will not help.
    SIMBA_UNSUPPORTED = 21,
    /// A table of the SQL schema does not exist: install it (`simba schema install URL`,
    /// or the scripts `sql/init-simba-*.sql`); the message names the table. Not transient.
    SIMBA_MISSING_SCHEMA = 22,
    /// A fenced write was refused: its token is below the newest token recorded for the
    /// resource (a newer term wrote there); nothing was written. Stop writing with that
    /// token; acquire the lock again for a new one. Not transient.
    SIMBA_STALE_TOKEN = 23,
}

/// A session's state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum simba_state {
    /// Kept alive.
    SIMBA_STATE_VALID = 0,
    /// Keep-alives failing; leases still valid until the local deadline.
    SIMBA_STATE_JEOPARDY = 1,
    /// Expired (a new backend session may be opened, see `reopen_on_expiry`).
    SIMBA_STATE_EXPIRED = 2,
    /// Closed.
    SIMBA_STATE_CLOSED = 3,
}

/// What an event is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum simba_event_kind {
    /// Keep-alives are failing (`session`).
    SIMBA_EVENT_JEOPARDY = 0,
    /// Keep-alives succeed again (`session`).
    SIMBA_EVENT_RECOVERED = 1,
    /// The session expired; every term it held was lost (`session`).
    SIMBA_EVENT_SESSION_EXPIRED = 2,
    /// A new backend session replaced the expired one (`session`: old, `new_session`: new).
    SIMBA_EVENT_SESSION_REOPENED = 3,
    /// The session was closed; its last event (`session`).
    SIMBA_EVENT_CLOSED = 4,
    /// An election won a term (`name`, `token`, `remaining_ms`).
    SIMBA_EVENT_ELECTED = 5,
    /// An elected candidate lost its term (`name`, `token`, `reason`).
    SIMBA_EVENT_REVOKED = 6,
    /// A held lock was lost (`name`, `token`, `reason`).
    SIMBA_EVENT_LOCK_LOST = 7,
    /// An observed lease changed hands (`name`; `session`, `token`, `remaining_ms` of the
    /// new holder, or `session` empty and `token` 0 when it became free).
    SIMBA_EVENT_LEADER_CHANGED = 8,
    /// A watched group changed (`name`: the group; `members`, `joined`, `left`).
    SIMBA_EVENT_MEMBERS_CHANGED = 9,
    /// An event of a kind this version does not know.
    SIMBA_EVENT_OTHER = 10,
    /// The backend granted a term with a token not greater than one this process saw
    /// granted for the name before: it lost data (`name`, `token` of the new term,
    /// `remaining_ms`; [`simba_event_value`] gives the token seen before, in decimal).
    SIMBA_EVENT_TOKEN_REGRESSED = 11,
}

/// Why a term ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum simba_loss_reason {
    /// Not a loss event.
    SIMBA_LOSS_NONE = 0,
    /// The session expired or its local deadline passed.
    SIMBA_LOSS_SESSION_EXPIRED = 1,
    /// The term's own deadline passed.
    SIMBA_LOSS_EXPIRED = 2,
    /// The backend no longer listed the lease.
    SIMBA_LOSS_MISSING = 3,
    /// The candidate resigned.
    SIMBA_LOSS_RESIGNED = 4,
    /// The session was closed.
    SIMBA_LOSS_CLOSED = 5,
    /// A reason this version does not know.
    SIMBA_LOSS_OTHER = 6,
}

/// Which side of a read-write lock a term is on.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum simba_rw_mode {
    /// Shared: any number of readers together, never with a writer.
    SIMBA_RW_READ = 0,
    /// Exclusive: one writer, with no reader.
    SIMBA_RW_WRITE = 1,
}

/// Session settings for [`simba_session_open`] and [`simba_session_connect`].
///
/// The struct grows at its end in later versions; `struct_size` says how much of it the
/// caller knows. Always fill it with `simba_config_default(&config, sizeof config)` first
/// (that sets `struct_size` and every field the caller's header has), then change what you
/// need. The library reads only the fields that lie wholly within `struct_size`; later
/// fields take their defaults, so a program built against an older header keeps working
/// with a newer library. A `struct_size` smaller than the first version's (the fields up to
/// `metadata`) or larger than this library's `simba_config` gives `SIMBA_INVALID_ARGUMENT`
/// (a newer program on an older library is refused, never misread).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_config {
    /// `sizeof(simba_config)` of the caller's header, set by [`simba_config_default`]. A
    /// `size_t`, the type of `sizeof`, so no cast is needed (on 64-bit targets a `uint32_t`
    /// would be padded to 8 bytes before `lease_ms` anyway).
    pub struct_size: usize,
    /// How long the session and its leases live without a keep-alive (default 15000).
    pub lease_ms: u64,
    /// How often the session is kept alive (default 5000); shorter than the lease.
    pub renew_interval_ms: u64,
    /// Clock-rate drift bound in [0, 0.5) (default 0.01).
    pub drift: f64,
    /// After an expiry, open a new backend session and re-enter elections, observers and
    /// groups: 1 (the default) or 0 (expiry is terminal). Any other value gives
    /// `SIMBA_INVALID_ARGUMENT`.
    pub reopen_on_expiry: u8,
    /// Session metadata visible to group members: NUL-terminated UTF-8 of at most 1024
    /// bytes, or NULL for none. Read during `simba_session_open` only.
    pub metadata: *const c_char,
    /// Since the second version. Take this session's locks in arrival order: 0 (the
    /// default) or 1; any other value gives `SIMBA_INVALID_ARGUMENT`. A fair lock call
    /// takes a place in the name's queue on the backend and gets the lock only when no live
    /// waiter is ahead of it; a try-lock gets it only when nobody is queued ahead. Plain
    /// locks of other sessions ignore the queue, so every process locking a name must use
    /// fair locks for the order to hold. Opening the session gives `SIMBA_UNSUPPORTED` on a
    /// backend without queues. Semaphores and elections do not queue.
    pub fair_locks: u8,
    /// Since the third version. Keep a name blocked for this many ms after a term of this
    /// session ended because the session expired (default 0: no delay; at most one week,
    /// 604800000, else `SIMBA_INVALID_ARGUMENT`), as Chubby's and Consul's lock-delay.
    /// Measured by the backend's clock from the end of the term; meanwhile no new term of
    /// the name begins (an observer sees the expired session's last term as the holder); a
    /// read-write lock's write term blocks readers and writers, a read term writers only. A
    /// clean end (unlock, free, resign, closing the live session) frees the name at once.
    /// For a resource that cannot check fencing tokens: a former holder that was paused or
    /// cut off cannot overlap the next one by up to the delay beyond its lease; the failover
    /// after a crash takes up to lease + delay. Opening the session gives
    /// `SIMBA_UNSUPPORTED` on a backend without lock-delay.
    pub lock_delay_ms: u64,
}

/// The first version of [`simba_config`]: the smallest `struct_size` accepted.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct SimbaConfigV1 {
    pub(crate) struct_size: usize,
    pub(crate) lease_ms: u64,
    pub(crate) renew_interval_ms: u64,
    pub(crate) drift: f64,
    pub(crate) reopen_on_expiry: u8,
    pub(crate) metadata: *const c_char,
}

/// `sizeof` of the first version of `simba_config`.
pub(crate) const CONFIG_V1_SIZE: usize = std::mem::size_of::<SimbaConfigV1>();
pub(crate) const CONFIG_SIZE: usize = std::mem::size_of::<simba_config>();

/// Lease health of a session now.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct simba_health {
    /// Time left until the local deadline, in ms (0 once expired or closed).
    pub valid_for_ms: u64,
    /// Round trip of the last successful keep-alive in µs, or -1 if none yet.
    pub keep_alive_rtt_us: i64,
    /// Time left when the last keep-alive completed, in ms, or -1 if none yet.
    pub slack_ms: i64,
    /// Keep-alives failed in a row.
    pub failures: u32,
}

/// The holder of a lease, as [`simba_observer_leader`] reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_owner {
    /// Whether anyone holds the lease; the other fields are zero/empty if not.
    pub held: bool,
    /// The holder's fencing token.
    pub token: u64,
    /// Time the holder has left by the backend's clock, in ms.
    pub remaining_ms: u64,
    /// The holding session's id (NUL-terminated).
    pub session: [c_char; SIMBA_SESSION_ID_LEN],
}

/// A live member of a group.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_member {
    /// The member's session id (NUL-terminated).
    pub session: [c_char; SIMBA_SESSION_ID_LEN],
    /// The member session's metadata: `metadata_len` bytes of UTF-8 followed by a NUL (the
    /// metadata may contain NUL bytes itself: use the length).
    pub metadata: *const c_char,
    /// Length of `metadata` in bytes, without the final NUL.
    pub metadata_len: usize,
}

/// An array of members (`len` items; `items` is NULL when `len` is 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_member_list {
    /// The members.
    pub items: *const simba_member,
    /// How many.
    pub len: usize,
}

/// A held permit of a semaphore, as [`simba_semaphore_holders`] reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_holder {
    /// Which permit (0 to permits − 1).
    pub index: u32,
    /// Its holder (`held` is always true).
    pub owner: simba_owner,
    /// The holder's term value: `value_len` bytes of UTF-8 followed by a NUL (empty if none;
    /// it may contain NUL bytes itself: use the length).
    pub value: *const c_char,
    /// Length of `value` in bytes, without the final NUL.
    pub value_len: usize,
}

/// An array of permit holders (`len` items, by permit index; `items` is NULL when `len` is
/// 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_holder_list {
    /// The holders.
    pub items: *const simba_holder,
    /// How many.
    pub len: usize,
}

/// A session waiting in a fair lock's queue, as [`simba_session_lock_queue`] lists it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_waiter {
    /// The waiting session's id (NUL-terminated hex).
    pub session: [c_char; SIMBA_SESSION_ID_LEN],
}

/// The waiters of a fair lock, first first (`len` items; `items` is NULL when `len` is 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_waiter_list {
    /// The waiters.
    pub items: *const simba_waiter,
    /// How many.
    pub len: usize,
}

/// An event. Fields that do not apply to its kind are zero, empty strings or empty lists.
/// Every string is NUL-terminated ASCII/UTF-8 and lives as long as the event.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct simba_event {
    /// What happened.
    pub kind: simba_event_kind,
    /// Why a term ended (`REVOKED`, `LOCK_LOST`), else `SIMBA_LOSS_NONE`.
    pub reason: simba_loss_reason,
    /// The session (session events; the expired one for `SESSION_REOPENED`; the holder for
    /// `LEADER_CHANGED`).
    pub session: [c_char; SIMBA_SESSION_ID_LEN],
    /// The new session of `SESSION_REOPENED`.
    pub new_session: [c_char; SIMBA_SESSION_ID_LEN],
    /// The lease (terms, `LEADER_CHANGED`) or group (`MEMBERS_CHANGED`).
    pub name: [c_char; SIMBA_NAME_LEN],
    /// The term's or holder's fencing token, 0 if none.
    pub token: u64,
    /// The term's or holder's remaining time by the backend's clock, in ms.
    pub remaining_ms: u64,
    /// `MEMBERS_CHANGED`: the members now.
    pub members: simba_member_list,
    /// `MEMBERS_CHANGED`: who joined since the last view.
    pub joined: simba_member_list,
    /// `MEMBERS_CHANGED`: who left since the last view.
    pub left: simba_member_list,
}

/// A function receiving a session's events: the event (valid only during the call) and the
/// `user_data` given at registration. It runs on one of the library's event threads (each
/// callback in order on a queue of its own: one that blocks delays only its own later
/// events) and must return normally: a C++ exception or a `longjmp` leaving it is undefined
/// behaviour (it would cross the library's Rust frames); catch exceptions inside it. It
/// should not block: `simba_session_close` and `simba_session_free` wait until it returned
/// (at most the lease, or 5 s if longer).
pub type simba_event_callback =
    Option<unsafe extern "C" fn(event: *const simba_event, user_data: *mut c_void)>;

/// A backend connection (from [`simba_connect`]); thread-safe; free with
/// [`simba_backend_free`] (sessions opened on it keep it alive).
pub struct simba_backend {
    _private: [u8; 0],
}

/// A session; thread-safe; close with [`simba_session_close`], free with
/// [`simba_session_free`].
pub struct simba_session {
    _private: [u8; 0],
}

/// A held lock (its guard); thread-safe; release with [`simba_lock_unlock`], free with
/// [`simba_lock_free`] (which releases it in the background if still held).
pub struct simba_lock {
    _private: [u8; 0],
}

/// A candidate in an election; thread-safe; free with [`simba_election_free`] (resigns).
pub struct simba_election {
    _private: [u8; 0],
}

/// A watch of a lease's holder; thread-safe; free with [`simba_observer_free`].
pub struct simba_observer {
    _private: [u8; 0],
}

/// A view of a group; thread-safe; free with [`simba_group_free`].
pub struct simba_group {
    _private: [u8; 0],
}

/// A group membership; thread-safe; free with [`simba_membership_free`] (leaves in the
/// background if still a member).
pub struct simba_membership {
    _private: [u8; 0],
}

/// A counting semaphore of leased permits (from [`simba_session_semaphore`]); thread-safe;
/// free with [`simba_semaphore_free`] (permits taken stay held until their own free).
pub struct simba_semaphore {
    _private: [u8; 0],
}

/// A held permit of a semaphore; thread-safe; release with [`simba_permit_release`], free
/// with [`simba_permit_free`] (which releases it in the background if still held).
pub struct simba_permit {
    _private: [u8; 0],
}

/// A cancellation token for the `*_cancellable` waits (from [`simba_cancel_new`]);
/// thread-safe: fire it from any thread; free with [`simba_cancel_free`].
pub struct simba_cancel {
    _private: [u8; 0],
}

/// A read-write lock of one session (from [`simba_session_rw_lock`]); thread-safe; free
/// with [`simba_rw_lock_free`] (terms taken stay held until their own free).
pub struct simba_rw_lock {
    _private: [u8; 0],
}

/// A held read or write term of a read-write lock; thread-safe; release with
/// [`simba_rw_guard_unlock`], free with [`simba_rw_guard_free`] (which releases it in the
/// background if still held).
pub struct simba_rw_guard {
    _private: [u8; 0],
}

/// A fence: a resource that applies a write only if its fencing token is not below the
/// newest token recorded for the key (from [`simba_fence_file`], [`simba_fence_redis`],
/// [`simba_fence_postgres`] or [`simba_fence_mysql`]); thread-safe; free with
/// [`simba_fence_free`].
pub struct simba_fence {
    _private: [u8; 0],
}
