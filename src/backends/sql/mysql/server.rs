//! Which server a MySQL-dialect connection reached: MySQL or MariaDB and its version, read
//! on every new connection and refused below MySQL 8.0 or MariaDB 10.6, and the session
//! settings that bound each statement there (the two servers name their time limits
//! differently).

use super::rows::{cell, cells, text};
use crate::backends::sql::driver::{Flavor, ServerVersion};
use crate::backends::sql::failure;
use crate::error::{Error, Result};
use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Row};
use std::time::Duration;

/// The oldest servers accepted.
const REQUIRED: &str = "MySQL 8.0 or later, or MariaDB 10.6 or later";

/// Tells MySQL from MariaDB and reads the version from `SELECT VERSION(), @@version_comment`.
/// `None` when no version number leads the string.
pub(super) fn parse_server(version: &str, comment: &str) -> Option<ServerVersion> {
    let maria = |s: &str| s.to_ascii_lowercase().contains("mariadb");
    let flavor = if maria(version) || maria(comment) {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    // MariaDB behind some proxies (and in its handshake) prefixes "5.5.5-".
    let v = match flavor {
        Flavor::MariaDb => version.strip_prefix("5.5.5-").unwrap_or(version),
        Flavor::MySql => version,
    };
    let end = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let mut parts = v[..end].split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next().flatten()?;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some(ServerVersion {
        flavor,
        version: (major, minor, patch),
        reported: version.to_owned(),
    })
}

/// Whether the backend supports this server: MySQL 8.0+ or MariaDB 10.6+.
pub(super) fn supported(v: &ServerVersion) -> bool {
    let (major, minor, _) = v.version;
    match v.flavor {
        Flavor::MySql => major >= 8,
        Flavor::MariaDb => (major, minor) >= (10, 6),
    }
}

/// The server of a new connection, refused when unsupported.
pub(super) fn detect(conn: &mut Conn) -> Result<ServerVersion> {
    let row: Option<Row> = conn
        .query_first("SELECT VERSION(), @@version_comment")
        .map_err(|e| failure::error("connecting to MySQL", e))?;
    let row = row.map(cells).unwrap_or_default();
    let version = text(cell(&row, 0)).unwrap_or_default();
    let comment = text(cell(&row, 1)).unwrap_or_default();
    match parse_server(&version, &comment) {
        Some(v) if supported(&v) => Ok(v),
        _ => Err(Error::UnsupportedServer {
            server: version,
            required: REQUIRED,
        }),
    }
}

/// The session settings that bound every statement on this connection (see the `mysql`
/// module's docs): one `SET` statement, valid on the detected flavor.
pub(super) fn limits(flavor: Flavor, timeout: Duration) -> String {
    let lock_wait = timeout.as_secs_f64().ceil().max(1.0) as u64;
    let first = match flavor {
        Flavor::MariaDb => format!(
            "max_statement_time = {:.3}",
            timeout.as_secs_f64().max(0.001)
        ),
        Flavor::MySql => format!(
            "max_execution_time = {}",
            timeout.as_millis().clamp(1, u128::from(u32::MAX))
        ),
    };
    format!(
        "SET SESSION {first}, SESSION innodb_lock_wait_timeout = {lock_wait}, \
         SESSION lock_wait_timeout = {lock_wait}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(version: &str, comment: &str) -> ServerVersion {
        parse_server(version, comment).expect(version)
    }

    #[test]
    fn server_versions_are_parsed_and_checked() {
        let cases = [
            (
                "10.11.19-MariaDB-0+deb12u1",
                "Debian 12",
                Flavor::MariaDb,
                (10, 11, 19),
                true,
            ),
            (
                "8.0.36",
                "MySQL Community Server - GPL",
                Flavor::MySql,
                (8, 0, 36),
                true,
            ),
            (
                "5.7.44",
                "MySQL Community Server (GPL)",
                Flavor::MySql,
                (5, 7, 44),
                false,
            ),
            (
                "10.5.2-MariaDB",
                "mariadb.org binary distribution",
                Flavor::MariaDb,
                (10, 5, 2),
                false,
            ),
            ("11.4.2-MariaDB-log", "", Flavor::MariaDb, (11, 4, 2), true),
            ("10.6.0-MariaDB", "", Flavor::MariaDb, (10, 6, 0), true),
            (
                "5.5.5-10.11.6-MariaDB",
                "",
                Flavor::MariaDb,
                (10, 11, 6),
                true,
            ),
            ("8.4.0-log", "", Flavor::MySql, (8, 4, 0), true),
            ("9.1.0", "", Flavor::MySql, (9, 1, 0), true),
            (
                "8.0.36-28",
                "Percona Server (GPL)",
                Flavor::MySql,
                (8, 0, 36),
                true,
            ),
            // The flavor from the comment when the version string does not say.
            (
                "10.11.2",
                "MariaDB Server",
                Flavor::MariaDb,
                (10, 11, 2),
                true,
            ),
            ("10.4", "MariaDB Server", Flavor::MariaDb, (10, 4, 0), false),
        ];
        for (version, comment, flavor, numbers, ok) in cases {
            let s = v(version, comment);
            assert_eq!(s.flavor, flavor, "{version}");
            assert_eq!(s.version, numbers, "{version}");
            assert_eq!(s.reported, version);
            assert_eq!(supported(&s), ok, "{version}");
        }
        assert_eq!(parse_server("", ""), None);
        assert_eq!(parse_server("MariaDB", ""), None);
    }

    #[test]
    fn statement_bounds_per_flavor() {
        let t = Duration::from_millis(1500);
        assert_eq!(
            limits(Flavor::MariaDb, t),
            "SET SESSION max_statement_time = 1.500, SESSION innodb_lock_wait_timeout = 2, \
             SESSION lock_wait_timeout = 2"
        );
        assert_eq!(
            limits(Flavor::MySql, t),
            "SET SESSION max_execution_time = 1500, SESSION innodb_lock_wait_timeout = 2, \
             SESSION lock_wait_timeout = 2"
        );
        let tiny = limits(Flavor::MySql, Duration::from_micros(10));
        assert!(tiny.contains("max_execution_time = 1,"), "{tiny}");
        assert!(tiny.contains("innodb_lock_wait_timeout = 1,"), "{tiny}");
    }
}
