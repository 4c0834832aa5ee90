//! Candidates' attempts and term values: the work thread pumps the driver's `Attempt`, the
//! machine the session's work thread pumps (the acquire carries the value read when it
//! runs; a value set meanwhile is written on the term it won, and again while it keeps
//! changing); `Election::set_value` writes on the candidate's valid term
//! (`values::target`). Every value is unique, so the checker knows which term it was
//! written for.

use super::network::{Chan, Op};
use super::World;
use crate::engine::core::HandleId;
use crate::engine::driver::attempt::{Attempt, Call, Ctx, Reply};
use crate::engine::driver::tokens;
use crate::engine::driver::values;
use crate::types::{LeaseName, SessionId};

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
    /// Starts the work thread's attempt of candidate `h` at `name` for session `id`, with
    /// the value it reads now.
    pub(super) fn start_attempt(&mut self, c: usize, id: SessionId, h: HandleId, name: LeaseName) {
        let value = self.value_of(c, h);
        self.clients[c].attempt = Some(Attempt::new(id, h, name, value));
        self.attempt_step(c);
    }

    /// Sends what the work thread's attempt asks for next: whether it sent anything (if
    /// not, the attempt is over).
    pub(super) fn attempt_step(&mut self, c: usize) -> bool {
        let local = self.local(c, self.now);
        let cl = &mut self.clients[c];
        let Some(m) = cl.attempt.as_mut() else {
            return false;
        };
        let (h, session) = (m.handle(), Some(m.session().clone()));
        let op = match m.next(local) {
            None => {
                cl.attempt = None;
                return false;
            }
            Some(Call::Acquire { name, value, .. }) => Op::Attempt(h, name, value),
            Some(Call::SetValue {
                name, token, value, ..
            }) => {
                self.written(&name, token, &value);
                Op::WriteBack(name, token, value)
            }
        };
        self.send_for(c, op, Chan::Work, session);
        true
    }

    /// The work thread's attempt was answered `reply`: whether it sends once more.
    pub(super) fn attempt_answered(&mut self, c: usize, reply: Reply) -> bool {
        let local = self.local(c, self.now);
        let Some(h) = self.clients[c].attempt.as_ref().map(Attempt::handle) else {
            return false;
        };
        let current = self.value_of(c, h);
        let cl = &mut self.clients[c];
        let (Some(m), Some(core)) = (cl.attempt.as_mut(), cl.core.as_mut()) else {
            cl.attempt = None;
            return false;
        };
        let cx = Ctx {
            core,
            current: &current,
            changes: cl.value_changes,
            now: local,
        };
        if let Some(term) = m.on_reply(cx, reply) {
            if let Some(core) = cl.core.as_mut() {
                tokens::check(&cl.tokens, core, Some(h), &term);
            }
        }
        self.attempt_step(c)
    }

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
