//! The Redis 7 backend (feature `redis`): Lua scripts over one server, a primary with
//! replicas (`WAIT`), or a Redis Cluster routed by slot.
//!
#![doc = include_str!("design.md")]

// The files: `design.md` (the documentation above); `backend` (`RedisBackend`, what every
// topology does alike, and the one dispatch on the topology); `flavor` (the two topologies,
// one node and routed by slot, with the anchors, the routed keep-alive, the slot map and what
// the routed flavor knows of each session); `rw` (read-write locks on both flavors, and the
// decoding of their replies); `config`, `keys` (the key schema and hash slots), `reply` (reply
// decoding), `notifier` (the pub/sub thread), `jobs` (run-once jobs), `scripts` (the Lua
// sources), `builder` (URL and builder), `failure` (every Redis error); `scripting` (the
// scripting port and its two implementations on the `redis` crate).

mod backend;
mod builder;
mod config;
mod failure;
mod flavor;
mod jobs;
mod keys;
mod notifier;
mod reply;
mod rw;
mod scripting;
mod scripts;

pub use backend::{RedisBackend, LIST_LIMIT};
pub use builder::RedisBackendBuilder;
pub use config::RedisConfig;
pub use keys::key_slot;
pub use scripting::{
    ClusterScripting, ConnectOptions, LuaScript, PubSubEvent, RedisScripting, RedisTls, Reply,
    Role, ScriptCall, StandaloneScripting,
};
