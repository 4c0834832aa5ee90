//! The Lua scripts of `lua/`, embedded at build time, each prefixed with `lua/common.lua`.

use super::scripting::LuaScript;
use std::sync::OnceLock;

const COMMON: &str = include_str!("../../../lua/common.lua");

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
                    format!(
                        "{COMMON}\n{}",
                        include_str!(concat!("../../../lua/", stringify!($field), ".lua"))
                    ),
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
    acquire,
    acquire_session,
    acquire_lease,
    acquire_queued,
    acquire_lease_queued,
    leave_queue,
    queue,
    release,
    owner,
    join,
    join_group,
    leave,
    members,
    session_metadata,
    close,
    close_session,
    close_slot,
    purge_group,
    ping,
);
