//! SQL backends: acquire, release and keep-alive (a session holding 1 lease, one holding
//! 1000) as ratios to the floor, a durable single-row upsert, measured in the same run with
//! the operations round-robin per iteration (in a new order each iteration) and the backend
//! subscribed to notifications as the engine is; and the take-over after a clean release
//! through the engine (`Session::lock` waiting in one session while another unlocks):
//! pushed by `LISTEN/NOTIFY` on PostgreSQL, polled on MySQL (fewer rounds there, each takes
//! about a second or two).
//!
//! The floor is one autocommit statement on a connection of its own, prepared, that updates
//! one row of a two-column table and commits durably (the servers' defaults:
//! `synchronous_commit = on`, `innodb_flush_log_at_trx_commit = 1`):
//!
//! * PostgreSQL: `INSERT INTO {p}bench_floor AS f (k, v) VALUES ($1, 1)
//!   ON CONFLICT (k) DO UPDATE SET v = f.v + 1`;
//! * MySQL/MariaDB: `INSERT INTO {p}bench_floor (k, v) VALUES (?, 1)
//!   ON DUPLICATE KEY UPDATE v = v + 1`;
//!
//! on `k varchar(128)` (the lease table's key type) primary key, `v bigint`. `SELECT 1` on
//! the backend's pool (`LeaseBackend::ping`) is shown next to it: the round trip alone.
//! The ratio column is of the medians; the spread is the lowest and highest ratio over five
//! consecutive blocks of the run (the machine is shared: compare ratios, not µs).
//!
//! ```sh
//! export SIMBA_CI_DIR=/work/ci-servers   # or any directory; see .ci/servers.sh
//! source .ci/servers.sh && ensure_postgres && ensure_mysql
//! cargo bench --features postgres,mysql --bench sql
//! ```
//!
//! Runs on every database that answers (`SIMBA_POSTGRES_URL`, `SIMBA_MYSQL_URL`, loopback
//! defaults as in the tests), on tables with a random prefix dropped afterwards;
//! `SIMBA_BENCH_ITERS` (default 1000) sets the iterations, `SIMBA_BENCH_ONLY=postgres` or
//! `mysql` runs one database, `SIMBA_BENCH_SYNC_COMMIT=off` runs the PostgreSQL
//! connections without waiting for the WAL flush (what is left is the work beyond the one
//! flush every statement here waits for). See `benches/README.md` for the figures and what they mean.

use ::mysql::prelude::Queryable;
use simba_lease::backends::SqlBackend;
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{Config, LeaseName, Metadata, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{print_ratios, time, Row};

/// The floor statement on a connection of its own (see the module doc).
enum Floor {
    Pg(Box<::postgres::Client>, ::postgres::Statement),
    My(Box<::mysql::Conn>, ::mysql::Statement),
}

impl Floor {
    fn connect(url: &str, table: &str) -> Floor {
        if url.starts_with("postgres") {
            let mut c = ::postgres::Client::connect(url, ::postgres::NoTls).expect("connect");
            if async_commit() {
                c.batch_execute("SET synchronous_commit = off")
                    .expect("set");
            }
            c.batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table} \
                 (k varchar(128) COLLATE \"C\" PRIMARY KEY, v bigint NOT NULL)"
            ))
            .expect("floor table");
            let st = c
                .prepare(&format!(
                    "INSERT INTO {table} AS f (k, v) VALUES ($1, 1) \
                     ON CONFLICT (k) DO UPDATE SET v = f.v + 1"
                ))
                .expect("prepare");
            Floor::Pg(Box::new(c), st)
        } else {
            let opts = ::mysql::Opts::from_url(url).expect("MySQL URL");
            let mut c = ::mysql::Conn::new(opts).expect("connect");
            c.query_drop(format!(
                "CREATE TABLE IF NOT EXISTS {table} \
                 (k varchar(128) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY, \
                  v bigint NOT NULL) ENGINE = InnoDB"
            ))
            .expect("floor table");
            let st = c
                .prep(format!(
                    "INSERT INTO {table} (k, v) VALUES (?, 1) ON DUPLICATE KEY UPDATE v = v + 1"
                ))
                .expect("prepare");
            Floor::My(Box::new(c), st)
        }
    }

    fn upsert(&mut self) {
        match self {
            Floor::Pg(c, st) => drop(c.execute(&*st, &[&"floor"]).expect("upsert")),
            Floor::My(c, st) => c.exec_drop(&*st, ("floor",)).expect("upsert"),
        }
    }

    fn drop_table(self, table: &str) {
        let sql = format!("DROP TABLE IF EXISTS {table}");
        match self {
            Floor::Pg(mut c, _) => c.batch_execute(&sql).expect("drop"),
            Floor::My(mut c, _) => c.query_drop(sql).expect("drop"),
        }
    }
}

/// `SIMBA_BENCH_SYNC_COMMIT=off`: every PostgreSQL connection of the run (the floor's and
/// the backend's) commits without waiting for the WAL flush, which leaves the work beyond
/// the flush (the flush is the same one per statement for all of them).
fn async_commit() -> bool {
    std::env::var("SIMBA_BENCH_SYNC_COMMIT").is_ok_and(|v| v == "off")
}

const UPSERT: &str = "floor: durable single-row upsert";
const BLOCKS: usize = 5;

fn bench(url: &str, iters: usize) {
    let prefix = format!("bench{}_", std::process::id());
    let mut builder = SqlBackend::builder(url).table_prefix(&prefix);
    if async_commit() && url.starts_with("postgres") {
        let mut c: ::postgres::Config = url.parse().expect("PostgreSQL URL");
        c.options("-c synchronous_commit=off");
        builder = builder.postgres_config(c);
    }
    let b = match builder.build() {
        Ok(b) => Arc::new(b),
        Err(e) => {
            println!("skipping {url}: {e}");
            return;
        }
    };
    b.install_schema().expect("install_schema");
    // As in production, where the engine subscribes: on PostgreSQL every change then
    // notifies a listening connection.
    let _sub = b
        .subscribe(Arc::new(|_: &simba_lease::spi::Notification| {}))
        .unwrap();
    let table = format!("{prefix}bench_floor");
    let mut floor = Floor::connect(url, &table);
    let lease = Duration::from_secs(60);
    let open = || b.open_session(lease, &Metadata::default()).unwrap().id;
    // `s` acquires and releases `bench`; `one` holds one lease and `big` 1000, unchanged;
    // `idle` holds nothing.
    let (s, one, big, idle) = (open(), open(), open(), open());
    let name = LeaseName::new("bench").unwrap();
    b.acquire(&one, &LeaseName::new("bench-held").unwrap())
        .unwrap();
    for i in 0..1000 {
        b.acquire(&big, &LeaseName::new(format!("many-{i}")).unwrap())
            .unwrap();
    }
    // The first keep-alives list the leases; later ones find the version unchanged.
    for _ in 0..3 {
        b.keep_alive(&one, lease).unwrap();
        b.keep_alive(&big, lease).unwrap();
        b.keep_alive(&idle, lease).unwrap();
    }
    let mut rows: Vec<(&'static str, Vec<Duration>)> = [
        UPSERT,
        "SELECT 1 (the round trip)",
        "acquire (new term)",
        "release",
        "keep-alive, 1 lease",
        "keep-alive, 1000 leases",
        "keep-alive after a change (lists)",
        "keep-alive, nothing held",
    ]
    .into_iter()
    .map(|n| (n, Vec::new()))
    .collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..iters + iters / 10 {
        let mut it: [Vec<Duration>; 8] = Default::default();
        for unit in common::shuffled(7, &mut rng) {
            match unit {
                0 => time(&mut it[0], || floor.upsert()),
                1 => time(&mut it[1], || b.ping().unwrap()),
                2 => {
                    let t = match time(&mut it[2], || b.acquire(&s, &name).unwrap()) {
                        Acquire::Acquired(t) => t,
                        Acquire::Held(o) => panic!("held by {o:?}"),
                    };
                    assert!(time(&mut it[3], || b.release(&s, &name, t.token).unwrap()));
                }
                3 => {
                    let k = time(&mut it[4], || b.keep_alive(&one, lease).unwrap());
                    assert_eq!(k.leases.len(), 1);
                }
                4 => {
                    let k = time(&mut it[5], || b.keep_alive(&big, lease).unwrap());
                    assert_eq!(k.leases.len(), 1000);
                }
                6 => {
                    let k = time(&mut it[7], || b.keep_alive(&idle, lease).unwrap());
                    assert!(k.leases.is_empty());
                }
                _ => {
                    // `s`'s leases changed (acquired, released) since its last keep-alive.
                    let k = time(&mut it[6], || b.keep_alive(&s, lease).unwrap());
                    assert!(k.leases.is_empty());
                }
            }
        }
        if i >= iters / 10 {
            for (row, x) in rows.iter_mut().zip(it) {
                row.1.extend(x);
            }
        }
    }
    for id in [&s, &one, &big, &idle] {
        b.close_session(id).unwrap();
    }
    let (takeover, unlock, tfloor) = take_over(b.clone(), &mut floor, iters);
    let mode = if async_commit() && url.starts_with("postgres") {
        ", synchronous_commit = off"
    } else {
        ""
    };
    println!("\n{} ({url}), {iters} iterations{mode}", b.kind());
    let mut table_rows: Vec<Row> = rows
        .into_iter()
        .map(|(n, s)| {
            let row = Row::new(n, s);
            if n == UPSERT {
                row
            } else {
                row.vs(UPSERT)
            }
        })
        .collect();
    table_rows.extend([
        Row::new("floor: upsert, in the take-over rounds", tfloor),
        Row::new("take-over after release (engine)", takeover)
            .vs("floor: upsert, in the take-over rounds"),
        Row::new("  of which unlock()", unlock).vs("floor: upsert, in the take-over rounds"),
    ]);
    print_ratios(&table_rows, BLOCKS, None);
    b.drop_tables().unwrap();
    floor.drop_table(&table);
}

/// Take-over after a clean release: one session's `lock` waits while the other unlocks;
/// from the start of `unlock` until the waiter's `lock` returns, and `unlock` alone, with
/// one floor sample per round.
fn take_over(
    b: Arc<SqlBackend>,
    floor: &mut Floor,
    iters: usize,
) -> (Vec<Duration>, Vec<Duration>, Vec<Duration>) {
    let pushed = b
        .subscribe(Arc::new(|_: &simba_lease::spi::Notification| {}))
        .unwrap()
        .is_some();
    let rounds = if pushed { (iters / 10).max(10) } else { 5 };
    let backend: Arc<dyn LeaseBackend> = b;
    let config = Config::default();
    let x = Session::open(backend.clone(), config.clone()).unwrap();
    let y = Session::open(backend, config).unwrap();
    let (mut took, mut unlocked, mut floors) = (vec![], vec![], vec![]);
    for i in 0..rounds + 2 {
        let mut f = vec![];
        time(&mut f, || floor.upsert());
        let n = LeaseName::new(format!("takeover-{i}")).unwrap();
        let (a, c) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
        let held = a.try_lock(&n).unwrap().expect("a fresh name is free");
        let (t, u) = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let g = c.lock(&n).unwrap();
                let at = Instant::now();
                g.unlock().unwrap();
                at
            });
            // Let the waiter's first attempt find the lock held.
            std::thread::sleep(Duration::from_millis(30));
            let t = Instant::now();
            held.unlock().unwrap();
            let u = t.elapsed();
            (waiter.join().unwrap() - t, u)
        });
        if i >= 2 {
            took.push(t);
            unlocked.push(u);
            floors.extend(f);
        }
    }
    x.close().unwrap();
    y.close().unwrap();
    (took, unlocked, floors)
}

fn main() {
    let iters = common::iterations(1000, 20);
    let only = std::env::var("SIMBA_BENCH_ONLY").unwrap_or_default();
    let pg = std::env::var("SIMBA_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let my = std::env::var("SIMBA_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".into());
    if only.is_empty() || only == "postgres" {
        bench(&pg, iters);
    }
    if only.is_empty() || only == "mysql" {
        bench(&my, iters);
    }
}
