//! Plain results: events and member lists handed to C as real pointers, tracked by address so
//! that a double free or a wrong free function is detected; the `*_next_event` body.

use crate::args::{check_value_buf, fill, millis, out, put, put_opt, put_value};
use crate::handles::locked;
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{
    simba_event, simba_event_kind, simba_loss_reason, simba_member, simba_member_list,
    simba_status, SIMBA_NAME_LEN, SIMBA_SESSION_ID_LEN,
};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use lease::{Event, LossReason, Member};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{
    election::{simba_election_set_value, simba_election_value},
    lock::simba_lock_set_value,
};

/// The live plain results handed out: address to kind (`simba_event`, `simba_member_list`,
/// `simba_holder_list`, `simba_waiter_list`).
static RESULTS: LazyLock<Mutex<HashMap<usize, &'static str>>> = LazyLock::new(Default::default);
const EVENT: &str = "simba_event";
pub(crate) const MEMBER_LIST: &str = "simba_member_list";
pub(crate) const HOLDER_LIST: &str = "simba_holder_list";
pub(crate) const WAITER_LIST: &str = "simba_waiter_list";

/// Hands a result box to C, tracked as `kind` for its free function.
pub(crate) fn hand_out<B>(b: B, kind: &'static str) -> *mut B {
    let p = Box::into_raw(Box::new(b));
    locked(&RESULTS).insert(p as usize, kind);
    p
}

/// The pointer C sees for a list's items: NULL when there are none.
pub(crate) fn items_ptr<T>(items: &[T]) -> *const T {
    if items.is_empty() {
        std::ptr::null()
    } else {
        items.as_ptr()
    }
}

thread_local! {
    /// The events being passed to callbacks on this thread now (valid during the call).
    pub(crate) static CALLBACK_EVENTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The members of a list with the metadata bytes they point into.
#[derive(Default)]
pub(crate) struct Members {
    items: Vec<simba_member>,
    _metadata: Vec<Vec<u8>>,
}

impl Members {
    pub(crate) fn new(members: &[Member]) -> Members {
        let metadata: Vec<Vec<u8>> = members
            .iter()
            .map(|m| {
                let mut v = m.metadata.as_str().as_bytes().to_vec();
                v.push(0);
                v
            })
            .collect();
        let items = members
            .iter()
            .zip(&metadata)
            .map(|(m, md)| {
                let mut session = [0; SIMBA_SESSION_ID_LEN];
                fill(&mut session, m.session.as_str());
                simba_member {
                    session,
                    metadata: md.as_ptr().cast(),
                    metadata_len: md.len() - 1,
                }
            })
            .collect();
        Members {
            items,
            _metadata: metadata,
        }
    }

    pub(crate) fn list(&self) -> simba_member_list {
        simba_member_list {
            items: items_ptr(&self.items),
            len: self.items.len(),
        }
    }
}

/// An event with the storage its lists point into; `c` first, so a pointer to the box is a
/// pointer to the C struct.
#[repr(C)]
pub(crate) struct EventBox {
    c: simba_event,
    storage: [Members; 3],
    /// The term value (`LEADER_CHANGED`), read by [`simba_event_value`].
    pub(crate) value: String,
}

pub(crate) fn reason(r: &LossReason) -> simba_loss_reason {
    use simba_loss_reason::*;
    match r {
        LossReason::SessionExpired => SIMBA_LOSS_SESSION_EXPIRED,
        LossReason::Expired => SIMBA_LOSS_EXPIRED,
        LossReason::Missing => SIMBA_LOSS_MISSING,
        LossReason::Resigned => SIMBA_LOSS_RESIGNED,
        LossReason::Closed => SIMBA_LOSS_CLOSED,
        _ => SIMBA_LOSS_OTHER,
    }
}

pub(crate) fn convert(e: &Event) -> EventBox {
    use simba_event_kind::*;
    let empty = simba_member_list {
        items: std::ptr::null(),
        len: 0,
    };
    let mut c = simba_event {
        kind: SIMBA_EVENT_OTHER,
        reason: simba_loss_reason::SIMBA_LOSS_NONE,
        session: [0; SIMBA_SESSION_ID_LEN],
        new_session: [0; SIMBA_SESSION_ID_LEN],
        name: [0; SIMBA_NAME_LEN],
        token: 0,
        remaining_ms: 0,
        members: empty,
        joined: empty,
        left: empty,
    };
    let mut storage: [Members; 3] = Default::default();
    let mut value = String::new();
    match e {
        Event::Jeopardy { session } => {
            c.kind = SIMBA_EVENT_JEOPARDY;
            fill(&mut c.session, session.as_str());
        }
        Event::Recovered { session } => {
            c.kind = SIMBA_EVENT_RECOVERED;
            fill(&mut c.session, session.as_str());
        }
        Event::SessionExpired { session } => {
            c.kind = SIMBA_EVENT_SESSION_EXPIRED;
            fill(&mut c.session, session.as_str());
        }
        Event::SessionReopened { old, new } => {
            c.kind = SIMBA_EVENT_SESSION_REOPENED;
            fill(&mut c.session, old.as_str());
            fill(&mut c.new_session, new.as_str());
        }
        Event::Closed { session } => {
            c.kind = SIMBA_EVENT_CLOSED;
            fill(&mut c.session, session.as_str());
        }
        Event::Elected { term } | Event::Revoked { term, .. } | Event::LockLost { term, .. } => {
            c.kind = match e {
                Event::Elected { .. } => SIMBA_EVENT_ELECTED,
                Event::Revoked { .. } => SIMBA_EVENT_REVOKED,
                _ => SIMBA_EVENT_LOCK_LOST,
            };
            if let Event::Revoked { reason: r, .. } | Event::LockLost { reason: r, .. } = e {
                c.reason = reason(r);
            }
            fill(&mut c.name, term.name.as_str());
            c.token = term.token.get();
            c.remaining_ms = millis(term.remaining);
        }
        Event::LeaderChanged { name, owner } => {
            c.kind = SIMBA_EVENT_LEADER_CHANGED;
            fill(&mut c.name, name.as_str());
            if let Some(o) = owner {
                fill(&mut c.session, o.session.as_str());
                c.token = o.token.get();
                c.remaining_ms = millis(o.remaining);
                value.clone_from(&o.value);
            }
        }
        Event::TokenRegressed { term, seen } => {
            c.kind = SIMBA_EVENT_TOKEN_REGRESSED;
            fill(&mut c.name, term.name.as_str());
            c.token = term.token.get();
            c.remaining_ms = millis(term.remaining);
            value = seen.get().to_string();
        }
        Event::MembersChanged {
            group,
            members,
            joined,
            left,
        } => {
            c.kind = SIMBA_EVENT_MEMBERS_CHANGED;
            fill(&mut c.name, group.as_str());
            storage = [
                Members::new(members),
                Members::new(joined),
                Members::new(left),
            ];
            c.members = storage[0].list();
            c.joined = storage[1].list();
            c.left = storage[2].list();
        }
        _ => {}
    }
    EventBox { c, storage, value }
}

/// The body of every `*_next_event` function: `*out_event` is set to NULL first (when
/// `out_event` is not NULL), so it is NULL on every failure, a bad handle included; then
/// `queue` looks the handle's queue up and the next event is waited for.
pub(crate) fn event_call(
    out_event: *mut *mut simba_event,
    timeout_ms: u64,
    queue: impl FnOnce() -> R<Receiver<Event>>,
) -> simba_status {
    ffi(|| {
        put_opt(out_event, std::ptr::null_mut());
        let rx = queue()?;
        next_event(&rx, timeout_ms, out_event)
    })
}

/// Waits for the next event on `rx` and hands it out as a heap event.
fn next_event(rx: &Receiver<Event>, timeout_ms: u64, out_event: *mut *mut simba_event) -> R {
    let out_event = out(out_event, "out_event")?;
    put(out_event, std::ptr::null_mut());
    let event = rx
        .recv_timeout(Duration::from_millis(timeout_ms))
        .map_err(|e| match e {
            RecvTimeoutError::Timeout => {
                Fail::new(SIMBA_TIMEOUT, format!("no event within {timeout_ms} ms"))
            }
            RecvTimeoutError::Disconnected => Fail::new(SIMBA_CLOSED, "the event queue was closed"),
        })?;
    put(out_event, hand_out(convert(&event), EVENT).cast());
    Ok(())
}

/// Checks that `p` is a live plain result of kind `what` in `table`.
fn live_result<C>(table: &HashMap<usize, &'static str>, p: *const C, what: &str) -> R {
    match table.get(&(p as usize)) {
        Some(&kind) if kind == what => Ok(()),
        Some(&kind) => Err(Fail::new(
            SIMBA_INVALID_HANDLE,
            format!("{p:p} is a {kind}, not a {what}"),
        )),
        None => Err(Fail::new(
            SIMBA_INVALID_HANDLE,
            format!("{p:p} is not a live {what} (already freed, or not from this library)"),
        )),
    }
}

/// Frees a plain result allocated as `Box<B>` if it is a live one of kind `what`.
pub(crate) fn free_result<B, C>(p: *mut C, what: &str) -> R {
    if p.is_null() {
        return Ok(());
    }
    {
        let mut table = locked(&RESULTS);
        live_result(&table, p, what)?;
        table.remove(&(p as usize));
    }
    // SAFETY: the pointer was made by `Box::into_raw` of a `B` and was live in RESULTS.
    drop(unsafe { Box::from_raw(p.cast::<B>()) });
    Ok(())
}

/// Frees an event from a `*_next_event` function. NULL is ignored; a pointer that is not a
/// live event (freed already, unless its memory was reused by a newer event) gives
/// `SIMBA_INVALID_HANDLE`. Reading the event (or its strings and member lists) after this
/// is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn simba_event_free(event: *mut simba_event) -> simba_status {
    ffi(|| free_result::<EventBox, _>(event, EVENT))
}

/// The term value an event carries, copied into `buf` as for [`simba_election_value`]
/// (`buf` NULL with `buf_len` 0: not copied; `out_value_len` may be NULL): for
/// `LEADER_CHANGED`, the new holder's value (a `LEADER_CHANGED` with an unchanged token
/// reports a new value set by [`simba_election_set_value`] or [`simba_lock_set_value`]);
/// for `TOKEN_REGRESSED`, the token seen before, in decimal; empty for every other kind, or when the holder set none or the lease became free.
/// `event` is one from a `*_next_event` function, not freed yet, or, inside a callback, the
/// event that callback was given (on its thread, during the call); any other pointer gives
/// `SIMBA_INVALID_HANDLE` (a freed event only unless its memory was reused by a newer event:
/// do not call it on freed events).
#[no_mangle]
pub unsafe extern "C" fn simba_event_value(
    event: *const simba_event,
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> simba_status {
    ffi(|| {
        if event.is_null() {
            return Err(Fail::new(SIMBA_NULL_ARGUMENT, "the event is NULL"));
        }
        let key = event as usize;
        let copy = || {
            // SAFETY: `event` points to a live `EventBox` (checked by the caller of `copy`):
            // `#[repr(C)]` with the `simba_event` first, and the pointer was made from the
            // whole box (`Box::into_raw` in `next_event`, `addr_of!` of the box passed to a
            // callback), so it may read the box's other fields.
            let value = unsafe { &(*event.cast::<EventBox>()).value };
            check_value_buf(value, buf, buf_len, out_value_len)?;
            put_value(value, buf, out_value_len);
            Ok(())
        };
        if CALLBACK_EVENTS.with(|c| c.borrow().contains(&key)) {
            return copy();
        }
        // Held while reading, so no other thread frees the event meanwhile.
        let table = locked(&RESULTS);
        live_result(&table, event, EVENT)?;
        copy()
    })
}
