//! The acquire machine's cases: every path of `Acquisition`, driven by hand.

use super::*;
use crate::engine::core::Timing;
use crate::spi::Notification;
use crate::types::{Owner, Token};

const S: Duration = Duration::from_secs(1);

fn name(n: &str) -> LeaseName {
    LeaseName::new(n).unwrap()
}

/// A live core, the session's reservations, and the time.
struct Rig {
    core: Core,
    reserved: Reserved,
    now: Instant,
    coming: bool,
}

impl Rig {
    fn new() -> Self {
        let now = Instant::now();
        let timing = Timing {
            lease: S,
            renew: S / 3,
            retry: S / 6,
            drift: 0.01,
            lock_delay: Duration::ZERO,
        };
        Rig {
            core: Core::new(timing, SessionId::random(), now, S, 1),
            reserved: Reserved::default(),
            now,
            coming: true,
        }
    }

    fn next(&mut self, m: &mut Acquisition) -> Step {
        let mut jitter = |_| Duration::ZERO;
        m.next(&mut Ctx {
            core: &mut self.core,
            reserved: &mut self.reserved,
            reopen_coming: self.coming,
            now: self.now,
            jitter: &mut jitter,
        })
    }

    fn reply(&mut self, m: &mut Acquisition, r: Reply) -> Option<Term> {
        let mut jitter = |_| Duration::ZERO;
        m.on_reply(
            &mut Ctx {
                core: &mut self.core,
                reserved: &mut self.reserved,
                reopen_coming: self.coming,
                now: self.now,
                jitter: &mut jitter,
            },
            r,
        )
    }

    fn abandon(&mut self, m: &mut Acquisition) -> Done {
        let mut jitter = |_| Duration::ZERO;
        let e = Error::Cancelled { operation: "test" };
        m.abandon(
            &mut Ctx {
                core: &mut self.core,
                reserved: &mut self.reserved,
                reopen_coming: self.coming,
                now: self.now,
                jitter: &mut jitter,
            },
            e,
        )
    }
}

fn call(
    want: Want,
    names: &[&str],
    form: Form,
    h: HandleId,
    thread: u64,
    now: Instant,
) -> Acquisition {
    let spec = Spec {
        want,
        names: names.iter().map(|n| name(n)).collect(),
        form,
        operation: "taking a lock",
    };
    Acquisition::new(spec, h, thread, now, S / 6, S, 0)
}

fn term(n: &str, token: u64) -> Term {
    Term {
        name: name(n),
        token: Token::new(token).unwrap(),
        remaining: S,
    }
}

fn held() -> Acquire {
    Acquire::Held(Owner {
        session: SessionId::random(),
        token: Token::new(1).unwrap(),
        remaining: S,
        value: String::new(),
    })
}

#[test]
fn a_waiting_lock_registers_after_a_refusal_and_retries_on_a_release() {
    let mut r = Rig::new();
    let mut m = call(Want::Lock, &["a"], Form::Wait(None), 1, 1, r.now);
    let Step::Call(c) = r.next(&mut m) else {
        panic!("an attempt first")
    };
    assert_eq!((c.name.as_str(), c.ask), ("a", Ask::Plain));
    assert!(m.in_flight());
    assert!(matches!(r.next(&mut m), Step::Wait(None)));
    r.reply(&mut m, Reply::Plain(Ok(held())));
    // Registered for releases, it tries again at once.
    assert!(matches!(r.next(&mut m), Step::Call(_)));
    r.reply(&mut m, Reply::Plain(Ok(held())));
    let Step::Wait(Some(at)) = r.next(&mut m) else {
        panic!("a retry is due later")
    };
    assert_eq!(at, r.now + S / 6);
    // Asked again with nothing changed, it answers the same wait.
    assert!(matches!(r.next(&mut m), Step::Wait(Some(t)) if t == at));
    // A release of the name is seen: it tries before the retry is due.
    r.core.notify(&Notification::Released(name("a")), r.now);
    assert!(matches!(r.next(&mut m), Step::Call(_)));
    let fresh = r.reply(&mut m, Reply::Plain(Ok(Acquire::Acquired(term("a", 4)))));
    assert_eq!(fresh.map(|t| t.token.get()), Some(4));
    let Step::Done(d) = r.next(&mut m) else {
        panic!("won")
    };
    let won = d.result.unwrap().unwrap();
    assert_eq!((won.term.token.get(), won.index, d.leave), (4, 0, None));
    // The name stays reserved for the guard; the registration is gone.
    assert!(r.reserved.has(Space::Lease, &name("a")));
    assert!(r.core.interest().0.is_empty());
}

#[test]
fn a_deadline_times_out_with_the_last_failure_and_frees_the_name() {
    let mut r = Rig::new();
    let mut m = call(Want::Lock, &["a"], Form::Wait(Some(S)), 1, 1, r.now);
    assert!(matches!(r.next(&mut m), Step::Call(_)));
    r.reply(&mut m, Reply::Plain(Ok(held())));
    assert!(matches!(r.next(&mut m), Step::Call(_)));
    let down = Error::backend("acquiring", std::io::Error::other("down"));
    r.reply(&mut m, Reply::Plain(Err(down)));
    r.now += 2 * S;
    let Step::Done(d) = r.next(&mut m) else {
        panic!("timed out")
    };
    let Err(Error::Timeout { source, after, .. }) = d.result else {
        panic!("a timeout: {:?}", d.result)
    };
    assert_eq!(after, S);
    assert!(source.is_some_and(|e| e.to_string().contains("down")));
    assert!(!r.reserved.has(Space::Lease, &name("a")));
}

#[test]
fn a_name_another_thread_reserved_is_waited_for_and_this_threads_is_refused() {
    let mut r = Rig::new();
    let mut first = call(Want::Lock, &["a"], Form::Wait(None), 1, 1, r.now);
    assert!(matches!(r.next(&mut first), Step::Call(_)));
    let mut sibling = call(Want::Lock, &["a"], Form::Wait(None), 2, 2, r.now);
    assert!(matches!(r.next(&mut sibling), Step::Wait(None)));
    assert!(!sibling.reserves());
    let mut same = call(Want::Lock, &["a"], Form::Wait(None), 3, 1, r.now);
    let Step::Done(d) = r.next(&mut same) else {
        panic!("refused")
    };
    assert!(matches!(d.result, Err(Error::AlreadyHeld { .. })));
    let mut once = call(Want::Lock, &["a"], Form::Try, 4, 1, r.now);
    assert!(matches!(
        r.next(&mut once),
        Step::Done(Done {
            result: Ok(None),
            ..
        })
    ));
    // The first call gives up (cancelled): the sibling takes the name.
    r.reply(&mut first, Reply::Plain(Ok(held())));
    let d = r.abandon(&mut first);
    assert!(matches!(d.result, Err(Error::Cancelled { .. })));
    assert!(matches!(r.next(&mut sibling), Step::Call(_)));
    assert!(sibling.reserves());
}

#[test]
fn a_semaphore_goes_round_its_permits_and_waits_for_any_release() {
    let mut r = Rig::new();
    let names = ["s.permit-0", "s.permit-1"];
    let mut m = call(Want::Permit, &names, Form::Wait(None), 1, 1, r.now);
    // Another handle of the session holds permit 0: the round skips it.
    r.reserved.reserve(Space::Lease, &name(names[0]), 9, 2);
    let Step::Call(c) = r.next(&mut m) else {
        panic!("a try")
    };
    assert_eq!(c.name.as_str(), names[1]);
    r.reply(&mut m, Reply::Plain(Ok(held())));
    assert!(matches!(r.next(&mut m), Step::Wait(Some(_))));
    assert!(!r.reserved.has(Space::Lease, &name(names[1])));
    r.reserved.unreserve(Space::Lease, &name(names[0]), 9);
    r.core
        .notify(&Notification::Released(name(names[0])), r.now);
    let Step::Call(c) = r.next(&mut m) else {
        panic!("a new round")
    };
    assert_eq!(c.name.as_str(), names[0]);
    r.reply(
        &mut m,
        Reply::Plain(Ok(Acquire::Acquired(term(names[0], 2)))),
    );
    let Step::Done(d) = r.next(&mut m) else {
        panic!("won")
    };
    assert_eq!(d.result.unwrap().unwrap().index, 0);
}

#[test]
fn a_fair_lock_and_a_waiting_writer_leave_their_queue_a_try_does_not_wait() {
    let mut r = Rig::new();
    let mut m = call(Want::FairLock, &["f"], Form::Wait(Some(S)), 1, 1, r.now);
    let Step::Call(c) = r.next(&mut m) else {
        panic!("a try")
    };
    assert_eq!(c.ask, Ask::Queued(S));
    let queued = Queued::Waiting {
        ahead: 1,
        owner: None,
    };
    r.reply(&mut m, Reply::Queued(Ok(queued)));
    let d = r.abandon(&mut m);
    assert!(matches!(d.leave, Some(Leave { rw: false, .. })));

    let mut w = call(
        Want::Rw(RwMode::Write),
        &["rw"],
        Form::Wait(None),
        2,
        1,
        r.now,
    );
    let Step::Call(c) = r.next(&mut w) else {
        panic!("a try")
    };
    assert_eq!(c.ask, Ask::Rw(RwMode::Write, S));
    let busy = RwAcquire::Busy {
        writer: None,
        readers: 1,
        writers_waiting: 0,
    };
    r.reply(&mut w, Reply::Rw(Ok(busy)));
    let d = r.abandon(&mut w);
    assert!(matches!(d.leave, Some(Leave { rw: true, .. })));
    // A read that tries once registers nothing and leaves nothing.
    let mut t = call(Want::Rw(RwMode::Read), &["rw"], Form::Try, 3, 1, r.now);
    let Step::Call(c) = r.next(&mut t) else {
        panic!("a try")
    };
    assert_eq!(c.ask, Ask::Rw(RwMode::Read, Duration::ZERO));
    let busy = RwAcquire::Busy {
        writer: None,
        readers: 0,
        writers_waiting: 1,
    };
    assert_eq!(r.reply(&mut t, Reply::Rw(Ok(busy))), None);
    let Step::Done(d) = r.next(&mut t) else {
        panic!("done")
    };
    assert!(matches!((d.result, d.leave), (Ok(None), None)));
}

#[test]
fn an_expired_session_is_waited_for_until_reopened_or_fails_the_call() {
    let mut r = Rig::new();
    let mut m = call(Want::Lock, &["a"], Form::Wait(None), 1, 1, r.now);
    assert!(matches!(r.next(&mut m), Step::Call(_)));
    let id = r.core.session().clone();
    r.reply(
        &mut m,
        Reply::Plain(Err(Error::SessionExpired { session: id })),
    );
    assert!(!r.core.state().is_live());
    // A reopen is coming: it waits for the new session.
    assert!(matches!(r.next(&mut m), Step::Wait(None)));
    // Expiry is terminal: the call fails.
    r.coming = false;
    let Step::Done(d) = r.next(&mut m) else {
        panic!("failed")
    };
    assert!(matches!(d.result, Err(Error::SessionExpired { .. })));
    // A reply for a session replaced since reads as its expiry.
    let mut r = Rig::new();
    let mut m = call(Want::Lock, &["a"], Form::Wait(None), 1, 1, r.now);
    assert!(matches!(r.next(&mut m), Step::Call(_)));
    let old = r.core.session().clone();
    r.core = Rig::new().core;
    let granted = Reply::Plain(Ok(Acquire::Acquired(term("a", 1))));
    assert_eq!(r.reply(&mut m, granted), None);
    assert!(matches!(r.next(&mut m), Step::Call(c) if c.session != old));
}
