//! Issue 11.3: one-node keep-alive cost independent of what the session holds (the
//! keep-alive script's raw replies), and bound terms and memberships that end with their
//! session.

use crate::common::*;
use simba_lease::backends::redis::{LuaScript, RedisBackend, Reply, Role};
use simba_lease::spi::{Acquire, KeepAlive, LeaseBackend};
use simba_lease::{GroupName, LeaseName, SessionId};
use std::time::Duration;

/// The one-node keep-alive script (with the shared helpers), called directly.
fn keep_alive_script() -> LuaScript {
    LuaScript::new(
        "keep_alive_probe",
        format!(
            "{}\n{}",
            include_str!("../../lua/common.lua"),
            include_str!("../../lua/keep_alive.lua")
        ),
    )
}

/// Calls the one-node keep-alive script for `s` with the version `known`; its reply.
fn raw_keep_alive(b: &Isolated, s: &SessionId, known: &str) -> Vec<Reply> {
    let skey = b.session_key(s);
    let keys = [
        skey.clone(),
        format!("{skey}:leases"),
        format!("{skey}:groups"),
        format!("{skey}:delay"),
        format!("{skey}:rw"),
    ];
    let args = [
        s.to_string(),
        "60000".to_owned(),
        format!("{}:lease:", b.prefix),
        format!("{}:group:", b.prefix),
        format!("{}:session:", b.prefix),
        known.to_owned(),
        format!("{}:rw:", b.prefix),
    ];
    let r = b
        .inner
        .scripting()
        .eval(Role::KeepAlive, &keep_alive_script(), &keys, &args)
        .unwrap();
    r.as_array().expect("an array").to_vec()
}

fn held_names(ka: &KeepAlive) -> Vec<String> {
    let mut names: Vec<String> = ka.leases.iter().map(|l| l.name.to_string()).collect();
    names.sort();
    names
}

#[test]
fn one_node_keep_alive_lists_leases_only_when_they_changed() {
    let b = standalone();
    let s = open(&*b, Duration::from_secs(60));
    let names: Vec<LeaseName> = (0..50)
        .map(|i| LeaseName::new(format!("bound-{i:02}")).unwrap())
        .collect();
    for n in &names {
        acquired(&*b, &s, n);
    }
    let all: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    // The backend lists every lease, whether the script listed them or said "unchanged".
    for _ in 0..3 {
        assert_eq!(
            held_names(&b.keep_alive(&s, Duration::from_secs(60)).unwrap()),
            all
        );
    }
    // The terms do not carry an expiry of their own: the session's hash is their lifetime.
    for n in &names {
        let e = b.command(&["HGET", &b.lease_key(n), "expires"]);
        assert_eq!(e.as_str(), Some("9000000000000000"), "{n}");
    }
    // The script itself: with the current version it answers three values, no names.
    let v = b.command(&["HGET", &b.session_key(&s), "v"]);
    let v = v.as_str().expect("a version").to_owned();
    let unchanged = raw_keep_alive(&b, &s, &v);
    assert_eq!(unchanged.len(), 3, "{unchanged:?}");
    assert_eq!(unchanged[2].as_int(), Some(0));
    // With an older version (or none) it lists them all (and the read-write terms: none).
    let full = raw_keep_alive(&b, &s, "");
    assert_eq!(full.len(), 5);
    assert_eq!(full[2].as_int(), Some(1));
    assert_eq!(
        full[3].as_array().map(<[Reply]>::len),
        Some(2 * names.len())
    );
    assert_eq!(full[4].as_array().map(<[Reply]>::len), Some(0));
    // A release and a new term each change the version, and the next keep-alive shows them.
    let t0 = acquired(&*b, &s, &names[0]);
    assert!(b.release(&s, &names[0], t0.token).unwrap());
    assert_eq!(
        held_names(&b.keep_alive(&s, Duration::from_secs(60)).unwrap()),
        all[1..].to_vec()
    );
    let again = acquired(&*b, &s, &names[0]);
    assert!(again.token > t0.token);
    let ka = b.keep_alive(&s, Duration::from_secs(60)).unwrap();
    assert_eq!(held_names(&ka), all);
    let listed = ka.leases.iter().find(|l| l.name == names[0]).unwrap();
    assert_eq!(listed.token, again.token);
    b.close_session(&s).unwrap();
}

#[test]
fn one_node_keep_alive_reports_leases_changed_behind_its_back() {
    let b = standalone();
    let s = open(&*b, Duration::from_secs(60));
    let names: Vec<LeaseName> = (0..5)
        .map(|i| LeaseName::new(format!("tampered-{i}")).unwrap())
        .collect();
    for n in &names {
        acquired(&*b, &s, n);
    }
    assert_eq!(
        b.keep_alive(&s, Duration::from_secs(60))
            .unwrap()
            .leases
            .len(),
        5
    );
    // One lease hash rewritten to another holder, one deleted: no acquire or release of the
    // session saw it, and the keep-alive's sample of its leases finds both.
    let other = SessionId::random();
    b.command(&["HSET", &b.lease_key(&names[1]), "session", other.as_str()]);
    b.command(&["DEL", &b.lease_key(&names[3])]);
    let expected: Vec<String> = [0, 2, 4].iter().map(|i| names[*i].to_string()).collect();
    until("the keep-alive lists only the leases still held", || {
        held_names(&b.keep_alive(&s, Duration::from_secs(60)).unwrap()) == expected
    });
    b.close_session(&s).unwrap();
}

#[test]
fn a_bound_term_and_membership_end_with_their_session() {
    let b = standalone();
    let name = LeaseName::new("bound-to-session").unwrap();
    let group = GroupName::new("bound-group").unwrap();
    let s1 = open(&*b, Duration::from_secs(60));
    let t1 = acquired(&*b, &s1, &name);
    b.join(&s1, &group).unwrap();
    assert_eq!(b.owner(&name).unwrap().map(|o| o.session), Some(s1.clone()));
    // The owner's remaining time is its session's.
    let left = b.owner(&name).unwrap().unwrap().remaining;
    assert!(
        left > Duration::from_secs(50) && left <= Duration::from_secs(60),
        "{left:?}"
    );
    // The session hash deleted (as an operator or eviction would): its term and membership
    // end with it, and the next term's token is greater.
    b.command(&["DEL", &b.session_key(&s1)]);
    assert_eq!(b.owner(&name).unwrap(), None);
    assert!(b.members(&group).unwrap().is_empty());
    let s2 = open(&*b, Duration::from_secs(60));
    let t2 = acquired(&*b, &s2, &name);
    assert!(t2.token > t1.token);
    assert!(!b.release(&s1, &name, t1.token).unwrap());
    b.close_session(&s2).unwrap();
}

#[test]
fn purge_removes_memberships_of_sessions_that_are_gone() {
    let b = standalone();
    let group = GroupName::new("purged-group").unwrap();
    let s1 = open(&*b, Duration::from_secs(60));
    let s2 = open(&*b, Duration::from_secs(60));
    b.join(&s1, &group).unwrap();
    b.join(&s2, &group).unwrap();
    b.command(&["DEL", &b.session_key(&s1)]);
    assert_eq!(b.purge_expired().unwrap(), 1);
    let key = format!("{}:group:{{{group}}}", b.prefix);
    assert_eq!(b.command(&["ZCARD", &key]).as_int(), Some(1));
    assert_eq!(
        b.members(&group)
            .unwrap()
            .into_iter()
            .map(|m| m.session)
            .collect::<Vec<_>>(),
        vec![s2.clone()]
    );
    b.close_session(&s2).unwrap();
}

/// Clients with and without `route_by_slot` on one server and prefix agree: a routed client
/// sees a one-node client's bound term as held for as long as its session, and takes over
/// once that session is gone.
#[test]
fn routed_and_one_node_clients_agree_on_bound_terms() {
    let one = standalone();
    let routed = RedisBackend::connect(&with_options(
        &standalone_url(),
        &format!("prefix={}&route_by_slot=true", one.prefix),
    ))
    .unwrap();
    let name = LeaseName::new("mixed-clients").unwrap();
    let s1 = open(&*one, Duration::from_secs(60));
    let t1 = acquired(&*one, &s1, &name);
    let s2 = open(&routed, Duration::from_secs(60));
    match routed.acquire(&s2, &name).unwrap() {
        Acquire::Held(o) => {
            assert_eq!(o.session, s1);
            assert_eq!(o.token, t1.token);
            assert!(o.remaining > Duration::from_secs(50), "{:?}", o.remaining);
        }
        Acquire::Acquired(t) => panic!("a routed client took a held bound term: {t:?}"),
    }
    assert_eq!(
        routed.owner(&name).unwrap().map(|o| o.session),
        Some(s1.clone())
    );
    one.close_session(&s1).unwrap();
    let t2 = acquired(&routed, &s2, &name);
    assert!(t2.token > t1.token);
    routed.close_session(&s2).unwrap();
}
