//! The TCK and backend-specific tests on MySQL/MariaDB (`SIMBA_MYSQL_URL`, default
//! `mysql://simba:simba@127.0.0.1:3306/test`).

mod sql_common;

use sql_common::isolated;

fn url() -> String {
    std::env::var("SIMBA_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
}

simba_lease::tck_suite!(|| isolated(&url()));
