//! PostgreSQL schema installation and migration: the embedded script under the table prefix,
//! serialized across installers by an advisory lock, and the columns that tables of earlier
//! versions lack added (only when missing: `ALTER TABLE` locks the table even when it has
//! nothing to do).

use crate::backends::sql::tables::Tables;
use ::postgres::Client;

/// Creates the tables and indexes that do not exist and adds the missing columns, in one
/// transaction.
pub(super) fn install(c: &mut Client, tables: &Tables) -> Result<(), ::postgres::Error> {
    let script = tables.script(include_str!("../../../../sql/init-simba-postgresql.sql"));
    let (session, lease) = (&tables.session, &tables.lease);
    let mut tx = c.transaction()?;
    // Serialize concurrent installers (CREATE ... IF NOT EXISTS races otherwise).
    tx.execute("SELECT pg_advisory_xact_lock(7283946120)", &[])?;
    for stmt in &script {
        tx.batch_execute(stmt)?;
    }
    // Tables of earlier versions have no `version` or `lock_delay` column: add them (only
    // then, as ALTER TABLE locks the table exclusively even when there is nothing to do).
    let has: bool = tx
        .query_one(
            "SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = to_regclass($1) \
                     AND attname IN ('version', 'lock_delay') AND NOT attisdropped",
            &[&session],
        )?
        .try_get(0)?;
    if !has {
        tx.batch_execute(&format!(
            "ALTER TABLE {session} ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0, \
                     ADD COLUMN IF NOT EXISTS lock_delay bigint NOT NULL DEFAULT 0"
        ))?;
    }
    // Lease tables from before term values have neither value column: add both.
    let has: bool = tx
        .query_one(
            "SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = to_regclass($1) \
                     AND attname IN ('term_value', 'value_token') AND NOT attisdropped",
            &[&lease],
        )?
        .try_get(0)?;
    if !has {
        tx.batch_execute(&format!(
            "ALTER TABLE {lease} ADD COLUMN IF NOT EXISTS term_value varchar(1024), \
                     ADD COLUMN IF NOT EXISTS value_token bigint"
        ))?;
    }
    tx.commit()
}
