//! The one guard core under [`LockGuard`](super::LockGuard), [`Permit`](super::Permit) and
//! [`RwGuard`](super::RwGuard): a term won by an acquire call, its validity, its loss
//! channel, and its end (unlock now, or drop: ended at once, released from the session's
//! work queue).

use crate::engine::handle::{lock_hold, EngineHandle, HandleId, TermKind, Won};
use crate::error::{lease_lost, Result};
use crate::types::{SessionId, Term, Token};
use crate::Event;
use crossbeam_channel::Receiver;
use std::time::{Duration, Instant};

/// A held term of one kind (see the module's doc).
pub(crate) struct TermGuard {
    pub(super) inner: EngineHandle,
    handle: HandleId,
    pub(super) session: SessionId,
    pub(super) term: Term,
    kind: TermKind,
    events: Receiver<Event>,
    done: bool,
    /// When the term was won (for the hold time metric).
    acquired: Instant,
}

impl TermGuard {
    /// The guard of the `kind` term `won`.
    pub(crate) fn new(inner: &EngineHandle, won: Won, kind: TermKind) -> Self {
        TermGuard {
            inner: inner.clone(),
            handle: won.handle,
            session: won.session,
            term: won.term,
            kind,
            events: won.events,
            done: false,
            acquired: won.at,
        }
    }

    pub(crate) fn term(&self) -> &Term {
        &self.term
    }

    pub(crate) fn valid_for(&self) -> Option<Duration> {
        let (name, token) = (&self.term.name, self.term.token);
        self.inner
            .term_valid_for(self.kind, &self.session, name, token)
    }

    pub(crate) fn check(&self) -> Result<Token> {
        match self.valid_for() {
            Some(_) => Ok(self.term.token),
            None => Err(lease_lost(&self.term)),
        }
    }

    pub(crate) fn lost(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Releases the term now; a `LockLost` it reported has reached the session's callbacks
    /// when it returns.
    pub(crate) fn unlock(mut self) -> Result<()> {
        let r = self.end(true);
        self.inner.wait_delivered(self.handle);
        r
    }

    /// Ends the term locally (once); releases it on the backend now if `wait`, else from
    /// the session's work queue.
    fn end(&mut self, wait: bool) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let now = self.inner.now();
        lock_hold(now.saturating_duration_since(self.acquired));
        let (id, h) = (&self.session, self.handle);
        self.inner.end_term(self.kind, id, h, &self.term, wait)
    }
}

impl Drop for TermGuard {
    /// Ends the term at once; the backend release runs on the session's work queue.
    fn drop(&mut self) {
        let r = self.end(false);
        let name = &self.term.name;
        match (r, self.kind) {
            (Ok(()), _) => {}
            (Err(e @ crate::Error::LeaseLost { .. }), _) => {
                log::debug!("dropped a lost term: {}", e.report())
            }
            (Err(e), TermKind::Lock) => log::warn!("releasing lock {name} failed: {}", e.report()),
            (Err(e), TermKind::Rw(mode)) => log::warn!(
                "releasing the {} term of {name} failed: {}",
                mode.as_str(),
                e.report()
            ),
        }
    }
}
