//! The backend's sessions: [`ZkSession`], one Simba session on a dedicated ZooKeeper client,
//! with its watchdog deadline, the leases it may own and its close; and [`Sessions`], the
//! table of them with the reader and settings, which turns a ZooKeeper error into an expired
//! session and reads a node's holder.

use super::codec::{token, value_of};
use super::connect::{Cfg, Reader};
use super::facade::{self, backend as zk_err, state_error};
use super::{failure, held};
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::Subscribers;
use crate::types::{LeaseName, Metadata, Owner, SessionId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// One Simba session: a dedicated ZooKeeper client.
pub(super) struct ZkSession {
    pub(super) id: SessionId,
    pub(super) raw: i64,
    pub(super) negotiated: Duration,
    /// The session's lock-delay in ms (0: none): its terms carry a gate (see `delay`).
    pub(super) lock_delay_ms: i64,
    pub(super) metadata: Metadata,
    pub(super) client: Mutex<Option<zk::Client>>,
    pub(super) states: zk::StateWatcher,
    /// The watchdog deadline: last keep-alive sent + lease.
    pub(super) deadline: Mutex<Instant>,
    pub(super) lease: Mutex<Duration>,
    /// The possibly-owned lease names and the watches of the held ones.
    pub(super) possibly: Mutex<held::Leases>,
    pub(super) releasing: Mutex<()>,
    pub(super) closed: Mutex<bool>,
    /// Own queue places (path, data version) whose delete after a grant failed: the next
    /// keep-alive deletes them at that version (see `queue`).
    pub(super) orphans: Mutex<Vec<(String, i32)>>,
    /// The possibly held read-write term nodes and the watches of the held ones (see `rw`).
    pub(super) terms: Mutex<held::Watched<super::rw::TermNode>>,
}

impl ZkSession {
    pub(super) fn client(&self) -> Result<zk::Client> {
        self.client.lock().clone().ok_or_else(|| self.expired())
    }

    pub(super) fn expired(&self) -> Error {
        Error::SessionExpired {
            session: self.id.clone(),
        }
    }

    pub(super) fn deadline(&self) -> Instant {
        *self.deadline.lock()
    }

    /// The time limit of this session's calls.
    pub(super) fn limit(&self, cfg: &Cfg) -> Duration {
        cfg.request_timeout.min(*self.lease.lock())
    }

    /// Time left as of `at`: never beyond the negotiated timeout or the watchdog deadline.
    pub(super) fn remaining_at(&self, at: Instant) -> Duration {
        let left = self.deadline().saturating_duration_since(at);
        left.min(self.negotiated).max(Duration::from_millis(1))
    }

    pub(super) fn gone(&self) -> bool {
        Instant::now() >= self.deadline() || self.states.peek_state().is_terminated()
    }

    /// Fails unless the client is connected (a disconnected session must not look renewed).
    pub(super) fn check_connected(&self, operation: &'static str) -> Result<()> {
        match self.states.peek_state() {
            zk::SessionState::SyncConnected => Ok(()),
            s if s.is_terminated() => Err(self.expired()),
            s => Err(state_error(
                operation,
                format!("ZooKeeper session {} is {s}", self.id),
            )),
        }
    }

    /// Forgets a possibly-owned name unless another create of it was sent since `seq`.
    pub(super) fn forget(&self, name: &LeaseName, seq: u64) {
        self.possibly.lock().forget(name, seq);
    }

    /// Records a successful keep-alive: the watchdog deadline moves to `until`. Fails once
    /// the session is closed (or closing): the renewal must then not count.
    pub(super) fn renew(&self, until: Instant, lease: Duration) -> bool {
        let closed = self.closed.lock();
        if *closed {
            return false;
        }
        *self.lease.lock() = lease;
        let mut d = self.deadline.lock();
        *d = (*d).max(until);
        true
    }

    /// Drops this session's client (which sends CloseSession once no call uses it any more),
    /// without waiting.
    pub(super) fn begin_close(&self) {
        drop(self.client.lock().take());
        self.possibly.lock().drop_sent();
        self.terms.lock().drop_sent();
    }

    /// Closes the ZooKeeper session and, while the client is connected, waits (until `end`)
    /// for the server to confirm it, so its ephemeral nodes are gone when this returns
    /// normally. A client that is disconnected (or whose session already ended) is not waited
    /// for: the close cannot reach the server now; the dropped client sends it once it
    /// reconnects, or the server expires the session. With `only_if_gone`, the session is
    /// closed only if it is still [`gone`](Self::gone) under the lifecycle lock (a renewal may
    /// have won the race). Returns whether the session is closed.
    pub(super) fn shutdown_until(&self, end: Instant, only_if_gone: bool) -> bool {
        let mut closed = self.closed.lock();
        if *closed {
            return true;
        }
        if only_if_gone && !self.gone() {
            return false;
        }
        self.begin_close();
        let mut states = self.states.clone();
        loop {
            match states.state() {
                s if s.is_terminated() => break,
                zk::SessionState::Disconnected => {
                    log::debug!(
                        "ZooKeeper session {} closed while disconnected: the server ends it",
                        self.id
                    );
                    break;
                }
                _ => {}
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || facade::block_on_for(states.changed(), left).is_none() {
                log::warn!("closing ZooKeeper session {} not confirmed", self.id);
                break;
            }
        }
        *closed = true;
        true
    }
}

/// The backend's shared state: its settings and reader, the subscribers, and the table of
/// its live sessions (which the watchdog sweeps).
pub(super) struct Sessions {
    pub(super) cfg: Arc<Cfg>,
    pub(super) reader: Arc<Reader>,
    pub(super) subscribers: Arc<Subscribers>,
    pub(super) sessions: Mutex<HashMap<SessionId, Arc<ZkSession>>>,
    pub(super) wake: crossbeam_channel::Sender<()>,
    /// Deletes of own queue places to fail on purpose (tests).
    pub(super) place_delete_faults: std::sync::atomic::AtomicU32,
    /// Read-write grants to fail before they are sent, on purpose (tests).
    pub(super) rw_unsent_faults: std::sync::atomic::AtomicU32,
    /// Replies of read-write grants to lose on purpose (tests).
    pub(super) rw_reply_faults: std::sync::atomic::AtomicU32,
}

impl Sessions {
    pub(super) fn expired(id: &SessionId) -> Error {
        Error::SessionExpired {
            session: id.clone(),
        }
    }

    /// Closes `s` and forgets it.
    pub(super) fn expire(&self, s: &ZkSession) {
        s.shutdown_until(options::deadline(self.cfg.request_timeout), false);
        self.sessions.lock().remove(&s.id);
    }

    /// Closes and forgets `s` if it is still gone (expired, or its lease ran out without a
    /// keep-alive) once it holds the lifecycle lock; returns whether it did.
    pub(super) fn expire_if_gone(&self, s: &ZkSession) -> bool {
        let end = options::deadline(self.cfg.request_timeout);
        if s.shutdown_until(end, true) {
            self.sessions.lock().remove(&s.id);
            true
        } else {
            false
        }
    }

    /// The session if it is live; an expired one is closed and forgotten.
    pub(super) fn live(&self, id: &SessionId) -> Result<Arc<ZkSession>> {
        let s = self
            .sessions
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| Self::expired(id))?;
        if s.gone() && self.expire_if_gone(&s) {
            return Err(Self::expired(id));
        }
        Ok(s)
    }

    /// [`Sessions::fail`] for release and leave, which change nothing on a session that ended
    /// (meanwhile): `Ok(false)`, as the contract says.
    pub(super) fn fail_unchanged(
        &self,
        s: &ZkSession,
        operation: &'static str,
        e: zk::Error,
    ) -> Result<bool> {
        match self.fail(s, operation, e) {
            Error::SessionExpired { .. } => Ok(false),
            e => Err(e),
        }
    }

    /// The session if it is known and live, for release and leave; `None` (nothing to
    /// change) for an unknown, closed or expired one, which is then closed and forgotten.
    pub(super) fn live_or_none(&self, id: &SessionId) -> Option<Arc<ZkSession>> {
        let s = self.sessions.lock().get(id).cloned()?;
        if s.gone() && self.expire_if_gone(&s) {
            return None;
        }
        Some(s)
    }

    /// Maps a ZooKeeper error of a session call; an expired session is closed and forgotten.
    pub(super) fn fail(&self, s: &ZkSession, operation: &'static str, e: zk::Error) -> Error {
        match e {
            zk::Error::SessionExpired | zk::Error::SessionMoved | zk::Error::ClientClosed => {
                self.expire(s);
                s.expired()
            }
            e => zk_err(operation, e),
        }
    }

    pub(super) fn local_session_by_raw(&self, raw: i64) -> Option<Arc<ZkSession>> {
        let id = SessionId::from_u64(raw as u64);
        self.sessions.lock().get(&id).cloned()
    }

    pub(super) fn owner_of(&self, stat: &zk::Stat) -> Result<Owner> {
        // A persistent node (no ephemeral owner) was not created by a session of this
        // backend: it never goes away by itself, so it is no holder with a remaining time.
        if stat.ephemeral_owner == 0 {
            return Err(failure::error(
                "reading a lease node",
                "the lease node is not ephemeral (created outside simba-lease); delete it",
            ));
        }
        let remaining = self.remaining_of(stat.ephemeral_owner);
        Ok(Owner {
            session: SessionId::from_u64(stat.ephemeral_owner as u64),
            token: token(stat)?,
            remaining,
            value: String::new(),
        })
    }

    /// [`Sessions::owner_of`] with the term's value from the node's data.
    pub(super) fn owner_with_value(&self, data: &[u8], stat: &zk::Stat) -> Result<Owner> {
        let mut owner = self.owner_of(stat)?;
        owner.value = value_of(data);
        Ok(owner)
    }

    /// The time the session with ZooKeeper id `raw` has left: known for a session of this
    /// backend; for another client's, the reader's negotiated session timeout stands in.
    pub(super) fn remaining_of(&self, raw: i64) -> Duration {
        match self.local_session_by_raw(raw) {
            Some(s) => s.remaining_at(Instant::now()),
            None => self
                .reader
                .client()
                .map(|c| c.session_timeout())
                .unwrap_or(self.cfg.request_timeout),
        }
    }

    pub(super) fn sweep(&self) -> (usize, Option<Instant>) {
        let all: Vec<Arc<ZkSession>> = self.sessions.lock().values().cloned().collect();
        let mut n = 0;
        let mut next: Option<Instant> = None;
        for s in all {
            if s.gone() && self.expire_if_gone(&s) {
                log::debug!("watchdog: closed ZooKeeper session {}", s.id);
                n += 1;
            } else {
                let d = s.deadline();
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        (n, next)
    }
}
