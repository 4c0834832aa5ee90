//! Routed: what this backend knows of each session ([`RwKnown`]): a deadline no later than
//! the server's, the lease and lock-delay of its open or last keep-alive (read-write and lease
//! acquires count on them), the read-write locks it holds or waits for (each keep-alive renews
//! them), and the sessions found expired, sent with the next call of their names.

use crate::error::Result;
use crate::types::{LeaseName, SessionId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Routed: what this backend knows of each session for its read-write locks: a deadline no
/// later than the session's on the server (from its open and keep-alives), and the names it
/// holds or waits for, each with the stamp of the call that last found it so (a keep-alive or
/// release that finds a name gone drops it only if no call found it since).
#[derive(Default)]
pub(in super::super) struct RwKnown {
    sessions: Mutex<HashMap<SessionId, KnownSession>>,
    stamps: AtomicU64,
    /// The size past which sessions whose deadline passed are dropped.
    cap: AtomicU64,
    /// Per name, sessions found expired here that held or waited for it, each until their
    /// entries there ended on their own: the next read-write call on the name sends them, and
    /// its script ends their places and terms (a term with a lock-delay then starts it).
    gone: Mutex<HashMap<LeaseName, Vec<(SessionId, Instant)>>>,
}

#[derive(Default)]
struct KnownSession {
    deadline: Option<Instant>,
    /// The lease its last open or keep-alive asked for.
    lease: Option<Duration>,
    /// Its lock-delay in ms, as its open or last keep-alive answered.
    delay: Option<u64>,
    names: HashMap<LeaseName, u64>,
}

/// The fewest sessions [`RwKnown`] keeps before it drops those whose deadline passed.
const KNOWN_CAP: u64 = 1024;

impl RwKnown {
    /// What `sid` has left at `now` by the deadline known, if it is ahead, with the lease it
    /// asked for last and its lock-delay in ms (each if known).
    pub(in super::super) fn left(
        &self,
        sid: &SessionId,
        now: Instant,
    ) -> Option<(Duration, Option<Duration>, Option<u64>)> {
        let m = self.sessions.lock();
        let s = m.get(sid)?;
        let left = s.deadline?.saturating_duration_since(now);
        (left.as_millis() > 0).then_some((left, s.lease, s.delay))
    }

    /// What `sid` has left at `now` by the deadline known, if it is ahead, with the lease its
    /// open or last keep-alive asked for and its lock-delay in ms, when both are known: what a
    /// routed lease acquire needs to go without a session call first.
    pub(super) fn for_acquire(
        &self,
        sid: &SessionId,
        now: Instant,
    ) -> Option<(Duration, Duration, u64)> {
        let m = self.sessions.lock();
        let s = m.get(sid)?;
        let left = s.deadline?.saturating_duration_since(now);
        (left.as_millis() > 0).then_some((left, s.lease?, s.delay?))
    }

    /// Whether this backend knows a deadline of `sid` ahead at `now` (no later than the
    /// server's): the session is live unless it was closed through another backend.
    pub(super) fn known_live(&self, sid: &SessionId, now: Instant) -> bool {
        self.left(sid, now).is_some()
    }

    /// `sid`'s lock-delay is `ms` (0: none), as its open or a keep-alive answered.
    pub(super) fn delay_known(&self, sid: &SessionId, ms: u64) {
        if let Some(s) = self.sessions.lock().get_mut(sid) {
            s.delay = Some(ms);
        }
    }

    /// `sid` lives at least until `deadline` (kept if a later one is known); `lease`, when
    /// given, is what its open or keep-alive asked for.
    pub(super) fn renewed(&self, sid: &SessionId, deadline: Instant, lease: Option<Duration>) {
        let mut m = self.sessions.lock();
        let s = m.entry(sid.clone()).or_default();
        if s.deadline.is_none_or(|d| d < deadline) {
            s.deadline = Some(deadline);
        }
        if lease.is_some() {
            s.lease = lease;
        }
        let cap = self.cap.load(Ordering::Relaxed).max(KNOWN_CAP);
        if m.len() as u64 > cap {
            // Sessions this backend opened but never closed nor saw expire (their process
            // dropped them): their entries ended on the servers by their own expiry.
            let now = Instant::now();
            m.retain(|_, s| s.deadline.is_some_and(|d| d > now));
            self.cap
                .store((m.len() as u64 * 2).max(KNOWN_CAP), Ordering::Relaxed);
        }
    }

    /// `sid` holds or waits for `name` now (or may: an acquire is under way): a new stamp,
    /// returned.
    pub(in super::super) fn note(&self, sid: &SessionId, name: &LeaseName) -> u64 {
        let stamp = self.stamps.fetch_add(1, Ordering::Relaxed) + 1;
        let mut m = self.sessions.lock();
        m.entry(sid.clone())
            .or_default()
            .names
            .insert(name.clone(), stamp);
        stamp
    }

    /// The stamp of `name` of `sid`, if indexed.
    pub(in super::super) fn stamp(&self, sid: &SessionId, name: &LeaseName) -> Option<u64> {
        self.sessions.lock().get(sid)?.names.get(name).copied()
    }

    /// Drops `name` of `sid`, found neither held nor waited for, unless a call found it so
    /// since `stamp` was read.
    pub(in super::super) fn drop_if(&self, sid: &SessionId, name: &LeaseName, stamp: Option<u64>) {
        let mut m = self.sessions.lock();
        if let Some(s) = m.get_mut(sid) {
            if s.names.get(name).copied() == stamp {
                s.names.remove(name);
            }
        }
    }

    /// The names `sid` holds or waits for, with their stamps.
    pub(super) fn names(&self, sid: &SessionId) -> Vec<(LeaseName, u64)> {
        match self.sessions.lock().get(sid) {
            Some(s) => s.names.iter().map(|(n, t)| (n.clone(), *t)).collect(),
            None => Vec::new(),
        }
    }

    /// Forgets `sid` (closed or expired); the names it held or waited for.
    pub(super) fn forget(&self, sid: &SessionId) -> Vec<LeaseName> {
        self.sessions
            .lock()
            .remove(sid)
            .map(|s| s.names.into_keys().collect())
            .unwrap_or_default()
    }

    /// Forgets `sid`, found expired on its session's node: the names it held or waited for
    /// learn it with their next read-write call here (see [`Self::gone_for`]).
    pub(super) fn expired(&self, sid: &SessionId) {
        let Some(s) = self.sessions.lock().remove(sid) else {
            return;
        };
        // Its entries end on their own within a lease of its last renewal or grant.
        let until = Instant::now() + s.lease.unwrap_or(GONE_FOR).max(GONE_FOR);
        let mut gone = self.gone.lock();
        if gone.values().map(Vec::len).sum::<usize>() >= GONE_CAP {
            let now = Instant::now();
            gone.retain(|_, v| {
                v.retain(|(_, u)| *u > now);
                !v.is_empty()
            });
            if gone.values().map(Vec::len).sum::<usize>() >= GONE_CAP {
                // Best effort: those entries end on their own.
                gone.clear();
            }
        }
        for name in s.names.into_keys() {
            gone.entry(name).or_default().push((sid.clone(), until));
        }
    }

    /// The sessions found expired here that may still have entries in `name`.
    pub(in super::super) fn gone_for(&self, name: &LeaseName) -> Vec<String> {
        let mut gone = self.gone.lock();
        let Some(v) = gone.get_mut(name) else {
            return Vec::new();
        };
        let now = Instant::now();
        v.retain(|(_, u)| *u > now);
        let out = v.iter().map(|(s, _)| s.to_string()).collect();
        if v.is_empty() {
            gone.remove(name);
        }
        out
    }

    /// A script on `name` ended the entries of the sessions `sent` ([`Self::gone_for`]).
    pub(super) fn gone_ended(&self, name: &LeaseName, sent: &[String]) {
        if sent.is_empty() {
            return;
        }
        let mut gone = self.gone.lock();
        if let Some(v) = gone.get_mut(name) {
            v.retain(|(s, _)| !sent.iter().any(|x| x == s.as_str()));
            if v.is_empty() {
                gone.remove(name);
            }
        }
    }
}

impl RwKnown {
    /// Runs a script on `name` with `args` followed by the sessions found expired here that
    /// may still have entries there ([`Self::gone_for`]); once it ran, their entries there
    /// are ended ([`Self::gone_ended`]).
    pub(in super::super) fn sending_gone<T>(
        &self,
        name: &LeaseName,
        mut args: Vec<String>,
        script: impl FnOnce(&[String]) -> Result<T>,
    ) -> Result<T> {
        let at = args.len();
        args.extend(self.gone_for(name));
        let r = script(&args)?;
        self.gone_ended(name, &args[at..]);
        Ok(r)
    }
}

/// How long at least a session found expired is sent with the names it held.
const GONE_FOR: Duration = Duration::from_secs(60);

/// The most sessions found expired kept for their names.
const GONE_CAP: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_are_dropped_only_if_not_noted_since() {
        let k = RwKnown::default();
        let s = SessionId::random();
        let n = LeaseName::new("n").unwrap();
        let now = Instant::now();
        assert_eq!(k.left(&s, now), None, "an unknown session");
        k.renewed(
            &s,
            now + Duration::from_secs(5),
            Some(Duration::from_secs(9)),
        );
        k.renewed(&s, now + Duration::from_secs(1), None);
        let (left, lease, delay) = k.left(&s, now).unwrap();
        assert_eq!(delay, None, "no lock-delay known yet");
        assert!(left > Duration::from_secs(4), "kept the later");
        assert_eq!(lease, Some(Duration::from_secs(9)));
        assert_eq!(k.left(&s, now + Duration::from_secs(6)), None, "passed");
        k.note(&s, &n);
        let seen = k.stamp(&s, &n);
        assert!(k.note(&s, &n) > seen.unwrap()); // an acquire found it held since
        k.drop_if(&s, &n, seen);
        assert_eq!(k.names(&s).len(), 1, "noted since: kept");
        k.drop_if(&s, &n, k.stamp(&s, &n));
        assert!(k.names(&s).is_empty());
        k.note(&s, &n);
        assert_eq!(k.forget(&s), vec![n.clone()]);
        assert!(k.names(&s).is_empty() && k.left(&s, now).is_none());
        assert!(k.gone_for(&n).is_empty(), "closed: nothing to send");
    }

    #[test]
    fn sessions_found_expired_are_sent_with_their_names_until_a_script_ended_them() {
        let k = RwKnown::default();
        let (s, t) = (SessionId::random(), SessionId::random());
        let (n, m) = (LeaseName::new("n").unwrap(), LeaseName::new("m").unwrap());
        k.note(&s, &n);
        k.note(&s, &m);
        k.note(&t, &n);
        k.expired(&s);
        k.expired(&t);
        assert!(k.names(&s).is_empty(), "forgotten");
        let mut on_n = k.gone_for(&n);
        on_n.sort();
        let mut both = vec![s.to_string(), t.to_string()];
        both.sort();
        assert_eq!(on_n, both);
        assert_eq!(k.gone_for(&m), vec![s.to_string()]);
        k.gone_ended(&n, &[s.to_string()]);
        assert_eq!(k.gone_for(&n), vec![t.to_string()]);
        k.gone_ended(&n, &[t.to_string()]);
        assert!(k.gone_for(&n).is_empty());
        assert_eq!(k.gone_for(&m), vec![s.to_string()], "another name still");
        k.expired(&SessionId::random()); // unknown: nothing
    }
}
