//! A fault proxy for real servers: one TCP proxy on loopback in front of one server
//! endpoint, whose network can be made slow, silent or broken while clients talk through it.
//! Std threads only; nothing async.
//!
//! What it can do to the connections it carries, per direction where it says so:
//! * [`FaultProxy::latency`]: every chunk is held `base` plus up to `jitter` (seeded), in
//!   order;
//! * [`FaultProxy::blackhole`]: nothing is forwarded and the sockets stay open (a partition:
//!   TCP would retransmit, so what was held is delivered at [`FaultProxy::heal`] unless the
//!   connection was closed meanwhile); [`FaultProxy::partition`] does it one way only;
//! * [`FaultProxy::refuse`]: new connections are closed at once (the proxy's listener
//!   stays open, as a server that accepts and drops);
//! * [`FaultProxy::cut`]: every open connection is closed now, and
//!   [`FaultProxy::cut_mid_reply`] closes each one in the middle of the next reply it carries;
//! * [`FaultProxy::trickle`]: at most `bytes` per tick of 10 ms, each way;
//! * [`FaultProxy::heal`]: back to a plain proxy (what was held is sent).
//!
//! ```no_run
//! use simba_lease::tck::net::FaultProxy;
//! let proxy = FaultProxy::start("127.0.0.1:6379", 7).unwrap();
//! let url = format!("redis://{}/", proxy.addr());
//! // ... a backend on `url`, then:
//! proxy.blackhole();
//! proxy.heal();
//! ```

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How often the proxy's threads look at the faults and their sockets.
const TICK: Duration = Duration::from_millis(2);

/// A small seeded generator (xorshift): the proxies' jitter and the fault schedules.
#[derive(Debug, Default)]
pub(super) struct Draw(pub(super) u64);

impl Draw {
    /// A draw in `[0, n)`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.max(1);
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// A draw in `[lo, hi]`, to the microsecond.
    pub(super) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros() as u64;
        lo + Duration::from_micros(self.below(span + 1))
    }
}

/// A direction of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server (requests).
    ToServer,
    /// From the server to the client (replies).
    ToClient,
}

/// The faults in force.
#[derive(Clone, Debug, Default)]
struct Faults {
    base: Duration,
    jitter: Duration,
    held: [bool; 2],
    refuse: bool,
    /// Cut each connection in the middle of the next reply (generation: a new ask re-arms).
    cut_mid_reply: u64,
    trickle: Option<usize>,
}

#[derive(Default)]
struct Shared {
    faults: Mutex<Faults>,
    stop: AtomicBool,
    /// Bumped by [`FaultProxy::cut`]: connections older than it close.
    cut: AtomicU64,
    accepted: AtomicU64,
    jitter: Mutex<Draw>,
}

impl Shared {
    fn faults(&self) -> Faults {
        self.faults.lock().clone()
    }

    /// A draw in `[0, max]` from the proxy's seeded generator.
    fn draw(&self, max: Duration) -> Duration {
        self.jitter.lock().between(Duration::ZERO, max)
    }
}

/// A TCP proxy on loopback in front of one server endpoint, with faults on demand. Its
/// threads stop when it is dropped (they notice within a few milliseconds; no socket is
/// written to then).
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("faults", &self.shared.faults())
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// A proxy on a free loopback port in front of `upstream`, its jitter drawn from `seed`.
    pub fn start(upstream: impl ToSocketAddrs, seed: u64) -> std::io::Result<Self> {
        let upstream: Vec<SocketAddr> = upstream.to_socket_addrs()?.collect();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            jitter: Mutex::new(Draw(seed | 1)),
            ..Shared::default()
        });
        let s = shared.clone();
        thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || accept(listener, upstream, s))?;
        Ok(FaultProxy { addr, shared })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections it accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Holds every chunk `base` plus up to `jitter`, in order.
    pub fn latency(&self, base: Duration, jitter: Duration) {
        let mut f = self.shared.faults.lock();
        (f.base, f.jitter) = (base, jitter);
    }

    /// Forwards nothing, either way, until healed; the sockets stay open.
    pub fn blackhole(&self) {
        self.shared.faults.lock().held = [true, true];
    }

    /// Forwards nothing in direction `d` until healed.
    pub fn partition(&self, d: Direction) {
        self.shared.faults.lock().held[d as usize] = true;
    }

    /// Closes new connections at once until healed.
    pub fn refuse(&self) {
        self.shared.faults.lock().refuse = true;
    }

    /// Closes every open connection now.
    pub fn cut(&self) {
        self.shared.cut.fetch_add(1, Ordering::SeqCst);
    }

    /// Closes each open connection in the middle of the next reply it carries (after half
    /// of its first chunk).
    pub fn cut_mid_reply(&self) {
        self.shared.faults.lock().cut_mid_reply += 1;
    }

    /// At most `bytes` per 10 ms each way, until healed.
    pub fn trickle(&self, bytes: usize) {
        self.shared.faults.lock().trickle = Some(bytes.max(1));
    }

    /// Back to a plain proxy: what was held is sent on.
    pub fn heal(&self) {
        let mut f = self.shared.faults.lock();
        let armed = f.cut_mid_reply;
        *f = Faults::default();
        f.cut_mid_reply = armed;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn accept(listener: TcpListener, upstream: Vec<SocketAddr>, s: Arc<Shared>) {
    while !s.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(TICK);
                continue;
            }
            Err(_) => continue,
        };
        s.accepted.fetch_add(1, Ordering::SeqCst);
        if s.faults().refuse {
            drop(client);
            continue;
        }
        let server = upstream
            .iter()
            .find_map(|a| TcpStream::connect_timeout(a, Duration::from_secs(2)).ok());
        let Some(server) = server else {
            continue;
        };
        let s = s.clone();
        let _ = thread::Builder::new()
            .name("fault-proxy-conn".into())
            .spawn(move || carry(client, server, s));
    }
}

/// What one direction of a connection holds: chunks and when each may go.
type Held = VecDeque<(Instant, Vec<u8>)>;

/// Carries one connection both ways until either side closes, the proxy stops or a cut.
fn carry(client: TcpStream, server: TcpStream, s: Arc<Shared>) {
    let cut_at = s.cut.load(Ordering::SeqCst);
    let armed_at = s.faults().cut_mid_reply;
    let socks = [client, server];
    for sock in &socks {
        let _ = sock.set_nodelay(true);
        let _ = sock.set_nonblocking(true);
    }
    // Index by direction: ToServer reads the client and writes the server.
    let (mut held, mut buf): ([Held; 2], _) = ([Held::new(), Held::new()], vec![0u8; 64 * 1024]);
    let mut open = [true, true];
    'run: while !s.stop.load(Ordering::SeqCst) && s.cut.load(Ordering::SeqCst) == cut_at {
        let f = s.faults();
        let mut idle = true;
        for d in [Direction::ToServer, Direction::ToClient] {
            let i = d as usize;
            let (from, to) = (&socks[i], &socks[1 - i]);
            if open[i] {
                match (&*from).read(&mut buf) {
                    Ok(0) => open[i] = false,
                    Ok(n) => {
                        idle = false;
                        let at = Instant::now() + f.base + s.draw(f.jitter);
                        held[i].push_back((at, buf[..n].to_vec()));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => break 'run,
                }
            }
            if f.held[i] {
                continue;
            }
            let mut budget = f.trickle.unwrap_or(usize::MAX);
            while let Some((at, _)) = held[i].front() {
                if *at > Instant::now() || budget == 0 {
                    break;
                }
                let Some((at, mut chunk)) = held[i].pop_front() else {
                    break;
                };
                let cut = d == Direction::ToClient && f.cut_mid_reply > armed_at;
                if cut {
                    chunk.truncate(chunk.len().div_ceil(2));
                }
                if chunk.len() > budget {
                    let rest = chunk.split_off(budget);
                    held[i].push_front((at, rest));
                }
                budget -= chunk.len();
                if write_all(to, &chunk, &s).is_err() || cut {
                    break 'run;
                }
                idle = false;
            }
            if !open[i] && held[i].is_empty() {
                let _ = to.shutdown(Shutdown::Write);
                if !open[1 - i] && held[1 - i].is_empty() {
                    break 'run;
                }
            }
        }
        if idle {
            thread::sleep(TICK);
        }
    }
    for sock in &socks {
        let _ = sock.shutdown(Shutdown::Both);
    }
}

/// Writes `chunk` whole on a non-blocking socket (waiting while it is full).
fn write_all(mut to: &TcpStream, mut chunk: &[u8], s: &Shared) -> std::io::Result<()> {
    while !chunk.is_empty() {
        if s.stop.load(Ordering::SeqCst) {
            return Err(ErrorKind::Interrupted.into());
        }
        match to.write(chunk) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => chunk = &chunk[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(TICK),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for c in l.incoming().flatten() {
                thread::spawn(move || {
                    let mut c = c;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn roundtrip(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        c.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn carries_holds_and_heals() {
        let p = FaultProxy::start(echo(), 1).unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert_eq!(roundtrip(&mut c, b"ping").unwrap(), b"ping");
        // A blackhole: nothing comes back, the socket stays open; healed, it arrives.
        p.blackhole();
        assert!(roundtrip(&mut c, b"held").is_err());
        p.heal();
        let mut got = [0u8; 4];
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"held");
        // Latency: a round trip takes at least the added delay, both ways.
        p.latency(Duration::from_millis(40), Duration::ZERO);
        let t = Instant::now();
        assert_eq!(roundtrip(&mut c, b"slow").unwrap(), b"slow");
        assert!(t.elapsed() >= Duration::from_millis(80));
        p.heal();
        // A trickle still carries everything.
        p.trickle(3);
        assert_eq!(roundtrip(&mut c, b"0123456789").unwrap(), b"0123456789");
        p.heal();
        // A cut closes the connection; new ones are carried again.
        p.cut();
        let mut buf = [0u8; 1];
        let closed = (0..100).any(|_| {
            let _ = c.write_all(b"x");
            matches!(c.read(&mut buf), Ok(0) | Err(_))
        });
        assert!(closed);
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(roundtrip(&mut c, b"again").unwrap(), b"again");
        // Refused: a new connection is closed at once.
        p.refuse();
        let mut r = TcpStream::connect(p.addr()).unwrap();
        r.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(roundtrip(&mut r, b"no").is_err());
        assert!(p.accepted() >= 3);
    }

    #[test]
    fn cuts_in_the_middle_of_a_reply() {
        let p = FaultProxy::start(echo(), 2).unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(roundtrip(&mut c, b"whole").unwrap(), b"whole");
        p.cut_mid_reply();
        c.write_all(b"abcdefgh").unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        assert_eq!(got, b"abcd", "half the reply, then the end");
    }
}
