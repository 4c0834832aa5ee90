//! Read-write locks: `Session::rw_lock`, its read and write calls and the guard. The
//! contract and the token rule are on [`RwLock`].

use super::guard::TermGuard;
use super::lock::waited;
use super::IntoLeaseName;
use crate::engine::handle::{rw_operation, EngineHandle, Form, Spec, TermKind, Want, Won};
use crate::engine::{Cancel, Session};
use crate::error::Result;
use crate::spi::RwMode;
use crate::types::{LeaseName, Term, Token};
#[cfg(doc)]
use crate::Error;
use crate::Event;
use crossbeam_channel::Receiver;
use std::time::Duration;

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
            let op = rw_operation($mode);
            waited(self.take($mode, Form::Wait(None), None), op)
        }

        #[doc = concat!("Takes a ", $what, " term if it can be had now; `Ok(None)` otherwise.")]
        pub fn $try_take(&self) -> Result<Option<RwGuard>> {
            self.take($mode, Form::Try, None)
        }

        #[doc = concat!("Takes a ", $what, " term, waiting at most `timeout`; [`Error::Timeout`] after that.")]
        pub fn $timeout(&self, timeout: Duration) -> Result<RwGuard> {
            let op = rw_operation($mode);
            waited(self.take($mode, Form::Wait(Some(timeout)), None), op)
        }

        #[doc = concat!("Takes a ", $what, " term, waiting until `timeout` passes (`None`: no deadline) or `cancel` is cancelled ([`Error::Cancelled`]); [`Error::Timeout`] after the timeout.")]
        pub fn $cancellable(&self, timeout: Option<Duration>, cancel: &Cancel) -> Result<RwGuard> {
            let op = rw_operation($mode);
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
            operation: rw_operation(mode),
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
    g: TermGuard,
    mode: RwMode,
}

impl RwGuard {
    /// The guard of the `mode` term `won`.
    fn new(inner: &EngineHandle, won: Won, mode: RwMode) -> Self {
        RwGuard {
            g: TermGuard::new(inner, won, TermKind::Rw(mode)),
            mode,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LeaseName {
        &self.g.term().name
    }

    /// Read or write.
    pub fn mode(&self) -> RwMode {
        self.mode
    }

    /// The term's fencing token.
    pub fn token(&self) -> Token {
        self.g.term().token
    }

    /// The term as granted (its `remaining` is from the acquire reply).
    pub fn term(&self) -> &Term {
        self.g.term()
    }

    /// Whether the term is still held: the session is live and was not lost.
    pub fn is_valid(&self) -> bool {
        self.g.valid_for().is_some()
    }

    /// How long the term stays valid from now if no keep-alive succeeds meanwhile (the
    /// session's local deadline), or `None` if it is not valid now.
    pub fn valid_for(&self) -> Option<Duration> {
        self.g.valid_for()
    }

    /// The fencing token if the term is still held, otherwise [`Error::LeaseLost`].
    pub fn check(&self) -> Result<Token> {
        self.g.check()
    }

    /// Receives [`Event::LockLost`] if the term is lost before the guard is dropped.
    pub fn lost(&self) -> &Receiver<Event> {
        self.g.lost()
    }

    /// Releases the term now, reporting a backend failure (dropping the guard only logs
    /// it). A term already lost gives [`Error::LeaseLost`]; one the backend found gone is
    /// reported as `LockLost` with [`LossReason::Missing`](crate::LossReason::Missing).
    pub fn unlock(self) -> Result<()> {
        self.g.unlock()
    }
}

impl std::fmt::Debug for RwGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwGuard")
            .field("mode", &self.mode)
            .field("term", self.g.term())
            .finish()
    }
}
