//! Terms bound to an anchor (routed by slot) or to their session hash (one node): free once
//! the anchor ended, kept in their lock-delay after it, and held by their own deadline while
//! the anchor is on another node.

use crate::common::*;
use simba_lease::backends::redis::key_slot;
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{LeaseName, Metadata, SessionId};
use std::sync::Arc;
use std::time::Duration;

/// A term whose anchor ended (the session's keep-alives stopped reaching its node) is free
/// for others at once, and its holder's next keep-alive reports it lost.
fn a_term_whose_anchor_ended_is_free_and_reported_lost(make: fn() -> Arc<Isolated>) {
    let b = make();
    let lease = Duration::from_secs(30);
    let (s1, s2) = (open(&*b, lease), open(&*b, lease));
    let name = LeaseName::new(format!(
        "anchor-ended-{}",
        &SessionId::random().as_str()[..8]
    ))
    .unwrap();
    let first = acquired(&*b, &s1, &name);
    assert_eq!(b.keep_alive(&s1, lease).unwrap().leases.len(), 1);
    let anchor = hget(&b, &b.lease_key(&name), "anchor").expect("a bound term");
    assert!(matches!(b.acquire(&s2, &name).unwrap(), Acquire::Held(_)));
    b.command(&["DEL", &anchor]);
    assert_eq!(
        b.owner(&name).unwrap(),
        None,
        "no live holder once the anchor is gone"
    );
    let second = acquired(&*b, &s2, &name);
    assert!(second.token > first.token);
    assert!(
        b.keep_alive(&s1, lease).unwrap().leases.is_empty(),
        "the old holder learns of the loss"
    );
    assert_eq!(b.owner(&name).unwrap().unwrap().session, s2);
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

#[test]
fn a_term_whose_anchor_ended_is_free_and_reported_lost_cluster() {
    a_term_whose_anchor_ended_is_free_and_reported_lost(cluster);
}

#[test]
fn a_term_whose_anchor_ended_is_free_and_reported_lost_routed_standalone() {
    a_term_whose_anchor_ended_is_free_and_reported_lost(routed_standalone);
}

/// Lock-delay, routed: a term bound to its session's anchor records the session's delay, and
/// the anchor's epoch has a delay record expiring the delay after the anchor; once the anchor
/// ended (here deleted, as a crash would let it expire), the term blocks its name while that
/// record lives, and is free once it is gone. The holder's close after its end changes
/// nothing.
fn an_anchored_term_keeps_its_lock_delay_after_its_anchor_ended(make: fn() -> Arc<Isolated>) {
    let b = make();
    let (lease, delay) = (Duration::from_secs(30), Duration::from_secs(60));
    let s1 = b
        .open(&simba_lease::spi::SessionSpec::new(lease, &Metadata::default()).lock_delay(delay))
        .unwrap()
        .id;
    let s2 = open(&*b, lease);
    let name = LeaseName::new(format!(
        "anchor-delay-{}",
        &SessionId::random().as_str()[..8]
    ))
    .unwrap();
    let first = acquired(&*b, &s1, &name);
    assert_eq!(b.keep_alive(&s1, lease).unwrap().leases.len(), 1);
    let key = b.lease_key(&name);
    let anchor = hget(&b, &key, "anchor").expect("a bound term");
    let epoch = hget(&b, &key, "epoch").expect("its epoch");
    assert_eq!(hget(&b, &key, "delay").as_deref(), Some("60000"));
    let record = format!("{anchor}:delay:{epoch}");
    let ttl = |k: &str| b.command(&["PTTL", k]).as_int().unwrap();
    assert!(
        ttl(&record) > ttl(&anchor) + 50_000,
        "the record outlives the anchor"
    );
    // The session ended (its hash and its anchor gone, as if both expired).
    b.command(&["DEL", &anchor, &b.session_key(&s1)]);
    let o = b.owner(&name).unwrap().expect("blocked in its delay");
    assert_eq!((&o.session, o.token), (&s1, first.token));
    assert!(o.remaining > lease && o.remaining <= lease + delay, "{o:?}");
    match b.acquire(&s2, &name).unwrap() {
        Acquire::Held(h) => assert_eq!(h.session, s1),
        got => panic!("taken in its delay: {got:?}"),
    }
    b.close_session(&s1).unwrap();
    assert!(matches!(b.acquire(&s2, &name).unwrap(), Acquire::Held(_)));
    b.command(&["DEL", &record]);
    let second = acquired(&*b, &s2, &name);
    assert!(second.token > first.token);
    b.close_session(&s2).unwrap();
}

#[test]
fn an_anchored_term_keeps_its_lock_delay_after_its_anchor_ended_cluster() {
    an_anchored_term_keeps_its_lock_delay_after_its_anchor_ended(cluster);
}

#[test]
fn an_anchored_term_keeps_its_lock_delay_after_its_anchor_ended_routed_standalone() {
    an_anchored_term_keeps_its_lock_delay_after_its_anchor_ended(routed_standalone);
}

/// Lock-delay, one node: the session's delay record expires the delay after the session
/// hash; once the hash is gone (here deleted, as its expiry would), its bound terms block
/// their names while the record lives; closing the expired session changes nothing.
#[test]
fn a_bound_term_keeps_its_lock_delay_after_its_session_ended() {
    let b = standalone();
    let (lease, delay) = (Duration::from_secs(30), Duration::from_secs(60));
    let s1 = b
        .open(&simba_lease::spi::SessionSpec::new(lease, &Metadata::default()).lock_delay(delay))
        .unwrap()
        .id;
    let s2 = open(&*b, lease);
    let name = LeaseName::new(format!(
        "bound-delay-{}",
        &SessionId::random().as_str()[..8]
    ))
    .unwrap();
    let first = acquired(&*b, &s1, &name);
    b.keep_alive(&s1, lease).unwrap();
    let session = b.session_key(&s1);
    let record = format!("{session}:delay");
    let ttl = |k: &str| b.command(&["PTTL", k]).as_int().unwrap();
    assert!(
        ttl(&record) > ttl(&session) + 50_000,
        "the record outlives the session"
    );
    b.command(&["DEL", &session]);
    let o = b.owner(&name).unwrap().expect("blocked in its delay");
    assert_eq!((&o.session, o.token), (&s1, first.token));
    assert!(o.remaining > lease && o.remaining <= lease + delay, "{o:?}");
    b.close_session(&s1).unwrap();
    assert!(matches!(b.acquire(&s2, &name).unwrap(), Acquire::Held(h) if h.session == s1));
    assert!(
        b.list().unwrap().leases.is_empty(),
        "a term in its delay is not listed"
    );
    b.command(&["DEL", &record]);
    assert!(acquired(&*b, &s2, &name).token > first.token);
    b.close_session(&s2).unwrap();
}

/// After a resharding, a term's node may no longer serve its anchor's slot: the term then
/// lives by its own deadline alone (its holder counts on no more), and is free after it.
#[test]
fn a_term_whose_anchor_is_on_another_node_lives_by_its_own_deadline() {
    let b = cluster();
    let owners = slot_owners(&b);
    let lease = Duration::from_secs(30);
    let (s1, s2) = (open(&*b, lease), open(&*b, lease));
    let name = LeaseName::new(format!("moved-{}", &SessionId::random().as_str()[..8])).unwrap();
    let first = acquired(&*b, &s1, &name);
    let key = b.lease_key(&name);
    let here = master_of(&owners, key_slot(&key));
    // An anchor key of s1's on another master, as if the slots had moved.
    let elsewhere = (0u32..)
        .map(|i| format!("{}:anchor:{{t{i}}}:{s1}", b.prefix))
        .find(|k| master_of(&owners, key_slot(k)) != here)
        .unwrap();
    b.command(&["SET", &elsewhere, "e1", "PX", "60000"]);
    let ends = server_now_ms(&b) + 1500;
    b.command(&[
        "HSET",
        &key,
        "anchor",
        &elsewhere,
        "epoch",
        "e1",
        "expires",
        &ends.to_string(),
    ]);
    assert!(
        matches!(b.acquire(&s2, &name).unwrap(), Acquire::Held(o) if o.session == s1),
        "held while its own deadline is ahead"
    );
    until("the term's own deadline passes", || {
        server_now_ms(&b) > ends
    });
    let second = acquired(&*b, &s2, &name);
    assert!(second.token > first.token);
    b.command(&["DEL", &elsewhere]);
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}
