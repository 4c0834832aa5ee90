//! A minimal blocking ZooKeeper client written for the tests (jute over TCP): an identity
//! independent of the backend under test, for ACL checks and for deleting test roots.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// ZooKeeper error codes the tests look at.
pub const NO_NODE: i32 = -101;
pub const NO_AUTH: i32 = -102;
pub const NODE_EXISTS: i32 = -110;

pub struct Raw {
    stream: TcpStream,
    xid: i32,
}

fn put_i32(b: &mut Vec<u8>, v: i32) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_i64(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_buf(b: &mut Vec<u8>, v: &[u8]) {
    put_i32(b, v.len() as i32);
    b.extend_from_slice(v);
}

struct Cursor<'a>(&'a [u8]);
impl Cursor<'_> {
    fn i32(&mut self) -> i32 {
        let (h, t) = self.0.split_at(4);
        self.0 = t;
        i32::from_be_bytes(h.try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        let (h, t) = self.0.split_at(8);
        self.0 = t;
        i64::from_be_bytes(h.try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.i32().max(0) as usize;
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        String::from_utf8(h.to_vec()).unwrap()
    }
}

impl Raw {
    /// Connects to the first host of `hosts` (`h:p,h:p`) that accepts a new session, trying
    /// for up to 30 s.
    pub fn connect(hosts: &str) -> Raw {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            for host in hosts.split(',') {
                let attempt = std::panic::catch_unwind(|| Self::connect_to(host));
                if let Ok(raw) = attempt {
                    return raw;
                }
            }
            assert!(
                std::time::Instant::now() < end,
                "no ZooKeeper session on {hosts}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn connect_to(host: &str) -> Raw {
        let stream = TcpStream::connect(host).expect("connect to ZooKeeper");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut raw = Raw { stream, xid: 0 };
        let mut b = Vec::new();
        put_i32(&mut b, 0); // protocol version
        put_i64(&mut b, 0); // last zxid seen
        put_i32(&mut b, 10_000); // session timeout
        put_i64(&mut b, 0); // session id
        put_buf(&mut b, &[0; 16]); // password
        b.push(0); // read-only
        raw.send_frame(&b);
        let reply = raw.read_frame();
        assert!(reply.len() >= 20, "connect reply too short");
        raw
    }

    fn send_frame(&mut self, body: &[u8]) {
        let mut f = Vec::with_capacity(body.len() + 4);
        put_buf(&mut f, body);
        self.stream.write_all(&f).unwrap();
    }

    fn read_frame(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).unwrap();
        body
    }

    /// Sends a request and returns (err, body) of its reply, skipping watch notifications.
    fn request(&mut self, xid: Option<i32>, op: i32, body: &[u8]) -> (i32, Vec<u8>) {
        let xid = xid.unwrap_or_else(|| {
            self.xid += 1;
            self.xid
        });
        let mut b = Vec::new();
        put_i32(&mut b, xid);
        put_i32(&mut b, op);
        b.extend_from_slice(body);
        self.send_frame(&b);
        loop {
            let reply = self.read_frame();
            let mut c = Cursor(&reply);
            let rxid = c.i32();
            let _zxid = c.i64();
            let err = c.i32();
            if rxid == xid {
                return (err, c.0.to_vec());
            }
        }
    }

    /// Adds an auth info (e.g. `digest`, `user:password`).
    pub fn auth(&mut self, scheme: &str, cred: &[u8]) -> i32 {
        let mut b = Vec::new();
        put_i32(&mut b, 0);
        put_buf(&mut b, scheme.as_bytes());
        put_buf(&mut b, cred);
        self.request(Some(-4), 100, &b).0
    }

    /// Creates a persistent (flags 0) or ephemeral (flags 1) node with an open ACL.
    pub fn create(&mut self, path: &str, data: &[u8], flags: i32) -> i32 {
        let mut b = Vec::new();
        put_buf(&mut b, path.as_bytes());
        put_buf(&mut b, data);
        put_i32(&mut b, 1);
        put_i32(&mut b, 31);
        put_buf(&mut b, b"world");
        put_buf(&mut b, b"anyone");
        put_i32(&mut b, flags);
        self.request(None, 1, &b).0
    }

    /// Deletes a node (any version); returns the error code (0 = deleted).
    pub fn delete(&mut self, path: &str) -> i32 {
        let mut b = Vec::new();
        put_buf(&mut b, path.as_bytes());
        put_i32(&mut b, -1);
        self.request(None, 2, &b).0
    }

    /// Sets a node's data (any version); returns the error code.
    pub fn set_data(&mut self, path: &str, data: &[u8]) -> i32 {
        let mut b = Vec::new();
        put_buf(&mut b, path.as_bytes());
        put_buf(&mut b, data);
        put_i32(&mut b, -1);
        self.request(None, 5, &b).0
    }

    /// The children of a node (empty if it does not exist).
    pub fn children(&mut self, path: &str) -> Vec<String> {
        let mut b = Vec::new();
        put_buf(&mut b, path.as_bytes());
        b.push(0);
        let (err, body) = self.request(None, 8, &b);
        if err != 0 {
            return Vec::new();
        }
        let mut c = Cursor(&body);
        let n = c.i32().max(0);
        (0..n).map(|_| c.string()).collect()
    }

    /// The creation time (ms since the epoch, server clock) of a node, if it exists.
    pub fn ctime(&mut self, path: &str) -> Option<i64> {
        let mut b = Vec::new();
        put_buf(&mut b, path.as_bytes());
        b.push(0);
        let (err, body) = self.request(None, 3, &b);
        if err != 0 {
            return None;
        }
        let mut c = Cursor(&body);
        let (_czxid, _mzxid) = (c.i64(), c.i64());
        Some(c.i64())
    }

    /// Deletes `path` and everything below it.
    pub fn delete_tree(&mut self, path: &str) {
        for child in self.children(path) {
            self.delete_tree(&format!("{path}/{child}"));
        }
        let _ = self.delete(path);
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let mut b = Vec::new();
        put_i32(&mut b, self.xid + 1);
        put_i32(&mut b, -11);
        let mut f = Vec::new();
        put_buf(&mut f, &b);
        let _ = self.stream.write_all(&f);
    }
}
