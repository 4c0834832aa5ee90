//! The ZooKeeper backend (feature `zookeeper`).
//!
#![doc = include_str!("design.md")]
//!
//! # Files
//!
//! * [`ZooKeeperBackend`] and its `LeaseBackend` impl in `backend`, built by the
//!   [`ZooKeeperBuilder`] (`builder`, with the URL options);
//! * `session`: each Simba session's own ZooKeeper client, and the table of them;
//! * `connect`: the settings every client is opened with, and the shared reader;
//! * `codec`: a lease node's data and token; `watch`: the watchdog and the reader's watch;
//! * `delay`: lock-delay gates and their stamps;
//! * `lease`: acquire, release, owner and value of a lease;
//! * `acl`: [`Perms`], [`Acl`], [`AclPolicy`]; `held`: the watches of the held leases and
//!   read-write terms; `queue`: fair locks; `rw`: read-write locks (`rw_view`: what an
//!   attempt or the state reads); `jobs`: run-once jobs; `tls`; `facade`: blocking on the
//!   client's futures; `failure`: every error.

mod acl;
mod backend;
mod builder;
mod codec;
mod connect;
mod delay;
mod facade;
mod failure;
mod held;
mod jobs;
mod lease;
mod queue;
mod rw;
mod rw_view;
mod session;
#[cfg(feature = "tls")]
mod tls;
mod watch;

pub use acl::{Acl, AclPolicy, Perms};
pub use backend::ZooKeeperBackend;
pub(crate) use builder::from_url;
pub use builder::ZooKeeperBuilder;
