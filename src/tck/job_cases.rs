//! Contract cases of run-once jobs, on the backend and through `Session::run_once`.
//! A backend without jobs must refuse them with `Error::Unsupported`.

use super::{lease_name, Harness};
use crate::engine::Session;
use crate::spi::{JobClaim, LeaseBackend};
use crate::types::{SessionId, Token};
use crate::{Error, LeaseName};
use std::sync::Arc;
use std::time::Duration;

/// On a backend without jobs: both job calls and `run_once` are refused with `Unsupported`.
/// Returns whether the backend has jobs.
fn jobs_or_refused(h: &Harness, b: &Arc<dyn LeaseBackend>) -> bool {
    if b.supports_jobs() {
        return true;
    }
    let s = h.open(&**b, h.long_lease());
    let name = lease_name("job-none");
    let token = Token::new(1).expect("valid token");
    let unsupported = |r: Result<(), Error>| matches!(r, Err(Error::Unsupported { .. }));
    assert!(unsupported(b.claim_job(&s, &name, h.lease).map(drop)));
    assert!(unsupported(
        b.finish_job(&s, &name, token, h.lease).map(drop)
    ));
    let session = Session::open(b.clone(), h.config()).expect("open");
    assert!(unsupported(
        session
            .run_once(&name, h.lease, Duration::ZERO, |_| ())
            .map(drop)
    ));
    session.close().unwrap();
    b.close_session(&s).unwrap();
    false
}

fn claimed(r: crate::Result<JobClaim>, what: &str) -> Token {
    match r {
        Ok(JobClaim::Claimed { token, remaining }) => {
            assert!(!remaining.is_zero(), "{what}: a claim with no time left");
            token
        }
        other => panic!("{what}: expected a claim, got {other:?}"),
    }
}

fn busy(r: crate::Result<JobClaim>) -> bool {
    match r {
        Ok(JobClaim::Busy { .. }) => true,
        Ok(JobClaim::Claimed { .. }) => false,
        Err(e) => panic!("claiming a job: {e}"),
    }
}

/// Claims `name` for `s` as soon as it is free (within the harness's patience).
fn claim_when_free(
    h: &Harness,
    b: &dyn LeaseBackend,
    s: &SessionId,
    name: &LeaseName,
    at_most: Duration,
    what: &str,
) -> Token {
    let mut token = None;
    h.until_ok(what, || {
        Ok(match b.claim_job(s, name, at_most)? {
            JobClaim::Claimed { token: t, .. } => {
                token = Some(t);
                true
            }
            JobClaim::Busy { .. } => false,
        })
    });
    token.expect("claimed")
}

/// One claim per window across sessions, with increasing tokens: a claimed job is busy for
/// everyone (its holder too) until finished; a finish with a wrong token or by another
/// session changes nothing; a finish with no `at_least` frees the name at once; an expired
/// session cannot claim. Through `run_once`: the job runs on one session while the other is
/// refused, receives the token, and bad input is refused before any I/O.
pub fn run_once_claims_once_per_window_with_increasing_tokens(h: &Harness) {
    let b = h.backend();
    if !jobs_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    let (a, c) = (h.open(&*b, long), h.open(&*b, long));
    let name = lease_name("job");
    let t1 = claimed(b.claim_job(&a, &name, long), "a free job");
    assert!(busy(b.claim_job(&c, &name, long)), "claimed by a");
    assert!(busy(b.claim_job(&a, &name, long)), "even for its holder");
    let wrong = Token::new(t1.get() + 1).expect("valid token");
    assert!(!b.finish_job(&a, &name, wrong, Duration::ZERO).unwrap());
    assert!(!b.finish_job(&c, &name, t1, Duration::ZERO).unwrap());
    assert!(
        busy(b.claim_job(&c, &name, long)),
        "wrong finishes change nothing"
    );
    assert!(b.finish_job(&a, &name, t1, Duration::ZERO).unwrap());
    assert!(
        !b.finish_job(&a, &name, t1, Duration::ZERO).unwrap(),
        "finished once"
    );
    let t2 = claim_when_free(
        h,
        &*b,
        &c,
        &name,
        long,
        "free after a finish with no at_least",
    );
    assert!(t2 > t1, "tokens increase: {t1} then {t2}");
    assert!(b.finish_job(&c, &name, t2, Duration::ZERO).unwrap());
    let t3 = claim_when_free(h, &*b, &a, &name, long, "free again");
    assert!(t3 > t2, "tokens increase: {t2} then {t3}");
    // Jobs and leases of one name are apart.
    assert!(matches!(
        b.acquire(&c, &name).unwrap(),
        crate::spi::Acquire::Acquired(_)
    ));
    assert!(b.finish_job(&a, &name, t3, Duration::ZERO).unwrap());
    b.close_session(&a).unwrap();
    b.close_session(&c).unwrap();
    assert!(matches!(
        b.claim_job(&a, &name, long),
        Err(Error::SessionExpired { .. })
    ));

    // Through the engine.
    let one = Session::open(b.clone(), h.config()).expect("open");
    let two = Session::open(b.clone(), h.config()).expect("open");
    let name = lease_name("job-run");
    let (at_most, at_least) = (long, Duration::ZERO);
    let first = one
        .run_once(&name, at_most, at_least, |job| {
            assert!(job.is_valid());
            assert_eq!(job.check().unwrap(), job.token());
            assert_eq!(job.name(), &name);
            let other = two.run_once(&name, at_most, at_least, |_| ()).unwrap();
            assert!(other.is_none(), "the job runs on one session at a time");
            job.token()
        })
        .unwrap()
        .expect("a free job runs");
    let mut second = None;
    h.until_ok("the other session runs it next", || {
        second = two.run_once(&name, at_most, at_least, |job| job.token())?;
        Ok(second.is_some())
    });
    assert!(second.expect("ran") > first);
    for (most, least) in [
        (Duration::ZERO, Duration::ZERO),
        (h.lease, h.lease * 2),
        (crate::Config::MAX_LEASE * 2, Duration::ZERO),
    ] {
        let r = one.run_once(&name, most, least, |_| panic!("must not run"));
        assert!(
            matches!(r, Err(Error::InvalidConfig { .. })),
            "{most:?}/{least:?}: {r:?}"
        );
    }
    let r = one.run_once("bad name", long, Duration::ZERO, |_| ());
    assert!(matches!(r, Err(Error::InvalidName { .. })), "{r:?}");
    one.close().unwrap();
    two.close().unwrap();
}

/// A job that finished fast keeps its name taken until `at_least` after its claim began,
/// also once its session is closed, and frees it then.
pub fn run_once_at_least_keeps_the_name_taken_after_a_fast_job(h: &Harness) {
    let b = h.backend();
    if !jobs_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    let at_least = h.lease * 5;
    let (a, c) = (h.open(&*b, long), h.open(&*b, long));
    let name = lease_name("job-least");
    let t1 = claimed(b.claim_job(&a, &name, long), "a free job");
    assert!(b.finish_job(&a, &name, t1, at_least).unwrap());
    match b.claim_job(&c, &name, long).unwrap() {
        JobClaim::Busy { remaining } => {
            assert!(remaining <= at_least, "{remaining:?} left of {at_least:?}")
        }
        other => panic!("a fast job keeps its name taken: {other:?}"),
    }
    b.close_session(&a).unwrap();
    assert!(
        busy(b.claim_job(&c, &name, long)),
        "a finished claim does not end with its session"
    );
    let t2 = claim_when_free(h, &*b, &c, &name, long, "free after at_least");
    assert!(t2 > t1);
    b.close_session(&c).unwrap();

    // Through the engine: a second run right after a fast one is refused.
    let one = Session::open(b.clone(), h.config()).expect("open");
    let two = Session::open(b.clone(), h.config()).expect("open");
    let name = lease_name("job-least-run");
    assert!(one
        .run_once(&name, long, at_least, |_| ())
        .unwrap()
        .is_some());
    assert!(two
        .run_once(&name, long, at_least, |_| ())
        .unwrap()
        .is_none());
    h.until_ok("the name is free after at_least", || {
        Ok(two.run_once(&name, long, at_least, |_| ())?.is_some())
    });
    one.close().unwrap();
    two.close().unwrap();
}

/// A job that overruns `at_most` loses its claim even while its session is kept alive: its
/// `Job` turns invalid, another session claims the job, and the late finish changes nothing.
pub fn run_once_at_most_ends_an_overrunning_claim(h: &Harness) {
    let b = h.backend();
    if !jobs_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    let at_most = h.lease * 2;
    let one = Session::open(b.clone(), h.config()).expect("open");
    let other = h.open(&*b, long);
    let name = lease_name("job-most");
    let mut theirs = None;
    let ran = one
        .run_once(&name, at_most, Duration::ZERO, |job| {
            assert!(busy(b.claim_job(&other, &name, long)), "claimed by one");
            h.until("the overrunning job is no longer valid", || !job.is_valid());
            assert!(job.check().is_err());
            theirs = Some(claim_when_free(
                h,
                &*b,
                &other,
                &name,
                long,
                "another session claims an overrun job",
            ));
            assert!(one.state().is_live(), "the session itself lives on");
            job.token()
        })
        .unwrap()
        .expect("a free job runs");
    let theirs = theirs.expect("claimed");
    assert!(theirs > ran);
    // The overrun job's finish (after it returned) did not touch the new claim.
    assert!(busy(b.claim_job(&other, &name, long)));
    assert!(!b.finish_job(&one.id(), &name, ran, Duration::ZERO).unwrap());
    assert!(b.finish_job(&other, &name, theirs, Duration::ZERO).unwrap());
    one.close().unwrap();
    b.close_session(&other).unwrap();
}

/// A running claim of a session that was closed, or expired, is freed: at once where the
/// backend tracks sessions from the job's record, otherwise at `at_most`. A finish by the
/// ended session changes nothing. Through the engine, a job whose session is closed while it
/// runs is invalid at once, and its claim ends as well.
pub fn run_once_claim_of_an_ended_session_is_freed(h: &Harness) {
    let b = h.backend();
    if !jobs_or_refused(h, &b) {
        return;
    }
    let long = h.long_lease();
    // Without session tracking the claim must run out on its own within the patience.
    let at_most = if b.job_claims_end_with_session() {
        long
    } else {
        h.lease * 3
    };
    let other = h.open(&*b, long);
    let closed = h.open(&*b, long);
    let expiring = h.open(&*b, h.lease);
    let (n1, n2) = (lease_name("job-closed"), lease_name("job-expired"));
    let t1 = claimed(b.claim_job(&closed, &n1, at_most), "a free job");
    let t2 = claimed(b.claim_job(&expiring, &n2, at_most), "another free job");
    assert!(busy(b.claim_job(&other, &n1, long)));
    b.close_session(&closed).unwrap();
    let u1 = claim_when_free(h, &*b, &other, &n1, long, "a closed session's claim ends");
    assert!(u1 > t1);
    let u2 = claim_when_free(h, &*b, &other, &n2, long, "an expired session's claim ends");
    assert!(u2 > t2);
    assert!(!b.finish_job(&closed, &n1, t1, Duration::ZERO).unwrap());
    assert!(!b.finish_job(&expiring, &n2, t2, Duration::ZERO).unwrap());
    assert!(busy(b.claim_job(&other, &n1, long)), "still the new claim");
    // Through the engine: a job sees its session's end at once, and the claim ends with it.
    let one = Session::open(b.clone(), h.terminal_config()).expect("open");
    let n3 = lease_name("job-lost");
    let ran = one
        .run_once(&n3, at_most, Duration::ZERO, |job| {
            assert!(job.is_valid());
            one.close().unwrap();
            assert!(!job.is_valid(), "invalid once the session is closed");
            assert!(matches!(job.check(), Err(Error::LeaseLost { .. })));
            assert!(job.remaining().is_zero());
            job.token()
        })
        .unwrap()
        .expect("a free job runs");
    let u3 = claim_when_free(h, &*b, &other, &n3, long, "a lost session's claim ends");
    assert!(u3 > ran);
    h.until("the expired session cannot claim", || {
        matches!(
            b.claim_job(&expiring, &lease_name("job-late"), long),
            Err(Error::SessionExpired { .. })
        )
    });
    b.close_session(&other).unwrap();
}
