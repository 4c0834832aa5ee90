//! Issue 21.6: a storm of a handled signal at the thread making calls fails none of them, on
//! one server and on the cluster.

use crate::common::*;
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{GroupName, LeaseName};
use std::time::Duration;

/// A no-op handler for the signal storm.
extern "C" fn ignore_signal(_: libc::c_int) {}

/// Issue 21.6: a storm of a handled signal (`SIGUSR1`, `SA_RESTART`) at the thread making
/// one-shot calls fails none of them. A socket read with a timeout is not restarted by
/// `SA_RESTART`: it fails with `EINTR`, which failed 1–2 % of calls (a release among them,
/// that had released). Keep-alives are among the calls, with terms on several slots (on a
/// cluster, one script per node in one batch). Returns the number of calls and of signals
/// sent, and the failures.
fn calls_under_a_signal_storm(b: &Isolated, calls: usize) -> (usize, usize, Vec<String>) {
    // SAFETY: installs a handler that does nothing (async-signal-safe) for SIGUSR1, which
    // nothing else in this test binary uses.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let lease = Duration::from_secs(60);
    let s = open(b, lease);
    let name = LeaseName::new("signal-storm").unwrap();
    let group = GroupName::new("signal-storm").unwrap();
    b.join(&s, &group).unwrap();
    // Terms spread over the slots (every node of a cluster), held through the storm.
    let spread: Vec<LeaseName> = (0..8)
        .map(|i| LeaseName::new(format!("signal-storm-{i}")).unwrap())
        .collect();
    for n in &spread {
        acquired(b, &s, n);
    }
    let (tid_tx, tid_rx) = crossbeam_channel::bounded(1);
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
    let storm = std::thread::spawn(move || {
        let target: libc::pthread_t = tid_rx.recv().unwrap();
        let mut sent = 0;
        while stop_rx.try_recv().is_err() {
            // SAFETY: the target thread waits for this thread to end before it ends.
            assert_eq!(unsafe { libc::pthread_kill(target, libc::SIGUSR1) }, 0);
            sent += 1;
            std::thread::sleep(Duration::from_micros(50));
        }
        sent
    });
    // SAFETY: pthread_self has no preconditions.
    tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
    let mut failures = Vec::new();
    let mut made = 0;
    let mut token = None;
    while made < calls {
        let r = match made % 6 {
            0 => b.acquire(&s, &name).map(|a| match a {
                Acquire::Acquired(t) => token = Some(t.token),
                Acquire::Held(o) => failures.push(format!("held by {o:?}")),
            }),
            1 => b.set_value(&s, &name, token.unwrap(), "v").map(drop),
            2 => b.owner(&name).map(drop),
            3 => b.members(&group).map(drop),
            4 => b.keep_alive(&s, lease).map(|k| {
                let held = k.leases.iter().filter(|l| spread.contains(&l.name)).count();
                if held != spread.len() {
                    failures.push(format!("a keep-alive listed {held} of the held terms"));
                }
            }),
            _ => b.release(&s, &name, token.unwrap()).map(|released| {
                if !released {
                    failures.push("a release of the held term answered false".into());
                }
            }),
        };
        if let Err(e) = r {
            failures.push(format!("call {made}: {e}"));
            // Start again from a known state.
            if let Some(t) = token {
                let _ = b.release(&s, &name, t);
            }
            made += 6 - made % 6;
            continue;
        }
        made += 1;
    }
    stop_tx.send(()).unwrap();
    let sent = storm.join().unwrap();
    b.close_session(&s).unwrap();
    (made, sent, failures)
}

#[test]
fn a_signal_storm_fails_no_call_standalone() {
    let b = standalone();
    let (calls, signals, failures) = calls_under_a_signal_storm(&b, 5000);
    eprintln!(
        "{calls} calls under {signals} signals: {} failed {:?}",
        failures.len(),
        failures.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed, the first: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

/// The same storm on the cluster: single calls go through the cluster client on our node
/// connections, batches (the keep-alives) one pipeline per node on them. With the crate's
/// connections 86–223 of 5000 calls failed (most of them a resent release answering "not
/// held"), and a keep-alive batch failed in 6–14 % of keep-alives (hidden by the fallback
/// to scripts per slot). Every keep-alive here must have gone by node: none fell back.
#[test]
fn a_signal_storm_on_the_cluster() {
    let b = cluster();
    let by_node = b.inner.keep_alives_by_node();
    let (calls, signals, failures) = calls_under_a_signal_storm(&b, 5000);
    let by_node = b.inner.keep_alives_by_node() - by_node;
    eprintln!(
        "{calls} calls under {signals} signals: {} failed {:?}; {by_node} keep-alives by node",
        failures.len(),
        failures.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed, the first: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(
        by_node as usize >= calls / 6,
        "{by_node} of {} keep-alives went by node",
        calls / 6
    );
}
