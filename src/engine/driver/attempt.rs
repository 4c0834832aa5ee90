//! A candidate's attempt, as one machine: the acquire with the value the candidate gave its
//! terms when the work thread ran it, then, if the value changed while the acquire was in
//! flight and the attempt won, the write of the newer value on the term it won (and again
//! while it keeps changing: [`values::write_back`], [`values::write_again`]). The session's
//! work thread and the simulation pump it the same way: [`Attempt::next`] says what to send,
//! [`Attempt::on_reply`] takes the answer in under the session's lock.

use super::values;
use crate::engine::core::{Core, HandleId, Holder};
use crate::error::Result;
use crate::spi::{Acquire, LeaseBackend};
use crate::types::{LeaseName, SessionId, Term, Token};
use std::time::Instant;

/// What the attempt sends next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// The acquire, with the candidate's value (empty: none).
    Acquire {
        session: SessionId,
        name: LeaseName,
        value: String,
    },
    /// A value changed during the attempt, written on the term it won.
    SetValue {
        session: SessionId,
        name: LeaseName,
        token: Token,
        value: String,
    },
}

impl Call {
    /// Sends the call to `backend`.
    pub(crate) fn send(&self, backend: &dyn LeaseBackend) -> Reply {
        match self {
            Call::Acquire {
                session,
                name,
                value,
            } if value.is_empty() => Reply::Acquire(backend.acquire(session, name)),
            Call::Acquire {
                session,
                name,
                value,
            } => Reply::Acquire(backend.acquire_with_value(session, name, value)),
            Call::SetValue {
                session,
                name,
                token,
                value,
            } => Reply::SetValue(backend.set_value(session, name, *token, value)),
        }
    }
}

/// The backend's answer to a [`Call`].
#[derive(Debug)]
pub(crate) enum Reply {
    Acquire(Result<Acquire>),
    /// Whether the value was set.
    SetValue(Result<bool>),
}

/// What the attempt reads of its session when a reply comes in.
pub(crate) struct Ctx<'a> {
    pub(crate) core: &'a mut Core,
    /// The candidate's value now (empty: none).
    pub(crate) current: &'a str,
    /// How many times any candidate's value was changed so far.
    pub(crate) changes: u64,
    pub(crate) now: Instant,
}

#[derive(Clone, Debug)]
enum State {
    /// The acquire is to be sent.
    Acquire,
    /// The acquire is in flight since `sent`.
    Acquiring {
        sent: Instant,
    },
    /// A value write is to be sent (`writes` made before it), seen `seen` value changes.
    Write {
        token: Token,
        value: String,
        seen: u64,
        writes: usize,
    },
    /// That write is in flight.
    Writing {
        token: Token,
        value: String,
        seen: u64,
        writes: usize,
    },
    Over,
}

/// Candidate `handle`'s attempt at `name` for session `session`.
#[derive(Clone, Debug)]
pub(crate) struct Attempt {
    session: SessionId,
    handle: HandleId,
    name: LeaseName,
    /// The value the acquire carries.
    value: String,
    state: State,
}

impl Attempt {
    /// An attempt that carries `value`, the candidate's value when the work thread runs it.
    pub(crate) fn new(
        session: SessionId,
        handle: HandleId,
        name: LeaseName,
        value: String,
    ) -> Self {
        Attempt {
            session,
            handle,
            name,
            value,
            state: State::Acquire,
        }
    }

    /// The session the attempt is made for.
    #[cfg(feature = "sim")]
    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }

    /// The candidate.
    #[cfg(feature = "sim")]
    pub(crate) fn handle(&self) -> HandleId {
        self.handle
    }

    /// The call to send now (`sent` is now), or `None`: a call is in flight, or the attempt
    /// is over.
    pub(crate) fn next(&mut self, sent: Instant) -> Option<Call> {
        match std::mem::replace(&mut self.state, State::Over) {
            State::Acquire => {
                self.state = State::Acquiring { sent };
                Some(Call::Acquire {
                    session: self.session.clone(),
                    name: self.name.clone(),
                    value: self.value.clone(),
                })
            }
            State::Write {
                token,
                value,
                seen,
                writes,
            } => {
                let call = Call::SetValue {
                    session: self.session.clone(),
                    name: self.name.clone(),
                    token,
                    value: value.clone(),
                };
                self.state = State::Writing {
                    token,
                    value,
                    seen,
                    writes,
                };
                Some(call)
            }
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Whether the attempt is over (nothing more to send).
    #[cfg(test)]
    pub(crate) fn is_over(&self) -> bool {
        matches!(self.state, State::Over)
    }

    /// Takes in the reply to the call in flight. A reply for a session replaced since ends
    /// the attempt (its grants die with that session). Returns the term the acquire was
    /// granted and the candidate holds, whose token the caller checks against the highest
    /// seen for the name.
    pub(crate) fn on_reply(&mut self, cx: Ctx<'_>, reply: Reply) -> Option<Term> {
        let state = std::mem::replace(&mut self.state, State::Over);
        if !super::accepts(cx.core.session(), &self.session) {
            return None;
        }
        let holder = Holder::Election(self.handle);
        match (state, reply) {
            (State::Acquiring { sent }, Reply::Acquire(reply)) => {
                let granted = match &reply {
                    Ok(Acquire::Acquired(t)) => Some(t.token),
                    _ => None,
                };
                cx.core
                    .on_attempt(self.handle, &self.name, sent, cx.now, reply);
                let held = cx.core.term_of(&self.name, holder);
                if let Some(token) =
                    values::write_back(granted, held.as_ref(), &self.value, cx.current)
                {
                    self.state = State::Write {
                        token,
                        value: cx.current.to_owned(),
                        seen: cx.changes,
                        writes: 0,
                    };
                }
                held.filter(|t| Some(t.token) == granted)
            }
            (
                State::Writing {
                    token,
                    value,
                    seen,
                    writes,
                },
                Reply::SetValue(reply),
            ) => {
                if let Err(e) = reply {
                    log::warn!("setting the value of {} failed: {}", self.name, e.report());
                    return None;
                }
                let writes = writes + 1;
                if writes >= values::MAX_WRITES {
                    return None;
                }
                let held = (cx.core.term_of(&self.name, holder)).is_some_and(|t| t.token == token);
                let again = values::write_again(held, seen, cx.changes, &value, cx.current);
                if let Some(value) = again {
                    self.state = State::Write {
                        token,
                        value,
                        seen: cx.changes,
                        writes,
                    };
                }
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::core::Timing;
    use std::time::Duration;

    fn core(id: &SessionId, t0: Instant) -> Core {
        let s = Duration::from_secs(1);
        let timing = Timing {
            lease: 10 * s,
            renew: s,
            retry: s / 2,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        Core::new(timing, id.clone(), t0, 10 * s, 1)
    }

    fn granted(name: &LeaseName, token: u64) -> Reply {
        Reply::Acquire(Ok(Acquire::Acquired(Term {
            name: name.clone(),
            token: Token::new(token).unwrap(),
            remaining: Duration::from_secs(10),
        })))
    }

    #[test]
    fn a_value_changed_in_flight_is_written_on_the_won_term_until_it_settles() {
        let t0 = Instant::now();
        let id = SessionId::random();
        let name = LeaseName::new("e").unwrap();
        let mut core = core(&id, t0);
        core.add_candidate(1, name.clone(), t0);
        let mut m = Attempt::new(id.clone(), 1, name.clone(), "a".into());
        let call = m.next(t0).expect("the acquire");
        assert!(matches!(&call, Call::Acquire { value, .. } if value == "a"));
        assert_eq!(m.next(t0), None, "one call in flight");
        let cx = Ctx {
            core: &mut core,
            current: "b",
            changes: 1,
            now: t0,
        };
        let won = m.on_reply(cx, granted(&name, 7)).expect("the won term");
        assert_eq!(won.token.get(), 7);
        let Some(Call::SetValue { token, value, .. }) = m.next(t0) else {
            panic!("the write-back");
        };
        assert_eq!((token.get(), value.as_str()), (7, "b"));
        // Changed once more while that write was in flight: written again.
        let cx = Ctx {
            core: &mut core,
            current: "c",
            changes: 2,
            now: t0,
        };
        assert_eq!(m.on_reply(cx, Reply::SetValue(Ok(true))), None);
        assert!(matches!(m.next(t0), Some(Call::SetValue { value, .. }) if value == "c"));
        let cx = Ctx {
            core: &mut core,
            current: "c",
            changes: 2,
            now: t0,
        };
        m.on_reply(cx, Reply::SetValue(Ok(true)));
        assert_eq!(m.next(t0), None);
        assert!(m.is_over());
    }

    #[test]
    fn a_reply_for_a_replaced_session_ends_the_attempt() {
        let t0 = Instant::now();
        let (old, new) = (SessionId::random(), SessionId::random());
        let name = LeaseName::new("e").unwrap();
        let mut core = core(&new, t0);
        core.add_candidate(1, name.clone(), t0);
        let mut m = Attempt::new(old, 1, name.clone(), String::new());
        m.next(t0);
        let cx = Ctx {
            core: &mut core,
            current: "b",
            changes: 1,
            now: t0,
        };
        assert_eq!(m.on_reply(cx, granted(&name, 3)), None);
        assert!(m.is_over());
        assert_eq!(core.term_of(&name, Holder::Election(1)), None);
    }

    #[test]
    fn writes_stop_after_a_failure_or_the_bound() {
        let t0 = Instant::now();
        let id = SessionId::random();
        let name = LeaseName::new("e").unwrap();
        let mut core = core(&id, t0);
        core.add_candidate(1, name.clone(), t0);
        let mut m = Attempt::new(id.clone(), 1, name.clone(), String::new());
        m.next(t0);
        let cx = Ctx {
            core: &mut core,
            current: "v0",
            changes: 0,
            now: t0,
        };
        m.on_reply(cx, granted(&name, 1));
        let mut writes = 0;
        while let Some(call) = m.next(t0) {
            assert!(matches!(call, Call::SetValue { .. }));
            writes += 1;
            let current = format!("v{writes}");
            let cx = Ctx {
                core: &mut core,
                current: &current,
                changes: writes as u64,
                now: t0,
            };
            m.on_reply(cx, Reply::SetValue(Ok(true)));
        }
        assert_eq!(writes, values::MAX_WRITES);
        let mut m = Attempt::new(id, 1, name.clone(), String::new());
        m.next(t0);
        let cx = Ctx {
            core: &mut core,
            current: "x",
            changes: 100,
            now: t0,
        };
        m.on_reply(cx, granted(&name, 2));
        assert!(m.next(t0).is_some());
        let cx = Ctx {
            core: &mut core,
            current: "y",
            changes: 101,
            now: t0,
        };
        let failed = Reply::SetValue(Err(crate::Error::backend("set", "down")));
        m.on_reply(cx, failed);
        assert!(m.is_over());
    }
}
