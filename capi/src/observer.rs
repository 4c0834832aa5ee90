//! Observers: watching a lease's holder without being a candidate.

use crate::args::{check_value_buf, fill, millis, out, put, put_value, text};
use crate::handles::{free, get, register};
use crate::objects::{ObserverObj, SessionObj};
use crate::results::event_call;
use crate::status::{ffi, R};
use crate::types::{
    simba_event, simba_observer, simba_owner, simba_session, simba_status, SIMBA_SESSION_ID_LEN,
};
use lease::Owner;
use std::ffi::c_char;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{election::simba_election_value, session::simba_session_next_event};

/// Observes the lease `name` (NUL-terminated UTF-8) without being a candidate: events
/// `LEADER_CHANGED`, first for the current holder, then at every change.
#[no_mangle]
pub unsafe extern "C" fn simba_session_observe(
    session: *const simba_session,
    name: *const c_char,
    out_observer: *mut *mut simba_observer,
) -> simba_status {
    ffi(|| {
        let o = out(out_observer, "out_observer")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let obs = s.session.observe(text(name, "name")?)?;
        put(o, register(ObserverObj(obs))?);
        Ok(())
    })
}

/// Reads the lease's current holder from the backend (one backend call).
#[no_mangle]
pub unsafe extern "C" fn simba_observer_leader(
    observer: *const simba_observer,
    out_owner: *mut simba_owner,
) -> simba_status {
    ffi(|| {
        let o = out(out_owner, "out_owner")?;
        let owner = get::<ObserverObj, _>(observer)?.0.leader()?;
        put_owner(
            o,
            owner.as_ref(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
        )
    })
}

/// Writes an owner (and its value, see [`check_value_buf`]) out, all or nothing.
pub(crate) fn put_owner(
    o: *mut simba_owner,
    owner: Option<&Owner>,
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> R {
    let value = owner.map_or("", |o| o.value.as_str());
    check_value_buf(value, buf, buf_len, out_value_len)?;
    let mut c = simba_owner {
        held: false,
        token: 0,
        remaining_ms: 0,
        session: [0; SIMBA_SESSION_ID_LEN],
    };
    if let Some(owner) = owner {
        c.held = true;
        c.token = owner.token.get();
        c.remaining_ms = millis(owner.remaining);
        fill(&mut c.session, owner.session.as_str());
    }
    put(o, c);
    put_value(value, buf, out_value_len);
    Ok(())
}

/// [`simba_observer_leader`] with the holder's term value (one backend read for both):
/// copied into `buf` as for [`simba_election_value`] (`buf` NULL with `buf_len` 0: not
/// copied; `out_value_len` may be NULL); empty when the holder set none or nobody holds the
/// lease.
#[no_mangle]
pub unsafe extern "C" fn simba_observer_leader_value(
    observer: *const simba_observer,
    out_owner: *mut simba_owner,
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> simba_status {
    ffi(|| {
        let o = out(out_owner, "out_owner")?;
        let owner = get::<ObserverObj, _>(observer)?.0.leader()?;
        put_owner(o, owner.as_ref(), buf, buf_len, out_value_len)
    })
}

/// Waits up to `timeout_ms` for the observer's next `LEADER_CHANGED`; see
/// [`simba_session_next_event`] for the results.
#[no_mangle]
pub unsafe extern "C" fn simba_observer_next_event(
    observer: *const simba_observer,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    event_call(out_event, timeout_ms, || {
        Ok(get::<ObserverObj, _>(observer)?.0.events().clone())
    })
}

/// Frees the observer (stops the watch).
#[no_mangle]
pub unsafe extern "C" fn simba_observer_free(observer: *mut simba_observer) -> simba_status {
    ffi(|| free::<ObserverObj, _>(observer))
}
