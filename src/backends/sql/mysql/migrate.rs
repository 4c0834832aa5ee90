//! MySQL/MariaDB schema installation and migration: the embedded script under the table
//! prefix, serialized across installers by a named lock (DDL commits implicitly, so no
//! transaction can), and the columns that tables of earlier versions lack, found in
//! `information_schema.COLUMNS` first (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`).

use super::rows::{cell, cells, int, lock_granted};
use crate::backends::sql::driver::DbResult;
use crate::backends::sql::tables::Tables;
use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Row};

/// Creates the tables and indexes that do not exist and adds the missing columns, under the
/// named lock `simba_install` (waiting at most `secs` for it; without it the script runs all
/// the same).
pub(super) fn install(c: &mut Conn, tables: &Tables, secs: u64) -> DbResult<()> {
    let script = tables.script(include_str!("../../../../sql/init-simba-mysql.sql"));
    // DDL commits implicitly: serialize concurrent installers with a named lock.
    let got: Option<Row> = c.exec_first("SELECT GET_LOCK('simba_install', ?)", (secs,))?;
    let got = lock_granted(got.map(cells).as_deref());
    let r = script
        .iter()
        .try_for_each(|s| c.query_drop(s))
        .and_then(|()| add_session_columns(c, &tables.session))
        .and_then(|()| add_value(c, &tables.lease));
    if got {
        c.query_drop("DO RELEASE_LOCK('simba_install')")?;
    }
    Ok(r?)
}

/// Adds the `term_value` and `value_token` columns to a lease table of an earlier version.
fn add_value(c: &mut Conn, lease: &str) -> std::result::Result<(), ::mysql::Error> {
    for (column, def) in [
        (
            "term_value",
            "VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL",
        ),
        ("value_token", "BIGINT NULL"),
    ] {
        let row: Option<Row> = c.exec_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?",
            (lease, column),
        )?;
        if row.map(cells).and_then(|r| int(cell(&r, 0))) == Some(0) {
            c.query_drop(format!("ALTER TABLE {lease} ADD COLUMN {column} {def}"))?;
        }
    }
    Ok(())
}

/// Adds the `version` and `lock_delay` columns to a session table of an earlier version
/// (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`; MariaDB has).
fn add_session_columns(c: &mut Conn, session: &str) -> std::result::Result<(), ::mysql::Error> {
    for column in ["version", "lock_delay"] {
        let row: Option<Row> = c.exec_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?",
            (session, column),
        )?;
        if row.map(cells).and_then(|r| int(cell(&r, 0))) == Some(0) {
            c.query_drop(format!(
                "ALTER TABLE {session} ADD COLUMN {column} BIGINT NOT NULL DEFAULT 0"
            ))?;
        }
    }
    Ok(())
}
