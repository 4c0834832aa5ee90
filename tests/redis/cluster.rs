//! The shared 3-master cluster: one operation spans three masters, keep-alives renew by node
//! (one anchor per node, not every term), and a scan from one seed reaches every primary.

use crate::common::*;
use simba_lease::backends::redis::key_slot;
use simba_lease::spi::LeaseBackend;
use simba_lease::{GroupName, LeaseName};
use std::time::Duration;

#[test]
fn cluster_operation_spans_three_masters() {
    let b = cluster();
    let owners = slot_owners(&b);
    let node_of = |key: &str| {
        let slot = key_slot(key) as i64;
        owners
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|o| o.2)
            .expect("every slot is served")
    };
    let nodes: std::collections::BTreeSet<i64> = owners.iter().map(|o| o.2).collect();
    assert_eq!(nodes.len(), 3, "{owners:?}");
    let s = open(&*b, Duration::from_secs(60));
    let session_node = node_of(&b.session_key(&s));
    assert_eq!(
        b.command(&["CLUSTER", "KEYSLOT", &b.session_key(&s)])
            .as_int(),
        Some(key_slot(&b.session_key(&s)) as i64)
    );
    // A lease on a second master, a group on the third.
    let pick = |kind: &str, avoid: &[i64]| {
        (0..)
            .map(|i| format!("{kind}-{i}"))
            .find(|n| {
                let key = format!("{}:{kind}:{{{n}}}", b.prefix);
                !avoid.contains(&node_of(&key))
            })
            .unwrap()
    };
    let lease = LeaseName::new(pick("lease", &[session_node])).unwrap();
    let lease_node = node_of(&b.lease_key(&lease));
    let group = GroupName::new(pick("group", &[session_node, lease_node])).unwrap();
    let group_node = node_of(&format!("{}:group:{{{group}}}", b.prefix));
    assert_eq!(
        [session_node, lease_node, group_node]
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3
    );
    let t = acquired(&*b, &s, &lease);
    b.join(&s, &group).unwrap();
    let ka = b.keep_alive(&s, Duration::from_secs(60)).unwrap();
    assert_eq!(ka.leases.len(), 1);
    assert_eq!(
        (ka.leases[0].name.clone(), ka.leases[0].token),
        (lease.clone(), t.token)
    );
    assert_eq!(b.members(&group).unwrap().len(), 1);
    assert_eq!(b.owner(&lease).unwrap().map(|o| o.token), Some(t.token));
    b.close_session(&s).unwrap();
    assert_eq!(b.owner(&lease).unwrap(), None);
    assert!(b.members(&group).unwrap().is_empty());
    // Everything of the session is gone, the token stays.
    assert_eq!(
        b.command(&["EXISTS", &format!("{}:leases", b.session_key(&s))])
            .as_int(),
        Some(0)
    );
    assert_eq!(
        b.command(&["HGET", &b.lease_key(&lease), "token"]).as_int(),
        Some(t.token.get() as i64)
    );
}

/// A cluster keep-alive renews every term of the session on every master (one script per
/// node): after a keep-alive with a six times longer lease, each lease hash's expiry moved
/// by most of the difference.
#[test]
fn cluster_keep_alive_renews_terms_on_every_master() {
    let b = cluster();
    let owners = slot_owners(&b);
    let s = open(&*b, Duration::from_secs(10));
    let names: Vec<LeaseName> = (0..60)
        .map(|i| LeaseName::new(format!("many-{i}")).unwrap())
        .collect();
    let expires = |n: &LeaseName| {
        b.command(&["HGET", &b.lease_key(n), "expires"])
            .as_str()
            .and_then(|e| e.parse::<i64>().ok())
            .expect("a term's expiry")
    };
    let mut nodes = std::collections::BTreeSet::new();
    for n in &names {
        acquired(&*b, &s, n);
        let slot = key_slot(&b.lease_key(n)) as i64;
        nodes.extend(
            owners
                .iter()
                .filter(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
                .map(|o| o.2),
        );
    }
    assert_eq!(nodes.len(), 3, "the leases span the three masters");
    let before: Vec<i64> = names.iter().map(expires).collect();
    let by_node = b.inner.keep_alives_by_node();
    let ka = b.keep_alive(&s, Duration::from_secs(60)).unwrap();
    assert_eq!(
        b.inner.keep_alives_by_node(),
        by_node + 1,
        "one script per node, not slot by slot"
    );
    assert_eq!(ka.leases.len(), names.len());
    for (n, was) in names.iter().zip(before) {
        let now = expires(n);
        assert!(now - was >= 40_000, "{n}: expiry {was} -> {now}");
    }
    b.close_session(&s).unwrap();
}

/// Issue 11.3: a cluster keep-alive renews one anchor per node; the terms bound to it are
/// not rewritten (but for a small sample), whatever their number.
#[test]
fn cluster_keep_alive_renews_one_anchor_per_node_not_every_term() {
    let b = cluster();
    let owners = slot_owners(&b);
    let s = open(&*b, Duration::from_secs(10));
    let names: Vec<LeaseName> = (0..60)
        .map(|i| LeaseName::new(format!("anchored-{i}")).unwrap())
        .collect();
    for n in &names {
        acquired(&*b, &s, n);
    }
    // The first keep-alive binds every term to its node's anchor.
    assert_eq!(
        b.keep_alive(&s, Duration::from_secs(10))
            .unwrap()
            .leases
            .len(),
        60
    );
    let anchors: std::collections::BTreeSet<String> = names
        .iter()
        .map(|n| {
            let key = b.lease_key(n);
            let anchor = hget(&b, &key, "anchor").expect("a bound term");
            assert!(anchor.ends_with(s.as_str()), "{anchor}");
            assert_eq!(
                master_of(&owners, key_slot(&anchor)),
                master_of(&owners, key_slot(&key)),
                "{n}: the anchor lives on the term's node"
            );
            anchor
        })
        .collect();
    assert_eq!(anchors.len(), 3, "one anchor per master: {anchors:?}");
    for a in &anchors {
        assert!(b.command(&["PTTL", a]).as_int().unwrap() > 0, "{a} expires");
    }
    let expires = |n: &LeaseName| hget(&b, &b.lease_key(n), "expires");
    let before: Vec<_> = names.iter().map(expires).collect();
    let ka = b.keep_alive(&s, Duration::from_secs(10)).unwrap();
    assert_eq!(ka.leases.len(), 60);
    let rewritten = names
        .iter()
        .zip(&before)
        .filter(|(n, was)| expires(n) != **was)
        .count();
    assert!(
        rewritten <= 2 * 3,
        "{rewritten} of 60 terms rewritten; only the sample of 2 per node may be"
    );
    b.close_session(&s).unwrap();
}

#[test]
fn cluster_scan_from_one_seed_reaches_every_primary() {
    let full = cluster_url();
    let first = full
        .trim_start_matches("redis+cluster://")
        .split(['/', '?', ','])
        .next()
        .unwrap()
        .to_owned();
    let b = Isolated::new(&format!("redis+cluster://{first}"), "");
    let s = open(&b, Duration::from_secs(30));
    let names: Vec<LeaseName> = (0..30)
        .map(|i| LeaseName::new(format!("spread-{i}")).unwrap())
        .collect();
    for n in &names {
        acquired(&b, &s, n);
    }
    let keys = b
        .inner
        .scripting()
        .scan(&format!("{}:lease:*", b.prefix), 1000)
        .unwrap();
    assert_eq!(keys.len(), names.len(), "{keys:?}");
    b.close_session(&s).unwrap();
}
