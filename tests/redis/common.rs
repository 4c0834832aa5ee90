//! What every layout's tests share: the servers' URLs, a backend with a key prefix of its
//! own ([`Isolated`]) on each layout, the gate around the replica, and helpers to wait, to
//! take terms and to find a slot's master.

use simba_lease::backends::redis::{RedisBackend, Role};
use simba_lease::spi::{Acquire, Delegate, LeaseBackend, Notification};
use simba_lease::{LeaseName, Metadata, SessionId};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub(crate) fn env_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

pub(crate) fn standalone_url() -> String {
    env_url("SIMBA_REDIS_URL", "redis://127.0.0.1:6379")
}
pub(crate) fn primary_url() -> String {
    env_url("SIMBA_REDIS_PRIMARY_URL", "redis://127.0.0.1:6380")
}
pub(crate) fn replica_url() -> String {
    env_url("SIMBA_REDIS_REPLICA_URL", "redis://127.0.0.1:6381")
}
pub(crate) fn cluster_url() -> String {
    env_url(
        "SIMBA_REDIS_CLUSTER_URL",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
    )
}

/// A key prefix stamped with the time (`simbatest-<hex seconds>r<random>_`): the time lets a
/// later run sweep what a crashed case (or one that leaks its session on purpose) left behind.
pub(crate) fn random_prefix() -> String {
    simba_lease::tck::stamped_prefix("simbatest-")
}

/// Once per server and process: deletes test keys older than ten minutes.
fn sweep_stale(b: &RedisBackend, url: &str) {
    static SWEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut swept = SWEPT.lock().unwrap();
    if swept.iter().any(|u| u == url) {
        return;
    }
    swept.push(url.to_owned());
    for key in b
        .scripting()
        .scan("simbatest-*", 1_000_000)
        .unwrap_or_default()
    {
        let age = simba_lease::tck::prefix_age("simbatest-", &key);
        if age.is_some_and(|age| age > Duration::from_secs(600)) {
            let _ = b.scripting().command(Role::Other, &["DEL", &key]);
        }
    }
}

pub(crate) fn with_options(url: &str, opts: &str) -> String {
    format!("{url}{}{opts}", if url.contains('?') { '&' } else { '?' })
}

/// A gate between the cases that need the replica and the test that pauses it.
pub(crate) struct Gate {
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

pub(crate) static REPLICA_GATE: Gate = Gate {
    state: Mutex::new((0, false)),
    cv: Condvar::new(),
};

/// Shared use of the replica; dropping it ends the use.
struct SharedUse;

impl Gate {
    fn shared(&'static self) -> SharedUse {
        let mut s = self.state.lock().unwrap();
        while s.1 {
            s = self.cv.wait(s).unwrap();
        }
        s.0 += 1;
        SharedUse
    }

    pub(crate) fn exclusive<R>(&'static self, f: impl FnOnce() -> R) -> R {
        let mut s = self.state.lock().unwrap();
        while s.1 || s.0 > 0 {
            s = self.cv.wait(s).unwrap();
        }
        s.1 = true;
        drop(s);
        struct Release;
        impl Drop for Release {
            fn drop(&mut self) {
                REPLICA_GATE.state.lock().unwrap().1 = false;
                REPLICA_GATE.cv.notify_all();
            }
        }
        let _release = Release;
        f()
    }
}

impl Drop for SharedUse {
    fn drop(&mut self) {
        REPLICA_GATE.state.lock().unwrap().0 -= 1;
        REPLICA_GATE.cv.notify_all();
    }
}

/// A backend with its own key prefix that deletes its keys when dropped.
pub(crate) struct Isolated {
    pub(crate) inner: RedisBackend,
    pub(crate) prefix: String,
}

impl Isolated {
    pub(crate) fn new(base: &str, extra: &str) -> Self {
        let prefix = random_prefix();
        let url = with_options(base, &format!("prefix={prefix}{extra}"));
        let inner = RedisBackend::connect(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        sweep_stale(&inner, base);
        Isolated { inner, prefix }
    }

    pub(crate) fn command(&self, args: &[&str]) -> simba_lease::backends::redis::Reply {
        self.inner
            .scripting()
            .command(Role::Other, args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    pub(crate) fn session_key(&self, sid: &SessionId) -> String {
        format!("{}:session:{{{sid}}}", self.prefix)
    }

    pub(crate) fn lease_key(&self, name: &LeaseName) -> String {
        format!("{}:lease:{{{name}}}", self.prefix)
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        let pattern = format!("{}:*", self.prefix);
        match self.inner.scripting().scan(&pattern, 100_000) {
            Ok(keys) => {
                for k in keys {
                    let _ = self.inner.scripting().command(Role::Other, &["DEL", &k]);
                }
            }
            Err(e) => eprintln!("cleanup of {pattern} failed: {e}"),
        }
    }
}

impl Delegate for Isolated {
    fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
        f(&self.inner)
    }
}

pub(crate) fn standalone() -> Arc<Isolated> {
    Arc::new(Isolated::new(&standalone_url(), ""))
}

thread_local! {
    /// The replica gate held by the case running on this thread: released when the case's
    /// thread ends (libtest runs every test on its own thread), even if the case leaks its
    /// backend on purpose (a "crashed" session).
    static REPLICA_IN_USE: std::cell::RefCell<Option<SharedUse>> = const { std::cell::RefCell::new(None) };
}

pub(crate) fn primary_waiting() -> Arc<Isolated> {
    REPLICA_IN_USE.with(|held| {
        let mut held = held.borrow_mut();
        if held.is_none() {
            *held = Some(REPLICA_GATE.shared());
        }
    });
    Arc::new(Isolated::new(
        &primary_url(),
        "&wait_replicas=1&query_timeout=3s",
    ))
}

/// The by-slot scripts on the primary with `wait_replicas = 1` (issue 21.9: the flow the
/// cluster runs with `WAIT`, on one server with a replica).
pub(crate) fn routed_primary_waiting() -> Arc<Isolated> {
    REPLICA_IN_USE.with(|held| {
        let mut held = held.borrow_mut();
        if held.is_none() {
            *held = Some(REPLICA_GATE.shared());
        }
    });
    Arc::new(Isolated::new(
        &primary_url(),
        "&wait_replicas=1&route_by_slot=true&query_timeout=3s",
    ))
}

pub(crate) fn cluster() -> Arc<Isolated> {
    Arc::new(Isolated::new(&cluster_url(), ""))
}

pub(crate) fn routed_standalone() -> Arc<Isolated> {
    Arc::new(Isolated::new(&standalone_url(), "&route_by_slot=true"))
}

pub(crate) fn patience() -> Duration {
    Duration::from_secs(20)
}

pub(crate) fn until(what: &str, cond: impl FnMut() -> bool) {
    simba_lease::tck::until(patience(), what, cond);
}

pub(crate) fn acquired(b: &dyn LeaseBackend, s: &SessionId, name: &LeaseName) -> simba_lease::Term {
    match b.acquire(s, name).expect("acquire") {
        Acquire::Acquired(t) => t,
        Acquire::Held(o) => panic!("{name} held by {o:?}"),
    }
}

/// Retries `acquire` (as [`until`]) until `s` gets the lease; its term.
pub(crate) fn acquired_until(
    what: &str,
    b: &dyn LeaseBackend,
    s: &SessionId,
    name: &LeaseName,
) -> simba_lease::Term {
    let mut term = None;
    until(what, || match b.acquire(s, name).unwrap() {
        Acquire::Acquired(t) => {
            term = Some(t);
            true
        }
        Acquire::Held(_) => false,
    });
    term.unwrap()
}

pub(crate) fn open(b: &dyn LeaseBackend, lease: Duration) -> SessionId {
    b.open_session(lease, &Metadata::default()).unwrap().id
}

/// The slot-owning master's port of every slot, from `CLUSTER SLOTS`.
pub(crate) fn slot_owners(b: &Isolated) -> Vec<(i64, i64, i64)> {
    let r = b.command(&["CLUSTER", "SLOTS"]);
    r.as_array()
        .unwrap()
        .iter()
        .map(|range| {
            let a = range.as_array().unwrap();
            let port = a[2].as_array().unwrap()[1].as_int().unwrap();
            (a[0].as_int().unwrap(), a[1].as_int().unwrap(), port)
        })
        .collect()
}

/// The master port serving `slot`.
pub(crate) fn master_of(owners: &[(i64, i64, i64)], slot: u16) -> i64 {
    let slot = i64::from(slot);
    owners
        .iter()
        .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
        .map(|o| o.2)
        .expect("every slot is served")
}

pub(crate) fn hget(b: &Isolated, key: &str, field: &str) -> Option<String> {
    b.command(&["HGET", key, field]).as_str().map(str::to_owned)
}

/// Waits for a notification matching `pred`, skipping others.
pub(crate) fn wait_for(
    rx: &crossbeam_channel::Receiver<Notification>,
    what: &str,
    pred: impl Fn(&Notification) -> bool,
) {
    let end = Instant::now() + patience();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(n) if pred(&n) => return,
            Ok(_) => {}
            Err(_) => panic!("no notification within {:?}: {what}", patience()),
        }
    }
}

/// The server's `TIME` in epoch milliseconds (rounded down).
pub(crate) fn server_now_ms(b: &Isolated) -> i64 {
    let t = b.command(&["TIME"]);
    let t = t.as_array().unwrap();
    t[0].as_int().unwrap() * 1000 + t[1].as_int().unwrap() / 1000
}
