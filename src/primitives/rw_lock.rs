//! Read-write locks: `Session::rw_lock`, its read and write calls and the guard. The
//! contract and the token rule are on [`RwLock`].

use super::lock::waited;
use super::IntoLeaseName;
use crate::engine::acquire::Won;
use crate::engine::driver::acquire::{Form, Spec, Want};
use crate::engine::driver::reserve::Space;
use crate::engine::driver::rw;
use crate::engine::handle::EngineHandle;
use crate::engine::{Cancel, HandleId, Session};
use crate::error::{Error, Result};
use crate::spi::RwMode;
use crate::types::{LeaseName, SessionId, Term, Token};
use crate::Event;
use crossbeam_channel::Receiver;
use std::time::{Duration, Instant};

impl Session {
    /// The read-write lock `name` (cheap: no backend call until a read or write). See
    /// [`RwLock`].
    pub fn rw_lock(&self, name: impl IntoLeaseName) -> Result<RwLock> {
        Ok(RwLock {
            inner: self.inner.clone(),
            name: name.into_lease_name()?,
        })
    }
}

/// A read-write lock of one session (see [`Session::rw_lock`]): the read calls take a
/// shared term, the write calls an exclusive one. Each attempt is one backend call; a caller
/// that waits listens for releases of the name and retries.
///
/// Any number of readers hold a name together, a writer holds it alone, on the backend's
/// clock. A writer that waits makes new readers wait (writer preference), so writers do not
/// starve; its registration is bound to its session and renewed by each of its attempts, so
/// a crashed waiting writer stops blocking readers within one lease. A term, read or write,
/// is bound to its session: a crashed holder's term ends when its session expires, and the
/// guard hears [`Event::LockLost`] like a lock's.
///
/// # Tokens
///
/// Every term carries a fencing token from one counter per name (never reset):
///
/// - a **write** term's token is greater than every token handed out before on that name,
///   read or write;
/// - a **read** term's token is greater than the last write term's token.
///
/// So a resource that remembers the newest *write* token it has seen can reject a write or
/// read of a term older than that write: a reader paused across a writer's term, or a
/// writer paused across the next one, is refused.
///
/// ```
/// use simba_lease::{Config, Session};
/// let a = Session::connect("memory://", Config::default())?;
/// let lock = a.rw_lock("catalog")?;
///
/// let read = lock.read()?;
/// drop(read); // released in the background
/// let write = lock.write()?;
/// let newest_write = write.token(); // what the resource records with the write
/// write.unlock()?;
/// let read = lock.read()?;
/// // The rule a resource checks: a term below the newest write it saw is stale.
/// assert!(read.token() > newest_write);
/// # Ok::<(), simba_lease::Error>(())
/// ```
///
/// A session holds at most one term of a name: threads sharing a session exclude each other
/// on it (a thread asking for a name it holds through the session gets
/// [`Error::AlreadyHeld`]); readers in parallel use sessions of their own. A read-write
/// lock's name is its own: a plain lock, queue or job of the same name does not conflict.
/// Backends without read-write locks answer [`Error::Unsupported`] (see
/// [`LeaseBackend::supports_rw_locks`](crate::spi::LeaseBackend::supports_rw_locks)).
pub struct RwLock {
    inner: EngineHandle,
    name: LeaseName,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name).finish()
    }
}

macro_rules! side {
    ($mode:expr, $what:literal, $take:ident, $try_take:ident, $timeout:ident, $cancellable:ident) => {
        #[doc = concat!("Takes a ", $what, " term, waiting as long as it takes (until the session is lost).")]
        pub fn $take(&self) -> Result<RwGuard> {
            let op = rw::operation($mode);
            waited(self.take($mode, Form::Wait(None), None), op)
        }

        #[doc = concat!("Takes a ", $what, " term if it can be had now; `Ok(None)` otherwise.")]
        pub fn $try_take(&self) -> Result<Option<RwGuard>> {
            self.take($mode, Form::Try, None)
        }

        #[doc = concat!("Takes a ", $what, " term, waiting at most `timeout`; [`Error::Timeout`] after that.")]
        pub fn $timeout(&self, timeout: Duration) -> Result<RwGuard> {
            let op = rw::operation($mode);
            waited(self.take($mode, Form::Wait(Some(timeout)), None), op)
        }

        #[doc = concat!("Takes a ", $what, " term, waiting until `timeout` passes (`None`: no deadline) or `cancel` is cancelled ([`Error::Cancelled`]); [`Error::Timeout`] after the timeout.")]
        pub fn $cancellable(&self, timeout: Option<Duration>, cancel: &Cancel) -> Result<RwGuard> {
            let op = rw::operation($mode);
            waited(self.take($mode, Form::Wait(timeout), Some(cancel)), op)
        }
    };
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &LeaseName {
        &self.name
    }

    side!(
        RwMode::Read,
        "read",
        read,
        try_read,
        read_timeout,
        read_cancellable
    );
    side!(
        RwMode::Write,
        "write",
        write,
        try_write,
        write_timeout,
        write_cancellable
    );

    /// Takes a `mode` term in `form`, through the engine's acquire call.
    fn take(&self, mode: RwMode, form: Form, cancel: Option<&Cancel>) -> Result<Option<RwGuard>> {
        let spec = Spec {
            want: Want::Rw(mode),
            names: vec![self.name.clone()],
            form,
            operation: rw::operation(mode),
        };
        let won = self.inner.acquire(spec, cancel)?;
        Ok(won.map(|won| RwGuard::new(&self.inner, won, mode)))
    }
}

/// A held read or write term of a [`RwLock`]. Dropping it ends the term at once and
/// releases it on the backend from the session's work queue (never network I/O on the
/// dropping thread); [`RwGuard::unlock`] releases it before returning. It is `Send`.
///
/// It ends without being dropped if the session is lost ([`RwGuard::lost`] hears
/// [`Event::LockLost`]): check [`RwGuard::is_valid`], or pass [`RwGuard::token`] to the
/// protected resource (see [`RwLock`] for the token rule).
pub struct RwGuard {
    inner: EngineHandle,
    handle: HandleId,
    session: SessionId,
    term: Term,
    mode: RwMode,
    events: Receiver<Event>,
    done: bool,
    /// When the guard was made (for the hold time metric).
    acquired: Instant,
}

impl RwGuard {
    /// The guard of the `mode` term `won`.
    fn new(inner: &EngineHandle, won: Won, mode: RwMode) -> Self {
        RwGuard {
            inner: inner.clone(),
            handle: won.handle,
            session: won.session,
            term: won.term,
            mode,
            events: won.events,
            done: false,
            acquired: won.at,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LeaseName {
        &self.term.name
    }

    /// Read or write.
    pub fn mode(&self) -> RwMode {
        self.mode
    }

    /// The term's fencing token.
    pub fn token(&self) -> Token {
        self.term.token
    }

    /// The term as granted (its `remaining` is from the acquire reply).
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// Whether the term is still held: the session is live and was not lost.
    pub fn is_valid(&self) -> bool {
        self.inner
            .rw_is_valid(&self.session, &self.term.name, self.term.token)
    }

    /// How long the term stays valid from now if no keep-alive succeeds meanwhile (the
    /// session's local deadline), or `None` if it is not valid now.
    pub fn valid_for(&self) -> Option<Duration> {
        self.inner
            .rw_valid_for(&self.session, &self.term.name, self.term.token)
    }

    /// The fencing token if the term is still held, otherwise [`Error::LeaseLost`].
    pub fn check(&self) -> Result<Token> {
        if self.is_valid() {
            Ok(self.term.token)
        } else {
            Err(crate::error::lease_lost(&self.term))
        }
    }

    /// Receives [`Event::LockLost`] if the term is lost before the guard is dropped.
    pub fn lost(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Releases the term now, reporting a backend failure (dropping the guard only logs
    /// it). A term already lost gives [`Error::LeaseLost`]; one the backend found gone is
    /// reported as `LockLost` with [`LossReason::Missing`](crate::LossReason::Missing).
    pub fn unlock(mut self) -> Result<()> {
        let r = self.release(true);
        // A `LockLost` it reported has reached the session's callbacks when it returns.
        self.inner.wait_delivered(self.handle);
        r
    }

    /// Ends the term locally; releases it on the backend now if `wait`, else queues the
    /// release on the session's work queue.
    fn release(&mut self, wait: bool) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let inner = &self.inner;
        let now = inner.now();
        crate::engine::metrics::lock_hold(now.saturating_duration_since(self.acquired));
        let (id, term, h) = (&self.session, &self.term, self.handle);
        let r = inner.end_rw_term(id, h, term).and_then(|(mode, token)| {
            if !wait {
                inner.release_rw_later(id, &term.name, mode, token);
                return Ok(());
            }
            match inner.release_rw_now(id, &term.name, mode, token)? {
                true => Ok(()),
                false => Err(inner.lock_lost_on_release(id, h, term)),
            }
        });
        inner.drop_listeners(h);
        inner.unreserve(Space::Rw, &self.term.name, h);
        r
    }
}

impl Drop for RwGuard {
    /// Ends the term at once; the backend release runs on the session's work queue.
    fn drop(&mut self) {
        match self.release(false) {
            Ok(()) => {}
            Err(e @ Error::LeaseLost { .. }) => {
                log::debug!("dropped a lost read-write term: {}", e.report())
            }
            Err(e) => log::warn!(
                "releasing the {} term of {} failed: {}",
                self.mode.as_str(),
                self.term.name,
                e.report()
            ),
        }
    }
}

impl std::fmt::Debug for RwGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwGuard")
            .field("mode", &self.mode)
            .field("term", &self.term)
            .finish()
    }
}
