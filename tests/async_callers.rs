//! The blocking API called from async programs: every backend built, used and dropped on a
//! thread inside a tokio runtime (a `#[tokio::main]` body, i.e. `Runtime::block_on`, on a
//! current-thread and on a multi-thread runtime, and in `spawn_blocking`, the recommended
//! way). PostgreSQL used to panic there ("Cannot start a runtime from within a runtime").
//!
//! Servers as in the backends' own tests: `SIMBA_POSTGRES_URL`, `SIMBA_MYSQL_URL`,
//! `SIMBA_REDIS_URL`, `SIMBA_ZK_URL` (each under a random table prefix, key prefix or root,
//! removed afterwards); a backend whose feature is off is skipped.

#[cfg(feature = "zookeeper")]
#[path = "zk/mod.rs"]
mod zk;

use simba_lease::spi::LeaseBackend;
use simba_lease::{tck, Config, Session};
use std::sync::Arc;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(20);

/// A backend for one run and what removes its data afterwards (run by its `Drop`, on the
/// runtime's thread too).
struct Target {
    backend: Arc<dyn LeaseBackend>,
    _cleanup: Box<dyn std::any::Any>,
}

/// Opens a session on `target`, locks and unlocks, wins an election, observes it, joins and
/// leaves a group, closes the session and drops everything: on whatever thread it runs.
fn exercise(target: Target) {
    let config = Config::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let session = Session::open(target.backend.clone(), config).expect("open a session");
    let lock_name = tck::lease_name("async-lock");
    let lock = session.lock_timeout(&lock_name, PATIENCE).expect("lock");
    let first = lock.token();
    lock.unlock().expect("unlock");
    let again = session
        .try_lock(&lock_name)
        .expect("try_lock")
        .expect("free");
    assert!(again.token() > first);
    drop(again);
    let name = tck::lease_name("async-election");
    let observer = session.observe(&name).expect("observe");
    let election = session.election(&name).expect("election");
    let term = election.wait_elected(PATIENCE).expect("elected");
    assert_eq!(
        observer
            .leader()
            .expect("leader")
            .map(|o| (o.session, o.token)),
        Some((session.id(), term.token)),
        "the observer sees this session lead"
    );
    election.resign().expect("resign");
    let group = session
        .group(tck::group_name("async-group"))
        .expect("group");
    let membership = group.join().expect("join");
    assert!(group
        .members()
        .expect("members")
        .iter()
        .any(|m| m.session == session.id()));
    drop(membership);
    drop((observer, election, group));
    session.close().expect("close");
    drop(session);
    drop(target);
}

/// Builds the target with `make` and exercises it, all inside `block_on` of a current-thread
/// runtime, then of a multi-thread one, then in `spawn_blocking`.
fn in_runtimes(make: fn() -> Option<Target>) {
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for (what, rt) in [("current-thread", &current), ("multi-thread", &multi)] {
        eprintln!("inside block_on of a {what} runtime");
        rt.block_on(async {
            assert!(tokio::runtime::Handle::try_current().is_ok());
            if let Some(target) = make() {
                exercise(target);
            }
        });
    }
    eprintln!("inside spawn_blocking");
    multi
        .block_on(multi.spawn_blocking(move || {
            if let Some(target) = make() {
                exercise(target);
            }
        }))
        .expect("the spawn_blocking closure did not panic");
}

#[test]
fn memory_from_inside_a_tokio_runtime() {
    in_runtimes(|| {
        Some(Target {
            backend: simba_lease::connect("memory://").unwrap(),
            _cleanup: Box::new(()),
        })
    });
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql {
    use super::*;
    use simba_lease::backends::SqlBackend;

    /// Drops the test's tables.
    struct Tables(SqlBackend);
    impl Drop for Tables {
        fn drop(&mut self) {
            if let Err(e) = self.0.drop_tables() {
                eprintln!("dropping the tables {}: {e}", self.0.table_prefix());
            }
        }
    }

    pub(super) fn target(url: &str) -> Target {
        let prefix = format!("t{}_", tck::unique("async").replace('-', "_"));
        let build = || {
            SqlBackend::builder(url)
                .table_prefix(&prefix)
                .pool_size(2)
                .build()
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
        };
        let backend = build();
        backend.install_schema().expect("install_schema");
        Target {
            backend: Arc::new(backend),
            _cleanup: Box::new(Tables(build())),
        }
    }
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_from_inside_a_tokio_runtime() {
    in_runtimes(|| {
        let url = std::env::var("SIMBA_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        Some(sql::target(&url))
    });
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_from_inside_a_tokio_runtime() {
    in_runtimes(|| {
        let url = std::env::var("SIMBA_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned());
        Some(sql::target(&url))
    });
}

#[cfg(feature = "redis")]
#[test]
fn redis_from_inside_a_tokio_runtime() {
    use simba_lease::backends::redis::{RedisBackend, Role};

    /// Deletes the test's keys.
    struct Keys(RedisBackend, String);
    impl Drop for Keys {
        fn drop(&mut self) {
            let pattern = format!("{}:*", self.1);
            for k in self
                .0
                .scripting()
                .scan(&pattern, 100_000)
                .unwrap_or_default()
            {
                let _ = self.0.scripting().command(Role::Other, &["DEL", &k]);
            }
        }
    }

    in_runtimes(|| {
        let base = std::env::var("SIMBA_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("simbatest-{}", tck::unique("async"));
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}prefix={prefix}");
        let connect =
            || RedisBackend::connect(&url).unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        Some(Target {
            backend: Arc::new(connect()),
            _cleanup: Box::new(Keys(connect(), prefix)),
        })
    });
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_from_inside_a_tokio_runtime() {
    in_runtimes(|| {
        Some(Target {
            backend: Arc::new(zk::Isolated::new(&zk::hosts(), None, |b| b)),
            _cleanup: Box::new(()),
        })
    });
}
