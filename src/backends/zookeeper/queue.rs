//! Fair-lock queues on ZooKeeper: `{root}/queues/{name}/q-{sessionId}-{sequence}`, one
//! ephemeral sequential node per waiting session, so a place ends with its session. The
//! node's data is its patience in ms, and every attempt rewrites it: the write's `mtime` is
//! the server's clock now, and a place whose `mtime + patience` is behind that is skipped
//! (and deleted, as far as the ACL allows), so a waiter that stopped asking never blocks
//! the queue even while its session lives.
//!
//! `mtime` is the wall clock of the server that led the write: after a leader change between
//! servers whose clocks disagree, a place may be judged dead early (its waiter queues again
//! at the back) or live too long (by the skew). Places only order waiters; no lease depends
//! on them. `{root}/queues/{name}` is a container node, removed by the server once empty.
//!
//! A granted waiter deletes its place at once. If that delete fails (a lost connection), the
//! place is remembered and the session's next successful keep-alive deletes it (one more
//! round trip, only then, after the renewal), at the version it was left at: a new wait of
//! the same session that took the place up again keeps it. Otherwise it holds the queue up
//! until then, or at most one patience.
//!
//! Round trips per attempt: a list of the queue, a write of the own place (a create the
//! first time, then a second list), a multi read of the places ahead (when there are any), a
//! read of the lease node, and the acquire itself when first in line.

use super::facade::{backend as zk_err, call};
use super::session::{Sessions, ZkSession};
use crate::error::Result;
use crate::spi::{Acquire, Queued};
use crate::types::{LeaseName, SessionId};
use std::sync::atomic::Ordering;
use std::time::Duration;
use zookeeper_client as zk;

/// A place's node name and its sequence number.
type Place = (String, i64);

impl Sessions {
    fn queue_path(&self, name: &LeaseName) -> String {
        format!("{}/queues/{}", self.cfg.root, name.as_str())
    }

    /// The places in `dir`, first first, and this session's own, if it has one.
    fn places(
        &self,
        s: &ZkSession,
        client: &zk::Client,
        dir: &str,
        op: &'static str,
    ) -> Result<(Vec<Place>, Option<Place>)> {
        let children = match call(op, s.limit(&self.cfg), client.list_children(dir))? {
            Ok(c) => c,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(self.fail(s, op, e)),
        };
        let mut places: Vec<Place> = children
            .into_iter()
            .filter_map(|c| {
                let seq = c.rsplit_once('-')?.1.parse::<i64>().ok()?;
                c.starts_with("q-").then_some((c, seq))
            })
            .collect();
        places.sort_by_key(|(_, seq)| *seq);
        let mine = format!("q-{}-", s.id);
        let own = places.iter().find(|(c, _)| c.starts_with(&mine)).cloned();
        Ok((places, own))
    }

    pub(super) fn acquire_queued(
        &self,
        session: &SessionId,
        name: &LeaseName,
        patience: Duration,
        acquire: impl FnOnce() -> Result<Acquire>,
    ) -> Result<Queued> {
        const OP: &str = "acquiring a lease in turn";
        let s = self.live(session)?;
        s.check_connected(OP)?;
        let client = s.client()?;
        let limit = s.limit(&self.cfg);
        let dir = self.queue_path(name);
        let data = patience.as_millis().to_string();
        let (mut places, own) = self.places(&s, &client, &dir, OP)?;
        // The write that renews (or makes) the place; its mtime is the server's now. The own
        // place, the server's now, and the place's data version after this write.
        let renewed = match own {
            Some((node, seq)) => {
                let path = format!("{dir}/{node}");
                // Taken up again: no longer an orphan for a keep-alive to delete.
                s.orphans.lock().retain(|(p, _)| *p != path);
                match call(OP, limit, client.set_data(&path, data.as_bytes(), None))? {
                    Ok(stat) => Some(((node, seq), stat.mtime, stat.version)),
                    // An orphan's delete already under way took it: queue anew.
                    Err(zk::Error::NoNode) => None,
                    Err(e) => return Err(self.fail(&s, OP, e)),
                }
            }
            None => None,
        };
        let (own, now, version) = match renewed {
            Some(renewed) => renewed,
            None => {
                let prefix = format!("{dir}/q-{}-", s.id);
                let acl = self.cfg.acl.for_path(&dir);
                let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&acl));
                let mut made = call(OP, limit, client.create(&prefix, data.as_bytes(), &opts))?;
                if matches!(made, Err(zk::Error::NoNode)) {
                    // `{root}/queues` persistent, the name's node a container: the server
                    // deletes it once its last place is gone.
                    let parent = format!("{}/queues", self.cfg.root);
                    self.cfg.mkdirs(&client, &parent, limit)?;
                    let copts = zk::CreateMode::Container.with_acls(zk::Acls::new(&acl));
                    match call(OP, limit, client.create(&dir, &[], &copts))? {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(self.fail(&s, OP, e)),
                    }
                    made = call(OP, limit, client.create(&prefix, data.as_bytes(), &opts))?;
                }
                let (stat, seq) = made.map_err(|e| self.fail(&s, OP, e))?;
                // The node's name ends with the sequence as the server wrote it (zero-padded).
                let node = format!("q-{}-{seq}", s.id);
                // A name made again (the server deleted the emptied container node and its
                // sequence started over): an orphan of that name was another place, gone.
                let path = format!("{dir}/{node}");
                s.orphans.lock().retain(|(p, _)| *p != path);
                // Others may have queued between the list and the create: list again.
                places = self.places(&s, &client, &dir, OP)?.0;
                ((node, seq.into_i64()), stat.mtime, stat.version)
            }
        };
        let before: Vec<&Place> = places.iter().filter(|(_, seq)| *seq < own.1).collect();
        let ahead = self.live_places(&s, &client, &dir, &before, now)?;
        let lease = self.cfg.lease_path(name);
        let holder = match call(OP, limit, client.check_stat(&lease))? {
            Ok(stat) => stat,
            Err(e) => return Err(self.fail(&s, OP, e)),
        };
        let mine = holder.as_ref().is_some_and(|h| h.ephemeral_owner == s.raw);
        if ahead > 0 && !mine {
            let owner = holder.map(|h| self.owner_of(&h)).transpose()?;
            return Ok(Queued::Waiting { ahead, owner });
        }
        match acquire()? {
            Acquire::Acquired(term) => {
                let path = format!("{dir}/{}", own.0);
                if !self.delete_place(&s, &client, &path, None) {
                    // Left, it would hold the queue up to one patience after the release.
                    // At this version only: a later wait of this session renews the place
                    // (and so keeps it) before it queues with it again.
                    s.orphans.lock().push((path, version));
                }
                Ok(Queued::Acquired(term))
            }
            Acquire::Held(owner) => Ok(Queued::Waiting {
                ahead: 0,
                owner: Some(owner),
            }),
        }
    }

    /// How many of `places` are live as of the server's `now` (ms); deletes the others.
    fn live_places(
        &self,
        s: &ZkSession,
        client: &zk::Client,
        dir: &str,
        places: &[&Place],
        now: i64,
    ) -> Result<usize> {
        const OP: &str = "reading a lease's queue";
        if places.is_empty() {
            return Ok(0);
        }
        let mut r = client.new_multi_reader();
        for (node, _) in places {
            r.add_get_data(&format!("{dir}/{node}"))
                .map_err(|e| zk_err(OP, e))?;
        }
        let results = match call(OP, s.limit(&self.cfg), r.commit())? {
            Ok(r) => r,
            Err(e) => return Err(self.fail(s, OP, e)),
        };
        let mut live = 0;
        for ((node, _), r) in places.iter().zip(results) {
            if let zk::MultiReadResult::Data { data, stat } = r {
                let patience = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|d| d.parse::<i64>().ok())
                    .unwrap_or(0);
                if stat.mtime.saturating_add(patience) > now {
                    live += 1;
                } else {
                    self.delete_place(s, client, &format!("{dir}/{node}"), None);
                }
            }
        }
        Ok(live)
    }

    /// Deletes a place (only at `version`, if given); whether it is gone, or at another
    /// version. A failure (not ours to delete, no connection) is only logged.
    fn delete_place(
        &self,
        s: &ZkSession,
        client: &zk::Client,
        path: &str,
        version: Option<i32>,
    ) -> bool {
        let faults = &self.place_delete_faults;
        let fault = faults
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let r = if fault {
            Ok(Err(zk::Error::ConnectionLoss))
        } else {
            call(
                "leaving a queue",
                s.limit(&self.cfg),
                client.delete(path, version),
            )
        };
        match r {
            // Renewed since (`BadVersion`): a wait of this session uses it again.
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode | zk::Error::BadVersion)) => true,
            Ok(Err(e)) => {
                log::debug!("deleting the queue place {path}: {e}");
                false
            }
            Err(e) => {
                log::debug!("deleting the queue place {path}: {}", e.report());
                false
            }
        }
    }

    /// Deletes this session's own places whose delete after a grant failed: one round trip
    /// each, only then; those that fail again wait for the next keep-alive. A place ends with its session anyway,
    /// and is skipped by others one patience after its last renewal. Its delete names the
    /// version it was left at, so it never deletes a place taken up again; a place's name is
    /// made again only after the queue's container node emptied (its sequence starts over),
    /// and that create drops an orphan of the name. A delete already under way may still take
    /// such a new place at version 0: its waiter queues again at its next attempt (places
    /// only order waiters, no term depends on them). Each is dropped only once handled.
    pub(super) fn delete_orphans(&self, s: &ZkSession, client: &zk::Client) {
        let orphans = s.orphans.lock().clone();
        for (path, version) in orphans {
            if self.delete_place(s, client, &path, Some(version)) {
                s.orphans.lock().retain(|o| *o != (path.clone(), version));
            }
        }
    }

    /// Makes the next `n` deletes of queue places fail as a lost connection would (tests).
    pub(super) fn fail_place_deletes(&self, n: u32) {
        self.place_delete_faults.store(n, Ordering::SeqCst);
    }

    pub(super) fn leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        const OP: &str = "leaving a queue";
        let Some(s) = self.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let dir = self.queue_path(name);
        let Some((node, _)) = self.places(&s, &client, &dir, OP)?.1 else {
            return Ok(false);
        };
        match call(
            OP,
            s.limit(&self.cfg),
            client.delete(&format!("{dir}/{node}"), None),
        )? {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(self.fail(&s, OP, e)),
        }
    }

    /// The live places of `name`'s queue, read through the shared reader. An empty write to
    /// the queue's node first gives the server's now (its `mtime`); as a write it also goes
    /// through the leader, so a place made on another server is seen.
    pub(super) fn queue(&self, name: &LeaseName) -> Result<Vec<SessionId>> {
        const OP: &str = "reading a lease's queue";
        let client = self.reader.client()?;
        let limit = self.cfg.request_timeout;
        let dir = self.queue_path(name);
        let now = match call(OP, limit, client.set_data(&dir, &[], None))? {
            Ok(stat) => stat.mtime,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(zk_err(OP, e)),
        };
        let children = match call(OP, limit, client.list_children(&dir))? {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(zk_err(OP, e)),
        };
        let mut places: Vec<(SessionId, i64, String)> = children
            .into_iter()
            .filter_map(|c| {
                let (head, seq) = c.rsplit_once('-')?;
                let id = SessionId::parse(head.strip_prefix("q-")?).ok()?;
                Some((id, seq.parse().ok()?, c))
            })
            .collect();
        places.sort_by_key(|(_, seq, _)| *seq);
        if places.is_empty() {
            return Ok(Vec::new());
        }
        let mut r = client.new_multi_reader();
        for (_, _, node) in &places {
            r.add_get_data(&format!("{dir}/{node}"))
                .map_err(|e| zk_err(OP, e))?;
        }
        let results = call(OP, limit, r.commit())?.map_err(|e| zk_err(OP, e))?;
        Ok(places
            .into_iter()
            .zip(results)
            .filter_map(|((id, _, _), r)| match r {
                zk::MultiReadResult::Data { data, stat } => {
                    let patience = std::str::from_utf8(&data).ok()?.parse::<i64>().ok()?;
                    (stat.mtime.saturating_add(patience) > now).then_some(id)
                }
                _ => None,
            })
            .collect())
    }
}
