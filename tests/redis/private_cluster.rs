//! A private cluster on free loopback ports ([`PrivateCluster`]), for faults the shared one
//! must not see: a master down at connect, idle connections the nodes closed.

use crate::common::*;
use simba_lease::backends::redis::key_slot;
use simba_lease::spi::LeaseBackend;
use simba_lease::LeaseName;
use std::time::Duration;

/// A private 3-master cluster on free loopback ports (`cluster-require-full-coverage no`, so
/// the slots of live masters stay served while one is down), stopped and deleted on drop.
pub(crate) struct PrivateCluster {
    ports: Vec<u16>,
    dir: std::path::PathBuf,
}

impl PrivateCluster {
    pub(crate) fn start() -> Self {
        Self::start_with(3, 0)
    }

    /// A port free for a node and for its cluster bus (the port + 10 000, so at most
    /// 55 535), with both bound: the caller releases them for the server once every port of
    /// the cluster is picked (so no two are the same).
    fn free_cluster_port() -> (u16, [std::net::TcpListener; 2]) {
        loop {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let p = l.local_addr().unwrap().port();
            if p > 55_535 {
                continue;
            }
            if let Ok(bus) = std::net::TcpListener::bind(("127.0.0.1", p + 10_000)) {
                return (p, [l, bus]);
            }
        }
    }

    /// `masters` masters with `replicas` replicas each (`redis-cli --cluster create` assigns
    /// them), once every replica's link to its master is up.
    pub(crate) fn start_with(masters: usize, replicas: usize) -> Self {
        let nodes = masters * (1 + replicas);
        let ports: Vec<u16> = (0..nodes)
            .map(|_| Self::free_cluster_port())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(p, held)| {
                drop(held);
                p
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("simba-private-cluster-{}", random_prefix()));
        let cluster = PrivateCluster { ports, dir };
        for &p in &cluster.ports {
            let d = cluster.dir.join(p.to_string());
            std::fs::create_dir_all(&d).unwrap();
            let st = std::process::Command::new("redis-server")
                .args(["--port", &p.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .args(["--cluster-require-full-coverage", "no"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
                .arg("--dir")
                .arg(&d)
                .arg("--pidfile")
                .arg(d.join("redis.pid"))
                .arg("--logfile")
                .arg(d.join("redis.log"))
                .status()
                .expect("redis-server");
            assert!(st.success());
        }
        for &p in &cluster.ports {
            until("a private cluster node answers", || {
                redis::Client::open(format!("redis://127.0.0.1:{p}"))
                    .and_then(|c| c.get_connection())
                    .is_ok()
            });
        }
        let addrs: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        until("the private cluster is ok", || {
            cluster.ports.iter().all(|&p| {
                redis::Client::open(format!("redis://127.0.0.1:{p}"))
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                    .is_ok_and(|i| {
                        i.contains("cluster_state:ok")
                            && i.contains(&format!("cluster_known_nodes:{nodes}\r"))
                    })
            })
        });
        if replicas > 0 {
            until("every replica is linked to its master", || {
                cluster.ports.iter().all(|&p| {
                    let info = cluster.info(p, "replication");
                    info.contains("role:master")
                        && info.contains(&format!("connected_slaves:{replicas}\r"))
                        || info.contains("role:slave") && info.contains("master_link_status:up")
                })
            });
        }
        cluster
    }

    /// `INFO section` of the node on `port` (empty when it does not answer).
    pub(crate) fn info(&self, port: u16, section: &str) -> String {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("INFO").arg(section).query::<String>(&mut c))
            .unwrap_or_default()
    }

    /// The port of the master serving `slot`, as the first node that answers says.
    pub(crate) fn master_of_slot(&self, slot: u16) -> Option<u16> {
        self.ports.iter().find_map(|&p| {
            let owners: Vec<Vec<redis::Value>> =
                redis::Client::open(format!("redis://127.0.0.1:{p}"))
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("SLOTS").query(&mut c))
                    .ok()?;
            owners.iter().find_map(|r| {
                let int = |v: Option<&redis::Value>| match v {
                    Some(redis::Value::Int(i)) => Some(*i),
                    _ => None,
                };
                let (lo, hi) = (int(r.first())?, int(r.get(1))?);
                let Some(redis::Value::Array(m)) = r.get(2) else {
                    return None;
                };
                (lo..=hi)
                    .contains(&i64::from(slot))
                    .then(|| int(m.get(1)).and_then(|p| u16::try_from(p).ok()))?
            })
        })
    }

    /// The ports of the replicas of the master on `master`.
    pub(crate) fn replicas_of(&self, master: u16) -> Vec<u16> {
        self.ports
            .iter()
            .copied()
            .filter(|&p| {
                let info = self.info(p, "replication");
                info.contains("role:slave") && info.contains(&format!("master_port:{master}\r"))
            })
            .collect()
    }

    pub(crate) fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Stops the node on `port` (SHUTDOWN NOSAVE).
    pub(crate) fn stop(&self, port: u16) {
        let _ = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c));
        until("the node stopped", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        });
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for &p in &self.ports {
            self.stop(p);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Issue 21.8: while a master is down, a new connect succeeds through the seeds that answer
/// (the first PING went to every master and failed with "Connection refused"), and the slots
/// of the live masters are served.
#[test]
fn a_cluster_connect_succeeds_while_a_master_is_down() {
    let cluster = PrivateCluster::start();
    let down = cluster.ports[0];
    cluster.stop(down);
    let b = Isolated::new(&cluster.url(), "");
    // A lease whose slot a live master serves.
    let owners = slot_owners(&b);
    let name = (0..)
        .map(|i| LeaseName::new(format!("live-{i}")).unwrap())
        .find(|n| master_of(&owners, key_slot(&b.lease_key(n))) != i64::from(down))
        .unwrap();
    assert_eq!(b.owner(&name).unwrap(), None);
}

/// A plain connection to the node on `port` of a private cluster.
pub(crate) fn node_con(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("node {port}: {e}"))
}

/// Issue 21.6's rule on a cluster (a command whose fate is unknown is never sent again, and
/// the call fails) costs no call when a node closed an idle connection of the backend (a
/// restart, `CLIENT KILL`, its idle `timeout`): that is found before a command is sent on
/// it, and the call goes on a new connection (nothing was sent, nothing runs twice). Single
/// calls, keep-alive batches and releases all succeed after every node closed them all.
#[test]
fn cluster_calls_survive_idle_connections_the_nodes_closed() {
    let cluster = PrivateCluster::start();
    let b = Isolated::new(&cluster.url(), "");
    let lease = Duration::from_secs(60);
    let s = open(&b, lease);
    let names: Vec<LeaseName> = (0..6)
        .map(|i| LeaseName::new(format!("closed-idle-{i}")).unwrap())
        .collect();
    for round in 0..3 {
        let terms: Vec<simba_lease::Term> = names.iter().map(|n| acquired(&b, &s, n)).collect();
        for &p in &cluster.ports {
            let mut c = node_con(p);
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query(&mut c)
                .unwrap();
            until("the node closed the backend's connections", || {
                let list: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .arg("TYPE")
                    .arg("normal")
                    .query(&mut c)
                    .unwrap();
                list.lines().count() == 1
            });
        }
        let ka = b
            .keep_alive(&s, lease)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(ka.leases.len(), names.len(), "round {round}: {ka:?}");
        for (n, t) in names.iter().zip(&terms) {
            assert_eq!(b.owner(n).unwrap().map(|o| o.token), Some(t.token));
            assert!(b.release(&s, n, t.token).unwrap(), "round {round}");
        }
    }
    b.close_session(&s).unwrap();
}
