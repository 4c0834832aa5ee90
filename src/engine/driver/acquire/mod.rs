//! One acquire call as a machine without I/O: a lock's (plain or fair), a read-write lock's
//! read or write, or a semaphore's permit, in each of its forms (one try, waiting forever,
//! with a deadline, cancellable). The threaded session and the simulation pump the same
//! machine: [`Acquisition::next`] says what the caller does now ([`Step::Call`] the backend,
//! [`Step::Wait`] until an instant or a change, or [`Step::Done`]), and
//! [`Acquisition::on_reply`] takes a call's reply in. Everything a call decides is here:
//! the name's reservation, waiting for a reopened session, the registration for releases,
//! the retries of [`LockWait`], a semaphore's rounds ([`PermitRound`]), the deadline and its
//! timeout's source, and what a call that ends without a term leaves (a fair lock's or a
//! writer's queue place, its reservation, its registration).

use super::reserve::{Reserved, Space, Taken};
use super::rw;
use super::wait::{self, LockWait, PermitRound, Step as WaitStep};
use crate::engine::core::{Core, HandleId};
use crate::error::{Error, Result};
use crate::spi::{Acquire, LeaseBackend, Queued, RwAcquire, RwMode};
use crate::types::{LeaseName, SessionId, Term};
use std::time::{Duration, Instant};

/// What a call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// A plain lock.
    Lock,
    /// A fair lock (through the name's queue).
    FairLock,
    /// A read-write lock's term of a mode.
    Rw(RwMode),
    /// One of a semaphore's permits (each a plain lock, tried in rounds).
    Permit,
}

/// A call's form: one try now, or waiting (until a deadline, or for as long as it takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// One try, no waiting: `Ok(None)` when it is taken.
    Try,
    /// Waiting at most the timeout (`None`: no deadline); [`Error::Timeout`] after it.
    Wait(Option<Duration>),
}

/// An acquire call as its caller asks for it.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) want: Want,
    /// The name (or a semaphore's permit leases, in order).
    pub(crate) names: Vec<LeaseName>,
    pub(crate) form: Form,
    /// What its timeout says it was doing.
    pub(crate) operation: &'static str,
}

/// How an attempt asks the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `acquire`.
    Plain,
    /// `acquire_queued` with the place's patience.
    Queued(Duration),
    /// `acquire_rw` of a mode with a waiting writer's patience.
    Rw(RwMode, Duration),
}

/// One attempt to send: `name` for backend session `session`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) session: SessionId,
    pub(crate) name: LeaseName,
    pub(crate) ask: Ask,
}

/// A backend's reply to a [`Call`].
#[derive(Debug)]
pub(crate) enum Reply {
    Plain(Result<Acquire>),
    Queued(Result<Queued>),
    Rw(Result<RwAcquire>),
}

impl Call {
    /// Sends the attempt to `backend` (the threaded session's one line of I/O per attempt).
    pub(crate) fn send(&self, backend: &dyn LeaseBackend) -> Reply {
        let (id, name) = (&self.session, &self.name);
        match self.ask {
            Ask::Plain => Reply::Plain(backend.acquire(id, name)),
            Ask::Queued(lease) => Reply::Queued(backend.acquire_queued(id, name, lease)),
            Ask::Rw(mode, patience) => Reply::Rw(backend.acquire_rw(id, name, mode, patience)),
        }
    }
}

/// A call that ended without a term gives up its place in a queue: a fair lock's, or a
/// waiting writer's (so it no longer blocks readers). A failure to leave only costs the
/// place's patience.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Leave {
    pub(crate) session: SessionId,
    pub(crate) name: LeaseName,
    /// The writers' queue of a read-write lock (else a fair lock's queue).
    pub(crate) rw: bool,
}

impl Leave {
    /// Sends the leave to `backend`.
    pub(crate) fn send(&self, backend: &dyn LeaseBackend) -> Result<bool> {
        if self.rw {
            backend.leave_rw_queue(&self.session, &self.name)
        } else {
            backend.leave_queue(&self.session, &self.name)
        }
    }
}

/// A term won: the session it was granted to, the term, and which of the names it is of (a
/// permit's index; 0 otherwise). Its name stays reserved for the handle until it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Won {
    pub(crate) session: SessionId,
    pub(crate) term: Term,
    pub(crate) index: usize,
}

/// How a call ended: the term, `Ok(None)` for a try that found the name taken, or the
/// error (a timeout carries the last attempt's failure as its source), and the queue place
/// to leave, if any.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) result: Result<Option<Won>>,
    pub(crate) leave: Option<Leave>,
}

/// What the caller does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send the attempt, then hand its reply to [`Acquisition::on_reply`].
    Call(Call),
    /// Wait until the instant (`None`: only a change) or a change of the session (a
    /// release seen, a reservation freed, a reopen), then ask [`Acquisition::next`] again.
    Wait(Option<Instant>),
    /// The call is over.
    Done(Done),
}

/// What the machine reads and changes of the session, at `now`.
pub(crate) struct Ctx<'a> {
    pub(crate) core: &'a mut Core,
    pub(crate) reserved: &'a mut Reserved,
    /// Whether an expired session will be reopened (waiting on it can still succeed).
    pub(crate) reopen_coming: bool,
    pub(crate) now: Instant,
    /// Draws a retry's jitter, given its bound.
    pub(crate) jitter: &'a mut dyn FnMut(Duration) -> Duration,
}

#[derive(Debug)]
enum State {
    /// Nothing in flight.
    Ready,
    /// An attempt of `names[index]` for `session`, sent at `sent`.
    Sent {
        session: SessionId,
        index: usize,
        sent: Instant,
    },
    Won(Won),
    Over(Option<Done>),
}

/// One acquire call (see the module's doc).
#[derive(Debug)]
pub(crate) struct Acquisition {
    spec: Spec,
    handle: HandleId,
    thread: u64,
    once: bool,
    lease: Duration,
    /// The call's deadline (`None`: none; a try's is its start).
    until: Option<Instant>,
    wait: LockWait,
    state: State,
    /// The last attempt's failure (the timeout's source).
    last: Option<Error>,
    /// The releases of each name seen at the last attempt (`None`: none made yet).
    seen: Option<Vec<u64>>,
    /// Registered as waiting for releases of the names.
    registered: bool,
    /// The name (index) this call reserved.
    reserved: Option<usize>,
    /// The next attempt is due at once (after a first refusal, or on a reopened session).
    immediate: bool,
    /// When the next attempt is due (else on a release seen).
    due: Option<Instant>,
    /// A semaphore's first permit and its round in progress.
    start: usize,
    round: Option<PermitRound>,
}

impl Acquisition {
    /// A call of `spec` by handle `h` of `thread`, begun at `now`: retrying every `retry`
    /// plus jitter, a fair or writer's place lasting `lease`; `random` picks a semaphore's
    /// first permit.
    pub(crate) fn new(
        spec: Spec,
        h: HandleId,
        thread: u64,
        now: Instant,
        retry: Duration,
        lease: Duration,
        random: u64,
    ) -> Self {
        let once = spec.form == Form::Try;
        // A timeout too large for an `Instant` means no deadline.
        let until = match spec.form {
            Form::Try => Some(now),
            Form::Wait(timeout) => timeout.and_then(|t| now.checked_add(t)),
        };
        let mut wait = LockWait::new(once, retry).until(until);
        if spec.want == Want::Permit {
            wait = wait.waiting_from_start();
        }
        let start = wait::first_permit(random, spec.names.len());
        Acquisition {
            spec,
            handle: h,
            thread,
            once,
            lease,
            until,
            wait,
            state: State::Ready,
            last: None,
            seen: None,
            registered: false,
            reserved: None,
            immediate: false,
            due: None,
            start,
            round: None,
        }
    }

    /// The call's handle.
    #[cfg(feature = "sim")]
    pub(crate) fn handle(&self) -> HandleId {
        self.handle
    }

    /// What it takes.
    #[cfg(feature = "sim")]
    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Whether an attempt is in flight (its reply not yet taken in).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.state, State::Sent { .. })
    }

    /// Whether the call holds its name's reservation (a lock's or read-write lock's call
    /// that does not waits for another handle of its session to free it).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn reserves(&self) -> bool {
        self.reserved.is_some()
    }

    fn space(&self) -> Space {
        match self.spec.want {
            Want::Rw(_) => Space::Rw,
            _ => Space::Lease,
        }
    }

    /// What the caller does now. Asked again after each wait and each reply; asked while
    /// nothing changed, it answers the same wait. Not asked while an attempt is in flight
    /// (it answers a wait for a change).
    pub(crate) fn next(&mut self, cx: &mut Ctx<'_>) -> Step {
        loop {
            match std::mem::replace(&mut self.state, State::Ready) {
                State::Ready => {}
                sent @ State::Sent { .. } => {
                    self.state = sent;
                    return Step::Wait(None);
                }
                State::Won(won) => {
                    self.stop_waiting(cx);
                    self.state = State::Over(None);
                    return Step::Done(Done {
                        result: Ok(Some(won)),
                        leave: None,
                    });
                }
                State::Over(done) => {
                    self.state = State::Over(None);
                    return Step::Done(done.unwrap_or(Done {
                        result: Ok(None),
                        leave: None,
                    }));
                }
            }
            // The session: live, or (waiting) an expired one that will be reopened.
            let live = cx.core.check_live();
            match live {
                Err(Error::SessionExpired { .. }) if !self.once && cx.reopen_coming => {}
                Err(e) => {
                    self.end(cx, Err(e));
                    continue;
                }
                Ok(()) => {}
            }
            if !self.registered && !self.once && self.spec.want == Want::Permit {
                // Registered before the first round, so a release during it is not missed.
                for n in &self.spec.names {
                    cx.core.wait_for_release(n);
                }
                self.registered = true;
            }
            let now = cx.now;
            if live.is_err() {
                // While an expired session is reopened, wait for the new one.
                if self.wait.timed_out(now) {
                    self.end(cx, Ok(None));
                    continue;
                }
                return Step::Wait(self.until);
            }
            // The name, unless a handle of this session uses it (a permit reserves the one
            // it tries, at each try).
            if self.spec.want != Want::Permit && self.reserved.is_none() {
                let (space, name) = (self.space(), &self.spec.names[0]);
                match cx.reserved.reserve(space, name, self.handle, self.thread) {
                    Taken::Now => self.reserved = Some(0),
                    Taken::ByThisThread if !self.once => {
                        let e = Error::AlreadyHeld { name: name.clone() };
                        self.end(cx, Err(e));
                        continue;
                    }
                    _ if self.once || self.wait.timed_out(now) => {
                        self.end(cx, Ok(None));
                        continue;
                    }
                    _ => return Step::Wait(self.until),
                }
            }
            if self.round.is_none() {
                if let Some(seen) = &self.seen {
                    if !self.immediate {
                        if self.wait.timed_out(now) {
                            self.end(cx, Ok(None));
                            continue;
                        }
                        let released = (self.spec.names.iter().zip(seen))
                            .any(|(n, s)| cx.core.releases_of(n) != *s);
                        if !released && self.due.is_none_or(|d| now < d) {
                            return Step::Wait(self.due.or(self.until));
                        }
                    }
                }
                self.immediate = false;
                self.due = None;
                let seen = self.spec.names.iter().map(|n| cx.core.releases_of(n));
                self.seen = Some(seen.collect());
                if self.spec.want != Want::Permit {
                    return self.send(cx, 0);
                }
                self.round = Some(PermitRound::new(self.start, self.spec.names.len()));
            }
            // A round over the permits: each tried once, from the call's first permit on.
            if let Some(step) = self.permit_try(cx) {
                return step;
            }
        }
    }

    /// The round's next permit try, or (`None`) the round over, its outcome taken through
    /// the call's wait: ask [`Acquisition::next`] again.
    fn permit_try(&mut self, cx: &mut Ctx<'_>) -> Option<Step> {
        let round = self.round.as_mut()?;
        while let Some(i) = round.next() {
            // A try on a session that is not live fails at once.
            if let Err(e) = cx.core.check_live() {
                round.failed(e);
                break;
            }
            let name = &self.spec.names[i];
            match cx
                .reserved
                .reserve(Space::Lease, name, self.handle, self.thread)
            {
                Taken::Now => {
                    self.reserved = Some(i);
                    return Some(self.send(cx, i));
                }
                // Held by another handle of this session.
                _ => round.busy(),
            }
        }
        let outcome = self.round.take().map_or(Ok(None), PermitRound::outcome);
        let step = self.take_outcome(cx, outcome);
        self.apply(cx, step);
        None
    }

    fn send(&mut self, cx: &mut Ctx<'_>, index: usize) -> Step {
        let name = self.spec.names[index].clone();
        let ask = match self.spec.want {
            Want::Lock | Want::Permit => Ask::Plain,
            Want::FairLock => Ask::Queued(self.lease),
            Want::Rw(mode) => Ask::Rw(mode, rw::patience(self.once, self.lease)),
        };
        match ask {
            Ask::Rw(..) => cx.core.begin_acquire(Space::Rw, &name),
            _ => cx.core.begin_acquire(Space::Lease, &name),
        }
        let session = cx.core.session().clone();
        self.state = State::Sent {
            session: session.clone(),
            index,
            sent: cx.now,
        };
        Step::Call(Call { session, name, ask })
    }

    /// Takes the reply to the attempt in flight into the core (a reply for a session
    /// replaced since is that session's expiry). Returns a lock's or permit's term just
    /// granted, for the caller's check of its token against the tokens seen before.
    pub(crate) fn on_reply(&mut self, cx: &mut Ctx<'_>, reply: Reply) -> Option<Term> {
        let State::Sent {
            session,
            index,
            sent,
        } = std::mem::replace(&mut self.state, State::Ready)
        else {
            return None;
        };
        let (h, now) = (self.handle, cx.now);
        let name = &self.spec.names[index];
        let r = if !super::accepts(cx.core.session(), &session) {
            Err(wait::replaced(&session))
        } else {
            match reply {
                Reply::Plain(r) => wait::take_reply(cx.core, h, name, sent, now, r.map(Some)),
                Reply::Queued(r) => {
                    let r = r.map(wait::queued);
                    wait::take_reply(cx.core, h, name, sent, now, r)
                }
                Reply::Rw(r) => match self.spec.want {
                    Want::Rw(mode) => rw::take_reply(cx.core, h, name, mode, sent, now, r),
                    _ => Err(Error::Closed),
                },
            }
        };
        let fresh = match (&r, self.spec.want) {
            (_, Want::Rw(_)) => None,
            (Ok(Some(Acquire::Acquired(t))), _) => Some(t.clone()),
            _ => None,
        };
        if self.spec.want == Want::Permit {
            match r {
                Ok(Some(Acquire::Acquired(term))) => {
                    self.state = State::Won(Won {
                        session,
                        term,
                        index,
                    })
                }
                other => {
                    self.unreserve(cx);
                    if let Some(round) = self.round.as_mut() {
                        match other {
                            Err(e) => round.failed(e),
                            Ok(_) => round.busy(),
                        }
                    }
                }
            }
            return fresh;
        }
        match self.take_outcome(cx, r) {
            WaitStep::Acquired(term) => {
                self.state = State::Won(Won {
                    session,
                    term,
                    index,
                })
            }
            step => self.apply(cx, step),
        }
        fresh
    }

    /// The call is given up (cancelled: `e`): it ends as a call without a term.
    pub(crate) fn abandon(&mut self, cx: &mut Ctx<'_>, e: Error) -> Done {
        // A term already won (or an end already reached) is the call's outcome.
        if matches!(self.state, State::Ready | State::Sent { .. }) {
            self.state = State::Ready;
            self.end(cx, Err(e));
        }
        match self.next(cx) {
            Step::Done(d) => d,
            _ => Done {
                result: Ok(None),
                leave: None,
            },
        }
    }

    /// An attempt's (or a round's) outcome through the call's [`LockWait`].
    fn take_outcome(&mut self, cx: &mut Ctx<'_>, r: Result<Option<Acquire>>) -> WaitStep {
        let expired = matches!(r, Err(Error::SessionExpired { .. }));
        let coming = expired && cx.reopen_coming;
        let step = self.wait.on_reply(r, coming, cx.now, &mut *cx.jitter);
        self.last = self.wait.take_last();
        step
    }

    fn apply(&mut self, cx: &mut Ctx<'_>, step: WaitStep) {
        match step {
            WaitStep::Acquired(_) => self.immediate = true,
            WaitStep::Busy => self.end(cx, Ok(None)),
            WaitStep::Fail(e) => self.end(cx, Err(e)),
            WaitStep::WaitForReleases => {
                for n in &self.spec.names {
                    cx.core.wait_for_release(n);
                }
                self.registered = true;
                self.immediate = true;
            }
            WaitStep::RetryNow => self.immediate = true,
            WaitStep::RetryAt(at) => self.due = Some(at),
        }
    }

    fn unreserve(&mut self, cx: &mut Ctx<'_>) {
        if let Some(i) = self.reserved.take() {
            let space = self.space();
            cx.reserved
                .unreserve(space, &self.spec.names[i], self.handle);
        }
    }

    fn stop_waiting(&mut self, cx: &mut Ctx<'_>) {
        if std::mem::take(&mut self.registered) {
            for n in &self.spec.names {
                cx.core.stop_waiting(n);
            }
        }
    }

    /// The call ends without a term: its reservation, registration and queue place go; a
    /// waiting call that found nothing times out, with the last failure as the source.
    fn end(&mut self, cx: &mut Ctx<'_>, r: Result<Option<Won>>) {
        self.unreserve(cx);
        self.stop_waiting(cx);
        let leaves = match self.spec.want {
            Want::FairLock => true,
            Want::Rw(mode) => rw::leaves_queue(mode, self.once),
            Want::Lock | Want::Permit => false,
        };
        let leave = leaves.then(|| Leave {
            session: cx.core.session().clone(),
            name: self.spec.names[0].clone(),
            rw: matches!(self.spec.want, Want::Rw(_)),
        });
        let result = match (r, self.spec.form) {
            (Ok(None), Form::Wait(timeout)) => Err(timed_out(
                self.spec.operation,
                timeout.unwrap_or(Duration::MAX),
                self.last.take(),
            )),
            (r, _) => r,
        };
        self.state = State::Over(Some(Done { result, leave }));
    }
}

/// The timeout of a wait that ran out; the last failed attempt (if the last attempt failed)
/// is its source, as a try would have returned it.
pub(crate) fn timed_out(operation: &'static str, after: Duration, last: Option<Error>) -> Error {
    Error::Timeout {
        operation,
        after,
        source: last.map(|e| Box::new(e) as crate::error::BoxError),
    }
}

#[cfg(test)]
mod tests;
