//! Unit tests of the pure core on virtual time: no threads, no sleeps.

use super::{Core, Output, Space, State, Task, TermKind, Timing};
use crate::engine::event::{Event, LossReason};
use crate::error::Error;
use crate::spi::{Acquire, HeldLease, KeepAlive, Notification};
use crate::types::{LeaseName, Owner, SessionId, Term, Token};
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

fn timing() -> Timing {
    Timing {
        lease: 1000 * MS,
        renew: 300 * MS,
        retry: 150 * MS,
        drift: 0.01,
        lock_delay: Duration::ZERO,
    }
}

fn core(t0: Instant) -> Core {
    Core::new(timing(), SessionId::random(), t0, 1000 * MS, 7)
}

fn name(n: &str) -> LeaseName {
    LeaseName::new(n).unwrap()
}

fn term(n: &str, token: u64) -> Term {
    Term {
        name: name(n),
        token: Token::new(token).unwrap(),
        remaining: 1000 * MS,
    }
}

fn ka(leases: &[(&str, u64)]) -> KeepAlive {
    KeepAlive {
        remaining: 1000 * MS,
        leases: leases
            .iter()
            .map(|(n, t)| HeldLease {
                name: name(n),
                token: Token::new(*t).unwrap(),
                remaining: 1000 * MS,
            })
            .collect(),
        rw: Vec::new(),
    }
}

fn events(out: &[Output]) -> Vec<&Event> {
    out.iter()
        .filter_map(|o| match o {
            Output::Emit(_, e) => Some(e),
            _ => None,
        })
        .collect()
}

/// Registers candidate 1 for "a" and starts its first attempt at `t0`.
fn attempting(c: &mut Core, t0: Instant) {
    c.add_candidate(1, name("a"), t0);
    c.tick(t0);
    c.take_outputs();
}

/// Candidate 1 wins "a" with `token` (granted for `remaining`), outputs drained.
fn elected(c: &mut Core, t0: Instant, token: u64, remaining: Duration) {
    attempting(c, t0);
    let mut t = term("a", token);
    t.remaining = remaining;
    c.on_attempt(1, &name("a"), t0, t0 + MS, Ok(Acquire::Acquired(t)));
    c.take_outputs();
}

#[test]
fn keep_alive_is_sent_every_renew_interval_and_extends_the_deadline() {
    let t0 = Instant::now();
    let mut c = core(t0);
    // The deadline is sent + remaining × (1 − drift).
    assert_eq!(c.deadline(), t0 + 990 * MS);
    assert_eq!(c.next_wake(), Some(t0 + 300 * MS));
    c.tick(t0 + 299 * MS);
    assert!(c.take_outputs().is_empty());
    c.tick(t0 + 300 * MS);
    assert_eq!(c.take_outputs(), vec![Output::KeepAlive]);
    // No second keep-alive while one is in flight.
    c.tick(t0 + 310 * MS);
    assert!(c.take_outputs().is_empty());
    c.on_keep_alive(t0 + 300 * MS, t0 + 320 * MS, Ok(ka(&[])));
    assert_eq!(c.deadline(), t0 + 1290 * MS);
    let h = c.health(t0 + 320 * MS);
    assert_eq!(h.keep_alive_rtt, Some(20 * MS));
    assert_eq!(h.slack, Some(970 * MS));
    assert_eq!(h.valid_for, 970 * MS);
    assert_eq!(c.next_wake(), Some(t0 + 600 * MS));
    assert_eq!(c.state(), State::Valid);
}

#[test]
fn failing_keep_alives_go_to_jeopardy_then_lost_exactly_at_the_deadline() {
    let t0 = Instant::now();
    let mut c = core(t0);
    elected(&mut c, t0, 4, 1000 * MS);
    c.tick(t0 + 300 * MS);
    assert_eq!(c.take_outputs(), vec![Output::KeepAlive]);
    let err = Error::backend("test", "connection refused");
    c.on_keep_alive(t0 + 300 * MS, t0 + 310 * MS, Err(err));
    assert_eq!(c.state(), State::Jeopardy);
    assert_eq!(c.health(t0 + 310 * MS).failures, 1);
    let out = c.take_outputs();
    assert!(matches!(events(&out)[..], [Event::Jeopardy { .. }]));
    // Still valid inside the window; a retry is scheduled before the deadline.
    assert!(c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(4).unwrap(),
        t0 + 989 * MS
    ));
    // The session's deadline, earlier than the term's, bounds its validity.
    let four = Token::new(4).unwrap();
    assert_eq!(
        c.valid_for(Space::Lease, &name("a"), four, t0 + 989 * MS),
        Some(MS)
    );
    assert_eq!(
        c.valid_for(Space::Lease, &name("a"), four, t0 + 990 * MS),
        None
    );
    assert_eq!(c.next_wake(), Some(t0 + 385 * MS));
    c.tick(t0 + 385 * MS);
    assert_eq!(c.take_outputs(), vec![Output::KeepAlive]);
    // The retry hangs: the ticker wakes at the deadline, not later.
    assert_eq!(c.next_wake(), Some(t0 + 990 * MS));
    c.tick(t0 + 989 * MS);
    assert!(c.take_outputs().is_empty());
    c.tick(t0 + 990 * MS);
    assert_eq!(c.state(), State::Expired);
    let out = c.take_outputs();
    assert!(out.contains(&Output::CloseBackend));
    let ev = events(&out);
    assert!(
        matches!(ev[0], Event::Revoked { reason: LossReason::SessionExpired, term } if term.token.get() == 4)
    );
    assert!(matches!(ev[1], Event::SessionExpired { .. }));
    // A late success never revives it.
    c.on_keep_alive(t0 + 385 * MS, t0 + 995 * MS, Ok(ka(&[("a", 4)])));
    assert_eq!(c.state(), State::Expired);
    assert!(c.take_outputs().is_empty());
    assert!(matches!(c.check_live(), Err(Error::SessionExpired { .. })));
    assert_eq!(c.next_wake(), None);
}

#[test]
fn a_keep_alive_that_hangs_past_the_renew_interval_means_jeopardy() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    c.tick(t0 + 599 * MS);
    assert_eq!(c.state(), State::Valid);
    c.tick(t0 + 600 * MS);
    assert_eq!(c.state(), State::Jeopardy);
    c.on_keep_alive(t0 + 300 * MS, t0 + 650 * MS, Ok(ka(&[])));
    assert_eq!(c.state(), State::Valid);
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [Event::Jeopardy { .. }, Event::Recovered { .. }]
    ));
}

#[test]
fn a_lease_missing_from_the_reply_is_lost_at_once_unless_acquired_after_the_send() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.add_candidate(1, name("old"), t0);
    c.add_candidate(2, name("new"), t0);
    c.tick(t0);
    c.take_outputs();
    c.on_attempt(
        1,
        &name("old"),
        t0,
        t0 + MS,
        Ok(Acquire::Acquired(term("old", 1))),
    );
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    // "new" was granted after the keep-alive was sent: the reply may predate it.
    c.on_attempt(
        2,
        &name("new"),
        t0,
        t0 + 301 * MS,
        Ok(Acquire::Acquired(term("new", 9))),
    );
    c.take_outputs();
    c.on_keep_alive(t0 + 300 * MS, t0 + 302 * MS, Ok(ka(&[])));
    let out = c.take_outputs();
    let ev = events(&out);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        matches!(ev[0], Event::Revoked { reason: LossReason::Missing, term } if term.name.as_str() == "old")
    );
    assert!(c.is_valid(
        Space::Lease,
        &name("new"),
        Token::new(9).unwrap(),
        t0 + 303 * MS
    ));
}

#[test]
fn an_unknown_lease_in_the_reply_is_released_once() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 300 * MS, t0 + 301 * MS, Ok(ka(&[("stray", 5)])));
    assert_eq!(
        c.take_outputs(),
        vec![Output::Release(name("stray"), Token::new(5).unwrap())]
    );
    // A second reply listing it before the release finished asks nothing more.
    c.tick(t0 + 601 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 601 * MS, t0 + 602 * MS, Ok(ka(&[("stray", 5)])));
    assert!(c.take_outputs().is_empty());
}

#[test]
fn a_lease_being_acquired_is_not_released_as_unknown() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.add_candidate(1, name("a"), t0);
    c.tick(t0 + 300 * MS);
    let out = c.take_outputs();
    assert!(out.contains(&Output::Run(Task::Attempt(1, name("a")))));
    c.on_keep_alive(t0 + 300 * MS, t0 + 301 * MS, Ok(ka(&[("a", 3)])));
    assert!(!c
        .take_outputs()
        .iter()
        .any(|o| matches!(o, Output::Release(..))));
}

#[test]
fn a_backend_reported_expiry_is_terminal_without_closing_again() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    let expired = Error::SessionExpired {
        session: c.session().clone(),
    };
    c.on_keep_alive(t0 + 300 * MS, t0 + 301 * MS, Err(expired));
    assert_eq!(c.state(), State::Expired);
    let out = c.take_outputs();
    assert!(!out.contains(&Output::CloseBackend));
    assert!(matches!(events(&out)[..], [Event::SessionExpired { .. }]));
}

#[test]
fn candidates_retry_after_the_retry_interval_or_at_once_on_a_release() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.add_candidate(1, name("a"), t0);
    c.tick(t0);
    assert_eq!(
        c.take_outputs(),
        vec![Output::Run(Task::Attempt(1, name("a")))]
    );
    let owner = Owner {
        session: SessionId::random(),
        token: Token::new(2).unwrap(),
        remaining: 500 * MS,
        value: String::new(),
    };
    c.on_attempt(1, &name("a"), t0, t0 + MS, Ok(Acquire::Held(owner)));
    let next = c.next_wake().unwrap();
    // retry (150 ms) plus jitter below retry / 2.
    assert!(
        next >= t0 + 151 * MS && next < t0 + 226 * MS,
        "{:?}",
        next - t0
    );
    c.notify(&Notification::Released(name("a")), t0 + 10 * MS);
    c.tick(t0 + 10 * MS);
    assert_eq!(
        c.take_outputs(),
        vec![Output::Run(Task::Attempt(1, name("a")))]
    );
}

#[test]
fn resign_revokes_and_returns_the_lease_to_release() {
    let t0 = Instant::now();
    let mut c = core(t0);
    attempting(&mut c, t0);
    c.on_attempt(
        1,
        &name("a"),
        t0,
        t0 + MS,
        Ok(Acquire::Acquired(term("a", 3))),
    );
    let out = c.take_outputs();
    assert!(matches!(events(&out)[..], [Event::Elected { .. }]));
    let r = c.remove_candidate(1, t0 + 2 * MS);
    assert_eq!(r.unwrap(), Some(term("a", 3)));
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [Event::Revoked {
            reason: LossReason::Resigned,
            ..
        }]
    ));
    assert!(!c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(3).unwrap(),
        t0 + 3 * MS
    ));
}

#[test]
fn a_grant_for_a_withdrawn_candidate_is_released() {
    let t0 = Instant::now();
    let mut c = core(t0);
    attempting(&mut c, t0);
    assert_eq!(c.remove_candidate(1, t0).unwrap(), None);
    c.on_attempt(
        1,
        &name("a"),
        t0,
        t0 + MS,
        Ok(Acquire::Acquired(term("a", 6))),
    );
    assert_eq!(
        c.take_outputs(),
        vec![Output::Release(name("a"), Token::new(6).unwrap())]
    );
}

#[test]
fn a_term_is_never_valid_past_its_own_deadline() {
    let t0 = Instant::now();
    let mut c = core(t0);
    attempting(&mut c, t0);
    let mut short = term("a", 2);
    short.remaining = 100 * MS;
    c.on_attempt(1, &name("a"), t0, t0 + MS, Ok(Acquire::Acquired(short)));
    c.take_outputs();
    assert!(c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(2).unwrap(),
        t0 + 98 * MS
    ));
    assert!(!c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(2).unwrap(),
        t0 + 99 * MS
    ));
    // The term's own deadline, earlier than the session's, bounds its validity.
    let two = Token::new(2).unwrap();
    assert_eq!(
        c.valid_for(Space::Lease, &name("a"), two, t0 + 98 * MS),
        Some(MS)
    );
    assert_eq!(
        c.valid_for(Space::Lease, &name("a"), two, t0 + 99 * MS),
        None
    );
    assert_eq!(
        c.valid_for(Space::Lease, &name("a"), Token::new(3).unwrap(), t0),
        None
    );
    c.tick(t0 + 99 * MS);
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [Event::Revoked {
            reason: LossReason::Expired,
            ..
        }]
    ));
    assert_eq!(c.state(), State::Valid);
}

#[test]
fn close_ends_every_term_then_emits_closed_once() {
    let t0 = Instant::now();
    let mut c = core(t0);
    elected(&mut c, t0, 1, 1000 * MS);
    assert!(c.close());
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [
            Event::Revoked {
                reason: LossReason::Closed,
                ..
            },
            Event::Closed { .. }
        ]
    ));
    assert!(!c.close());
    assert!(c.take_outputs().is_empty());
    assert!(matches!(c.check_live(), Err(Error::Closed)));
}

#[test]
fn no_term_is_adopted_while_a_release_of_its_name_is_in_flight() {
    let t0 = Instant::now();
    let mut c = core(t0);
    // A withdrawn candidate's late grant is released...
    attempting(&mut c, t0);
    c.remove_candidate(1, t0).unwrap();
    c.on_attempt(
        1,
        &name("a"),
        t0,
        t0 + MS,
        Ok(Acquire::Acquired(term("a", 6))),
    );
    assert_eq!(
        c.take_outputs(),
        vec![Output::Release(name("a"), Token::new(6).unwrap())]
    );
    // ...so a lock's grant of the same term, answered before that release finished, is
    // not adopted: the release would free it under the lock.
    c.begin_acquire(Space::Lease, &name("a"));
    let r = c.on_lock_acquire(
        9,
        &name("a"),
        t0 + MS,
        t0 + 2 * MS,
        Ok(Acquire::Acquired(term("a", 6))),
    );
    assert!(matches!(r, Ok(Acquire::Held(_))), "{r:?}");
    assert!(!c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(6).unwrap(),
        t0 + 3 * MS
    ));
    let seen = c.wait_for_release(&name("a"));
    c.on_released(Space::Lease, &name("a"), true);
    assert!(
        c.releases_of(&name("a")) > seen,
        "lock waiters are woken when the release finishes"
    );
    c.begin_acquire(Space::Lease, &name("a"));
    let r = c.on_lock_acquire(
        9,
        &name("a"),
        t0 + 4 * MS,
        t0 + 5 * MS,
        Ok(Acquire::Acquired(term("a", 7))),
    );
    assert!(matches!(r, Ok(Acquire::Acquired(_))));
    assert!(c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(7).unwrap(),
        t0 + 6 * MS
    ));
}

#[test]
fn a_late_grant_already_adopted_by_a_lock_is_not_released() {
    let t0 = Instant::now();
    let mut c = core(t0);
    attempting(&mut c, t0);
    c.remove_candidate(1, t0).unwrap();
    c.begin_acquire(Space::Lease, &name("a"));
    let r = c.on_lock_acquire(
        9,
        &name("a"),
        t0,
        t0 + MS,
        Ok(Acquire::Acquired(term("a", 6))),
    );
    assert!(matches!(r, Ok(Acquire::Acquired(_))));
    c.on_attempt(
        1,
        &name("a"),
        t0,
        t0 + 2 * MS,
        Ok(Acquire::Acquired(term("a", 6))),
    );
    assert!(c
        .take_outputs()
        .iter()
        .all(|o| !matches!(o, Output::Release(..))));
    assert!(c.is_valid(
        Space::Lease,
        &name("a"),
        Token::new(6).unwrap(),
        t0 + 3 * MS
    ));
}

#[test]
fn candidates_do_not_attempt_while_a_release_of_their_name_is_in_flight() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 300 * MS, t0 + 301 * MS, Ok(ka(&[("a", 5)])));
    assert_eq!(
        c.take_outputs(),
        vec![Output::Release(name("a"), Token::new(5).unwrap())]
    );
    c.add_candidate(1, name("a"), t0 + 302 * MS);
    c.tick(t0 + 302 * MS);
    assert!(c.take_outputs().is_empty());
    c.on_released(Space::Lease, &name("a"), true);
    c.tick(t0 + 303 * MS);
    assert_eq!(
        c.take_outputs(),
        vec![Output::Run(Task::Attempt(1, name("a")))]
    );
}

/// Lock handle 9 holds "a" with `token`, granted for `remaining` at `t0`; outputs drained.
fn locked(c: &mut Core, t0: Instant, token: u64, remaining: Duration) -> Term {
    let mut t = term("a", token);
    t.remaining = remaining;
    c.begin_acquire(Space::Lease, &name("a"));
    let r = c.on_lock_acquire(9, &name("a"), t0, t0 + MS, Ok(Acquire::Acquired(t.clone())));
    assert!(matches!(r, Ok(Acquire::Acquired(_))), "{r:?}");
    c.take_outputs();
    t
}

fn lease_lost(r: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::LeaseLost { .. }))
}

#[test]
fn unlock_past_the_terms_deadline_reports_the_loss_first_and_says_so() {
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = locked(&mut c, t0, 4, 100 * MS);
    // The application noticed first (check() failed) and unlocks before any tick.
    let r = c.unlock(9, TermKind::Lock, &t, t0 + 200 * MS);
    assert!(lease_lost(&r), "{r:?}");
    let out = c.take_outputs();
    assert!(
        matches!(
            events(&out)[..],
            [Event::LockLost {
                reason: LossReason::Expired,
                ..
            }]
        ),
        "{out:?}"
    );
    assert!(!out.iter().any(|o| matches!(o, Output::Release(..))));
    // The loss is reported once: neither a tick nor a second unlock repeats it.
    c.tick(t0 + 201 * MS);
    assert!(lease_lost(&c.unlock(9, TermKind::Lock, &t, t0 + 202 * MS)));
    assert!(events(&c.take_outputs()).is_empty());
}

#[test]
fn unlock_past_the_session_deadline_reports_the_session_expiry() {
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = locked(&mut c, t0, 4, 1000 * MS);
    let r = c.unlock(9, TermKind::Lock, &t, t0 + 2000 * MS);
    assert!(lease_lost(&r), "{r:?}");
    let out = c.take_outputs();
    assert!(
        matches!(
            events(&out)[..],
            [
                Event::LockLost {
                    reason: LossReason::SessionExpired,
                    ..
                },
                Event::SessionExpired { .. }
            ]
        ),
        "{out:?}"
    );
    assert!(out.contains(&Output::CloseBackend));
}

/// With a lock-delay, a local expiry leaves the backend session to expire there: closing
/// it would end its terms cleanly, without the delay.
#[test]
fn a_local_expiry_with_a_lock_delay_does_not_close_the_backend_session() {
    let t0 = Instant::now();
    let t = Timing {
        lock_delay: 500 * MS,
        ..timing()
    };
    let mut c = Core::new(t, SessionId::random(), t0, 1000 * MS, 7);
    elected(&mut c, t0, 4, 1000 * MS);
    c.tick(t0 + 300 * MS);
    assert_eq!(c.take_outputs(), vec![Output::KeepAlive]);
    c.on_keep_alive(
        t0 + 300 * MS,
        t0 + 310 * MS,
        Err(Error::backend("test", "down")),
    );
    c.take_outputs();
    c.tick(t0 + 990 * MS);
    assert_eq!(c.state(), State::Expired);
    let out = c.take_outputs();
    assert!(!out.contains(&Output::CloseBackend), "{out:?}");
    assert!(matches!(
        events(&out)[..],
        [Event::Revoked { .. }, Event::SessionExpired { .. }]
    ));
}

#[test]
fn unlock_of_a_valid_term_releases_it() {
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = locked(&mut c, t0, 4, 1000 * MS);
    assert_eq!(
        c.unlock(9, TermKind::Lock, &t, t0 + 10 * MS).unwrap(),
        t.token
    );
    assert!(events(&c.take_outputs()).is_empty());
    // The backend found it gone: reported once as Missing.
    let e = c.lost_on_unlock(9, t.clone());
    assert!(matches!(e, Error::LeaseLost { token, .. } if token.get() == 4));
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [Event::LockLost {
            reason: LossReason::Missing,
            ..
        }]
    ));
}

#[test]
fn resign_past_the_terms_deadline_reports_expired_not_resigned() {
    let t0 = Instant::now();
    let mut c = core(t0);
    elected(&mut c, t0, 3, 100 * MS);
    let r = c.remove_candidate(1, t0 + 200 * MS);
    assert!(lease_lost(&r), "{r:?}");
    let out = c.take_outputs();
    assert!(
        matches!(
            events(&out)[..],
            [Event::Revoked {
                reason: LossReason::Expired,
                ..
            }]
        ),
        "{out:?}"
    );
    assert!(!out.iter().any(|o| matches!(o, Output::Release(..))));
}

#[test]
fn resign_after_a_processed_loss_says_so_until_elected_again() {
    let t0 = Instant::now();
    let mut c = core(t0);
    elected(&mut c, t0, 3, 100 * MS);
    c.tick(t0 + 150 * MS);
    assert!(matches!(
        events(&c.take_outputs())[..],
        [Event::Revoked {
            reason: LossReason::Expired,
            ..
        }]
    ));
    let r = c.remove_candidate(1, t0 + 160 * MS);
    assert!(lease_lost(&r), "{r:?}");
    assert!(events(&c.take_outputs()).is_empty(), "reported once");
    // A candidate that lost a term, then won another, resigns that one normally.
    let mut c = core(t0);
    elected(&mut c, t0, 3, 100 * MS);
    c.tick(t0 + 150 * MS);
    c.take_outputs();
    c.tick(t0 + 500 * MS);
    c.take_outputs();
    c.on_attempt(
        1,
        &name("a"),
        t0 + 500 * MS,
        t0 + 501 * MS,
        Ok(Acquire::Acquired(term("a", 5))),
    );
    c.take_outputs();
    assert_eq!(
        c.remove_candidate(1, t0 + 502 * MS).unwrap(),
        Some(term("a", 5))
    );
}

#[test]
fn released_names_are_forgotten_once_the_release_is_answered() {
    let t0 = Instant::now();
    let mut c = core(t0);
    for i in 0..100u64 {
        let n = name(&format!("entity-{i}"));
        let mut t = term("a", i + 1);
        t.name = n.clone();
        c.begin_acquire(Space::Lease, &n);
        let r = c.on_lock_acquire(9, &n, t0, t0 + MS, Ok(Acquire::Acquired(t.clone())));
        assert!(matches!(r, Ok(Acquire::Acquired(_))));
        c.unlock(9, TermKind::Lock, &t, t0 + 2 * MS).unwrap();
        c.on_released(Space::Lease, &n, true);
    }
    assert_eq!(c.remembered_releases(), 0);
    // A release that timed out may still land: remembered until a new token is adopted.
    let t = locked(&mut c, t0, 7, 1000 * MS);
    c.unlock(9, TermKind::Lock, &t, t0 + 3 * MS).unwrap();
    c.on_released(Space::Lease, &name("a"), false);
    assert_eq!(c.remembered_releases(), 1);
    locked(&mut c, t0 + 4 * MS, 8, 1000 * MS);
    assert_eq!(c.remembered_releases(), 0);
}

#[test]
fn a_remaining_longer_than_the_lease_never_stretches_a_deadline() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    let mut reply = ka(&[]);
    reply.remaining = 60_000 * MS; // a backend bug or a clock step there
    c.on_keep_alive(t0 + 300 * MS, t0 + 301 * MS, Ok(reply));
    assert!(c.deadline() <= t0 + 1300 * MS, "capped at sent + lease");
    let t = locked(&mut c, t0 + 310 * MS, 2, 60_000 * MS);
    assert!(!c.is_valid(Space::Lease, &t.name, t.token, t0 + 1310 * MS));
}

#[test]
fn after_a_resign_this_sessions_next_candidate_waits_a_retry_period() {
    let t0 = Instant::now();
    let mut c = core(t0);
    elected(&mut c, t0, 3, 1000 * MS);
    c.remove_candidate(1, t0 + 10 * MS).unwrap();
    c.on_released(Space::Lease, &name("a"), true);
    c.take_outputs();
    c.add_candidate(2, name("a"), t0 + 11 * MS);
    c.tick(t0 + 11 * MS);
    assert!(c.take_outputs().is_empty(), "no attempt at once");
    // Not even when the release is notified (as every backend that pushes does).
    c.notify(&Notification::Released(name("a")), t0 + 12 * MS);
    c.tick(t0 + 12 * MS);
    assert!(c.take_outputs().is_empty(), "no attempt on a notification");
    // Two retry intervals (150 ms) after the resign: more than retry + its largest jitter.
    let attempts = |out: Vec<Output>| -> Vec<Output> {
        out.into_iter()
            .filter(|o| matches!(o, Output::Run(_)))
            .collect()
    };
    c.tick(t0 + 309 * MS);
    assert!(attempts(c.take_outputs()).is_empty());
    assert_eq!(c.next_wake(), Some(t0 + 310 * MS));
    c.tick(t0 + 310 * MS);
    assert_eq!(
        attempts(c.take_outputs()),
        vec![Output::Run(Task::Attempt(2, name("a")))]
    );
    // The same after an unlock; other names are not delayed.
    let mut c = core(t0);
    let t = locked(&mut c, t0, 4, 1000 * MS);
    c.unlock(9, TermKind::Lock, &t, t0 + 10 * MS).unwrap();
    c.on_released(Space::Lease, &name("a"), true);
    c.add_candidate(2, name("a"), t0 + 11 * MS);
    c.add_candidate(3, name("b"), t0 + 11 * MS);
    c.tick(t0 + 11 * MS);
    assert_eq!(
        c.take_outputs(),
        vec![Output::Run(Task::Attempt(3, name("b")))]
    );
}

#[test]
fn a_notification_during_a_running_read_or_attempt_runs_it_again_at_once() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.add_observer(5, name("a"), t0);
    c.add_candidate(1, name("a"), t0);
    c.tick(t0);
    let out = c.take_outputs();
    assert!(out.contains(&Output::Run(Task::Owner(5, name("a")))));
    assert!(out.contains(&Output::Run(Task::Attempt(1, name("a")))));
    // A new term and a release are notified while both are in flight.
    c.notify(&Notification::Acquired(name("a")), t0 + MS);
    c.notify(&Notification::Released(name("a")), t0 + MS);
    let holder = Owner {
        session: SessionId::random(),
        token: Token::new(2).unwrap(),
        remaining: 900 * MS,
        value: String::new(),
    };
    c.on_owner(5, t0 + 2 * MS, Ok(Some(holder.clone())));
    c.on_attempt(1, &name("a"), t0, t0 + 2 * MS, Ok(Acquire::Held(holder)));
    c.take_outputs();
    c.tick(t0 + 3 * MS);
    let out = c.take_outputs();
    assert!(
        out.contains(&Output::Run(Task::Owner(5, name("a")))),
        "{out:?}"
    );
    assert!(
        out.contains(&Output::Run(Task::Attempt(1, name("a")))),
        "{out:?}"
    );
    // Without a notification, the next read waits for the retry interval.
    c.on_owner(5, t0 + 4 * MS, Ok(None));
    c.take_outputs();
    c.tick(t0 + 5 * MS);
    assert!(!c
        .take_outputs()
        .contains(&Output::Run(Task::Owner(5, name("a")))));
}

#[test]
fn a_notification_concerns_only_the_names_this_session_waits_for() {
    let t0 = Instant::now();
    let mut c = core(t0);
    assert!(
        !c.notify(&Notification::Released(name("a")), t0),
        "nobody waits"
    );
    let seen = c.wait_for_release(&name("a"));
    c.add_observer(5, name("o"), t0);
    c.add_candidate(1, name("e"), t0);
    let (leases, groups) = c.interest();
    assert_eq!(
        leases.into_iter().collect::<Vec<_>>(),
        [name("a"), name("e"), name("o")]
    );
    assert!(groups.is_empty());
    assert!(!c.notify(&Notification::Released(name("b")), t0));
    assert!(!c.notify(&Notification::Acquired(name("a")), t0));
    assert_eq!(c.releases_of(&name("a")), seen, "another name's release");
    assert!(c.notify(&Notification::Released(name("a")), t0));
    assert!(c.releases_of(&name("a")) > seen);
    assert!(c.notify(&Notification::Acquired(name("o")), t0));
    assert!(c.notify(&Notification::Released(name("e")), t0));
    c.stop_waiting(&name("a"));
    assert!(!c.interest().0.contains(&name("a")));
    assert!(c.notify(&Notification::Resync, t0));
}

#[test]
fn an_observer_reports_a_new_value_of_the_same_term_once() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.add_observer(5, name("a"), t0);
    c.tick(t0);
    c.take_outputs();
    let holder = |value: &str| Owner {
        session: SessionId::from_u64(7),
        token: Token::new(2).unwrap(),
        remaining: 900 * MS,
        value: value.to_owned(),
    };
    let changes = |c: &mut Core, at: Instant, value: &str| {
        c.tick(at);
        c.take_outputs();
        c.on_owner(5, at, Ok(Some(holder(value))));
        let out = c.take_outputs();
        events(&out)
            .into_iter()
            .filter(|e| matches!(e, Event::LeaderChanged { .. }))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(changes(&mut c, t0 + MS, "").len(), 1, "the first read");
    assert!(changes(&mut c, t0 + 400 * MS, "").is_empty(), "unchanged");
    let e = changes(&mut c, t0 + 800 * MS, "10.0.0.7:80");
    assert_eq!(
        e,
        vec![Event::LeaderChanged {
            name: name("a"),
            owner: Some(holder("10.0.0.7:80")),
        }],
        "the same term with a new value"
    );
    assert!(changes(&mut c, t0 + 1200 * MS, "10.0.0.7:80").is_empty());
}

/// The engine fix behind the regression seeds, step by step on the core: an unlock's release
/// times out, the lock gets the same term back, and the engine must not adopt it.
#[test]
fn same_term_after_an_unfinished_release_is_not_adopted() {
    let t = Timing {
        lease: Duration::from_secs(1),
        renew: Duration::from_millis(300),
        retry: Duration::from_millis(150),
        drift: 0.01,
        lock_delay: Duration::ZERO,
    };
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let id = SessionId::random();
    let mut core = Core::new(t, id.clone(), t0, t.lease, 1);
    let name = LeaseName::new("job").unwrap();
    let term = Term {
        name: name.clone(),
        token: Token::new(1).unwrap(),
        remaining: Duration::from_millis(900),
    };
    core.begin_acquire(Space::Lease, &name);
    let r = core.on_lock_acquire(7, &name, ms(1), ms(2), Ok(Acquire::Acquired(term.clone())));
    assert!(matches!(r, Ok(Acquire::Acquired(_))));
    assert_eq!(
        core.unlock(7, TermKind::Lock, &term, ms(10)).unwrap(),
        term.token
    );
    core.on_released(Space::Lease, &name, false); // the release timed out: it may still land
    core.begin_acquire(Space::Lease, &name);
    let r = core.on_lock_acquire(
        8,
        &name,
        ms(20),
        ms(21),
        Ok(Acquire::Acquired(term.clone())),
    );
    assert!(
        matches!(r, Ok(Acquire::Held(o)) if o.session == id),
        "not adopted"
    );
    assert!(!core.is_valid(Space::Lease, &name, term.token, ms(22)));
    let out = core.take_outputs();
    assert!(
        out.contains(&Output::Release(name.clone(), term.token)),
        "{out:?}"
    );
    // Once released, the next grant has a new token and is adopted.
    core.on_released(Space::Lease, &name, true);
    core.begin_acquire(Space::Lease, &name);
    let next = Term {
        token: Token::new(2).unwrap(),
        ..term
    };
    let r = core.on_lock_acquire(9, &name, ms(30), ms(31), Ok(Acquire::Acquired(next)));
    assert!(matches!(r, Ok(Acquire::Acquired(_))));
    assert!(core.is_valid(Space::Lease, &name, Token::new(2).unwrap(), ms(32)));
}

/// Regression scenario "a read answered after its session expired" (found by the simulation
/// as seeds 29, 54, 87 for observers and 134, 211 for group watches, before it ran the
/// shipped driver): an owner or members read that returns after the session expired reports
/// nothing; `SessionExpired` is the session's last word until a reopen.
#[test]
fn a_read_answered_after_expiry_reports_nothing() {
    let t0 = Instant::now();
    let mut c = core(t0);
    c.add_observer(5, name("a"), t0);
    c.add_group_watch(6, crate::types::GroupName::new("g").unwrap(), t0);
    c.tick(t0);
    c.take_outputs();
    // The deadline passes while both reads are in flight.
    c.tick(t0 + 2000 * MS);
    let out = c.take_outputs();
    assert!(events(&out)
        .iter()
        .any(|e| matches!(e, Event::SessionExpired { .. })));
    let owner = Owner {
        session: SessionId::random(),
        token: Token::new(3).unwrap(),
        remaining: 1000 * MS,
        value: String::new(),
    };
    c.on_owner(5, t0 + 2001 * MS, Ok(Some(owner)));
    c.on_members(6, t0 + 2001 * MS, Ok(Vec::new()));
    let out = c.take_outputs();
    assert!(events(&out).is_empty(), "{out:?}");
}

/// Regression scenario "a released token forgotten too early" (seeds 232 and 1309, issue
/// 9.13): a release answered while an acquire of the same name is still in flight must stay
/// remembered, so the grant that acquire brings back with the released token is not adopted.
#[test]
fn a_released_token_is_remembered_while_an_acquire_of_its_name_is_in_flight() {
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = locked(&mut c, t0, 7, 1000 * MS);
    c.unlock(9, TermKind::Lock, &t, t0 + 2 * MS).unwrap();
    // An acquire of the name is sent before the release's answer arrives.
    c.begin_acquire(Space::Lease, &name("a"));
    c.on_released(Space::Lease, &name("a"), true);
    assert_eq!(
        c.remembered_releases(),
        1,
        "forgotten with an acquire in flight"
    );
    // It comes back with the released term: not adopted, released again.
    let r = c.on_lock_acquire(
        10,
        &name("a"),
        t0 + 3 * MS,
        t0 + 4 * MS,
        Ok(Acquire::Acquired(t.clone())),
    );
    assert!(matches!(r, Ok(Acquire::Held(_))), "{r:?}");
    assert!(!c.is_valid(Space::Lease, &name("a"), t.token, t0 + 5 * MS));
    assert!(c
        .take_outputs()
        .contains(&Output::Release(name("a"), t.token)));
}

#[test]
fn a_read_write_term_is_valid_with_its_session_survives_keep_alives_and_is_lost_at_expiry() {
    use crate::spi::RwMode;
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = term("rw", 3);
    c.begin_acquire(Space::Rw, &t.name);
    let got = c.on_guard_acquire(
        9,
        TermKind::Rw(RwMode::Read),
        &t.name,
        t0,
        t0,
        Ok(Some(t.clone())),
    );
    assert_eq!(got.unwrap(), Some(t.clone()));
    assert!(c.is_valid(Space::Rw, &t.name, t.token, t0));
    // A plain lease of the same name is another thing: not valid, and a keep-alive that
    // lists the read-write term and no lease does not end it.
    assert!(!c.is_valid(Space::Lease, &t.name, t.token, t0));
    c.tick(t0 + 300 * MS);
    let listed = ka_rw(&[("rw", RwMode::Read, 3)]);
    c.on_keep_alive(t0 + 300 * MS, t0 + 310 * MS, Ok(listed));
    assert!(c.is_valid(Space::Rw, &t.name, t.token, t0 + 900 * MS));
    c.take_outputs();
    // Expiry ends it with `LockLost` to its guard; unlocking then says it was lost.
    c.tick(t0 + 5000 * MS);
    let out = c.take_outputs();
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Emit(Some(9), Event::LockLost { term, reason: LossReason::SessionExpired })
            if term.token == t.token
    )));
    assert!(!c.is_valid(Space::Rw, &t.name, t.token, t0 + 5000 * MS));
    assert!(c
        .unlock(9, TermKind::Rw(RwMode::Read), &t, t0 + 5000 * MS)
        .is_err());
}

#[test]
fn a_read_write_grant_of_a_term_whose_release_is_in_flight_is_not_taken() {
    use crate::spi::RwMode;
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = term("rw", 4);
    let n = &t.name;
    c.on_guard_acquire(
        1,
        TermKind::Rw(RwMode::Write),
        n,
        t0,
        t0,
        Ok(Some(t.clone())),
    )
    .unwrap();
    assert_eq!(
        c.unlock(1, TermKind::Rw(RwMode::Write), &t, t0).unwrap(),
        t.token
    );
    // The same token again while its release is in flight: not granted, and not released
    // twice.
    let again = c.on_guard_acquire(
        2,
        TermKind::Rw(RwMode::Write),
        n,
        t0,
        t0,
        Ok(Some(t.clone())),
    );
    assert_eq!(again.unwrap(), None);
    assert!(c.take_outputs().is_empty());
    c.on_released(Space::Rw, n, true);
    assert_eq!(c.remembered_releases(), 0);
    let newer = Term {
        token: Token::new(5).unwrap(),
        ..t.clone()
    };
    let again = c.on_guard_acquire(
        2,
        TermKind::Rw(RwMode::Write),
        n,
        t0,
        t0,
        Ok(Some(newer.clone())),
    );
    assert_eq!(again.unwrap(), Some(newer));
}

/// Found by the simulation (seed 17 of the CI run, mix `slow`, once it ran read-write
/// locks): an unlock's release timed out on the client but was still on its way; the same
/// session read the name again and got the *same* term back (the backend still held it),
/// took it, and then the late release freed it: a writer took the name while the reader
/// still believed, for 56 ms. A grant of a token whose release may still land is never
/// taken; it is released again, and the next grant has a new token.
#[test]
fn a_read_write_grant_of_a_token_whose_release_timed_out_is_released_again() {
    use crate::spi::RwMode;
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = term("rw", 1);
    let n = &t.name;
    c.begin_acquire(Space::Rw, n);
    c.on_guard_acquire(
        1,
        TermKind::Rw(RwMode::Read),
        n,
        t0,
        t0,
        Ok(Some(t.clone())),
    )
    .unwrap();
    c.unlock(1, TermKind::Rw(RwMode::Read), &t, t0).unwrap();
    // The release timed out: it may still land.
    c.on_released(Space::Rw, n, false);
    c.begin_acquire(Space::Rw, n);
    let again = c.on_guard_acquire(
        2,
        TermKind::Rw(RwMode::Read),
        n,
        t0,
        t0,
        Ok(Some(t.clone())),
    );
    assert_eq!(again.unwrap(), None);
    assert!(!c.is_valid(Space::Rw, n, t.token, t0));
    assert_eq!(
        c.take_outputs(),
        vec![Output::ReleaseRw(n.clone(), RwMode::Read, t.token)]
    );
    // Still remembered while a grant sent before that release answered may come back.
    c.begin_acquire(Space::Rw, n);
    c.on_released(Space::Rw, n, true);
    assert_eq!(c.remembered_releases(), 1);
    let late = c.on_guard_acquire(
        2,
        TermKind::Rw(RwMode::Read),
        n,
        t0,
        t0,
        Ok(Some(t.clone())),
    );
    assert_eq!(late.unwrap(), None);
    // Released again, as a lease's is (harmless: the answered release freed it).
    assert_eq!(
        c.take_outputs(),
        vec![Output::ReleaseRw(n.clone(), RwMode::Read, t.token)]
    );
    c.on_released(Space::Rw, n, true);
    assert_eq!(c.remembered_releases(), 0);
}

/// A keep-alive that lists read-write terms `rw` (name, mode, token) and no lease.
fn ka_rw(rw: &[(&str, crate::spi::RwMode, u64)]) -> KeepAlive {
    let mut k = ka(&[]);
    k.rw = (rw.iter())
        .map(|(n, mode, t)| crate::spi::HeldRw {
            name: name(n),
            mode: *mode,
            token: Token::new(*t).unwrap(),
        })
        .collect();
    k
}

/// Found by the simulation (seed 186, mix `lossy`, once it measured how long write calls
/// wait): an unlock's release of a write term was lost; the backend kept the term, bound to
/// the session, which lived on, so no reader and no other writer got the name for 6.5 s (the
/// session's own read was refused too: a writer holds it). A release that failed is sent
/// again when the next keep-alive that succeeds lists the term, until the backend answers.
#[test]
fn a_failed_read_write_release_is_sent_again_after_the_next_keep_alive() {
    use crate::spi::RwMode;
    let t0 = Instant::now();
    let mut c = core(t0);
    let t = term("rw", 1);
    let n = &t.name;
    c.on_guard_acquire(
        1,
        TermKind::Rw(RwMode::Write),
        n,
        t0,
        t0,
        Ok(Some(t.clone())),
    )
    .unwrap();
    c.unlock(1, TermKind::Rw(RwMode::Write), &t, t0).unwrap();
    // A keep-alive listing it while the release is in flight sends nothing more.
    c.tick(t0 + 200 * MS);
    c.take_outputs();
    c.on_keep_alive(
        t0 + 200 * MS,
        t0 + 210 * MS,
        Ok(ka_rw(&[("rw", RwMode::Write, 1)])),
    );
    assert!(!c
        .take_outputs()
        .iter()
        .any(|o| matches!(o, Output::ReleaseRw(..))));
    c.on_released(Space::Rw, n, false);
    assert!(c.take_outputs().is_empty());
    // A failed keep-alive sends nothing; the next one that succeeds sends the release again.
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    let down = Err(Error::backend("keep-alive", std::io::Error::other("down")));
    c.on_keep_alive(t0 + 300 * MS, t0 + 310 * MS, down);
    assert!(!c
        .take_outputs()
        .iter()
        .any(|o| matches!(o, Output::ReleaseRw(..))));
    c.tick(t0 + 400 * MS);
    c.take_outputs();
    c.on_keep_alive(
        t0 + 400 * MS,
        t0 + 410 * MS,
        Ok(ka_rw(&[("rw", RwMode::Write, 1)])),
    );
    let out = c.take_outputs();
    assert!(out.contains(&Output::ReleaseRw(n.clone(), RwMode::Write, t.token)));
    // Answered: nothing more is sent, nothing remembered.
    c.on_released(Space::Rw, n, true);
    c.tick(t0 + 700 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 700 * MS, t0 + 710 * MS, Ok(ka(&[])));
    assert!(!c
        .take_outputs()
        .iter()
        .any(|o| matches!(o, Output::ReleaseRw(..))));
    assert_eq!(c.remembered_releases(), 0);
}

/// Found by the simulation (seed 332, mix `slow`): a one-time read's grant came back after
/// its caller gave up; the session held a read term no guard knew, bound to the session;
/// its next write waited behind that read, and every writer and reader behind it, for 6.1 s.
/// A keep-alive lists every read-write term of the session: one no guard holds is released
/// (not while an attempt of its name is in flight: it may be that grant); one a guard holds
/// that is not listed is lost, unless it was granted after the keep-alive was sent.
#[test]
fn a_read_write_term_no_guard_knows_is_found_and_released() {
    use crate::spi::RwMode;
    let t0 = Instant::now();
    let mut c = core(t0);
    let n = name("rw");
    let timeout = || {
        Err(Error::Timeout {
            operation: "acquiring",
            after: 300 * MS,
            source: None,
        })
    };
    c.begin_acquire(Space::Rw, &n);
    assert!(c
        .on_guard_acquire(1, TermKind::Rw(RwMode::Read), &n, t0, t0, timeout())
        .is_err());
    let listed = || Ok(ka_rw(&[("rw", RwMode::Read, 3)]));
    // While an attempt of the name is in flight (it may be that grant) nothing is judged.
    c.begin_acquire(Space::Rw, &n);
    c.tick(t0 + 300 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 300 * MS, t0 + 310 * MS, listed());
    assert!(c.take_outputs().is_empty());
    let busy = c.on_guard_acquire(2, TermKind::Rw(RwMode::Write), &n, t0, t0, Ok(None));
    assert!(matches!(busy, Ok(None)));
    c.tick(t0 + 600 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 600 * MS, t0 + 610 * MS, listed());
    let tok = Token::new(3).unwrap();
    assert_eq!(
        c.take_outputs(),
        vec![Output::ReleaseRw(n.clone(), RwMode::Read, tok)]
    );
    // A grant of that token coming back now is not taken.
    let late = Term {
        name: n.clone(),
        token: tok,
        remaining: 1000 * MS,
    };
    c.begin_acquire(Space::Rw, &n);
    let r = c.on_guard_acquire(
        3,
        TermKind::Rw(RwMode::Read),
        &n,
        t0 + 700 * MS,
        t0 + 700 * MS,
        Ok(Some(late)),
    );
    assert!(matches!(r, Ok(None)));
    // A term a guard holds and the keep-alive lists is kept.
    let held = term("rw2", 7);
    let at = t0 + 800 * MS;
    c.on_guard_acquire(
        4,
        TermKind::Rw(RwMode::Write),
        &held.name,
        at,
        at,
        Ok(Some(held.clone())),
    )
    .unwrap();
    c.tick(t0 + 900 * MS);
    c.take_outputs();
    let mine = || Ok(ka_rw(&[("rw2", RwMode::Write, 7)]));
    c.on_keep_alive(t0 + 900 * MS, t0 + 910 * MS, mine());
    assert!(c.take_outputs().is_empty());
    assert!(c.is_valid(Space::Rw, &held.name, held.token, t0 + 910 * MS));
    // Not listed by a keep-alive sent before its grant: still held; by one sent after: lost.
    c.on_keep_alive(t0 + 700 * MS, t0 + 1000 * MS, Ok(ka(&[])));
    assert!(c.is_valid(Space::Rw, &held.name, held.token, t0 + 1000 * MS));
    c.tick(t0 + 1200 * MS);
    c.take_outputs();
    c.on_keep_alive(t0 + 1200 * MS, t0 + 1210 * MS, Ok(ka(&[])));
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [Event::LockLost { term, reason: LossReason::Missing }] if term == &held
    ));
    assert!(!c.is_valid(Space::Rw, &held.name, held.token, t0 + 1210 * MS));
}
