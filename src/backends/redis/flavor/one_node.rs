//! One node: every key of an operation is on one server, so each operation is one script
//! that also checks the session hash and keeps the session's index sets. A new term (or
//! membership) is bound to its session: a keep-alive renews the session hash alone, whatever
//! the session holds, and lists its leases and read-write terms only when their version
//! changed.

use super::super::backend::{lease_ms, Base};
use super::super::reply::{
    acquired, array_of, bad_reply, expired, gone, lease_in, metadata_in, renewed, rw_terms_in,
    session_in, token, Acquired,
};
use super::super::scripting::{Reply, Role};
use super::super::scripts::scripts;
use crate::error::Result;
use crate::spi::{HeldLease, HeldRw, KeepAlive};
use crate::types::{GroupName, LeaseName, Member, SessionId, Token};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

/// What the one-node flavor keeps between calls.
#[derive(Default)]
pub(in super::super) struct OneNode {
    /// Per session, the version of what it holds the last full keep-alive reply listed,
    /// and those lists (a keep-alive answering "same version" reuses them).
    known: Mutex<HashMap<SessionId, KnownTerms>>,
}

/// The leases and read-write terms of a session at one version of what it holds (one node:
/// lease and read-write acquires and releases bump the version).
#[derive(Debug)]
struct KnownTerms {
    version: i64,
    leases: Vec<(LeaseName, Token)>,
    rw: Vec<HeldRw>,
}

/// The session's keys and, last, its rw index (the keys of a keep-alive or a close).
fn session_keys(b: &Base, session: &SessionId) -> [String; 5] {
    let [s, leases, groups, delay] = b.keys.session_keys(session);
    [s, leases, groups, delay, b.keys.rw_index(session)]
}

/// The leases `{name, token, ...}` of a full keep-alive reply `r`.
fn listed_leases(r: &Reply, flat: &Reply) -> Result<Vec<(LeaseName, Token)>> {
    const OP: &str = "keeping a session alive";
    let flat = flat.as_array().ok_or_else(|| bad_reply(OP, r))?;
    if !flat.len().is_multiple_of(2) {
        return Err(bad_reply(OP, r));
    }
    flat.chunks_exact(2)
        .map(|c| {
            let name = c[0].as_str().ok_or_else(|| bad_reply(OP, r))?;
            let t = c[1].as_int().ok_or_else(|| bad_reply(OP, r))?;
            Ok((lease_in(OP, r, name)?, token(OP, t)?))
        })
        .collect()
}

/// The read-write terms `{name, mode, token, ...}` of a full keep-alive reply `r`.
fn listed_rw(r: &Reply, flat: &Reply) -> Result<Vec<HeldRw>> {
    const OP: &str = "keeping a session alive";
    let flat = flat.as_array().ok_or_else(|| bad_reply(OP, r))?;
    if !flat.len().is_multiple_of(3) {
        return Err(bad_reply(OP, r));
    }
    let mut out = Vec::with_capacity(flat.len() / 3);
    for c in flat.chunks_exact(3) {
        let name = lease_in(OP, r, c[0].as_str().ok_or_else(|| bad_reply(OP, r))?)?;
        out.extend(rw_terms_in(OP, r, &name, &c[1..])?);
    }
    Ok(out)
}

impl OneNode {
    /// `acquire.lua` (with `value`, the term's value is set in the same script), or with
    /// `patience` (fair locks) `acquire_queued.lua`.
    pub(super) fn acquire(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        value: Option<&str>,
    ) -> Result<Acquired> {
        const OP: &str = "acquiring";
        let mut keys = vec![
            b.keys.session(sid),
            b.keys.leases_index(sid),
            b.keys.lease(name.as_str()),
        ];
        let mut args = vec![sid.to_string(), name.to_string(), b.keys.session_prefix()];
        let s = match patience {
            None => {
                args.extend(value.map(str::to_owned));
                &scripts().acquire
            }
            Some(p) => {
                keys.push(b.keys.queue(name.as_str()));
                keys.push(b.keys.queue_deadlines(name.as_str()));
                args.push(lease_ms(p).to_string());
                &scripts().acquire_queued
            }
        };
        if b.cfg.wait_replicas == 0 {
            return acquired(OP, &b.eval(Role::Other, s, &keys, &args)?, sid);
        }
        let new_term =
            |r: &Reply| matches!(acquired(OP, r, sid), Ok(Acquired::Term { new: true, .. }));
        let n = b.cfg.wait_replicas;
        let (r, acked) =
            b.scripting
                .eval_then_wait(s, &keys, &args, &new_term, n, b.wait_timeout())?;
        let r = acquired(OP, &r, sid)?;
        match (acked, &r) {
            (Some(acked), Acquired::Term { token: t, .. }) if acked < n => {
                let released = self.release(b, sid, name, *t);
                Err(b.unacknowledged(name, *t, acked, released))
            }
            _ => Ok(r),
        }
    }

    /// Renews the session, which renews every term and membership bound to it, in one
    /// script whose cost does not depend on what the session holds.
    pub(super) fn keep_alive(
        &self,
        b: &Base,
        session: &SessionId,
        lease: Duration,
    ) -> Result<KeepAlive> {
        self.renew(b, session, lease_ms(lease), &session_keys(b, session))
    }

    /// [`Self::keep_alive`]: the reply lists the leases and read-write terms only when their
    /// version changed since the lists this backend kept.
    fn renew(
        &self,
        b: &Base,
        session: &SessionId,
        lease_ms: u64,
        index: &[String; 5],
    ) -> Result<KeepAlive> {
        const OP: &str = "keeping a session alive";
        let known = self.known.lock().get(session).map(|k| k.version);
        let r = b.eval(
            Role::KeepAlive,
            &scripts().keep_alive,
            index,
            &[
                session.to_string(),
                lease_ms.to_string(),
                b.keys.lease_prefix(),
                b.keys.group_prefix(),
                b.keys.session_prefix(),
                known.map(|v| v.to_string()).unwrap_or_default(),
                b.keys.rw_prefix(),
            ],
        )?;
        if gone(&r) {
            self.known.lock().remove(session);
            return Err(expired(session));
        }
        let remaining = renewed(OP, &r, lease_ms)?;
        let (version, lists) = match r.as_array() {
            Some([_, v, listed, lists @ ..]) => {
                let lists = match (listed.as_int(), lists) {
                    (Some(0), []) => None,
                    (Some(1), [leases, rw]) => Some((leases, rw)),
                    _ => return Err(bad_reply(OP, &r)),
                };
                (v.as_int().filter(|v| *v >= 0), lists)
            }
            _ => return Err(bad_reply(OP, &r)),
        };
        let Some(version) = version else {
            return Err(bad_reply(OP, &r));
        };
        let held = |k: &KnownTerms| KeepAlive {
            remaining,
            leases: k
                .leases
                .iter()
                .map(|(name, token)| HeldLease {
                    name: name.clone(),
                    token: *token,
                    remaining,
                })
                .collect(),
            rw: k.rw.clone(),
        };
        let Some((leases, rw)) = lists else {
            let known = self.known.lock();
            return match known.get(session) {
                Some(k) if k.version == version => Ok(held(k)),
                // "Unchanged" from a version this backend no longer keeps (a concurrent
                // keep-alive replaced it): ask again for the full list.
                _ => {
                    drop(known);
                    self.known.lock().remove(session);
                    self.renew(b, session, lease_ms, index)
                }
            };
        };
        let known = KnownTerms {
            version,
            leases: listed_leases(&r, leases)?,
            rw: listed_rw(&r, rw)?,
        };
        let reply = held(&known);
        self.known.lock().insert(session.clone(), known);
        Ok(reply)
    }

    /// `close.lua`: the session, its terms, its memberships and its read-write terms and
    /// places in one script.
    pub(super) fn close(&self, b: &Base, session: &SessionId) -> Result<()> {
        const OP: &str = "closing a session";
        self.known.lock().remove(session);
        let r = b.eval(
            Role::Other,
            &scripts().close,
            &session_keys(b, session),
            &[
                session.to_string(),
                b.keys.lease_prefix(),
                b.keys.group_prefix(),
            ],
        )?;
        match r.as_int() {
            Some(1) => Ok(()),
            _ => Err(bad_reply(OP, &r)),
        }
    }

    /// Releases a term (the script checks the session is live and keeps its index; also
    /// the undo of an unacknowledged grant).
    pub(super) fn release(
        &self,
        b: &Base,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        let keys = [
            b.keys.lease(name.as_str()),
            b.keys.leases_index(session),
            b.keys.session(session),
        ];
        b.release_script(&keys, session, name, token)
    }

    /// `join.lua`: the membership, bound to the session.
    pub(super) fn join(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<()> {
        const OP: &str = "joining a group";
        let r = b.eval(
            Role::Other,
            &scripts().join,
            &[
                b.keys.session(session),
                b.keys.groups_index(session),
                b.keys.group(group.as_str()),
            ],
            &[session.to_string(), group.to_string()],
        )?;
        if gone(&r) {
            return Err(expired(session));
        }
        match array_of(OP, &r, 1)?[0].as_int() {
            Some(1) => Ok(()),
            _ => Err(bad_reply(OP, &r)),
        }
    }

    /// Leaves a group (the script checks the session is live and keeps its index).
    pub(super) fn leave(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<bool> {
        let keys = [
            b.keys.group(group.as_str()),
            b.keys.groups_index(session),
            b.keys.session(session),
        ];
        b.leave_script(&keys, session, group)
    }

    /// The members and their metadata, read by the one script.
    pub(super) fn members(&self, b: &Base, group: &GroupName) -> Result<Vec<Member>> {
        const OP: &str = "reading members";
        let (r, items) = b.members_script(group, true)?;
        if items.len() % 2 != 0 {
            return Err(bad_reply(OP, &r));
        }
        items
            .chunks_exact(2)
            .map(|c| {
                Ok(Member {
                    session: session_in(OP, &r, &c[0])?,
                    metadata: metadata_in(OP, &r, &c[1])?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spi::RwMode;

    #[test]
    fn full_keep_alive_lists_are_checked_whole() {
        let int = Reply::Int;
        let arr = Reply::Array;
        let data = |s: &str| Reply::Data(s.as_bytes().to_vec());
        let r = Reply::Nil;
        let tok = |t| Token::new(t).unwrap();
        let x = LeaseName::new("x").unwrap();
        let leases = listed_leases(&r, &arr(vec![data("x"), int(3)])).unwrap();
        assert_eq!(leases, vec![(x.clone(), tok(3))]);
        let rw = arr(vec![
            data("x"),
            data("write"),
            int(5),
            data("y"),
            data("read"),
            int(2),
        ]);
        let rw = listed_rw(&r, &rw).unwrap();
        assert_eq!(rw.len(), 2);
        assert_eq!(
            (&rw[0].name, rw[0].mode, rw[0].token),
            (&x, RwMode::Write, tok(5))
        );
        assert_eq!((rw[1].name.as_str(), rw[1].mode), ("y", RwMode::Read));
        assert!(listed_rw(&r, &arr(vec![])).unwrap().is_empty());
        for bad in [
            arr(vec![data("x"), data("write")]),
            arr(vec![data("x"), data("up"), int(5)]),
            arr(vec![data("x y"), data("read"), int(5)]),
            arr(vec![data("x"), data("read"), int(0)]),
            int(1),
        ] {
            assert!(listed_rw(&r, &bad).is_err(), "{bad:?}");
        }
        assert!(listed_leases(&r, &arr(vec![data("x")])).is_err());
    }
}
