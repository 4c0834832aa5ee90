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
use super::session::{Sessions, ZkSession};
use super::{delay, held};
use crate::backends::options;
use crate::error::{Error, Result};
use crate::spi::{RwAcquire, RwDelayed, RwMode, RwState};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::collections::HashSet;
use std::future::Future;
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
    fn new(dir: &str, name: &LeaseName, mode: RwMode, id: &SessionId, token: u64) -> TermNode {
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

/// A waiting writer's node as read.
#[derive(Clone, Debug)]
struct Waiter {
    id: SessionId,
    czxid: i64,
    version: i32,
    live: bool,
}

/// A term whose gate stands without its node: its session ended without a clean end.
#[derive(Clone, Debug)]
struct Delayed {
    id: SessionId,
    mode: RwMode,
    token: u64,
    /// The gate's path.
    gate: String,
    delay_ms: i64,
    /// The delay left in ms as its stamp's write timed it (`None`: not timed, counted as
    /// in its delay).
    left: Option<i64>,
}

impl Delayed {
    fn blocks(&self) -> bool {
        self.left.is_none_or(|l| l > 0)
    }
}

/// How [`Sessions::rw_view`] reads.
#[derive(Clone, Copy)]
struct How<'a> {
    op: &'static str,
    /// Sync first, sent with the read (no round trip more): the read then sees every change
    /// that completed before it, whichever server made it.
    sync: bool,
    /// The session whose registration to renew, if it has one, with its data.
    renew: Option<(&'a SessionId, &'a [u8])>,
}

/// A name's node and children as one attempt read them.
#[derive(Debug, Default)]
struct View {
    /// The own registration was renewed by the read (see [`How::renew`]).
    renewed: bool,
    /// The counter node's data version, counter and `mzxid` (`None`: no node yet).
    node: Option<(i32, u64, i64)>,
    writer: Option<(SessionId, u64)>,
    readers: Vec<(SessionId, u64)>,
    /// In line, first first.
    waiting: Vec<Waiter>,
    /// Terms in their lock-delay, or whose delay ran out (to delete with a grant).
    delayed: Vec<Delayed>,
}

impl View {
    fn counter(&self) -> u64 {
        self.node.map_or(0, |n| n.1)
    }

    fn live_waiting(&self) -> usize {
        self.waiting.iter().filter(|w| w.live).count()
    }

    /// The delayed terms of `mode` that still block.
    fn delaying(&self, mode: RwMode) -> impl Iterator<Item = &Delayed> {
        self.delayed
            .iter()
            .filter(move |d| d.mode == mode && d.blocks())
    }

    fn busy(&self, extra: usize) -> RwAcquire {
        let delayed_writer = self.delaying(RwMode::Write).map(|d| &d.id).next();
        RwAcquire::Busy {
            writer: self
                .writer
                .as_ref()
                .map(|w| &w.0)
                .or(delayed_writer)
                .cloned(),
            readers: self.readers.len() + self.delaying(RwMode::Read).count(),
            writers_waiting: self.live_waiting() + extra,
        }
    }
}

/// The counter node's data.
fn counter_data(counter: u64) -> Vec<u8> {
    format!("1 {counter}").into_bytes()
}

fn parse_counter(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data)
        .ok()?
        .strip_prefix("1 ")?
        .parse()
        .ok()
}

/// A term node's name.
fn term_node(mode: RwMode, id: &SessionId, token: u64) -> String {
    let tag = match mode {
        RwMode::Read => 'r',
        RwMode::Write => 'w',
    };
    format!("{tag}-{id}-{token}")
}

/// A child of a name's node.
#[derive(Debug, PartialEq, Eq)]
enum Child {
    Term(RwMode, SessionId, u64),
    /// A term's gate, with the delay in ms.
    Gate(RwMode, SessionId, u64, i64),
    Waiting(SessionId),
}

fn parse_child(c: &str) -> Option<Child> {
    let (tag, rest) = c.split_once('-')?;
    let mode = |m: &str| match m {
        "r" => Some(RwMode::Read),
        "w" => Some(RwMode::Write),
        _ => None,
    };
    if tag == "q" {
        return Some(Child::Waiting(SessionId::parse(rest).ok()?));
    }
    let mut it = rest.split('-');
    let id = SessionId::parse(it.next()?).ok()?;
    let token = it.next()?.parse().ok()?;
    if let Some(m) = tag.strip_prefix('g') {
        let delay = it.next()?.parse().ok().filter(|d: &i64| *d >= 0)?;
        return it
            .next()
            .is_none()
            .then_some(Child::Gate(mode(m)?, id, token, delay));
    }
    it.next()
        .is_none()
        .then_some(Child::Term(mode(tag)?, id, token))
}

fn bad_node(op: &'static str, path: &str) -> Error {
    super::failure::error(
        op,
        format!("{path} holds no read-write lock counter (written outside simba-lease?)"),
    )
}

/// Waits for two requests already sent (one after the other, so the server ran them in that
/// order): one round trip.
fn both<A: Future, B: Future>(
    operation: &'static str,
    limit: Duration,
    a: A,
    b: B,
) -> Result<(A::Output, B::Output)> {
    block_on_for(async move { (a.await, b.await) }, limit).ok_or(Error::Timeout {
        operation,
        after: limit,
        source: None,
    })
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
    fn rw_path(&self, name: &LeaseName) -> String {
        format!("{}/{}", self.cfg.rw, name.as_str())
    }

    /// Reads `dir` and its children (after a sync, when `how.sync`), then, when writers wait,
    /// their nodes with the server's clock, sent together: a write to `{root}/clock` before
    /// the read, or, when `how.renew` names a session waiting in line, the rewrite of its
    /// registration after it (its data: the new patience).
    fn rw_view(
        &self,
        client: &zk::Client,
        limit: Duration,
        dir: &str,
        how: How<'_>,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<View> {
        let op = how.op;
        let synced = how.sync.then(|| client.sync(dir));
        let mut r = client.new_multi_reader();
        r.add_get_data(dir).map_err(|e| zk_err(op, e))?;
        r.add_get_children(dir).map_err(|e| zk_err(op, e))?;
        let read = r.commit();
        let synced = async move {
            match synced {
                Some(f) => f.await,
                None => Ok(()),
            }
        };
        let (synced, read) = both(op, limit, synced, read)?;
        match synced {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(fail(e)),
        }
        let mut results = read.map_err(fail)?.into_iter();
        let mut view = View::default();
        match results.next() {
            Some(zk::MultiReadResult::Data { data, stat }) => {
                let counter = parse_counter(&data).ok_or_else(|| bad_node(op, dir))?;
                view.node = Some((stat.version, counter, stat.mzxid));
            }
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => return Ok(view),
            Some(zk::MultiReadResult::Error { err }) => return Err(fail(err)),
            _ => return Err(bad_node(op, dir)),
        }
        let children = match results.next() {
            Some(zk::MultiReadResult::Children { children }) => children,
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => Vec::new(),
            Some(zk::MultiReadResult::Error { err }) => return Err(fail(err)),
            _ => return Err(bad_node(op, dir)),
        };
        let mut queued = Vec::new();
        let names: HashSet<&str> = children.iter().map(String::as_str).collect();
        for c in &children {
            match parse_child(c) {
                Some(Child::Term(RwMode::Read, id, token)) => view.readers.push((id, token)),
                // At most one (grants are decided on a consistent read); the newest wins.
                Some(Child::Term(RwMode::Write, id, token))
                    if view.writer.as_ref().is_none_or(|w| w.1 < token) =>
                {
                    view.writer = Some((id, token));
                }
                // Created and deleted with its term's node: alone, the session ended.
                Some(Child::Gate(mode, id, token, delay_ms))
                    if !names.contains(term_node(mode, &id, token).as_str()) =>
                {
                    view.delayed.push(Delayed {
                        id,
                        mode,
                        token,
                        gate: format!("{dir}/{c}"),
                        delay_ms,
                        left: None,
                    });
                }
                Some(Child::Waiting(id)) => queued.push((id, format!("{dir}/{c}"))),
                _ => {}
            }
        }
        view.readers.sort();
        view.delayed.sort_by(|a, b| a.id.cmp(&b.id));
        // Every delay is timed by its stamp's write, sent now (they travel with the line's
        // read, if any): a write term's keeps every attempt out, a read term's new writers,
        // and each counts in `Busy` while it lasts; a grant deletes those that ran out.
        let paths: Vec<String> = view
            .delayed
            .iter()
            .map(|d| delay::stamp_path(&d.gate))
            .collect();
        let sent: Vec<_> = paths
            .iter()
            .map(|p| client.set_data(p, &[], None))
            .collect();
        if !queued.is_empty() {
            self.rw_line(client, limit, dir, how, queued, &mut view, fail)?;
        }
        let stamps = self.stamps(client, limit, &paths, sent, op, fail)?;
        let delayed = std::mem::take(&mut view.delayed);
        // A stamp whose gate is gone: taken since the read.
        view.delayed = delayed
            .into_iter()
            .zip(stamps)
            .filter_map(|(d, stamp)| {
                let left = Some(delay::left(&stamp?, d.delay_ms));
                Some(Delayed { left, ..d })
            })
            .collect();
        Ok(view)
    }

    /// Reads the waiting writers' nodes `queued` with the server's clock into `view` (see
    /// [`Sessions::rw_view`]).
    #[allow(clippy::too_many_arguments)]
    fn rw_line(
        &self,
        client: &zk::Client,
        limit: Duration,
        dir: &str,
        how: How<'_>,
        queued: Vec<(SessionId, String)>,
        view: &mut View,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<()> {
        let op = how.op;
        let clock = format!("{}/clock", self.cfg.root);
        // The own registration, renewed after the read of the line: that write's `mtime` is
        // the clock then (no clock write).
        let mut renew = how
            .renew
            .filter(|(me, _)| queued.iter().any(|(id, _)| id == *me));
        for _ in 0..3 {
            let mut r = client.new_multi_reader();
            for (_, path) in &queued {
                r.add_get_data(path).map_err(|e| zk_err(op, e))?;
            }
            let (now, renewed, read) = match renew {
                Some((me, data)) => {
                    let read = r.commit();
                    let own = client.set_data(&format!("{dir}/q-{me}"), data, None);
                    let (read, own) = both(op, limit, read, own)?;
                    match own {
                        Ok(stat) => (stat.mtime, Some((me, stat.version)), read),
                        Err(zk::Error::NoNode) => {
                            renew = None; // left meanwhile: time the line by the clock
                            continue;
                        }
                        Err(e) => return Err(fail(e)),
                    }
                }
                None => {
                    let now = client.set_data(&clock, &[], None);
                    let read = r.commit();
                    let (now, read) = both(op, limit, now, read)?;
                    match now {
                        Ok(stat) => (stat.mtime, None, read),
                        Err(zk::Error::NoNode) => {
                            self.cfg.mkdirs(client, &clock, limit)?;
                            continue;
                        }
                        Err(e) => return Err(fail(e)),
                    }
                }
            };
            for ((id, _), r) in queued.into_iter().zip(read.map_err(fail)?) {
                let zk::MultiReadResult::Data { data, stat } = r else {
                    continue; // gone meanwhile
                };
                // Only a node the waiting writer's own session made counts.
                if SessionId::from_u64(stat.ephemeral_owner as u64) != id {
                    continue;
                }
                let patience = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|d| d.parse::<i64>().ok())
                    .unwrap_or(0);
                // The own one: live if it was before this renewal, at the renewal's version.
                let version = match renewed {
                    Some((me, version)) if *me == id => {
                        view.renewed = true;
                        version
                    }
                    _ => stat.version,
                };
                view.waiting.push(Waiter {
                    id,
                    czxid: stat.czxid,
                    version,
                    live: stat.mtime.saturating_add(patience) > now,
                });
            }
            view.waiting.sort_by_key(|w| w.czxid);
            return Ok(());
        }
        Err(super::failure::error(
            op,
            format!("the line of {dir} could not be timed"),
        ))
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

    /// Through the shared reader, after a sync (a term or registration that just returned on
    /// another server is then seen).
    pub(super) fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        const OP: &str = "reading a read-write lock";
        let client = self.reader.client()?;
        let dir = self.rw_path(name);
        let fail = |e| zk_err(OP, e);
        let how = How {
            op: OP,
            sync: true,
            renew: None,
        };
        let view = self.rw_view(&client, self.cfg.request_timeout, &dir, how, &fail)?;
        let with_token = |(id, t): (SessionId, u64)| Token::new(t).map(|t| (id, t));
        Ok(RwState {
            last_token: view.counter(),
            delayed: view
                .delayed
                .iter()
                .filter_map(|d| {
                    let left = d.left.filter(|l| *l > 0)?;
                    Some(Token::new(d.token).map(|token| RwDelayed {
                        session: d.id.clone(),
                        mode: d.mode,
                        token,
                        remaining: delay::remaining(left),
                    }))
                })
                .collect::<Result<_>>()?,
            writer: view.writer.clone().map(with_token).transpose()?,
            readers: view
                .readers
                .iter()
                .cloned()
                .map(with_token)
                .collect::<Result<_>>()?,
            writers_waiting: view
                .waiting
                .into_iter()
                .filter(|w| w.live)
                .map(|w| w.id)
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_and_counters_round_trip_and_foreign_names_are_skipped() {
        let id = SessionId::from_u64(0x1234);
        for mode in [RwMode::Read, RwMode::Write] {
            let c = term_node(mode, &id, 42);
            assert_eq!(parse_child(&c), Some(Child::Term(mode, id.clone(), 42)));
            let name = LeaseName::new("n").unwrap();
            let node = TermNode::new("/r/rw/n", &name, mode, &id, 42);
            assert_eq!(node.path, format!("/r/rw/n/{c}"));
            let g = node.gate(1500);
            let g = g.strip_prefix("/r/rw/n/").unwrap();
            assert_eq!(
                parse_child(g),
                Some(Child::Gate(mode, id.clone(), 42, 1500))
            );
        }
        assert_eq!(
            parse_child(&format!("q-{id}")),
            Some(Child::Waiting(id.clone()))
        );
        for bad in [
            "x-1",
            "r-zz-1",
            &format!("r-{id}"),
            &format!("w-{id}-x"),
            &format!("w-{id}-1-2"),
            &format!("gw-{id}-1"),
            &format!("gw-{id}-1--5"),
            &format!("gx-{id}-1-5"),
            &format!("gw-{id}-1-5-6"),
            "q-",
        ] {
            assert_eq!(parse_child(bad), None, "{bad}");
        }
        assert_eq!(parse_counter(&counter_data(7)), Some(7));
        for bad in [&b""[..], b"7", b"2 7", b"1 x"] {
            assert_eq!(parse_counter(bad), None);
        }
    }
}
