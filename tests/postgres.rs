//! The TCK and backend-specific tests on PostgreSQL (`SIMBA_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).

mod sql_common;

use sql_common::isolated;

fn url() -> String {
    std::env::var("SIMBA_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn isolated_swept() -> std::sync::Arc<sql_common::Isolated> {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        let tables = raw()
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name LIKE 't%simba_session'",
                &[],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .unwrap_or_default();
        sql_common::sweep(&url(), tables);
    });
    isolated(&url())
}

simba_lease::tck_suite!(|| isolated_swept());

use simba_lease::backends::SqlBackend;
use simba_lease::spi::LeaseBackend;
use std::sync::Arc;
use std::time::Duration;

fn raw() -> postgres::Client {
    url()
        .parse::<postgres::Config>()
        .unwrap()
        .connect(postgres::NoTls)
        .unwrap()
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
    let b = isolated(&url());
    sql_common::names_case_and_metacharacters(b.clone());
    // PostgreSQL text cannot hold NUL: rejected before any I/O, with a typed error.
    let nul = simba_lease::Metadata::new("a\0b").unwrap();
    assert!(matches!(
        b.open_session(Duration::from_secs(1), &nul),
        Err(simba_lease::Error::InvalidConfig { .. })
    ));
}

fn with_time_zone(prefix: &str, tz: &str) -> SqlBackend {
    let mut config: postgres::Config = url().parse().unwrap();
    config.options(&format!("-c TimeZone={tz}"));
    let b = SqlBackend::builder(url())
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

#[test]
fn time_zone_of_the_connection_does_not_matter() {
    let base = isolated(&url());
    let p = base.0.table_prefix().to_owned();
    let east: Arc<dyn LeaseBackend> = Arc::new(with_time_zone(&p, "Pacific/Kiritimati"));
    let west: Arc<dyn LeaseBackend> = Arc::new(with_time_zone(&p, "Etc/GMT+12"));
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
        for pid in h.connection_ids() {
            let r = c
                .query_one("SELECT pg_terminate_backend($1)", &[&(pid as i32)])
                .unwrap();
            n += usize::from(r.get::<_, bool>(0));
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
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get::<_, i64>(0)
    });
}

struct PgTakeOver {
    client: postgres::Client,
    app: String,
}

impl sql_common::TakeOver for PgTakeOver {
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

#[test]
fn keep_alive_behind_a_take_over_does_not_list_the_lease() {
    let b = isolated(&url());
    let app = format!("simba-lease/{}", b.0.table_prefix());
    let mut t = PgTakeOver { client: raw(), app };
    sql_common::keep_alive_behind_a_take_over(b, &mut t);
}
