//! Read-write lock callers: threads that take a read or a write term of a name (`read`,
//! `try_write`, `write_timeout`, …), hold it a while, unlock it, and again. Each call is
//! the driver's acquire machine, as `RwLock` runs it (pumped in [`calls`](super::calls));
//! the unlock's found-gone report is `wait::lost_on_release`.

use super::calls::Who;
use super::network::{Chan, Op, Rep};
use super::{Thread, World, MS};
use crate::engine::core::HandleId;
use crate::engine::driver::acquire::{Acquisition, Form, Reply, Spec, Want};
use crate::engine::driver::release::{self, TermKind};
use crate::engine::driver::reserve::Space;
use crate::engine::driver::{rw, wait};
use crate::error::Result;
use crate::sim::check::{Held, Kind};
use crate::spi::RwMode;
use crate::types::{LeaseName, SessionId, Term};
use std::time::Duration;

/// A caller thread of one read-write lock, reading most of the time and writing now and
/// then.
pub(super) struct RwCaller {
    pub(super) name: LeaseName,
    /// Its key for the session's reservations.
    thread_key: u64,
    pub(super) thread: Thread,
    /// When the next call begins, or the call in progress wants to be asked again (true
    /// time).
    pub(super) next: u64,
    /// The guard's handle (one per call).
    pub(super) handle: HandleId,
    /// When the call in progress began (true time).
    called: u64,
    /// The call in progress: the driver's acquire machine.
    pub(super) call: Option<Acquisition>,
    /// The side of the term held.
    mode: RwMode,
    /// The term while holding.
    term: Option<Term>,
    /// The term being unlocked (its release in flight).
    unlocking: Option<Term>,
}

impl RwCaller {
    /// Caller `k` of `name`, which has not called yet.
    pub(super) fn new(name: LeaseName, k: usize) -> Self {
        RwCaller {
            name,
            thread_key: 1_000_000 + k as u64,
            thread: Thread::Idle,
            next: 0,
            handle: 0,
            called: 0,
            call: None,
            mode: RwMode::Read,
            term: None,
            unlocking: None,
        }
    }

    /// A new process-level session: calls start afresh.
    pub(super) fn reset(&mut self) {
        self.thread = Thread::Idle;
        self.call = None;
        self.term = None;
        self.unlocking = None;
    }
}

impl World<'_> {
    /// Begins the read-write calls that are due, asks those in progress what to do, and
    /// unlocks what was held long enough.
    pub(super) fn rw_step(&mut self, c: usize) {
        let t = self.now;
        for i in 0..self.clients[c].rw.len() {
            let cl = &self.clients[c];
            let Some(core) = cl.core.as_ref() else {
                return;
            };
            let live = core.state().is_live();
            let r = &cl.rw[i];
            match (r.thread, &r.call) {
                (Thread::Idle, None) if live && t >= r.next => self.rw_begin(c, i),
                (Thread::Idle, Some(_)) => self.pump(c, Who::Rw(i)),
                (Thread::Holding(until), _) if t >= until => self.rw_unlock(c, i),
                _ => {}
            }
        }
    }

    /// A new call of caller `i`: a write now and then, else a read; some try once, some
    /// have a deadline (`read_timeout`, `write_timeout`).
    fn rw_begin(&mut self, c: usize, i: usize) {
        let local = self.local(c, self.now);
        let lease = self.cfg.lease.as_nanos() as u64;
        let mode = if self.rng.chance(0.35) {
            RwMode::Write
        } else {
            RwMode::Read
        };
        let form = if self.rng.chance(0.15) {
            Form::Try
        } else {
            Form::Wait(
                (self.rng.chance(0.3))
                    .then(|| Duration::from_nanos(self.rng.range(lease / 2, 2 * lease))),
            )
        };
        let random = self.rng.next_u64();
        let (retry, lease) = (self.timing.retry, self.cfg.lease);
        let cl = &mut self.clients[c];
        let h = cl.next_handle;
        cl.next_handle += 1;
        let r = &mut cl.rw[i];
        r.called = self.now;
        let spec = Spec {
            want: Want::Rw(mode),
            names: vec![r.name.clone()],
            form,
            operation: rw::operation(mode),
        };
        let m = Acquisition::new(spec, h, r.thread_key, local, retry, lease, random);
        let name = r.name.clone();
        self.tr(Some(c), Some(&name), || {
            let (how, timeout) = match form {
                Form::Try => ("try", Some(Duration::ZERO)),
                Form::Wait(t) => ("call", t),
            };
            format!("{how} {} {name} (timeout {timeout:?})", mode.as_str())
        });
        self.start_call(c, Who::Rw(i), m);
    }

    /// Caller `i` holds `term`: the call ends, the term is believed.
    pub(super) fn rw_acquired(&mut self, c: usize, i: usize, mode: RwMode, term: Term) {
        let t = self.now;
        let n = term.name.clone();
        let called = self.clients[c].rw[i].called;
        match mode {
            RwMode::Read => self.stats.rw_terms.0 += 1,
            RwMode::Write => {
                self.stats.rw_terms.1 += 1;
                let waited = t - called;
                self.stats.longest_write_wait = self.stats.longest_write_wait.max(waited);
            }
        }
        self.tr(Some(c), Some(&n), || {
            format!("RwAcquired {} {n} token {}", mode.as_str(), term.token)
        });
        let lease = self.cfg.lease.as_nanos() as u64;
        let hold = self.rng.range(10 * MS, lease);
        let h = self.clients[c].rw[i].handle;
        let held = match mode {
            RwMode::Read => Held::Read,
            RwMode::Write => Held::Write,
        };
        self.open_belief(c, h, &n, term.token, held);
        let r = &mut self.clients[c].rw[i];
        r.thread = Thread::Holding(t + hold);
        r.mode = mode;
        r.term = Some(term);
    }

    /// Caller `i`'s call ended without a term (`why`; a writer that waited `left` the
    /// writers' queue): the thread calls again a little later.
    pub(super) fn rw_end_call(&mut self, c: usize, i: usize, left: bool, why: &'static str) {
        let name = self.clients[c].rw[i].name.clone();
        if left {
            self.stats.writes_given_up += 1;
        }
        self.tr(Some(c), Some(&name), || format!("gives up {name}: {why}"));
        let retry = self.timing.retry.as_nanos() as u64;
        let pause = self.rng.range(retry / 2, retry + retry / 2);
        let r = &mut self.clients[c].rw[i];
        r.thread = Thread::Idle;
        r.next = self.now + pause;
    }

    /// Caller `i` unlocks the term it held: the engine ends it (`release::end`; a term lost
    /// meanwhile is reported first), then the release goes to the backend.
    fn rw_unlock(&mut self, c: usize, i: usize) {
        let t = self.now;
        let local = self.local(c, t);
        let cl = &mut self.clients[c];
        let Some(core) = cl.core.as_mut() else {
            return;
        };
        let r = &mut cl.rw[i];
        let h = r.handle;
        let term = r.term.take().expect("a held term has its term");
        let name = term.name.clone();
        let mode = r.mode;
        let ended = (release::end(core, TermKind::Rw(mode), h, &term, local).ok()).map(|u| u.token);
        cl.reserved.unreserve(Space::Rw, &term.name, h);
        r.unlocking = ended.map(|_| term.clone());
        self.tr(Some(c), Some(&name), || format!("unlocks {name}"));
        self.drain(c);
        if let Some(b) = self.clients[c].open.get(&name).copied() {
            if ended.is_none() {
                self.violation(
                    Kind::SilentLoss,
                    c,
                    Some(&name),
                    "a read-write term was believed but the engine no longer held it".into(),
                );
            }
            self.clients[c].open.remove(&name);
            self.close_belief(b, "unlocked");
        }
        let r = &mut self.clients[c].rw[i];
        match ended {
            Some(token) => {
                r.thread = Thread::Unlocking;
                self.send(c, Op::ReleaseRw(name, mode, token), Chan::Caller);
            }
            None => {
                r.thread = Thread::Idle;
                r.next = t;
            }
        }
    }

    /// Request `id`, an unlock's release of `name`, was answered (for the current session):
    /// the engine hears the release finished (`on_released`); one that found the term
    /// gone is reported (`LockLost{Missing}`, once), as `RwGuard::unlock` does.
    pub(super) fn rw_unlocked(&mut self, c: usize, id: u64, name: &LeaseName, reply: Result<Rep>) {
        let t = self.now;
        let held = matches!(reply, Ok(Rep::Released(true)));
        if let Some(core) = self.clients[c].core.as_mut() {
            core.on_released(Space::Rw, name, reply.is_ok());
        }
        let lease = self.cfg.lease.as_nanos() as u64;
        let pause = self.rng.range(10 * MS, lease / 2);
        let ended_before = self.gone_before.remove(&id).unwrap_or(false);
        let cl = &mut self.clients[c];
        let unlocking = |r: &&mut RwCaller| r.thread == Thread::Unlocking && &r.name == name;
        let Some(r) = cl.rw.iter_mut().find(unlocking) else {
            return;
        };
        r.thread = Thread::Idle;
        r.next = t + pause;
        let term = r.unlocking.take();
        if let (false, Ok(_), Some(term), Some(core)) = (held, &reply, term, cl.core.as_mut()) {
            if core.state().is_live() {
                // It will report the loss, once.
                cl.lost_on_unlock.push((term.clone(), ended_before));
            }
            let _ = wait::lost_on_release(core, r.handle, term);
        }
    }

    /// A reply for a session replaced since: an attempt hears its session expired (as the
    /// driver's `with_session` answers it), an unlock ends (the engine's own releases on
    /// the work queue, `chan`, have no caller).
    pub(super) fn rw_stale(&mut self, c: usize, op: &Op, chan: Chan, sent_for: Option<SessionId>) {
        match op {
            _ if chan == Chan::Work => {}
            Op::AcquireRw(h, _, _, _) => {
                let Some(sent_for) = sent_for else {
                    return;
                };
                let reply = Reply::Rw(Err(wait::replaced(&sent_for)));
                self.call_reply(c, *h, reply);
            }
            Op::ReleaseRw(n, _, _) => {
                let t = self.now;
                let unlocking = |r: &&mut RwCaller| r.thread == Thread::Unlocking && &r.name == n;
                if let Some(r) = self.clients[c].rw.iter_mut().find(unlocking) {
                    r.thread = Thread::Idle;
                    r.unlocking = None;
                    r.next = t;
                }
            }
            _ => {}
        }
    }
}
