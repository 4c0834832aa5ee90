//! Read-write locks on both flavors (see "Read-write locks" in the module documentation): one
//! script an operation on the lock's slot.
//!
//! One node: the script reads the session hash, binds a new entry to it and keeps the
//! session's rw index (for the keep-alive's list and for close). Routed: the script cannot
//! read the session hash (another slot), so an entry ends at its own expiry, set from what
//! this backend knows the session has left (the routed flavor's `RwKnown`: the deadline of its
//! last open or keep-alive, an `Instant` no later than the server's), and each keep-alive
//! moves it on in the scripts it sends to each node anyway.

mod reply;

pub(super) use reply::rw_state_reply;

use super::backend::{lease_ms, Base};
use super::flavor::{Flavor, Routed};
use super::reply::{bad_reply, expired};
use super::scripting::{Reply, Role};
use super::scripts::scripts;
use crate::error::{Error, Result};
use crate::spi::{RwAcquire, RwMode};
use crate::types::{LeaseName, SessionId, Term, Token};
use reply::{done_has, rw_reply, RwReply, OP};
use std::time::{Duration, Instant};

/// The term of a grant.
fn term(name: &LeaseName, token: Token, remaining: Duration) -> RwAcquire {
    RwAcquire::Acquired(Term {
        name: name.clone(),
        token,
        remaining,
    })
}

impl Flavor {
    /// The arguments of `rw_state.lua` on `name`: the session key prefix, then (routed) the
    /// sessions found expired here that may still have entries there.
    pub(super) fn rw_state_args(&self, b: &Base, name: &LeaseName) -> Vec<String> {
        let mut args = vec![b.keys.session_prefix()];
        if let Flavor::Routed(f) = self {
            args.extend(f.rw.gone_for(name));
        }
        args
    }

    /// One attempt at the read-write lock `name` (one script; routed, one more call first,
    /// `session_ttl.lua`, when this backend knows no deadline of the session ahead).
    pub(super) fn acquire_rw(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        let mut args = vec![
            sid.to_string(),
            mode.as_str().to_owned(),
            patience_ms(patience).to_string(),
            b.keys.session_prefix(),
        ];
        let rw = b.keys.rw(name.as_str());
        match self {
            Flavor::OneNode(_) => {
                let keys = [rw, b.keys.session(sid), b.keys.rw_index(sid)];
                match rw_call(b, sid, name, &keys, &args)? {
                    RwReply::Expired => Err(expired(sid)),
                    RwReply::Granted {
                        token, remaining, ..
                    } => Ok(term(name, token, remaining)),
                    RwReply::Busy { busy, .. } => Ok(busy),
                }
            }
            Flavor::Routed(f) => {
                let sent = Instant::now();
                let (left, lease, delay) = match f.rw.left(sid, sent) {
                    Some((left, lease, Some(delay))) => (left, lease, delay),
                    known => {
                        let (left, delay) = f.session_left(b, sid, sent)?;
                        (left, known.and_then(|k| k.1), delay)
                    }
                };
                // A new entry gets a full lease on the lock's node (what the session has left
                // when its lease is not known): it then outlasts the deadline of every
                // keep-alive sent before the script ran, even one whose renewal missed it.
                // A new place ends with the session as known here, and a term with a
                // lock-delay counts as ended from then on for the other sessions.
                args.push(lease_ms(lease.unwrap_or(left).max(left)).to_string());
                args.push(delay.to_string());
                args.push(known_ms(left).to_string());
                // Noted before the call: a keep-alive running meanwhile renews it.
                let pre = f.rw.note(sid, name);
                let r =
                    f.rw.sending_gone(name, args, |args| rw_call(b, sid, name, &[rw], args))?;
                match r {
                    // The lock's node answers about the lock only.
                    RwReply::Expired => Err(bad_reply(OP, &Reply::Nil)),
                    RwReply::Granted { token, new, .. } if sent.elapsed() > left => {
                        // The entry may outlast its session: undone, as a late lease grant.
                        if new {
                            if let Err(e) = release_term(f, b, sid, name, mode, token) {
                                log::warn!(
                                    "releasing the late {} term {token} of {name:?} failed: {}",
                                    mode.as_str(),
                                    e.report()
                                );
                            }
                        }
                        Err(Error::Timeout {
                            operation: "acquiring a read-write lock (the lock call answered after the session's time)",
                            after: left,
                            source: None,
                        })
                    }
                    RwReply::Granted { token, .. } => {
                        // Noted again: a keep-alive whose renewal ran before the script (and
                        // found nothing) may have dropped the first note.
                        f.rw.note(sid, name);
                        Ok(term(name, token, left))
                    }
                    RwReply::Busy { busy, has } => {
                        if has {
                            f.rw.note(sid, name);
                        } else {
                            f.rw.drop_if(sid, name, Some(pre));
                        }
                        Ok(busy)
                    }
                }
            }
        }
    }

    /// Ends `sid`'s `mode` term of `name` with `token` (one script; routed, `session_ttl.lua`
    /// first when this backend knows no deadline of the session ahead).
    pub(super) fn release_rw(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        match self {
            Flavor::OneNode(_) => {
                let keys = [
                    b.keys.rw(name.as_str()),
                    b.keys.session(sid),
                    b.keys.rw_index(sid),
                ];
                let r = b.eval(
                    Role::Other,
                    &scripts().rw_release,
                    &keys,
                    &release_args(b, sid, mode, token),
                )?;
                Ok(done_has("releasing a read-write lock", &r)?.0)
            }
            Flavor::Routed(f) => {
                let now = Instant::now();
                if f.rw.left(sid, now).is_none() {
                    match f.session_left(b, sid, now) {
                        Err(Error::SessionExpired { .. }) => return Ok(false),
                        other => drop(other?),
                    }
                }
                release_term(f, b, sid, name, mode, token)
            }
        }
    }

    /// Removes `sid`'s place among the writers waiting for `name` (one script).
    pub(super) fn leave_rw(&self, b: &Base, sid: &SessionId, name: &LeaseName) -> Result<bool> {
        const OP: &str = "leaving a read-write lock's queue";
        let mut keys = vec![b.keys.rw(name.as_str())];
        let args = [sid.to_string(), b.keys.session_prefix()];
        match self {
            Flavor::OneNode(_) => {
                keys.push(b.keys.rw_index(sid));
                let r = b.eval(Role::Other, &scripts().rw_leave, &keys, &args)?;
                Ok(done_has(OP, &r)?.0)
            }
            Flavor::Routed(f) => {
                let stamp = f.rw.stamp(sid, name);
                let r = f.rw.sending_gone(name, Vec::from(args), |args| {
                    b.eval(Role::Other, &scripts().rw_leave, &keys, args)
                })?;
                let (left, has) = done_has(OP, &r)?;
                if !has {
                    f.rw.drop_if(sid, name, stamp);
                }
                Ok(left)
            }
        }
    }
}

/// What the session has left as known here, in whole ms rounded down (never later than
/// the server's end; at least 1: the call is sent only while some is left).
fn known_ms(left: Duration) -> u64 {
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Patience in whole ms (zero stays zero: a one-time try).
fn patience_ms(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        lease_ms(d)
    }
}

fn release_args(b: &Base, sid: &SessionId, mode: RwMode, token: Token) -> [String; 4] {
    [
        sid.to_string(),
        mode.as_str().to_owned(),
        token.get().to_string(),
        b.keys.session_prefix(),
    ]
}

/// `rw_acquire.lua` on `keys`, with `WAIT` after a new term when `wait_replicas` asks for it
/// (a term fewer replicas acknowledged is released and the call fails).
fn rw_call(
    b: &Base,
    sid: &SessionId,
    name: &LeaseName,
    keys: &[String],
    args: &[String],
) -> Result<RwReply> {
    let s = &scripts().rw_acquire;
    let n = b.cfg.wait_replicas;
    if n == 0 {
        return rw_reply(&b.eval(Role::Other, s, keys, args)?);
    }
    let new_term = |r: &Reply| matches!(rw_reply(r), Ok(RwReply::Granted { new: true, .. }));
    let (r, acked) = b
        .scripting
        .eval_then_wait(s, keys, args, &new_term, n, b.wait_timeout())?;
    let r = rw_reply(&r)?;
    match (acked, &r) {
        (Some(acked), RwReply::Granted { token: t, .. }) if acked < n => {
            let mode = if args.get(1).map(String::as_str) == Some("write") {
                RwMode::Write
            } else {
                RwMode::Read
            };
            let released = b
                .eval(
                    Role::Other,
                    &scripts().rw_release,
                    keys,
                    &release_args(b, sid, mode, *t),
                )
                .and_then(|r| Ok(done_has("releasing a read-write lock", &r)?.0));
            Err(b.unacknowledged(name, *t, acked, released))
        }
        _ => Ok(r),
    }
}

/// Routed, the release on the lock's node, without a session check (also the undo of a
/// late grant).
fn release_term(
    f: &Routed,
    b: &Base,
    sid: &SessionId,
    name: &LeaseName,
    mode: RwMode,
    token: Token,
) -> Result<bool> {
    let stamp = f.rw.stamp(sid, name);
    let args = release_args(b, sid, mode, token);
    let r = f.rw.sending_gone(name, Vec::from(args), |args| {
        b.eval(
            Role::Other,
            &scripts().rw_release,
            &[b.keys.rw(name.as_str())],
            args,
        )
    })?;
    let (freed, has) = done_has("releasing a read-write lock", &r)?;
    if !has {
        f.rw.drop_if(sid, name, stamp);
    }
    Ok(freed)
}
