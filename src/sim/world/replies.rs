//! A reply reaching its client: through the driver as the threaded session takes it in. A
//! reply for a replaced session is dropped (the driver's `accepts`; a lock caller hears its
//! session expired), a reopen's open goes by the driver's open-error policy, and every other
//! reply goes to the engine or to the caller that waits for it.

use super::network::{Chan, Ev, Op, Rep};
use super::outcome::show;
use super::{acquire_of, Thread, World};
use crate::engine::core::Space;
use crate::engine::driver::acquire::Reply;
use crate::engine::driver::attempt;
use crate::engine::driver::reopen::{self, AfterOpenError};
use crate::engine::driver::{self, wait};
use crate::error::Result;
use crate::types::SessionId;
use std::time::Duration;

impl World<'_> {
    /// Request `id` completed with `reply` (or timed out) at its client.
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
        // The driver's `accepts`: a reply for an earlier session (before a reopen) does not
        // reach the current engine.
        let current = self.clients[c].core.as_ref().map(|k| k.session().clone());
        let stale = match (&for_session, &current) {
            (Some(sent_for), Some(current)) => !driver::accepts(current, sent_for),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if stale && op.through_engine() {
            self.stale_reply(c, &op, chan, for_session);
            if chan == Chan::Work {
                self.clients[c].work_busy = false;
            }
            self.settle(c);
            return;
        }
        match op {
            Op::Open if chan == Chan::Work => {
                self.clients[c].work_busy = false;
                match reply {
                    Ok(Rep::Open(sid, rem)) => self.reopened(c, sid, sent, rem),
                    Ok(other) => unreachable!("open reply {other:?}"),
                    Err(e) => {
                        if reopen::after_open_error(&e) == AfterOpenError::Terminal {
                            // Expiry is terminal: the process opens a new session later.
                            self.tr(Some(c), None, || "reopen failed for good".into());
                            let cl = &mut self.clients[c];
                            cl.reopening = false;
                            cl.reopen_failed = true;
                            self.settle(c);
                            return;
                        }
                        // The work thread sleeps, then tries again.
                        let retry = self.timing.retry;
                        let rng = &mut self.rng;
                        let jitter =
                            |max: Duration| Duration::from_nanos(rng.below(max.as_nanos() as u64));
                        let d = reopen::retry_in(retry, jitter).as_nanos() as u64;
                        self.push(t + d, Ev::RetryReopen(c));
                    }
                }
                return;
            }
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
                if let (Some(core), Ok(k)) = (self.clients[c].core.as_ref(), &r) {
                    let unknown =
                        (k.rw.iter()).find(|h| !core.is_valid(Space::Rw, &h.name, h.token, local));
                    if let Some(h) = unknown {
                        let n = h.name.clone();
                        self.tr(Some(c), Some(&n), || {
                            format!("{n}: the keep-alive lists a term no guard knows")
                        });
                    }
                }
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_keep_alive(sent, local, r);
                }
            }
            Op::Attempt(..) => {
                if self.attempt_answered(c, attempt::Reply::Acquire(reply.map(acquire_of))) {
                    return; // the work thread writes the value on first
                }
            }
            Op::WriteBack(..) => {
                let r = reply.map(|r| match r {
                    Rep::Flag(set) => set,
                    other => unreachable!("value write reply {other:?}"),
                });
                if self.attempt_answered(c, attempt::Reply::SetValue(r)) {
                    return; // and writes once more
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
                    core.on_released(Space::Lease, &n, reply.is_ok());
                }
                if let Some(cand) = self.clients[c].cands.iter_mut().find(|k| k.name == n) {
                    cand.releasing = false;
                }
            }
            Op::Lock(h, _) => {
                let reply = match reply {
                    Ok(Rep::Acquire(a)) => Reply::Plain(Ok(a)),
                    Ok(other) => unreachable!("lock reply {other:?}"),
                    Err(e) => Reply::Plain(Err(e)),
                };
                self.call_reply(c, h, reply);
            }
            Op::LockQueued(h, _) => {
                let reply = match reply {
                    Ok(Rep::Queued(q)) => Reply::Queued(Ok(q)),
                    Ok(other) => unreachable!("fair lock reply {other:?}"),
                    Err(e) => Reply::Queued(Err(e)),
                };
                self.call_reply(c, h, reply);
            }
            Op::Unlock(n, _) => self.unlocked(c, id, &n, reply),
            Op::AcquireRw(h, ..) => {
                let r = reply.map(|r| match r {
                    Rep::Rw(a) => a,
                    other => unreachable!("read-write lock reply {other:?}"),
                });
                self.call_reply(c, h, Reply::Rw(r));
            }
            Op::ReleaseRw(n, ..) if chan == Chan::Work => {
                // The engine's release of a grant it did not take, or of a failed release.
                if let Some(core) = self.clients[c].core.as_mut() {
                    core.on_released(Space::Rw, &n, reply.is_ok());
                }
            }
            Op::ReleaseRw(n, ..) => self.rw_unlocked(c, id, &n, reply),
            Op::ClaimJob(n, _) => self.claimed(c, &n, sent, reply, for_session),
            Op::FinishJob(n, token, _) => self.finished(c, &n, token, reply),
            Op::Join(_)
            | Op::CloseBackend
            | Op::Close
            | Op::LeaveQueue(_)
            | Op::LeaveRwQueue(_)
            | Op::SetValue(..) => {}
        }
        if chan == Chan::Work {
            self.clients[c].work_busy = false;
        }
        self.settle(c);
    }

    /// A reply for a session replaced since: the engine never sees it; a lock caller
    /// hears its session expired (as `with_session` answers it), an unlock or a resign ends.
    fn stale_reply(&mut self, c: usize, op: &Op, chan: Chan, for_session: Option<SessionId>) {
        match op {
            Op::Lock(h, _) | Op::LockQueued(h, _) => {
                if let Some(sent_for) = for_session {
                    let reply = Reply::Plain(Err(wait::replaced(&sent_for)));
                    self.call_reply(c, *h, reply);
                }
            }
            Op::Unlock(n, _) => {
                let t = self.now;
                let unlocking = |l: &&mut super::Locker| {
                    l.thread == Thread::Unlocking
                        && l.unlocking.as_ref().is_some_and(|u| &u.name == n)
                };
                if let Some(l) = self.clients[c].lockers.iter_mut().find(unlocking) {
                    l.thread = Thread::Idle;
                    l.unlocking = None;
                    l.next = t;
                }
            }
            Op::Resign(n, _) => {
                if let Some(cand) = self.clients[c].cands.iter_mut().find(|k| &k.name == n) {
                    cand.releasing = false;
                }
            }
            Op::AcquireRw(..) | Op::ReleaseRw(..) => self.rw_stale(c, op, chan, for_session),
            Op::Attempt(..) => self.clients[c].attempt = None,
            _ => {}
        }
    }
}
