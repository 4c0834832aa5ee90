//! Read-write locks on ZooKeeper: one persistent node per name, `{root}/rw/{name}`, never
//! deleted, whose data `1 {counter}` is the name's token counter; its ephemeral children are
//! the terms and the waiting writers, so each ends with its session's ZooKeeper session:
//!
//! * `r-{sessionId}-{token}`: a reader's term; `w-{sessionId}-{token}`: the writer's term;
//! * `gr-`/`gw-{sessionId}-{token}-{delay ms}`: the persistent lock-delay gate of a term of a
//!   session with a lock-delay, created and deleted with the term's node by the session; one
//!   standing without its term's node is a term in its delay, timed as a lease's gate is
//!   (its child `ended` is the stamp: see `delay`), and the grant that finds it run out
//!   deletes it;
//! * `q-{sessionId}`: a waiting writer, its data its patience in ms; the write that made or
//!   renewed it is its last attempt (`mtime`, the server's clock). Waiting writers are in
//!   line by `czxid` (a renewal keeps the place). Every write attempt of a registered writer
//!   renews it as it reads the line; the read (before the renewal) says whether it had run
//!   out, and one that had queues again at the back (until then others see it at its old
//!   place: they wait a little longer, and its delete wakes them).
//!
//! Every change of the set of terms or of the line (a grant, a registration) is one multi
//! that sets the counter node at the version its read saw, so concurrent decisions conflict
//! and all but one read again (compare-and-set). A grant sets the counter + 1 and creates the
//! term's node named with it, so the token is exactly the memory backend's counter + 1; a
//! registration rewrites the counter unchanged. A registration whose patience ran out is
//! ignored by the others (it is not deleted: only its owner, its session's end, or a leave
//! removes it); a grant that ignores one also checks its data version in the multi, so a
//! renewal that raced with the decision fails the grant. Its owner finding it run out
//! queues again at the back (delete and create in the registration's multi). The clock is
//! the leader's, as for queue places and run-once jobs: a leader change between servers
//! whose clocks disagree moves the lapse by the skew. Releases and leaves delete one node:
//! the deletion is a [`Notification::Released`](crate::spi::Notification::Released) through
//! the reader's watch.
//!
//! Round trips: an attempt reads the counter node and its children in one multi read (sent
//! behind a sync, in the same round trip, so its server has every change that completed
//! before: a `Busy` never comes from a follower lagging behind a release); when
//! writers wait, one more for the multi read of their nodes sent together with a write that
//! gives the server's clock (a writer's own registration rewritten after the read, which is
//! its renewal, or else a write to `{root}/clock` before it); then the grant or registration
//! (one multi) unless the reply is known by then. Gates standing without their term add
//! their stamps' writes (sent with the waiting writers' read when there is one, else one
//! round trip more; one more at the first observation of each), read attempts included: a
//! read term in its delay counts in a reader's `Busy`, and a grant deletes the gates whose
//! delay ran out. A release is one delete (a multi with the gate's delete for a session with
//! a lock-delay); a leave one round trip (the clock, the place's read and its delete sent
//! together); the state one sync with a multi read, plus the clock and the waiting writers'
//! reads, and the stamps, when there are any.
//!
//! Each grant's multi has an `exists` with a watch of its term node queued right behind it
//! (not waited for), so the session's keep-alive lists its terms without reading them, as it
//! does its leases (see `held` and [`TermNode`]); a grant whose reply is lost is read by the
//! next keep-alive, and listed if it ran (the engine then releases it).

use super::facade::{backend as zk_err, block_on_for, call};
use super::rw_view::{counter_data, term_node, How, View};
use super::session::{Sessions, ZkSession};
use super::{delay, held};
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::{RwAcquire, RwMode};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use zookeeper_client as zk;

const OP: &str = "taking a read-write lock";

/// How many times an attempt reads again after a conflicting change.
const TRIES: usize = 32;

/// A read-write term node of a session, as its bookkeeping ([`ZkSession::terms`]) knows it:
/// one possibly held from its grant's send (the grant may run without its reply coming back)
/// until its release, its deletion or the `exists` behind its grant's multi says it is not
/// there. Its path names the session and the token: a token is handed out by one multi that
/// ran only (the counter's compare-and-set), so a path stands for one term ever (a grant that
/// never ran leaves the counter as it was, and a later grant of the session may build the same
/// path: that is the same term as far as anyone can tell, since the first never existed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct TermNode {
    pub(super) name: LeaseName,
    pub(super) mode: RwMode,
    pub(super) token: u64,
    /// `{root}/rw/{name}/{r|w}-{sessionId}-{token}`.
    pub(super) path: String,
}

impl TermNode {
    pub(super) fn new(
        dir: &str,
        name: &LeaseName,
        mode: RwMode,
        id: &SessionId,
        token: u64,
    ) -> TermNode {
        TermNode {
            name: name.clone(),
            mode,
            token,
            path: format!("{dir}/{}", term_node(mode, id, token)),
        }
    }

    /// Its lock-delay gate's path, for a session with a delay of `delay_ms`: `g`, the term
    /// node's name, and the delay.
    pub(super) fn gate(&self, delay_ms: i64) -> String {
        let (dir, node) = self.path.rsplit_once('/').unwrap_or(("", &self.path));
        format!("{dir}/g{node}-{delay_ms}")
    }
}

impl held::Node for TermNode {
    /// The token its path names (a node of the session at that path is that term).
    fn token(&self, _: &zk::Stat) -> Result<Token> {
        Token::new(self.token)
    }
}

/// Takes one fault of `faults`, if any is left.
fn lose(faults: &AtomicU32) -> bool {
    faults
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// What an attempt does after its read.
enum Next {
    Busy,
    Grant,
    /// Rewrite the own registration (a writer waiting in line).
    Renew,
    /// Register the writer as waiting.
    Register,
}

/// What a multi that changes the name did.
enum Outcome {
    Done,
    /// A conflicting change since the read (or a parent missing): read again.
    Again,
}

impl Sessions {
    pub(super) fn rw_path(&self, name: &LeaseName) -> String {
        format!("{}/{}", self.cfg.rw, name.as_str())
    }

    /// Sets (or creates) the counter node in `w`, first: `counter` + `add`.
    fn add_counter(
        &self,
        w: &mut zk::MultiWriter<'_>,
        dir: &str,
        view: &View,
        add: u64,
    ) -> Result<()> {
        let data = counter_data(view.counter() + add);
        let acl = self.cfg.acl.for_path(dir);
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        let r = match view.node {
            // A version ZooKeeper let wrap to -1 (2^32 - 1 writes) compares as any version:
            // a child named with the write read stands in, which two decisions on the same
            // read cannot both create (the one node it leaves every 2^32 writes stays).
            Some((-1, _, mzxid)) => w
                .add_set_data(dir, &data, None)
                .and_then(|()| w.add_create(&format!("{dir}/wrap-{mzxid}"), &[], &opts)),
            Some((version, _, _)) => w.add_set_data(dir, &data, Some(version)),
            None => w.add_create(dir, &data, &opts),
        };
        r.map_err(|e| zk_err(OP, e))
    }

    /// Commits a multi built on `view`; a conflict (or a missing `{root}/rw`, created here)
    /// is [`Outcome::Again`]. `grant`: the term node a grant creates, possibly held from the
    /// send: an `exists` with a watch of it is queued right behind the multi, under the lock a
    /// keep-alive sends its reads under, and its reply (the node as it stands after the multi
    /// and any earlier grant of the same path, whatever the outcome) is left to the next
    /// keep-alive. Without a reply (the outcome unknown) the keep-alive reads the node.
    fn rw_commit(
        &self,
        s: &ZkSession,
        client: &zk::Client,
        limit: Duration,
        mut w: zk::MultiWriter<'_>,
        view: &View,
        grant: Option<&TermNode>,
    ) -> Result<Outcome> {
        let lost = || Error::Timeout {
            operation: OP,
            after: limit,
            source: None,
        };
        let (sent, watched) = match grant {
            Some(node) => {
                let mut terms = s.terms.lock();
                let seq = terms.creating(node);
                if lose(&self.rw_unsent_faults) {
                    // As if the connection was lost before the send: it never runs.
                    return Err(lost());
                }
                let sent = w.commit();
                (
                    sent,
                    Some((node, seq, held::Sent::exists(client, node.path.clone()))),
                )
            }
            None => (w.commit(), None),
        };
        let r = call(OP, limit, sent)?;
        if r.is_ok() && grant.is_some() && lose(&self.rw_reply_faults) {
            return Err(lost());
        }
        let stash = || {
            if let Some((node, seq, seen)) = watched {
                let mut terms = s.terms.lock();
                // It holds a clone of the client: never stashed once closing began.
                if s.client.lock().is_some() {
                    terms.stash(node, seq, seen);
                }
            }
        };
        match r {
            Ok(_) => {
                stash();
                Ok(Outcome::Done)
            }
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                stash();
                match source {
                    zk::Error::NoNode if index == 0 && view.node.is_none() => {
                        self.cfg.mkdirs(client, &self.cfg.rw, limit)?;
                        Ok(Outcome::Again)
                    }
                    zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode => {
                        Ok(Outcome::Again)
                    }
                    e => Err(self.fail(s, OP, e)),
                }
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => Err(self.fail(s, OP, source)),
        }
    }

    pub(super) fn acquire_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        if !patience.is_zero() {
            options::check_lease(patience)?;
        }
        let patience_ms = patience.as_millis().to_string();
        let s = self.live(session)?;
        let limit = s.limit(&self.cfg);
        let dir = self.rw_path(name);
        let fail = |e| self.fail(&s, OP, e);
        // Its registration ran out: it queues at the back, even if a conflict made it read
        // again after the read's renewal revived it.
        let mut lapsed = false;
        for _ in 0..TRIES {
            s.check_connected(OP)?;
            let client = s.client()?;
            let sent = Instant::now();
            let how = How {
                op: OP,
                // Behind a sync: a release or an end that completed before the attempt is
                // seen, even through a follower that lags (a stale `Busy`).
                sync: true,
                renew: (mode == RwMode::Write).then_some((session, patience_ms.as_bytes())),
            };
            let view = self.rw_view(&client, limit, &dir, how, &fail)?;
            let term = |token: u64| -> Result<RwAcquire> {
                Ok(RwAcquire::Acquired(Term {
                    name: name.clone(),
                    token: Token::new(token)?,
                    remaining: s.remaining_at(sent),
                }))
            };
            let held = match mode {
                RwMode::Read => view.readers.iter().find(|r| &r.0 == session),
                RwMode::Write => view.writer.as_ref().filter(|w| &w.0 == session),
            };
            if let Some(&(_, token)) = held {
                self.found(&s, &client, TermNode::new(&dir, name, mode, session, token));
                return term(token);
            }
            let own = view.waiting.iter().find(|w| &w.id == session);
            let own_live = own.is_some_and(|o| o.live) && !lapsed;
            let own_path = format!("{dir}/q-{session}");
            let writer = view.writer.is_some() || view.delaying(RwMode::Write).next().is_some();
            let next = match mode {
                RwMode::Read if writer || view.live_waiting() > 0 => Next::Busy,
                RwMode::Read => Next::Grant,
                RwMode::Write => {
                    let mine = own.filter(|_| own_live).map_or(i64::MAX, |o| o.czxid);
                    let ahead = view
                        .waiting
                        .iter()
                        .any(|q| q.live && &q.id != session && q.czxid < mine);
                    let readers =
                        !view.readers.is_empty() || view.delaying(RwMode::Read).next().is_some();
                    if !writer && !readers && !ahead {
                        Next::Grant
                    } else if own_live {
                        Next::Renew
                    } else if patience.is_zero() {
                        Next::Busy
                    } else {
                        Next::Register
                    }
                }
            };
            let mut w = client.new_multi_writer();
            match next {
                Next::Busy => return Ok(view.busy(0)),
                // Renewed by the read.
                Next::Renew if view.renewed => return Ok(view.busy(0)),
                Next::Renew => {
                    // In place: the line and the terms are unchanged.
                    let renewed = client.set_data(&own_path, patience_ms.as_bytes(), None);
                    match call(OP, limit, renewed)? {
                        Ok(_) => return Ok(view.busy(0)),
                        Err(zk::Error::NoNode) => continue,
                        Err(e) => return Err(fail(e)),
                    }
                }
                Next::Register => {
                    // At the back: a registration that ran out is made anew.
                    lapsed |= own.is_some();
                    self.add_counter(&mut w, &dir, &view, 0)?;
                    if let Some(o) = own {
                        w.add_delete(&own_path, Some(o.version))
                            .map_err(|e| zk_err(OP, e))?;
                    }
                    let qacl = self.cfg.acl.for_path(&own_path);
                    let qopts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&qacl));
                    w.add_create(&own_path, patience_ms.as_bytes(), &qopts)
                        .map_err(|e| zk_err(OP, e))?;
                    match self.rw_commit(&s, &client, limit, w, &view, None)? {
                        Outcome::Done => return Ok(view.busy(1)),
                        Outcome::Again => continue,
                    }
                }
                Next::Grant => {}
            }
            // The grant: the counter + 1, the term's node named with it (and its gate, for a
            // session with a lock-delay), the writer's own registration deleted, the gates
            // whose delay ran out deleted with their stamps, and the run-out registrations
            // the decision ignored checked as read.
            let token = view.counter() + 1;
            let node = TermNode::new(&dir, name, mode, session, token);
            self.add_counter(&mut w, &dir, &view, 1)?;
            for d in view.delayed.iter().filter(|d| !d.blocks()) {
                w.add_delete(&delay::stamp_path(&d.gate), None)
                    .map_err(|e| zk_err(OP, e))?;
                w.add_delete(&d.gate, None).map_err(|e| zk_err(OP, e))?;
            }
            if let (RwMode::Write, Some(o)) = (mode, own) {
                w.add_delete(&own_path, Some(o.version))
                    .map_err(|e| zk_err(OP, e))?;
            }
            for q in view.waiting.iter().filter(|q| !q.live && &q.id != session) {
                w.add_check_version(&format!("{dir}/q-{}", q.id), q.version)
                    .map_err(|e| zk_err(OP, e))?;
            }
            let eacl = self.cfg.acl.for_path(&node.path);
            let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&eacl));
            w.add_create(&node.path, &[], &ephemeral)
                .map_err(|e| zk_err(OP, e))?;
            if s.lock_delay_ms > 0 {
                let gate = node.gate(s.lock_delay_ms);
                let gacl = self.cfg.acl.for_path(&gate);
                let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&gacl));
                w.add_create(&gate, &[], &persistent)
                    .map_err(|e| zk_err(OP, e))?;
            }
            match self.rw_commit(&s, &client, limit, w, &view, Some(&node))? {
                Outcome::Done => return term(token),
                Outcome::Again => continue,
            }
        }
        Err(super::failure::error(
            OP,
            format!("read-write lock {name} kept changing"),
        ))
    }

    /// An own term an attempt found, which it returns as held: watched from now on, in the
    /// rare case the session's bookkeeping does not know it (a node of its session at that
    /// path is that term: see [`TermNode`]), by an `exists` with a watch that the next
    /// keep-alive applies (no round trip here).
    fn found(&self, s: &ZkSession, client: &zk::Client, node: TermNode) {
        let mut terms = s.terms.lock();
        if terms.knows(&node) {
            return;
        }
        let seq = terms.creating(&node);
        if s.client.lock().is_some() {
            let seen = held::Sent::exists(client, node.path.clone());
            terms.stash(&node, seq, seen);
        }
    }

    pub(super) fn release_rw(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        const OP: &str = "releasing a read-write lock";
        let Some(s) = self.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let node = TermNode::new(&self.rw_path(name), name, mode, session, token.get());
        let path = &node.path;
        let limit = s.limit(&self.cfg);
        // Forgotten once its node is gone (deleted now, or not there: any grant of it was
        // sent before, so ran before). A release without an answer leaves the term to the
        // keep-alive: its watch (or its read) says whether it went, and while it stands it is
        // listed, so the engine releases it again.
        let seq = s.terms.lock().seq_of(&node);
        let gone = |deleted: bool| {
            if let Some(seq) = seq {
                s.terms.lock().forget(&node, seq);
            }
            Ok(deleted)
        };
        // A term of a session with a lock-delay ends with its gate, in one multi.
        if s.lock_delay_ms > 0 {
            let mut w = client.new_multi_writer();
            w.add_delete(path, None).map_err(|e| zk_err(OP, e))?;
            w.add_delete(&node.gate(s.lock_delay_ms), None)
                .map_err(|e| zk_err(OP, e))?;
            match call(OP, limit, w.commit())? {
                Ok(_) => return gone(true),
                Err(zk::MultiWriteError::OperationFailed {
                    index: 0,
                    source: zk::Error::NoNode,
                }) => return gone(false),
                // No gate (never expected): the term's node alone, below.
                Err(zk::MultiWriteError::OperationFailed {
                    index: 1,
                    source: zk::Error::NoNode,
                }) => {}
                Err(e) => return self.fail_unchanged(&s, OP, zk::Error::from(e)),
            }
        }
        match call(OP, limit, client.delete(path, None))? {
            Ok(()) => gone(true),
            Err(zk::Error::NoNode) => gone(false),
            Err(e) => self.fail_unchanged(&s, OP, e),
        }
    }

    pub(super) fn leave_rw_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        const OP: &str = "leaving a read-write lock's writers";
        let Some(s) = self.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let path = format!("{}/q-{session}", self.rw_path(name));
        let clock = format!("{}/clock", self.cfg.root);
        let limit = s.limit(&self.cfg);
        // Sent together (one round trip): the clock, the place's read, its delete. A place
        // whose patience ran out is deleted too, but was not waiting any more.
        let now = client.set_data(&clock, &[], None);
        let read = client.get_data(&path);
        let deleted = client.delete(&path, None);
        let all = async move { (now.await, read.await, deleted.await) };
        let (now, read, deleted) = block_on_for(all, limit).ok_or(Error::Timeout {
            operation: OP,
            after: limit,
            source: None,
        })?;
        match deleted {
            Ok(()) => {}
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return self.fail_unchanged(&s, OP, e),
        }
        let Ok((data, stat)) = read else {
            return Ok(true);
        };
        let now = match now {
            Ok(now) => now.mtime,
            // No clock yet: made now, read a round trip later (judges the lapse a little late).
            Err(zk::Error::NoNode) => {
                if self.cfg.mkdirs(&client, &clock, limit).is_err() {
                    return Ok(true);
                }
                match call(OP, limit, client.set_data(&clock, &[], None)) {
                    Ok(Ok(now)) => now.mtime,
                    _ => return Ok(true),
                }
            }
            Err(_) => return Ok(true),
        };
        let patience = std::str::from_utf8(&data)
            .ok()
            .and_then(|d| d.parse::<i64>().ok())
            .unwrap_or(0);
        Ok(stat.mtime.saturating_add(patience) > now)
    }
}
