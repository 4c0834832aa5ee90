//! `simba doctor`: a preflight of the server behind a URL. Each check says what it found;
//! a trap names its fix. Exit code 1 when a trap was found.
//!
//! This module parses the arguments, runs the backend's checks and prints the report; the
//! checks of each backend live in a module of their own.

mod clock;
mod redis;
mod report;
mod sql;
mod zookeeper;

pub(crate) use report::{Findings, Level};
use serde_json::json;
use simba_lease::{Config, Error, Result, TlsFailure};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend URL.
    url: String,
    /// The session lease your services use (checked against the server's limits); default:
    /// the library's (`Config::default().lease()`, 15s).
    #[arg(long, value_parser = crate::duration)]
    lease: Option<Duration>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl Args {
    fn lease(&self) -> Duration {
        self.lease.unwrap_or_else(|| Config::default().lease())
    }
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let mut f = Findings::default();
    let scheme = a.url.split("://").next().unwrap_or_default().to_owned();
    let pb = crate::progress::spinner(a.json, None, "checking the server");
    let checked = match scheme.as_str() {
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => redis::check(&a, &mut f),
        "postgres" | "postgresql" => sql::check(&a, &mut f, true),
        "mysql" | "mariadb" => sql::check(&a, &mut f, false),
        "zookeeper" | "zk" | "zookeeper+tls" | "zk+tls" => zookeeper::check(&a, &mut f),
        "memory" => {
            f.add(Level::Info, "backend", "in-memory: nothing to check");
            Ok(())
        }
        other => Err(unknown_scheme(&a.url, other)),
    };
    pb.finish_and_clear();
    if let Err(e) = checked {
        refused(&mut f, e)?;
    }
    let traps = f.count(&[Level::Trap]);
    if a.json {
        println!(
            "{}",
            json!({"url": crate::bench::redacted(&a.url), "lease_ms": a.lease().as_millis() as u64,
                   "traps": traps, "findings": f.json()})
        );
    } else {
        println!("simba doctor {}", crate::bench::redacted(&a.url));
        f.print();
        println!("{traps} trap(s) found");
    }
    Ok(if traps > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A scheme no backend has (exit code 2).
pub(crate) fn unknown_scheme(url: &str, scheme: &str) -> Error {
    Error::InvalidUrl {
        url: crate::bench::redacted(url),
        reason: format!(
            "unknown scheme {scheme:?} (known: memory, postgres, postgresql, mysql, mariadb, \
             redis, rediss, redis+cluster, rediss+cluster, zookeeper, zookeeper+tls)"
        ),
    }
}

/// A connection the server refused (TLS or credentials) is a trap with its fix; any other
/// failure ends the run as before.
fn refused(f: &mut Findings, e: Error) -> Result<()> {
    let fix = match &e {
        Error::Tls { failure, .. } => match failure {
            TlsFailure::UnknownIssuer => {
                "give the CA that signed the server's certificate with `ca=/path/ca.pem`"
            }
            TlsFailure::Expired => "renew the server's certificate (or check this host's clock)",
            TlsFailure::NameMismatch => {
                "connect by a host name the certificate lists (SQL: `sslmode=verify-ca` checks \
                 the chain only)"
            }
            TlsFailure::ClientCertificate => {
                "give a client certificate the server trusts with `cert=` and `key=`"
            }
            TlsFailure::NotOffered => {
                "this port has no TLS: turn TLS on in the server, or use a plaintext URL \
                 (`redis://`, `zookeeper://`, `sslmode=disable`)"
            }
            _ => "check the certificate and the TLS versions the server allows",
        },
        Error::Authentication { .. } => {
            "check the user and password of the URL and what the server grants them, or \
             whether its host rules (pg_hba.conf, `REQUIRE SSL`, `require_secure_transport`) \
             ask for TLS (`sslmode=verify-full&ca=…`) or a client certificate"
        }
        _ => return Err(e),
    };
    let check = if matches!(e, Error::Tls { .. }) {
        "tls"
    } else {
        "authentication"
    };
    f.add(Level::Trap, check, format!("{}; fix: {fix}", e.report()));
    Ok(())
}
