//! The TCK and backend-specific tests on PostgreSQL (`SIMBA_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).

mod sql_common;

use simba_lease::backends::SqlBackend;
use simba_lease::spi::LeaseBackend;
use sql_common::{isolated, Db, Isolated, TakeOver};
use std::time::Duration;

struct Postgres;

sql_suite!(Postgres);

fn raw() -> postgres::Client {
    Postgres::url()
        .parse::<postgres::Config>()
        .unwrap()
        .connect(postgres::NoTls)
        .unwrap()
}

impl Db for Postgres {
    fn url() -> String {
        std::env::var("SIMBA_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }
    fn session_tables() -> Vec<String> {
        raw()
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name LIKE 't%simba_session'",
                &[],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .unwrap_or_default()
    }
    fn kill(ids: Vec<u64>) -> usize {
        let mut c = raw();
        ids.into_iter()
            .filter(|pid| {
                c.query_one("SELECT pg_terminate_backend($1)", &[&(*pid as i32)])
                    .unwrap()
                    .get::<_, bool>(0)
            })
            .count()
    }
    fn count(table: &str) -> i64 {
        raw()
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get::<_, i64>(0)
    }
    const ZONES: (&'static str, &'static str) = ("Pacific/Kiritimati", "Etc/GMT+12");
    fn with_time_zone(prefix: &str, tz: &str) -> SqlBackend {
        let mut config: postgres::Config = Self::url().parse().unwrap();
        config.options(&format!("-c TimeZone={tz}"));
        let b = SqlBackend::builder(Self::url())
            .postgres_config(config.clone())
            .table_prefix(prefix)
            .build()
            .unwrap();
        // The setting reaches the server (checked on a plain connection with the same config).
        let mut c = config.connect(postgres::NoTls).unwrap();
        let shown: String = c.query_one("SHOW TimeZone", &[]).unwrap().get(0);
        assert_eq!(shown, tz);
        b
    }
    fn take_over(b: &Isolated) -> Box<dyn TakeOver> {
        let app = format!("simba-lease/{}", b.0.table_prefix());
        Box::new(PgTakeOver { client: raw(), app })
    }
}

#[test]
fn names_case_and_metacharacters() {
    let b = isolated(&Postgres::url());
    sql_common::names_case_and_metacharacters(b.clone());
    // PostgreSQL text cannot hold NUL: rejected before any I/O, with a typed error.
    let nul = simba_lease::Metadata::new("a\0b").unwrap();
    assert!(matches!(
        b.open_session(Duration::from_secs(1), &nul),
        Err(simba_lease::Error::InvalidConfig { .. })
    ));
}

struct PgTakeOver {
    client: postgres::Client,
    app: String,
}

impl TakeOver for PgTakeOver {
    fn lock_holder(&mut self, sessions: &str, session: &simba_lease::SessionId) {
        self.client.batch_execute("BEGIN").unwrap();
        self.client
            .query(
                &format!("SELECT 1 FROM {sessions} WHERE session_id = $1::text::bpchar FOR SHARE"),
                &[&session.as_str()],
            )
            .unwrap();
    }
    fn take_and_commit(
        &mut self,
        leases: &str,
        name: &simba_lease::LeaseName,
        to: &simba_lease::SessionId,
    ) {
        self.client
            .execute(
                &format!(
                    "UPDATE {leases} SET session_id = $1::text::bpchar, token = token + 1 \
                     WHERE name = $2::text"
                ),
                &[&to.as_str(), &name.as_str()],
            )
            .unwrap();
        self.client.batch_execute("COMMIT").unwrap();
    }
    fn keep_alive_waits(&mut self) -> bool {
        let mut other = raw();
        other
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&self.app],
            )
            .unwrap()
            .get::<_, i64>(0)
            > 0
    }
}
