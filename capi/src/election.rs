//! Elections: candidates, waiting to be elected, terms, term values, resigning.

use crate::args::{check_value_buf, millis, out, put, put_opt, put_value, text, value_arg};
use crate::cancel::{cancel_of, deadline};
use crate::group::member_list;
use crate::handles::{free, get, register};
use crate::objects::{ElectionObj, SessionObj};
use crate::observer::put_owner;
use crate::results::event_call;
use crate::status::ffi;
use crate::types::{
    simba_cancel, simba_election, simba_event, simba_member_list, simba_owner, simba_session,
    simba_status,
};
use lease::Error;
use std::ffi::c_char;
use std::time::Duration;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{
    group::simba_member_list_free, lock::simba_lock_term, observer::simba_observer_leader,
    session::simba_session_next_event,
};

/// Enters the election `name` (NUL-terminated UTF-8) as a candidate; it campaigns until it
/// resigns or is freed. `*out_election` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_session_election(
    session: *const simba_session,
    name: *const c_char,
    out_election: *mut *mut simba_election,
) -> simba_status {
    ffi(|| {
        let o = out(out_election, "out_election")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let e = s.session.election(text(name, "name")?)?;
        put(o, register(ElectionObj(e))?);
        Ok(())
    })
}

/// Like [`simba_session_election`], with the value every term this candidate wins starts
/// with (see [`simba_election_set_value`]): `value_len` bytes of UTF-8 at `value`, no NUL
/// needed (NULL allowed when `value_len` is 0, for none), at most `SIMBA_MAX_VALUE_LEN`
/// (`SIMBA_INVALID_ARGUMENT` if longer). Not kept after the call.
#[no_mangle]
pub unsafe extern "C" fn simba_session_election_with_value(
    session: *const simba_session,
    name: *const c_char,
    value: *const c_char,
    value_len: usize,
    out_election: *mut *mut simba_election,
) -> simba_status {
    ffi(|| {
        let o = out(out_election, "out_election")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let name = text(name, "name")?;
        let value = value_arg(value, value_len)?;
        let e = s.session.election_with_value(name, value)?;
        put(o, register(ElectionObj(e))?);
        Ok(())
    })
}

/// Waits until this candidate is elected or `timeout_ms` passes (`SIMBA_TIMEOUT`);
/// `*out_token` is the term's fencing token.
#[no_mangle]
pub unsafe extern "C" fn simba_election_wait_elected(
    election: *const simba_election,
    timeout_ms: u64,
    out_token: *mut u64,
) -> simba_status {
    ffi(|| {
        let o = out(out_token, "out_token")?;
        let e = get::<ElectionObj, _>(election)?;
        let term = e.0.wait_elected(Duration::from_millis(timeout_ms))?;
        put(o, term.token.get());
        Ok(())
    })
}

/// Waits until this candidate is elected, `timeout_ms` passes (`SIMBA_TIMEOUT`;
/// `SIMBA_FOREVER`: no limit) or `cancel` is fired by any thread (`SIMBA_CANCELLED`, at once
/// if it was fired before the call); `*out_token` is the term's fencing token. A cancelled
/// candidate keeps campaigning. `cancel` NULL gives `SIMBA_NULL_ARGUMENT` (use
/// [`simba_election_wait_elected`] for no token).
#[no_mangle]
pub unsafe extern "C" fn simba_election_wait_elected_cancellable(
    election: *const simba_election,
    timeout_ms: u64,
    cancel: *const simba_cancel,
    out_token: *mut u64,
) -> simba_status {
    ffi(|| {
        let o = out(out_token, "out_token")?;
        let e = get::<ElectionObj, _>(election)?;
        let cancel = cancel_of(cancel)?;
        let term =
            e.0.wait_elected_cancellable(deadline(timeout_ms), &cancel)?;
        put(o, term.token.get());
        Ok(())
    })
}

/// Whether this candidate leads now.
#[no_mangle]
pub unsafe extern "C" fn simba_election_is_leader(
    election: *const simba_election,
    out_leader: *mut bool,
) -> simba_status {
    ffi(|| {
        let o = out(out_leader, "out_leader")?;
        put(o, get::<ElectionObj, _>(election)?.0.is_leader());
        Ok(())
    })
}

/// The fencing token of the term this candidate holds now, else `SIMBA_NOT_LEADER`: call it
/// before acting as the leader.
#[no_mangle]
pub unsafe extern "C" fn simba_election_check(
    election: *const simba_election,
    out_token: *mut u64,
) -> simba_status {
    ffi(|| {
        let o = out(out_token, "out_token")?;
        let term = get::<ElectionObj, _>(election)?.0.check()?;
        put(o, term.token.get());
        Ok(())
    })
}

/// The term this candidate holds now: `*out_token` its fencing token and `*out_valid_ms`
/// how long it stays valid from now if no keep-alive succeeds meanwhile (as for
/// [`simba_lock_term`]). `SIMBA_NOT_LEADER` if it does not lead now. Either out-pointer may
/// be NULL.
#[no_mangle]
pub unsafe extern "C" fn simba_election_term(
    election: *const simba_election,
    out_token: *mut u64,
    out_valid_ms: *mut u64,
) -> simba_status {
    ffi(|| {
        let e = &get::<ElectionObj, _>(election)?.0;
        // Token and validity of one term, read together.
        let (term, valid) = e.valid_term().ok_or_else(|| Error::NotLeader {
            name: e.name().clone(),
        })?;
        put_opt(out_token, term.token.get());
        put_opt(out_valid_ms, millis(valid));
        Ok(())
    })
}

/// Sets the value of this candidate's terms (`value_len` bytes of UTF-8 at `value`, no NUL
/// needed; NULL allowed when `value_len` is 0, which clears it; at most
/// `SIMBA_MAX_VALUE_LEN`, else `SIMBA_INVALID_ARGUMENT`): if it leads now, the current
/// term's on the backend before returning (one backend call; observers get a
/// `LEADER_CHANGED` with the same token), and every term it wins later from the start.
/// `SIMBA_LEASE_LOST` if the backend found the term gone (the value still applies to the
/// next term). Not kept after the call.
#[no_mangle]
pub unsafe extern "C" fn simba_election_set_value(
    election: *const simba_election,
    value: *const c_char,
    value_len: usize,
) -> simba_status {
    ffi(|| {
        let e = get::<ElectionObj, _>(election)?;
        let value = value_arg(value, value_len)?;
        Ok(e.0.set_value(value)?)
    })
}

/// The value this candidate gives its terms (empty for none; no backend call), copied into
/// `buf` of `buf_len` bytes with a NUL after it (`SIMBA_VALUE_LEN` always suffices; a
/// smaller buffer that does not fit it gives `SIMBA_INVALID_ARGUMENT`, leaves `buf`
/// untouched and still writes the length, so the caller can retry with length + 1 bytes),
/// its length in bytes without the NUL in `*out_value_len`. `buf` may be NULL with `buf_len` 0 to learn only
/// the length; `out_value_len` may be NULL. A value may contain NUL bytes: use the length.
#[no_mangle]
pub unsafe extern "C" fn simba_election_value(
    election: *const simba_election,
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> simba_status {
    ffi(|| {
        let value = get::<ElectionObj, _>(election)?.0.value();
        check_value_buf(&value, buf, buf_len, out_value_len)?;
        put_value(&value, buf, out_value_len);
        Ok(())
    })
}

/// The election's current leader, of any session, read from the backend (one backend
/// call): `*out_owner` as [`simba_observer_leader`] gives it (`held` false while nobody
/// leads), and its term's value copied into `buf` as for [`simba_election_value`] (`buf`
/// NULL with `buf_len` 0: not copied; `out_value_len` may be NULL). The value is empty
/// when the leader set none or nobody leads; owner and value come from one read.
#[no_mangle]
pub unsafe extern "C" fn simba_election_leader(
    election: *const simba_election,
    out_owner: *mut simba_owner,
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> simba_status {
    ffi(|| {
        let o = out(out_owner, "out_owner")?;
        let owner = get::<ElectionObj, _>(election)?.0.leader()?;
        put_owner(o, owner.as_ref(), buf, buf_len, out_value_len)
    })
}

/// The live sessions campaigning in this election (the leader among them), with their
/// session metadata, sorted by session id, read from the backend (one backend call);
/// `*out_members` is a list to free with [`simba_member_list_free`]. A candidate shows from
/// its entry until it resigns, is freed or its session ends (a free's leave runs on the
/// session's work thread, so it shows after a short delay); a session with several
/// candidates for the name counts once.
#[no_mangle]
pub unsafe extern "C" fn simba_election_candidates(
    election: *const simba_election,
    out_members: *mut *mut simba_member_list,
) -> simba_status {
    ffi(|| {
        let o = out(out_members, "out_members")?;
        put(o, std::ptr::null_mut());
        let members = get::<ElectionObj, _>(election)?.0.candidates()?;
        put(o, member_list(&members));
        Ok(())
    })
}

/// Leaves the election (a leader releases its term now; event `REVOKED`, reason
/// `RESIGNED`). Idempotent; `SIMBA_LEASE_LOST` if the last term was already lost. The
/// handle stays usable: [`simba_election_campaign`] enters again.
#[no_mangle]
pub unsafe extern "C" fn simba_election_resign(election: *const simba_election) -> simba_status {
    ffi(|| Ok(get::<ElectionObj, _>(election)?.0.resign()?))
}

/// Enters the election again after a resign (nothing to do if it still campaigns).
#[no_mangle]
pub unsafe extern "C" fn simba_election_campaign(election: *const simba_election) -> simba_status {
    ffi(|| Ok(get::<ElectionObj, _>(election)?.0.campaign()?))
}

/// Waits up to `timeout_ms` for this candidate's next event (`ELECTED`, `REVOKED`); see
/// [`simba_session_next_event`] for the results.
#[no_mangle]
pub unsafe extern "C" fn simba_election_next_event(
    election: *const simba_election,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    event_call(out_event, timeout_ms, || {
        Ok(get::<ElectionObj, _>(election)?.0.events().clone())
    })
}

/// Frees the election handle; a leader's term ends at once and is released from the
/// session's work thread.
#[no_mangle]
pub unsafe extern "C" fn simba_election_free(election: *mut simba_election) -> simba_status {
    ffi(|| free::<ElectionObj, _>(election))
}
