//! `simba`: measure a coordination backend, check its configuration, and look at its leases
//! (feature `cli`).
//!
//! ```text
//! simba bench URL [--sessions N] [--leases M] [--duration S] [--iterations I] [--plot FILE.svg] [--json]
//! simba doctor URL [--lease D] [--json]
//! simba schema install URL [--prefix P] [--json]
//! simba schema check URL [--prefix P] [--json]
//! simba status URL [NAME...] [--group G]... [--rw NAME]... [--json]
//! simba watch URL NAME [--events N] [--for D] [--json]
//! ```
//!
//! Exit codes: 0 done (doctor and schema check: nothing found), 1 a trap found (doctor) or
//! the schema incomplete (schema check), 2 an error (bad URL, unknown scheme, server not
//! reachable), printed to stderr, or with `--json` as `{"error": ..}` on stdout.

mod bench;
mod doctor;
mod plot;
mod progress;
mod report;
mod schema;
mod status;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Duration;

/// Measure, check and inspect a simba-lease backend.
#[derive(Debug, Parser)]
#[command(name = "simba", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Latency of acquire, release, keep-alive (1 and many leases), take-over after a
    /// release and failover after a crash, next to the backend's floor (its cheapest round
    /// trip) measured in the same run.
    Bench(bench::Args),
    /// Checks the server's configuration for known traps, without writing to it; exits 1
    /// when one is found, 2 when the server cannot be reached or the scheme is unknown.
    Doctor(doctor::Args),
    /// Installs or checks the tables of a SQL backend (PostgreSQL, MySQL, MariaDB).
    #[command(subcommand)]
    Schema(schema::Command),
    /// The holders of the named leases, the members of the named groups and the holders and
    /// waiting writers of the named read-write locks (`--rw`); without names, every session,
    /// held lease and group the backend sees.
    Status(status::Args),
    /// Follows the holders of one lease until interrupted.
    Watch(status::WatchArgs),
}

/// Parses a duration written `250ms`, `5s`, `2m` or `1h`; a number without a unit is
/// refused, as in URL options.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .unwrap_or((s, ""));
    let n: u64 = n.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        "" => Err(format!(
            "{s:?} has no unit: write it with ms, s, m or h (e.g. {n}s)"
        )),
        _ => Err(format!("unknown unit in {s:?} (ms, s, m or h)")),
    }
}

impl Command {
    /// Whether the output is JSON.
    fn json(&self) -> bool {
        match self {
            Command::Bench(a) => a.json,
            Command::Doctor(a) => a.json,
            Command::Schema(c) => c.json(),
            Command::Status(a) => a.json,
            Command::Watch(a) => a.json,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.command.json();
    let r = match cli.command {
        Command::Bench(a) => bench::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Schema(c) => schema::run(c),
        Command::Status(a) => status::run(a),
        Command::Watch(a) => status::watch(a),
    };
    match r {
        Ok(code) => code,
        Err(e) if json => {
            println!("{}", serde_json::json!({"error": e.report().to_string()}));
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("simba: {}", e.report());
            ExitCode::from(2)
        }
    }
}
