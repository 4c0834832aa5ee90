//! Decoding of the read-write scripts' replies: an attempt's (`rw_acquire.lua`), a release's or
//! leave's, and the state's (`rw_state.lua`), each checked whole.

use super::super::reply::{array_of, bad_reply, gone, int_at, millis, session_in, token};
use super::super::scripting::Reply;
use crate::error::Result;
use crate::spi::{RwAcquire, RwDelayed, RwMode};
use crate::types::Token;
use std::time::Duration;

pub(super) const OP: &str = "acquiring a read-write lock";

/// What `rw_acquire.lua` answered.
pub(super) enum RwReply {
    /// The session's own session hash is gone (one node).
    Expired,
    /// The session holds a term of the mode asked; `new` for a new term.
    Granted {
        token: Token,
        remaining: Duration,
        new: bool,
    },
    /// Not granted now; `has`: the session still holds or waits for the name.
    Busy { busy: RwAcquire, has: bool },
}

fn count(r: &Reply, x: &Reply) -> Result<usize> {
    x.as_int()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| bad_reply(OP, r))
}

fn bit(op: &'static str, r: &Reply, x: &Reply) -> Result<bool> {
    match x.as_int() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(bad_reply(op, r)),
    }
}

/// Decodes `{-1}`, `{1, token, remaining, new}` or `{0, writer, readers, waiting, has}` (the
/// writer may be the caller: a session holding the write term that asks to read).
pub(super) fn rw_reply(r: &Reply) -> Result<RwReply> {
    if gone(r) {
        return Ok(RwReply::Expired);
    }
    match r.as_array() {
        Some([tag, t, left, new]) if tag.as_int() == Some(1) => Ok(RwReply::Granted {
            token: token(OP, t.as_int().ok_or_else(|| bad_reply(OP, r))?)?,
            remaining: millis(OP, r, left.as_int().ok_or_else(|| bad_reply(OP, r))?)?,
            new: bit(OP, r, new)?,
        }),
        Some([tag, writer, readers, waiting, has]) if tag.as_int() == Some(0) => {
            let writer = match writer.as_str().ok_or_else(|| bad_reply(OP, r))? {
                "" => None,
                w => Some(session_in(OP, r, w)?),
            };
            Ok(RwReply::Busy {
                busy: RwAcquire::Busy {
                    writer,
                    readers: count(r, readers)?,
                    writers_waiting: count(r, waiting)?,
                },
                has: bit(OP, r, has)?,
            })
        }
        _ => Err(bad_reply(OP, r)),
    }
}

/// Decodes `{done (0|1), has (0|1)}` of a release or a leave.
pub(super) fn done_has(op: &'static str, r: &Reply) -> Result<(bool, bool)> {
    let a = array_of(op, r, 2)?;
    Ok((bit(op, r, &a[0])?, bit(op, r, &a[1])?))
}

/// Decodes `rw_state.lua`'s reply: `{token, writer, its token, {reader, token…}, {waiting…},
/// {session, mode, token, ms left…} of the delayed terms}`.
pub(in super::super) fn rw_state_reply(r: &Reply) -> Result<crate::spi::RwState> {
    const OP: &str = "reading a read-write lock";
    let a = array_of(OP, r, 6)?;
    let last = u64::try_from(int_at(OP, r, 0)?).map_err(|_| bad_reply(OP, r))?;
    let writer = match a[1].as_str().ok_or_else(|| bad_reply(OP, r))? {
        "" => None,
        w => Some((session_in(OP, r, w)?, token(OP, int_at(OP, r, 2)?)?)),
    };
    let flat = a[3].as_array().ok_or_else(|| bad_reply(OP, r))?;
    if flat.len() % 2 != 0 {
        return Err(bad_reply(OP, r));
    }
    let mut readers = flat
        .chunks_exact(2)
        .map(|c| {
            let sid = c[0].as_str().ok_or_else(|| bad_reply(OP, r))?;
            let t = c[1].as_int().ok_or_else(|| bad_reply(OP, r))?;
            Ok((session_in(OP, r, sid)?, token(OP, t)?))
        })
        .collect::<Result<Vec<_>>>()?;
    readers.sort();
    let writers_waiting = a[4]
        .as_array()
        .ok_or_else(|| bad_reply(OP, r))?
        .iter()
        .map(|x| session_in(OP, r, x.as_str().ok_or_else(|| bad_reply(OP, r))?))
        .collect::<Result<Vec<_>>>()?;
    let flat = a[5].as_array().ok_or_else(|| bad_reply(OP, r))?;
    if flat.len() % 4 != 0 {
        return Err(bad_reply(OP, r));
    }
    let mut delayed = flat
        .chunks_exact(4)
        .map(|c| {
            let sid = c[0].as_str().ok_or_else(|| bad_reply(OP, r))?;
            let mode = match c[1].as_str() {
                Some("read") => RwMode::Read,
                Some("write") => RwMode::Write,
                _ => return Err(bad_reply(OP, r)),
            };
            let t = c[2].as_int().ok_or_else(|| bad_reply(OP, r))?;
            let left = c[3].as_int().ok_or_else(|| bad_reply(OP, r))?;
            Ok(RwDelayed {
                session: session_in(OP, r, sid)?,
                mode,
                token: token(OP, t)?,
                remaining: millis(OP, r, left)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    delayed.sort_by(|x, y| x.session.cmp(&y.session));
    Ok(crate::spi::RwState {
        writer,
        readers,
        writers_waiting,
        last_token: last,
        delayed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SessionId;

    fn data(s: &str) -> Reply {
        Reply::Data(s.as_bytes().to_vec())
    }

    #[test]
    fn acquire_replies_are_checked_whole() {
        let me = SessionId::random();
        let other = SessionId::random();
        let int = Reply::Int;
        let r = Reply::Array(vec![int(1), int(7), int(900), int(1)]);
        assert!(matches!(
            rw_reply(&r).unwrap(),
            RwReply::Granted { token, remaining, new: true }
                if token.get() == 7 && remaining == Duration::from_millis(900)
        ));
        let r = Reply::Array(vec![int(0), data(other.as_str()), int(2), int(1), int(1)]);
        match rw_reply(&r).unwrap() {
            RwReply::Busy {
                busy:
                    RwAcquire::Busy {
                        writer,
                        readers,
                        writers_waiting,
                    },
                has,
            } => {
                assert_eq!(writer, Some(other.clone()));
                assert_eq!((readers, writers_waiting, has), (2, 1, true));
            }
            _ => panic!("a busy reply"),
        }
        assert!(matches!(
            rw_reply(&Reply::Array(vec![int(-1)])).unwrap(),
            RwReply::Expired
        ));
        // A session holding the write term that asks to read is kept out by itself.
        let r = Reply::Array(vec![int(0), data(me.as_str()), int(0), int(0), int(1)]);
        assert!(matches!(
            rw_reply(&r).unwrap(),
            RwReply::Busy { busy: RwAcquire::Busy { writer: Some(w), .. }, has: true } if w == me
        ));
        for bad in [
            Reply::Array(vec![int(0), data("not a session"), int(0), int(0), int(0)]),
            Reply::Array(vec![int(0), data(""), int(-1), int(0), int(0)]),
            Reply::Array(vec![int(0), data(""), int(0), int(0), int(2)]),
            Reply::Array(vec![int(1), int(0), int(900), int(1)]),
            Reply::Array(vec![int(1), int(3), int(-5), int(1)]),
            Reply::Array(vec![int(1), int(3), int(5)]),
            Reply::Nil,
        ] {
            assert!(rw_reply(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn state_replies_sort_readers_and_delayed_terms_and_keep_the_queue_order() {
        let (a, b, w) = (
            SessionId::random(),
            SessionId::random(),
            SessionId::random(),
        );
        let (first, second) = if a < b { (a, b) } else { (b, a) };
        let int = Reply::Int;
        let arr = Reply::Array;
        let r = arr(vec![
            int(9),
            data(""),
            int(0),
            arr(vec![
                data(second.as_str()),
                int(8),
                data(first.as_str()),
                int(9),
            ]),
            arr(vec![data(w.as_str())]),
            arr(vec![
                data(second.as_str()),
                data("write"),
                int(5),
                int(1500),
                data(first.as_str()),
                data("read"),
                int(4),
                int(0),
            ]),
        ]);
        let st = rw_state_reply(&r).unwrap();
        assert_eq!(st.writer, None);
        assert_eq!(st.last_token, 9);
        let tok = |t| Token::new(t).unwrap();
        assert_eq!(
            st.readers,
            vec![(first.clone(), tok(9)), (second.clone(), tok(8))]
        );
        assert_eq!(st.writers_waiting, vec![w.clone()]);
        assert_eq!(
            st.delayed,
            vec![
                RwDelayed {
                    session: first,
                    mode: RwMode::Read,
                    token: tok(4),
                    remaining: Duration::ZERO,
                },
                RwDelayed {
                    session: second,
                    mode: RwMode::Write,
                    token: tok(5),
                    remaining: Duration::from_millis(1500),
                },
            ]
        );
        let empty = || arr(vec![]);
        let r = arr(vec![
            int(3),
            data(w.as_str()),
            int(3),
            empty(),
            empty(),
            empty(),
        ]);
        assert_eq!(
            rw_state_reply(&r).unwrap().writer,
            Some((w.clone(), tok(3)))
        );
        let delayed = |d: Vec<Reply>| arr(vec![int(3), data(""), int(0), empty(), empty(), arr(d)]);
        for bad in [
            arr(vec![
                int(3),
                data(""),
                int(0),
                arr(vec![data("x")]),
                empty(),
                empty(),
            ]),
            arr(vec![int(3), data(""), int(0), empty(), empty()]),
            delayed(vec![data(w.as_str()), data("write"), int(3)]),
            delayed(vec![data(w.as_str()), data("both"), int(3), int(10)]),
            delayed(vec![data(w.as_str()), data("read"), int(0), int(10)]),
            delayed(vec![data(w.as_str()), data("read"), int(3), int(-1)]),
            delayed(vec![data("x"), data("read"), int(3), int(10)]),
        ] {
            assert!(rw_state_reply(&bad).is_err(), "{bad:?}");
        }
    }
}
