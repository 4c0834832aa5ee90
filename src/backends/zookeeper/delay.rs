//! Lock-delay on ZooKeeper: gates that outlive an expired holder's lease node, and the
//! stamps that time them by the ensemble's clock.
//!
//! An ephemeral lease node vanishes with its session and leaves no time behind, so a term of
//! a session with a lock-delay also has a persistent **gate** `{root}/delays/{name}` (data
//! `1 {holder} {delay ms}`, with the child `h-{holder}`), created in the same multi as the
//! lease node (so the gate's `czxid` is the term's token) and deleted in the same multi as it
//! by a release and by closing the live session. Every acquire (with a delay or not) asserts
//! in its multi that no gate stands (it creates and deletes the gate path, or creates its
//! own): a gate without its lease node means the holder's session ended without a clean
//! end, and the name is in its delay.
//!
//! The delay is timed from the first time an acquirer (or a reader of the owner) sees the
//! gate stand without the lease node, in one consistent multi read: it then creates the
//! **stamp** `{gate}/h-{holder}/ended`, whose `ctime` (the leader's clock at that write) is
//! not earlier than the session's end. Later attempts write the stamp again (`setData`): its
//! `mtime` is the ensemble's clock now, and the delay left is `ctime + delay − mtime`. Once it
//! is not positive, the taking multi deletes the stamp, `h-{holder}` and the gate and creates
//! the lease node (and the taker's own gate). The paths under the gate name the holder, and a
//! dead holder never creates them again, so neither the stamp nor the take can apply to a
//! later gate of the same name (no ABA): a stamp is created only under the holder's own
//! child, and a take deletes exactly the nodes it timed.
//!
//! Guaranteed: no new term of the name begins before `T0 + delay` by the leader's clock,
//! where `T0`, the stamp's `ctime`, is not earlier than the holder's session end (its expiry
//! on the servers, or the close of its client by the watchdog); the name is usually free
//! within a retry interval after that. Since only the servers know when a session ended,
//! `T0` is the first observation: a name nobody waited for is blocked for the whole delay
//! from the next attempt after the end. A leader change between servers whose clocks
//! disagree moves the end by the skew (as for run-once jobs). Processes of an earlier version
//! ignore gates: upgrade every process on a root together.
//!
//! Cost: an acquire is still one multi (three more operations in it: the gate's create,
//! `setData` and delete, or the gate, its `setData` and its child; the `setData`'s stat is
//! the token on servers whose multi answers a create without it), a release still two round
//! trips (the gate's two deletes join the lease node's delete), a close of a live session
//! with a delay one multi per possibly held lease more (sent at once), keep-alives nothing.
//! A name in its delay costs an attempt one more read and one or two more writes (the
//! stamp), and the take one more multi. Each gate change is one more event for every
//! backend's reader.
//!
//! Read-write terms keep their delay with gates of their own beside their term nodes (see
//! `rw`), timed by the same stamps ([`Sessions::stamps`]) and ended by the same close.

use super::codec::token;
use super::facade::{backend as zk_err, block_on_for, call};
use super::session::{Sessions, ZkSession};
use crate::error::{Error, Result};
use crate::types::{LeaseName, Owner, SessionId};
use std::future::Future;
use std::time::Duration;
use zookeeper_client as zk;

/// A gate's data: `1 {holder session} {delay ms}`.
pub(super) fn gate_data(holder: &SessionId, delay_ms: i64) -> Vec<u8> {
    format!("1 {holder} {delay_ms}").into_bytes()
}

/// The holder and the delay (ms) of a gate's data.
pub(super) fn gate_of(data: &[u8]) -> Option<(SessionId, i64)> {
    let text = std::str::from_utf8(data).ok()?;
    let mut it = text.split(' ');
    if it.next()? != "1" {
        return None;
    }
    let holder = SessionId::parse(it.next()?).ok()?;
    let delay = it.next()?.parse().ok().filter(|d: &i64| *d >= 0)?;
    it.next().is_none().then_some((holder, delay))
}

/// The path of a gate's child naming its holder.
pub(super) fn holder_path(gate: &str, holder: &SessionId) -> String {
    format!("{gate}/h-{holder}")
}

/// The stamp under a gate's node (`parent`): its `ctime` is the first observation of the
/// ended term, its `mtime` the last.
pub(super) fn stamp_path(parent: &str) -> String {
    format!("{parent}/ended")
}

/// The delay left (ms) by a stamp just written: `ctime + delay − mtime`.
pub(super) fn left(stamp: &zk::Stat, delay_ms: i64) -> i64 {
    stamp
        .ctime
        .saturating_add(delay_ms)
        .saturating_sub(stamp.mtime)
}

/// A positive delay left (ms) as a duration.
pub(super) fn remaining(left_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(left_ms).unwrap_or(0))
}

/// The replies of requests already sent, in the order sent (one round trip for all).
async fn in_order<F: Future>(sent: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(sent.len());
    for f in sent {
        out.push(f.await);
    }
    out
}

/// The nodes a take deletes: the stamp, the holder's child, the gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Timed {
    pub(super) stamp: String,
    pub(super) holder: String,
    pub(super) gate: String,
}

/// What a name's gate says.
pub(super) enum Gate {
    /// No gate stands without its lease node (the lease node exists, or no gate does).
    Open,
    /// The name is in its delay: the ended term's owner, with the delay left.
    Closed(Owner),
    /// The delay ran out: the nodes to delete to take the name.
    Over(Timed),
}

fn bad_gate(op: &'static str, path: &str) -> Error {
    super::failure::error(
        op,
        format!("the gate node {path} holds no lock-delay (written outside simba-lease?)"),
    )
}

impl Sessions {
    /// Reads the lease node and the gate of `name` in one multi read (a consistent view) and,
    /// when the gate stands without the lease node, times its delay: see [`Sessions::timed`].
    pub(super) fn gate(
        &self,
        client: &zk::Client,
        limit: Duration,
        name: &LeaseName,
        op: &'static str,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<Gate> {
        match self.read_lease_and_gate(client, limit, name, op, fail)? {
            (None, Some((data, stat))) => self.timed(client, limit, name, &data, &stat, op, fail),
            _ => Ok(Gate::Open),
        }
    }

    /// The lease node's and the gate's data and stat (`None`: no such node), in one multi read.
    #[allow(clippy::type_complexity)]
    pub(super) fn read_lease_and_gate(
        &self,
        client: &zk::Client,
        limit: Duration,
        name: &LeaseName,
        op: &'static str,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<(Option<(Vec<u8>, zk::Stat)>, Option<(Vec<u8>, zk::Stat)>)> {
        let mut r = client.new_multi_reader();
        r.add_get_data(&self.cfg.lease_path(name))
            .map_err(|e| zk_err(op, e))?;
        r.add_get_data(&self.cfg.gate_path(name))
            .map_err(|e| zk_err(op, e))?;
        let results = call(op, limit, r.commit())?.map_err(fail)?;
        let mut nodes = results.into_iter().map(|r| match r {
            zk::MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
            zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            } => Ok(None),
            zk::MultiReadResult::Error { err } => Err(fail(err)),
            _ => Err(zk_err(
                op,
                zk::Error::UnexpectedError("no data for a data read".into()),
            )),
        });
        let lease = nodes.next().transpose()?.flatten();
        let gate = nodes.next().transpose()?.flatten();
        Ok((lease, gate))
    }

    /// Times the delay of a gate seen standing without its lease node: writes its stamp
    /// (see [`Sessions::stamps`]) and compares the stamp's `ctime` plus the delay with the
    /// write's `mtime`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn timed(
        &self,
        client: &zk::Client,
        limit: Duration,
        name: &LeaseName,
        data: &[u8],
        stat: &zk::Stat,
        op: &'static str,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<Gate> {
        let gate = self.cfg.gate_path(name);
        let (holder, delay_ms) = gate_of(data).ok_or_else(|| bad_gate(op, &gate))?;
        let holder_node = holder_path(&gate, &holder);
        let stamp = stamp_path(&holder_node);
        let paths = [stamp];
        let sent = vec![client.set_data(&paths[0], &[], None)];
        let stamped = self.stamps(client, limit, &paths, sent, op, fail)?;
        let Some(written) = stamped.into_iter().next().flatten() else {
            return Ok(Gate::Open); // the holder's child exists only while its gate does
        };
        let [stamp] = paths;
        let left = left(&written, delay_ms);
        if left <= 0 {
            return Ok(Gate::Over(Timed {
                stamp,
                holder: holder_node,
                gate,
            }));
        }
        Ok(Gate::Closed(Owner {
            session: holder,
            token: token(stat)?,
            remaining: remaining(left),
            value: String::new(),
        }))
    }

    /// Writes the stamps at `paths`, whose `setData`s `sent` were sent already (in that
    /// order, one each): a stamp not there yet is created (the first observation; one round
    /// trip more, all sent at once). Each stamp's stat after its write, or `None` when its
    /// parent is gone (the gate was taken).
    pub(super) fn stamps<F>(
        &self,
        client: &zk::Client,
        limit: Duration,
        paths: &[String],
        sent: Vec<F>,
        op: &'static str,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<Vec<Option<zk::Stat>>>
    where
        F: Future<Output = std::result::Result<zk::Stat, zk::Error>>,
    {
        let timeout = || Error::Timeout {
            operation: op,
            after: limit,
            source: None,
        };
        let written = block_on_for(in_order(sent), limit).ok_or_else(timeout)?;
        let mut out = vec![None; paths.len()];
        let mut missing = Vec::new();
        for (i, r) in written.into_iter().enumerate() {
            match r {
                Ok(stat) => out[i] = Some(stat),
                Err(zk::Error::NoNode) => missing.push(i),
                Err(e) => return Err(fail(e)),
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let created: Vec<_> = missing
            .iter()
            .map(|&i| {
                let acl = self.cfg.acl.for_path(&paths[i]);
                let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
                client.create(&paths[i], &[], &opts)
            })
            .collect();
        let created = block_on_for(in_order(created), limit).ok_or_else(timeout)?;
        for (i, r) in missing.into_iter().zip(created) {
            out[i] = match r {
                Ok((stat, _)) => Some(stat),
                Err(zk::Error::NoNode) => None,
                // Created meanwhile by another observer: write it.
                Err(zk::Error::NodeExists) => {
                    match call(op, limit, client.set_data(&paths[i], &[], None))? {
                        Ok(stat) => Some(stat),
                        Err(zk::Error::NoNode) => None,
                        Err(e) => return Err(fail(e)),
                    }
                }
                Err(e) => return Err(fail(e)),
            };
        }
        Ok(out)
    }

    /// Before a clean close of the live session `s` with a lock-delay: deletes each possibly
    /// held lease node with its gate, and each possibly held read-write term with its gate
    /// (see `rw`), one multi each, all sent at once (a term not held any more fails its
    /// multi and keeps its gate, as it should).
    pub(super) fn end_gates(&self, s: &ZkSession) {
        const OP: &str = "closing a session";
        let Ok(client) = s.client() else { return };
        let names = s.possibly.lock().names();
        let leases = names.iter().filter_map(|name| {
            let gate = self.cfg.gate_path(name);
            let mut w = client.new_multi_writer();
            w.add_delete(&holder_path(&gate, &s.id), None).ok()?;
            w.add_delete(&gate, None).ok()?;
            w.add_delete(&self.cfg.lease_path(name), None).ok()?;
            Some((name.to_string(), w.commit()))
        });
        let terms = s.terms.lock().names();
        let terms = terms.iter().filter_map(|term| {
            let mut w = client.new_multi_writer();
            w.add_delete(&term.path, None).ok()?;
            w.add_delete(&term.gate(s.lock_delay_ms), None).ok()?;
            Some((term.path.clone(), w.commit()))
        });
        let sent: Vec<_> = leases.chain(terms).collect();
        for (name, reply) in sent {
            match call(OP, s.limit(&self.cfg), reply) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => log::debug!("ending the gate of {name}: {e}"),
                Err(e) => log::debug!("ending the gate of {name}: {}", e.report()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_data_round_trips_and_foreign_data_is_refused() {
        let id = SessionId::from_u64(0xabc);
        assert_eq!(gate_of(&gate_data(&id, 1500)), Some((id.clone(), 1500)));
        for bad in [
            &b""[..],
            b"1",
            b"2 0000000000000abc 5",
            b"1 0000000000000abc",
            b"1 0000000000000abc -5",
            b"1 0000000000000abc 5 x",
            b"1 not-an-id 5",
        ] {
            assert_eq!(gate_of(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            holder_path("/simba/delays/x", &id),
            "/simba/delays/x/h-0000000000000abc"
        );
    }
}
