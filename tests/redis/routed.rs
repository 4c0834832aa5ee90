//! The by-slot flow (`route_by_slot`) on one server, through scripting ports of the tests'
//! own: replies after the session's time, keep-alive scripts of a slot that fails, and lost
//! leases leaving the session's index.

use crate::common::*;
use crate::rw::{rw_granted, rw_key};
use simba_lease::backends::redis::{
    key_slot, ConnectOptions, LuaScript, PubSubEvent, RedisBackend, RedisConfig, RedisScripting,
    Reply, Role, StandaloneScripting,
};
use simba_lease::spi::{Acquire, KeepAlive, LeaseBackend, RwMode};
use simba_lease::{Error, GroupName, LeaseName, SessionId};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A scripting port that answers the named script late (after running it), or delays it
/// before sending: the by-slot flow's late-reply rules, on one server.
struct Late {
    inner: StandaloneScripting,
    script: &'static str,
    before: bool,
    delay: Duration,
}

impl RedisScripting for Late {
    fn clustered(&self) -> bool {
        false
    }
    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> simba_lease::Result<Reply> {
        let late = script.name() == self.script;
        if late && self.before {
            std::thread::sleep(self.delay);
        }
        let r = self.inner.eval(role, script, keys, args);
        if late && !self.before {
            std::thread::sleep(self.delay);
        }
        r
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
        self.inner
            .eval_then_wait(script, keys, args, wait_if, replicas, timeout)
    }
    fn command(&self, role: Role, args: &[&str]) -> simba_lease::Result<Reply> {
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

fn late(script: &'static str, before: bool, delay: Duration) -> Isolated {
    late_on(random_prefix(), script, before, delay)
}

/// As [`late`], on the keys of `prefix`.
fn late_on(prefix: String, script: &'static str, before: bool, delay: Duration) -> Isolated {
    let url = standalone_url();
    let inner = StandaloneScripting::new(&url, ConnectOptions::default()).unwrap();
    let cfg = RedisConfig {
        prefix: prefix.clone(),
        route_by_slot: true,
        ..RedisConfig::default()
    };
    let b = RedisBackend::new(
        Arc::new(Late {
            inner,
            script,
            before,
            delay,
        }),
        cfg,
    )
    .unwrap();
    Isolated { inner: b, prefix }
}

/// A scripting port (one server) whose keep-alive scripts fail while they carry a given key:
/// a node or slot of a routed keep-alive that cannot be reached.
struct FailingKey {
    inner: StandaloneScripting,
    key: Mutex<Option<String>>,
}

impl RedisScripting for FailingKey {
    fn clustered(&self) -> bool {
        false
    }
    fn eval(
        &self,
        role: Role,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> simba_lease::Result<Reply> {
        let failing = self.key.lock().unwrap().clone();
        if let Some(k) = failing.filter(|_| script.name().starts_with("keep_alive_")) {
            if keys.iter().chain(args).any(|x| *x == k) {
                return Err(Error::Timeout {
                    operation: "a keep-alive script of an unreachable slot",
                    after: Duration::ZERO,
                    source: None,
                });
            }
        }
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
        self.inner
            .eval_then_wait(script, keys, args, wait_if, replicas, timeout)
    }
    fn command(&self, role: Role, args: &[&str]) -> simba_lease::Result<Reply> {
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

/// Routed, a read-write term whose slot's keep-alive script failed is not listed (the engine
/// then counts it lost), the others are and the keep-alive succeeds, as leases whose slot
/// failed; the next keep-alive that reaches the slot lists it again (its name stays known).
#[test]
fn routed_keep_alive_lists_no_read_write_term_whose_slot_failed() {
    let scripting = Arc::new(FailingKey {
        inner: StandaloneScripting::new(&standalone_url(), ConnectOptions::default()).unwrap(),
        key: Mutex::new(None),
    });
    let prefix = random_prefix();
    let cfg = RedisConfig {
        prefix: prefix.clone(),
        route_by_slot: true,
        ..RedisConfig::default()
    };
    let b = Isolated {
        inner: RedisBackend::new(scripting.clone(), cfg).unwrap(),
        prefix,
    };
    let long = Duration::from_secs(30);
    let s = open(&b, long);
    let (x, y) = (
        LeaseName::new("rw-failing-x").unwrap(),
        LeaseName::new("rw-failing-y").unwrap(),
    );
    assert_ne!(key_slot(&rw_key(&b, &x)), key_slot(&rw_key(&b, &y)));
    let tx = rw_granted(b.acquire_rw(&s, &x, RwMode::Read, long).unwrap(), "x").token;
    let ty = rw_granted(b.acquire_rw(&s, &y, RwMode::Write, long).unwrap(), "y").token;
    let listed = |ka: KeepAlive| -> Vec<(String, RwMode, u64)> {
        let mut v: Vec<_> = ka
            .rw
            .into_iter()
            .map(|t| (t.name.to_string(), t.mode, t.token.get()))
            .collect();
        v.sort();
        v
    };
    let both = vec![
        (x.to_string(), RwMode::Read, tx.get()),
        (y.to_string(), RwMode::Write, ty.get()),
    ];
    assert_eq!(listed(b.keep_alive(&s, long).unwrap()), both);
    *scripting.key.lock().unwrap() = Some(rw_key(&b, &x));
    assert_eq!(
        listed(b.keep_alive(&s, long).unwrap()),
        vec![(y.to_string(), RwMode::Write, ty.get())],
        "x's slot failed: not listed, the keep-alive succeeds"
    );
    *scripting.key.lock().unwrap() = None;
    assert_eq!(
        listed(b.keep_alive(&s, long).unwrap()),
        both,
        "reached again"
    );
    b.close_session(&s).unwrap();
}

/// A by-slot backend on which `script` answers 500 ms late, a session of 300 ms on it (so
/// the reply comes after the session's time) and that 300 ms.
fn late_reply(script: &'static str) -> (Isolated, SessionId, Duration) {
    let short = Duration::from_millis(300);
    let b = late(script, false, short + Duration::from_millis(200));
    let s = open(&b, short);
    (b, s, short)
}

#[test]
fn routed_acquire_answering_after_the_session_time_releases_and_fails() {
    let (b, s, _) = late_reply("acquire_lease");
    let name = LeaseName::new("late-reply").unwrap();
    let err = b.acquire(&s, &name).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_eq!(b.owner(&name).unwrap(), None, "the late term was released");
    // The term was begun (token 1) and released; the next one is 2.
    assert_eq!(
        b.command(&["HGET", &b.lease_key(&name), "token"]).as_int(),
        Some(1)
    );
    let other = open(&b, Duration::from_secs(30));
    let err2 = b.acquire(&other, &name);
    // `other`'s own lease call is late too, but its session lasts: it gets the lease.
    let t = match err2.unwrap() {
        Acquire::Acquired(t) => t,
        Acquire::Held(o) => panic!("held by {o:?}"),
    };
    assert_eq!(t.token.get(), 2);
    b.close_session(&other).unwrap();
}

#[test]
fn routed_acquire_sends_nothing_once_the_session_time_passed() {
    let (b, s, short) = late_reply("acquire_session");
    let name = LeaseName::new("late-session").unwrap();
    let err = b.acquire(&s, &name).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_eq!(
        b.command(&["EXISTS", &b.lease_key(&name)]).as_int(),
        Some(0),
        "no lease call was sent"
    );
    let g = GroupName::new("late-group").unwrap();
    let s2 = open(&b, short);
    let err = b.join(&s2, &g).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(b.members(&g).unwrap().is_empty());
}

#[test]
fn routed_join_answering_late_leaves_and_fails() {
    let (b, s, _) = late_reply("join_group");
    let g = GroupName::new("late-join").unwrap();
    let err = b.join(&s, &g).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let key = format!("{}:group:{{{g}}}", b.prefix);
    assert_eq!(
        b.command(&["ZCARD", &key]).as_int(),
        Some(0),
        "the late member left"
    );
}

#[test]
fn routed_keep_alive_drops_a_lost_lease_from_the_index_after_a_lease() {
    let b = routed_standalone();
    let lease = Duration::from_millis(400);
    let s = open(&*b, lease);
    let name = LeaseName::new("lost").unwrap();
    acquired(&*b, &s, &name);
    // Someone else's term now (as after a take-over the session did not see).
    let other = SessionId::random();
    b.command(&["HSET", &b.lease_key(&name), "session", other.as_str()]);
    let index = format!("{}:leases", b.session_key(&s));
    let first_miss = Instant::now();
    until("the lost lease leaves the index", || {
        let ka = b.keep_alive(&s, lease).unwrap();
        assert!(ka.leases.is_empty(), "{ka:?}");
        b.command(&["SISMEMBER", &index, name.as_str()]).as_int() == Some(0)
    });
    assert!(
        first_miss.elapsed() >= lease,
        "dropped only a lease after the first miss"
    );
    b.close_session(&s).unwrap();
}

/// Sleeps until `at` (arranging a precondition, not asserting anything).
fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Issue 9.2: a lease a keep-alive found not held, then acquired again, is not dropped from
/// the index a lease after that miss.
#[test]
fn routed_reacquired_lease_is_not_dropped_a_lease_after_a_miss() {
    let b = routed_standalone();
    let lease = Duration::from_secs(1);
    let s = open(&*b, lease);
    let name = LeaseName::new("flapping").unwrap();
    acquired(&*b, &s, &name);
    // Someone else's term for a while (as after a take-over the session did not see).
    let other = SessionId::random();
    b.command(&["HSET", &b.lease_key(&name), "session", other.as_str()]);
    let first_miss = Instant::now();
    assert!(b.keep_alive(&s, lease).unwrap().leases.is_empty());
    sleep_until(first_miss + lease / 2);
    assert!(b.keep_alive(&s, lease).unwrap().leases.is_empty());
    // That term ends; s takes the name again, a new term.
    b.command(&["HSET", &b.lease_key(&name), "session", "", "expires", "0"]);
    let t = acquired(&*b, &s, &name);
    // The next keep-alive comes a lease after the first miss: the new term stays reported.
    sleep_until(first_miss + lease + Duration::from_millis(50));
    let ka = b.keep_alive(&s, lease).unwrap();
    assert_eq!(
        ka.leases
            .iter()
            .map(|l| (&l.name, l.token))
            .collect::<Vec<_>>(),
        vec![(&name, t.token)],
        "{ka:?}"
    );
    let index = format!("{}:leases", b.session_key(&s));
    assert_eq!(
        b.command(&["SISMEMBER", &index, name.as_str()]).as_int(),
        Some(1)
    );
    b.close_session(&s).unwrap();
}

/// Issue 9.2: a routed join answering late leaves only a membership it created.
#[test]
fn routed_late_join_keeps_a_membership_it_did_not_create() {
    let prefix = random_prefix();
    let on_time = RedisBackend::connect(&with_options(
        &standalone_url(),
        &format!("prefix={prefix}&route_by_slot=true"),
    ))
    .unwrap();
    let b = late_on(prefix, "join_group", false, Duration::from_millis(500));
    let s = open(&on_time, Duration::from_secs(60));
    let g = GroupName::new("kept").unwrap();
    on_time.join(&s, &g).unwrap();
    // The session has 300 ms left, so the late join's reply comes after its time.
    b.command(&["PEXPIRE", &b.session_key(&s), "300"]);
    let err = b.join(&s, &g).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let key = format!("{}:group:{{{g}}}", b.prefix);
    assert!(
        b.command(&["ZSCORE", &key, s.as_str()]).as_int().is_some(),
        "the membership of the first join is still there"
    );
}
