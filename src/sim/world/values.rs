//! Candidates' term values, as the driver handles them: an attempt carries the value the
//! work thread read when it ran it; a value set meanwhile is written on the term the attempt
//! won (and again while it keeps changing: the driver's `values::write_back` and
//! `write_again`); `Election::set_value` writes on the candidate's valid term
//! (`values::target`). Every value is unique, so the checker knows which term it was
//! written for.

use super::network::{Chan, Op, Rep};
use super::replies::{attempt_reply, granted};
use super::World;
use crate::engine::core::{HandleId, Holder};
use crate::engine::driver::values;
use crate::error::Result;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Instant;

impl World<'_> {
    /// The value candidate `h` of client `c` gives its terms now (empty: none).
    pub(super) fn value_of(&self, c: usize, h: HandleId) -> String {
        let cands = &self.clients[c].cands;
        let cand = cands.iter().find(|k| k.handle == Some(h));
        cand.map(|k| k.value.clone()).unwrap_or_default()
    }

    /// A new value for client `c`'s candidates: unique, or empty (none) now and then.
    pub(super) fn new_value(&mut self, c: usize) -> String {
        if self.rng.chance(0.2) {
            return String::new();
        }
        let cl = &mut self.clients[c];
        cl.values_made += 1;
        format!("c{c}v{}", cl.values_made)
    }

    /// The attempt of candidate `h` for `name`, sent at `sent` with `value`, was answered:
    /// the engine takes it in; if it won a term while the value changed, the work thread
    /// writes the new value on the term before its next work (true: it does).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attempted(
        &mut self,
        c: usize,
        h: HandleId,
        name: &LeaseName,
        value: &str,
        sent: Instant,
        reply: Result<Rep>,
        for_session: Option<SessionId>,
    ) -> bool {
        let local = self.local(c, self.now);
        let won = granted(&reply);
        let current = self.value_of(c, h);
        let Some(core) = self.clients[c].core.as_mut() else {
            return false;
        };
        core.on_attempt(h, name, sent, local, attempt_reply(reply));
        let held = core.term_of(name, Holder::Election(h));
        let Some(token) = values::write_back(won, held.as_ref(), value, &current) else {
            return false;
        };
        let seen = self.clients[c].value_changes;
        self.write_back(c, h, name, token, current, seen, 1, for_session);
        true
    }

    /// The work thread writes `value` on candidate `h`'s term `name`/`token` (write number
    /// `writes` of this attempt).
    #[allow(clippy::too_many_arguments)]
    fn write_back(
        &mut self,
        c: usize,
        h: HandleId,
        name: &LeaseName,
        token: Token,
        value: String,
        seen: u64,
        writes: usize,
        for_session: Option<SessionId>,
    ) {
        self.written(name, token, &value);
        let op = Op::WriteBack(h, name.clone(), token, value, seen, writes);
        self.send_for(c, op, Chan::Work, for_session);
    }

    /// A write-back's reply: the driver writes again if the candidate still holds the term
    /// and its value changed since (true: it does).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn written_back(
        &mut self,
        c: usize,
        h: HandleId,
        name: &LeaseName,
        token: Token,
        value: &str,
        seen: u64,
        writes: usize,
        reply: Result<Rep>,
        for_session: Option<SessionId>,
    ) -> bool {
        if reply.is_err() || writes >= values::MAX_WRITES {
            return false; // a failed write ends the write-back (logged)
        }
        let current = self.value_of(c, h);
        let cl = &self.clients[c];
        let held = cl.core.as_ref().is_some_and(|k| {
            Some(k.session()) == for_session.as_ref()
                && k.term_of(name, Holder::Election(h))
                    .is_some_and(|t| t.token == token)
        });
        let changes = cl.value_changes;
        match values::write_again(held, seen, changes, value, &current) {
            Some(next) => {
                self.write_back(c, h, name, token, next, changes, writes + 1, for_session);
                true
            }
            None => false,
        }
    }

    /// `Election::set_value` by client `c`'s candidate `i`: a new value for its terms,
    /// written at once on the term it leads with, if any.
    pub(super) fn set_value(&mut self, c: usize, i: usize) {
        let local = self.local(c, self.now);
        let value = self.new_value(c);
        let cl = &mut self.clients[c];
        let cand = &mut cl.cands[i];
        cand.value.clone_from(&value);
        cl.value_changes += 1;
        let (Some(h), name) = (cand.handle, cand.name.clone()) else {
            return;
        };
        self.tr(Some(c), Some(&name), || {
            format!("sets the value of {name} to {value:?}")
        });
        let Some(core) = self.clients[c].core.as_ref() else {
            return;
        };
        if let Some(term) = values::target(core, h, &name, local) {
            if !value.is_empty() {
                self.written(&name, term.token, &value);
            }
            self.send(c, Op::SetValue(name, term.token, value), Chan::Caller);
        }
    }
}
