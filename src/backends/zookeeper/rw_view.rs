//! What a read-write lock attempt and [`rw_state`](Sessions::rw_state) read of a name (see
//! `rw`): the counter node and its children in one multi read behind a sync, the waiting
//! writers' line timed by the server's clock, and the stamps that time the terms in their
//! lock-delay; with the names and data of those nodes.

use super::delay;
use super::facade::{backend as zk_err, block_on_for};
use super::session::Sessions;
use crate::error::{Error, Result};
use crate::spi::{RwAcquire, RwDelayed, RwMode, RwState};
use crate::types::{LeaseName, SessionId, Token};
use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;
use zookeeper_client as zk;

/// A waiting writer's node as read.
#[derive(Clone, Debug)]
pub(super) struct Waiter {
    pub(super) id: SessionId,
    pub(super) czxid: i64,
    pub(super) version: i32,
    pub(super) live: bool,
}

/// A term whose gate stands without its node: its session ended without a clean end.
#[derive(Clone, Debug)]
pub(super) struct Delayed {
    pub(super) id: SessionId,
    pub(super) mode: RwMode,
    pub(super) token: u64,
    /// The gate's path.
    pub(super) gate: String,
    pub(super) delay_ms: i64,
    /// The delay left in ms as its stamp's write timed it (`None`: not timed, counted as
    /// in its delay).
    pub(super) left: Option<i64>,
}

impl Delayed {
    pub(super) fn blocks(&self) -> bool {
        self.left.is_none_or(|l| l > 0)
    }
}

/// How [`Sessions::rw_view`] reads.
#[derive(Clone, Copy)]
pub(super) struct How<'a> {
    pub(super) op: &'static str,
    /// Sync first, sent with the read (no round trip more): the read then sees every change
    /// that completed before it, whichever server made it.
    pub(super) sync: bool,
    /// The session whose registration to renew, if it has one, with its data.
    pub(super) renew: Option<(&'a SessionId, &'a [u8])>,
}

/// A name's node and children as one attempt read them.
#[derive(Debug, Default)]
pub(super) struct View {
    /// The own registration was renewed by the read (see [`How::renew`]).
    pub(super) renewed: bool,
    /// The counter node's data version, counter and `mzxid` (`None`: no node yet).
    pub(super) node: Option<(i32, u64, i64)>,
    pub(super) writer: Option<(SessionId, u64)>,
    pub(super) readers: Vec<(SessionId, u64)>,
    /// In line, first first.
    pub(super) waiting: Vec<Waiter>,
    /// Terms in their lock-delay, or whose delay ran out (to delete with a grant).
    pub(super) delayed: Vec<Delayed>,
}

impl View {
    pub(super) fn counter(&self) -> u64 {
        self.node.map_or(0, |n| n.1)
    }

    pub(super) fn live_waiting(&self) -> usize {
        self.waiting.iter().filter(|w| w.live).count()
    }

    /// The delayed terms of `mode` that still block.
    pub(super) fn delaying(&self, mode: RwMode) -> impl Iterator<Item = &Delayed> {
        self.delayed
            .iter()
            .filter(move |d| d.mode == mode && d.blocks())
    }

    pub(super) fn busy(&self, extra: usize) -> RwAcquire {
        let delayed_writer = self.delaying(RwMode::Write).map(|d| &d.id).next();
        RwAcquire::Busy {
            writer: self
                .writer
                .as_ref()
                .map(|w| &w.0)
                .or(delayed_writer)
                .cloned(),
            readers: self.readers.len() + self.delaying(RwMode::Read).count(),
            writers_waiting: self.live_waiting() + extra,
        }
    }
}

/// The counter node's data.
pub(super) fn counter_data(counter: u64) -> Vec<u8> {
    format!("1 {counter}").into_bytes()
}

fn parse_counter(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data)
        .ok()?
        .strip_prefix("1 ")?
        .parse()
        .ok()
}

/// A term node's name.
pub(super) fn term_node(mode: RwMode, id: &SessionId, token: u64) -> String {
    let tag = match mode {
        RwMode::Read => 'r',
        RwMode::Write => 'w',
    };
    format!("{tag}-{id}-{token}")
}

/// A child of a name's node.
#[derive(Debug, PartialEq, Eq)]
enum Child {
    Term(RwMode, SessionId, u64),
    /// A term's gate, with the delay in ms.
    Gate(RwMode, SessionId, u64, i64),
    Waiting(SessionId),
}

fn parse_child(c: &str) -> Option<Child> {
    let (tag, rest) = c.split_once('-')?;
    let mode = |m: &str| match m {
        "r" => Some(RwMode::Read),
        "w" => Some(RwMode::Write),
        _ => None,
    };
    if tag == "q" {
        return Some(Child::Waiting(SessionId::parse(rest).ok()?));
    }
    let mut it = rest.split('-');
    let id = SessionId::parse(it.next()?).ok()?;
    let token = it.next()?.parse().ok()?;
    if let Some(m) = tag.strip_prefix('g') {
        let delay = it.next()?.parse().ok().filter(|d: &i64| *d >= 0)?;
        return it
            .next()
            .is_none()
            .then_some(Child::Gate(mode(m)?, id, token, delay));
    }
    it.next()
        .is_none()
        .then_some(Child::Term(mode(tag)?, id, token))
}

fn bad_node(op: &'static str, path: &str) -> Error {
    super::failure::error(
        op,
        format!("{path} holds no read-write lock counter (written outside simba-lease?)"),
    )
}

/// Waits for two requests already sent (one after the other, so the server ran them in that
/// order): one round trip.
fn both<A: Future, B: Future>(
    operation: &'static str,
    limit: Duration,
    a: A,
    b: B,
) -> Result<(A::Output, B::Output)> {
    block_on_for(async move { (a.await, b.await) }, limit).ok_or(Error::Timeout {
        operation,
        after: limit,
        source: None,
    })
}

impl Sessions {
    /// Reads `dir` and its children (after a sync, when `how.sync`), then, when writers wait,
    /// their nodes with the server's clock, sent together: a write to `{root}/clock` before
    /// the read, or, when `how.renew` names a session waiting in line, the rewrite of its
    /// registration after it (its data: the new patience).
    pub(super) fn rw_view(
        &self,
        client: &zk::Client,
        limit: Duration,
        dir: &str,
        how: How<'_>,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<View> {
        let op = how.op;
        let synced = how.sync.then(|| client.sync(dir));
        let mut r = client.new_multi_reader();
        r.add_get_data(dir).map_err(|e| zk_err(op, e))?;
        r.add_get_children(dir).map_err(|e| zk_err(op, e))?;
        let read = r.commit();
        let synced = async move {
            match synced {
                Some(f) => f.await,
                None => Ok(()),
            }
        };
        let (synced, read) = both(op, limit, synced, read)?;
        match synced {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(fail(e)),
        }
        let mut results = read.map_err(fail)?.into_iter();
        let mut view = View::default();
        match results.next() {
            Some(zk::MultiReadResult::Data { data, stat }) => {
                let counter = parse_counter(&data).ok_or_else(|| bad_node(op, dir))?;
                view.node = Some((stat.version, counter, stat.mzxid));
            }
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => return Ok(view),
            Some(zk::MultiReadResult::Error { err }) => return Err(fail(err)),
            _ => return Err(bad_node(op, dir)),
        }
        let children = match results.next() {
            Some(zk::MultiReadResult::Children { children }) => children,
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => Vec::new(),
            Some(zk::MultiReadResult::Error { err }) => return Err(fail(err)),
            _ => return Err(bad_node(op, dir)),
        };
        let mut queued = Vec::new();
        let names: HashSet<&str> = children.iter().map(String::as_str).collect();
        for c in &children {
            match parse_child(c) {
                Some(Child::Term(RwMode::Read, id, token)) => view.readers.push((id, token)),
                // At most one (grants are decided on a consistent read); the newest wins.
                Some(Child::Term(RwMode::Write, id, token))
                    if view.writer.as_ref().is_none_or(|w| w.1 < token) =>
                {
                    view.writer = Some((id, token));
                }
                // Created and deleted with its term's node: alone, the session ended.
                Some(Child::Gate(mode, id, token, delay_ms))
                    if !names.contains(term_node(mode, &id, token).as_str()) =>
                {
                    view.delayed.push(Delayed {
                        id,
                        mode,
                        token,
                        gate: format!("{dir}/{c}"),
                        delay_ms,
                        left: None,
                    });
                }
                Some(Child::Waiting(id)) => queued.push((id, format!("{dir}/{c}"))),
                _ => {}
            }
        }
        view.readers.sort();
        view.delayed.sort_by(|a, b| a.id.cmp(&b.id));
        // Every delay is timed by its stamp's write, sent now (they travel with the line's
        // read, if any): a write term's keeps every attempt out, a read term's new writers,
        // and each counts in `Busy` while it lasts; a grant deletes those that ran out.
        let paths: Vec<String> = view
            .delayed
            .iter()
            .map(|d| delay::stamp_path(&d.gate))
            .collect();
        let sent: Vec<_> = paths
            .iter()
            .map(|p| client.set_data(p, &[], None))
            .collect();
        if !queued.is_empty() {
            self.rw_line(client, limit, dir, how, queued, &mut view, fail)?;
        }
        let stamps = self.stamps(client, limit, &paths, sent, op, fail)?;
        let delayed = std::mem::take(&mut view.delayed);
        // A stamp whose gate is gone: taken since the read.
        view.delayed = delayed
            .into_iter()
            .zip(stamps)
            .filter_map(|(d, stamp)| {
                let left = Some(delay::left(&stamp?, d.delay_ms));
                Some(Delayed { left, ..d })
            })
            .collect();
        Ok(view)
    }

    /// Reads the waiting writers' nodes `queued` with the server's clock into `view` (see
    /// [`Sessions::rw_view`]).
    #[allow(clippy::too_many_arguments)]
    fn rw_line(
        &self,
        client: &zk::Client,
        limit: Duration,
        dir: &str,
        how: How<'_>,
        queued: Vec<(SessionId, String)>,
        view: &mut View,
        fail: &dyn Fn(zk::Error) -> Error,
    ) -> Result<()> {
        let op = how.op;
        let clock = format!("{}/clock", self.cfg.root);
        // The own registration, renewed after the read of the line: that write's `mtime` is
        // the clock then (no clock write).
        let mut renew = how
            .renew
            .filter(|(me, _)| queued.iter().any(|(id, _)| id == *me));
        for _ in 0..3 {
            let mut r = client.new_multi_reader();
            for (_, path) in &queued {
                r.add_get_data(path).map_err(|e| zk_err(op, e))?;
            }
            let (now, renewed, read) = match renew {
                Some((me, data)) => {
                    let read = r.commit();
                    let own = client.set_data(&format!("{dir}/q-{me}"), data, None);
                    let (read, own) = both(op, limit, read, own)?;
                    match own {
                        Ok(stat) => (stat.mtime, Some((me, stat.version)), read),
                        Err(zk::Error::NoNode) => {
                            renew = None; // left meanwhile: time the line by the clock
                            continue;
                        }
                        Err(e) => return Err(fail(e)),
                    }
                }
                None => {
                    let now = client.set_data(&clock, &[], None);
                    let read = r.commit();
                    let (now, read) = both(op, limit, now, read)?;
                    match now {
                        Ok(stat) => (stat.mtime, None, read),
                        Err(zk::Error::NoNode) => {
                            self.cfg.mkdirs(client, &clock, limit)?;
                            continue;
                        }
                        Err(e) => return Err(fail(e)),
                    }
                }
            };
            for ((id, _), r) in queued.into_iter().zip(read.map_err(fail)?) {
                let zk::MultiReadResult::Data { data, stat } = r else {
                    continue; // gone meanwhile
                };
                // Only a node the waiting writer's own session made counts.
                if SessionId::from_u64(stat.ephemeral_owner as u64) != id {
                    continue;
                }
                let patience = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|d| d.parse::<i64>().ok())
                    .unwrap_or(0);
                // The own one: live if it was before this renewal, at the renewal's version.
                let version = match renewed {
                    Some((me, version)) if *me == id => {
                        view.renewed = true;
                        version
                    }
                    _ => stat.version,
                };
                view.waiting.push(Waiter {
                    id,
                    czxid: stat.czxid,
                    version,
                    live: stat.mtime.saturating_add(patience) > now,
                });
            }
            view.waiting.sort_by_key(|w| w.czxid);
            return Ok(());
        }
        Err(super::failure::error(
            op,
            format!("the line of {dir} could not be timed"),
        ))
    }

    /// Through the shared reader, after a sync (a term or registration that just returned on
    /// another server is then seen).
    pub(super) fn rw_state(&self, name: &LeaseName) -> Result<RwState> {
        const OP: &str = "reading a read-write lock";
        let client = self.reader.client()?;
        let dir = self.rw_path(name);
        let fail = |e| zk_err(OP, e);
        let how = How {
            op: OP,
            sync: true,
            renew: None,
        };
        let view = self.rw_view(&client, self.cfg.request_timeout, &dir, how, &fail)?;
        let with_token = |(id, t): (SessionId, u64)| Token::new(t).map(|t| (id, t));
        Ok(RwState {
            last_token: view.counter(),
            delayed: view
                .delayed
                .iter()
                .filter_map(|d| {
                    let left = d.left.filter(|l| *l > 0)?;
                    Some(Token::new(d.token).map(|token| RwDelayed {
                        session: d.id.clone(),
                        mode: d.mode,
                        token,
                        remaining: delay::remaining(left),
                    }))
                })
                .collect::<Result<_>>()?,
            writer: view.writer.clone().map(with_token).transpose()?,
            readers: view
                .readers
                .iter()
                .cloned()
                .map(with_token)
                .collect::<Result<_>>()?,
            writers_waiting: view
                .waiting
                .into_iter()
                .filter(|w| w.live)
                .map(|w| w.id)
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::rw::TermNode;
    use super::*;

    #[test]
    fn children_and_counters_round_trip_and_foreign_names_are_skipped() {
        let id = SessionId::from_u64(0x1234);
        for mode in [RwMode::Read, RwMode::Write] {
            let c = term_node(mode, &id, 42);
            assert_eq!(parse_child(&c), Some(Child::Term(mode, id.clone(), 42)));
            let name = LeaseName::new("n").unwrap();
            let node = TermNode::new("/r/rw/n", &name, mode, &id, 42);
            assert_eq!(node.path, format!("/r/rw/n/{c}"));
            let g = node.gate(1500);
            let g = g.strip_prefix("/r/rw/n/").unwrap();
            assert_eq!(
                parse_child(g),
                Some(Child::Gate(mode, id.clone(), 42, 1500))
            );
        }
        assert_eq!(
            parse_child(&format!("q-{id}")),
            Some(Child::Waiting(id.clone()))
        );
        for bad in [
            "x-1",
            "r-zz-1",
            &format!("r-{id}"),
            &format!("w-{id}-x"),
            &format!("w-{id}-1-2"),
            &format!("gw-{id}-1"),
            &format!("gw-{id}-1--5"),
            &format!("gx-{id}-1-5"),
            &format!("gw-{id}-1-5-6"),
            "q-",
        ] {
            assert_eq!(parse_child(bad), None, "{bad}");
        }
        assert_eq!(parse_counter(&counter_data(7)), Some(7));
        for bad in [&b""[..], b"7", b"2 7", b"1 x"] {
            assert_eq!(parse_counter(bad), None);
        }
    }
}
