//! A small blocking connection pool.
//!
//! Why our own and not `r2d2` or the `mysql` crate's pool: a lease backend needs one or two
//! connections, a checkout bounded by the query timeout (a keep-alive that waits longer has
//! failed), and no background threads. `r2d2` (last released 2022) adds a scheduler with three
//! threads per pool; the `mysql` pool pings on every checkout and resets every connection on
//! return (an extra round trip each, and prepared statements dropped). This pool is a
//! `parking_lot` mutex over idle connections plus a condition variable: it opens connections
//! lazily up to `size`, reuses the most recently returned one first (so one stays warm), checks
//! a connection that sat idle longer than [`VALIDATE_AFTER`] with a round trip before handing
//! it out (servers close idle connections), drops a connection the driver reports closed, and
//! forgets every idle connection after a connection-level failure (a restarted server leaves
//! them all dead).

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection idle for longer than this is checked with a round trip before use.
pub(crate) const VALIDATE_AFTER: Duration = Duration::from_secs(30);

/// A driver connection the pool can hold.
pub(crate) trait PoolConn: Send + 'static {
    /// Whether the driver already knows the connection is unusable (no I/O).
    fn is_closed(&self) -> bool;
    /// Whether the connection answers a trivial round trip within `timeout`.
    fn is_valid(&mut self, timeout: Duration) -> bool;
}

struct State<C> {
    /// Idle connections with the instant each was returned; the last is the warmest.
    idle: Vec<(C, Instant)>,
    open: usize,
}

pub(crate) struct Pool<C: PoolConn> {
    state: Mutex<State<C>>,
    freed: Condvar,
    size: usize,
    validate_after: Duration,
    connect: Arc<dyn Fn() -> Result<C> + Send + Sync>,
}

impl<C: PoolConn + Send + 'static> Pool<C> {
    pub(crate) fn new(
        size: usize,
        connect: impl Fn() -> Result<C> + Send + Sync + 'static,
    ) -> Self {
        Pool {
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            size: size.max(1),
            validate_after: VALIDATE_AFTER,
            connect: Arc::new(connect),
        }
    }

    #[cfg(test)]
    fn validate_after(mut self, d: Duration) -> Self {
        self.validate_after = d;
        self
    }

    /// A connection, waiting at most `timeout` for one to be free (opening one counts too).
    pub(crate) fn get(&self, timeout: Duration) -> Result<Pooled<'_, C>> {
        let deadline = crate::backends::options::deadline(timeout);
        let mut st = self.state.lock();
        loop {
            while let Some((mut c, since)) = st.idle.pop() {
                if c.is_closed() {
                    st.open -= 1;
                    continue;
                }
                if since.elapsed() > self.validate_after {
                    drop(st);
                    let left = deadline.saturating_duration_since(Instant::now());
                    let ok = c.is_valid(left.min(Duration::from_secs(1)));
                    st = self.state.lock();
                    if !ok {
                        st.open -= 1;
                        drop(c);
                        continue;
                    }
                }
                return Ok(Pooled {
                    pool: self,
                    conn: Some(c),
                    broken: false,
                });
            }
            if st.open < self.size {
                st.open += 1;
                drop(st);
                let left = deadline.saturating_duration_since(Instant::now());
                return match self.connect_within(left) {
                    Ok(c) => Ok(Pooled {
                        pool: self,
                        conn: Some(c),
                        broken: false,
                    }),
                    Err(e) => {
                        self.state.lock().open -= 1;
                        self.freed.notify_one();
                        Err(e)
                    }
                };
            }
            if self.freed.wait_until(&mut st, deadline).timed_out() {
                return Err(Error::Timeout {
                    operation: "waiting for a pooled connection",
                    after: timeout,
                    source: None,
                });
            }
        }
    }

    /// Opens a connection on a thread of its own, waiting at most `limit`: a driver bounds
    /// only the TCP connect, so a server that accepts and then stays silent (or sends
    /// nonsense lengths) would hold the caller forever. After `limit` the attempt goes on in
    /// the background and its connection, if any, is dropped.
    fn connect_within(&self, limit: Duration) -> Result<C> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let connect = self.connect.clone();
        std::thread::Builder::new()
            .name("simba-sql-connect".into())
            .spawn(move || {
                let _ = tx.send(connect());
            })
            .map_err(|e| super::failure::error("starting a connection thread", e))?;
        rx.recv_timeout(limit).unwrap_or_else(|_| {
            Err(Error::Timeout {
                operation: "connecting to the database",
                after: limit,
                source: None,
            })
        })
    }

    /// A new connection outside the pool (not counted against its size), opened within
    /// `limit`: for probes that need two connections of their own at once.
    pub(crate) fn open_unpooled(&self, limit: Duration) -> Result<C> {
        self.connect_within(limit)
    }

    /// Closes every idle connection (after a connection-level failure).
    pub(crate) fn flush_idle(&self) {
        let dropped: Vec<(C, Instant)> = {
            let mut st = self.state.lock();
            let d: Vec<(C, Instant)> = st.idle.drain(..).collect();
            st.open -= d.len();
            d
        };
        if !dropped.is_empty() {
            self.freed.notify_all();
        }
        drop(dropped);
    }

    /// Applies `f` to every idle connection (diagnostics).
    pub(crate) fn for_each_idle(&self, mut f: impl FnMut(&C)) {
        self.state.lock().idle.iter().for_each(|(c, _)| f(c));
    }

    fn put_back(&self, c: C, broken: bool) {
        let mut st = self.state.lock();
        if broken || c.is_closed() {
            st.open -= 1;
            drop(st);
            drop(c);
        } else {
            st.idle.push((c, Instant::now()));
            drop(st);
        }
        self.freed.notify_one();
    }
}

/// A checked-out connection; returns to the pool on drop unless marked broken.
pub(crate) struct Pooled<'a, C: PoolConn> {
    pool: &'a Pool<C>,
    conn: Option<C>,
    broken: bool,
}

impl<C: PoolConn> Pooled<'_, C> {
    /// Drops the connection instead of returning it, and forgets the idle ones.
    pub(crate) fn discard(&mut self) {
        self.broken = true;
        self.pool.flush_idle();
    }
}

impl<C: PoolConn> Deref for Pooled<'_, C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.conn.as_ref().expect("present until drop")
    }
}

impl<C: PoolConn> DerefMut for Pooled<'_, C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().expect("present until drop")
    }
}

impl<C: PoolConn> Drop for Pooled<'_, C> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            self.pool.put_back(c, self.broken);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Fake(bool);
    impl PoolConn for Fake {
        fn is_closed(&self) -> bool {
            self.0
        }
        fn is_valid(&mut self, _: Duration) -> bool {
            !self.0
        }
    }

    #[test]
    fn bounded_reused_and_times_out() {
        let opened = Arc::new(AtomicUsize::new(0));
        let o = opened.clone();
        let pool = Pool::new(2, move || {
            o.fetch_add(1, Ordering::SeqCst);
            Ok(Fake(false))
        });
        let a = pool.get(Duration::from_millis(10)).unwrap();
        let mut b = pool.get(Duration::from_millis(10)).unwrap();
        let e = pool.get(Duration::from_millis(10)).err().unwrap();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        drop(a);
        let _a = pool.get(Duration::from_millis(10)).unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        b.discard();
        drop(b);
        let _b = pool.get(Duration::from_millis(10)).unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 3);
    }

    /// A connection that fails its check after sitting idle is replaced.
    #[test]
    fn idle_connections_are_checked() {
        struct Flaky(Arc<AtomicUsize>, bool);
        impl PoolConn for Flaky {
            fn is_closed(&self) -> bool {
                false
            }
            fn is_valid(&mut self, _: Duration) -> bool {
                self.0.fetch_add(1, Ordering::SeqCst);
                self.1
            }
        }
        let checks = Arc::new(AtomicUsize::new(0));
        let c = checks.clone();
        let opened = Arc::new(AtomicUsize::new(0));
        let o = opened.clone();
        let pool = Pool::new(1, move || {
            // The first connection goes bad while idle; the next is fine.
            let n = o.fetch_add(1, Ordering::SeqCst);
            Ok(Flaky(c.clone(), n > 0))
        })
        .validate_after(Duration::ZERO);
        drop(pool.get(Duration::from_millis(10)).unwrap());
        std::thread::sleep(Duration::from_millis(2));
        let conn = pool.get(Duration::from_millis(10)).unwrap();
        assert!(conn.1, "the bad idle connection was replaced");
        assert_eq!(checks.load(Ordering::SeqCst), 1);
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn closed_connections_are_replaced() {
        let pool = Pool::new(1, || Ok(Fake(false)));
        {
            let mut c = pool.get(Duration::from_millis(10)).unwrap();
            c.0 = true;
        }
        let c = pool.get(Duration::from_millis(10)).unwrap();
        assert!(!c.0);
    }
}
