//! The narrow API the primitives reach a session through: reserve a name, read a term and
//! its validity, add or remove a candidate or a watch, count groups joined, set a candidate's
//! value, finish a lock's attempt, end a term, and wait for a condition with a deadline and a
//! cancel token. Every call that changes the core dispatches its outputs before it returns:
//! the primitives never hold the session's lock nor touch its core.

use super::cancel::Cancel;
use super::config::Config;
use super::core::{lease_lost, HandleId, Holder};
use super::driver::release::{self, TermKind, Unlock};
use super::driver::reserve::{self, Space, Taken};
use super::driver::{jobs, values, wait};
use super::event::Event;
use super::session::Inner;
use crate::error::{Error, Result};
use crate::spi::LeaseBackend;

use crate::types::{GroupName, LeaseName, SessionId, Term, Token};
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// The backend.
    pub(crate) fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.0.backend
    }

    /// The session's configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.0.config
    }

    /// Now, on the session's clock.
    pub(crate) fn now(&self) -> Instant {
        self.0.now()
    }

    /// A new handle id.
    pub(crate) fn next_handle(&self) -> HandleId {
        self.0.next_handle()
    }

    /// The current backend session's id.
    pub(crate) fn id(&self) -> SessionId {
        self.0.id()
    }

    /// A channel listening to handle `h`'s events.
    pub(crate) fn channel(&self, h: HandleId) -> Receiver<Event> {
        self.0.listeners.channel(h)
    }

    /// A callback listening to handle `h`'s events.
    pub(crate) fn callback(&self, h: HandleId, f: impl FnMut(&Event) + Send + 'static) {
        self.0.listeners.callback(h, f)
    }

    /// Forgets handle `h`'s listeners.
    pub(crate) fn drop_listeners(&self, h: HandleId) {
        self.0.drop_listeners(h)
    }

    /// Waits (bounded) until the callbacks have handled every event emitted so far.
    pub(crate) fn wait_delivered(&self, h: HandleId) {
        self.0.wait_delivered(h)
    }

    /// Frees a local reservation of `name` in `space` by `h`.
    pub(crate) fn unreserve(&self, space: Space, name: &LeaseName, h: HandleId) {
        self.0.unreserve(space, name, h)
    }

    /// Queues leaving `group` as session `id` (for `Drop`).
    pub(crate) fn leave_later(&self, id: &SessionId, group: &GroupName) {
        self.0.leave_later(id, group)
    }
}

impl EngineHandle {
    /// The current backend session, if it is live.
    pub(crate) fn live_session(&self) -> Result<SessionId> {
        let s = self.0.lock_shared();
        s.core.check_live()?;
        Ok(s.core.session().clone())
    }

    /// Whether a job claim of session `id` whose local deadline is `deadline` still holds.
    pub(crate) fn job_holds(&self, id: &SessionId, deadline: Instant) -> bool {
        let s = self.0.lock_shared();
        jobs::holds(&s.core, id, deadline, self.0.now())
    }

    // ---- groups joined through memberships and candidacies ---------------------------

    /// Counts `group` as joined once more (a reopen re-joins it) and returns the live
    /// session to join it as; counted under the lock that reads the id, so a reopen either
    /// sees the count or has already swapped the session in.
    pub(crate) fn count_join(&self, group: &GroupName) -> Result<SessionId> {
        let mut s = self.0.lock_shared();
        s.core.check_live()?;
        *s.joined.entry(group.clone()).or_insert(0) += 1;
        Ok(s.core.session().clone())
    }

    /// Counts `group` as joined once less; returns the live session to leave it as if that
    /// was the last count.
    pub(crate) fn count_leave(&self, group: &GroupName) -> Option<SessionId> {
        let mut s = self.0.lock_shared();
        let last = match s.joined.get_mut(group) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                s.joined.remove(group);
                true
            }
            None => false,
        };
        (last && s.core.check_live().is_ok()).then(|| s.core.session().clone())
    }

    /// Forgets every count of `group` (it is not re-joined after a reopen).
    pub(crate) fn forget_joined(&self, group: &GroupName) {
        self.0.lock_shared().joined.remove(group);
    }

    // ---- election candidates ------------------------------------------------------------

    /// Enters candidate `h` for `name`: reserves the name (or [`Error::AlreadyHeld`]), counts
    /// the candidates `group` as joined (joined on the work thread), and registers the
    /// candidate with the core. While an expired session is reopened it joins the new one.
    pub(crate) fn enter_candidate(
        &self,
        name: &LeaseName,
        h: HandleId,
        group: &GroupName,
    ) -> Result<()> {
        {
            let mut s = self.0.lock_shared();
            self.0.check_waitable(&s)?;
            let thread = reserve::this_thread();
            if s.reserved.reserve(Space::Lease, name, h, thread) != Taken::Now {
                return Err(Error::AlreadyHeld { name: name.clone() });
            }
            *s.joined.entry(group.clone()).or_insert(0) += 1;
            if s.core.check_live().is_ok() {
                let id = s.core.session().clone();
                self.0.join_later(&id, group);
            }
        }
        let now = self.0.now();
        self.0.with_core(|c| c.add_candidate(h, name.clone(), now));
        Ok(())
    }

    /// Withdraws candidate `h`: the session it was withdrawn from, whether it was a
    /// candidate, and the term it held (to release) or the loss of its last term.
    pub(crate) fn withdraw_candidate(
        &self,
        h: HandleId,
    ) -> (SessionId, bool, Result<Option<Term>>) {
        let now = self.0.now();
        self.0.with_core(|c| {
            let was = c.is_candidate(h);
            (c.session().clone(), was, c.remove_candidate(h, now))
        })
    }

    /// Whether `h` is a registered candidate.
    pub(crate) fn is_candidate(&self, h: HandleId) -> bool {
        self.0.lock_shared().core.is_candidate(h)
    }

    /// The term `holder` holds of `name` if it is valid now.
    pub(crate) fn valid_term_of(&self, name: &LeaseName, holder: Holder) -> Option<Term> {
        let s = self.0.lock_shared();
        let now = self.0.now();
        s.core
            .term_of(name, holder)
            .filter(|t| s.core.is_valid(&t.name, t.token, now))
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
        let left = s.core.valid_for(&t.name, t.token, now)?;
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
            let now = self.0.now();
            let held = s.core.term_of(name, Holder::Election(h));
            if let Some(t) = held.filter(|t| s.core.is_valid(&t.name, t.token, now)) {
                return Ok(Some(t));
            }
            if !s.core.is_candidate(h) {
                return Err(Error::NotCandidate { name: name.clone() });
            }
            if !self.0.wait_or_cancel(&mut s, until, cancel) {
                return Ok(None);
            }
        }
    }

    // ---- candidates' term values --------------------------------------------------------

    /// Sets the value candidate `h` gives its terms (`None`: none); returns the session and
    /// the term it holds of `name` now, if valid (to write the value on).
    pub(crate) fn set_candidate_value(
        &self,
        h: HandleId,
        name: &LeaseName,
        value: Option<String>,
    ) -> Option<(SessionId, Term)> {
        let now = self.0.now();
        let mut s = self.0.lock_shared();
        match value {
            Some(v) if !v.is_empty() => s.values.insert(h, v),
            _ => s.values.remove(&h),
        };
        s.value_changes += 1;
        let target = values::target(&s.core, h, name, now);
        target.map(|t| (s.core.session().clone(), t))
    }

    /// The value candidate `h` gives its terms (empty for none).
    pub(crate) fn candidate_value(&self, h: HandleId) -> String {
        let s = self.0.lock_shared();
        s.values.get(&h).cloned().unwrap_or_default()
    }

    // ---- observers and group watches ----------------------------------------------------

    /// Registers observer `h` of `name` (it reads the owner at once).
    pub(crate) fn add_observer(&self, h: HandleId, name: LeaseName) -> Result<()> {
        self.0.lock_shared().core.check_live()?;
        let now = self.0.now();
        self.0.with_core(|c| c.add_observer(h, name, now));
        Ok(())
    }

    /// Registers watch `h` of `group` (it reads the members at once).
    pub(crate) fn add_group_watch(&self, h: HandleId, group: GroupName) -> Result<()> {
        self.0.lock_shared().core.check_live()?;
        let now = self.0.now();
        self.0.with_core(|c| c.add_group_watch(h, group, now));
        Ok(())
    }

    /// Ends observer or watch `h`.
    pub(crate) fn remove_watch(&self, h: HandleId) {
        self.0.with_core(|c| c.remove_watch(h));
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

    /// Releases a leader's term of session `id` now (`wait`) or from the work queue:
    /// whether it was still held (`true` when queued).
    pub(crate) fn release_leader(&self, id: &SessionId, term: &Term, wait: bool) -> Result<bool> {
        let unlock = Unlock {
            name: term.name.clone(),
            token: term.token,
            mode: None,
        };
        if !wait {
            self.0.release_later(id, &unlock);
            return Ok(true);
        }
        self.0.release_now(id, &unlock)
    }
}
