//! Unit tests of the pure core on virtual time: no threads, no sleeps.

use super::core::{Core, Output, State, Task, Timing};
use super::event::{Event, LossReason};
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
    assert!(c.is_valid(&name("a"), Token::new(4).unwrap(), t0 + 989 * MS));
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
    assert!(c.is_valid(&name("new"), Token::new(9).unwrap(), t0 + 303 * MS));
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
        session: "x".into(),
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
    assert_eq!(r, Some((name("a"), Token::new(3).unwrap())));
    let out = c.take_outputs();
    assert!(matches!(
        events(&out)[..],
        [Event::Revoked {
            reason: LossReason::Resigned,
            ..
        }]
    ));
    assert!(!c.is_valid(&name("a"), Token::new(3).unwrap(), t0 + 3 * MS));
}

#[test]
fn a_grant_for_a_withdrawn_candidate_is_released() {
    let t0 = Instant::now();
    let mut c = core(t0);
    attempting(&mut c, t0);
    assert_eq!(c.remove_candidate(1, t0), None);
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
    assert!(c.is_valid(&name("a"), Token::new(2).unwrap(), t0 + 98 * MS));
    assert!(!c.is_valid(&name("a"), Token::new(2).unwrap(), t0 + 99 * MS));
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
    c.remove_candidate(1, t0);
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
    c.begin_acquire(&name("a"));
    let r = c.on_lock_acquire(
        9,
        &name("a"),
        t0 + MS,
        t0 + 2 * MS,
        Ok(Acquire::Acquired(term("a", 6))),
    );
    assert!(matches!(r, Ok(Acquire::Held(_))), "{r:?}");
    assert!(!c.is_valid(&name("a"), Token::new(6).unwrap(), t0 + 3 * MS));
    let seen = c.releases_seen();
    c.on_released(&name("a"));
    assert!(
        c.releases_seen() > seen,
        "lock waiters are woken when the release finishes"
    );
    c.begin_acquire(&name("a"));
    let r = c.on_lock_acquire(
        9,
        &name("a"),
        t0 + 4 * MS,
        t0 + 5 * MS,
        Ok(Acquire::Acquired(term("a", 7))),
    );
    assert!(matches!(r, Ok(Acquire::Acquired(_))));
    assert!(c.is_valid(&name("a"), Token::new(7).unwrap(), t0 + 6 * MS));
}

#[test]
fn a_late_grant_already_adopted_by_a_lock_is_not_released() {
    let t0 = Instant::now();
    let mut c = core(t0);
    attempting(&mut c, t0);
    c.remove_candidate(1, t0);
    c.begin_acquire(&name("a"));
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
    assert!(c.is_valid(&name("a"), Token::new(6).unwrap(), t0 + 3 * MS));
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
    c.on_released(&name("a"));
    c.tick(t0 + 303 * MS);
    assert_eq!(
        c.take_outputs(),
        vec![Output::Run(Task::Attempt(1, name("a")))]
    );
}
