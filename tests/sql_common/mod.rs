//! Shared helpers and tests for the PostgreSQL and MySQL test files.

#![allow(dead_code)]

use simba_lease::backends::SqlBackend;
use simba_lease::spi::{Acquire, KeepAlive, LeaseBackend, SessionGrant};
use simba_lease::{GroupName, LeaseName, Member, Metadata, Owner, Result, SessionId, Token};
use std::sync::Arc;
use std::time::Duration;

/// A random table prefix, so runs and cases sharing a server never see each other's rows.
pub fn prefix() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).unwrap();
    format!(
        "t{}_",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// A backend on its own tables; drops them when the last handle goes away.
pub struct Isolated(pub SqlBackend);

impl Drop for Isolated {
    fn drop(&mut self) {
        if let Err(e) = self.0.drop_tables() {
            eprintln!("dropping test tables {}: {e}", self.0.table_prefix());
        }
    }
}

impl LeaseBackend for Isolated {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn open_session(&self, lease: Duration, metadata: &Metadata) -> Result<SessionGrant> {
        self.0.open_session(lease, metadata)
    }
    fn keep_alive(&self, session: &SessionId, lease: Duration) -> Result<KeepAlive> {
        self.0.keep_alive(session, lease)
    }
    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.0.close_session(session)
    }
    fn acquire(&self, session: &SessionId, name: &LeaseName) -> Result<Acquire> {
        self.0.acquire(session, name)
    }
    fn release(&self, session: &SessionId, name: &LeaseName, token: Token) -> Result<bool> {
        self.0.release(session, name, token)
    }
    fn owner(&self, name: &LeaseName) -> Result<Option<Owner>> {
        self.0.owner(name)
    }
    fn join(&self, session: &SessionId, group: &GroupName) -> Result<()> {
        self.0.join(session, group)
    }
    fn leave(&self, session: &SessionId, group: &GroupName) -> Result<bool> {
        self.0.leave(session, group)
    }
    fn members(&self, group: &GroupName) -> Result<Vec<Member>> {
        self.0.members(group)
    }
    fn purge_expired(&self) -> Result<usize> {
        self.0.purge_expired()
    }
}

/// A second backend (own pool) on the same tables as `of`, not dropping them.
pub fn sibling(url: &str, of: &SqlBackend) -> SqlBackend {
    SqlBackend::builder(url)
        .table_prefix(of.table_prefix())
        .build()
        .expect("sibling backend")
}

/// A fresh isolated backend with its schema installed.
pub fn isolated(url: &str) -> Arc<Isolated> {
    let b = SqlBackend::builder(url)
        .table_prefix(prefix())
        .pool_size(4)
        .build()
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    b.install_schema().expect("install_schema");
    Arc::new(Isolated(b))
}
