//! Threads shared by every session of the process: an elastic pool running per-session
//! serial queues (a session's jobs run one at a time, in order; different sessions' jobs
//! run side by side), and one timer thread that ticks each session when it is due.
//!
//! A slow job (an acquire hanging on the network, a user callback) holds only its own
//! session's queue: when every pool thread is busy, the next ready queue gets a new thread.
//! Idle pool threads end after a while, so an idle process keeps few threads.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// How long an idle pool thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(10);

/// Threads a pool starts at once when none is idle; beyond them, a queue that waited
/// [`PATIENCE`] without a free thread gets a new one (checked by the timer).
const EAGER: usize = 2;
const PATIENCE: Duration = Duration::from_millis(2);

thread_local! {
    /// The serial queue whose jobs this thread runs now (its address; 0: none).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// An elastic pool of threads serving [`Serial`] queues.
pub(crate) struct Pool {
    /// The pool itself, for the threads it starts.
    me: Weak<Pool>,
    name: &'static str,
    state: Mutex<PoolState>,
    ready: Condvar,
    /// This pool's key in the [`Timer`], which starts threads for queues kept waiting.
    check: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct PoolState {
    queues: VecDeque<Arc<Serial>>,
    idle: usize,
    threads: usize,
}

impl Pool {
    fn new(name: &'static str) -> Arc<Pool> {
        let pool = Arc::new_cyclic(|me| Pool {
            me: me.clone(),
            name,
            state: Mutex::new(PoolState::default()),
            ready: Condvar::new(),
            check: std::sync::atomic::AtomicU64::new(0),
        });
        let target: Weak<dyn Tick> = Arc::downgrade(&(pool.clone() as Arc<dyn Tick>));
        let key = Timer::global().add(target);
        pool.check.store(key, std::sync::atomic::Ordering::SeqCst);
        pool
    }

    fn spawn(&self, st: &mut PoolState) {
        let Some(pool) = self.me.upgrade() else {
            return;
        };
        match std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || pool.worker())
        {
            Ok(_) => st.threads += 1,
            // No new thread: an existing one serves the queue once it is free.
            Err(e) => log::error!("no new {} thread: {e}", self.name),
        }
    }

    /// The pool for backend work (acquires, reads, releases, closes, reopens).
    pub(crate) fn work() -> &'static Arc<Pool> {
        static POOL: OnceLock<Arc<Pool>> = OnceLock::new();
        POOL.get_or_init(|| Pool::new("simba-work"))
    }

    /// The pool delivering events to channels and callbacks.
    pub(crate) fn events() -> &'static Arc<Pool> {
        static POOL: OnceLock<Arc<Pool>> = OnceLock::new();
        POOL.get_or_init(|| Pool::new("simba-events"))
    }

    /// A new serial queue on this pool.
    pub(crate) fn serial(self: &Arc<Self>) -> Arc<Serial> {
        Arc::new(Serial {
            pool: self.clone(),
            jobs: Mutex::new((VecDeque::new(), false)),
        })
    }

    fn schedule(self: &Arc<Self>, queue: Arc<Serial>) {
        let mut st = self.state.lock();
        st.queues.push_back(queue);
        if st.idle >= st.queues.len() {
            self.ready.notify_one();
        } else if st.threads < EAGER {
            self.spawn(&mut st);
        } else {
            // Busy threads are usually free again within microseconds; if not, the timer
            // starts another one so a slow job never holds up other sessions.
            drop(st);
            let key = self.check.load(std::sync::atomic::Ordering::SeqCst);
            Timer::global().set_unless_sooner(key, Instant::now() + PATIENCE);
        }
    }

    fn worker(self: Arc<Self>) {
        loop {
            let queue = {
                let mut st = self.state.lock();
                loop {
                    if let Some(q) = st.queues.pop_front() {
                        break q;
                    }
                    st.idle += 1;
                    let timed_out = self.ready.wait_for(&mut st, IDLE).timed_out();
                    st.idle -= 1;
                    if timed_out && st.queues.is_empty() {
                        st.threads -= 1;
                        return;
                    }
                }
            };
            queue.run();
        }
    }
}

impl Tick for Pool {
    /// Starts one thread if queues are still waiting with no thread idle, and looks again
    /// a patience later: queues of short jobs (most callbacks) drain on the threads there
    /// are, so many queues ready at once do not start as many threads.
    fn tick(&self) -> Option<Instant> {
        let mut st = self.state.lock();
        if st.queues.len() <= st.idle {
            return None;
        }
        self.spawn(&mut st);
        Some(Instant::now() + PATIENCE)
    }
}

/// Jobs that run one at a time, in the order they were pushed, on a [`Pool`].
pub(crate) struct Serial {
    pool: Arc<Pool>,
    /// The jobs, and whether the queue is scheduled or running.
    jobs: Mutex<(VecDeque<Job>, bool)>,
}

impl Serial {
    /// Queues `job` after the ones already queued.
    pub(crate) fn push(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) {
        let mut jobs = self.jobs.lock();
        jobs.0.push_back(Box::new(job));
        if !std::mem::replace(&mut jobs.1, true) {
            drop(jobs);
            self.pool.schedule(self.clone());
        }
    }

    /// Whether the calling thread is running one of this queue's jobs.
    pub(crate) fn is_current(self: &Arc<Self>) -> bool {
        CURRENT.with(|c| c.get() == Arc::as_ptr(self) as usize)
    }

    fn run(self: &Arc<Self>) {
        CURRENT.with(|c| c.set(Arc::as_ptr(self) as usize));
        loop {
            let job = {
                let mut jobs = self.jobs.lock();
                match jobs.0.pop_front() {
                    Some(job) => job,
                    None => {
                        jobs.1 = false;
                        break;
                    }
                }
            };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
                let message = super::guarded::panic_message(&*payload);
                log::error!("a {} job panicked: {message}", self.pool.name);
            }
        }
        CURRENT.with(|c| c.set(0));
    }
}

/// A queue whose jobs run one at a time, in the order they were pushed: where a callback's
/// events run. The process's event pool ([`Serial`]) in a session; the simulation's virtual
/// queues under its clock.
pub(crate) trait EventQueue: Send + Sync {
    /// Queues `job` after the ones already queued.
    fn push(&self, job: Job);
    /// Whether the calling thread is running one of this queue's jobs.
    fn is_current(&self) -> bool;
}

impl EventQueue for Arc<Serial> {
    fn push(&self, job: Job) {
        Serial::push(self, job)
    }

    fn is_current(&self) -> bool {
        Serial::is_current(self)
    }
}

/// Something the timer ticks.
pub(crate) trait Tick: Send + Sync {
    /// Runs due work; returns when to tick next (`None`: only when woken).
    fn tick(&self) -> Option<Instant>;
}

/// One thread ticking every session of the process at its next deadline.
pub(crate) struct Timer {
    state: Mutex<TimerState>,
    changed: Condvar,
}

#[derive(Default)]
struct TimerState {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Each entry's target and its current deadline (heap entries for other instants are
    /// stale and skipped).
    entries: HashMap<u64, (Weak<dyn Tick>, Option<Instant>)>,
    next_key: u64,
}

impl Timer {
    /// The process's timer (its thread starts on first use).
    pub(crate) fn global() -> &'static Arc<Timer> {
        static TIMER: OnceLock<Arc<Timer>> = OnceLock::new();
        TIMER.get_or_init(|| {
            let timer = Arc::new(Timer {
                state: Mutex::new(TimerState::default()),
                changed: Condvar::new(),
            });
            let t = timer.clone();
            if let Err(e) = std::thread::Builder::new()
                .name("simba-timer".into())
                .spawn(move || t.run())
            {
                log::error!("no timer thread: {e}");
            }
            timer
        })
    }

    /// Registers `target`; it ticks first at once.
    pub(crate) fn add(&self, target: Weak<dyn Tick>) -> u64 {
        let mut st = self.state.lock();
        st.next_key += 1;
        let key = st.next_key;
        st.entries.insert(key, (target, None));
        drop(st);
        self.set(key, Some(Instant::now()));
        key
    }

    /// Ticks `key` at `at` (replacing its previous deadline; `None`: only when set again).
    pub(crate) fn set(&self, key: u64, at: Option<Instant>) {
        let mut st = self.state.lock();
        let Some(entry) = st.entries.get_mut(&key) else {
            return;
        };
        entry.1 = at;
        if let Some(at) = at {
            let earliest = st.heap.peek().is_none_or(|Reverse((t, _))| at < *t);
            st.heap.push(Reverse((at, key)));
            if earliest {
                self.changed.notify_one();
            }
        }
    }

    /// Forgets `key`.
    pub(crate) fn remove(&self, key: u64) {
        self.state.lock().entries.remove(&key);
    }

    fn run(&self) {
        loop {
            let due: Vec<(u64, Arc<dyn Tick>)> = {
                let mut st = self.state.lock();
                loop {
                    let now = Instant::now();
                    let mut due = Vec::new();
                    while let Some(Reverse((at, key))) = st.heap.peek().copied() {
                        if at > now {
                            break;
                        }
                        st.heap.pop();
                        let Some(entry) = st.entries.get_mut(&key) else {
                            continue;
                        };
                        if entry.1 != Some(at) {
                            continue; // a stale deadline
                        }
                        entry.1 = None;
                        match entry.0.upgrade() {
                            Some(target) => due.push((key, target)),
                            None => {
                                st.entries.remove(&key);
                            }
                        }
                    }
                    if !due.is_empty() {
                        break due;
                    }
                    match st.heap.peek().map(|Reverse((at, _))| *at) {
                        Some(at) => {
                            self.changed.wait_until(&mut st, at);
                        }
                        None => self.changed.wait(&mut st),
                    }
                }
            };
            for (key, target) in due {
                let next = catch_unwind(AssertUnwindSafe(|| target.tick())).unwrap_or_else(|_| {
                    log::error!("a session's tick panicked");
                    None
                });
                if next.is_some() {
                    self.set_if_unset(key, next);
                }
            }
        }
    }

    /// Ticks `key` at `at` unless it is due sooner already.
    pub(crate) fn set_unless_sooner(&self, key: u64, at: Instant) {
        self.set_if_unset(key, Some(at));
    }

    /// Sets `key`'s deadline unless one was set meanwhile that is earlier.
    fn set_if_unset(&self, key: u64, at: Option<Instant>) {
        let current = self.state.lock().entries.get(&key).and_then(|e| e.1);
        match (current, at) {
            (Some(c), Some(a)) if c <= a => {}
            _ => self.set(key, at),
        }
    }
}
