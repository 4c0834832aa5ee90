//! The `metrics` feature: a session on the memory backend publishes its keep-alive figures,
//! lock wait and hold times, the leader gauge, losses and state changes to the installed
//! recorder.
#![cfg(feature = "metrics")]

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use simba_lease::{connect, Config, Event, Session};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Everything recorded so far: the debugging recorder drains counters and histograms at each
/// snapshot, so totals are kept here.
#[derive(Default)]
struct Recorded {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    samples: HashMap<String, usize>,
}

fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

impl Recorded {
    fn take(&mut self, snap: &Snapshotter) {
        for (k, _, _, v) in snap.snapshot().into_vec() {
            let key = k.key();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            let name = self::key(key.name(), &labels);
            match v {
                DebugValue::Counter(c) => *self.counters.entry(name).or_default() += c,
                DebugValue::Gauge(g) => {
                    self.gauges.insert(name, g.into_inner());
                }
                DebugValue::Histogram(h) => *self.samples.entry(name).or_default() += h.len(),
            }
        }
    }
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters.get(&key(name, labels)).copied().unwrap_or(0)
    }
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.gauges.get(&key(name, labels)).copied()
    }
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.samples.get(&key(name, labels)).copied().unwrap_or(0)
    }
}

/// Waits until `cond` holds on everything recorded so far.
fn until(snap: &Snapshotter, r: &mut Recorded, what: &str, cond: impl Fn(&Recorded) -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        r.take(snap);
        if cond(r) {
            return;
        }
        assert!(
            Instant::now() < end,
            "not recorded within 20 s: {what}: counters {:?}, gauges {:?}, samples {:?}",
            r.counters,
            r.gauges,
            r.samples
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sessions_publish_their_figures() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let mut r = Recorded::default();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let backend = connect("memory://").unwrap();
    let config = Config::builder()
        .lease(Duration::from_millis(600))
        .renew_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let session = Session::open(backend.clone(), config).unwrap();
    until(&snap, &mut r, "keep-alive round trips", |r| {
        r.samples("simba_keep_alive_seconds", &[("backend", "memory")]) > 0
    });
    let guard = session.lock("metrics-lock").unwrap();
    guard.unlock().unwrap();
    r.take(&snap);
    assert_eq!(r.samples("simba_lock_wait_seconds", &[]), 1);
    assert_eq!(r.samples("simba_lock_hold_seconds", &[]), 1);

    let election = session.election("metrics-leader").unwrap();
    election.wait_elected(Duration::from_secs(20)).unwrap();
    until(&snap, &mut r, "the leader gauge set", |r| {
        r.gauge("simba_leader", &[("name", "metrics-leader")]) == Some(1.0)
    });

    // (After the reopen the election campaigns again and may win again: the gauge is
    // checked once the session closed.)
    // The backend forgets the session behind the engine's back: the next keep-alive finds
    // it expired, the lock held now is lost with it, and the session reopens.
    let events = session.events();
    let _held = session.lock("metrics-lost").unwrap();
    backend.close_session(&session.id()).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(Event::SessionReopened { .. }) => break,
            Ok(_) => {}
            Err(e) => panic!("no reopen within 20 s: {e}"),
        }
    }
    until(&snap, &mut r, "the loss, the expiry and the reopen", |r| {
        r.counter(
            "simba_terms_lost_total",
            &[("kind", "lock"), ("reason", "session_expired")],
        ) == 1
            && r.counter("simba_session_events_total", &[("event", "expired")]) == 1
            && r.counter("simba_session_events_total", &[("event", "reopened")]) == 1
            && r.counter(
                "simba_terms_lost_total",
                &[("kind", "election"), ("reason", "session_expired")],
            ) == 1
    });
    session.close().unwrap();
    until(&snap, &mut r, "the close", |r| {
        r.counter("simba_session_events_total", &[("event", "closed")]) == 1
    });
    assert_eq!(
        r.gauge("simba_leader", &[("name", "metrics-leader")]),
        Some(0.0)
    );
}
