//! The Redis backend against real servers: the TCK on one server, on a primary with
//! `wait_replicas = 1`, and on a 3-master Redis Cluster routed by slot; plus fault, latency and
//! token-durability tests.
//!
//! Servers (started by `.ci/servers.sh`): `SIMBA_REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `SIMBA_REDIS_PRIMARY_URL` (`redis://127.0.0.1:6380`, replica `SIMBA_REDIS_REPLICA_URL`
//! `redis://127.0.0.1:6381`) and `SIMBA_REDIS_CLUSTER_URL`
//! (`redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`); with the `tls` feature,
//! `SIMBA_REDIS_TLS_URL` (`rediss://127.0.0.1:6390`), `SIMBA_REDIS_TLS_EXPIRED_URL` (6391),
//! `SIMBA_REDIS_TLS_WRONG_HOST_URL` (6392), `SIMBA_REDIS_TLS_CLIENT_AUTH_URL` (6393, requires a
//! client certificate), `SIMBA_REDIS_TLS_CLUSTER_URL`
//! (`rediss+cluster://127.0.0.1:7100,...`) and `SIMBA_REDIS_TLS_DIR` (the CA and certificates).
//!
//! Every backend gets a random key prefix and deletes its keys when dropped.
//!
//! Slots on the cluster: the TCK's lease and group names end in a random 32-bit suffix and
//! session ids are random 128-bit values, so the hash tags of one case's lease, session and
//! group keys fall in different slots (a clash has probability 1/16384 per pair), spread over
//! the three masters; `cluster_operation_spans_three_masters` picks names so that the session,
//! lease and group keys of one operation are on three *different* masters, checked against
//! `CLUSTER KEYSLOT` and `CLUSTER SLOTS`.
//!
//! The TCK suites on each layout are below; the other tests are in `tests/redis/`, one module
//! per layout or concern (named by `#[path]`: the modules of a crate root are looked up beside
//! it), and what they share is in `common`.
#![cfg(feature = "redis")]

#[path = "redis/common.rs"]
mod common;

mod standalone_tck {
    simba_lease::tck_suite!(|| super::common::standalone());
}

mod wait_replicas_tck {
    simba_lease::tck_suite!(|| super::common::primary_waiting());
}

mod routed_wait_replicas_tck {
    simba_lease::tck_suite!(|| super::common::routed_primary_waiting());
}

mod cluster_tck {
    simba_lease::tck_suite!(|| super::common::cluster());
}

/// The by-slot flow on one server: the same scripts the cluster runs, without the cluster.
mod routed_standalone_tck {
    simba_lease::tck_suite!(|| super::common::routed_standalone());
}

#[path = "redis/anchors.rs"]
mod anchors;
#[path = "redis/cluster.rs"]
mod cluster;
#[path = "redis/cluster_wait_replicas.rs"]
mod cluster_wait_replicas;
#[path = "redis/connect.rs"]
mod connect;
#[path = "redis/failover_figure.rs"]
mod failover_figure;
#[path = "redis/notifications.rs"]
mod notifications;
#[path = "redis/one_node.rs"]
mod one_node;
#[path = "redis/private_cluster.rs"]
mod private_cluster;
#[path = "redis/replica.rs"]
mod replica;
#[path = "redis/resharding.rs"]
mod resharding;
#[path = "redis/round_trips.rs"]
mod round_trips;
#[path = "redis/routed.rs"]
mod routed;
#[path = "redis/rw.rs"]
mod rw;
#[path = "redis/rw_memory_reference.rs"]
mod rw_memory_reference;
#[path = "redis/scripts.rs"]
mod scripts;
#[path = "redis/signals.rs"]
mod signals;
#[path = "redis/terms.rs"]
mod terms;
#[cfg(feature = "tls")]
#[path = "redis/tls.rs"]
mod tls;
