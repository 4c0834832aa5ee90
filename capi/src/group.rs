//! Groups: views, memberships, member lists and membership events.

use crate::args::{out, put, text};
use crate::handles::{free, get, locked, lookup, register};
use crate::objects::{GroupObj, MembershipObj, SessionObj};
use crate::results::{event_call, free_result, hand_out, Members, MEMBER_LIST};
use crate::status::{ffi, Fail};
use crate::types::simba_status::*;
use crate::types::{
    simba_event, simba_group, simba_member_list, simba_membership, simba_session, simba_status,
};
use lease::Member;
use std::ffi::c_char;
use std::sync::Mutex;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::session::simba_session_next_event;

/// A view of the group `name` (NUL-terminated UTF-8; no backend call).
#[no_mangle]
pub unsafe extern "C" fn simba_session_group(
    session: *const simba_session,
    name: *const c_char,
    out_group: *mut *mut simba_group,
) -> simba_status {
    ffi(|| {
        let o = out(out_group, "out_group")?;
        put(o, std::ptr::null_mut());
        let s = get::<SessionObj, _>(session)?;
        let group = s.session.group(text(name, "name")?)?;
        put(
            o,
            register(GroupObj {
                group,
                watch: Mutex::new(None),
                starting: Mutex::new(()),
            })?,
        );
        Ok(())
    })
}

/// Joins the group with this session; `*out_membership` lasts until left or freed.
#[no_mangle]
pub unsafe extern "C" fn simba_group_join(
    group: *const simba_group,
    out_membership: *mut *mut simba_membership,
) -> simba_status {
    ffi(|| {
        let o = out(out_membership, "out_membership")?;
        put(o, std::ptr::null_mut());
        let m = get::<GroupObj, _>(group)?.group.join()?;
        put(o, register(MembershipObj(Mutex::new(Some(m))))?);
        Ok(())
    })
}

/// Leaves the group with this session (whatever memberships say); `*out_was_member`
/// (may be NULL) tells whether it was one.
#[no_mangle]
pub unsafe extern "C" fn simba_group_leave(
    group: *const simba_group,
    out_was_member: *mut bool,
) -> simba_status {
    ffi(|| {
        let was = get::<GroupObj, _>(group)?.group.leave()?;
        if !out_was_member.is_null() {
            put(out_was_member, was);
        }
        Ok(())
    })
}

/// Reads the live members from the backend; `*out_members` is a list to free with
/// [`simba_member_list_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_group_members(
    group: *const simba_group,
    out_members: *mut *mut simba_member_list,
) -> simba_status {
    ffi(|| {
        let o = out(out_members, "out_members")?;
        put(o, std::ptr::null_mut());
        let members = get::<GroupObj, _>(group)?.group.members()?;
        put(o, member_list(&members));
        Ok(())
    })
}

/// A heap member list for C, tracked for [`simba_member_list_free`].
pub(crate) fn member_list(members: &[Member]) -> *mut simba_member_list {
    let storage = Members::new(members);
    let b = MembersBox {
        c: storage.list(),
        _storage: storage,
    };
    hand_out(b, MEMBER_LIST).cast()
}

#[repr(C)]
struct MembersBox {
    c: simba_member_list,
    _storage: Members,
}

/// Frees a list from [`simba_group_members`]. NULL is ignored; a list freed already gives
/// `SIMBA_INVALID_HANDLE` unless its memory was reused by a newer list. Reading the list (its items or their metadata) after this is
/// undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn simba_member_list_free(list: *mut simba_member_list) -> simba_status {
    ffi(|| free_result::<MembersBox, _>(list, MEMBER_LIST))
}

/// Waits up to `timeout_ms` for the group's next `MEMBERS_CHANGED` (the first call starts a
/// watch whose first event lists the members then); see [`simba_session_next_event`].
#[no_mangle]
pub unsafe extern "C" fn simba_group_next_event(
    group: *const simba_group,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    event_call(out_event, timeout_ms, || {
        let g = get::<GroupObj, _>(group)?;
        match g.watch_rx(timeout_ms)? {
            Some(rx) => Ok(rx),
            None => {
                // Another thread is starting the watch and this call may not wait for it.
                out(out_event, "out_event")?;
                Err(Fail::new(
                    SIMBA_TIMEOUT,
                    format!("no event within {timeout_ms} ms"),
                ))
            }
        }
    })
}

/// Frees the group view (stops its watch; memberships stay).
#[no_mangle]
pub unsafe extern "C" fn simba_group_free(group: *mut simba_group) -> simba_status {
    ffi(|| free::<GroupObj, _>(group))
}

/// Leaves now (unless another membership of this session holds the group), reporting a
/// backend failure; `*out_was_member` (may be NULL) tells whether this left the group. A
/// second leave gives `SIMBA_CLOSED`. The handle stays allocated: free it with
/// [`simba_membership_free`].
#[no_mangle]
pub unsafe extern "C" fn simba_membership_leave(
    membership: *const simba_membership,
    out_was_member: *mut bool,
) -> simba_status {
    ffi(|| {
        let m = get::<MembershipObj, _>(membership)?;
        let taken = locked(&m.0).take();
        let Some(taken) = taken else {
            return Err(Fail::new(SIMBA_CLOSED, "this membership already left"));
        };
        let was = taken.leave()?;
        if !out_was_member.is_null() {
            put(out_was_member, was);
        }
        Ok(())
    })
}

/// Frees the membership; if it did not leave yet, it leaves from the session's work thread.
#[no_mangle]
pub unsafe extern "C" fn simba_membership_free(membership: *mut simba_membership) -> simba_status {
    ffi(|| {
        let m = lookup::<MembershipObj, _>(membership, true)?;
        drop(locked(&m.0).take());
        Ok(())
    })
}
