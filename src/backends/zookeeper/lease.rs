//! Plain leases on ZooKeeper, as [`Sessions`] methods the backend's `LeaseBackend` impl
//! calls: the acquire (one multi with the lock-delay gate, an `exists` with a watch queued
//! behind it), the release, the owner and a term's value. A lease is an ephemeral node whose
//! `czxid` is the token (see `codec`); the session's held leases are watched (see `held`).

use super::codec::{lease_data, token};
use super::facade::{backend as zk_err, call};
use super::session::Sessions;
use super::{delay, failure, held};
use crate::error::Result;
use crate::spi::Acquire;
use crate::types::{LeaseName, Owner, SessionId, Term, Token};
use std::time::Instant;
use zookeeper_client as zk;

/// The number of deletes a take puts before the lease node's create.
fn w_len(take: &Option<delay::Timed>) -> usize {
    if take.is_some() {
        3
    } else {
        0
    }
}

impl Sessions {
    pub(super) fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        const OP: &str = "acquiring a lease";
        let s = self.live(session)?;
        let path = self.cfg.lease_path(name);
        let gate = self.cfg.gate_path(name);
        let acl = self.cfg.acl.for_path(&path);
        let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
        let gacl = self.cfg.acl.for_path(&gate);
        let gopts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&gacl));
        let holder = delay::holder_path(&gate, session);
        let hacl = self.cfg.acl.for_path(&holder);
        let hopts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&hacl));
        let gate_data = delay::gate_data(session, s.lock_delay_ms);
        let limit = s.limit(&self.cfg);
        let fail = |e| self.fail(&s, OP, e);
        // The nodes of an ended term whose delay ran out, deleted by the next multi.
        let mut take: Option<delay::Timed> = None;
        for _ in 0..8 {
            s.check_connected(OP)?;
            let client = s.client()?;
            let sent = Instant::now();
            let mut w = client.new_multi_writer();
            if let Some(t) = &take {
                for node in [&t.stamp, &t.holder, &t.gate] {
                    w.add_delete(node, None).map_err(|e| zk_err(OP, e))?;
                }
            }
            // The index of the lease node's create, then of the gate's.
            let at = w_len(&take);
            w.add_create(&path, &lease_data(session, ""), &opts)
                .map_err(|e| zk_err(OP, e))?;
            // No gate may stand (after a take, the one that did is deleted above). The
            // `setData` of the gate just created answers with its stat on every server (a
            // multi before 3.8.2 answers a create without it, ZOOKEEPER-4026): all the
            // multi's operations share one zxid, so its `czxid` is the lease node's, the token.
            let data = if s.lock_delay_ms > 0 {
                &gate_data[..]
            } else {
                &[]
            };
            w.add_create(&gate, data, &gopts)
                .map_err(|e| zk_err(OP, e))?;
            w.add_set_data(&gate, data, None)
                .map_err(|e| zk_err(OP, e))?;
            if s.lock_delay_ms > 0 {
                w.add_create(&holder, &[], &hopts)
                    .map_err(|e| zk_err(OP, e))?;
            } else {
                w.add_delete(&gate, None).map_err(|e| zk_err(OP, e))?;
            }
            // The name counts as possibly owned from the moment its create is sent. An `exists`
            // with a watch is queued right behind the multi: the server runs it after the
            // multi, so it shows the node's owner either way and arms the watch that spares
            // keep-alives reading the node (see `held`).
            let (seq, created, seen) = {
                let mut p = s.possibly.lock();
                let seq = p.creating(name);
                let created = w.commit();
                (seq, created, held::Sent::exists(&client, path.clone()))
            };
            let failed = match call(OP, limit, created)? {
                Ok(results) => {
                    // The gate's stat after its `setData`: created and written by this
                    // multi (one zxid), else not to be trusted as the token.
                    let stat = match results.into_iter().nth(at + 2) {
                        Some(zk::MultiWriteResult::SetData { stat })
                            if stat.czxid > 0 && stat.czxid == stat.mzxid =>
                        {
                            Some(stat)
                        }
                        _ => None,
                    };
                    let Some(stat) = stat else {
                        // Not expected of any server: the `exists` behind it has the node.
                        let seen = match call(OP, limit, seen.reply())? {
                            Ok(seen) => seen,
                            Err(e) => return Err(fail(e)),
                        };
                        let token = s.possibly.lock().observe(name, seq, s.raw, seen)?;
                        let token = token.ok_or_else(|| {
                            failure::error(OP, format!("{name} was lost as it was created"))
                        })?;
                        return Ok(Acquire::Acquired(Term {
                            name: name.clone(),
                            token,
                            remaining: s.remaining_at(sent),
                        }));
                    };
                    // The `exists` reply is not waited for: the next keep-alive applies it
                    // (its own reply comes after it).
                    // It holds a clone of the client: never stashed once closing began.
                    let mut p = s.possibly.lock();
                    if s.client.lock().is_some() {
                        p.stash(name, seq, seen);
                    }
                    return Ok(Acquire::Acquired(Term {
                        name: name.clone(),
                        token: token(&stat)?,
                        remaining: s.remaining_at(sent),
                    }));
                }
                Err(zk::MultiWriteError::OperationFailed { index, source }) => (index, source),
                Err(zk::MultiWriteError::RequestFailed { source }) => return Err(fail(source)),
            };
            // Not created: what the `exists` behind shows of the lease node.
            let seen = match call(OP, limit, seen.reply())? {
                Ok(seen) => seen,
                Err(e) => return Err(fail(e)),
            };
            let stat = seen.0;
            s.possibly.lock().observe(name, seq, s.raw, seen)?;
            match failed {
                (i, zk::Error::NodeExists) if i == at => {
                    let Some(stat) = stat else {
                        continue; // released meanwhile: try again
                    };
                    if stat.ephemeral_owner == s.raw {
                        return Ok(Acquire::Acquired(Term {
                            name: name.clone(),
                            token: token(&stat)?,
                            remaining: s.remaining_at(sent),
                        }));
                    }
                    return Ok(Acquire::Held(self.owner_of(&stat)?));
                }
                (i, zk::Error::NoNode) if i == at => {
                    self.cfg.mkdirs(&client, &self.cfg.leases, limit)?
                }
                // A gate stands without the lease node: the name may be in its delay.
                (i, zk::Error::NodeExists) if i == at + 1 => {
                    match self.gate(&client, limit, name, OP, &fail)? {
                        delay::Gate::Closed(owner) => return Ok(Acquire::Held(owner)),
                        delay::Gate::Over(t) => take = Some(t),
                        delay::Gate::Open => {}
                    }
                }
                (i, zk::Error::NoNode) if i == at + 1 => {
                    self.cfg.mkdirs(&client, &self.cfg.delays, limit)?
                }
                // The timed nodes changed meanwhile (taken by another session): read again.
                (i, _) if i < at => take = None,
                (_, e) => return Err(fail(e)),
            }
        }
        Err(failure::error(OP, format!("{name} kept changing hands")))
    }

    pub(super) fn release(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        const OP: &str = "releasing a lease";
        let Some(s) = self.live_or_none(session) else {
            return Ok(false);
        };
        // One release of a session at a time: between the owner check and the delete, only
        // this session could delete (and so re-create) its own node.
        let _one = s.releasing.lock();
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let limit = s.limit(&self.cfg);
        let path = self.cfg.lease_path(name);
        let (seq, settled) = {
            let mut p = s.possibly.lock();
            (p.seq_of(name), p.settled_version(name, token, s.raw)?)
        };
        // One round trip when the node's watch vouches for it (`held`): the delete of the
        // version it saw. A version that no longer matches (the data changed meanwhile, or
        // the node was replaced) is read below, as is a node no watch covers. A term with a
        // lock-delay ends with its gate in one multi, below.
        if let (Some(version), 0) = (settled, s.lock_delay_ms) {
            match call(OP, limit, client.delete(&path, Some(version)))? {
                Ok(()) => {
                    if let Some(seq) = seq {
                        s.forget(name, seq);
                    }
                    return Ok(true);
                }
                Err(zk::Error::NoNode) => return Ok(false),
                Err(zk::Error::BadVersion) => {}
                Err(e) => return self.fail_unchanged(&s, OP, e),
            }
        }
        let stat = match call(OP, limit, client.check_stat(&path))? {
            Ok(Some(stat)) => stat,
            Ok(None) => return Ok(false),
            Err(e) => return self.fail_unchanged(&s, OP, e),
        };
        if stat.ephemeral_owner != s.raw || stat.czxid as u64 != token.get() {
            return Ok(false);
        }
        // A term with a lock-delay ends with its gate, in the same multi.
        let deleted = if s.lock_delay_ms > 0 {
            let gate = self.cfg.gate_path(name);
            let mut w = client.new_multi_writer();
            w.add_delete(&path, Some(stat.version))
                .map_err(|e| zk_err(OP, e))?;
            w.add_delete(&delay::holder_path(&gate, session), None)
                .map_err(|e| zk_err(OP, e))?;
            w.add_delete(&gate, None).map_err(|e| zk_err(OP, e))?;
            call(OP, limit, w.commit())?
                .map(drop)
                .map_err(zk::Error::from)
        } else {
            call(OP, limit, client.delete(&path, Some(stat.version)))?
        };
        match deleted {
            Ok(()) => {
                if let Some(seq) = seq {
                    s.forget(name, seq);
                }
                Ok(true)
            }
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => self.fail_unchanged(&s, OP, e),
        }
    }

    pub(super) fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        const OP: &str = "reading a lease owner";
        let client = self.reader.client()?;
        let limit = self.cfg.request_timeout;
        let fail = |e| zk_err(OP, e);
        match self.read_lease_and_gate(&client, limit, name, OP, &fail)? {
            (Some((data, stat)), _) => Ok(Some(self.owner_with_value(&data, &stat)?)),
            (None, Some((data, stat))) => {
                match self.timed(&client, limit, name, &data, &stat, OP, &fail)? {
                    delay::Gate::Closed(owner) => Ok(Some(owner)),
                    delay::Gate::Open | delay::Gate::Over(_) => Ok(None),
                }
            }
            (None, None) => Ok(None),
        }
    }

    pub(super) fn set_value(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        value: &str,
    ) -> Result<bool> {
        const OP: &str = "setting a term value";
        crate::types::check_value(value)?;
        let Some(s) = self.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let limit = s.limit(&self.cfg);
        let path = self.cfg.lease_path(name);
        let data = lease_data(session, value);
        for _ in 0..8 {
            let stat = match call(OP, limit, client.check_stat(&path))? {
                Ok(Some(stat)) => stat,
                Ok(None) => return Ok(false),
                Err(e) => return self.fail_unchanged(&s, OP, e),
            };
            if stat.ephemeral_owner != s.raw || stat.czxid as u64 != token.get() {
                return Ok(false);
            }
            match call(OP, limit, client.set_data(&path, &data, Some(stat.version)))? {
                Ok(_) => return Ok(true),
                // Another value set meanwhile (by this session): read the version again.
                Err(zk::Error::BadVersion) => continue,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return self.fail_unchanged(&s, OP, e),
            }
        }
        Err(failure::error(
            OP,
            format!("lease node {name} kept changing"),
        ))
    }
}
