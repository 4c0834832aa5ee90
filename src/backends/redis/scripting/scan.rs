//! `SCAN` of one node within a budget: a server that never returns the cursor to 0 must not
//! keep the caller forever.

use super::ConnectOptions;
use crate::error::Error;
use std::time::{Duration, Instant};

/// How many query timeouts a whole [`RedisScripting::scan`](super::RedisScripting::scan) may
/// take: a server that never returns the cursor to 0 must not keep the caller forever.
const SCAN_BUDGET: u32 = 4;

/// The bound of one whole scan.
pub(super) fn scan_budget(opts: &ConnectOptions) -> Duration {
    opts.query_timeout.saturating_mul(SCAN_BUDGET)
}

/// The error of a scan that did not finish by its deadline.
pub(super) fn scan_timeout(opts: &ConnectOptions) -> Error {
    Error::Timeout {
        operation: "scanning keys (the cursor did not come back)",
        after: scan_budget(opts),
        source: None,
    }
}

/// `SCAN`s one node for `pattern` into `out` until the cursor comes back or `out` holds
/// `limit` keys (then `true`), or `deadline` passed (then `false`).
pub(super) fn scan_node(
    con: &mut dyn redis::ConnectionLike,
    pattern: &str,
    limit: usize,
    out: &mut Vec<String>,
    deadline: Instant,
) -> redis::RedisResult<bool> {
    let mut cursor = 0u64;
    loop {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        out.extend(keys);
        cursor = next;
        if cursor == 0 || out.len() >= limit {
            return Ok(true);
        }
    }
}
