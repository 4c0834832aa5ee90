//! Terms on every layout: tokens survive a session's deletion and expiry, and a re-acquire
//! reports no more than the lease node has left.

use crate::common::*;
use simba_lease::spi::LeaseBackend;
use simba_lease::{LeaseName, SessionId};
use std::sync::Arc;
use std::time::Duration;

fn token_survives_session_del_and_expiry(make: fn() -> Arc<Isolated>) {
    let b = make();
    let name = LeaseName::new("durable").unwrap();
    let short = Duration::from_millis(500);
    let s1 = open(&*b, short);
    let t1 = acquired(&*b, &s1, &name);
    // The lease hash never expires.
    assert_eq!(b.command(&["PTTL", &b.lease_key(&name)]).as_int(), Some(-1));
    b.command(&["DEL", &b.session_key(&s1)]);
    assert!(b.keep_alive(&s1, short).unwrap_err().is_session_expired());
    let s2 = open(&*b, Duration::from_secs(60));
    let t2 = acquired_until("s2 takes the lease of the deleted session", &*b, &s2, &name);
    assert!(t2.token > t1.token, "{} after {}", t2.token, t1.token);
    assert!(b.release(&s2, &name, t2.token).unwrap());
    // Expiry: s3's session runs out, s4 takes over with a greater token.
    let s3 = open(&*b, short);
    let t3 = acquired(&*b, &s3, &name);
    assert!(t3.token > t2.token);
    until("s3's session expires", || {
        b.command(&["EXISTS", &b.session_key(&s3)]).as_int() == Some(0)
    });
    let s4 = open(&*b, Duration::from_secs(60));
    let t4 = acquired_until("s4 takes over after s3's expiry", &*b, &s4, &name);
    assert!(t4.token > t3.token);
    b.close_session(&s2).unwrap();
    b.close_session(&s4).unwrap();
}

#[test]
fn token_survives_session_del_and_expiry_standalone() {
    token_survives_session_del_and_expiry(standalone);
}

#[test]
fn token_survives_session_del_and_expiry_cluster() {
    token_survives_session_del_and_expiry(cluster);
}

/// Issue 9.1: a re-acquire by the holder reports what the lease node has left, not the
/// session's remaining time, when the term ends first.
fn reacquire_reports_no_more_than_the_lease_node_has_left(make: fn() -> Arc<Isolated>) {
    let b = make();
    let s = open(&*b, Duration::from_secs(60));
    let name =
        LeaseName::new(format!("short-term-{}", &SessionId::random().as_str()[..8])).unwrap();
    let first = acquired(&*b, &s, &name);
    // The lease node's term now ends in 2 s (its clock), the session has about a minute.
    let ends = server_now_ms(&b) + 2000;
    b.command(&["HSET", &b.lease_key(&name), "expires", &ends.to_string()]);
    let again = acquired(&*b, &s, &name);
    assert_eq!(again.token, first.token, "the same term");
    assert!(
        again.remaining <= Duration::from_secs(2),
        "the term has at most 2 s left on the lease node, reported {:?}",
        again.remaining
    );
    b.close_session(&s).unwrap();
}

#[test]
fn reacquire_reports_no_more_than_the_lease_node_has_left_routed_standalone() {
    reacquire_reports_no_more_than_the_lease_node_has_left(routed_standalone);
}

#[test]
fn reacquire_reports_no_more_than_the_lease_node_has_left_cluster() {
    reacquire_reports_no_more_than_the_lease_node_has_left(cluster);
}

#[test]
fn reacquire_reports_no_more_than_the_lease_node_has_left_standalone() {
    reacquire_reports_no_more_than_the_lease_node_has_left(standalone);
}
