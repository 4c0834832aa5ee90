//! The TCK and backend-specific tests on MySQL/MariaDB (`SIMBA_MYSQL_URL`, default
//! `mysql://simba:simba@127.0.0.1:3306/test`).

mod sql_common;

use sql_common::isolated;

fn url() -> String {
    std::env::var("SIMBA_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
}

fn isolated_swept() -> std::sync::Arc<sql_common::Isolated> {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        let tables: Vec<String> = raw()
            .query(
                "SELECT table_name FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name LIKE 't%simba_session'",
            )
            .unwrap_or_default();
        sql_common::sweep(&url(), tables);
    });
    isolated(&url())
}

simba_lease::tck_suite!(|| isolated_swept());

use mysql::prelude::Queryable;
use simba_lease::backends::SqlBackend;
use simba_lease::spi::LeaseBackend;
use std::sync::Arc;
use std::time::Duration;

fn raw() -> mysql::Conn {
    let opts =
        mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&url()).unwrap()).prefer_socket(false);
    mysql::Conn::new(opts).unwrap()
}

#[test]
fn concurrency_8_threads_32_sessions_20_names() {
    let b = isolated(&url());
    sql_common::concurrency(b, Duration::from_secs(10));
}

#[test]
fn take_over_races_keep_alive() {
    sql_common::take_over_races_keep_alive(isolated(&url()), 40);
}

#[test]
fn names_case_and_metacharacters() {
    sql_common::names_case_and_metacharacters(isolated(&url()));
}

fn with_time_zone(prefix: &str, tz: &str) -> SqlBackend {
    let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&url()).unwrap())
        .prefer_socket(false)
        .init(vec![format!("SET time_zone = '{tz}'")]);
    let b = SqlBackend::builder(url())
        .mysql_opts(opts.clone())
        .table_prefix(prefix)
        .build()
        .unwrap();
    let mut c = mysql::Conn::new(opts).unwrap();
    let shown: Option<String> = c.query_first("SELECT @@session.time_zone").unwrap();
    assert_eq!(shown.as_deref(), Some(tz));
    b
}

#[test]
fn time_zone_of_the_connection_does_not_matter() {
    let base = isolated(&url());
    let p = base.0.table_prefix().to_owned();
    let east: Arc<dyn LeaseBackend> = Arc::new(with_time_zone(&p, "+13:00"));
    let west: Arc<dyn LeaseBackend> = Arc::new(with_time_zone(&p, "-12:00"));
    sql_common::time_zone_independent(east, west);
}

#[test]
fn connection_killed_while_holding_a_lease() {
    let base = isolated(&url());
    let p = base.0.table_prefix().to_owned();
    let holder = Arc::new(
        SqlBackend::builder(url())
            .table_prefix(&p)
            .pool_size(2)
            .build()
            .unwrap(),
    );
    let other: Arc<dyn LeaseBackend> = Arc::new(sql_common::sibling(&url(), &base.0));
    let h = holder.clone();
    sql_common::connections_killed_while_holding(holder, other, move || {
        let mut c = raw();
        let mut n = 0;
        for id in h.connection_ids() {
            if c.query_drop(format!("KILL {id}")).is_ok() {
                n += 1;
            }
        }
        n
    });
}

#[test]
fn outage_longer_than_the_lease_loses_the_lock() {
    let base = isolated(&url());
    sql_common::outage_longer_than_the_lease(&url(), &base.0);
}

#[test]
fn expired_sessions_are_purged_automatically() {
    sql_common::automatic_purge(&url(), |table| {
        raw()
            .query_first::<i64, _>(format!("SELECT count(*) FROM {table}"))
            .unwrap()
            .unwrap()
    });
}

struct MyTakeOver {
    conn: mysql::Conn,
    sessions: String,
}

impl sql_common::TakeOver for MyTakeOver {
    fn lock_holder(&mut self, sessions: &str, session: &simba_lease::SessionId) {
        self.conn.query_drop("START TRANSACTION").unwrap();
        let _: Vec<i64> = self
            .conn
            .exec(
                format!("SELECT 1 FROM {sessions} WHERE session_id = ? LOCK IN SHARE MODE"),
                (session.as_str(),),
            )
            .unwrap();
    }
    fn take_and_commit(
        &mut self,
        leases: &str,
        name: &simba_lease::LeaseName,
        to: &simba_lease::SessionId,
    ) {
        self.conn
            .exec_drop(
                format!("UPDATE {leases} SET session_id = ?, token = token + 1 WHERE name = ?"),
                (to.as_str(), name.as_str()),
            )
            .unwrap();
        self.conn.query_drop("COMMIT").unwrap();
    }
    fn keep_alive_waits(&mut self) -> bool {
        // The renewal is still running while the take-over holds the row: it waits for the
        // lock. (The process list shows the user's own threads without extra privileges.)
        let n: Option<i64> = raw()
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
                (format!("UPDATE {} SET expires_at%", self.sessions),),
            )
            .unwrap();
        n.unwrap_or(0) > 0
    }
}

#[test]
fn keep_alive_behind_a_take_over_does_not_list_the_lease() {
    let b = isolated(&url());
    let sessions = format!("{}simba_session", b.0.table_prefix());
    let mut t = MyTakeOver {
        conn: raw(),
        sessions,
    };
    sql_common::keep_alive_behind_a_take_over(b, &mut t);
}
