//! The primary with `wait_replicas = 1` and its replica: while the replica is paused,
//! acquisitions fail clearly and leave no lease.

use crate::common::*;
use simba_lease::backends::redis::{RedisBackend, Role};
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{Error, LeaseName};
use std::time::Duration;

#[test]
fn replica_paused_acquisitions_fail_clearly_and_leave_no_lease() {
    REPLICA_GATE.exclusive(|| {
        let b = Isolated::new(&primary_url(), "&wait_replicas=1&query_timeout=1500ms");
        let s = open(&b, Duration::from_secs(60));
        let before = acquired(&b, &s, &LeaseName::new("before-pause").unwrap());
        let replica = RedisBackend::connect(&replica_url()).expect("replica");
        // The pause ends on its own (a paused replica does not answer CLIENT UNPAUSE either).
        replica
            .scripting()
            .command(Role::Other, &["CLIENT", "PAUSE", "5000", "ALL"])
            .expect("CLIENT PAUSE on the replica");
        for i in 0..2 {
            let name = LeaseName::new(format!("paused-{i}")).unwrap();
            let err = b
                .acquire(&s, &name)
                .expect_err("no replica acknowledged the term");
            let msg = err.report().to_string();
            assert!(matches!(err, Error::Backend { .. }), "{err:?}");
            assert!(msg.contains("replicas acknowledged"), "{msg}");
            assert_eq!(
                b.owner(&name).unwrap(),
                None,
                "the failed term was released"
            );
            let ka = b.keep_alive(&s, Duration::from_secs(60)).unwrap();
            assert!(ka.leases.iter().all(|l| l.name != name), "{ka:?}");
        }
        // A term granted before the pause is still held (re-acquire is the same term and
        // needs no new acknowledgement).
        let again = acquired(&b, &s, &before.name);
        assert_eq!(again.token, before.token);
        // Once the replica answers again, acquisitions count.
        let name = LeaseName::new("after-pause").unwrap();
        let mut got = None;
        until(
            "an acquisition succeeds after the replica is back",
            || match b.acquire(&s, &name) {
                Ok(Acquire::Acquired(t)) => {
                    got = Some(t);
                    true
                }
                _ => false,
            },
        );
        assert!(got.unwrap().token.get() >= 1);
        b.close_session(&s).unwrap();
    });
}
