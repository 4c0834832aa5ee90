//! Round trips, counted by a scripting port of the tests' own: read-write calls and a
//! cluster's lease calls take one each.

use crate::common::*;
use crate::rw::rw_granted;
use simba_lease::backends::redis::{
    ConnectOptions, LuaScript, PubSubEvent, RedisBackend, RedisConfig, RedisScripting, Reply, Role,
    StandaloneScripting,
};
use simba_lease::spi::{Acquire, LeaseBackend, RwAcquire, RwMode};
use simba_lease::{Error, LeaseName, Metadata};
use std::sync::Arc;
use std::time::Duration;

/// A scripting port that counts round trips: each call, and each batch (pipelined to every
/// node at once) as one.
struct Counting {
    inner: Arc<dyn RedisScripting>,
    trips: std::sync::atomic::AtomicUsize,
}

impl Counting {
    fn trip(&self) {
        self.trips.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl RedisScripting for Counting {
    fn clustered(&self) -> bool {
        self.inner.clustered()
    }
    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> simba_lease::Result<Reply> {
        self.trip();
        self.inner.eval(role, script, keys, args)
    }
    fn eval_then_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        wait_if: &dyn Fn(&Reply) -> bool,
        replicas: u32,
        timeout: Duration,
    ) -> simba_lease::Result<(Reply, Option<u32>)> {
        self.trip();
        self.inner
            .eval_then_wait(script, keys, args, wait_if, replicas, timeout)
    }
    fn eval_many(
        &self,
        role: Role,
        calls: &[simba_lease::backends::redis::ScriptCall<'_>],
    ) -> simba_lease::Result<Vec<Reply>> {
        self.trip();
        self.inner.eval_many(role, calls)
    }
    fn command(&self, role: Role, args: &[&str]) -> simba_lease::Result<Reply> {
        self.trip();
        self.inner.command(role, args)
    }
    fn scan(&self, pattern: &str, limit: usize) -> simba_lease::Result<Vec<String>> {
        self.inner.scan(pattern, limit)
    }
    fn listen(
        &self,
        name: &str,
        patterns: &[String],
        idle: Duration,
        on_event: &mut dyn FnMut(PubSubEvent<'_>) -> bool,
    ) -> simba_lease::Result<()> {
        self.inner.listen(name, patterns, idle, on_event)
    }
}

/// A backend (routed by slot on the cluster) whose scripting port counts round trips.
fn counted(cluster: bool) -> (Arc<Isolated>, Arc<Counting>) {
    let inner: Arc<dyn RedisScripting> = if cluster {
        let seeds: Vec<String> = cluster_url()
            .trim_start_matches("redis+cluster://")
            .split(',')
            .map(|h| format!("redis://{h}"))
            .collect();
        Arc::new(
            simba_lease::backends::redis::ClusterScripting::new(&seeds, ConnectOptions::default())
                .unwrap(),
        )
    } else {
        Arc::new(StandaloneScripting::new(&standalone_url(), ConnectOptions::default()).unwrap())
    };
    let counting = Arc::new(Counting {
        inner,
        trips: Default::default(),
    });
    let prefix = random_prefix();
    let cfg = RedisConfig {
        prefix: prefix.clone(),
        route_by_slot: cluster,
        ..RedisConfig::default()
    };
    let b = Arc::new(Isolated {
        inner: RedisBackend::new(counting.clone(), cfg).unwrap(),
        prefix,
    });
    (b, counting)
}

/// Read-write acquire, release and leave take one round trip each on one server and on a
/// cluster, also for a session with a lock-delay; on a cluster a keep-alive of a session
/// holding only read-write locks takes the session call and one batch, as with leases.
fn rw_calls_take_one_round_trip(cluster: bool) {
    let (b, counting) = counted(cluster);
    let trips = |what: &str, expected: usize, f: &mut dyn FnMut()| {
        let before = counting.trips.load(std::sync::atomic::Ordering::SeqCst);
        f();
        let took = counting.trips.load(std::sync::atomic::Ordering::SeqCst) - before;
        assert_eq!(took, expected, "{what}: {took} round trips");
        eprintln!(
            "{} {what}: {took}",
            if cluster { "cluster" } else { "one server" }
        );
    };
    let long = Duration::from_secs(30);
    let r = b
        .open(&simba_lease::spi::SessionSpec::new(long, &Metadata::default()).lock_delay(long))
        .unwrap()
        .id;
    let w = open(&*b, long);
    let name = LeaseName::new("rw-trips").unwrap();
    let mut t = None;
    trips("read acquire", 1, &mut || {
        t = Some(rw_granted(
            b.acquire_rw(&r, &name, RwMode::Read, long).unwrap(),
            "read",
        ));
    });
    let t = t.unwrap();
    trips("asking again", 1, &mut || {
        rw_granted(
            b.acquire_rw(&r, &name, RwMode::Read, long).unwrap(),
            "again",
        );
    });
    trips("a writer queued", 1, &mut || {
        assert!(matches!(
            b.acquire_rw(&w, &name, RwMode::Write, long).unwrap(),
            RwAcquire::Busy { .. }
        ));
    });
    // The first keep-alive of a cluster backend reads the slot map (then every 30 s).
    b.keep_alive(&w, long).unwrap();
    trips("keep-alive", if cluster { 2 } else { 1 }, &mut || {
        b.keep_alive(&w, long).unwrap();
    });
    trips("leave", 1, &mut || {
        assert!(b.leave_rw_queue(&w, &name).unwrap())
    });
    trips("release", 1, &mut || {
        assert!(b.release_rw(&r, &name, RwMode::Read, t.token).unwrap())
    });
    trips("state", 1, &mut || {
        b.rw_state(&name).unwrap();
    });
    rw_granted(b.acquire_rw(&r, &name, RwMode::Read, long).unwrap(), "read");
    // Close as without read-write locks: one script (cluster: the session's, a batch, the
    // index's `DEL`).
    trips("close", if cluster { 3 } else { 1 }, &mut || {
        b.close_session(&r).unwrap()
    });
    let st = b.rw_state(&name).unwrap();
    assert!(st.readers.is_empty() && st.delayed.is_empty(), "{st:?}");
    b.close_session(&w).unwrap();
}

#[test]
fn rw_calls_take_one_round_trip_standalone() {
    rw_calls_take_one_round_trip(false);
}

#[test]
fn rw_calls_take_one_round_trip_cluster() {
    rw_calls_take_one_round_trip(true);
}

/// On a cluster, an acquire of a session this backend knows live (opened or kept alive here)
/// takes one round trip: the session call and the lease call as one batch (one more to take
/// the name out of the index when it is held by another); a release takes no `PTTL` first.
/// A session this backend knows nothing of goes the session call first, as before; one closed
/// through another backend is found gone by the batch, and a term it began is undone.
#[test]
fn lease_calls_take_one_round_trip_cluster() {
    let (b, counting) = counted(true);
    let other = RedisBackend::connect(&with_options(
        &cluster_url(),
        &format!("prefix={}", b.prefix),
    ))
    .unwrap();
    let trips = |what: &str, expected: usize, f: &mut dyn FnMut()| {
        let before = counting.trips.load(std::sync::atomic::Ordering::SeqCst);
        f();
        let took = counting.trips.load(std::sync::atomic::Ordering::SeqCst) - before;
        assert_eq!(took, expected, "{what}: {took} round trips");
        eprintln!("cluster {what}: {took}");
    };
    let long = Duration::from_secs(30);
    let (s, t) = (open(&*b, long), open(&*b, long));
    // The first keep-alive reads the slot map: terms are then bound to anchors.
    b.keep_alive(&s, long).unwrap();
    let name = LeaseName::new("lease-trips").unwrap();
    let mut token = None;
    trips("acquire", 1, &mut || match b.acquire(&s, &name).unwrap() {
        Acquire::Acquired(term) => token = Some(term.token),
        Acquire::Held(_) => panic!("free"),
    });
    let token = token.unwrap();
    trips("acquire again", 1, &mut || {
        assert!(matches!(b.acquire(&s, &name).unwrap(), Acquire::Acquired(x) if x.token == token));
    });
    trips("held by another", 2, &mut || {
        assert!(matches!(b.acquire(&t, &name).unwrap(), Acquire::Held(_)));
    });
    // A waiter polling: the lease call alone, nothing to index.
    trips("held by another again", 1, &mut || {
        assert!(matches!(b.acquire(&t, &name).unwrap(), Acquire::Held(_)));
    });
    // The keep-alive still finds the term (indexed by the batch), and not the other's name.
    let ka = b.keep_alive(&s, long).unwrap();
    assert_eq!(ka.leases.len(), 1);
    assert_eq!(ka.leases[0].token, token);
    assert!(b.keep_alive(&t, long).unwrap().leases.is_empty());
    trips("release", 2, &mut || {
        assert!(b.release(&s, &name, token).unwrap())
    });
    // The waiter's grant: the lease call, then the session call indexes it.
    let mut token = None;
    trips(
        "acquire after waiting",
        2,
        &mut || match b.acquire(&t, &name).unwrap() {
            Acquire::Acquired(term) => token = Some(term.token),
            Acquire::Held(_) => panic!("free"),
        },
    );
    let token = token.unwrap();
    let ka = b.keep_alive(&t, long).unwrap();
    assert_eq!(ka.leases.len(), 1, "indexed: the keep-alive finds it");
    assert_eq!(ka.leases[0].token, token);
    trips("acquire again after waiting", 1, &mut || {
        assert!(matches!(b.acquire(&t, &name).unwrap(), Acquire::Acquired(x) if x.token == token));
    });
    trips("release after waiting", 2, &mut || {
        assert!(b.release(&t, &name, token).unwrap())
    });
    // Opened through another backend: no deadline known here, the session call first.
    let u = open(&other, long);
    let mut token = None;
    trips(
        "acquire, session unknown",
        2,
        &mut || match b.acquire(&u, &name).unwrap() {
            Acquire::Acquired(term) => token = Some(term.token),
            Acquire::Held(_) => panic!("free"),
        },
    );
    trips("release, session unknown", 3, &mut || {
        assert!(b.release(&u, &name, token.unwrap()).unwrap())
    });
    // Closed through another backend while this one still knows a deadline ahead: the batch
    // finds it gone, the term it began is undone and the name is free.
    let v = open(&*b, long);
    other.close_session(&v).unwrap();
    assert!(matches!(
        b.acquire(&v, &name),
        Err(Error::SessionExpired { .. })
    ));
    assert!(b.owner(&name).unwrap().is_none(), "the term was undone");
    // Once found gone it is forgotten: the session call first again.
    trips("acquire, session found gone", 1, &mut || {
        assert!(b.acquire(&v, &name).is_err());
    });
    // The same through the lease call first (a waiter whose session was closed elsewhere).
    let w = open(&*b, long);
    let t2 = acquired(&*b, &t, &name);
    assert!(matches!(b.acquire(&w, &name).unwrap(), Acquire::Held(_)));
    other.close_session(&w).unwrap();
    assert!(b.release(&t, &name, t2.token).unwrap());
    assert!(matches!(
        b.acquire(&w, &name),
        Err(Error::SessionExpired { .. })
    ));
    assert!(b.owner(&name).unwrap().is_none(), "the term was undone");
    assert!(matches!(
        b.acquire(&t, &name).unwrap(),
        Acquire::Acquired(_)
    ));
    for x in [&s, &t, &u] {
        b.close_session(x).unwrap();
    }
}
