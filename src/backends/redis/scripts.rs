//! The Lua scripts of `lua/`, embedded at build time, each prefixed with `lua/common.lua`.

use super::scripting::LuaScript;
use std::sync::OnceLock;

const COMMON: &str = include_str!("../../../lua/common.lua");

/// `body` after the shared helpers; a first line of script flags (`#!lua flags=…`) stays
/// first, where Redis reads it.
fn with_common(body: &str) -> String {
    match body.strip_prefix("#!") {
        Some(_) => {
            let (flags, rest) = body.split_once('\n').unwrap_or((body, ""));
            format!("{flags}\n{COMMON}\n{rest}")
        }
        None => format!("{COMMON}\n{body}"),
    }
}

macro_rules! scripts {
    ($($field:ident),* $(,)?) => {
        /// Every script of the backend.
        pub(crate) struct Scripts {
            $(pub(crate) $field: LuaScript,)*
        }

        pub(crate) fn scripts() -> &'static Scripts {
            static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
            SCRIPTS.get_or_init(|| Scripts {
                $($field: LuaScript::new(
                    stringify!($field),
                    with_common(include_str!(concat!("../../../lua/", stringify!($field), ".lua"))),
                ),)*
            })
        }
    };
}

scripts!(
    open,
    keep_alive,
    keep_alive_session,
    keep_alive_slot,
    keep_alive_anchor,
    unindex,
    acquire,
    acquire_session,
    acquire_lease,
    acquire_queued,
    acquire_lease_queued,
    leave_queue,
    queue,
    release,
    owner,
    set_value,
    join,
    join_group,
    leave,
    members,
    session_metadata,
    session_ttl,
    close,
    close_session,
    close_slot,
    purge_group,
    ping,
    claim_job,
    finish_job,
    rw_acquire,
    rw_release,
    rw_leave,
    rw_state,
);
