//! The TCK and backend-specific tests on MySQL/MariaDB (`SIMBA_MYSQL_URL`, default
//! `mysql://simba:simba@127.0.0.1:3306/test`).

mod sql_common;

use mysql::prelude::Queryable;
use simba_lease::backends::SqlBackend;
use sql_common::{isolated, Db, Isolated, TakeOver};

struct MySql;

sql_suite!(MySql);

fn raw() -> mysql::Conn {
    let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&MySql::url()).unwrap())
        .prefer_socket(false);
    mysql::Conn::new(opts).unwrap()
}

impl Db for MySql {
    fn url() -> String {
        std::env::var("SIMBA_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://simba:simba@127.0.0.1:3306/test".to_owned())
    }
    fn session_tables() -> Vec<String> {
        raw()
            .query(
                "SELECT table_name FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name LIKE 't%simba_session'",
            )
            .unwrap_or_default()
    }
    fn kill(ids: Vec<u64>) -> usize {
        let mut c = raw();
        ids.into_iter()
            .filter(|id| c.query_drop(format!("KILL {id}")).is_ok())
            .count()
    }
    fn count(table: &str) -> i64 {
        raw()
            .query_first::<i64, _>(format!("SELECT count(*) FROM {table}"))
            .unwrap()
            .unwrap()
    }
    const ZONES: (&'static str, &'static str) = ("+13:00", "-12:00");
    fn with_time_zone(prefix: &str, tz: &str) -> SqlBackend {
        let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&Self::url()).unwrap())
            .prefer_socket(false)
            .init(vec![format!("SET time_zone = '{tz}'")]);
        let b = SqlBackend::builder(Self::url())
            .mysql_opts(opts.clone())
            .table_prefix(prefix)
            .build()
            .unwrap();
        let mut c = mysql::Conn::new(opts).unwrap();
        let shown: Option<String> = c.query_first("SELECT @@session.time_zone").unwrap();
        assert_eq!(shown.as_deref(), Some(tz));
        b
    }
    fn take_over(b: &Isolated) -> Box<dyn TakeOver> {
        let sessions = format!("{}simba_session", b.0.table_prefix());
        Box::new(MyTakeOver {
            conn: raw(),
            sessions,
        })
    }
    fn exec(sql: &str) {
        raw().query_drop(sql).unwrap();
    }
}

#[test]
fn names_case_and_metacharacters() {
    sql_common::names_case_and_metacharacters(isolated(&MySql::url()));
}

struct MyTakeOver {
    conn: mysql::Conn,
    sessions: String,
}

impl TakeOver for MyTakeOver {
    fn lock_holder(
        &mut self,
        sessions: &str,
        holder: &simba_lease::SessionId,
        taker: &simba_lease::SessionId,
    ) {
        self.conn.query_drop("START TRANSACTION").unwrap();
        for s in [taker, holder] {
            let _: Vec<i64> = self
                .conn
                .exec(
                    format!("SELECT 1 FROM {sessions} WHERE session_id = ? FOR UPDATE"),
                    (s.as_str(),),
                )
                .unwrap();
        }
    }
    fn take_and_commit(
        &mut self,
        (sessions, leases): (&str, &str),
        name: &simba_lease::LeaseName,
        holder: &simba_lease::SessionId,
        taker: &simba_lease::SessionId,
    ) {
        self.conn
            .exec_drop(
                format!("UPDATE {leases} SET session_id = ?, token = token + 1 WHERE name = ?"),
                (taker.as_str(), name.as_str()),
            )
            .unwrap();
        self.conn
            .exec_drop(
                format!("UPDATE {sessions} SET version = version + 1 WHERE session_id IN (?, ?)"),
                (holder.as_str(), taker.as_str()),
            )
            .unwrap();
        self.conn.query_drop("COMMIT").unwrap();
    }
    fn keep_alive_waits(&mut self) -> bool {
        // The renewal is still running while the take-over holds the row: it waits for the
        // lock. (The process list shows the user's own threads without extra privileges.)
        let n: Option<i64> = raw()
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
                (format!("UPDATE {} SET expires_at%", self.sessions),),
            )
            .unwrap();
        n.unwrap_or(0) > 0
    }
}

fn opts() -> mysql::OptsBuilder {
    mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&MySql::url()).unwrap())
        .prefer_socket(false)
}

/// Issue 9.3: with `CLIENT_FOUND_ROWS` an unchanged upsert reports one affected row, like an
/// insert; the outcome must not depend on it. A lease held by another session is `Held`, the
/// holder's own acquire is the same term, and release and join keep working.
#[test]
fn client_found_rows_does_not_turn_held_into_acquired() {
    use mysql::consts::CapabilityFlags;
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{GroupName, LeaseName, Metadata};
    use std::time::Duration;

    let base = isolated(&MySql::url());
    let found = opts().additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS);
    // The flag is on: an upsert that changes nothing reports one row.
    let mut c = mysql::Conn::new(found.clone()).unwrap();
    c.query_drop("CREATE TEMPORARY TABLE found_rows_probe (k INT PRIMARY KEY, v INT)")
        .unwrap();
    c.query_drop("INSERT INTO found_rows_probe VALUES (1, 1)")
        .unwrap();
    c.query_drop("INSERT INTO found_rows_probe VALUES (1, 1) ON DUPLICATE KEY UPDATE v = v")
        .unwrap();
    assert_eq!(c.affected_rows(), 1, "CLIENT_FOUND_ROWS is in effect");

    let b = SqlBackend::builder(MySql::url())
        .mysql_opts(found)
        .table_prefix(base.0.table_prefix())
        .build()
        .unwrap();
    let lease = Duration::from_secs(60);
    let a = b.open_session(lease, &Metadata::default()).unwrap().id;
    let o = b.open_session(lease, &Metadata::default()).unwrap().id;
    let name = LeaseName::new("found-rows").unwrap();
    let Acquire::Acquired(t) = b.acquire(&a, &name).unwrap() else {
        panic!("a free lease is acquired")
    };
    match b.acquire(&o, &name).unwrap() {
        Acquire::Held(owner) => {
            assert_eq!(owner.session, a);
            assert_eq!(owner.token, t.token);
        }
        other => panic!("a lease held by another session must be Held: {other:?}"),
    }
    let Acquire::Acquired(same) = b.acquire(&a, &name).unwrap() else {
        panic!("the holder acquires again")
    };
    assert_eq!(same.token, t.token, "the same term");
    assert_eq!(b.owner(&name).unwrap().unwrap().session, a);
    assert!(b.release(&a, &name, t.token).unwrap());
    assert!(!b.release(&a, &name, t.token).unwrap());
    let Acquire::Acquired(next) = b.acquire(&o, &name).unwrap() else {
        panic!("a released lease is acquired")
    };
    assert!(next.token > t.token);
    let g = GroupName::new("found-rows").unwrap();
    b.join(&a, &g).unwrap();
    b.join(&a, &g).unwrap();
    assert_eq!(b.members(&g).unwrap().len(), 1);
    b.close_session(&a).unwrap();
    b.close_session(&o).unwrap();
}

/// Issue 9.4: a session that was expired when `purge_expired` read it but is live again
/// before its delete (here renewed by hand, as a step back of the database clock would, in a
/// transaction that commits once the purge waits for the row) keeps its row and its memberships; a session really purged loses
/// its memberships. Deterministic.
#[test]
fn purge_keeps_memberships_of_a_session_renewed_before_the_delete() {
    use simba_lease::spi::LeaseBackend;
    use simba_lease::{GroupName, Metadata};
    use std::time::Duration;

    let b = isolated(&MySql::url());
    let p = b.0.table_prefix().to_owned();
    let (sessions, members) = (format!("{p}simba_session"), format!("{p}simba_member"));
    let g = GroupName::new("renewed").unwrap();
    let short = Duration::from_millis(50);
    let renewed = b.open_session(short, &Metadata::default()).unwrap().id;
    let dead = b.open_session(short, &Metadata::default()).unwrap().id;
    b.join(&renewed, &g).unwrap();
    b.join(&dead, &g).unwrap();
    sql_common::until(Duration::from_secs(20), "both sessions expired", || {
        b.members(&g).unwrap().is_empty()
    });

    // The renewal is in flight (not committed) when the purge reads: the purge sees the
    // session expired, then its delete waits for the row until the renewal commits.
    let mut renewal = raw();
    renewal.query_drop("START TRANSACTION").unwrap();
    renewal
        .exec_drop(
            format!("UPDATE {sessions} SET expires_at = expires_at + 3600000 WHERE session_id = ?"),
            (renewed.as_str(),),
        )
        .unwrap();
    let b2 = b.clone();
    let purge = std::thread::spawn(move || b2.purge_expired());
    sql_common::until(
        Duration::from_secs(20),
        "the purge waits for the session row",
        || {
            let n: Option<i64> = raw()
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
                    (format!("DELETE FROM {sessions} %"),),
                )
                .unwrap();
            n.unwrap_or(0) > 0
        },
    );
    renewal.query_drop("COMMIT").unwrap();
    assert_eq!(
        purge.join().unwrap().unwrap(),
        1,
        "only the dead session is purged"
    );

    let left: Vec<String> = raw()
        .query(format!(
            "SELECT session_id FROM {members} ORDER BY session_id"
        ))
        .unwrap();
    assert_eq!(
        left,
        [renewed.as_str().to_owned()],
        "the renewed session keeps its membership, the purged one loses it"
    );
    let ids: Vec<_> = b
        .members(&g)
        .unwrap()
        .into_iter()
        .map(|m| m.session)
        .collect();
    assert_eq!(ids, [renewed]);
}

/// Issue 9.6: every remaining time is the database's `expires - now`, rounded down. The
/// connections' clock is frozen half a millisecond past a millisecond (`SET timestamp`), so a
/// lease of 10 s leaves 9.9995 s: every reply says 9999 ms, never 10 000 ms.
#[test]
fn remaining_times_are_measured_and_rounded_down() {
    use simba_lease::spi::{Acquire, LeaseBackend};
    use simba_lease::{LeaseName, Metadata};
    use std::time::Duration;

    let base = isolated(&MySql::url());
    let frozen = opts().init(vec!["SET timestamp = 1700000000.500500"]);
    let b = SqlBackend::builder(MySql::url())
        .mysql_opts(frozen)
        .table_prefix(base.0.table_prefix())
        .build()
        .unwrap();
    let lease = Duration::from_secs(10);
    let expect = Duration::from_millis(9999);
    let grant = b.open_session(lease, &Metadata::default()).unwrap();
    assert_eq!(grant.remaining, expect, "open_session");
    let other = b.open_session(lease, &Metadata::default()).unwrap().id;
    assert_eq!(
        b.keep_alive(&grant.id, lease).unwrap().remaining,
        expect,
        "keep_alive"
    );
    let name = LeaseName::new("frozen").unwrap();
    match b.acquire(&grant.id, &name).unwrap() {
        Acquire::Acquired(t) => assert_eq!(t.remaining, expect, "acquire"),
        other => panic!("{other:?}"),
    }
    match b.acquire(&other, &name).unwrap() {
        Acquire::Held(o) => assert_eq!(o.remaining, expect, "held"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.owner(&name).unwrap().unwrap().remaining, expect, "owner");
    let ka = b.keep_alive(&grant.id, lease).unwrap();
    assert_eq!(ka.leases[0].remaining, expect, "held lease");
}

/// Issue 9.5: connecting detects the server's flavor and version (MariaDB 10.11 on the test
/// machines, MySQL 8 in production) and accepts it.
#[test]
fn server_flavor_and_version_are_detected() {
    use simba_lease::backends::Flavor;

    let b = isolated(&MySql::url());
    let server = b.0.server().expect("detected on connect");
    let (version, comment): (String, String) = raw()
        .query_first("SELECT VERSION(), @@version_comment")
        .unwrap()
        .unwrap();
    assert_eq!(server.reported, version);
    let maria = version.contains("MariaDB") || comment.contains("MariaDB");
    let (major, minor, _) = server.version;
    if maria {
        assert_eq!(server.flavor, Flavor::MariaDb);
        assert!((major, minor) >= (10, 6), "{server:?}");
    } else {
        assert_eq!(server.flavor, Flavor::MySql);
        assert!(major >= 8, "{server:?}");
    }
    assert!(
        version.starts_with(&format!("{major}.{minor}.")),
        "{version} vs {server:?}"
    );
}

/// MySQL/MariaDB over TLS (issue 12): TLS-only servers from `.ci/servers.sh`
/// (`require_secure_transport`; user simba/simba-secret REQUIRE SSL; simba_cert REQUIRE X509).
#[cfg(feature = "tls")]
mod tls {
    use super::sql_common::tls::{
        assert_auth_fails, assert_connects, assert_tls_fails, bad_options_are_named, env_url, file,
        trusted, with,
    };
    use simba_lease::{Error, TlsFailure};

    fn url() -> String {
        env_url(
            "SIMBA_MYSQL_TLS_URL",
            "mysql://simba:simba-secret@127.0.0.1:3316/test",
        )
    }

    fn expired() -> String {
        env_url(
            "SIMBA_MYSQL_TLS_EXPIRED_URL",
            "mysql://simba:simba-secret@127.0.0.1:3317/test",
        )
    }

    fn wrong_host() -> String {
        env_url(
            "SIMBA_MYSQL_TLS_WRONG_HOST_URL",
            "mysql://simba:simba-secret@127.0.0.1:3318/test",
        )
    }

    mod tck {
        simba_lease::tck_suite!(|| super::super::sql_common::isolated(&super::trusted(
            &super::url()
        )));
    }

    #[test]
    fn verify_full_with_the_ca_and_a_password() {
        assert_connects(&trusted(&url()));
        assert_connects(&with(
            &url(),
            &format!("sslmode=verify-full&sslrootcert={}", file("ca.pem")),
        ));
        assert_connects(&with(&url(), &format!("ca={}", file("ca.pem"))));
        // The builder's methods of the same names win over the URL's options.
        let b = simba_lease::backends::SqlBackend::builder(with(&url(), "sslmode=disable"))
            .sslmode("verify-full")
            .ca(file("ca.pem"))
            .pool_size(1)
            .build()
            .unwrap_or_else(|e| panic!("{}", e.report()));
        assert!(!format!("{b:?}").contains("simba-secret"));
    }

    #[test]
    fn plaintext_to_a_tls_only_server_fails_clearly() {
        // MariaDB checks the user's REQUIRE SSL before require_secure_transport.
        for opts in ["", "sslmode=disable"] {
            assert_auth_fails(&with(&url(), opts), "Access denied");
        }
    }

    #[test]
    fn only_prefer_falls_back_to_plaintext() {
        use super::Db;
        // The machine's MariaDB (`SIMBA_MYSQL_URL`) has no TLS (Debian's default: have_ssl
        // DISABLED): `prefer` connects in plaintext, every other mode refuses.
        let plain = super::MySql::url();
        assert_connects(&with(&plain, "sslmode=prefer"));
        for mode in ["require", "verify-ca", "verify-full"] {
            let e = super::sql_common::tls::connect_err(&with(
                &plain,
                &format!("sslmode={mode}&ca={}", file("ca.pem")),
            ));
            assert!(
                matches!(
                    e,
                    Error::Tls {
                        failure: TlsFailure::NotOffered,
                        ..
                    }
                ),
                "{mode}: {e:?}"
            );
            assert!(
                e.report().to_string().contains("secure connection"),
                "{mode}: {}",
                e.report()
            );
        }
    }

    #[test]
    fn require_and_prefer_encrypt_without_a_ca() {
        assert_connects(&with(&url(), "sslmode=require"));
        assert_connects(&with(&url(), "sslmode=prefer"));
        assert_connects(&with(&expired(), "sslmode=require"));
        assert_tls_fails(
            &with(
                &url(),
                &format!("sslmode=require&ca={}", file("other-ca.pem")),
            ),
            TlsFailure::UnknownIssuer,
        );
    }

    #[test]
    fn with_another_ca_fails() {
        // (Without `ca` the mysql crate trusts the Mozilla roots, which do not hold the CI's
        // CA either.)
        assert_tls_fails(
            &with(&url(), "sslmode=verify-full"),
            TlsFailure::UnknownIssuer,
        );
        assert_tls_fails(
            &with(
                &url(),
                &format!("sslmode=verify-full&ca={}", file("other-ca.pem")),
            ),
            TlsFailure::UnknownIssuer,
        );
    }

    #[test]
    fn expired_certificate_fails() {
        assert_tls_fails(&trusted(&expired()), TlsFailure::Expired);
        assert_tls_fails(
            &with(
                &expired(),
                &format!("sslmode=verify-ca&ca={}", file("ca.pem")),
            ),
            TlsFailure::Expired,
        );
    }

    #[test]
    fn host_name_mismatch_fails_verify_full_only() {
        assert_tls_fails(&trusted(&wrong_host()), TlsFailure::NameMismatch);
        assert_connects(&with(
            &wrong_host(),
            &format!("sslmode=verify-ca&ca={}", file("ca.pem")),
        ));
        assert_connects(&trusted(&url().replacen("127.0.0.1", "localhost", 1)));
    }

    #[test]
    fn wrong_password_fails_clearly() {
        let pw = "Wr0ng-Pa55word";
        let u = url().replacen("simba-secret", pw, 1);
        let e = super::sql_common::tls::connect_err(&trusted(&u));
        assert!(matches!(e, Error::Authentication { .. }), "{e:?}");
        let report = e.report().to_string();
        assert!(report.contains("Access denied"), "{report}");
        for text in [e.to_string(), format!("{e:?}"), report] {
            assert!(!text.contains(pw), "{text}");
        }
    }

    #[test]
    fn client_certificate() {
        // simba_cert is REQUIRE X509: a client certificate signed by the CA.
        let u = url().replacen("simba:", "simba_cert:", 1);
        assert_connects(&with(
            &trusted(&u),
            &format!("cert={}&key={}", file("client.pem"), file("client.key")),
        ));
        assert_auth_fails(&trusted(&u), "Access denied");
    }

    #[test]
    fn bad_tls_options_are_named() {
        bad_options_are_named(&url());
    }
}
