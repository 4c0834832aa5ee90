//! The leases and read-write terms a ZooKeeper session holds, kept current by one data watch
//! per node, so a keep-alive costs one cheap request however many the session holds. The
//! bookkeeping is the same for both ([`Watched`], keyed by a [`Node`]): a lease by its name
//! (its token is the node's `czxid`), a read-write term by its node's path (the token is in
//! it: see `rw`). What follows says "lease"; it holds for a term's node word for word.
//!
//! # Why a watch that has not fired proves the lease is still held
//!
//! Every entry in [`Held`] state carries a data watch armed by an `exists` whose reply showed
//! the node owned by this session (`ephemeralOwner`) with czxid `token`, at some server instant
//! `T_arm`. A data watch fires on the node's deletion or data change (and on the session's end).
//! An ephemeral node's owner and czxid never change while it exists, so: *if the watch has not
//! fired, the same node (same owner, same token) exists*.
//!
//! A keep-alive sends its requests (one `exists` of `{root}/leases`, plus an `exists` with a
//! watch of every name to (re)read) in one batch; let `T0` be the instant the server processes
//! the first of them. It must not report a lease whose node changed before `T0`. That holds
//! because the events of such a change reach this process before the reply of the first
//! request, and are recorded before that reply can be used:
//!
//! 1. ZooKeeper: a server applies changes in zxid order and triggers the watches of a change
//!    while applying it, queueing the notification on the session's connection before any reply
//!    to a request it processes afterwards ("a client sees a watch event before it sees the
//!    reply of any later request"). After a reconnect, `SetWatches` (sent by the client before
//!    any new request, and answered before one is sent) makes the server fire the events of
//!    changes made since the client's last zxid.
//! 2. `zookeeper-client` 0.11 (`session/mod.rs`, `handle_recv_buf`): one task reads the frames
//!    of the connection in order and handles each synchronously: a notification goes through
//!    `WatchManager::dispatch_server_event`, which sends the event into each matching oneshot
//!    channel (`futures` oneshot: the send wakes the waker registered by the receiver's last
//!    poll, on that task, before returning); a reply completes the caller's channel. So the
//!    waker of a watch fires before the reply that follows its event is even delivered.
//! 3. Here: each watch is polled once when it is stored (registering a [`Fire`] waker, or
//!    finding the event already there), and a [`Fire`] appends `(name, watch id)` to `fired`
//!    under a mutex. The keep-alive applies `fired` only after it has received every reply of
//!    its batch, so every watch whose node changed before `T0` is marked dirty by then.
//!
//! Hence after the replies: a held entry that is not dirty was held at `T0` and is reported
//! with its token. A dirty one is read again (a second round trip, only when a watch fired):
//! owned with the same czxid, the same node existed throughout; otherwise it is lost.
//!
//! An acquire sends its create and an `exists` with a watch together and does not wait for the
//! `exists` reply: it is stashed in the entry ([`Sent`]) and applied by the next keep-alive
//! after its batch's replies (the `exists` was sent first, so its reply came first), as if the
//! batch had read the node, and its watch is polled then (an event already delivered to it
//! marks the entry dirty). An entry whose create's outcome is unknown (the create timed out, or
//! the `exists` failed) is read in the batch (or in the second round), as every possibly-owned
//! name was before. Watches armed after `T0` (by the batch's own reads or a concurrent acquire)
//! observed the node owned after `T0`: reporting them is true too. An event recorded after the
//! replies concerns a later change: applied by this keep-alive, it only costs the second read;
//! otherwise it waits for the next keep-alive.
//!
//! The caveat is ZooKeeper's, not this module's: a reply reflects the server the session is
//! connected to, which may lag the leader (as the multi read it replaces did).

use crate::error::Result;
use crate::types::{LeaseName, Token};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use zookeeper_client as zk;

type Watch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// A node a session may own, watched while it holds it.
pub(super) trait Node: Clone + Eq + Hash + Send + Sync + 'static {
    /// Its token, as the stat of the node, owned by the session, shows it.
    fn token(&self, stat: &zk::Stat) -> Result<Token>;
}

impl Node for LeaseName {
    fn token(&self, stat: &zk::Stat) -> Result<Token> {
        super::codec::token(stat)
    }
}

/// The possibly-owned lease names of one session.
pub(super) type Leases = Watched<LeaseName>;

/// What a reply showed of a lease node, with the watch its `exists` armed.
pub(super) type Seen = (Option<zk::Stat>, zk::OneshotWatcher);

type Reply = std::result::Result<Seen, zk::Error>;

/// An `exists` with a watch, already sent, whose reply nobody has waited for yet.
pub(super) struct Sent(Option<SentState>);

enum SentState {
    Waiting(Pin<Box<dyn Future<Output = Reply> + Send>>),
    Done(Reply),
}

impl Sent {
    /// Sends an `exists` with a watch of `path` now (queued behind every request sent before).
    pub(super) fn exists(client: &zk::Client, path: String) -> Sent {
        let c = client.clone();
        let mut f: Pin<Box<dyn Future<Output = Reply> + Send>> =
            Box::pin(async move { c.check_and_watch_stat(&path).await });
        // The first poll sends the request.
        let mut cx = Context::from_waker(Waker::noop());
        Sent(Some(match f.as_mut().poll(&mut cx) {
            Poll::Ready(r) => SentState::Done(r),
            Poll::Pending => SentState::Waiting(f),
        }))
    }

    /// Waits for the reply.
    pub(super) async fn reply(mut self) -> Reply {
        match self.0.take() {
            Some(SentState::Waiting(f)) => f.await,
            Some(SentState::Done(r)) => r,
            None => Err(zk::Error::UnexpectedError("reply taken twice".into())),
        }
    }

    /// The reply if it is in.
    fn now(&mut self) -> Option<Reply> {
        match self.0.take()? {
            SentState::Done(r) => Some(r),
            SentState::Waiting(mut f) => {
                match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(r) => Some(r),
                    Poll::Pending => {
                        self.0 = Some(SentState::Waiting(f));
                        None
                    }
                }
            }
        }
    }
}

/// Nodes with a sequence number (of a create, or of a watch).
pub(super) type Numbered<K> = Vec<(K, u64)>;

type Fired<K> = Arc<Mutex<Numbered<K>>>;

/// Records that the watch `id` of `name` fired (see the module docs, step 3).
struct Fire<K> {
    name: K,
    id: u64,
    fired: Fired<K>,
}

impl<K: Node> Wake for Fire<K> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.lock().push((self.name.clone(), self.id));
    }
}

struct Held {
    token: Token,
    /// The node's data version the `exists` that armed the watch saw (a change of the data
    /// fires the watch).
    version: i32,
    id: u64,
    /// Kept to keep the watch registered; dropping it removes the watch.
    _watch: Watch,
}

struct Entry {
    /// The sequence number of the last create sent for the name.
    seq: u64,
    /// A create was sent whose outcome is not known here yet.
    pending: bool,
    /// The held node's watch fired: it may have changed.
    dirty: bool,
    held: Option<Held>,
    /// The `exists` sent with the last create, when its acquire did not wait for the reply.
    sent: Option<Sent>,
}

/// The possibly-owned nodes of one session (of one kind).
pub(super) struct Watched<K> {
    seq: u64,
    names: HashMap<K, Entry>,
    fired: Fired<K>,
}

impl<K> Default for Watched<K> {
    fn default() -> Self {
        Watched {
            seq: 0,
            names: HashMap::new(),
            fired: Arc::default(),
        }
    }
}

impl<K: Node> Watched<K> {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Records that a create of `name` is about to be sent: the name counts as possibly owned
    /// from then on. Returns the create's sequence number.
    pub(super) fn creating(&mut self, name: &K) -> u64 {
        let seq = self.next();
        let e = self.names.entry(name.clone()).or_insert(Entry {
            seq,
            pending: true,
            dirty: false,
            held: None,
            sent: None,
        });
        e.seq = seq;
        e.pending = true;
        e.sent = None;
        seq
    }

    /// Drops the stashed `exists` (each holds a clone of the client, which must be dropped for
    /// the client to close its session).
    pub(super) fn drop_sent(&mut self) {
        self.names.values_mut().for_each(|e| e.sent = None);
    }

    /// Keeps the `exists` sent with the create numbered `seq`, for the next keep-alive.
    pub(super) fn stash(&mut self, name: &K, seq: u64, sent: Sent) {
        if let Some(e) = self.names.get_mut(name).filter(|e| e.seq == seq) {
            e.sent = Some(sent);
        }
    }

    /// Every possibly-owned name.
    pub(super) fn names(&self) -> Vec<K> {
        self.names.keys().cloned().collect()
    }

    /// Whether `name` is possibly owned.
    pub(super) fn knows(&self, name: &K) -> bool {
        self.names.contains_key(name)
    }

    /// The sequence number of the last create of `name`.
    pub(super) fn seq_of(&self, name: &K) -> Option<u64> {
        self.names.get(name).map(|e| e.seq)
    }

    /// Forgets `name` unless another create of it was sent since `seq`.
    pub(super) fn forget(&mut self, name: &K, seq: u64) {
        if self.names.get(name).is_some_and(|e| e.seq == seq) {
            self.names.remove(name);
        }
    }

    /// Marks dirty the entries whose current watch fired.
    fn apply_fires(&mut self) {
        let fired = std::mem::take(&mut *self.fired.lock());
        for (name, id) in fired {
            if let Some(e) = self.names.get_mut(&name) {
                if e.held.as_ref().is_some_and(|h| h.id == id) {
                    e.dirty = true;
                }
            }
        }
    }

    /// Applies what an `exists` (with a watch), sent after the create numbered `seq`, showed of
    /// `name`'s node; returns its token when this session (`raw`) owns it.
    pub(super) fn observe(
        &mut self,
        name: &K,
        seq: u64,
        raw: i64,
        (stat, watcher): Seen,
    ) -> Result<Option<Token>> {
        let (token, version) = match &stat {
            Some(stat) if stat.ephemeral_owner == raw => (Some(name.token(stat)?), stat.version),
            _ => (None, 0),
        };
        let id = self.next();
        let fired = self.fired.clone();
        let Some(e) = self.names.get_mut(name) else {
            return Ok(token); // released meanwhile
        };
        match token {
            Some(token) => {
                let mut watch: Watch = Box::pin(watcher.changed());
                let waker = Waker::from(Arc::new(Fire {
                    name: name.clone(),
                    id,
                    fired,
                }));
                // The first poll registers the waker, or finds the event already delivered.
                let ready = watch
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_ready();
                e.held = Some(Held {
                    token,
                    version,
                    id,
                    _watch: watch,
                });
                e.dirty = ready;
                if e.seq == seq {
                    e.pending = false;
                }
            }
            None if e.seq == seq => {
                self.names.remove(name);
            }
            None => {
                // A newer create is pending; this node is not (or no longer) ours.
                e.held = None;
                e.dirty = false;
            }
        }
        Ok(token)
    }

    /// The data version of `name`'s node if it is held with `token` and its watch has not
    /// fired (nor is another create of it pending), after applying the fires recorded so far
    /// and the name's stashed `exists` reply if it is in: a release may then delete that
    /// version without reading the node first. The server pushes a watch's event when the
    /// change happens, so an unfired watch covers every change up to about one network trip
    /// before the delete is sent; what is left uncovered is the delete's own round trip, as
    /// after a read (whose reply is as old as that trip by the time the delete leaves).
    /// `None`: read the node.
    pub(super) fn settled_version(
        &mut self,
        name: &K,
        token: Token,
        raw: i64,
    ) -> Result<Option<i32>> {
        let stashed = self.names.get_mut(name).and_then(|e| {
            let mut sent = e.sent.take()?;
            match sent.now() {
                Some(Ok(seen)) => Some((e.seq, seen)),
                // Failed: the entry stays pending, so the next keep-alive reads the node.
                Some(Err(_)) => None,
                None => {
                    e.sent = Some(sent);
                    None
                }
            }
        });
        if let Some((seq, seen)) = stashed {
            self.observe(name, seq, raw, seen)?;
        }
        self.apply_fires();
        Ok(self.names.get(name).and_then(|e| match &e.held {
            Some(h) if !e.dirty && !e.pending && e.sent.is_none() && h.token == token => {
                Some(h.version)
            }
            _ => None,
        }))
    }

    /// The names a keep-alive must read (pending without a stashed `exists`, or dirty), with
    /// their sequence numbers, and the last sequence number so far.
    pub(super) fn unsure(&mut self) -> (Numbered<K>, u64) {
        self.apply_fires();
        let reads = self
            .names
            .iter()
            .filter(|(_, e)| (e.pending && e.sent.is_none()) || e.dirty)
            .map(|(n, e)| (n.clone(), e.seq))
            .collect();
        (reads, self.seq)
    }

    /// After a keep-alive's replies: applies the stashed `exists` replies of the creates sent
    /// before its requests (numbered up to `mark`; their replies came first). Returns the
    /// names whose reply is missing or failed, to read.
    fn collect_sent(&mut self, mark: u64, raw: i64) -> Result<Numbered<K>> {
        let mut done = Vec::new();
        let mut again = Vec::new();
        for (name, e) in self.names.iter_mut() {
            if e.seq > mark {
                continue;
            }
            let Some(mut sent) = e.sent.take() else {
                continue;
            };
            match sent.now() {
                Some(Ok(seen)) => done.push((name.clone(), e.seq, seen)),
                _ => again.push((name.clone(), e.seq)),
            }
        }
        for (name, seq, seen) in done {
            self.observe(&name, seq, raw, seen)?;
        }
        Ok(again)
    }

    /// After a keep-alive's replies: applies the reads it sent of `reads` (`seen`, in order)
    /// and the stashed `exists` replies of the creates numbered up to `mark` (see
    /// [`Watched::collect_sent`]). Returns the nodes held, and those to read again (a watch
    /// fired, or a stashed reply is missing or failed).
    #[allow(clippy::type_complexity)]
    pub(super) fn after_reads(
        &mut self,
        reads: &Numbered<K>,
        seen: Vec<Seen>,
        mark: u64,
        raw: i64,
    ) -> Result<(Vec<(K, Token)>, Numbered<K>)> {
        for ((name, seq), seen) in reads.iter().zip(seen) {
            self.observe(name, *seq, raw, seen)?;
        }
        let mut again = self.collect_sent(mark, raw)?;
        let (mut held, fired) = self.settled();
        // A node held whose new create's `exists` failed is read again: listed once.
        held.retain(|(n, _)| !again.iter().any(|(a, _)| a == n));
        for f in fired {
            if !again.iter().any(|(a, _)| *a == f.0) {
                again.push(f);
            }
        }
        Ok((held, again))
    }

    /// Applies the reads of `again` (`seen`, in order) that [`Watched::after_reads`] asked
    /// for, adding the nodes they show held to `held`.
    pub(super) fn after_rereads(
        &mut self,
        again: Numbered<K>,
        seen: Vec<Seen>,
        raw: i64,
        held: &mut Vec<(K, Token)>,
    ) -> Result<()> {
        for ((name, seq), seen) in again.into_iter().zip(seen) {
            if let Some(token) = self.observe(&name, seq, raw, seen)? {
                held.push((name, token));
            }
        }
        Ok(())
    }

    /// After a keep-alive's replies (and the reads it sent applied): the nodes held, and
    /// those whose watch fired, to read again.
    fn settled(&mut self) -> (Vec<(K, Token)>, Numbered<K>) {
        self.apply_fires();
        let mut held = Vec::with_capacity(self.names.len());
        let mut again = Vec::new();
        for (name, e) in &self.names {
            match &e.held {
                Some(_) if e.dirty => again.push((name.clone(), e.seq)),
                Some(h) => held.push((name.clone(), h.token)),
                None => {}
            }
        }
        (held, again)
    }
}
