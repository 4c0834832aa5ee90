//! The TCK and backend-specific tests on MySQL/MariaDB (`SIMBA_MYSQL_URL`, default
//! `mysql://simba:simba@127.0.0.1:3306/test`).

mod sql_common;

use mysql::prelude::Queryable;
use simba_lease::backends::SqlBackend;
use sql_common::{isolated, Db, Isolated, TakeOver};

struct MySql;

sql_suite!(MySql);

fn raw() -> mysql::Conn {
    let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&MySql::url()).unwrap())
        .prefer_socket(false);
    mysql::Conn::new(opts).unwrap()
}

impl Db for MySql {
    fn url() -> String {
        std::env::var("SIMBA_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
    }
    fn session_tables() -> Vec<String> {
        raw()
            .query(
                "SELECT table_name FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name LIKE 't%simba_session'",
            )
            .unwrap_or_default()
    }
    fn kill(ids: Vec<u64>) -> usize {
        let mut c = raw();
        ids.into_iter()
            .filter(|id| c.query_drop(format!("KILL {id}")).is_ok())
            .count()
    }
    fn count(table: &str) -> i64 {
        raw()
            .query_first::<i64, _>(format!("SELECT count(*) FROM {table}"))
            .unwrap()
            .unwrap()
    }
    const ZONES: (&'static str, &'static str) = ("+13:00", "-12:00");
    fn with_time_zone(prefix: &str, tz: &str) -> SqlBackend {
        let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&Self::url()).unwrap())
            .prefer_socket(false)
            .init(vec![format!("SET time_zone = '{tz}'")]);
        let b = SqlBackend::builder(Self::url())
            .mysql_opts(opts.clone())
            .table_prefix(prefix)
            .build()
            .unwrap();
        let mut c = mysql::Conn::new(opts).unwrap();
        let shown: Option<String> = c.query_first("SELECT @@session.time_zone").unwrap();
        assert_eq!(shown.as_deref(), Some(tz));
        b
    }
    fn take_over(b: &Isolated) -> Box<dyn TakeOver> {
        let sessions = format!("{}simba_session", b.0.table_prefix());
        Box::new(MyTakeOver {
            conn: raw(),
            sessions,
        })
    }
}

#[test]
fn names_case_and_metacharacters() {
    sql_common::names_case_and_metacharacters(isolated(&MySql::url()));
}

struct MyTakeOver {
    conn: mysql::Conn,
    sessions: String,
}

impl TakeOver for MyTakeOver {
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
