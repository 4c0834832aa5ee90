//! The Lua scripts themselves: reloaded after `SCRIPT FLUSH` on every layout, and the shared
//! helpers' rounding of remaining times.

use crate::common::*;
use simba_lease::backends::redis::{LuaScript, Role};
use simba_lease::spi::LeaseBackend;
use simba_lease::LeaseName;
use std::sync::Arc;
use std::time::Duration;

fn scripts_are_reloaded_after_script_flush(make: fn() -> Arc<Isolated>) {
    let b = make();
    let s = open(&*b, Duration::from_secs(30));
    let names: Vec<LeaseName> = (0..8)
        .map(|i| LeaseName::new(format!("flush-{i}")).unwrap())
        .collect();
    for n in &names {
        acquired(&*b, &s, n);
    }
    b.command(&["SCRIPT", "FLUSH"]);
    // The keep-alive's scripts (batched per node on a cluster) are loaded again.
    let ka = b.keep_alive(&s, Duration::from_secs(30)).unwrap();
    assert_eq!(ka.leases.len(), names.len(), "{ka:?}");
    b.command(&["SCRIPT", "FLUSH"]);
    assert!(b.owner(&names[0]).unwrap().is_some());
    b.command(&["SCRIPT", "FLUSH"]);
    b.close_session(&s).unwrap();
    assert!(b.owner(&names[1]).unwrap().is_none());
}

#[test]
fn scripts_are_reloaded_after_script_flush_standalone() {
    scripts_are_reloaded_after_script_flush(standalone);
}

#[test]
fn scripts_are_reloaded_after_script_flush_cluster() {
    scripts_are_reloaded_after_script_flush(cluster);
}

#[test]
fn scripts_are_reloaded_after_script_flush_routed_standalone() {
    scripts_are_reloaded_after_script_flush(routed_standalone);
}

/// Issue 9.6: the shared Lua helpers round remaining times down and new expiries up, so a
/// reported remaining time never exceeds what the server has left (at sub-ms precision).
#[test]
fn lua_remaining_times_round_down() {
    let b = standalone();
    let key = format!("{}:lease:{{rounding}}", b.prefix);
    // `now` is 999.4 ms: the whole ms begun is 999, the next 1000.
    let check = LuaScript::new(
        "rounding",
        format!(
            "{}\n{}",
            include_str!("../../lua/common.lua"),
            r#"
redis.call('HSET', KEYS[1], 'session', 'a', 'token', '7', 'expires', '1000')
local held = lease_acquire(KEYS[1], 'a', 5000, 999, 1000)
redis.call('HSET', KEYS[1], 'session', '', 'expires', '0')
local new = lease_acquire(KEYS[1], 'b', 5000, 999, 1000)
local expires = redis.call('HGET', KEYS[1], 'expires')
return {held[1], held[3], new[3], expires}
"#
        ),
    );
    let r = b
        .inner
        .scripting()
        .eval(Role::Other, &check, &[key], &[])
        .unwrap();
    let v: Vec<i64> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_int().unwrap())
        .collect();
    // Held with 0.6 ms left: 0 whole ms (not 1); a new 5 s term ends at 1000 + 5000.
    assert_eq!(v, vec![1, 0, 5000, 6000]);
}
