//! The simulated network: the requests a client sends (`Op`) on which channel, the backend's
//! replies (`Rep`), the event queue's items in true-time order, the delays and losses of
//! messages, a request's arrival at the model backend and its reply's completion at the
//! client (where the driver's `accepts` drops replies of a replaced session).

use super::outcome::show;
use super::{acquire_of, candidate_value, LockPhase, World, MS};
use crate::engine::core::HandleId;
use crate::engine::driver;
use crate::engine::driver::reopen::{self, AfterOpenError};
use crate::error::{Error, Result};
use crate::sim::model::session_no;
use crate::spi::{Acquire, KeepAlive};
use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Token};
use std::cmp::Ordering;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub(super) enum Op {
    Open,
    KeepAlive,
    Attempt(HandleId, LeaseName),
    Owner(HandleId, LeaseName),
    Members(HandleId, GroupName),
    Join(GroupName),
    Release(LeaseName, Token),
    CloseBackend,
    Lock(HandleId, LeaseName),
    Unlock(LeaseName, Token),
    Resign(LeaseName, Token),
    Close,
}

impl Op {
    pub(super) fn name(&self) -> Option<&LeaseName> {
        match self {
            Op::Attempt(_, n)
            | Op::Owner(_, n)
            | Op::Release(n, _)
            | Op::Lock(_, n)
            | Op::Unlock(n, _)
            | Op::Resign(n, _) => Some(n),
            _ => None,
        }
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
    Notify(usize, LeaseName),
    Act(usize),
    Reopen(usize),
    RetryReopen(usize),
    Pause(usize),
    Snapshot,
    FailOver,
    ClockStep,
}

impl Ev {
    pub(super) fn client(&self) -> Option<usize> {
        match self {
            Ev::Wake(c)
            | Ev::Notify(c, _)
            | Ev::Act(c)
            | Ev::Reopen(c)
            | Ev::RetryReopen(c)
            | Ev::Pause(c) => Some(*c),
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

    pub(super) fn arrive(&mut self, id: u64) {
        let t = self.now;
        let lease = self.cfg.lease;
        let (op, session, client) = {
            let r = &self.reqs[&id];
            (r.op.clone(), r.session.clone(), r.client)
        };
        let sid = || session.clone().expect("a session request has a session");
        let mut freed = Vec::new();
        let reply: Result<Rep> = match &op {
            Op::Open => {
                let (id, rem) = self.model.open_session(t, lease);
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
            Op::Attempt(_, n) => {
                let value = candidate_value(&sid());
                let r = self.model.acquire_with_value(t, &sid(), n, &value);
                r.map(Rep::Acquire)
            }
            Op::Lock(_, n) => self.model.acquire(t, &sid(), n).map(Rep::Acquire),
            Op::Release(n, tok) | Op::Unlock(n, tok) | Op::Resign(n, tok) => {
                let held = self.model.release(&sid(), n, *tok);
                if held {
                    freed.push(n.clone());
                }
                Ok(Rep::Released(held))
            }
            Op::CloseBackend | Op::Close => {
                freed = self.model.close_session(&sid());
                Ok(Rep::Done)
            }
        };
        let name = op.name().cloned();
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
        for n in freed {
            for c in 0..self.clients.len() {
                if self.rng.chance(self.cfg.faults.lost_notification) {
                    continue;
                }
                let d = self.delay();
                self.push(t + d, Ev::Notify(c, n.clone()));
            }
        }
    }

    pub(super) fn complete(&mut self, id: u64, reply: Result<Rep>) {
        let Some(req) = self.reqs.get_mut(&id) else {
            return;
        };
        if req.done {
            return;
        }
        req.done = true;
        let (c, gen, op, chan, sent) = (req.client, req.gen, req.op.clone(), req.chan, req.sent);
        let for_session = req.session.clone();
        let name = op.name().cloned();
        self.tr(Some(c), name.as_ref(), || {
            format!("<- #{id} {}", show(&reply))
        });
        if gen != self.clients[c].gen {
            return; // a call of a process that restarted since
        }
        let t = self.now;
        let local = self.local(c, t);
        let lease = self.cfg.lease.as_nanos() as u64;
        // The driver's `accepts`: a reply for an earlier session (before a reopen) does not
        // reach the current engine.
        let current = self.clients[c].core.as_ref().map(|k| k.session().clone());
        let stale = match (&for_session, &current) {
            (Some(sent_for), Some(current)) => !driver::accepts(current, sent_for),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if stale && !matches!(op, Op::Open) {
            if let Op::Lock(h, n) = &op {
                // As `with_session` answers the lock caller: its session expired.
                let expired = Err(Error::SessionExpired {
                    session: for_session.clone().expect("stale replies have a session"),
                });
                self.lock_reply(c, *h, n, expired);
            }
            if let Op::Unlock(n, _) = &op {
                if let Some(l) = self.clients[c].locks.iter_mut().find(|l| &l.name == n) {
                    l.phase = LockPhase::Idle;
                    l.unlocking = None;
                    l.next = t;
                }
            }
            if let Op::Resign(n, _) = &op {
                if let Some(cand) = self.clients[c].cands.iter_mut().find(|k| &k.name == n) {
                    cand.releasing = false;
                }
            }
            if chan == Chan::Work {
                self.clients[c].work_busy = false;
            }
            self.settle(c);
            return;
        }
        match op {
            Op::Open if chan == Chan::Work => match reply {
                Ok(Rep::Open(sid, rem)) => {
                    self.clients[c].work_busy = false;
                    self.reopened(c, sid, sent, rem);
                    return;
                }
                Ok(other) => unreachable!("open reply {other:?}"),
                Err(e) => {
                    self.clients[c].work_busy = false;
                    if reopen::after_open_error(&e) == AfterOpenError::Terminal {
                        // Expiry is terminal: the process opens a new session later.
                        self.tr(Some(c), None, || "reopen failed for good".into());
                        let cl = &mut self.clients[c];
                        cl.reopening = false;
                        cl.reopen_failed = true;
                        self.settle(c);
                        return;
                    }
                    // The work thread sleeps a retry interval (plus jitter), then tries again.
                    let d = self.retry_delay();
                    self.push(t + d, Ev::RetryReopen(c));
                    return;
                }
            },
            Op::Open => {
                self.clients[c].opening = false;
                match reply {
                    Ok(Rep::Open(sid, rem)) => self.start_session(c, sid, sent, rem),
                    _ => {
                        let d = self.timing.retry.as_nanos() as u64;
                        self.push(t + d, Ev::Reopen(c));
                    }
                }
            }
            Op::KeepAlive => {
                let r = reply.map(|r| match r {
                    Rep::KeepAlive(k) => k,
                    other => unreachable!("keep-alive reply {other:?}"),
                });
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_keep_alive(sent, local, r);
                }
            }
            Op::Attempt(h, n) => {
                let r = reply.map(acquire_of);
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_attempt(h, &n, sent, local, r);
                }
            }
            Op::Members(h, _) => {
                let r = reply.map(|r| match r {
                    Rep::Members(m) => m,
                    other => unreachable!("members reply {other:?}"),
                });
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_members(h, local, r);
                }
            }
            Op::Join(_) => {}
            Op::Owner(h, _) => {
                let r = reply.map(|r| match r {
                    Rep::Owner(o) => o,
                    other => unreachable!("owner reply {other:?}"),
                });
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_owner(h, local, r);
                }
            }
            Op::Release(n, _) | Op::Resign(n, _) => {
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_released(&n, reply.is_ok());
                }
                if let Some(cand) = self.clients[c].cands.iter_mut().find(|k| k.name == n) {
                    cand.releasing = false;
                }
            }
            Op::CloseBackend | Op::Close => {}
            Op::Lock(h, n) => {
                let r = reply.map(acquire_of);
                let Some(core) = self.clients[c].core.as_mut() else {
                    return;
                };
                let r = core.on_lock_acquire(h, &n, sent, local, r);
                self.lock_reply(c, h, &n, r);
            }
            Op::Unlock(n, _) => {
                let held = matches!(reply, Ok(Rep::Released(true)));
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_released(&n, reply.is_ok());
                }
                let pause = self.rng.range(10 * MS, lease);
                let li = self.clients[c].locks.iter().position(|l| l.name == n);
                if let Some(i) = li {
                    let l = &mut self.clients[c].locks[i];
                    l.phase = LockPhase::Idle;
                    l.next = t + pause;
                    let term = l.unlocking.take();
                    let h = l.handle;
                    // The release found the term gone: the unlock reports it, as `unlock`
                    // does (`LockLost{Missing}`, once).
                    if let (false, Ok(_), Some(term)) = (held, &reply, term) {
                        if let Some(core) = self.clients[c].core.as_mut() {
                            let _ = core.lost_on_unlock(h, term.clone());
                            self.clients[c].lost_on_unlock.push(term);
                        }
                    }
                }
            }
        }
        if chan == Chan::Work {
            self.clients[c].work_busy = false;
        }
        self.settle(c);
    }
}
