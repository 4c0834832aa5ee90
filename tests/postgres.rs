//! The TCK and backend-specific tests on PostgreSQL (`SIMBA_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).

mod sql_common;

use sql_common::isolated;

fn url() -> String {
    std::env::var("SIMBA_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

simba_lease::tck_suite!(|| isolated(&url()));
