//! The inherent calls of [`SqlBackend`] beyond the SPI: the dialect's constructors, schema
//! installation and teardown, and what `simba doctor` reads of the server (settings,
//! collations, clock, connection ids, a pooler probe). Kept apart from the lease operations
//! they never take part in.

use super::driver::ConnectionProbe;
use super::{Dialect, ServerVersion, SqlBackend};
use crate::error::{Error, Result};
use std::time::Duration;

impl SqlBackend {
    /// A PostgreSQL backend for `url` with default options.
    pub fn postgres(url: &str) -> Result<SqlBackend> {
        let b = Self::builder(url).build()?;
        if b.dialect != Dialect::Postgres {
            return Err(Error::config("url", "expected a postgres:// URL"));
        }
        Ok(b)
    }

    /// A MySQL/MariaDB backend for `url` with default options.
    pub fn mysql(url: &str) -> Result<SqlBackend> {
        let b = Self::builder(url).build()?;
        if b.dialect != Dialect::Mysql {
            return Err(Error::config("url", "expected a mysql:// URL"));
        }
        Ok(b)
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The table prefix in use.
    pub fn table_prefix(&self) -> &str {
        &self.options.table_prefix
    }

    /// Creates the eight tables (sessions, leases, members, the fair-lock queue, run-once
    /// jobs, and read-write locks' names, terms and waiting writers) and their indexes if
    /// they do not exist (idempotent, safe to
    /// run from several processes at once), and adds the `version` column to a session table
    /// and the `term_value` and `value_token` columns to a lease table created by an earlier
    /// version (run it after upgrading; the statements need them).
    pub fn install_schema(&self) -> Result<()> {
        self.driver
            .install_schema()
            .map_err(|e| self.err("installing the schema", e))
    }

    /// Drops the eight tables (with every token in them). For tests and teardown only:
    /// tokens restart at 1 afterwards.
    pub fn drop_tables(&self) -> Result<()> {
        self.driver
            .drop_tables()
            .map_err(|e| self.err("dropping the tables", e))
    }

    /// The database server as detected when the backend connected: flavor (MySQL or MariaDB)
    /// and version. `None` on PostgreSQL, where it is not detected.
    pub fn server(&self) -> Option<ServerVersion> {
        self.driver.server()
    }

    /// The `application_name` of the connection that listens for notifications
    /// (`simba-listen/{table_prefix}`), on PostgreSQL; `None` on MySQL, which is polled.
    pub fn listener_name(&self) -> Option<String> {
        self.driver.listener_name()
    }

    /// A server setting, e.g. `synchronous_commit` or `server_version_num` (PostgreSQL
    /// `current_setting`) or `version_comment` or `rpl_semi_sync_master_enabled` (a MySQL
    /// global variable); `None` when the server has no such setting. Names are
    /// `[A-Za-z0-9_.]`, else [`Error::InvalidConfig`]. Used by `simba doctor`.
    pub fn setting(&self, name: &str) -> Result<Option<String>> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            return Err(Error::config("setting", "a setting name is [A-Za-z0-9_.]"));
        }
        self.driver
            .setting(name)
            .map_err(|e| self.err("reading a server setting", e))
    }

    /// The collation of each text key column (`name`, `session_id`, `group_name`) of this
    /// backend's tables as `(table, column, collation)`, sorted; empty when the tables do not
    /// exist. The schema scripts give them `"C"` (PostgreSQL) or a `_bin` collation (MySQL):
    /// names compare byte by byte. Used by `simba doctor`.
    pub fn key_collations(&self) -> Result<Vec<(String, String, String)>> {
        self.driver
            .key_collations()
            .map_err(|e| self.err("reading the tables' collations", e))
    }

    /// The database server's clock now, as UTC epoch milliseconds (PostgreSQL
    /// `clock_timestamp()`, MySQL `UTC_TIMESTAMP(6)`). Leases never depend on it (every
    /// remaining time is measured within one statement); `simba doctor` reports it.
    pub fn server_clock_ms(&self) -> Result<i64> {
        self.driver
            .clock_ms()
            .map_err(|e| self.err("reading the server's clock", e))
    }

    /// Opens two connections of its own (outside the pool) and reads their server-side ids
    /// across transactions, to detect a transaction-mode pooler between the backend and the
    /// database (see [`ConnectionProbe::pooled`]); also reads the statement timeout the
    /// server applies. Uses the simple query protocol (no prepared statements). Used by
    /// `simba doctor`.
    pub fn probe_connections(&self) -> Result<ConnectionProbe> {
        self.driver
            .probe_connections()
            .map_err(|e| self.err("probing connections", e))
    }

    /// The query timeout: every statement's bound, asked of the server per connection.
    pub fn query_timeout(&self) -> Duration {
        self.options.query_timeout
    }

    /// Server-side ids of the idle pooled connections (PostgreSQL backend pids, MySQL
    /// connection ids), to find them in `pg_stat_activity` or `SHOW PROCESSLIST`.
    pub fn connection_ids(&self) -> Vec<u64> {
        self.driver.connection_ids()
    }
}
