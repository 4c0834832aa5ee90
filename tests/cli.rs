//! The `simba` command-line tool against `memory://` and the real servers of
//! `.ci/servers.sh`: `bench` (table and JSON), `doctor` (a deliberately misconfigured Redis,
//! a missing SQL schema, a transaction-mode PgBouncer, a lease above ZooKeeper's
//! maxSessionTimeout, an open ZooKeeper ACL, the server clocks), `status` (named leases,
//! read-write locks and the whole listing on every backend) and `watch`.
#![cfg(feature = "cli")]

mod zk;

use serde_json::Value;
use simba_lease::backends::zookeeper::ZooKeeperBackend;
use simba_lease::backends::{BackendUrl, SqlBackend};
use simba_lease::spi::Acquire;
use simba_lease::{connect, Config, Error, GroupName, LeaseName, Metadata, Session, SessionId};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn env_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

fn simba(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_simba"))
        .args(args)
        .output()
        .expect("run simba")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tag() -> String {
    SessionId::random().as_str()[..8].to_owned()
}

fn redis_url() -> String {
    format!(
        "{}?prefix=simbacli{}",
        env_url("SIMBA_REDIS_URL", "redis://127.0.0.1:6379"),
        tag()
    )
}

const QUICK: [&str; 10] = [
    "--iterations",
    "50",
    "--leases",
    "20",
    "--takeovers",
    "5",
    "--failovers",
    "1",
    "--failover-lease",
    "1s",
];

fn bench_json(url: &str) -> Value {
    let mut args = vec!["bench", url, "--json"];
    args.extend(QUICK);
    let o = simba(&args);
    assert!(o.status.success(), "{o:?}");
    serde_json::from_str(&stdout(&o)).expect("JSON")
}

fn assert_bench_rows(v: &Value, backend: &str) {
    assert_eq!(v["backend"], backend);
    assert_eq!(v["floor"]["samples"], 50);
    let ops: Vec<&str> = v["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["operation"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            "acquire (new term)",
            "release",
            "acquire (held by another)",
            "keep-alive, 1 lease",
            "keep-alive, 20 leases",
            "take-over after release (sessions)",
            "failover after crash (1s lease)",
        ]
    );
    for o in v["operations"].as_array().unwrap() {
        let (p50, p99) = (o["p50_us"].as_f64().unwrap(), o["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p99 >= p50, "{o}");
        assert!(o["p50_over_floor"].as_f64().unwrap() > 0.0, "{o}");
    }
    // A failover waits for the crashed session to expire on the backend: at least the 1 s
    // lease minus the renew interval (250 ms) after the crash. Faster would mean the backend
    // handed over a live lease (a safety bound, not a speed figure).
    let failover = &v["operations"][6];
    assert!(
        failover["p50_us"].as_f64().unwrap() >= 700_000.0,
        "{failover}"
    );
}

#[test]
fn bench_on_memory_prints_a_table_and_json() {
    let mut args = vec!["bench", "memory://"];
    args.extend(QUICK);
    let o = simba(&args);
    assert!(o.status.success(), "{o:?}");
    let table = stdout(&o);
    for row in [
        "floor: ping",
        "acquire (new term)",
        "keep-alive, 20 leases",
        "p50/floor",
    ] {
        assert!(table.contains(row), "{row} missing from\n{table}");
    }
    assert_bench_rows(&bench_json("memory://"), "memory");
}

/// Deletes the keys of the prefix of `url` (lease hashes keep their tokens forever).
fn cleanup_redis(url: &str) {
    let b = simba_lease::backends::redis::RedisBackend::connect(url).unwrap();
    let prefix = url.rsplit('=').next().unwrap();
    for key in b.scripting().scan(&format!("{prefix}:*"), 100_000).unwrap() {
        b.scripting()
            .command(simba_lease::backends::redis::Role::Other, &["DEL", &key])
            .unwrap();
    }
}

#[test]
fn bench_on_redis() {
    let url = redis_url();
    assert_bench_rows(&bench_json(&url), "redis");
    cleanup_redis(&url);
}

#[test]
fn doctor_flags_a_misconfigured_redis() {
    let url = env_url("SIMBA_REDIS_MISCONFIGURED_URL", "redis://127.0.0.1:6395");
    let o = simba(&["doctor", &url, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let trap = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "maxmemory-policy")
        .expect("a maxmemory-policy finding");
    assert_eq!(trap["level"], "trap");
    assert!(
        trap["text"].as_str().unwrap().contains("allkeys-lru"),
        "{trap}"
    );
    assert!(
        trap["text"].as_str().unwrap().contains("noeviction"),
        "the fix: {trap}"
    );
}

#[test]
fn doctor_finds_no_eviction_trap_on_the_test_redis() {
    let o = simba(&["doctor", &redis_url(), "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let policy = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "maxmemory-policy")
        .unwrap()
        .clone();
    assert_eq!(policy["level"], "ok", "{v}");
}

/// A server that refuses the connection is a trap naming the fix, not a failed run: a TLS
/// Redis without its CA (`tls`), and with the CA but a wrong password (`authentication`).
#[cfg(feature = "tls")]
#[test]
fn doctor_names_the_fix_when_tls_or_the_password_is_refused() {
    let url = env_url("SIMBA_REDIS_TLS_URL", "rediss://127.0.0.1:6390");
    let ca = format!(
        "{}/ca.pem",
        std::env::var("SIMBA_REDIS_TLS_DIR").unwrap_or_else(|_| concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/ci/redis-tls"
        )
        .to_owned())
    );
    let sep = if url.contains('?') { '&' } else { '?' };
    let o = simba(&["doctor", &format!("{url}{sep}connect_timeout=5s"), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let tls = finding(&o, "tls");
    assert_eq!(tls["level"], "trap", "{tls}");
    assert!(tls["text"].as_str().unwrap().contains("ca="), "{tls}");
    let pw = "Wr0ng-Pa55word";
    let wrong = url.replacen("rediss://", &format!("rediss://simba:{pw}@"), 1);
    let o = simba(&["doctor", &format!("{wrong}{sep}ca={ca}"), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let auth = finding(&o, "authentication");
    assert_eq!(auth["level"], "trap", "{auth}");
    assert!(!stdout(&o).contains(pw), "{o:?}");
}

/// The finding of `check` in a `doctor --json` output.
fn finding(o: &Output, check: &str) -> Value {
    let v: Value = serde_json::from_str(&stdout(o)).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {v}"))
        .clone()
}

/// Missing tables are a trap, installed ones are fine, a missing run-once jobs table (an
/// older schema) is a warning, and a key column given a collation that does not compare
/// byte by byte (`relax` alters `{prefix}simba_lease.name`) is a trap. `exec` runs a
/// statement on `url`.
fn sql_schema_traps(
    url: &str,
    make: fn(&str) -> simba_lease::Result<SqlBackend>,
    relax: fn(&str, &str),
    exec: fn(&str, &str),
) {
    let prefix = format!("t{}_", tag());
    let sep = if url.contains('?') { '&' } else { '?' };
    let full = format!("{url}{sep}table_prefix={prefix}");
    let o = simba(&["doctor", &full, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(finding(&o, "schema")["level"], "trap");
    let b = make(&full).unwrap();
    b.install_schema().unwrap();
    let o = simba(&["doctor", &full, "--json"]);
    assert_eq!(finding(&o, "schema")["level"], "ok", "{o:?}");
    assert_eq!(finding(&o, "collation")["level"], "ok", "{o:?}");
    assert_eq!(finding(&o, "tables")["level"], "ok", "{o:?}");
    exec(url, &format!("DROP TABLE {prefix}simba_job"));
    let o = simba(&["doctor", &full, "--json"]);
    let t = finding(&o, "tables");
    assert_eq!(t["level"], "warn", "{t}");
    assert!(t["text"].as_str().unwrap().contains("simba_job"), "{t}");
    b.install_schema().unwrap();
    relax(url, &prefix);
    let o = simba(&["doctor", &full, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let c = finding(&o, "collation");
    assert_eq!(c["level"], "trap", "{c}");
    assert!(
        c["text"].as_str().unwrap().contains("simba_lease.name"),
        "{c}"
    );
    b.drop_tables().unwrap();
}

fn pg_relax(url: &str, prefix: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let coll: String = c
        .query_one(
            "SELECT collname::text FROM pg_collation \
             WHERE collname NOT IN ('C', 'POSIX', 'default', 'ucs_basic') \
             AND collencoding IN (-1, pg_char_to_encoding(current_setting('server_encoding'))) \
             ORDER BY collname LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "ALTER TABLE {prefix}simba_lease ALTER COLUMN name TYPE varchar(128) COLLATE \"{coll}\""
    ))
    .unwrap();
}

fn pg_exec(url: &str, sql: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(sql).unwrap();
}

fn mysql_exec(url: &str, sql: &str) {
    use mysql::prelude::Queryable;
    let mut c = mysql::Conn::new(mysql::Opts::from_url(url).unwrap()).unwrap();
    c.query_drop(sql).unwrap();
}

fn mysql_relax(url: &str, prefix: &str) {
    use mysql::prelude::Queryable;
    let mut c = mysql::Conn::new(mysql::Opts::from_url(url).unwrap()).unwrap();
    c.query_drop(format!(
        "ALTER TABLE {prefix}simba_lease MODIFY name varchar(128) \
         CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL"
    ))
    .unwrap();
}

#[test]
fn doctor_flags_postgres_schema_traps() {
    sql_schema_traps(
        &env_url(
            "SIMBA_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        ),
        SqlBackend::postgres,
        pg_relax,
        pg_exec,
    );
}

#[test]
fn doctor_flags_mysql_schema_traps() {
    sql_schema_traps(
        &env_url("SIMBA_MYSQL_URL", "mysql://simba:simba@127.0.0.1:3306/test"),
        SqlBackend::mysql,
        mysql_relax,
        mysql_exec,
    );
}

#[test]
fn doctor_flags_a_lease_above_zookeepers_max_session_timeout() {
    let hosts = zk::hosts();
    zk::prepare(&hosts);
    let root = zk::random_root("doctor");
    // Digest credentials: the root is not open (an open ACL is a trap of its own).
    let url = format!("zookeeper://doctor:pw@{hosts}{root}");
    let o = simba(&["doctor", &url, "--lease", "150s"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).contains("maxSessionTimeout"), "{o:?}");
    let o = simba(&["doctor", &url, "--lease", "10s", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // The test servers allow `conf` and set minSessionTimeout=200 (ms), maxClientCnxns=0.
    assert_eq!(finding(&o, "minSessionTimeout")["level"], "ok", "{o:?}");
    assert_eq!(finding(&o, "maxClientCnxns")["text"], "unlimited", "{o:?}");
    let o = simba(&["doctor", &url, "--lease", "100ms", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let min = finding(&o, "minSessionTimeout");
    assert_eq!(min["level"], "trap", "{min}");
    assert!(min["text"].as_str().unwrap().contains("200ms"), "{min}");
    let mut raw = zk::raw::Raw::connect(&hosts);
    raw.auth("digest", b"doctor:pw");
    raw.delete_tree(&root);
}

/// A root created with the open ACL (a URL without credentials) is a trap naming the fix; one
/// created with digest credentials (creator-only ACL) is not, and the password never shows.
/// (The roots are created by the library: doctor creates nothing.)
#[test]
fn doctor_flags_an_open_zookeeper_acl() {
    let hosts = zk::hosts();
    zk::prepare(&hosts);
    let open_root = zk::random_root("doctor-open");
    drop(ZooKeeperBackend::from_url(&format!("zookeeper://{hosts}{open_root}")).unwrap());
    let o = simba(&[
        "doctor",
        &format!("zookeeper://{hosts}{open_root}"),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let acl = finding(&o, "acl");
    assert_eq!(acl["level"], "trap", "{acl}");
    let text = acl["text"].as_str().unwrap();
    for part in [open_root.as_str(), "world:anyone", "digest", "setAcl"] {
        assert!(text.contains(part), "{part} missing from {acl}");
    }
    zk::raw::Raw::connect(&hosts).delete_tree(&open_root);

    let closed_root = zk::random_root("doctor-digest");
    let url = format!("zookeeper://doctor:s3cret-pw@{hosts}{closed_root}");
    drop(ZooKeeperBackend::from_url(&url).unwrap());
    let o = simba(&["doctor", &url, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let acl = finding(&o, "acl");
    assert_eq!(acl["level"], "ok", "{acl}");
    assert!(
        acl["text"].as_str().unwrap().contains("digest:doctor"),
        "{acl}"
    );
    let all = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(!all.contains("s3cret-pw"), "the password leaked: {all}");
    let mut raw = zk::raw::Raw::connect(&hosts);
    raw.auth("digest", b"doctor:s3cret-pw");
    raw.delete_tree(&closed_root);
}

/// The clock finding of a doctor run: read (info), not unknown; a host and its loopback
/// servers share one clock, far below the one-minute warning.
fn assert_clock_read(o: &Output) {
    let c = finding(o, "clock");
    assert_eq!(c["level"], "info", "{c}");
    assert!(
        c["text"].as_str().unwrap().contains("ms from this host"),
        "{c}"
    );
}

/// (ZooKeeper shows its clock only in a write, which doctor never makes: said, not read.)
#[test]
fn doctor_reads_the_server_clocks() {
    let hosts = zk::hosts();
    zk::prepare(&hosts);
    let root = zk::random_root("doctor-clock");
    let o = simba(&["doctor", &format!("zookeeper://{hosts}{root}"), "--json"]);
    let c = finding(&o, "clock");
    assert_eq!(c["level"], "info", "{c}");
    assert!(
        c["text"].as_str().unwrap().contains("writes nothing"),
        "{c}"
    );
    for url in [pg_url(), mysql_url()] {
        let o = simba(&["doctor", &url, "--json"]);
        assert_clock_read(&o);
    }
}

fn pg_url() -> String {
    env_url(
        "SIMBA_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    )
}

fn mysql_url() -> String {
    env_url("SIMBA_MYSQL_URL", "mysql://simba:simba@127.0.0.1:3306/test")
}

/// Direct connections are no pooler, and PostgreSQL applies the backend's statement timeout.
#[test]
fn doctor_finds_no_pooler_on_direct_servers() {
    let o = simba(&[
        "doctor",
        &format!("{}?query_timeout=3s", pg_url()),
        "--json",
    ]);
    let p = finding(&o, "pooler");
    assert_eq!(p["level"], "ok", "{p}");
    let t = finding(&o, "statement_timeout");
    assert_eq!(t["level"], "ok", "{t}");
    assert!(t["text"].as_str().unwrap().contains("3s"), "{t}");
    let o = simba(&["doctor", &mysql_url(), "--json"]);
    assert_eq!(finding(&o, "pooler")["level"], "ok", "{o:?}");
}

/// PgBouncer in transaction mode (`ensure_pgbouncer`): the probe sees server connections
/// change hands, and the startup options (the statement timeout) dropped.
#[test]
fn doctor_flags_a_transaction_mode_pgbouncer() {
    let url = env_url(
        "SIMBA_PGBOUNCER_URL",
        "postgres://postgres@127.0.0.1:6436/test",
    );
    let o = simba(&["doctor", &url, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let p = finding(&o, "pooler");
    assert_eq!(p["level"], "trap", "{p}");
    assert!(
        p["text"].as_str().unwrap().contains("pool_mode = session"),
        "{p}"
    );
    let t = finding(&o, "statement_timeout");
    assert_eq!(t["level"], "trap", "{t}");
    assert!(
        t["text"]
            .as_str()
            .unwrap()
            .contains("ignore_startup_parameters"),
        "{t}"
    );
}

/// `simba status URL` without names lists the session (metadata as given, its lease count),
/// the held lease and the group, as JSON and as text, and never prints a password.
fn status_lists_everything(url: &str) {
    let backend = connect(url).unwrap();
    let meta = Metadata::new("host-a:8080 \"ü\"").unwrap();
    let g = backend
        .open_session(Duration::from_secs(60), &meta)
        .unwrap();
    let name = LeaseName::new(format!("job-{}", tag())).unwrap();
    let Acquire::Acquired(term) = backend.acquire(&g.id, &name).unwrap() else {
        panic!("a fresh lease is free");
    };
    let group = GroupName::new(format!("workers-{}", tag())).unwrap();
    backend.join(&g.id, &group).unwrap();

    let o = simba(&["status", url, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let find = |part: &str, key: &str, value: &str| -> Value {
        v[part]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x[key] == value)
            .unwrap_or_else(|| panic!("no {key}={value} in {part} of {v}"))
            .clone()
    };
    let s = find("sessions", "id", g.id.as_str());
    assert_eq!(s["metadata"], meta.as_str(), "{s}");
    assert_eq!(s["leases"], 1, "{s}");
    assert!(s["remaining_ms"].as_u64().unwrap() > 0, "{s}");
    let l = find("leases", "name", name.as_str());
    assert_eq!(l["holder"], g.id.as_str(), "{l}");
    assert_eq!(l["token"], term.token.get(), "{l}");
    let gr = find("groups", "group", group.as_str());
    assert_eq!(gr["members"][0]["session"], g.id.as_str(), "{gr}");
    assert_eq!(gr["members"][0]["metadata"], meta.as_str(), "{gr}");

    let o = simba(&["status", url]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    for part in [g.id.as_str(), name.as_str(), meta.as_str(), group.as_str()] {
        assert!(text.contains(part), "{part} missing from\n{text}");
    }
    if let Some(pw) = BackendUrl::parse(url).unwrap().password {
        assert!(!text.contains(&format!(":{pw}@")), "{text}");
        assert!(!stdout(&simba(&["status", url, "--json"])).contains(&format!(":{pw}@")));
    }
    backend.close_session(&g.id).unwrap();
}

#[test]
fn status_lists_everything_on_memory_as_empty() {
    // A `memory://` backend lives in the simba process alone: nothing to list.
    let o = simba(&["status", "memory://", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["backend"], "memory");
    for part in ["sessions", "leases", "groups"] {
        assert_eq!(v[part].as_array().unwrap().len(), 0, "{v}");
    }
}

/// `simba status URL --rw NAME`: on `memory://` (a backend of the simba process alone) every
/// read-write lock is free with no token yet, in text and JSON, beside the other parts; a bad
/// name exits 2 before any read.
#[test]
fn status_rw_on_memory_shows_free_locks_and_checks_names() {
    let o = simba(&[
        "status",
        "memory://",
        "--rw",
        "catalog",
        "--rw",
        "index",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["backend"], "memory");
    let rw = v["rw_locks"].as_array().unwrap();
    assert_eq!(rw.len(), 2, "{v}");
    for (lock, name) in rw.iter().zip(["catalog", "index"]) {
        assert_eq!(
            *lock,
            serde_json::json!({"name": name, "writer": null, "readers": [],
                               "writers_waiting": [], "last_token": 0, "delayed": []}),
            "{v}"
        );
    }
    assert_eq!(v["leases"].as_array().unwrap().len(), 0, "{v}");
    let o = simba(&["status", "memory://", "job", "--rw", "catalog"]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(
        text.contains("rw lock catalog (last token 0)\n  (free)\n"),
        "{text}"
    );
    assert!(text.contains("(free)") && text.contains("job"), "{text}");
    let o = simba(&["status", "memory://", "--rw", "a b"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("a b"), "{}", stderr(&o));
}

/// `simba status URL --rw NAME` on Redis: a reader and a waiting writer of another process
/// with their tokens; on a backend without read-write locks (this test's Redis branch before
/// they existed) the Unsupported error, exit 2 (as JSON with `--json`), never a panic.
#[test]
fn status_rw_on_redis_shows_the_holders_or_says_unsupported() {
    let url = redis_url();
    let backend = connect(&url).unwrap();
    let name = format!("catalog-{}", tag());
    if !backend.supports_rw_locks() {
        let o = simba(&["status", &url, "--rw", &name]);
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        assert!(
            stderr(&o).contains("the redis backend does not support read-write locks"),
            "{}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        let o = simba(&["status", &url, "--rw", &name, "--json"]);
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("does not support read-write locks"),
            "{v}"
        );
        return;
    }
    use simba_lease::spi::{RwAcquire, RwMode};
    let lease = Duration::from_secs(60);
    let open = || {
        backend
            .open_session(lease, &Metadata::default())
            .unwrap()
            .id
    };
    let (reader, writer) = (open(), open());
    let n = LeaseName::new(name.as_str()).unwrap();
    let RwAcquire::Acquired(read) = backend
        .acquire_rw(&reader, &n, RwMode::Read, lease)
        .unwrap()
    else {
        panic!("a fresh name is free");
    };
    assert!(matches!(
        backend
            .acquire_rw(&writer, &n, RwMode::Write, lease)
            .unwrap(),
        RwAcquire::Busy { .. }
    ));
    let o = simba(&["status", &url, "--rw", &name, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let lock = &v["rw_locks"][0];
    assert_eq!(lock["name"], name.as_str(), "{v}");
    assert!(lock["writer"].is_null(), "{v}");
    assert_eq!(
        lock["readers"],
        serde_json::json!([{"session": reader.as_str(), "token": read.token.get()}]),
        "{v}"
    );
    assert_eq!(
        lock["writers_waiting"],
        serde_json::json!([writer.as_str()])
    );
    assert_eq!(lock["last_token"], read.token.get(), "{v}");
    let text = stdout(&simba(&["status", &url, "--rw", &name]));
    assert!(
        text.contains(reader.as_str()) && text.contains(writer.as_str()),
        "{text}"
    );
    for s in [reader, writer] {
        backend.close_session(&s).unwrap();
    }
    cleanup_redis(&url);
}

#[test]
fn status_lists_everything_on_redis() {
    let url = redis_url();
    status_lists_everything(&url);
    cleanup_redis(&url);
}

#[test]
fn status_lists_everything_on_a_redis_cluster() {
    let url = format!(
        "{}?prefix=simbacli{}",
        env_url(
            "SIMBA_REDIS_CLUSTER_URL",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
        ),
        tag()
    );
    status_lists_everything(&url);
    cleanup_redis(&url);
}

fn sql_status(url: &str, make: fn(&str) -> simba_lease::Result<SqlBackend>) {
    let sep = if url.contains('?') { '&' } else { '?' };
    let full = format!("{url}{sep}table_prefix=t{}_", tag());
    let b = make(&full).unwrap();
    b.install_schema().unwrap();
    status_lists_everything(&full);
    b.drop_tables().unwrap();
}

#[test]
fn status_lists_everything_on_postgres() {
    sql_status(&pg_url(), SqlBackend::postgres);
}

#[test]
fn status_lists_everything_on_mysql() {
    sql_status(&mysql_url(), SqlBackend::mysql);
}

#[test]
fn status_lists_everything_on_zookeeper() {
    let hosts = zk::hosts();
    zk::prepare(&hosts);
    let root = zk::random_root("status");
    status_lists_everything(&format!("zookeeper://{hosts}{root}"));
    zk::raw::Raw::connect(&hosts).delete_tree(&root);
}

#[test]
fn status_and_watch_show_the_term_value() {
    let url = redis_url();
    let backend = connect(&url).unwrap();
    let session = Session::open(backend, Config::default()).unwrap();
    let name = format!("value-{}", tag());
    let guard = session.lock(name.as_str()).unwrap();
    guard.set_value("host-7 v1").unwrap();
    let o = simba(&["status", &url, &name, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["leases"][0]["value"], "host-7 v1", "{v}");
    let text = stdout(&simba(&["status", &url]));
    assert!(text.contains("host-7 v1"), "{text}");
    let mut watch = Command::new(env!("CARGO_BIN_EXE_simba"))
        .args(["watch", &url, &name, "--events", "1", "--for", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.ends_with("value host-7 v1"), "{first}");
    guard.set_value("host-7 v2").unwrap();
    let next = lines.next().unwrap().unwrap();
    assert!(next.ends_with("value host-7 v2"), "{next}");
    assert!(
        next.contains(&format!("token {}", guard.token().get())),
        "{next}"
    );
    assert!(watch.wait().unwrap().success());
    guard.unlock().unwrap();
    session.close().unwrap();
    cleanup_redis(&url);
}

#[test]
fn status_shows_the_holder_and_watch_follows_it() {
    let url = redis_url();
    let backend = connect(&url).unwrap();
    let session = Session::open(backend, Config::default()).unwrap();
    let name = format!("status-{}", tag());
    // `watch` first: its first line is the lease free, then one line per change.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_simba"))
        .args(["watch", &url, &name, "--events", "2", "--for", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.ends_with("free"), "{first}");

    let guard = session.lock(name.as_str()).unwrap();
    let o = simba(&["status", &url, &name, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let lease = &v["leases"][0];
    assert_eq!(lease["holder"], session.id().as_str());
    assert_eq!(lease["token"], guard.token().get());
    assert!(lease["remaining_ms"].as_u64().unwrap() > 0);
    let text = stdout(&simba(&["status", &url, &name]));
    assert!(text.contains(session.id().as_str()), "{text}");

    let held = lines.next().unwrap().unwrap();
    assert!(held.contains(session.id().as_str()), "{held}");
    assert!(
        held.contains(&format!("token {}", guard.token().get())),
        "{held}"
    );
    guard.unlock().unwrap();
    let freed = lines.next().unwrap().unwrap();
    assert!(freed.ends_with("free"), "{freed}");
    assert!(watch.wait().unwrap().success());
    let o = simba(&["status", &url, &name, "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["leases"][0]["holder"].is_null(), "{v}");
    session.close().unwrap();
    cleanup_redis(&url);
}

/// The Redis Cluster of `.ci/servers.sh` (`SIMBA_REDIS_CLUSTER_URL`).
fn cluster_url() -> String {
    env_url(
        "SIMBA_REDIS_CLUSTER_URL",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
    )
}

/// A plain connection to one Redis node `host:port`.
fn redis_node(addr: &str) -> simba_lease::backends::redis::StandaloneScripting {
    simba_lease::backends::redis::StandaloneScripting::new(
        &format!("redis://{addr}"),
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("{addr}: {e}"))
}

fn redis_cmd(addr: &str, args: &[&str]) -> String {
    use simba_lease::backends::redis::{RedisScripting, Role};
    let r = redis_node(addr)
        .command(Role::Other, args)
        .unwrap_or_else(|e| panic!("{addr} {args:?}: {e}"));
    match r.as_array() {
        Some([_, v]) => v.as_str().unwrap_or_default().to_owned(),
        _ => r.as_str().unwrap_or_default().to_owned(),
    }
}

/// `host:port` of every master of the cluster, by `CLUSTER NODES` of its first seed.
fn cluster_masters() -> Vec<String> {
    let url = BackendUrl::parse(&cluster_url()).unwrap();
    let nodes = redis_cmd(&url.hosts[0], &["CLUSTER", "NODES"]);
    let mut masters: Vec<String> = nodes
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = f.get(2)?;
            (flags.split(',').any(|x| x == "master") && !flags.contains("fail"))
                .then(|| f[1].split(['@', ',']).next().unwrap().to_owned())
        })
        .collect();
    masters.sort();
    masters
}

/// Sets `maxmemory-policy` on one node and puts the old value back when dropped, also when
/// the test fails (the cluster is shared with other test runs).
struct PolicyGuard {
    addr: String,
    old: String,
}

impl PolicyGuard {
    fn set(addr: &str, policy: &str) -> PolicyGuard {
        let old = redis_cmd(addr, &["CONFIG", "GET", "maxmemory-policy"]);
        assert!(!old.is_empty(), "maxmemory-policy of {addr}");
        let guard = PolicyGuard {
            addr: addr.to_owned(),
            old,
        };
        redis_cmd(addr, &["CONFIG", "SET", "maxmemory-policy", policy]);
        guard
    }
}

impl Drop for PolicyGuard {
    fn drop(&mut self) {
        use simba_lease::backends::redis::{RedisScripting, Role};
        let restored = redis_node(&self.addr).command(
            Role::Other,
            &["CONFIG", "SET", "maxmemory-policy", &self.old],
        );
        if let Err(e) = restored {
            eprintln!(
                "restoring maxmemory-policy {} on {}: {e}",
                self.old, self.addr
            );
        }
    }
}

/// The findings of `check` in a `doctor --json` output.
fn findings(o: &Output, check: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&stdout(o)).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .cloned()
        .collect()
}

/// On a cluster every master is checked on its own connection, and each finding names its
/// node: with `allkeys-lru` set on one master (each in turn), the maxmemory-policy trap names
/// exactly that master, every run (doctor used to read one random node per check, and missed
/// it in 11 of 27 runs). Every master also gets its own persistence finding.
#[test]
fn doctor_checks_every_cluster_master_and_names_the_node() {
    let masters = cluster_masters();
    assert!(masters.len() >= 3, "{masters:?}");
    for target in &masters {
        let o = {
            let _guard = PolicyGuard::set(target, "allkeys-lru");
            simba(&["doctor", &cluster_url(), "--json"])
        };
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        let policy = findings(&o, "maxmemory-policy");
        for m in &masters {
            let named: Vec<&Value> = policy
                .iter()
                .filter(|f| f["text"].as_str().unwrap().starts_with(&format!("{m} ")))
                .collect();
            assert_eq!(
                named.len(),
                1,
                "one maxmemory-policy finding names {m}: {policy:?}"
            );
            if m == target {
                assert_eq!(named[0]["level"], "trap", "{}", named[0]);
                let text = named[0]["text"].as_str().unwrap();
                assert!(text.contains("allkeys-lru"), "{text}");
                assert!(text.contains("noeviction"), "the fix: {text}");
            }
        }
        let persistence = findings(&o, "persistence");
        for m in &masters {
            assert!(
                persistence
                    .iter()
                    .any(|f| f["text"].as_str().unwrap().starts_with(&format!("{m} "))),
                "a persistence finding names {m}: {persistence:?}"
            );
        }
    }
}

/// One cluster node given as `redis://` gets the advice to use `redis+cluster://` (a trap
/// naming the node), not a failed run with `Moved`.
#[test]
fn doctor_given_a_cluster_node_as_redis_says_to_use_redis_cluster() {
    let node = &cluster_masters()[0];
    let o = simba(&["doctor", &format!("redis://{node}"), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("Moved"),
        "{o:?}"
    );
    let c = finding(&o, "cluster");
    assert_eq!(c["level"], "trap", "{c}");
    let text = c["text"].as_str().unwrap();
    assert!(text.contains(&format!("redis+cluster://{node}")), "{text}");
    assert!(text.contains(node.as_str()), "{text}");
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `url` with `option=value` added to its query.
fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// On a fresh table prefix: `schema check` finds the tables missing (exit 1, naming them and
/// the fix), the first `Session::open` fails with `Error::MissingSchema` naming the table and
/// the fix, `schema install` creates them (exit 0, complete), after which `check` passes, a
/// session opens, and a second install changes nothing.
fn schema_install_and_check(url: &str) {
    let prefix = format!("s{}_", tag());
    let o = simba(&["schema", "check", url, "--prefix", &prefix, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["complete"], false, "{v}");
    assert_eq!(v["table_prefix"], prefix.as_str(), "{v}");
    let schema = finding(&o, "schema");
    assert_eq!(schema["level"], "trap", "{schema}");
    let text = schema["text"].as_str().unwrap();
    for part in [
        format!("{prefix}simba_lease"),
        "simba schema install".into(),
    ] {
        assert!(text.contains(&part), "{part} missing from {schema}");
    }

    let full = with_option(url, &format!("table_prefix={prefix}"));
    let e = Session::open(connect(&full).unwrap(), Config::default()).unwrap_err();
    let Error::MissingSchema { table, .. } = &e else {
        panic!("not MissingSchema: {}", e.report())
    };
    assert!(table.to_lowercase().starts_with(&prefix), "{table}");
    assert!(!e.is_transient());
    let shown = e.to_string();
    for part in [table.as_str(), "simba schema install", "install_schema"] {
        assert!(shown.contains(part), "{part} missing from {shown}");
    }

    for _ in 0..2 {
        let o = simba(&["schema", "install", url, "--prefix", &prefix]);
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        assert!(stdout(&o).contains("schema installed"), "{o:?}");
    }
    let o = simba(&["schema", "check", url, "--prefix", &prefix, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    for check in ["schema", "tables", "collation"] {
        assert_eq!(finding(&o, check)["level"], "ok", "{check}: {o:?}");
    }
    // The prefix can be given in the URL too.
    let o = simba(&["schema", "check", &full]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("schema complete"), "{o:?}");
    let s = Session::open(connect(&full).unwrap(), Config::default()).unwrap();
    s.close().unwrap();
    SqlBackend::builder(full.as_str())
        .build()
        .unwrap()
        .drop_tables()
        .unwrap();
}

#[test]
fn schema_install_and_check_on_postgres() {
    schema_install_and_check(&pg_url());
}

#[test]
fn schema_install_and_check_on_mysql() {
    schema_install_and_check(&mysql_url());
}

/// Backends without tables need no schema (said, exit 0, without connecting); an unknown
/// scheme and an unreachable server are errors (exit 2), as JSON with `--json`.
#[test]
fn schema_elsewhere_needs_none_and_errors_exit_2() {
    for url in [
        "memory://",
        "redis://127.0.0.1:1",
        "zookeeper://127.0.0.1:1/simba",
    ] {
        for cmd in ["check", "install"] {
            let o = simba(&["schema", cmd, url]);
            assert_eq!(o.status.code(), Some(0), "{o:?}");
            assert!(stdout(&o).contains("needs no schema"), "{o:?}");
        }
    }
    let o = simba(&["schema", "check", "foo://bar"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("unknown scheme"), "{o:?}");
    let o = simba(&[
        "schema",
        "check",
        "postgres://postgres:s3cret-pw@127.0.0.1:1/test",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["error"].as_str().unwrap().contains("refused"), "{v}");
    assert!(!format!("{o:?}").contains("s3cret-pw"), "{o:?}");
}

/// `doctor` on an unknown scheme or an unreachable server exits 2 (never "0 trap(s)").
#[test]
fn doctor_exits_2_on_an_unknown_scheme_or_an_unreachable_server() {
    let o = simba(&["doctor", "foo://bar"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("unknown scheme"), "{o:?}");
    assert!(!stdout(&o).contains("trap(s)"), "{o:?}");
    let o = simba(&["doctor", "foo://bar", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("unknown scheme"),
        "{v}"
    );
    for url in [
        "postgres://postgres@127.0.0.1:1/test",
        "mysql://simba:simba@127.0.0.1:1/test",
        "redis://127.0.0.1:1?connect_timeout=2s",
        "zookeeper://127.0.0.1:1/simba?connect_timeout=2s",
    ] {
        let o = simba(&["doctor", url]);
        assert_eq!(o.status.code(), Some(2), "{url}: {o:?}");
        assert!(!stdout(&o).contains("trap(s)"), "{url}: {o:?}");
    }
}

/// `doctor` takes the library's default lease, and refuses a lease without a unit.
#[test]
fn doctor_takes_the_library_default_lease() {
    let o = simba(&["doctor", "memory://", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["lease_ms"].as_u64(),
        Some(Config::default().lease().as_millis() as u64),
        "{v}"
    );
    let o = simba(&["doctor", "memory://", "--lease", "10"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("no unit"), "{o:?}");
}

/// `doctor` on a ZooKeeper root that does not exist reports it missing and creates nothing:
/// a trap without credentials (the first session would create it open to world:anyone),
/// information with them.
#[test]
fn doctor_never_creates_the_zookeeper_root() {
    let hosts = zk::hosts();
    zk::prepare(&hosts);
    let root = zk::random_root("doctor-missing");
    let o = simba(&["doctor", &format!("zookeeper://{hosts}{root}"), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let r = finding(&o, "root");
    assert_eq!(r["level"], "trap", "{r}");
    for part in [root.as_str(), "missing", "world:anyone", "digest"] {
        assert!(r["text"].as_str().unwrap().contains(part), "{part}: {r}");
    }
    let o = simba(&[
        "doctor",
        &format!("zookeeper://doctor:pw@{hosts}{root}"),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(finding(&o, "root")["level"], "info", "{o:?}");
    assert_eq!(finding(&o, "session timeout")["level"], "ok", "{o:?}");
    let mut raw = zk::raw::Raw::connect(&hosts);
    assert_eq!(raw.ctime(&root), None, "doctor created {root}");
}

/// `bench --plot` writes an SVG naming each operation and the floor; a file name that is
/// not `.svg` is refused before the run.
#[test]
fn bench_plots_each_operation_beside_the_floor() {
    let dir = std::env::temp_dir().join(format!("simba-plot-{}", tag()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bench.svg");
    let path_s = path.to_str().unwrap();
    let mut args = vec!["bench", "memory://", "--plot", path_s, "--json"];
    args.extend(QUICK);
    let o = simba(&args);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.trim_start().starts_with("<svg"),
        "{}",
        &svg[..100.min(svg.len())]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("floor: ping"));
    assert!(svg.contains("percentile"));
    for op in v["operations"].as_array().unwrap() {
        let name = op["operation"].as_str().unwrap();
        assert!(svg.contains(name), "{name} missing from the plot");
    }
    let o = simba(&["bench", "memory://", "--plot", "out.png"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains(".svg"), "{o:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An error's `Display` ends with its innermost cause (the driver's words), `report()` has
/// the chain; neither holds the password.
#[test]
fn errors_show_their_innermost_cause_without_the_password() {
    for url in [
        "postgres://postgres:s3cret-pw@127.0.0.1:1/test",
        "mysql://simba:s3cret-pw@127.0.0.1:1/test",
        "redis://:s3cret-pw@127.0.0.1:1?connect_timeout=2s",
    ] {
        let e = connect(url)
            .and_then(|b| Session::open(b, Config::default()))
            .map(drop)
            .unwrap_err();
        let (shown, report) = (e.to_string(), e.report().to_string());
        assert!(shown.to_lowercase().contains("refused"), "{url}: {shown}");
        assert!(!shown.contains('\n'), "{url}: {shown}");
        assert!(report.len() >= shown.len(), "{url}: {report}");
        assert!(
            !shown.contains("s3cret-pw") && !report.contains("s3cret-pw"),
            "{report}"
        );
    }
}

/// A duration option without a unit is refused naming the option and the units.
#[test]
fn a_duration_option_needs_a_unit() {
    for url in [
        "redis://127.0.0.1:6379?connect_timeout=5",
        "postgres://postgres@127.0.0.1:5432/test?query_timeout=5",
        "zookeeper://127.0.0.1:2181/simba?request_timeout=5",
    ] {
        let e = connect(url).map(drop).unwrap_err();
        let Error::InvalidConfig { setting, reason } = &e else {
            panic!("{url}: {}", e.report())
        };
        assert!(url.contains(&format!("{setting}=5")), "{url}: {e}");
        for unit in ["ms", "s", "m", "h"] {
            assert!(reason.contains(unit), "{url}: {e}");
        }
    }
}
