//! Hostile servers (issue 10): loopback servers that answer the backends' handshakes and then
//! reply with wrong types, garbage, huge lengths, or drop the connection mid-reply. Every SPI
//! call must return a typed error (never a panic, never `Ok` with nonsense such as a zero
//! token) within a few times its configured timeout; the Redis notifier thread must survive
//! garbage on its connection and stop when the backend is dropped.
//!
//! The SQL part also runs against the real servers (`SIMBA_POSTGRES_URL`, `SIMBA_MYSQL_URL`)
//! with tables altered behind the backend's back, so that the server itself sends values of
//! unexpected types.

#[cfg(feature = "zookeeper")]
mod zk;

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The bound every call must return within: a few times the configured timeouts (300 ms
/// each), generous on a loaded machine; a hang or a retry loop still exceeds it.
#[allow(dead_code)]
const BOUND: Duration = Duration::from_secs(8);

#[allow(unused_imports)]
use simba_lease::tck::until;

/// A loopback TCP server on an ephemeral port; each connection is served on its own thread
/// by `serve`. Dropping it closes every connection. (Like the other helpers here, it serves
/// the feature-gated modules, so with some features off parts go unused.)
#[allow(dead_code)]
struct Server {
    addr: String,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
    /// Subscriber connections (those `serve` returned `true` for) ended so far.
    closed_subscribers: Arc<AtomicUsize>,
}

impl Server {
    /// `serve` returns whether the connection was a (Redis pub/sub) subscriber.
    fn start(serve: impl Fn(usize, TcpStream) -> bool + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let closed = Arc::new(AtomicUsize::new(0));
        let serve = Arc::new(serve);
        let (st, cs, cl) = (stop.clone(), conns.clone(), closed.clone());
        let accept = std::thread::spawn(move || {
            let mut n = 0;
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        let _ = s.set_nodelay(true);
                        cs.lock().unwrap().push(s.try_clone().unwrap());
                        let (serve, cl) = (serve.clone(), cl.clone());
                        let i = n;
                        n += 1;
                        std::thread::spawn(move || {
                            if serve(i, s) {
                                cl.fetch_add(1, Ordering::SeqCst);
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Server {
            addr,
            stop,
            conns,
            accept: Some(accept),
            closed_subscribers: closed,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
    }
}

/// Asserts that `f` fails within [`BOUND`], printing what it returned otherwise.
#[allow(dead_code)]
fn fails<T: std::fmt::Debug>(what: &str, f: impl FnOnce() -> simba_lease::Result<T>) {
    let start = Instant::now();
    let r = f();
    let took = start.elapsed();
    assert!(took < BOUND, "{what} took {took:?} (bound {BOUND:?})");
    match r {
        Err(e) => eprintln!("{what}: {e}"),
        Ok(v) => panic!("{what} returned Ok({v:?}) from a hostile server"),
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use simba_lease::backends::redis::{RedisBackend, Role};
    use simba_lease::spi::{LeaseBackend, Notification, NotifySink};
    use simba_lease::{GroupName, LeaseName, Metadata, SessionId, Token};
    use std::io::{BufRead, BufReader};

    /// A command as the client sent it: its arguments.
    type Cmd = Vec<Vec<u8>>;

    /// Reads one RESP command (an array of bulk strings); `None` at the end of the stream.
    fn read_cmd(r: &mut impl BufRead) -> Option<Cmd> {
        let mut line = String::new();
        let mut head = |r: &mut dyn BufRead| -> Option<i64> {
            line.clear();
            let mut raw = Vec::new();
            if r.read_until(b'\n', &mut raw).ok()? == 0 {
                return None;
            }
            line.push_str(std::str::from_utf8(&raw).ok()?);
            line.trim_end()[1..].parse().ok()
        };
        let n = head(r)?;
        let mut args = Vec::new();
        for _ in 0..n {
            let len = head(r)? as usize;
            let mut buf = vec![0; len + 2];
            r.read_exact(&mut buf).ok()?;
            buf.truncate(len);
            args.push(buf);
        }
        Some(args)
    }

    fn upper(b: &[u8]) -> String {
        String::from_utf8_lossy(b).to_ascii_uppercase()
    }

    /// What the server does with a command the handshake does not cover.
    #[derive(Clone)]
    enum Answer {
        Send(Vec<u8>),
        SendThenClose(Vec<u8>),
        Close,
        Silence,
    }

    /// The script a command runs: named from the header comment of its Lua source (`EVAL`),
    /// or `"evalsha"` / the command name.
    fn script_of(cmd: &Cmd) -> &'static str {
        const HEADERS: &[(&str, &str)] = &[
            ("\n-- open:", "open"),
            ("\n-- keep_alive (one node)", "keep_alive"),
            ("\n-- keep_alive, session slot", "keep_alive_session"),
            ("\n-- keep_alive, one slot", "keep_alive_slot"),
            ("\n-- acquire (one node)", "acquire"),
            ("\n-- acquire or join, session slot", "acquire_session"),
            ("\n-- acquire, lease slot", "acquire_lease"),
            ("\n-- release:", "release"),
            ("\n-- owner:", "owner"),
            ("\n-- join (one node)", "join"),
            ("\n-- join, group slot", "join_group"),
            ("\n-- leave:", "leave"),
            ("\n-- members:", "members"),
            ("\n-- session_metadata", "session_metadata"),
            ("\n-- close (one node)", "close"),
            ("\n-- close, session slot", "close_session"),
            ("\n-- close, one slot", "close_slot"),
            ("\n-- purge:", "purge_group"),
            ("\n-- ping:", "ping"),
        ];
        match upper(&cmd[0]).as_str() {
            "EVAL" => {
                let src = String::from_utf8_lossy(&cmd[1]);
                HEADERS
                    .iter()
                    .find(|(h, _)| src.contains(h))
                    .map_or("unknown script", |(_, n)| n)
            }
            "EVALSHA" => "evalsha",
            "SCAN" => "scan",
            "PTTL" => "pttl",
            "SCRIPT" => "script",
            _ => "other",
        }
    }

    /// How a hostile Redis treats the pub/sub connection after confirming the patterns:
    /// `plan(n)` for the `n`th subscription (0-based) is written at once, then the connection
    /// is closed if `close` or kept (answering unsubscribes) otherwise.
    type PubSubPlan = Arc<dyn Fn(usize) -> (Vec<u8>, bool) + Send + Sync>;

    /// A Redis that answers the connect handshake (`CLIENT SETINFO`, `CLIENT SETNAME`, `PING`,
    /// `SELECT`, `PSUBSCRIBE`) properly and every other command with `answer`.
    fn hostile(
        answer: impl Fn(&Cmd) -> Answer + Send + Sync + 'static,
        pubsub: PubSubPlan,
    ) -> Server {
        let subs = Arc::new(AtomicUsize::new(0));
        Server::start(move |_, s| {
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let mut subscribed = 0;
            while let Some(cmd) = read_cmd(&mut r) {
                if cmd.is_empty() {
                    return subscribed > 0;
                }
                let name = upper(&cmd[0]);
                let sub = cmd.get(1).map(|a| upper(a)).unwrap_or_default();
                let out: Answer = match (name.as_str(), sub.as_str()) {
                    ("CLIENT", _) | ("SELECT", _) | ("AUTH", _) | ("HELLO", _) => {
                        Answer::Send(b"+OK\r\n".to_vec())
                    }
                    ("PING", _) => Answer::Send(b"+PONG\r\n".to_vec()),
                    ("PSUBSCRIBE", _) => {
                        let mut out = Vec::new();
                        for p in &cmd[1..] {
                            subscribed += 1;
                            out.extend(confirmation(p, subscribed));
                        }
                        if w.write_all(&out).is_err() {
                            return subscribed > 0;
                        }
                        // The third pattern (leases, groups, read-write locks) completes the
                        // backend's subscription.
                        if subscribed == 3 {
                            let n = subs.fetch_add(1, Ordering::SeqCst);
                            let (bytes, close) = pubsub(n);
                            if w.write_all(&bytes).is_err() || close {
                                let _ = w.shutdown(Shutdown::Both);
                                return subscribed > 0;
                            }
                        }
                        continue;
                    }
                    ("UNSUBSCRIBE", _) => {
                        Answer::Send(b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n".to_vec())
                    }
                    ("PUNSUBSCRIBE", _) => {
                        Answer::Send(b"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n".to_vec())
                    }
                    _ => answer(&cmd),
                };
                match out {
                    Answer::Send(b) => {
                        if w.write_all(&b).is_err() {
                            return subscribed > 0;
                        }
                    }
                    Answer::SendThenClose(b) => {
                        let _ = w.write_all(&b);
                        let _ = w.shutdown(Shutdown::Both);
                        return subscribed > 0;
                    }
                    Answer::Close => {
                        let _ = w.shutdown(Shutdown::Both);
                        return subscribed > 0;
                    }
                    Answer::Silence => {}
                }
            }
            subscribed > 0
        })
    }

    fn quiet_pubsub() -> PubSubPlan {
        Arc::new(|_| (Vec::new(), false))
    }

    const PREFIX: &str = "hostile";

    fn backend(server: &Server, routed: bool) -> RedisBackend {
        RedisBackend::connect(&format!(
            "redis://{}?prefix={PREFIX}&query_timeout=300ms&connect_timeout=300ms&route_by_slot={routed}",
            server.addr
        ))
        .expect("the handshake is answered properly")
    }

    /// Every SPI call of `b` fails within the bound; subscribing still works and the backend
    /// drops cleanly.
    fn every_call_fails(b: RedisBackend) {
        let sid = SessionId::random();
        let name = LeaseName::new("job").unwrap();
        let group = GroupName::new("workers").unwrap();
        let lease = Duration::from_secs(2);
        let token = Token::new(5).unwrap();
        fails("open_session", || {
            b.open_session(lease, &Metadata::default())
        });
        fails("keep_alive", || b.keep_alive(&sid, lease));
        fails("close_session", || b.close_session(&sid));
        fails("acquire", || b.acquire(&sid, &name));
        fails("release", || b.release(&sid, &name, token));
        fails("owner", || b.owner(&name));
        fails("join", || b.join(&sid, &group));
        fails("leave", || b.leave(&sid, &group));
        fails("members", || b.members(&group));
        fails("purge_expired", || b.purge_expired());
        fails("ping", || b.ping());
        fails("an empty command", || {
            b.scripting().command(Role::Other, &[])
        });
        let start = Instant::now();
        let sink: NotifySink = Arc::new(|_: &Notification| {});
        let sub = b.subscribe(sink).expect("subscribe");
        assert!(sub.is_some());
        drop(sub);
        drop(b);
        assert!(
            start.elapsed() < BOUND,
            "subscribe and drop took {:?}",
            start.elapsed()
        );
    }

    fn bulk(b: &[u8]) -> Vec<u8> {
        let mut out = format!("${}\r\n", b.len()).into_bytes();
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn array(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", items.len()).into_bytes();
        for i in items {
            out.extend_from_slice(i);
        }
        out
    }

    fn int(i: i64) -> Vec<u8> {
        format!(":{i}\r\n").into_bytes()
    }

    const NOSCRIPT: &[u8] = b"-NOSCRIPT No matching script. Please use EVAL.\r\n";

    /// Answers `EVALSHA` with `NOSCRIPT`, so that the client sends the source with `EVAL`
    /// and `reply` can answer per script (`SCRIPT LOAD` gets a made-up SHA).
    fn per_script(reply: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> Server {
        hostile(
            move |cmd| match script_of(cmd) {
                "evalsha" => Answer::Send(NOSCRIPT.to_vec()),
                "script" => Answer::Send(bulk(&[b'0'; 40])),
                s => Answer::Send(reply(s)),
            },
            quiet_pubsub(),
        )
    }

    /// The same bytes for every command after the handshake.
    fn always(bytes: &'static [u8]) -> Server {
        hostile(move |_| Answer::Send(bytes.to_vec()), quiet_pubsub())
    }

    macro_rules! both_routings {
        ($($name:ident => $server:expr;)*) => {
            mod one_node {
                use super::*;
                $(#[test] fn $name() { let s = $server; every_call_fails(backend(&s, false)); })*
            }
            mod routed {
                use super::*;
                $(#[test] fn $name() { let s = $server; every_call_fails(backend(&s, true)); })*
            }
        };
    }

    fn sid() -> Vec<u8> {
        bulk(SessionId::random().as_str().as_bytes())
    }

    /// Well-shaped replies with values that make no sense: zero and negative tokens,
    /// non-UTF-8 names, wrong status codes.
    fn nonsense_a(script: &str) -> Vec<u8> {
        match script {
            "open" => int(0),
            "keep_alive" => array(&[int(2000), bulk(b"job"), int(0)]),
            "keep_alive_session" => array(&[int(2000), array(&[bulk(b"job")]), array(&[])]),
            "keep_alive_slot" => array(&[int(-4)]),
            "acquire" => array(&[int(1), int(0), int(1000), int(1)]),
            "acquire_session" => array(&[int(1000), int(2000)]),
            "acquire_lease" => array(&[int(1), int(-3), int(1000), int(1)]),
            "release" => int(2),
            "owner" => array(&[bulk(b"\xff\xfe"), int(5), int(100)]),
            "join" => array(&[int(0)]),
            "join_group" => int(7),
            "leave" => int(-1),
            "members" => array(&[sid(), bulk(b""), sid()]),
            "close" => int(0),
            "close_session" => array(&[array(&[])]),
            "purge_group" => int(1),
            "scan" => array(&[bulk(b"0"), array(&[bulk(b"hostile:group:{g}")])]),
            "pttl" => int(5000),
            "ping" => int(2),
            _ => b"-ERR unexpected\r\n".to_vec(),
        }
    }

    /// More nonsense: remaining times out of range, odd arrays, non-UTF-8 metadata, a SCAN
    /// cursor that never comes back.
    fn nonsense_b(script: &str) -> Vec<u8> {
        match script {
            "open" => int(99_999_999),
            "keep_alive" => array(&[int(2000), bulk(b"job")]),
            "keep_alive_session" => array(&[int(2000), array(&[])]),
            "acquire" => array(&[int(1), int(5), int(-100), int(1)]),
            "acquire_session" => array(&[int(0), int(2000)]),
            "release" => array(&[]),
            "owner" => array(&[sid(), int(0), int(100)]),
            "join" => array(&[int(1), int(1)]),
            "leave" => array(&[int(1)]),
            "members" => array(&[sid(), bulk(b"\xff\xfe")]),
            "close" => array(&[int(1)]),
            "close_session" => array(&[array(&[bulk(b"a b")]), array(&[])]),
            "scan" => array(&[bulk(b"7"), array(&[])]),
            "pttl" => bulk(b"\xff"),
            "ping" => bulk(b"\xff\xfe"),
            _ => b"-ERR unexpected\r\n".to_vec(),
        }
    }

    /// Yet more: a holder that is not a session id or is the acquirer itself is not
    /// checkable here, so: an unknown status, keep-alive time above the lease, a nested
    /// server error.
    fn nonsense_c(script: &str) -> Vec<u8> {
        match script {
            "open" => int(-5),
            "keep_alive" | "keep_alive_session" => array(&[int(999_999)]),
            "acquire" | "acquire_lease" => array(&[int(7)]),
            "acquire_session" => array(&[int(1000)]),
            "release" | "leave" => b"*2\r\n:1\r\n-ERR nested\r\n".to_vec(),
            "owner" => array(&[bulk(b"not-a-session"), int(5), int(100)]),
            "join" => array(&[int(-2)]),
            "members" => array(&[bulk(b"\xff\xfe"), bulk(b"")]),
            "close" => b"-ERR closing\r\n".to_vec(),
            "close_session" => int(1),
            "scan" => array(&[int(1), int(1)]),
            "ping" => array(&[int(1)]),
            _ => b"-ERR unexpected\r\n".to_vec(),
        }
    }

    both_routings! {
        negative_integers => always(b":-7\r\n");
        short_arrays => always(b"*2\r\n:1\r\n:0\r\n");
        non_utf8_strings => always(b"$2\r\n\xff\xfe\r\n");
        arrays_of_non_utf8 => always(b"*4\r\n$2\r\n\xff\xfe\r\n$2\r\n\xff\xfe\r\n$2\r\n\xff\xfe\r\n$2\r\n\xff\xfe\r\n");
        nested_errors => always(b"*2\r\n:1\r\n-ERR nested\r\n");
        garbage => always(b"?what\r\n");
        doubles => always(b",1.5\r\n");
        big_numbers => always(b"(123456789012345678901234567890\r\n");
        pushes => always(b">2\r\n+pmessage\r\n:1\r\n");
        maps => always(b"%1\r\n:1\r\n:0\r\n");
        nonsense_values_a => per_script(nonsense_a);
        nonsense_values_b => per_script(nonsense_b);
        nonsense_values_c => per_script(nonsense_c);
        noscript_forever => always(NOSCRIPT);
        huge_bulk_length => hostile(|_| Answer::Send(b"$9999999999\r\nabc".to_vec()), quiet_pubsub());
        huge_array_length => hostile(|_| Answer::Send(b"*9999999999\r\n:1\r\n".to_vec()), quiet_pubsub());
        huge_then_close => hostile(|_| Answer::SendThenClose(b"$9999999999\r\nabc".to_vec()), quiet_pubsub());
        dropped_mid_reply => hostile(|_| Answer::SendThenClose(b"*4\r\n:1\r\n:5".to_vec()), quiet_pubsub());
        closed_at_once => hostile(|_| Answer::Close, quiet_pubsub());
        silence => hostile(|_| Answer::Silence, quiet_pubsub());
    }

    /// A valid `pmessage` of `released` on the lease channel of `name`.
    fn released(name: &str) -> Vec<u8> {
        push(&[
            bulk(b"pmessage"),
            bulk(format!("{PREFIX}:lease:*").as_bytes()),
            bulk(format!("{PREFIX}:lease:{{{name}}}").as_bytes()),
            bulk(b"released"),
        ])
    }

    /// A RESP3 push (the notification connection speaks RESP3).
    fn push(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = array(items);
        out[0] = b'>';
        out
    }

    /// The confirmation of the subscription to pattern `p`, the `n`th.
    fn confirmation(p: &[u8], n: i64) -> Vec<u8> {
        push(&[bulk(b"psubscribe"), bulk(p), int(n)])
    }

    fn collect(
        b: &RedisBackend,
    ) -> (
        Arc<Mutex<Vec<Notification>>>,
        simba_lease::spi::Subscription,
    ) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let sink: NotifySink = Arc::new(move |n: &Notification| s.lock().unwrap().push(n.clone()));
        let sub = b.subscribe(sink).unwrap().expect("Redis notifies");
        (seen, sub)
    }

    fn got(seen: &Mutex<Vec<Notification>>, name: &str) -> bool {
        let name = LeaseName::new(name).unwrap();
        seen.lock()
            .unwrap()
            .iter()
            .any(|n| *n == Notification::Released(name.clone()))
    }

    /// Garbage on the pub/sub connection (wrong shapes, a non-UTF-8 channel, a channel of
    /// no lease) is skipped: a valid message after it still arrives, and the notifier stops
    /// (its connection closes) once the backend is dropped.
    #[test]
    fn notifier_skips_garbage_and_stops() {
        let plan: PubSubPlan = Arc::new(|_| {
            let mut out = Vec::new();
            out.extend(array(&[int(1), int(2)]));
            out.extend(int(5));
            out.extend(bulk(b"abc"));
            out.extend(array(&[
                bulk(b"pmessage"),
                bulk(b"x"),
                bulk(b"\xff\xfe"),
                bulk(b"released"),
            ]));
            out.extend(array(&[
                bulk(b"pmessage"),
                bulk(b"x"),
                bulk(format!("{PREFIX}:lease:{{a b}}").as_bytes()),
                bulk(b"released"),
            ]));
            out.extend(array(&[bulk(b"pmessage"), bulk(b"x")]));
            out.extend(push(&[bulk(b"pmessage"), bulk(b"x")]));
            out.extend(push(&[bulk(b"psubscribe"), int(1), int(2)]));
            out.extend(push(&[
                bulk(b"pmessage"),
                bulk(b"x"),
                bulk(b"\xff\xfe"),
                bulk(b"released"),
            ]));
            out.extend(b"-ERR not now\r\n");
            out.extend(released("after-garbage"));
            (out, false)
        });
        let server = hostile(|_| Answer::Send(b"-ERR no\r\n".to_vec()), plan);
        let b = backend(&server, false);
        let (seen, sub) = collect(&b);
        until(Duration::from_secs(10), "the valid message arrives", || {
            got(&seen, "after-garbage")
        });
        let closed = server.closed_subscribers.load(Ordering::SeqCst);
        drop(sub);
        drop(b);
        until(
            Duration::from_secs(10),
            "the notifier closes its connection",
            || server.closed_subscribers.load(Ordering::SeqCst) > closed,
        );
    }

    /// A pub/sub connection dropped mid-message: the notifier resubscribes (a `Resync`) and
    /// a message on the new connection arrives.
    #[test]
    fn notifier_survives_a_drop_mid_message() {
        let plan: PubSubPlan = Arc::new(|n| match n {
            0 => (b">4\r\n$8\r\npmessage\r\n$3\r\npa".to_vec(), true),
            _ => (released("after-drop"), false),
        });
        let server = hostile(|_| Answer::Send(b"-ERR no\r\n".to_vec()), plan);
        let b = backend(&server, false);
        let (seen, _sub) = collect(&b);
        until(
            Duration::from_secs(10),
            "the message on the new connection arrives",
            || got(&seen, "after-drop"),
        );
        assert!(seen.lock().unwrap().contains(&Notification::Resync));
    }

    /// A notification connection that streams values that are no messages, without a pause:
    /// the notifier still notices that the backend was dropped and closes its connection.
    #[test]
    fn notifier_stops_under_a_stream_of_garbage() {
        let server = Server::start(move |_, s| {
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            while let Some(cmd) = read_cmd(&mut r) {
                let out = match upper(&cmd[0]).as_str() {
                    "PING" => b"+PONG\r\n".to_vec(),
                    "PSUBSCRIBE" => {
                        let mut out = Vec::new();
                        for (i, p) in cmd[1..].iter().enumerate() {
                            out.extend(confirmation(p, i as i64 + 1));
                        }
                        if w.write_all(&out).is_err() {
                            return true;
                        }
                        // Values that are no messages, every 20 ms, until the peer goes.
                        loop {
                            if w.write_all(b":1\r\n>2\r\n+what\r\n:1\r\n").is_err() {
                                return true;
                            }
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    _ => b"+OK\r\n".to_vec(),
                };
                if w.write_all(&out).is_err() {
                    return false;
                }
            }
            false
        });
        let b = backend(&server, false);
        // `subscribe` returns once the first subscription attempt finished.
        let (_seen, sub) = collect(&b);
        drop(sub);
        drop(b);
        until(
            Duration::from_secs(10),
            "the notifier closes its connection",
            || server.closed_subscribers.load(Ordering::SeqCst) > 0,
        );
    }
}

/// The same bytes, read as the messages of a protocol: `n` bytes exactly.
#[allow(dead_code)]
fn read_n(r: &mut impl std::io::Read, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; n];
    r.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// A server that answers every connection with `bytes` at once, then closes (`close`) or
/// keeps it open, reading and ignoring whatever comes.
#[allow(dead_code)]
fn blunt(bytes: &'static [u8], close: bool) -> Server {
    Server::start(move |_, mut s| {
        let _ = s.write_all(bytes);
        if close {
            let _ = s.shutdown(Shutdown::Both);
            return false;
        }
        let mut sink = [0u8; 1024];
        while matches!(std::io::Read::read(&mut s, &mut sink), Ok(n) if n > 0) {}
        false
    })
}

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use simba_lease::backends::SqlBackend;
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{GroupName, LeaseName, Metadata, SessionId};
    use std::io::BufReader;

    fn url() -> String {
        std::env::var("SIMBA_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    fn prefix() -> String {
        simba_lease::tck::stamped_prefix("th")
    }

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    /// A RowDescription of one column of type `oid` in binary format (extended protocol).
    fn row_description(oid: i32) -> Vec<u8> {
        row_description_in(oid, 1)
    }

    /// A RowDescription of one column of type `oid` in `format` (0 text, 1 binary).
    fn row_description_in(oid: i32, format: i16) -> Vec<u8> {
        let mut b = 1i16.to_be_bytes().to_vec();
        b.extend_from_slice(b"x\0");
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&oid.to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&format.to_be_bytes());
        msg(b'T', &b)
    }

    fn data_row(value: &[u8]) -> Vec<u8> {
        let mut b = 1i16.to_be_bytes().to_vec();
        b.extend_from_slice(&(value.len() as i32).to_be_bytes());
        b.extend_from_slice(value);
        msg(b'D', &b)
    }

    /// A PostgreSQL that accepts any login and answers every statement with one `text`
    /// column holding `abc` (what a proxy or a wrong server could send): wrong types, too
    /// few columns. With `pid`, `pg_backend_pid()` is answered properly (an `int4`; the
    /// backend reads it over the simple query protocol), so that connections open.
    fn wrong_types(pid: bool) -> Server {
        Server::start(move |_, s| serve_wrong_types(s, pid))
    }

    fn serve_wrong_types(s: TcpStream, pid: bool) -> bool {
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        // Startup: length, then the rest.
        let Some(len) = read_n(&mut r, 4) else {
            return false;
        };
        let len = i32::from_be_bytes(len.try_into().unwrap()) as usize;
        if read_n(&mut r, len - 4).is_none() {
            return false;
        }
        let mut out = msg(b'R', &0i32.to_be_bytes());
        out.extend(msg(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]));
        out.extend(msg(b'Z', b"I"));
        if w.write_all(&out).is_err() {
            return false;
        }
        let mut is_pid = false;
        let mut params = 0i16.to_be_bytes().to_vec();
        let mut out = Vec::new();
        loop {
            let Some(head) = read_n(&mut r, 5) else {
                return false;
            };
            let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
            let Some(body) = read_n(&mut r, len - 4) else {
                return false;
            };
            match head[0] {
                // A simple query: one text row, then ready.
                b'Q' => {
                    let is_pid = pid && String::from_utf8_lossy(&body).contains("pg_backend_pid");
                    out.extend(row_description_in(if is_pid { 23 } else { 25 }, 0));
                    out.extend(data_row(if is_pid { b"42" } else { b"abc" }));
                    out.extend(msg(b'C', b"SELECT 1\0"));
                    out.extend(msg(b'Z', b"I"));
                    if w.write_all(&out).is_err() {
                        return false;
                    }
                    out.clear();
                }
                b'P' => {
                    is_pid = pid && String::from_utf8_lossy(&body).contains("pg_backend_pid");
                    // name, query (both NUL-terminated), then the parameter types: echoed
                    // back in the ParameterDescription.
                    let mut nuls = body.iter().enumerate().filter(|(_, b)| **b == 0);
                    let at = nuls.nth(1).map_or(body.len(), |(i, _)| i + 1);
                    params = body.get(at..).unwrap_or_default().to_vec();
                    out.extend(msg(b'1', b""));
                }
                b'D' => {
                    out.extend(msg(b't', &params));
                    out.extend(row_description(if is_pid { 23 } else { 25 }));
                }
                b'B' => out.extend(msg(b'2', b"")),
                b'E' => {
                    out.extend(data_row(if is_pid { &[0, 0, 0, 42] } else { b"abc" }));
                    out.extend(msg(b'C', b"SELECT 1\0"));
                }
                b'C' => out.extend(msg(b'3', b"")),
                b'S' => {
                    out.extend(msg(b'Z', b"I"));
                    if w.write_all(&out).is_err() {
                        return false;
                    }
                    out.clear();
                }
                b'X' => return false,
                _ => {}
            }
        }
    }

    fn on(server: &Server) -> simba_lease::Result<SqlBackend> {
        SqlBackend::builder(format!("postgres://hostile@{}/db", server.addr))
            .query_timeout(Duration::from_millis(300))
            .pool_size(2)
            .build()
    }

    /// Rows of the wrong types and too few columns: every call that reads a row fails with
    /// a typed error (calls that read only a command tag, e.g. release, cannot tell).
    #[test]
    fn wrong_types_are_typed_errors() {
        let server = wrong_types(true);
        let b = on(&server).expect("the login is answered properly");
        let sid = SessionId::random();
        let name = LeaseName::new("job").unwrap();
        let group = GroupName::new("workers").unwrap();
        let lease = Duration::from_secs(2);
        fails("open_session", || {
            b.open_session(lease, &Metadata::default())
        });
        fails("keep_alive", || b.keep_alive(&sid, lease));
        fails("acquire", || b.acquire(&sid, &name));
        fails("owner", || b.owner(&name));
        fails("join", || b.join(&sid, &group));
        fails("members", || b.members(&group));
        fails("purge_expired", || b.purge_expired());
    }

    /// A `text` pid at connect time is an error, not a panic.
    #[test]
    fn a_wrong_pid_type_fails_the_connection() {
        let server = wrong_types(false);
        fails("build", || on(&server));
    }

    #[test]
    fn garbage_at_once_fails_the_connection() {
        let server = blunt(b"HTTP/1.1 400 Bad Request\r\n\r\n", true);
        fails("build", || on(&server));
    }

    #[test]
    fn huge_message_length_fails_the_connection() {
        let server = blunt(b"R\x7f\xff\xff\xff\0\0\0\0", false);
        fails("build", || on(&server));
    }

    #[test]
    fn a_closed_connection_fails_the_connection() {
        let server = blunt(b"", true);
        fails("build", || on(&server));
    }

    #[test]
    fn silence_fails_the_connection() {
        let server = blunt(b"", false);
        fails("build", || on(&server));
    }

    fn raw() -> ::postgres::Client {
        url()
            .parse::<::postgres::Config>()
            .unwrap()
            .connect(::postgres::NoTls)
            .unwrap()
    }

    /// Tables altered behind the backend's back (a `token` of type `integer`, a NULL
    /// metadata): the real server then sends values of other types; every call reading them
    /// fails with a typed error naming the operation.
    #[test]
    fn altered_tables_are_typed_errors() {
        let p = prefix();
        let b = SqlBackend::builder(url()).table_prefix(&p).build().unwrap();
        b.install_schema().unwrap();
        struct Drop_(SqlBackend);
        impl Drop for Drop_ {
            fn drop(&mut self) {
                let _ = self.0.drop_tables();
            }
        }
        let b = Drop_(b);
        let mut c = raw();
        c.batch_execute(&format!(
            "ALTER TABLE {p}simba_lease ALTER COLUMN token TYPE integer; \
             ALTER TABLE {p}simba_session ALTER COLUMN metadata DROP NOT NULL"
        ))
        .unwrap();
        let lease = Duration::from_secs(30);
        let s = b.0.open_session(lease, &Metadata::default()).unwrap().id;
        let name = LeaseName::new("job").unwrap();
        let group = GroupName::new("workers").unwrap();
        fails("acquire", || b.0.acquire(&s, &name));
        // The keep-alive lists leases and read-write terms in one `UNION ALL`, which
        // PostgreSQL types as the wider bigint: it reads the altered column right (the
        // acquire above took token 1 before its reply failed to read), or fails typed.
        match b.0.keep_alive(&s, lease) {
            Ok(ka) => {
                let tokens: Vec<u64> = ka.leases.iter().map(|l| l.token.get()).collect();
                assert_eq!(tokens, [1], "{ka:?}");
            }
            Err(e) => assert!(
                matches!(&e, simba_lease::Error::Backend { operation, .. } if operation.contains("alive")),
                "{e:?}"
            ),
        }
        fails("owner", || b.0.owner(&name));
        b.0.join(&s, &group).unwrap();
        c.execute(&format!("UPDATE {p}simba_session SET metadata = NULL"), &[])
            .unwrap();
        fails("members", || b.0.members(&group));
        let err = b.0.members(&group).unwrap_err();
        assert!(
            matches!(err, simba_lease::Error::Backend { operation, .. } if operation.contains("member")),
            "{err:?}"
        );
    }
}

#[cfg(feature = "mysql")]
mod my {
    use super::*;
    use ::mysql::prelude::Queryable;
    use simba_lease::backends::SqlBackend;
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{GroupName, LeaseName, Metadata, SessionId};

    fn url() -> String {
        std::env::var("SIMBA_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
    }

    fn raw() -> ::mysql::Conn {
        ::mysql::Conn::new(::mysql::Opts::from_url(&url()).unwrap()).unwrap()
    }

    /// A backend on its own tables, dropped at the end.
    struct Tables(SqlBackend);

    impl Drop for Tables {
        fn drop(&mut self) {
            let _ = self.0.drop_tables();
        }
    }

    fn tables() -> (Tables, String) {
        let p = format!("th{}_", &SessionId::random().as_str()[..10]);
        let b = SqlBackend::builder(url()).table_prefix(&p).build().unwrap();
        b.install_schema().unwrap();
        (Tables(b), p)
    }

    /// Non-UTF-8 metadata (the column altered to bytes behind the backend's back): reading
    /// the members is a typed error naming the operation.
    #[test]
    fn non_utf8_metadata_is_a_typed_error() {
        let (b, p) = tables();
        let mut c = raw();
        c.query_drop(format!(
            "ALTER TABLE {p}simba_session MODIFY metadata VARBINARY(1024) NOT NULL DEFAULT ''"
        ))
        .unwrap();
        let s =
            b.0.open_session(Duration::from_secs(30), &Metadata::default())
                .unwrap()
                .id;
        let group = GroupName::new("workers").unwrap();
        b.0.join(&s, &group).unwrap();
        c.query_drop(format!("UPDATE {p}simba_session SET metadata = X'FFFE'"))
            .unwrap();
        fails("members", || b.0.members(&group));
        let err = b.0.members(&group).unwrap_err();
        assert!(
            matches!(&err, simba_lease::Error::Backend { operation, .. } if operation.contains("member")),
            "{err:?}"
        );
    }

    /// A token that is not a number (the column altered to text): owner, keep-alive and
    /// acquire fail with typed errors instead of reporting no owner or dropping the lease.
    #[test]
    fn a_token_of_another_type_is_a_typed_error() {
        let (b, p) = tables();
        let lease = Duration::from_secs(30);
        let s = b.0.open_session(lease, &Metadata::default()).unwrap().id;
        let name = LeaseName::new("job").unwrap();
        b.0.acquire(&s, &name).unwrap();
        let mut c = raw();
        c.query_drop(format!(
            "ALTER TABLE {p}simba_lease MODIFY token VARCHAR(20) NOT NULL"
        ))
        .unwrap();
        c.query_drop(format!("UPDATE {p}simba_lease SET token = 'abc'"))
            .unwrap();
        fails("owner", || b.0.owner(&name));
        fails("keep_alive", || b.0.keep_alive(&s, lease));
        fails("acquire", || b.0.acquire(&s, &name));
    }

    /// An expired session whose id is not UTF-8 (the column altered to bytes): the purge
    /// fails with a typed error.
    #[test]
    fn a_non_utf8_session_id_is_a_typed_error() {
        let (b, p) = tables();
        let mut c = raw();
        c.query_drop(format!(
            "ALTER TABLE {p}simba_session MODIFY session_id VARBINARY(32) NOT NULL"
        ))
        .unwrap();
        c.query_drop(format!(
            "INSERT INTO {p}simba_session (session_id, expires_at, metadata) VALUES (X'FFFE', 1, '')"
        ))
        .unwrap();
        fails("purge_expired", || b.0.purge_expired());
    }

    fn on(server: &Server) -> simba_lease::Result<SqlBackend> {
        SqlBackend::builder(format!("mysql://hostile@{}/db", server.addr))
            .query_timeout(Duration::from_millis(300))
            .pool_size(2)
            .build()
    }

    #[test]
    fn garbage_at_once_fails_the_connection() {
        let server = blunt(b"HTTP/1.1 400 Bad Request\r\n\r\n", true);
        fails("build", || on(&server));
    }

    #[test]
    fn a_huge_packet_fails_the_connection() {
        let server = blunt(b"\xff\xff\xff\x00\x0a8.0.36\x00", false);
        fails("build", || on(&server));
    }

    #[test]
    fn a_closed_connection_fails_the_connection() {
        let server = blunt(b"", true);
        fails("build", || on(&server));
    }

    #[test]
    fn silence_fails_the_connection() {
        let server = blunt(b"", false);
        fails("build", || on(&server));
    }
}

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::zk::{self, raw, Isolated};
    use super::*;
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{LeaseName, Metadata};

    /// A persistent node at a lease's path (created by another client; it never goes away)
    /// is not reported as a holder with a made-up session and remaining time: owner and
    /// acquire fail with a typed error.
    #[test]
    fn a_persistent_lease_node_is_a_typed_error() {
        let hosts = zk::hosts();
        let b = Isolated::new(&hosts, None, |b| b);
        let s = b
            .open_session(Duration::from_secs(10), &Metadata::default())
            .unwrap()
            .id;
        // Creates `{root}/leases`.
        b.acquire(&s, &LeaseName::new("other").unwrap()).unwrap();
        let mut r = raw::Raw::connect(&hosts);
        assert_eq!(r.create(&format!("{}/leases/squat", b.root()), b"", 0), 0);
        let name = LeaseName::new("squat").unwrap();
        fails("owner", || b.owner(&name));
        fails("acquire", || b.acquire(&s, &name));
        b.close_session(&s).unwrap();
    }
}
