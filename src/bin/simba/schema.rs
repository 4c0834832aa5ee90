//! `simba schema install|check URL`: the tables of a SQL backend. The checks are the ones
//! `simba doctor` makes of the tables ([`tables`]).

use crate::doctor::{Findings, Level};
use serde_json::json;
use simba_lease::backends::{BackendUrl, SqlBackend};
use simba_lease::spi::LeaseBackend;
use simba_lease::{Error, LeaseName, Result};
use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Creates the tables and their indexes where missing (idempotent, safe from several
    /// processes at once; adds what a newer version needs to an older schema), then checks
    /// them as `check` does.
    Install(Args),
    /// Checks that the tables exist and that their key columns compare byte by byte; exits 1
    /// when one is missing or compares otherwise. Reads only.
    Check(Args),
}

impl Command {
    pub(crate) fn json(&self) -> bool {
        match self {
            Command::Install(a) | Command::Check(a) => a.json,
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend URL: `postgres://user@host/db` or `mysql://user:password@host/db` (MariaDB
    /// too). The other backends need no schema: said, and exit code 0.
    url: String,
    /// Table prefix: the tables are `<prefix>simba_session`, `<prefix>simba_lease`, …
    /// (the URL option `table_prefix`; give the same to the services).
    #[arg(long)]
    prefix: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The tables every SQL backend needs; fair locks, run-once jobs and read-write locks add
/// [`OPTIONAL_TABLES`].
const CORE_TABLES: [&str; 3] = ["simba_session", "simba_lease", "simba_member"];

pub(crate) fn run(c: Command) -> Result<ExitCode> {
    let (install, a) = match c {
        Command::Install(a) => (true, a),
        Command::Check(a) => (false, a),
    };
    let url = crate::bench::redacted(&a.url);
    let u = BackendUrl::parse(&a.url)?;
    let postgres = match u.scheme.as_str() {
        "postgres" | "postgresql" => true,
        "mysql" | "mariadb" => false,
        "memory" | "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "zookeeper" | "zk"
        | "zookeeper+tls" | "zk+tls" => {
            let text = format!(
                "the {}:// backend needs no schema: it creates what it needs as it goes",
                u.scheme
            );
            if a.json {
                println!(
                    "{}",
                    json!({"url": url, "schema": "none needed", "text": text})
                );
            } else {
                println!("{text}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        other => return Err(crate::doctor::unknown_scheme(&a.url, other)),
    };
    let mut builder = SqlBackend::builder(a.url.as_str());
    if let Some(p) = &a.prefix {
        builder = builder.table_prefix(p.as_str());
    }
    let pb = crate::progress::spinner(a.json, None, "connecting");
    let b = builder.build()?;
    if install {
        pb.set_message("installing the schema");
        b.install_schema()?;
    }
    pb.set_message("checking the tables");
    let mut f = Findings::default();
    let checked = tables(&b, &mut f, postgres, false);
    pb.finish_and_clear();
    checked?;
    let complete = f.count(&[Level::Trap, Level::Warn]) == 0;
    let prefix = b.table_prefix().to_owned();
    if a.json {
        println!(
            "{}",
            json!({"url": url, "table_prefix": prefix, "installed": install,
                   "complete": complete, "findings": f.json()})
        );
    } else {
        let what = if install { "install" } else { "check" };
        println!("simba schema {what} {url} (table prefix {prefix:?})");
        f.print();
        println!(
            "{}",
            match (complete, install) {
                (true, true) => "schema installed",
                (true, false) => "schema complete",
                (false, _) => "schema incomplete: see the findings above",
            }
        );
    }
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The findings on the tables of `b`: `schema` (the core tables exist and answer),
/// `tables` (those of fair locks, run-once jobs and read-write locks) and `collation` (key columns compare
/// byte by byte). `pooled`: a transaction-mode pooler was found in front, whose lost
/// prepared statements say nothing about the tables. Shared by `simba doctor` and
/// `simba schema`.
pub(crate) fn tables(b: &SqlBackend, f: &mut Findings, postgres: bool, pooled: bool) -> Result<()> {
    let collations = b.key_collations()?;
    let prefix = b.table_prefix();
    let exists = |table: &str| {
        let name = format!("{prefix}{table}").to_lowercase();
        collations.iter().any(|(t, _, _)| t.to_lowercase() == name)
    };
    let missing: Vec<String> = CORE_TABLES
        .iter()
        .filter(|t| !exists(t))
        .map(|t| format!("`{prefix}{t}`"))
        .collect();
    if !missing.is_empty() {
        f.add(
            Level::Trap,
            "schema",
            format!(
                "{} missing: the schema is not installed{}; fix: `simba schema install URL{}` \
                 (the services' URL), `SqlBackend::install_schema()`, or sql/init-simba-*.sql",
                missing.join(", "),
                if prefix.is_empty() {
                    String::new()
                } else {
                    format!(" under the table prefix {prefix:?}")
                },
                if prefix.is_empty() {
                    String::new()
                } else {
                    format!(" --prefix {prefix}")
                }
            ),
        );
    } else {
        match b.owner(&LeaseName::new("simba-doctor-probe")?) {
            Ok(_) => f.add(
                Level::Ok,
                "schema",
                format!("tables `{prefix}simba_*` answer"),
            ),
            // A statement the pooler lost (or mixed up) says nothing about the tables.
            Err(e) if pooled && e.report().to_string().contains("prepared statement") => f.add(
                Level::Unknown,
                "schema",
                format!(
                    "could not read the tables through the pooler ({})",
                    e.report()
                ),
            ),
            Err(e @ Error::MissingSchema { .. }) => f.add(Level::Trap, "schema", e.to_string()),
            Err(e) => f.add(
                Level::Trap,
                "schema",
                format!(
                    "the tables do not answer ({}); fix: `simba schema install URL`, \
                     `SqlBackend::install_schema()` or sql/init-simba-*.sql",
                    e.report()
                ),
            ),
        }
    }
    optional_tables(b, f, &collations);
    let wrong: Vec<String> = collations
        .iter()
        .filter(|(_, _, c)| {
            if postgres {
                c != "C" && c != "POSIX"
            } else {
                !c.ends_with("_bin")
            }
        })
        .map(|(t, col, c)| format!("{t}.{col} `{c}`"))
        .collect();
    if collations.is_empty() {
    } else if wrong.is_empty() {
        f.add(Level::Ok, "collation", "key columns compare byte by byte");
    } else {
        f.add(
            Level::Trap,
            "collation",
            format!(
                "{}: names would compare by locale or ignoring case, so two names could be one \
                 lease; fix: recreate the tables with the schema script (collation {})",
                wrong.join(", "),
                if postgres {
                    "\"C\""
                } else {
                    "ascii_bin / utf8mb4_bin"
                }
            ),
        );
    }
    Ok(())
}

/// Fair locks, run-once jobs and read-write locks: their tables.
const OPTIONAL_TABLES: [(&str, &str); 5] = [
    ("simba_queue", "fair locks"),
    ("simba_job", "run-once jobs"),
    ("simba_rw", "read-write locks"),
    ("simba_rw_holder", "read-write locks"),
    ("simba_rw_waiter", "read-write locks"),
];

/// The tables of fair locks, run-once jobs and read-write locks, when the others exist: older schemas lack
/// them, and only those features fail without them.
fn optional_tables(b: &SqlBackend, f: &mut Findings, collations: &[(String, String, String)]) {
    let has = |table: &str| {
        let name = format!("{}{table}", b.table_prefix()).to_lowercase();
        collations.iter().any(|(t, _, _)| t.to_lowercase() == name)
    };
    if !has("simba_lease") {
        return; // the schema finding says it all
    }
    let missing: Vec<String> = OPTIONAL_TABLES
        .iter()
        .filter(|(table, _)| !has(table))
        .map(|(table, what)| format!("`{}{table}` ({what})", b.table_prefix()))
        .collect();
    if missing.is_empty() {
        f.add(
            Level::Ok,
            "tables",
            "fair-lock queues, run-once jobs and read-write locks have their tables",
        );
    } else {
        f.add(
            Level::Warn,
            "tables",
            format!(
                "{} missing: those features fail until they exist; fix: `simba schema install URL` \
                 or `SqlBackend::install_schema()` (adds them, keeps the rest)",
                missing.join(", ")
            ),
        );
    }
}
