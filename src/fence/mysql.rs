//! The MySQL 8 / MariaDB fence: a table of newest tokens (and optionally values), written
//! with one `INSERT … ON DUPLICATE KEY UPDATE` per write, through the caller's own `mysql`
//! connection or transaction.

use super::sql::{check_table, to_bigint};
use super::{check_key, outcome, token_from, Fenced};
use crate::error::{Error, Result};
use crate::types::Token;
use mysql::prelude::Queryable;

/// A fence table in MySQL 8 or MariaDB (10.6 and later): one row per fenced key with its
/// newest token and, for [`put`](Self::put), its value.
///
/// Every write is one statement, `INSERT … ON DUPLICATE KEY UPDATE token =
/// LAST_INSERT_ID(GREATEST(token, ?))`: it raises the row's token to the writer's and
/// carries the newest token back in the server's OK reply (MySQL has no `RETURNING`); the
/// write was applied when that is the writer's own. InnoDB takes the row's exclusive lock
/// for the update and reads its latest committed version, in every isolation level, so
/// writers of one key are serialized until their transactions end. The `mysql` crate
/// prepares each statement once per connection and caches it: after the first call, one
/// round trip per write. A refused write leaves the row as it was.
///
/// Where MySQL and MariaDB differ (the SQL is valid on both):
/// * [`put`](Self::put) sends its value twice: MySQL 8.0.20 deprecates `VALUES(col)` in
///   `ON DUPLICATE KEY UPDATE` and MariaDB lacks the row alias (`AS new`) that replaces it.
/// * MySQL assigns `SET` columns left to right (each sees the ones before), MariaDB the same
///   unless its `SIMULTANEOUS_ASSIGNMENT` mode is on (each sees the old row): the statement
///   assigns the value before the token, so both give the same result.
/// * The `CHECK (token > 0)` is enforced from MySQL 8.0.16 and MariaDB 10.2.
///
/// Fencing your own `UPDATE`: [`check_and_record`](Self::check_and_record) in your
/// transaction, then your writes, then commit:
///
/// ```no_run
/// use mysql::prelude::Queryable;
/// use mysql::{Conn, Opts, TxOpts};
/// use simba_lease::fence::MysqlFence;
/// use simba_lease::{Config, Session};
///
/// let session = Session::connect("mysql://app:secret@db/app", Config::default())?;
/// let mut db = Conn::new(Opts::from_url("mysql://app:secret@db/app")?)?;
/// let fence = MysqlFence::new("app_fence")?;
/// fence.install(&mut db)?; // `create table if not exists`
///
/// let guard = session.lock("ledger")?;
/// let mut tx = db.start_transaction(TxOpts::default())?;
/// // Error::StaleToken when a newer term wrote: `?` returns and `tx` rolls back on drop.
/// fence.check_and_record(&mut tx, "ledger", guard.token())?;
/// tx.exec_drop("update accounts set balance = balance - 10 where id = ?", (7,))?;
/// tx.commit()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct MysqlFence {
    table: String,
}

impl MysqlFence {
    /// A fence over `table` (an unquoted identifier, optionally `database.table`; else
    /// [`Error::InvalidConfig`]). Nothing is sent: create the table with
    /// [`install`](Self::install) or [`create_table_sql`](Self::create_table_sql).
    pub fn new(table: &str) -> Result<Self> {
        Ok(MysqlFence {
            table: check_table(table)?,
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The `CREATE TABLE` the fence needs (idempotent: `if not exists`); keys compare
    /// byte-wise.
    ///
    /// ```
    /// let sql = simba_lease::fence::MysqlFence::new("app_fence")?.create_table_sql();
    /// assert!(sql.starts_with("create table if not exists app_fence"));
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn create_table_sql(&self) -> String {
        format!(
            "create table if not exists {} (\n    \
             fence_key varchar(128) character set ascii collate ascii_bin not null primary key,\n    \
             token     bigint not null,\n    \
             data      longblob null,\n    \
             check (token > 0)\n\
             ) engine = InnoDB",
            self.table
        )
    }

    /// Creates the table if it does not exist.
    pub fn install(&self, conn: &mut impl Queryable) -> Result<()> {
        conn.query_drop(self.create_table_sql())
            .map_err(|e| Error::backend("creating the fence table", e))
    }

    /// Checks `token` against the newest token recorded for `key` and records it, in the
    /// caller's transaction (or on its own, autocommitted, on a plain connection): `Ok` when
    /// `token` is not below the newest, [`Error::StaleToken`] otherwise. The row stays
    /// locked until the transaction ends, so the caller's own writes that follow in the same
    /// transaction are fenced: commit them after `Ok`, roll back after an error.
    pub fn check_and_record(
        &self,
        conn: &mut impl Queryable,
        key: &str,
        token: Token,
    ) -> Result<()> {
        check_key(key)?;
        let t = to_bigint(token, "mysql")?;
        let sql = format!(
            "insert into {table} (fence_key, token) values (?, ?) \
             on duplicate key update token = last_insert_id(greatest(token, ?))",
            table = self.table
        );
        self.write(conn, key, token, &sql, (key, t, t))
    }

    /// Writes `value` under `key` if `token` is not below the newest token recorded for it,
    /// and records `token`; [`Error::StaleToken`] otherwise (nothing changed). One
    /// statement: autocommitted on a plain connection, part of the transaction in one.
    pub fn put(
        &self,
        conn: &mut impl Queryable,
        key: &str,
        token: Token,
        value: &[u8],
    ) -> Result<()> {
        check_key(key)?;
        let t = to_bigint(token, "mysql")?;
        // `data` is assigned before `token`, so its condition sees the old token (see the
        // type's documentation for MariaDB's SIMULTANEOUS_ASSIGNMENT).
        let sql = format!(
            "insert into {table} (fence_key, token, data) values (?, ?, ?) \
             on duplicate key update data = if(token <= ?, ?, data), \
             token = last_insert_id(greatest(token, ?))",
            table = self.table
        );
        self.write(conn, key, token, &sql, (key, t, value, t, value, t))
    }

    /// Runs one fenced write and reads its outcome from the OK reply: a new row (no
    /// duplicate: `LAST_INSERT_ID(expr)` not evaluated, id 0) is applied; an updated one
    /// carries the newest token as its id.
    fn write(
        &self,
        conn: &mut impl Queryable,
        key: &str,
        token: Token,
        sql: &str,
        params: impl Into<mysql::Params>,
    ) -> Result<()> {
        let result = conn
            .exec_iter(sql, params)
            .map_err(|e| Error::backend("fencing a write", e))?;
        let (id, affected) = (result.last_insert_id().unwrap_or(0), result.affected_rows());
        drop(result);
        match (id, affected) {
            (0, 1) => Ok(()),
            (0, _) => Err(Error::Backend {
                operation: "fencing a write",
                source: format!(
                    "the server reported {affected} rows changed and no token for {key:?} \
                     in {}",
                    self.table
                )
                .into(),
            }),
            (id, _) => outcome(key, token, token_from(key, id.into())?),
        }
    }

    /// The newest token recorded for `key` and the value stored with it; `None` when
    /// nothing was recorded.
    pub fn get(&self, conn: &mut impl Queryable, key: &str) -> Result<Option<Fenced>> {
        check_key(key)?;
        let sql = format!("select token, data from {} where fence_key = ?", self.table);
        // `exec_first_opt`: a row of other types is an error, not a panic.
        let row = conn
            .exec_first_opt::<(i64, Option<Vec<u8>>), _, _>(sql, (key,))
            .map_err(|e| Error::backend("reading a fence", e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (token, value) = row.map_err(|_| Error::Backend {
            operation: "reading a fence",
            source: format!("the row of {key:?} in {} is not (bigint, blob)", self.table).into(),
        })?;
        Ok(Some(Fenced {
            token: token_from(key, token.into())?,
            value: value.unwrap_or_default(),
        }))
    }
}
