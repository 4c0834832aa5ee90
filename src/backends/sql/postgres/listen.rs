//! PostgreSQL `LISTEN/NOTIFY`: release, new-term and membership notifications.
//!
//! The statements publish with `pg_notify(channel, payload)` inside the statement that makes
//! the change, so a notification is delivered exactly when the change commits. One channel per
//! table prefix, `{prefix}simba` (several installations can share a database); payloads are
//! `r:<lease>` (released, or freed by a closed or purged session), `a:<lease>` (a new term)
//! and `g:<group>` (a join or a leave).
//!
//! One dedicated connection per backend (not from the pool, `application_name`
//! `simba-listen/{prefix}`) listens on its own thread, started by the first subscription. On
//! any connection failure the thread publishes [`Notification::Resync`], reconnects with
//! backoff (100 ms doubling to 5 s), listens again and publishes `Resync` once more, since
//! notifications sent in between are lost. The thread checks the connection every few seconds
//! and stops (on its own, without being joined) once the backend is dropped.

use super::conn::PgTls;
use crate::backends::sql::tables::Tables;
use crate::error::Result;
use crate::spi::{Notification, NotifySink, Subscribers, Subscription};
use crate::types::{GroupName, LeaseName};
use ::postgres::fallible_iterator::FallibleIterator;
use ::postgres::{Client, Config};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one wait for notifications lasts before the thread checks whether to stop.
const POLL: Duration = Duration::from_millis(200);
/// How often an idle listening connection is checked with a trivial query.
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// The notification channel of a table prefix.
pub(crate) fn channel(t: &Tables) -> String {
    format!("{}simba", t.prefix)
}

/// The channel as an SQL string literal, for the statements.
pub(crate) fn channel_literal(t: &Tables) -> String {
    format!("'{}'", channel(t).replace('\'', "''"))
}

/// The `application_name` of the listening connection.
pub(crate) fn application_name(t: &Tables) -> String {
    format!("simba-listen/{}", t.prefix)
}

/// The notification a payload on the channel means, if any.
fn notification(payload: &str) -> Option<Notification> {
    let (kind, name) = payload.split_once(':')?;
    match kind {
        "r" => LeaseName::new(name).ok().map(Notification::Released),
        "a" => LeaseName::new(name).ok().map(Notification::Acquired),
        "g" => GroupName::new(name).ok().map(Notification::GroupChanged),
        _ => None,
    }
}

/// The listening thread's state, shared with the backend.
#[derive(Default)]
struct State {
    stop: AtomicBool,
    /// Whether the first attempt to listen finished (listening or failed).
    started: Mutex<bool>,
    cv: Condvar,
}

impl State {
    fn mark_started(&self) {
        *self.started.lock() = true;
        self.cv.notify_all();
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// The backend's listener: its subscribers and, once subscribed, the thread's state.
pub(crate) struct Listener {
    config: Config,
    /// The pool's TLS settings: the listening connection is as protected as the others.
    tls: PgTls,
    channel: String,
    name: String,
    timeout: Duration,
    subscribers: Arc<Subscribers>,
    state: Mutex<Option<Arc<State>>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Only a signal: the thread closes its connection and exits within `POLL`.
        if let Some(st) = self.state.lock().take() {
            st.stop.store(true, Ordering::SeqCst);
        }
    }
}

impl Listener {
    /// A listener connecting with `config` and `tls` (the pool's, with its own
    /// `application_name`); `timeout` bounds connecting and each check.
    pub(crate) fn new(config: &Config, tls: &PgTls, tables: &Tables, timeout: Duration) -> Self {
        let name = application_name(tables);
        let mut config = config.clone();
        config.application_name(&name);
        Listener {
            config,
            tls: tls.clone(),
            channel: channel(tables),
            name,
            timeout,
            subscribers: Arc::new(Subscribers::default()),
            state: Mutex::new(None),
        }
    }

    /// The `application_name` of the listening connection.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Registers `sink`; starts the thread once and waits (at most connect + query timeout)
    /// until its first `LISTEN` finished, so a sink sees every change committed afterwards.
    pub(crate) fn subscribe(&self, sink: NotifySink) -> Result<Option<Subscription>> {
        let sub = self.subscribers.add(sink);
        let state = {
            let mut guard = self.state.lock();
            match &*guard {
                Some(st) => st.clone(),
                None => {
                    let st = Arc::new(State::default());
                    if let Err(e) = self.spawn(st.clone()) {
                        // The engine polls anyway; the next subscription tries again.
                        log::warn!("no PostgreSQL listener thread ({e}); candidates poll");
                        return Ok(Some(sub));
                    }
                    *guard = Some(st.clone());
                    st
                }
            }
        };
        let bound = self.timeout * 2;
        let end = Instant::now() + bound;
        let mut started = state.started.lock();
        while !*started {
            if state.cv.wait_until(&mut started, end).timed_out() {
                log::warn!(
                    "PostgreSQL notifications not listening within {bound:?}; candidates poll until they are"
                );
                break;
            }
        }
        Ok(Some(sub))
    }

    fn spawn(&self, st: Arc<State>) -> std::io::Result<()> {
        let config = self.config.clone();
        let tls = self.tls.clone();
        let channel = self.channel.clone();
        let subs = self.subscribers.clone();
        let timeout = self.timeout;
        std::thread::Builder::new()
            .name(format!("simba-pg-listen-{}", self.channel))
            .spawn(move || run(&config, &tls, &channel, timeout, &subs, &st))
            .map(drop)
    }
}

/// The thread: listen, pump, and on failure resync, back off and listen again.
fn run(
    config: &Config,
    tls: &PgTls,
    channel: &str,
    timeout: Duration,
    subs: &Subscribers,
    st: &State,
) {
    let mut backoff = Duration::from_millis(100);
    let mut first = true;
    while !st.stopped() {
        match listen(config, tls, channel) {
            Ok(mut client) => {
                if !first {
                    // Changes committed while nobody listened were not notified.
                    subs.publish(&Notification::Resync);
                }
                first = false;
                backoff = Duration::from_millis(100);
                st.mark_started();
                let r = pump(&mut client, channel, timeout, subs, st);
                if st.stopped() {
                    break;
                }
                if let Err(e) = r {
                    log::warn!(
                        "PostgreSQL notifications dropped ({e}); listening again in {backoff:?}"
                    );
                }
                subs.publish(&Notification::Resync);
            }
            Err(e) => {
                first = false;
                st.mark_started();
                log::warn!("PostgreSQL notifications unavailable ({e}); retrying in {backoff:?}");
            }
        }
        let until = Instant::now() + backoff;
        while Instant::now() < until && !st.stopped() {
            std::thread::sleep(Duration::from_millis(20));
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

fn listen(
    config: &Config,
    tls: &PgTls,
    channel: &str,
) -> std::result::Result<Client, ::postgres::Error> {
    let mut client = tls.connect(config)?;
    client.batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))?;
    Ok(client)
}

/// Publishes notifications until the connection fails (`Err`) or the thread is stopped.
fn pump(
    client: &mut Client,
    channel: &str,
    timeout: Duration,
    subs: &Subscribers,
    st: &State,
) -> std::result::Result<(), ::postgres::Error> {
    let mut checked = Instant::now();
    while !st.stopped() {
        let began = Instant::now();
        let mut got = false;
        {
            let mut notes = client.notifications();
            let mut it = notes.timeout_iter(POLL);
            while let Some(n) = it.next()? {
                got = true;
                if n.channel() == channel {
                    if let Some(note) = notification(n.payload()) {
                        subs.publish(&note);
                    }
                }
                if st.stopped() {
                    return Ok(());
                }
            }
        }
        // An early end without notifications means the connection closed: check it now.
        let early = !got && began.elapsed() < POLL / 2;
        if client.is_closed() || early || checked.elapsed() >= CHECK_EVERY {
            client.is_valid(timeout)?;
            checked = Instant::now();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_map_to_notifications() {
        let job = LeaseName::new("job.a:1").unwrap();
        assert_eq!(
            notification("r:job.a:1"),
            Some(Notification::Released(job.clone()))
        );
        assert_eq!(notification("a:job.a:1"), Some(Notification::Acquired(job)));
        assert_eq!(
            notification("g:workers"),
            Some(Notification::GroupChanged(
                GroupName::new("workers").unwrap()
            ))
        );
        assert_eq!(notification("x:job"), None);
        assert_eq!(notification("r:"), None);
        assert_eq!(notification("r:a b"), None);
        assert_eq!(notification("released"), None);
    }

    #[test]
    fn channel_and_names_follow_the_prefix() {
        let t = Tables::new("app_");
        assert_eq!(channel(&t), "app_simba");
        assert_eq!(channel_literal(&t), "'app_simba'");
        assert_eq!(application_name(&t), "simba-listen/app_");
    }
}
