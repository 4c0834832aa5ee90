//! PostgreSQL and MySQL checks: the schema, a transaction-mode pooler in between, the
//! server version and settings, replication, the server clock.

use super::clock::{clock, unix_ms};
use super::{Args, Findings, Level};
use simba_lease::backends::SqlBackend;
use simba_lease::Result;

pub(super) fn check(a: &Args, f: &mut Findings, postgres: bool) -> Result<()> {
    let b = if postgres {
        SqlBackend::postgres(&a.url)?
    } else {
        SqlBackend::mysql(&a.url)?
    };
    // The pooler first (simple query protocol): the checks after it use prepared statements,
    // which a transaction-mode pooler can break, so their failures are reported, not fatal.
    // Its two connections are the first: a server that cannot be reached ends the run.
    let probe = b.probe_connections()?;
    f.add(Level::Ok, "connect", "the server answers");
    let pooled = pooler(&b, f, postgres, probe);
    if let Err(e) = sql_checks(&b, f, postgres, pooled) {
        f.add(
            Level::Unknown,
            "checks",
            format!(
                "the remaining checks failed: {}{}",
                e.report(),
                if pooled {
                    " (prepared statements through the pooler above)"
                } else {
                    ""
                }
            ),
        );
    }
    let sent = unix_ms();
    clock(f, b.server_clock_ms().ok(), sent);
    Ok(())
}

fn sql_checks(b: &SqlBackend, f: &mut Findings, postgres: bool, pooled: bool) -> Result<()> {
    crate::schema::tables(b, f, postgres, pooled)?;
    if postgres {
        postgres_checks(b, f)?;
    } else {
        mysql_checks(b, f)?;
    }
    Ok(())
}

/// A transaction-mode pooler between the backend and the database (PgBouncer, pgcat,
/// Supavisor; ProxySQL multiplexing on MySQL), seen from two connections of the doctor's own:
/// impossible ids on a direct connection. On PostgreSQL also the statement timeout the backend
/// asks for in the startup options, which such poolers drop. Returns whether one was found.
fn pooler(
    b: &SqlBackend,
    f: &mut Findings,
    postgres: bool,
    p: simba_lease::backends::ConnectionProbe,
) -> bool {
    let id = if postgres {
        "backend pid"
    } else {
        "connection id"
    };
    if p.pooled() {
        let seen = if p.own.windows(2).any(|w| w[0] != w[1]) {
            format!(
                "one client connection ran its transactions on several server connections \
                 ({id}s {:?})",
                p.own
            )
        } else {
            format!(
                "a second client connection ran on the first one's server connection ({id} {})",
                p.other
            )
        };
        let fix = if postgres {
            "connect to PostgreSQL directly, or through a session-mode pool (PgBouncer \
             `pool_mode = session`)"
        } else {
            "connect to the server directly, or turn multiplexing off for this user (ProxySQL \
             `mysql_users.transaction_persistent`/`multiplex=0`)"
        };
        let breaks = if postgres {
            "prepared statements the backend keeps per connection fail or run in another \
             session, and LISTEN (release notifications) and advisory locks are lost"
        } else {
            "prepared statements and the session settings that bound every statement \
             (max_execution_time, lock waits) are lost"
        };
        f.add(
            Level::Trap,
            "pooler",
            format!("a transaction-mode pooler is in front: {seen}; {breaks}; fix: {fix}"),
        );
    } else {
        f.add(
            Level::Ok,
            "pooler",
            format!(
                "each connection keeps its server session ({id}s {} and {})",
                p.own[0], p.other
            ),
        );
    }
    if let Some(t) = p.statement_timeout {
        let want = b.query_timeout().as_millis().max(1);
        let shown = if t.is_zero() {
            "no limit (0)".to_owned()
        } else {
            format!("{} ms", t.as_millis())
        };
        if t.as_millis() != want {
            f.add(
                Level::Trap,
                "statement_timeout",
                format!(
                    "the server applies {shown}, not the {want} ms the backend asks for in its \
                     startup options: something in between dropped them (PgBouncer \
                     `ignore_startup_parameters = options`), so the server no longer bounds \
                     a statement; fix: connect directly, or set statement_timeout for the \
                     role (`ALTER ROLE … SET statement_timeout = '{want}ms'`)"
                ),
            );
        } else {
            f.add(
                Level::Ok,
                "statement_timeout",
                format!("{t:?}, as the backend asks"),
            );
        }
    }
    p.pooled()
}

fn postgres_checks(b: &SqlBackend, f: &mut Findings) -> Result<()> {
    let num = b
        .setting("server_version_num")?
        .and_then(|v| v.parse::<u32>().ok());
    let version = b.setting("server_version")?.unwrap_or_default();
    match num {
        Some(n) if n >= 140_000 => f.add(Level::Ok, "version", format!("PostgreSQL {version}")),
        Some(_) => f.add(
            Level::Trap,
            "version",
            format!("PostgreSQL {version} is older than 14; fix: upgrade"),
        ),
        None => f.add(Level::Unknown, "version", "server_version_num unreadable"),
    }
    let sync = b.setting("synchronous_commit")?.unwrap_or_default();
    let standbys = b.setting("synchronous_standby_names")?.unwrap_or_default();
    if standbys.trim().is_empty() {
        f.add(
            Level::Info,
            "replication",
            "no synchronous standby (synchronous_standby_names empty): a failover to an \
             asynchronous standby can lose recent tokens; use synchronous replication where \
             fencing must survive failovers",
        );
    } else if sync == "off" || sync == "local" {
        f.add(
            Level::Trap,
            "replication",
            format!(
                "synchronous_commit={sync} with synchronous standbys `{standbys}`: commits do not \
                 wait for them; fix: synchronous_commit=on (or remote_apply)"
            ),
        );
    } else {
        f.add(
            Level::Ok,
            "replication",
            format!("synchronous standbys `{standbys}`, synchronous_commit={sync}"),
        );
    }
    Ok(())
}

fn mysql_checks(b: &SqlBackend, f: &mut Findings) -> Result<()> {
    match b.server() {
        Some(s) => f.add(
            Level::Ok,
            "version",
            format!("{:?} {} ({})", s.flavor, version(s.version), s.reported),
        ),
        None => f.add(Level::Unknown, "version", "not detected"),
    }
    let semi = b
        .setting("rpl_semi_sync_master_enabled")?
        .or(b.setting("rpl_semi_sync_source_enabled")?);
    let binlog = b.setting("log_bin")?.unwrap_or_default();
    match semi.as_deref() {
        Some("ON") => f.add(Level::Ok, "replication", "semi-synchronous replication on"),
        _ if binlog == "ON" => f.add(
            Level::Info,
            "replication",
            "binary log on without semi-synchronous replication: a failover to an \
             asynchronous replica can lose recent tokens",
        ),
        _ => f.add(Level::Info, "replication", "no binary log: a single server"),
    }
    Ok(())
}

fn version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}
