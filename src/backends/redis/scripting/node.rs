//! One connection to one Redis node on the command path, for one server and for each node of
//! a cluster (the cluster client's connection type): the `redis` crate packs the commands and
//! parses the replies, the socket I/O is ours, for two reasons.
//!
//! * **Interrupted reads are read again** (issue 21.6). A signal delivered to the calling
//!   thread (a handler, even with `SA_RESTART`, or a stop and continue) fails a socket read
//!   that has a timeout with `EINTR`. The driver's connection returns that as the call's error
//!   and, the reply being still owed, would skip the next reply; the call is lost, though the
//!   command ran (a release that released, yet failed). Here the interrupted `read(2)` is
//!   simply issued again within what is left of the reply's timeout, so no command is ever
//!   sent twice and a retry is safe for every command, writes included. Writes need nothing:
//!   `write_all` already issues an interrupted `write(2)` again.
//! * **One deadline for a connect** (issue 21.12): resolving, the TCP connect and the
//!   handshake (`AUTH`, `SELECT`) share the connect timeout; the driver gave each reply of its
//!   handshake pipeline the full timeout (2 s took 4 s).
//!
//! TLS (`rediss://`) and RESP3 connections stay the driver's ([`NodeConnection::Driver`]):
//! there an interrupted read still fails the call (the failure is reported, never resent).

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, RedisResult, Value};
use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A connection to one node: ours on plain TCP, the driver's on TLS or RESP3.
pub(super) enum NodeConnection {
    /// Plain TCP, RESP2: interrupted reads are read again.
    Plain(Plain),
    /// The driver's connection (TLS, RESP3).
    Driver(redis::Connection),
}

impl NodeConnection {
    /// Connects to `info` within `timeout` (all of it: resolving, TCP and handshake).
    pub(super) fn open(info: &ConnectionInfo, timeout: Option<Duration>) -> RedisResult<Self> {
        match info.addr() {
            ConnectionAddr::Tcp(host, port)
                if !info.redis_settings().protocol().supports_resp3() =>
            {
                Plain::connect(host, *port, info, timeout).map(NodeConnection::Plain)
            }
            _ => {
                // The driver's handshake reads each reply with the whole timeout: without
                // its `CLIENT SETINFO` pair (ignored replies), a connect with neither
                // password nor database sends nothing, and one with a password one command.
                let info = info
                    .clone()
                    .set_redis_settings(info.redis_settings().clone().set_skip_set_lib_name());
                let con = <redis::Connection as redis::cluster::Connect>::connect(info, timeout)?;
                // The driver clears its timeouts after the handshake, and a TLS handshake with
                // nothing to send completes at the first command: until the user sets its own
                // (the cluster client sends a `PING` before it does), the connect timeout.
                con.set_read_timeout(timeout)?;
                con.set_write_timeout(timeout)?;
                Ok(NodeConnection::Driver(con))
            }
        }
    }
}

/// A plain TCP connection speaking RESP2.
pub(super) struct Plain {
    stream: TcpStream,
    parser: redis::Parser,
    db: i64,
    /// The read timeout set by the user of the connection.
    read_timeout: Cell<Option<Duration>>,
    /// Whether the socket's read timeout was shortened to the rest of a reply's time.
    shortened: Cell<bool>,
    open: bool,
}

/// The error of a reply whose time ran out while reads were interrupted.
fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "Redis reply timed out")
}

/// The time left until `deadline`, or a timeout error.
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(timed_out());
    }
    Ok(left)
}

/// Reads from a socket, issuing a read interrupted by a signal (`EINTR`) again within the
/// time left until `deadline`: the socket's timeout is shortened to it, so that a storm of
/// signals cannot make a reply wait longer than its timeout.
struct Uninterrupted<'a> {
    stream: &'a TcpStream,
    deadline: Option<Instant>,
    shortened: &'a Cell<bool>,
}

impl Read for Uninterrupted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match (&*self.stream).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    if let Some(deadline) = self.deadline {
                        self.stream.set_read_timeout(Some(left(deadline)?))?;
                        self.shortened.set(true);
                    }
                }
                r => return r,
            }
        }
    }
}

impl Plain {
    fn connect(
        host: &str,
        port: u16,
        info: &ConnectionInfo,
        timeout: Option<Duration>,
    ) -> RedisResult<Self> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut last = None;
        let mut stream = None;
        for addr in (host, port).to_socket_addrs()? {
            let attempt = match deadline {
                Some(d) => left(d).and_then(|t| TcpStream::connect_timeout(&addr, t)),
                None => TcpStream::connect(addr),
            };
            match attempt {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(e.into()),
            (None, None) => {
                return Err(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "could not resolve to any addresses",
                )))
            }
        };
        stream.set_nodelay(true)?;
        let settings = info.redis_settings();
        let mut con = Plain {
            stream,
            parser: redis::Parser::new(),
            db: settings.db(),
            read_timeout: Cell::new(None),
            shortened: Cell::new(false),
            open: true,
        };
        // The handshake within what is left of the connect's time.
        let rest = deadline.map(left).transpose()?;
        con.set_timeouts(rest)?;
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            con.req_command(&auth)?.extract_error()?;
        }
        if settings.db() != 0 {
            if let Some(d) = deadline {
                con.set_timeouts(Some(left(d)?))?;
            }
            con.req_command(redis::cmd("SELECT").arg(settings.db()))?
                .extract_error()?;
        }
        // Until the user sets its own: the cluster client sends a `PING` before it does.
        con.set_timeouts(timeout)?;
        Ok(con)
    }

    fn set_timeouts(&self, t: Option<Duration>) -> RedisResult<()> {
        self.set_read_timeout(t)?;
        self.stream.set_write_timeout(t)?;
        Ok(())
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> RedisResult<()> {
        self.stream.set_read_timeout(t)?;
        self.read_timeout.set(t);
        self.shortened.set(false);
        Ok(())
    }

    fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        if !self.open {
            return Err(closed());
        }
        // `write_all` issues an interrupted write again.
        let r = (&self.stream).write_all(bytes);
        if r.is_err() {
            self.open = false;
        }
        Ok(r?)
    }

    /// One reply (pushes, which a RESP2 connection never gets, are skipped) within the read
    /// timeout, interrupted reads read again. Any failure closes the connection (a reply may
    /// be left half read).
    fn recv(&mut self) -> RedisResult<Value> {
        if !self.open {
            return Err(closed());
        }
        let timeout = self.read_timeout.get();
        if self.shortened.get() {
            self.stream.set_read_timeout(timeout)?;
            self.shortened.set(false);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let mut reader = Uninterrupted {
                stream: &self.stream,
                deadline,
                shortened: &self.shortened,
            };
            match self.parser.parse_value(&mut reader) {
                Ok(Value::Push { .. }) => continue,
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.open = false;
                    return Err(e);
                }
            }
        }
    }
}

fn closed() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::NotConnected,
        "the Redis connection was closed after a failure",
    ))
}

impl ConnectionLike for Plain {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send(cmd)?;
        self.recv()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send(cmd)?;
        let mut out = Vec::with_capacity(count);
        let mut skipped_error = None;
        for i in 0..offset.saturating_add(count) {
            let v = self.recv()?;
            if i >= offset {
                out.push(v);
            } else if let Value::ServerError(e) = v {
                skipped_error.get_or_insert(e);
            }
        }
        match skipped_error {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            NodeConnection::Plain(c) => c.req_packed_command(cmd),
            NodeConnection::Driver(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            NodeConnection::Plain(c) => c.req_packed_commands(cmd, offset, count),
            NodeConnection::Driver(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            NodeConnection::Plain(c) => c.get_db(),
            NodeConnection::Driver(c) => c.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            NodeConnection::Plain(c) => c.check_connection(),
            NodeConnection::Driver(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            NodeConnection::Plain(c) => c.is_open(),
            NodeConnection::Driver(c) => c.is_open(),
        }
    }
}

/// The cluster client's connection type: every node of a cluster is connected this way.
impl redis::cluster::Connect for NodeConnection {
    fn connect<T>(info: T, timeout: Option<Duration>) -> RedisResult<Self>
    where
        T: redis::IntoConnectionInfo,
    {
        NodeConnection::open(&info.into_connection_info()?, timeout)
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        match self {
            NodeConnection::Plain(c) => c.send(cmd),
            NodeConnection::Driver(c) => c.send_packed_command(cmd),
        }
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        match self {
            NodeConnection::Plain(c) => Ok(c.stream.set_write_timeout(dur)?),
            NodeConnection::Driver(c) => c.set_write_timeout(dur),
        }
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        match self {
            NodeConnection::Plain(c) => c.set_read_timeout(dur),
            NodeConnection::Driver(c) => c.set_read_timeout(dur),
        }
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        match self {
            NodeConnection::Plain(c) => c.recv(),
            NodeConnection::Driver(c) => c.recv_response(),
        }
    }
}
