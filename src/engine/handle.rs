//! The narrow API the primitives reach a session through: reserve a name, read a term and
//! its validity, add or remove a candidate or a watch, count groups joined, set a candidate's
//! value, finish a lock's attempt, end a term, and wait for a condition with a deadline and a
//! cancel token. Every call that changes the core dispatches its outputs before it returns:
//! the primitives never hold the session's lock nor touch its core.

use super::cancel::Cancel;
use super::config::Config;
use super::core::lease_lost;
use super::driver::jobs;
use super::driver::release::{self, Unlock};
use super::driver::reserve::{self, Space, Taken};
use super::driver::{groups, values, wait};
use super::event::Event;
use super::session::Inner;
use crate::error::{Error, Result};
use crate::spi::LeaseBackend;

use crate::types::{GroupName, LeaseName, Member, Owner, SessionId, Term, Token};
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

// What the primitives name of the engine: they reach it through this handle only (the
// machines, the core and the session's internals stay the engine's).
pub(crate) use super::acquire::Won;
pub(crate) use super::core::{HandleId, Holder};
pub(crate) use super::driver::acquire::{timed_out, Form, Spec, Want};
pub(crate) use super::driver::jobs::Claimed;
pub(crate) use super::driver::release::TermKind;
pub(crate) use super::driver::rw::operation as rw_operation;
pub(crate) use super::metrics::lock_hold;

/// The backend's reads and capabilities: all of it a primitive reaches directly (every call
/// that changes the backend goes through the session).
#[derive(Clone, Copy)]
pub(crate) struct Reads<'a>(&'a dyn LeaseBackend);

impl Reads<'_> {
    /// Who holds `name` now.
    pub(crate) fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.0.owner(name)
    }

    /// The live members of `group`.
    pub(crate) fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        self.0.members(group)
    }

    /// The waiters queued for `name`.
    pub(crate) fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        self.0.queue(name)
    }

    /// Whether the backend stores term values.
    pub(crate) fn supports_values(&self) -> bool {
        self.0.supports_values()
    }

    /// The backend's kind.
    pub(crate) fn kind(&self) -> &'static str {
        self.0.kind()
    }
}

/// A callback a handle's events are delivered to.
pub(crate) type EventCallback = Box<dyn FnMut(&Event) + Send>;

/// What a watch follows: a lease's owner (an observer) or a group's members.
pub(crate) enum Watch {
    Owner(LeaseName),
    Members(GroupName),
}

/// A session as the primitives see it: the narrow API below, nothing of the session's
/// inside (its core, its lock, its listeners' map).
#[derive(Clone)]
pub(crate) struct EngineHandle(pub(super) Arc<Inner>);

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl EngineHandle {
    /// What the primitives may read of the backend (they change nothing on it themselves).
    pub(crate) fn reads(&self) -> Reads<'_> {
        Reads(&*self.0.backend)
    }

    /// The session's configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.0.config
    }

    /// Now, on the session's clock.
    pub(crate) fn now(&self) -> Instant {
        self.0.now()
    }

    /// A new handle, listening to its events: on a channel, and through `callback` too if
    /// given.
    pub(crate) fn listen(&self, callback: Option<EventCallback>) -> (HandleId, Receiver<Event>) {
        let h = self.0.next_handle();
        let events = self.0.listeners.channel(h);
        if let Some(f) = callback {
            self.0.listeners.callback(h, f);
        }
        (h, events)
    }

    /// Forgets handle `h`'s listeners.
    pub(crate) fn drop_listeners(&self, h: HandleId) {
        self.0.drop_listeners(h)
    }

    /// Waits (bounded) until the callbacks have handled every event emitted so far.
    pub(crate) fn wait_delivered(&self, h: HandleId) {
        self.0.wait_delivered(h)
    }
}

impl EngineHandle {
    /// Claims job `name` for at most `at_most` as the live session: `None` while another
    /// node runs it or its window has not passed.
    pub(crate) fn claim_job(&self, name: &LeaseName, at_most: Duration) -> Result<Option<Claimed>> {
        let id = {
            let s = self.0.lock_shared();
            s.core.check_live()?;
            s.core.session().clone()
        };
        let sent = self.0.now();
        let reply = self.0.backend.claim_job(&id, name, at_most)?;
        Ok(jobs::claimed(
            id,
            reply,
            sent,
            at_most,
            self.0.config.drift(),
        ))
    }

    /// Finishes claim `c` of job `name`: the name stays taken until `at_least` after the
    /// claim began (a failure is logged: nobody waits for it).
    pub(crate) fn finish_job(&self, name: &LeaseName, c: &Claimed, at_least: Duration) {
        let reply = self
            .0
            .backend
            .finish_job(&c.session, name, c.token, at_least);
        jobs::finished(name, c.token, reply);
    }

    /// Whether a job claim of session `id` whose local deadline is `deadline` still holds.
    pub(crate) fn job_holds(&self, id: &SessionId, deadline: Instant) -> bool {
        let s = self.0.lock_shared();
        jobs::holds(&s.core, id, deadline, self.0.now())
    }

    // ---- groups joined through memberships and candidacies ---------------------------

    /// Joins `group` as the live session, counted once more (a reopen re-joins it); counted
    /// under the lock that reads the id, so a reopen either sees the count or has already
    /// swapped the session in. A join that failed is uncounted.
    pub(crate) fn join(&self, group: &GroupName) -> Result<()> {
        let id = {
            let mut s = self.0.lock_shared();
            s.core.check_live()?;
            groups::count_join(&mut s.joined, group);
            s.core.session().clone()
        };
        let r = self.0.backend.join(&id, group);
        if r.is_err() {
            groups::count_leave(&mut self.0.lock_shared().joined, group);
        }
        r
    }

    /// Counts `group` as joined once less; if that was the last count, leaves it as the
    /// live session now (`wait`) or from the work queue (`Ok(true)`). `Ok(false)`: not
    /// left (other counts remain, or no session is live).
    pub(crate) fn leave(&self, group: &GroupName, wait: bool) -> Result<bool> {
        let id = {
            let mut s = self.0.lock_shared();
            let last = groups::count_leave(&mut s.joined, group);
            match last && s.core.check_live().is_ok() {
                true => s.core.session().clone(),
                false => return Ok(false),
            }
        };
        if !wait {
            self.0.leave_later(&id, group);
            return Ok(true);
        }
        self.0.backend.leave(&id, group)
    }

    /// Leaves `group` now whatever its count (every count is forgotten: it is not re-joined
    /// after a reopen): whether the session was a member.
    pub(crate) fn leave_all(&self, group: &GroupName) -> Result<bool> {
        self.0.lock_shared().joined.remove(group);
        self.0.backend.leave(&self.0.id(), group)
    }

    // ---- election candidates ------------------------------------------------------------

    /// Enters candidate `h` for `name` (nothing to do if it is a candidate already):
    /// reserves the name (or [`Error::AlreadyHeld`]), counts the candidates `group` as
    /// joined (joined on the work thread), and registers the candidate with the core. While
    /// an expired session is reopened it joins the new one.
    pub(crate) fn enter_candidate(
        &self,
        name: &LeaseName,
        h: HandleId,
        group: &GroupName,
    ) -> Result<()> {
        {
            let mut s = self.0.lock_shared();
            if s.core.is_candidate(h) {
                return Ok(());
            }
            self.0.check_waitable(&s)?;
            let thread = reserve::this_thread();
            if s.reserved.reserve(Space::Lease, name, h, thread) != Taken::Now {
                return Err(Error::AlreadyHeld { name: name.clone() });
            }
            groups::count_join(&mut s.joined, group);
            if s.core.check_live().is_ok() {
                let id = s.core.session().clone();
                self.0.join_later(&id, group);
            }
        }
        let now = self.0.now();
        self.0.with_core(|c| c.add_candidate(h, name.clone(), now));
        Ok(())
    }

    /// Withdraws candidate `h` of `name`: the term it holds ends and is released on the
    /// backend now (`wait`) or from the work queue, its reservation is freed, and, if it was
    /// a candidate, the candidates `group` is counted as left once. [`Error::LeaseLost`]
    /// if its last term was lost (locally, or found gone by the release).
    pub(crate) fn withdraw_candidate(
        &self,
        h: HandleId,
        name: &LeaseName,
        group: &GroupName,
        wait: bool,
    ) -> Result<()> {
        let now = self.0.now();
        let (id, was, held) = self.0.with_core(|c| {
            let was = c.is_candidate(h);
            (c.session().clone(), was, c.remove_candidate(h, now))
        });
        let r = held.and_then(|held| match held {
            Some(term) => self.release_leader(&id, &term, wait),
            None => Ok(()),
        });
        self.0.unreserve(Space::Lease, name, h);
        if was {
            if let Err(e) = self.leave(group, wait) {
                log::warn!("leaving {group} failed: {}", e.report());
            }
        }
        r
    }

    /// The term `holder` holds of `name` and how long it stays valid from now, read
    /// together.
    pub(crate) fn term_and_validity(
        &self,
        name: &LeaseName,
        holder: Holder,
    ) -> Option<(Term, Duration)> {
        let s = self.0.lock_shared();
        let now = self.0.now();
        let t = s.core.term_of(name, holder)?;
        let left = s.core.valid_for(Space::Lease, &t.name, t.token, now)?;
        Some((t, left))
    }

    /// Waits until candidate `h` holds a term of `name` valid now (what passed its local
    /// deadline is lost first), `until` passes (`Ok(None)`), or `cancel` ends the wait.
    /// [`Error::NotCandidate`] if `h` is no candidate.
    pub(crate) fn wait_elected(
        &self,
        name: &LeaseName,
        h: HandleId,
        until: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Option<Term>> {
        const OP: &str = "waiting to be elected";
        let mut s = self.0.lock_shared();
        loop {
            Cancel::check(cancel, OP)?;
            self.0.check_waitable(&s)?;
            // The timer may not have ticked yet: settle first, so only a term valid now
            // is handed out.
            self.0.settle(&mut s);
            if let Some(t) = wait::elected(&s.core, name, h, self.0.now())? {
                return Ok(Some(t));
            }
            if !self.0.wait_or_cancel(&mut s, until, cancel) {
                return Ok(None);
            }
        }
    }

    // ---- candidates' term values --------------------------------------------------------

    /// Sets the value candidate `h` gives its terms and writes it on the term it holds of
    /// `name` now, if valid ([`Error::LeaseLost`] if that term was lost on the backend
    /// meanwhile). `None` forgets the value locally and writes nothing (no I/O: for `Drop`).
    pub(crate) fn set_value(
        &self,
        h: HandleId,
        name: &LeaseName,
        value: Option<String>,
    ) -> Result<()> {
        let now = self.0.now();
        let target = {
            let mut s = self.0.lock_shared();
            let write = value.clone();
            match value {
                Some(v) if !v.is_empty() => s.values.insert(h, v),
                _ => s.values.remove(&h),
            };
            s.value_changes += 1;
            let term = values::target(&s.core, h, name, now);
            write
                .zip(term)
                .map(|(v, t)| (s.core.session().clone(), t, v))
        };
        match target {
            Some((id, term, value)) => self.write_value(&id, &term, &value),
            None => Ok(()),
        }
    }

    /// Writes `value` on `term` of session `id` on the backend: [`Error::LeaseLost`] if the
    /// term is not held there.
    pub(crate) fn write_value(&self, id: &SessionId, term: &Term, value: &str) -> Result<()> {
        match self
            .0
            .backend
            .set_value(id, &term.name, term.token, value)?
        {
            true => Ok(()),
            false => Err(lease_lost(term)),
        }
    }

    /// The value candidate `h` gives its terms (empty for none).
    pub(crate) fn candidate_value(&self, h: HandleId) -> String {
        let s = self.0.lock_shared();
        s.values.get(&h).cloned().unwrap_or_default()
    }

    // ---- observers and group watches ----------------------------------------------------

    /// Starts watch `w` (it reads the backend at once): its handle and its events.
    pub(crate) fn watch(&self, w: Watch) -> Result<(HandleId, Receiver<Event>)> {
        self.0.lock_shared().core.check_live()?;
        let h = self.0.next_handle();
        let events = self.0.listeners.channel(h);
        let now = self.0.now();
        self.0.with_core(|c| match w {
            Watch::Owner(name) => c.add_observer(h, name, now),
            Watch::Members(group) => c.add_group_watch(h, group, now),
        });
        Ok((h, events))
    }

    /// Ends watch `h` and forgets its listeners.
    pub(crate) fn unwatch(&self, h: HandleId) {
        self.0.with_core(|c| c.remove_watch(h));
        self.0.drop_listeners(h);
    }

    // ---- guards' terms ----------------------------------------------------------------

    /// How long `kind`'s term `name`/`token` of session `id` stays valid from now if no
    /// keep-alive succeeds meanwhile (`None`: not valid now).
    pub(crate) fn term_valid_for(
        &self,
        kind: TermKind,
        id: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Option<Duration> {
        let s = self.0.lock_shared();
        let now = self.0.now();
        if s.core.session() != id {
            return None;
        }
        release::valid_for(&s.core, kind, name, token, now)
    }

    /// Ends guard `h`'s `kind` term of session `id`: ended locally at once, then released on
    /// the backend now (`wait`; a term the release found gone is reported as `LockLost`
    /// with `Missing` unless the session ended or was replaced meanwhile, and is the
    /// unlock's [`Error::LeaseLost`]) or from the work queue. A term of a replaced
    /// (expired) session, or one lost meanwhile, is [`Error::LeaseLost`] (reported once).
    /// Its name's reservation is freed either way.
    pub(crate) fn end_term(
        &self,
        kind: TermKind,
        id: &SessionId,
        h: HandleId,
        term: &Term,
        wait: bool,
    ) -> Result<()> {
        let now = self.0.now();
        let ended = self
            .0
            .with_session(id, |c| release::end(c, kind, h, term, now))
            .unwrap_or_else(|| Err(lease_lost(term)));
        let r = ended.and_then(|unlock| {
            if !wait {
                self.0.release_later(id, &unlock);
                return Ok(());
            }
            match self.0.release_now(id, &unlock)? {
                true => Ok(()),
                false => Err(self
                    .0
                    .with_session(id, |c| wait::lost_on_release(c, h, term.clone()))
                    .unwrap_or_else(|| lease_lost(term))),
            }
        });
        self.0.drop_listeners(h);
        self.0.unreserve(kind.space(), &term.name, h);
        r
    }

    /// Releases a leader's term of session `id` now (`wait`; [`Error::LeaseLost`] if it was
    /// found gone) or from the work queue.
    fn release_leader(&self, id: &SessionId, term: &Term, wait: bool) -> Result<()> {
        let unlock = Unlock {
            name: term.name.clone(),
            token: term.token,
            mode: None,
        };
        if !wait {
            self.0.release_later(id, &unlock);
            return Ok(());
        }
        match self.0.release_now(id, &unlock)? {
            true => Ok(()),
            false => Err(lease_lost(term)),
        }
    }
}
