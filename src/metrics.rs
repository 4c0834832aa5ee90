//! Engine figures published through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`); without the feature every function here is empty.
//!
//! Install any `metrics` recorder (e.g. `metrics-exporter-prometheus`) and the sessions of
//! the process publish:
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `simba_keep_alive_seconds` | histogram | `backend` | round trip of a successful keep-alive |
//! | `simba_keep_alive_time_left_seconds` | histogram | `backend` | time the session had left (local deadline) when the keep-alive was sent |
//! | `simba_keep_alive_slack_seconds` | histogram | `backend` | time left until the local deadline once the reply was applied |
//! | `simba_keep_alive_failures_total` | counter | `backend` | keep-alives that failed (the session expiring excluded) |
//! | `simba_session_events_total` | counter | `event` (`jeopardy`, `recovered`, `expired`, `reopened`, `closed`) | session state changes |
//! | `simba_terms_lost_total` | counter | `kind` (`lock`, `election`), `reason` | terms lost before their holder let go |
//! | `simba_lock_wait_seconds` | histogram | | from a `lock` call to its guard (successful calls) |
//! | `simba_lock_hold_seconds` | histogram | | from a guard's acquisition to its unlock or drop |
//! | `simba_leader` | gauge | `name` | 1 while this process's election for `name` holds a term, else 0 |
//!
//! The `name` label of `simba_leader` is the election's lease name: keep the number of
//! election names bounded.
