//! Network faults between a process and a real server (`tck::net::FaultProxy`): a blackhole
//! ends the process's lock before another process, whose network is healthy, takes it; healed,
//! the cut-off process reopens and takes the name back. One module per backend; each case
//! isolates itself (a table prefix, a key prefix, a ZooKeeper root) and cleans up. The
//! figures (loss event after the guard's deadline, take-over after the heal) are printed.

use simba_lease::spi::LeaseBackend;
use simba_lease::tck::net::FaultProxy;
use simba_lease::tck::{self, Faulty, Figures};
use std::sync::Arc;
use std::time::Duration;

/// Host and port of a URL like `scheme://user@host:port/...`.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// `url` with its host and port replaced by `addr`.
fn via(url: &str, addr: &str) -> String {
    url.replacen(&host_port(url), addr, 1)
}

fn report(backend: &str, f: Figures) {
    println!(
        "{backend}: loss event {:?} after the guard's deadline; take-over {:?} after the heal",
        f.loss_after_deadline, f.takeover_after_heal
    );
}

/// The fault history's run, from `SIMBA_FAULT_SECONDS` (default 8), and its seed, from
/// `SIMBA_FAULT_SEED` (default: the time).
fn history_run() -> (Duration, u64) {
    let secs = std::env::var("SIMBA_FAULT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let seed = std::env::var("SIMBA_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    (Duration::from_secs(secs), seed)
}

/// Runs the fault history on `upstream` with `connect` building each client's backend.
fn history(
    upstream: &str,
    lease: Duration,
    connect: &(dyn Fn(&str) -> Arc<dyn LeaseBackend> + Sync),
) -> tck::history::Summary {
    let (run, seed) = history_run();
    let c = tck::Clients {
        upstream: upstream.to_owned(),
        connect,
        lease,
        clients: 4,
        run,
        seed,
    };
    tck::a_history_under_faults_keeps_the_contract(&c)
}

/// The checker's teeth: clients on a backend that answers keep-alives without renewing
/// (`tck::NeverRenews`) believe terms the server already gave to another: the history's
/// check names two clients holding one name at once.
#[test]
fn the_checker_catches_a_backend_that_extends_leases_it_should_not() {
    use simba_lease::backends::MemoryBackend;
    let server: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
    let connect =
        |_: &str| -> Arc<dyn LeaseBackend> { Arc::new(tck::NeverRenews::new(server.clone())) };
    let c = tck::Clients {
        upstream: "127.0.0.1:9".to_owned(),
        connect: &connect,
        lease: Duration::from_millis(300),
        clients: 3,
        run: Duration::from_secs(3),
        seed: 7,
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tck::a_history_under_faults_keeps_the_contract(&c)
    }));
    let message = match r {
        Ok(summary) => panic!("a broken backend went unnoticed: {summary:?}"),
        Err(p) => p.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(message.contains("both believed"), "{message}");
}

fn faulty(
    proxy: FaultProxy,
    through: Arc<dyn LeaseBackend>,
    direct: Arc<dyn LeaseBackend>,
    lease: Duration,
) -> Faulty {
    Faulty {
        proxy,
        through,
        direct,
        lease,
        patience: Duration::from_secs(30),
    }
}

/// The two cases on one SQL database (PostgreSQL or MySQL/MariaDB at `url`), under a fresh
/// table prefix dropped afterwards.
mod sql {
    use super::*;
    use simba_lease::backends::SqlBackend;

    /// A backend on `url` under `prefix`.
    fn build(url: &str, prefix: &str) -> SqlBackend {
        SqlBackend::builder(url)
            .table_prefix(prefix)
            .query_timeout(Duration::from_millis(500))
            .build()
            .unwrap()
    }

    /// A fresh table prefix, its tables installed through a backend on `url` (returned,
    /// to drop them).
    fn installed(url: &str) -> (String, SqlBackend) {
        let prefix = tck::unique("fault_").replace(['-', '.', ':'], "_");
        let prefix = prefix[..prefix.len().min(30)].to_owned();
        let direct = build(url, &prefix);
        direct.install_schema().unwrap();
        (prefix, direct)
    }

    pub(super) fn blackhole(db: &str, url: &str, seed: u64) {
        let proxy = FaultProxy::start(host_port(url), seed).unwrap();
        let (prefix, direct) = installed(url);
        let through = build(&via(url, &proxy.addr().to_string()), &prefix);
        let direct = Arc::new(direct);
        let lease = Duration::from_secs(1);
        let f = faulty(proxy, Arc::new(through), direct.clone(), lease);
        report(
            db,
            tck::a_blackhole_ends_the_lock_before_another_process_takes_it(&f),
        );
        drop(f);
        direct.drop_tables().unwrap();
    }

    pub(super) fn history(url: &str) {
        let (prefix, direct) = installed(url);
        let connect =
            |addr: &str| -> Arc<dyn LeaseBackend> { Arc::new(build(&via(url, addr), &prefix)) };
        super::history(&host_port(url), Duration::from_secs(1), &connect);
        direct.drop_tables().unwrap();
    }
}

mod postgres {
    fn url() -> String {
        std::env::var("SIMBA_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    #[test]
    fn a_blackhole_ends_the_lock_before_another_process_takes_it() {
        super::sql::blackhole("postgres", &url(), 11);
    }

    #[test]
    fn a_history_under_faults_keeps_the_contract() {
        super::sql::history(&url());
    }
}

mod mysql {
    fn url() -> String {
        std::env::var("SIMBA_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
    }

    #[test]
    fn a_blackhole_ends_the_lock_before_another_process_takes_it() {
        super::sql::blackhole("mysql", &url(), 12);
    }

    #[test]
    fn a_history_under_faults_keeps_the_contract() {
        super::sql::history(&url());
    }
}

mod redis {
    use super::*;
    use simba_lease::backends::redis::{RedisBackend, Role};

    fn url() -> String {
        std::env::var("SIMBA_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
    }

    #[test]
    fn a_blackhole_ends_the_lock_before_another_process_takes_it() {
        let proxy = FaultProxy::start(host_port(&url()), 13).unwrap();
        let prefix = tck::stamped_prefix("simbatest-");
        let build = |url: String| {
            let sep = if url.contains('?') { '&' } else { '?' };
            RedisBackend::connect(&format!("{url}{sep}prefix={prefix}&query_timeout=500ms"))
                .unwrap()
        };
        let direct = Arc::new(build(url()));
        let through = build(via(&url(), &proxy.addr().to_string()));
        let f = faulty(
            proxy,
            Arc::new(through),
            direct.clone(),
            Duration::from_secs(1),
        );
        report(
            "redis",
            tck::a_blackhole_ends_the_lock_before_another_process_takes_it(&f),
        );
        drop(f);
        let keys = direct.scripting().scan(&format!("{prefix}:*"), 100_000);
        for k in keys.unwrap_or_default() {
            let _ = direct.scripting().command(Role::Other, &["DEL", &k]);
        }
    }

    #[test]
    fn a_history_under_faults_keeps_the_contract() {
        let prefix = tck::stamped_prefix("simbatest-");
        let build = |url: String| {
            let sep = if url.contains('?') { '&' } else { '?' };
            RedisBackend::connect(&format!("{url}{sep}prefix={prefix}&query_timeout=500ms"))
                .unwrap()
        };
        let connect = |addr: &str| -> Arc<dyn LeaseBackend> { Arc::new(build(via(&url(), addr))) };
        history(&host_port(&url()), Duration::from_secs(1), &connect);
        let direct = build(url());
        let keys = direct.scripting().scan(&format!("{prefix}:*"), 100_000);
        for k in keys.unwrap_or_default() {
            let _ = direct.scripting().command(Role::Other, &["DEL", &k]);
        }
    }
}

#[path = "zk/mod.rs"]
mod zk;

mod zookeeper {
    use super::*;
    use simba_lease::backends::zookeeper::ZooKeeperBackend;

    #[test]
    fn a_blackhole_ends_the_lock_before_another_process_takes_it() {
        let hosts = zk::hosts();
        let proxy = FaultProxy::start(hosts.split(',').next().unwrap(), 14).unwrap();
        let through = Arc::new(zk::Isolated::via(
            &hosts,
            &proxy.addr().to_string(),
            None,
            |b| b,
        ));
        let direct = ZooKeeperBackend::builder(&hosts)
            .root(through.root().to_owned())
            .connection_timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let f = faulty(proxy, through, Arc::new(direct), Duration::from_secs(2));
        report(
            "zookeeper",
            tck::a_blackhole_ends_the_lock_before_another_process_takes_it(&f),
        );
    }

    #[test]
    fn a_history_under_faults_keeps_the_contract() {
        let hosts = zk::hosts();
        // The clean-up: the root's tree goes when this backend is dropped.
        let owner = zk::Isolated::new(&hosts, None, |b| b);
        let root = owner.root().to_owned();
        let connect = |addr: &str| -> Arc<dyn LeaseBackend> {
            let b = ZooKeeperBackend::builder(addr)
                .root(root.clone())
                .connection_timeout(Duration::from_secs(20))
                .build()
                .unwrap();
            Arc::new(b)
        };
        let upstream = hosts.split(',').next().unwrap().to_owned();
        history(&upstream, Duration::from_secs(2), &connect);
        drop(owner);
    }
}
