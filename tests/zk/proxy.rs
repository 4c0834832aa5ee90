//! A loopback TCP proxy the test controls: `cut` closes every connection and refuses new
//! ones until `heal`.

use parking_lot::Mutex;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Default)]
struct State {
    cut: AtomicBool,
    stop: AtomicBool,
    hold_replies: AtomicBool,
    /// Bytes forwarded from clients to the server.
    sent: AtomicU64,
    conns: Mutex<Vec<TcpStream>>,
}

pub struct Proxy {
    addr: String,
    state: Arc<State>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, state: Arc<State>, replies: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !replies {
                    state.sent.fetch_add(n as u64, Ordering::SeqCst);
                }
                while replies
                    && state.hold_replies.load(Ordering::SeqCst)
                    && !state.cut.load(Ordering::SeqCst)
                {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                if state.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(State::default());
        let (st, up) = (state.clone(), upstream.to_owned());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if st.cut.load(Ordering::SeqCst) {
                    drop(client); // refused while cut
                    continue;
                }
                let Ok(server) = TcpStream::connect(&up) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut conns = st.conns.lock();
                    conns.push(client.try_clone().unwrap());
                    conns.push(server.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (a, b) = (st.clone(), st.clone());
                std::thread::spawn(move || pump(client, server, a, false));
                std::thread::spawn(move || pump(s2, c2, b, true));
            }
        });
        Proxy { addr, state }
    }

    /// `127.0.0.1:port` to connect through.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        for c in self.state.conns.lock().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Holds back every reply from the server (requests still go through) until
    /// [`Proxy::release_replies`]: replies look lost to the client.
    pub fn hold_replies(&self) {
        self.state.hold_replies.store(true, Ordering::SeqCst);
    }

    /// Delivers the held replies and forwards replies again.
    pub fn release_replies(&self) {
        self.state.hold_replies.store(false, Ordering::SeqCst);
    }

    /// Bytes forwarded from clients to the server so far.
    pub fn sent_bytes(&self) -> u64 {
        self.state.sent.load(Ordering::SeqCst)
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.state.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr); // wakes the accept loop
    }
}
