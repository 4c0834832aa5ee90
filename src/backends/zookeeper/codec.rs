//! What the backend stores in and reads from a lease node: its data (holder and term value),
//! its token (the `czxid`), and the batched `exists` reads a keep-alive sends (of lease and
//! read-write term nodes alike).

use super::connect::Cfg;
use super::{failure, held};
use crate::error::Result;
use crate::types::{SessionId, Token};
use std::future::Future;
use std::pin::Pin;
use zookeeper_client as zk;

/// A lease node's data: the holder's session id, then after a line feed the term's value
/// (none until the holder sets one; the node lives for one term only).
pub(super) fn lease_data(session: &SessionId, value: &str) -> Vec<u8> {
    format!("{session}\n{value}").into_bytes()
}

/// The term value in a lease node's data (empty when there is none, or it is not UTF-8).
pub(super) fn value_of(data: &[u8]) -> String {
    std::str::from_utf8(data)
        .ok()
        .and_then(|d| d.split_once('\n'))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default()
}

/// The token of a lease node: its czxid, which is positive (a zxid of 0 or below is no
/// creation a server could have made).
pub(super) fn token(stat: &zk::Stat) -> Result<Token> {
    u64::try_from(stat.czxid)
        .ok()
        .and_then(|z| Token::new(z).ok())
        .ok_or_else(|| {
            failure::error(
                "reading a lease node",
                format!("lease node with czxid {}", stat.czxid),
            )
        })
}

pub(super) type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<Vec<held::Seen>, zk::Error>> + Send + 'a>>;

/// Sends an `exists` with a watch of each path at once (requests are queued when their
/// futures are created), or an `exists` of `{root}/leases` when there is none; the future
/// resolves once every reply is in.
pub(super) fn read_nodes<'a>(
    client: &'a zk::Client,
    cfg: &Cfg,
    paths: &[String],
) -> ReadFuture<'a> {
    if paths.is_empty() {
        let f = client.check_stat(&cfg.leases);
        return Box::pin(async move { f.await.map(|_| Vec::new()) });
    }
    let reads: Vec<_> = paths
        .iter()
        .map(|p| client.check_and_watch_stat(p))
        .collect();
    Box::pin(async move {
        let mut seen = Vec::with_capacity(reads.len());
        for r in reads {
            seen.push(r.await?);
        }
        Ok(seen)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn stat(czxid: i64) -> zk::Stat {
        zk::Stat {
            czxid,
            mzxid: czxid,
            pzxid: czxid,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 0,
            num_children: 0,
        }
    }

    #[test]
    fn tokens_are_positive_czxids() {
        assert_eq!(token(&stat(7)).unwrap().get(), 7);
        for bad in [0, -1, i64::MIN] {
            assert!(
                matches!(token(&stat(bad)), Err(Error::Backend { .. })),
                "{bad}"
            );
        }
    }
}
