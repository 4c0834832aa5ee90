//! The simulated network: the requests a client sends (`Op`) on which channel, the backend's
//! replies (`Rep`), the event queue's items in true-time order, the delays and losses of
//! messages, a request's arrival at the model backend and its reply's completion at the
//! client (where the driver's `accepts` drops replies of a replaced session).

use super::outcome::show;
use super::{World, MS};
use crate::engine::core::HandleId;
use crate::error::Result;
use crate::sim::model::session_no;
use crate::spi::{Acquire, JobClaim, KeepAlive, Notification, Queued, RwAcquire, RwMode};
use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Token};
use std::cmp::Ordering;
use std::time::{Duration, Instant};

/// A request a client sends.
#[derive(Clone, Debug)]
pub(super) enum Op {
    Open,
    KeepAlive,
    /// A candidate's attempt, with the value the work thread read when it ran it.
    Attempt(HandleId, LeaseName, String),
    Owner(HandleId, LeaseName),
    Members(HandleId, GroupName),
    Join(GroupName),
    Release(LeaseName, Token),
    CloseBackend,
    Lock(HandleId, LeaseName),
    /// A fair lock's acquire, through the name's queue.
    LockQueued(HandleId, LeaseName),
    LeaveQueue(LeaseName),
    Unlock(LeaseName, Token),
    Resign(LeaseName, Token),
    /// `Election::set_value` on the candidate's term.
    SetValue(LeaseName, Token, String),
    /// The work thread's write of a value that changed while a candidate's attempt was in
    /// flight, on the term (token) it won.
    WriteBack(LeaseName, Token, String),
    ClaimJob(LeaseName, Duration),
    FinishJob(LeaseName, Token, Duration),
    /// A read-write lock's attempt of guard `h` in a mode, with the writer's patience.
    AcquireRw(HandleId, LeaseName, RwMode, Duration),
    /// An unlock's release of a read-write term.
    ReleaseRw(LeaseName, RwMode, Token),
    /// A writer that gave up leaves the writers' queue.
    LeaveRwQueue(LeaseName),
    Close,
}

impl Op {
    pub(super) fn name(&self) -> Option<&LeaseName> {
        match self {
            Op::Attempt(_, n, _)
            | Op::Owner(_, n)
            | Op::Release(n, _)
            | Op::Lock(_, n)
            | Op::LockQueued(_, n)
            | Op::LeaveQueue(n)
            | Op::Unlock(n, _)
            | Op::Resign(n, _)
            | Op::SetValue(n, _, _)
            | Op::WriteBack(n, _, _)
            | Op::ClaimJob(n, _)
            | Op::FinishJob(n, _, _)
            | Op::AcquireRw(_, n, _, _)
            | Op::ReleaseRw(n, _, _)
            | Op::LeaveRwQueue(n) => Some(n),
            _ => None,
        }
    }

    /// Whether the driver takes the reply in through the engine of the session it was sent
    /// for (`with_session`, the driver's `accepts`); the others go to their caller as they
    /// are.
    pub(super) fn through_engine(&self) -> bool {
        matches!(
            self,
            Op::KeepAlive
                | Op::Attempt(..)
                | Op::Owner(..)
                | Op::Members(..)
                | Op::Release(..)
                | Op::Lock(..)
                | Op::LockQueued(..)
                | Op::Unlock(..)
                | Op::Resign(..)
                | Op::AcquireRw(..)
                | Op::ReleaseRw(..)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Chan {
    KeepAlive,
    Work,
    Caller,
}

#[derive(Clone, Debug)]
pub(super) enum Rep {
    Open(SessionId, Duration),
    KeepAlive(KeepAlive),
    Acquire(Acquire),
    Owner(Option<Owner>),
    Members(Vec<Member>),
    /// A release: whether the term was still held.
    Released(bool),
    Queued(Queued),
    Job(JobClaim),
    Rw(RwAcquire),
    /// Whether a value was set, a place left, a job finished.
    Flag(bool),
    Done,
}

pub(super) struct Req {
    pub(super) client: usize,
    pub(super) gen: u64,
    pub(super) session: Option<SessionId>,
    pub(super) op: Op,
    pub(super) chan: Chan,
    pub(super) sent: Instant,
    pub(super) done: bool,
}

pub(super) enum Ev {
    Wake(usize),
    Arrive(u64),
    Reply(u64, Result<Rep>),
    Timeout(u64),
    Notify(usize, Notification),
    Act(usize),
    Reopen(usize),
    RetryReopen(usize),
    Pause(usize),
    Snapshot,
    FailOver,
    ClockStep,
    /// A client's callback queue frees (see `delivery`).
    Callbacks(usize),
}

impl Ev {
    pub(super) fn client(&self) -> Option<usize> {
        match self {
            Ev::Wake(c)
            | Ev::Notify(c, _)
            | Ev::Act(c)
            | Ev::Reopen(c)
            | Ev::RetryReopen(c)
            | Ev::Pause(c)
            | Ev::Callbacks(c) => Some(*c),
            _ => None,
        }
    }
}

pub(super) struct Item {
    pub(super) at: u64,
    pub(super) seq: u64,
    pub(super) ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

impl World<'_> {
    pub(super) fn delay(&mut self) -> u64 {
        if self.rng.chance(self.cfg.faults.slow) {
            self.rng.range(MS, self.timeout + self.timeout / 2)
        } else {
            self.rng.range(MS / 2, 5 * MS)
        }
    }

    /// Sends `op` for the client's current session.
    pub(super) fn send(&mut self, c: usize, op: Op, chan: Chan) {
        let session = self.clients[c].core.as_ref().map(|k| k.session().clone());
        self.send_for(c, op, chan, session)
    }

    /// Sends `op` for `session` (the session an engine output was made for).
    pub(super) fn send_for(&mut self, c: usize, op: Op, chan: Chan, session: Option<SessionId>) {
        let id = self.next_req;
        self.next_req += 1;
        self.stats.requests += 1;
        let gen = self.clients[c].gen;
        let sent = self.local(c, self.now);
        let name = op.name().cloned();
        let sno = session.as_ref().map_or(0, session_no);
        self.tr(Some(c), name.as_ref(), || format!("s{sno} -> #{id} {op:?}"));
        self.reqs.insert(
            id,
            Req {
                client: c,
                gen,
                session,
                op,
                chan,
                sent,
                done: false,
            },
        );
        if self.rng.chance(self.cfg.faults.lost_request) {
            self.stats.lost += 1;
            self.tr(Some(c), name.as_ref(), || format!("#{id} request LOST"));
        } else {
            let d = self.delay();
            self.push(self.now + d, Ev::Arrive(id));
        }
        self.push(self.now + self.timeout, Ev::Timeout(id));
    }

    /// Request `id` reaches the backend: the model answers it now (the reply travels back,
    /// or is lost), and releases and new terms are notified to every process.
    pub(super) fn arrive(&mut self, id: u64) {
        let t = self.now;
        let lease = self.cfg.lease;
        let (op, session, client) = {
            let r = &self.reqs[&id];
            (r.op.clone(), r.session.clone(), r.client)
        };
        let sid = || session.clone().expect("a session request has a session");
        let mut freed = Vec::new();
        let mut acquired = Vec::new();
        let reply: Result<Rep> = match &op {
            Op::Open => {
                let delay = self.clients[client].lock_delay;
                let (id, rem) = self.model.open_with_delay(t, lease, delay);
                Ok(Rep::Open(id, rem))
            }
            Op::KeepAlive => {
                let (r, f) = self.model.keep_alive(t, &sid(), lease);
                freed = f;
                r.map(Rep::KeepAlive)
            }
            Op::Owner(_, n) => Ok(Rep::Owner(self.model.owner(t, n))),
            Op::Members(_, g) => Ok(Rep::Members(self.model.members(t, g))),
            Op::Join(g) => self.model.join(t, &sid(), g).map(|()| Rep::Done),
            Op::Attempt(_, n, _) | Op::Lock(_, n) => {
                let value = match &op {
                    Op::Attempt(_, _, v) => v.as_str(),
                    _ => "",
                };
                let r = self.model.acquire_term(t, &sid(), n, value);
                if let Ok((Acquire::Acquired(term), new_term)) = &r {
                    if !value.is_empty() {
                        // The value is written for the term this grant is of.
                        self.written(n, term.token, value);
                    }
                    if *new_term || !value.is_empty() {
                        acquired.push(n.clone());
                    }
                }
                r.map(|(a, _)| Rep::Acquire(a))
            }
            Op::LockQueued(_, n) => {
                let r = self.model.acquire_queued(t, &sid(), n, lease);
                if let Ok((_, true)) = &r {
                    acquired.push(n.clone());
                }
                r.map(|(q, _)| Rep::Queued(q))
            }
            Op::LeaveQueue(n) => {
                let (left, wake) = self.model.leave_queue(t, &sid(), n);
                if wake {
                    freed.push(n.clone());
                }
                Ok(Rep::Flag(left))
            }
            Op::Release(n, tok) | Op::Unlock(n, tok) | Op::Resign(n, tok) => {
                let held = self.model.release(t, &sid(), n, *tok);
                if held {
                    freed.push(n.clone());
                } else if let Op::Unlock(..) = &op {
                    // Whether the backend ended the term before this release: only then
                    // may the unlock report it lost.
                    let ended = self.model.term_end(n, *tok, &sid());
                    let before = ended.is_some_and(|at| at <= self.model.clock(t));
                    self.gone_before.insert(id, before);
                }
                Ok(Rep::Released(held))
            }
            Op::SetValue(n, tok, v) | Op::WriteBack(n, tok, v) => {
                let set = self.model.set_value(t, &sid(), n, *tok, v);
                if set {
                    acquired.push(n.clone());
                }
                Ok(Rep::Flag(set))
            }
            Op::ClaimJob(n, at_most) => self.model.claim_job(t, &sid(), n, *at_most).map(Rep::Job),
            Op::FinishJob(n, tok, at_least) => Ok(Rep::Flag(self.model.finish_job(
                t,
                &sid(),
                n,
                *tok,
                *at_least,
            ))),
            Op::AcquireRw(_, n, mode, patience) => {
                (self.model.acquire_rw(t, &sid(), n, *mode, *patience)).map(Rep::Rw)
            }
            Op::ReleaseRw(n, mode, tok) => {
                let held = self.model.release_rw(t, &sid(), n, *mode, *tok);
                if held {
                    freed.push(n.clone());
                } else {
                    let ended = self.model.term_end(n, *tok, &sid());
                    let before = ended.is_some_and(|at| at <= self.model.clock(t));
                    self.gone_before.insert(id, before);
                }
                Ok(Rep::Released(held))
            }
            Op::LeaveRwQueue(n) => {
                let left = self.model.leave_rw_queue(&sid(), n);
                if left {
                    freed.push(n.clone());
                }
                Ok(Rep::Flag(left))
            }
            Op::CloseBackend | Op::Close => {
                freed = self.model.close_session(t, &sid());
                Ok(Rep::Done)
            }
        };
        let name = op.name().cloned();
        let delayed = match &reply {
            Ok(Rep::Acquire(Acquire::Held(o))) => Some(o),
            Ok(Rep::Queued(Queued::Waiting { owner: Some(o), .. })) => Some(o),
            _ => None,
        };
        if let (Ok(Rep::Rw(RwAcquire::Busy { .. })), Some(n), true) =
            (&reply, op.name(), self.trace.is_some())
        {
            for d in self.model.rw_state(t, n).delayed {
                let (s, mode, left) = (session_no(&d.session), d.mode.as_str(), d.remaining);
                self.tr_at(Some(client), Some(n), false, || {
                    format!("backend: kept by s{s}'s {mode} term in its read-write lock-delay ({left:?} left)")
                });
            }
        }
        if let Some(o) = delayed.filter(|o| !self.model.is_live(t, &o.session)) {
            let (s, left) = (session_no(&o.session), o.remaining);
            self.tr_at(Some(client), name.as_ref(), false, || {
                format!("backend: held by s{s}'s term in its lock-delay ({left:?} left)")
            });
        }
        self.tr_at(Some(client), name.as_ref(), false, || {
            let who = session
                .as_ref()
                .map_or(String::from("-"), |s| format!("s{}", session_no(s)));
            format!(
                "backend <- #{id} {op:?} from c{client}/{who} => {}",
                show(&reply)
            )
        });
        if self.rng.chance(self.cfg.faults.lost_reply) {
            self.stats.lost += 1;
            self.tr_at(Some(client), name.as_ref(), false, || {
                format!("#{id} reply LOST")
            });
        } else {
            let d = self.delay();
            self.push(t + d, Ev::Reply(id, reply));
        }
        let notes = (freed.into_iter().map(Notification::Released))
            .chain(acquired.into_iter().map(Notification::Acquired));
        for n in notes.collect::<Vec<_>>() {
            for c in 0..self.clients.len() {
                if self.rng.chance(self.cfg.faults.lost_notification) {
                    continue;
                }
                let d = self.delay();
                self.push(t + d, Ev::Notify(c, n.clone()));
            }
        }
    }

    /// Notes that `value` was written for the term `name`/`token`.
    pub(super) fn written(&mut self, name: &LeaseName, token: Token, value: &str) {
        let w = self.writes.entry((name.clone(), token)).or_default();
        if !w.iter().any(|v| v == value) {
            w.push(value.to_owned());
        }
        let newest = self
            .value_terms
            .entry((name.clone(), value.to_owned()))
            .or_insert(token);
        *newest = (*newest).max(token);
    }
}
