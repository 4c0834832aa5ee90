//! Decoding of script replies into the SPI's types: every reply is checked whole, and
//! anything unexpected is an error that shows the reply (never a panic).

use super::failure;
use super::scripting::{self, Reply};
use crate::error::{Error, Result};
use crate::spi::{HeldRw, RwMode};
use crate::types::{GroupName, LeaseName, Metadata, Owner, SessionId, Token};
use std::time::Duration;

pub(super) fn bad_reply(op: &'static str, r: &Reply) -> Error {
    let mut shown = String::new();
    show(r, &mut shown);
    failure::error(
        op,
        scripting::shorten(format!("unexpected reply from Redis: {shown}")),
    )
}

/// `r` for a message: strings quoted (lossy UTF-8), arrays in brackets; stops growing past a
/// few hundred bytes.
fn show(r: &Reply, out: &mut String) {
    if out.len() > 300 {
        return;
    }
    match r {
        Reply::Nil => out.push_str("nil"),
        Reply::Int(i) => out.push_str(&i.to_string()),
        Reply::Data(d) => {
            let head = &d[..d.len().min(100)];
            out.push_str(&format!("{:?}", String::from_utf8_lossy(head)));
        }
        Reply::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                show(x, out);
            }
            out.push(']');
        }
    }
}

/// The elements of `r`, which must be an array of `len` elements.
pub(super) fn array_of<'a>(op: &'static str, r: &'a Reply, len: usize) -> Result<&'a [Reply]> {
    match r {
        Reply::Array(a) if a.len() == len => Ok(a),
        _ => Err(bad_reply(op, r)),
    }
}

pub(super) fn int_at(op: &'static str, r: &Reply, i: usize) -> Result<i64> {
    r.as_array()
        .and_then(|a| a.get(i))
        .and_then(Reply::as_int)
        .ok_or_else(|| bad_reply(op, r))
}

/// Whether `r` is the `{-1}` of a script that found its session gone.
pub(super) fn gone(r: &Reply) -> bool {
    matches!(r.as_array(), Some([x]) if x.as_int() == Some(-1))
}

/// The error of a call whose session `sid` is gone.
pub(super) fn expired(sid: &SessionId) -> Error {
    Error::SessionExpired {
        session: sid.clone(),
    }
}

/// An integer reply that must be 0 or 1.
pub(super) fn flag(op: &'static str, r: &Reply) -> Result<bool> {
    match r.as_int() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(bad_reply(op, r)),
    }
}

pub(super) fn token(op: &'static str, v: i64) -> Result<Token> {
    u64::try_from(v)
        .ok()
        .and_then(|v| Token::new(v).ok())
        .ok_or_else(|| failure::error(op, format!("token {v} from Redis")))
}

/// A remaining time in ms from a reply: never negative.
pub(super) fn millis(op: &'static str, r: &Reply, v: i64) -> Result<Duration> {
    u64::try_from(v)
        .map(Duration::from_millis)
        .map_err(|_| bad_reply(op, r))
}

/// The token (element 1) and the remaining time (element 2) of a reply about a term.
pub(super) fn term_at(op: &'static str, r: &Reply) -> Result<(Token, Duration)> {
    let token = token(op, int_at(op, r, 1)?)?;
    let remaining = millis(op, r, int_at(op, r, 2)?)?;
    Ok((token, remaining))
}

/// The remaining time a keep-alive script answers first: the lease it set, more than 0 and
/// never more than `lease_ms` (the lease asked for).
pub(super) fn renewed(op: &'static str, r: &Reply, lease_ms: u64) -> Result<Duration> {
    int_at(op, r, 0)
        .ok()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| (1..=lease_ms).contains(v))
        .map(Duration::from_millis)
        .ok_or_else(|| bad_reply(op, r))
}

/// A session id in a reply.
pub(super) fn session_in(op: &'static str, r: &Reply, s: &str) -> Result<SessionId> {
    SessionId::parse(s).map_err(|_| bad_reply(op, r))
}

/// A lease name in a reply.
pub(super) fn lease_in(op: &'static str, r: &Reply, s: &str) -> Result<LeaseName> {
    LeaseName::new(s).map_err(|_| bad_reply(op, r))
}

/// A read-write mode in a reply: `"read"` or `"write"`.
pub(super) fn rw_mode_in(op: &'static str, r: &Reply, x: &Reply) -> Result<RwMode> {
    match x.as_str() {
        Some("read") => Ok(RwMode::Read),
        Some("write") => Ok(RwMode::Write),
        _ => Err(bad_reply(op, r)),
    }
}

/// The read-write terms of lock `name` in a flat list `{mode, token, ...}` of reply `r`.
pub(super) fn rw_terms_in(
    op: &'static str,
    r: &Reply,
    name: &LeaseName,
    flat: &[Reply],
) -> Result<Vec<HeldRw>> {
    if !flat.len().is_multiple_of(2) {
        return Err(bad_reply(op, r));
    }
    flat.chunks_exact(2)
        .map(|c| {
            Ok(HeldRw {
                name: name.clone(),
                mode: rw_mode_in(op, r, &c[0])?,
                token: token(op, c[1].as_int().ok_or_else(|| bad_reply(op, r))?)?,
            })
        })
        .collect()
}

/// A group name in a reply.
pub(super) fn group_in(op: &'static str, r: &Reply, s: &str) -> Result<GroupName> {
    GroupName::new(s).map_err(|_| bad_reply(op, r))
}

/// Session metadata in a reply.
pub(super) fn metadata_in(op: &'static str, r: &Reply, s: &str) -> Result<Metadata> {
    Metadata::new(s).map_err(|_| bad_reply(op, r))
}

/// The owner of the term of a reply about a term: session `holder`.
pub(super) fn owner_at(op: &'static str, r: &Reply, holder: &str) -> Result<Owner> {
    let session = session_in(op, r, holder)?;
    let (token, remaining) = term_at(op, r)?;
    Ok(Owner {
        session,
        token,
        remaining,
        value: String::new(),
    })
}

pub(super) fn strings(op: &'static str, r: &Reply) -> Result<Vec<String>> {
    r.as_array()
        .ok_or_else(|| bad_reply(op, r))?
        .iter()
        .map(|x| {
            x.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad_reply(op, r))
        })
        .collect()
}

/// What an acquire script answered (`lease_acquire` in `lua/common.lua`, or `{-1}`).
#[derive(Debug)]
pub(super) enum Acquired {
    /// The acquirer's session is gone.
    Expired,
    /// The acquirer holds the lease; `new` for a new term.
    Term {
        token: Token,
        remaining: Duration,
        new: bool,
    },
    /// Another session holds it.
    Held(Owner),
    /// Queued (fair locks) behind `ahead` live waiters, or next while another session holds it.
    Queued { ahead: usize, owner: Option<Owner> },
}

/// Decodes an acquire reply for session `sid`: `{-1}`, `{1, token, remaining, new}` or
/// `{0, token, remaining, holder}` with a positive token, a remaining time of at least 0 and
/// a holder other than `sid`; anything else is an error.
pub(super) fn acquired(op: &'static str, r: &Reply, sid: &SessionId) -> Result<Acquired> {
    if gone(r) {
        return Ok(Acquired::Expired);
    }
    if let Some([tag, rest @ ..]) = r.as_array() {
        if tag.as_int() == Some(2) {
            return queued(op, r, rest, sid);
        }
    }
    let a = array_of(op, r, 4)?;
    match a[0].as_int() {
        Some(1) => {
            let (token, remaining) = term_at(op, r)?;
            let new = flag(op, &a[3]).map_err(|_| bad_reply(op, r))?;
            Ok(Acquired::Term {
                token,
                remaining,
                new,
            })
        }
        Some(0) => {
            let holder = a[3].as_str().ok_or_else(|| bad_reply(op, r))?;
            let owner = owner_at(op, r, holder)?;
            if owner.session == *sid {
                return Err(bad_reply(op, r));
            }
            Ok(Acquired::Held(owner))
        }
        _ => Err(bad_reply(op, r)),
    }
}

/// Decodes the rest of a queued acquire's reply (`queue_waiting` in `lua/common.lua`):
/// `{ahead}` or `{ahead, token, remaining, holder}` with a holder other than `sid`.
fn queued(op: &'static str, r: &Reply, rest: &[Reply], sid: &SessionId) -> Result<Acquired> {
    let ahead = |x: &Reply| {
        x.as_int()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| bad_reply(op, r))
    };
    match rest {
        [a] => Ok(Acquired::Queued {
            ahead: ahead(a)?,
            owner: None,
        }),
        [a, t, left, holder] => {
            let holder = holder.as_str().ok_or_else(|| bad_reply(op, r))?;
            let owner = Owner {
                session: session_in(op, r, holder)?,
                token: token(op, t.as_int().ok_or_else(|| bad_reply(op, r))?)?,
                remaining: millis(op, r, left.as_int().ok_or_else(|| bad_reply(op, r))?)?,
                value: String::new(),
            };
            if owner.session == *sid {
                return Err(bad_reply(op, r));
            }
            Ok(Acquired::Queued {
                ahead: ahead(a)?,
                owner: Some(owner),
            })
        }
        _ => Err(bad_reply(op, r)),
    }
}

/// Decodes the session call of a routed acquire or join (`acquire_session.lua`): `None`
/// when the session is gone, else its remaining ms and its lease ms, both positive, and its
/// lock-delay in ms.
pub(super) fn session_call(op: &'static str, r: &Reply) -> Result<Option<(u64, u64, u64)>> {
    if gone(r) {
        return Ok(None);
    }
    let a = array_of(op, r, 3)?;
    let ms = |x: &Reply| x.as_int().and_then(|v| u64::try_from(v).ok());
    let positive = |x: &Reply| ms(x).filter(|v| *v > 0).ok_or_else(|| bad_reply(op, r));
    let delay = ms(&a[2]).ok_or_else(|| bad_reply(op, r))?;
    Ok(Some((positive(&a[0])?, positive(&a[1])?, delay)))
}
