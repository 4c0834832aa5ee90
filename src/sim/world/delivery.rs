//! Event delivery as a process sees it: the core's events go through the shipped
//! [`Listeners`] (channels at once, each callback on a queue of its own), here on virtual
//! queues that run under the simulation's clock. The checker's history is what the
//! simulation's own callbacks hear, one per handle; a process may also have a slow callback
//! of the user's on the session, which blocks on some events for up to a lease (it makes a
//! backend call, say). Delivery that serialises callbacks (premise `serial_delivery`: one
//! queue for all of a session's callbacks, as one serial delivery job per session once did)
//! holds the checker's callbacks behind the slow one, and the losses they hear come late:
//! the checker reports them (`SilentLoss`).

use super::{World, MS};
use crate::engine::core::HandleId;
use crate::engine::executor::{EventQueue, Job};
use crate::engine::listeners::{Listeners, SESSION};
use crate::engine::Event;
use crate::sim::rng::Rng;
use parking_lot::Mutex;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A virtual serial queue: its jobs run when the simulation runs them, one at a time; a job
/// keeps the queue busy for the virtual time its callback spent.
#[derive(Default)]
struct VirtualQueue {
    jobs: Mutex<VecDeque<Job>>,
    /// The instant (virtual ns) until which the job that ran last keeps the queue busy.
    busy_until: AtomicU64,
}

impl EventQueue for VirtualQueue {
    fn push(&self, job: Job) {
        self.jobs.lock().push_back(job);
    }

    fn is_current(&self) -> bool {
        false
    }
}

/// One process's delivery: its listeners, their queues, and what the checker's callbacks
/// heard.
pub(super) struct Delivery {
    listeners: Listeners,
    queues: Arc<Mutex<Vec<Arc<VirtualQueue>>>>,
    /// The virtual time the callback running now spent (its queue is busy that long).
    spent: Arc<AtomicU64>,
    /// What the checker's callbacks heard, by handle, in order.
    heard: Arc<Mutex<Vec<(HandleId, Event)>>>,
    listening: BTreeSet<HandleId>,
    /// When the world wakes this delivery next (a busy queue frees).
    scheduled: Option<u64>,
}

impl Delivery {
    /// The delivery of a process; with `serial`, every callback shares one queue (the
    /// premise); `slow` is the share of events the user's session callback blocks on (for
    /// up to `lease`), with a generator of its own from `seed`.
    pub(super) fn new(serial: bool, slow: f64, lease: u64, seed: u64) -> Self {
        let queues: Arc<Mutex<Vec<Arc<VirtualQueue>>>> = Arc::default();
        let made = queues.clone();
        let make = move || -> Arc<dyn EventQueue> {
            let mut all = made.lock();
            if serial {
                if let Some(q) = all.first() {
                    return q.clone();
                }
            }
            let q = Arc::new(VirtualQueue::default());
            all.push(q.clone());
            q
        };
        let listeners = Listeners::with_queues(Duration::from_secs(3600), Box::new(make));
        let spent = Arc::new(AtomicU64::new(0));
        if slow > 0.0 {
            let (spent, mut rng) = (spent.clone(), Rng::new(seed));
            listeners.callback(SESSION, move |_: &Event| {
                if rng.chance(slow) {
                    spent.fetch_add(rng.range(MS, lease), Ordering::SeqCst);
                }
            });
        }
        Delivery {
            listeners,
            queues,
            spent,
            heard: Arc::default(),
            listening: BTreeSet::new(),
            scheduled: None,
        }
    }

    /// The world woke it as scheduled.
    pub(super) fn woken(&mut self) {
        self.scheduled = None;
    }

    /// Delivers `e` to the session's listeners and to handle `h`'s (a callback of the
    /// checker's, registered on its first event).
    fn deliver(&mut self, h: Option<HandleId>, e: &Event) {
        if let Some(h) = h.filter(|h| self.listening.insert(*h)) {
            let heard = self.heard.clone();
            (self.listeners).callback(h, move |e: &Event| heard.lock().push((h, e.clone())));
        }
        self.listeners.deliver(h, e);
    }

    /// Runs every job that can run at `now` (a queue is free once its last job's time is
    /// spent); returns what the checker's callbacks heard, and when a queue frees next if
    /// jobs wait.
    fn run(&mut self, now: u64) -> (Vec<(HandleId, Event)>, Option<u64>) {
        let queues = self.queues.lock().clone();
        loop {
            let ready = queues
                .iter()
                .find(|q| q.busy_until.load(Ordering::SeqCst) <= now && !q.jobs.lock().is_empty());
            let Some(q) = ready else { break };
            let job = q.jobs.lock().pop_front();
            self.spent.store(0, Ordering::SeqCst);
            if let Some(job) = job {
                job();
            }
            let spent = self.spent.load(Ordering::SeqCst);
            q.busy_until.store(now + spent, Ordering::SeqCst);
        }
        let next = (queues.iter())
            .filter(|q| !q.jobs.lock().is_empty())
            .map(|q| q.busy_until.load(Ordering::SeqCst))
            .min();
        (std::mem::take(&mut *self.heard.lock()), next)
    }
}

impl World<'_> {
    /// Client `c`'s core emitted `e` for handle `h`: delivered through its listeners. A
    /// session's own events (`h` none) reach the checker at once, after what the checker's
    /// callbacks heard so far; a handle's, when the checker's callback for it runs
    /// ([`World::run_callbacks`]).
    pub(super) fn emitted(&mut self, c: usize, h: Option<HandleId>, e: crate::engine::Event) {
        if h.is_none() {
            // After the handles' events emitted before it (heard at once unless a queue is
            // held back).
            self.run_callbacks(c);
        }
        self.clients[c].delivery.deliver(h, &e);
        if h.is_none() {
            self.on_event(c, None, e);
        }
    }

    /// Runs client `c`'s callbacks that can run now; the checker hears what its callbacks
    /// heard, and the client is woken again when a busy queue frees.
    pub(super) fn run_callbacks(&mut self, c: usize) {
        let (heard, next) = self.clients[c].delivery.run(self.now);
        for (h, e) in heard {
            self.on_event(c, Some(h), e);
        }
        let d = &mut self.clients[c].delivery;
        if let Some(at) = next.filter(|at| *at > self.now && d.scheduled != Some(*at)) {
            d.scheduled = Some(at);
            let wait = (at - self.now) / MS;
            self.tr(Some(c), None, || {
                format!("a callback is busy: events wait {wait} ms")
            });
            self.push(at, super::network::Ev::Callbacks(c));
        }
    }
}
