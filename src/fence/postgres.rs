//! The PostgreSQL fence: a table of newest tokens (and optionally values), written with one
//! `INSERT … ON CONFLICT DO UPDATE` per write, through the caller's own `postgres` client or
//! transaction.

use super::sql::{check_table, to_bigint};
use super::{check_key, outcome, token_from, Fenced};
use crate::error::{Error, Result};
use crate::types::Token;
use postgres::types::Type;
use postgres::GenericClient;

/// A fence table in PostgreSQL: one row per fenced key with its newest token and, for
/// [`put`](Self::put), its value.
///
/// Every write is one statement (`INSERT … ON CONFLICT DO UPDATE … RETURNING`, sent with
/// its parameter types: one round trip) that raises the row's token to the writer's and
/// returns the newest token; the write was applied when that is the writer's own. The
/// statement reads the latest committed row and locks it until the transaction ends, so
/// writers of one key are serialized, in `READ COMMITTED` as in stricter levels (where a
/// concurrent update makes it fail with a serialization error instead: retry the
/// transaction). A refused write rewrites the row with its own values and changes nothing.
///
/// Fencing your own `UPDATE`: [`check_and_record`](Self::check_and_record) in your
/// transaction, then your writes, then commit:
///
/// ```no_run
/// use postgres::{Client, NoTls};
/// use simba_lease::fence::PostgresFence;
/// use simba_lease::{Config, Session};
///
/// let session = Session::connect("postgres://app@db/app", Config::default())?;
/// let mut db = Client::connect("host=db user=app dbname=app", NoTls)?;
/// let fence = PostgresFence::new("app_fence")?;
/// fence.install(&mut db)?; // `create table if not exists`
///
/// let guard = session.lock("ledger")?;
/// let mut tx = db.transaction()?;
/// // Error::StaleToken when a newer term wrote: `?` returns and `tx` rolls back on drop.
/// // Ok: the fence row stays locked until commit, no older term can pass meanwhile.
/// fence.check_and_record(&mut tx, "ledger", guard.token())?;
/// tx.execute("update accounts set balance = balance - 10 where id = 7", &[])?;
/// tx.commit()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PostgresFence {
    table: String,
}

impl PostgresFence {
    /// A fence over `table` (an unquoted identifier, optionally `schema.table`; else
    /// [`Error::InvalidConfig`]). Nothing is sent: create the table with
    /// [`install`](Self::install) or [`create_table_sql`](Self::create_table_sql).
    pub fn new(table: &str) -> Result<Self> {
        Ok(PostgresFence {
            table: check_table(table)?,
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The `CREATE TABLE` the fence needs (idempotent: `if not exists`).
    ///
    /// ```
    /// let sql = simba_lease::fence::PostgresFence::new("app_fence")?.create_table_sql();
    /// assert!(sql.starts_with("create table if not exists app_fence"));
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn create_table_sql(&self) -> String {
        format!(
            "create table if not exists {} (\n    \
             fence_key varchar(128) primary key,\n    \
             token     bigint not null check (token > 0),\n    \
             data      bytea\n)",
            self.table
        )
    }

    /// Creates the table if it does not exist.
    pub fn install(&self, client: &mut impl GenericClient) -> Result<()> {
        client
            .batch_execute(&self.create_table_sql())
            .map_err(|e| Error::backend("creating the fence table", e))
    }

    /// Checks `token` against the newest token recorded for `key` and records it, in the
    /// caller's transaction (or on its own with a plain [`Client`](postgres::Client)): `Ok`
    /// when `token` is not below the newest, [`Error::StaleToken`] otherwise. The row stays
    /// locked until the transaction ends, so the caller's own writes that follow in the same
    /// transaction are fenced: commit them after `Ok`, roll back after an error.
    pub fn check_and_record(
        &self,
        client: &mut impl GenericClient,
        key: &str,
        token: Token,
    ) -> Result<()> {
        check_key(key)?;
        let value = to_bigint(token, "postgres")?;
        let sql = format!(
            "insert into {t} as f (fence_key, token) values ($1, $2) \
             on conflict (fence_key) do update set token = greatest(f.token, excluded.token) \
             returning f.token",
            t = self.table
        );
        let row = client
            .query_typed_one(&sql, &[(&key, Type::VARCHAR), (&value, Type::INT8)])
            .map_err(|e| Error::backend("fencing a write", e))?;
        outcome(key, token, newest(key, &row)?)
    }

    /// Writes `value` under `key` if `token` is not below the newest token recorded for it,
    /// and records `token`; [`Error::StaleToken`] otherwise (nothing changed). One
    /// statement: on a plain [`Client`](postgres::Client) it commits on its own, in a
    /// transaction it is part of it.
    pub fn put(
        &self,
        client: &mut impl GenericClient,
        key: &str,
        token: Token,
        value: &[u8],
    ) -> Result<()> {
        check_key(key)?;
        let t = to_bigint(token, "postgres")?;
        // Every SET expression sees the row as it was before the update.
        let sql = format!(
            "insert into {table} as f (fence_key, token, data) values ($1, $2, $3) \
             on conflict (fence_key) do update set \
             data = case when f.token <= excluded.token then excluded.data else f.data end, \
             token = greatest(f.token, excluded.token) \
             returning f.token",
            table = self.table
        );
        let row = client
            .query_typed_one(
                &sql,
                &[
                    (&key, Type::VARCHAR),
                    (&t, Type::INT8),
                    (&value, Type::BYTEA),
                ],
            )
            .map_err(|e| Error::backend("fencing a write", e))?;
        outcome(key, token, newest(key, &row)?)
    }

    /// The newest token recorded for `key` and the value stored with it; `None` when
    /// nothing was recorded.
    pub fn get(&self, client: &mut impl GenericClient, key: &str) -> Result<Option<Fenced>> {
        check_key(key)?;
        let sql = format!(
            "select token, data from {} where fence_key = $1",
            self.table
        );
        let Some(row) = client
            .query_typed_opt(&sql, &[(&key, Type::VARCHAR)])
            .map_err(|e| Error::backend("reading a fence", e))?
        else {
            return Ok(None);
        };
        let token = newest(key, &row)?;
        let value: Option<Vec<u8>> = row
            .try_get(1)
            .map_err(|e| Error::backend("reading a fence", e))?;
        Ok(Some(Fenced {
            token,
            value: value.unwrap_or_default(),
        }))
    }
}

/// The token in the first column of a fence row.
fn newest(key: &str, row: &postgres::Row) -> Result<Token> {
    let value: i64 = row
        .try_get(0)
        .map_err(|e| Error::backend("reading a fence", e))?;
    token_from(key, value.into())
}
