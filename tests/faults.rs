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

mod postgres {
    use super::*;
    use simba_lease::backends::SqlBackend;

    fn url() -> String {
        std::env::var("SIMBA_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    #[test]
    fn a_blackhole_ends_the_lock_before_another_process_takes_it() {
        let proxy = FaultProxy::start(host_port(&url()), 11).unwrap();
        let prefix = tck::unique("fault_").replace(['-', '.', ':'], "_");
        let prefix = &prefix[..prefix.len().min(30)];
        let build = |url: String| {
            SqlBackend::builder(url)
                .table_prefix(prefix)
                .query_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        };
        let direct = build(url());
        direct.install_schema().unwrap();
        let through = build(via(&url(), &proxy.addr().to_string()));
        let direct = Arc::new(direct);
        let f = faulty(
            proxy,
            Arc::new(through),
            direct.clone(),
            Duration::from_secs(1),
        );
        report(
            "postgres",
            tck::a_blackhole_ends_the_lock_before_another_process_takes_it(&f),
        );
        drop(f);
        direct.drop_tables().unwrap();
    }
}

mod mysql {
    use super::*;
    use simba_lease::backends::SqlBackend;

    fn url() -> String {
        std::env::var("SIMBA_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
    }

    #[test]
    fn a_blackhole_ends_the_lock_before_another_process_takes_it() {
        let proxy = FaultProxy::start(host_port(&url()), 12).unwrap();
        let prefix = tck::unique("fault_").replace(['-', '.', ':'], "_");
        let prefix = &prefix[..prefix.len().min(30)];
        let build = |url: String| {
            SqlBackend::builder(url)
                .table_prefix(prefix)
                .query_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        };
        let direct = build(url());
        direct.install_schema().unwrap();
        let through = build(via(&url(), &proxy.addr().to_string()));
        let direct = Arc::new(direct);
        let f = faulty(
            proxy,
            Arc::new(through),
            direct.clone(),
            Duration::from_secs(1),
        );
        report(
            "mysql",
            tck::a_blackhole_ends_the_lock_before_another_process_takes_it(&f),
        );
        drop(f);
        direct.drop_tables().unwrap();
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
}
