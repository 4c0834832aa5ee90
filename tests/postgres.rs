//! The TCK and backend-specific tests on PostgreSQL (`SIMBA_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).

mod sql_common;

use simba_lease::backends::SqlBackend;
use simba_lease::spi::{Acquire, LeaseBackend, Notification, Subscription};
use simba_lease::{GroupName, LeaseName, Metadata, SessionId, Term};
use sql_common::{isolated, Db, Isolated, TakeOver};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Postgres;

sql_suite!(Postgres);

fn raw() -> postgres::Client {
    Postgres::url()
        .parse::<postgres::Config>()
        .unwrap()
        .connect(postgres::NoTls)
        .unwrap()
}

impl Db for Postgres {
    fn url() -> String {
        std::env::var("SIMBA_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }
    fn session_tables() -> Vec<String> {
        raw()
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name LIKE 't%simba_session'",
                &[],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .unwrap_or_default()
    }
    fn kill(ids: Vec<u64>) -> usize {
        let mut c = raw();
        ids.into_iter()
            .filter(|pid| {
                c.query_one("SELECT pg_terminate_backend($1)", &[&(*pid as i32)])
                    .unwrap()
                    .get::<_, bool>(0)
            })
            .count()
    }
    fn count(table: &str) -> i64 {
        raw()
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get::<_, i64>(0)
    }
    const ZONES: (&'static str, &'static str) = ("Pacific/Kiritimati", "Etc/GMT+12");
    fn with_time_zone(prefix: &str, tz: &str) -> SqlBackend {
        let mut config: postgres::Config = Self::url().parse().unwrap();
        config.options(&format!("-c TimeZone={tz}"));
        let b = SqlBackend::builder(Self::url())
            .postgres_config(config.clone())
            .table_prefix(prefix)
            .build()
            .unwrap();
        // The setting reaches the server (checked on a plain connection with the same config).
        let mut c = config.connect(postgres::NoTls).unwrap();
        let shown: String = c.query_one("SHOW TimeZone", &[]).unwrap().get(0);
        assert_eq!(shown, tz);
        b
    }
    fn take_over(b: &Isolated) -> Box<dyn TakeOver> {
        let app = format!("simba-lease/{}", b.0.table_prefix());
        Box::new(PgTakeOver { client: raw(), app })
    }
    fn exec(sql: &str) {
        raw().batch_execute(sql).unwrap();
    }
}

#[test]
fn names_case_and_metacharacters() {
    let b = isolated(&Postgres::url());
    sql_common::names_case_and_metacharacters(b.clone());
    // PostgreSQL text cannot hold NUL: rejected before any I/O, with a typed error.
    let nul = simba_lease::Metadata::new("a\0b").unwrap();
    assert!(matches!(
        b.open_session(Duration::from_secs(1), &nul),
        Err(simba_lease::Error::InvalidConfig { .. })
    ));
}

struct PgTakeOver {
    client: postgres::Client,
    app: String,
}

impl TakeOver for PgTakeOver {
    fn lock_holder(
        &mut self,
        sessions: &str,
        holder: &simba_lease::SessionId,
        taker: &simba_lease::SessionId,
    ) {
        self.client.batch_execute("BEGIN").unwrap();
        self.client
            .query(
                &format!(
                    "SELECT 1 FROM {sessions} \
                     WHERE session_id IN ($1::text::bpchar, $2::text::bpchar) \
                     ORDER BY session_id FOR NO KEY UPDATE"
                ),
                &[&holder.as_str(), &taker.as_str()],
            )
            .unwrap();
    }
    fn take_and_commit(
        &mut self,
        (sessions, leases): (&str, &str),
        name: &simba_lease::LeaseName,
        holder: &simba_lease::SessionId,
        taker: &simba_lease::SessionId,
    ) {
        self.client
            .execute(
                &format!(
                    "UPDATE {leases} SET session_id = $1::text::bpchar, token = token + 1 \
                     WHERE name = $2::text"
                ),
                &[&taker.as_str(), &name.as_str()],
            )
            .unwrap();
        self.client
            .execute(
                &format!(
                    "UPDATE {sessions} SET version = version + 1 \
                     WHERE session_id IN ($1::text::bpchar, $2::text::bpchar)"
                ),
                &[&holder.as_str(), &taker.as_str()],
            )
            .unwrap();
        self.client.batch_execute("COMMIT").unwrap();
    }
    fn keep_alive_waits(&mut self) -> bool {
        let mut other = raw();
        other
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&self.app],
            )
            .unwrap()
            .get::<_, i64>(0)
            > 0
    }
}

/// Notifications a subscriber received, in order.
struct Inbox {
    rx: crossbeam_channel::Receiver<Notification>,
    _sub: Subscription,
}

const PATIENCE: Duration = Duration::from_secs(20);

impl Inbox {
    fn subscribe(b: &dyn LeaseBackend) -> Inbox {
        let (tx, rx) = crossbeam_channel::unbounded();
        let sub = b
            .subscribe(Arc::new(move |n: &Notification| {
                let _ = tx.send(n.clone());
            }))
            .expect("subscribe")
            .expect("PostgreSQL pushes notifications");
        Inbox { rx, _sub: sub }
    }

    /// Everything received up to and including the first `n`, waiting at most `PATIENCE`.
    fn until(&self, n: &Notification) -> Vec<Notification> {
        let end = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(got) => {
                    let done = got == *n;
                    seen.push(got);
                    if done {
                        return seen;
                    }
                }
                Err(_) => panic!("no {n:?} within {PATIENCE:?}; received {seen:?}"),
            }
        }
    }
}

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).unwrap()
}

fn group(s: &str) -> GroupName {
    GroupName::new(s).unwrap()
}

fn term(b: &dyn LeaseBackend, s: &SessionId, n: &LeaseName) -> Term {
    match b.acquire(s, n).unwrap() {
        Acquire::Acquired(t) => t,
        Acquire::Held(o) => panic!("{n} held by {o:?}"),
    }
}

/// Commits are notified in commit order, so a marker (a join of a group of its own) after a
/// change that must not notify proves it did not.
#[test]
fn changes_are_notified_once_committed() {
    let b = isolated(&Postgres::url());
    let inbox = Inbox::subscribe(&*b);
    let lease = Duration::from_secs(60);
    let (s1, s2) = (
        b.open_session(lease, &Metadata::default()).unwrap().id,
        b.open_session(lease, &Metadata::default()).unwrap().id,
    );
    let (job, g) = (name("job"), group("workers"));
    let mut markers = 0;
    let mut marker = || {
        markers += 1;
        let m = group(&format!("marker-{markers}"));
        b.join(&s1, &m).unwrap();
        Notification::GroupChanged(m)
    };

    // A new term is notified; a re-acquire by the holder is not.
    let t1 = term(&*b, &s1, &job);
    assert_eq!(term(&*b, &s1, &job).token, t1.token);
    let m = marker();
    let seen = inbox.until(&m);
    assert_eq!(
        seen,
        vec![Notification::Acquired(job.clone()), m],
        "one Acquired for the new term, none for the re-acquire"
    );

    // A release is notified; a release with a wrong token, or by another session, is not.
    assert!(!b.release(&s2, &job, t1.token).unwrap());
    assert!(b.release(&s1, &job, t1.token).unwrap());
    let m = marker();
    assert_eq!(
        inbox.until(&m),
        vec![Notification::Released(job.clone()), m]
    );

    // Closing a holder's session frees its lease and its memberships: both are notified.
    let t2 = term(&*b, &s2, &job);
    assert!(t2.token > t1.token);
    b.join(&s2, &g).unwrap();
    b.join(&s2, &g).unwrap(); // already a member: nothing changes
    let m = marker();
    assert_eq!(
        inbox.until(&m),
        vec![
            Notification::Acquired(job.clone()),
            Notification::GroupChanged(g.clone()),
            m
        ]
    );
    b.close_session(&s2).unwrap();
    let m = marker();
    let seen = inbox.until(&m);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.contains(&Notification::Released(job.clone())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&Notification::GroupChanged(g.clone())),
        "{seen:?}"
    );

    // Join and leave are notified; a leave of a group the session is not in is not.
    b.join(&s1, &g).unwrap();
    assert!(b.leave(&s1, &g).unwrap());
    assert!(!b.leave(&s1, &g).unwrap());
    let m = marker();
    assert_eq!(
        inbox.until(&m),
        vec![
            Notification::GroupChanged(g.clone()),
            Notification::GroupChanged(g.clone()),
            m
        ]
    );
    b.close_session(&s1).unwrap();
}

/// A read-write release, a writer leaving its place and a close ending a term are notified
/// as releases of the name (waiters try at once); a grant, a wrong release and a waiting
/// writer's registration are not.
#[test]
fn rw_releases_are_notified() {
    use simba_lease::spi::{RwAcquire, RwMode};
    let b = isolated(&Postgres::url());
    let inbox = Inbox::subscribe(&*b);
    let lease = Duration::from_secs(60);
    let open = || b.open_session(lease, &Metadata::default()).unwrap().id;
    let (r, w, m) = (open(), open(), open());
    let rw = name("rw");
    let mut markers = 0;
    let mut marker = || {
        markers += 1;
        let g = group(&format!("marker-{markers}"));
        b.join(&m, &g).unwrap();
        Notification::GroupChanged(g)
    };
    let RwAcquire::Acquired(t) = b.acquire_rw(&r, &rw, RwMode::Read, lease).unwrap() else {
        panic!("a reader");
    };
    assert!(!b.release_rw(&r, &rw, RwMode::Write, t.token).unwrap());
    assert!(matches!(
        b.acquire_rw(&w, &rw, RwMode::Write, lease).unwrap(),
        RwAcquire::Busy { .. }
    ));
    let k = marker();
    assert_eq!(
        inbox.until(&k),
        vec![k],
        "a grant, a wrong release, a registration"
    );
    assert!(b.release_rw(&r, &rw, RwMode::Read, t.token).unwrap());
    let k = marker();
    assert_eq!(inbox.until(&k), vec![Notification::Released(rw.clone()), k]);
    assert!(b.leave_rw_queue(&w, &rw).unwrap());
    let k = marker();
    assert_eq!(inbox.until(&k), vec![Notification::Released(rw.clone()), k]);
    let RwAcquire::Acquired(_) = b
        .acquire_rw(&r, &rw, RwMode::Write, Duration::ZERO)
        .unwrap()
    else {
        panic!("a writer once the waiting one left");
    };
    b.close_session(&r).unwrap();
    let k = marker();
    assert_eq!(inbox.until(&k), vec![Notification::Released(rw.clone()), k]);
    for s in [w, m] {
        b.close_session(&s).unwrap();
    }
}

/// A purge of an expired session notifies its groups and the leases it still pointed at.
#[test]
fn purge_notifies_groups_and_leases_of_expired_sessions() {
    let b = isolated(&Postgres::url());
    let inbox = Inbox::subscribe(&*b);
    let s = b
        .open_session(Duration::from_millis(300), &Metadata::default())
        .unwrap()
        .id;
    let (job, g) = (name("job"), group("workers"));
    term(&*b, &s, &job);
    b.join(&s, &g).unwrap();
    inbox.until(&Notification::GroupChanged(g.clone()));
    sql_common::until(PATIENCE, "the session expired", || {
        b.members(&g).unwrap().is_empty()
    });
    assert_eq!(b.purge_expired().unwrap(), 1);
    let seen = inbox.until(&Notification::GroupChanged(g.clone()));
    let end = inbox.until(&Notification::Released(job.clone()));
    assert!(seen.len() + end.len() == 2, "{seen:?} {end:?}");
}

/// Terminating the listening connection publishes `Resync`; the listener connects and listens
/// again (another `Resync`, since changes in between were not notified) and later changes are
/// notified again.
#[test]
fn listener_reconnects_after_its_connection_is_terminated() {
    let b = isolated(&Postgres::url());
    let inbox = Inbox::subscribe(&*b);
    let app = b.0.listener_name().expect("a listening connection");
    let listeners = || -> Vec<i32> {
        raw()
            .query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let before = listeners();
    assert_eq!(before.len(), 1, "one listening connection: {before:?}");
    assert_eq!(Postgres::kill(vec![before[0] as u64]), 1);
    inbox.until(&Notification::Resync);
    inbox.until(&Notification::Resync);
    let after = listeners();
    assert_eq!(after.len(), 1, "listening again: {after:?}");
    assert_ne!(after, before);
    let s = b
        .open_session(Duration::from_secs(60), &Metadata::default())
        .unwrap()
        .id;
    let job = name("job");
    let t = term(&*b, &s, &job);
    assert!(b.release(&s, &job, t.token).unwrap());
    let seen = inbox.until(&Notification::Released(job.clone()));
    assert_eq!(
        seen,
        vec![
            Notification::Acquired(job),
            Notification::Released(name("job"))
        ]
    );
    b.close_session(&s).unwrap();
}

/// Dropping the backend stops its listener (the thread closes the connection on its own).
#[test]
fn dropping_the_backend_closes_the_listening_connection() {
    let b = isolated(&Postgres::url());
    let inbox = Inbox::subscribe(&*b);
    let app = b.0.listener_name().expect("a listening connection");
    let count = || -> i64 {
        raw()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(count(), 1);
    drop(b);
    sql_common::until(PATIENCE, "the listening connection closed", || count() == 0);
    drop(inbox);
}

/// PostgreSQL over TLS (issue 12): TLS-only servers from `.ci/servers.sh` (scram-sha-256
/// user simba/simba-secret; simba_cert also needs a client certificate).
#[cfg(feature = "tls")]
mod tls {
    use super::sql_common::tls::{
        assert_auth_fails, assert_connects, assert_tls_fails, bad_options_are_named, env_url, file,
        trusted, with,
    };
    use simba_lease::spi::{LeaseBackend, Notification};
    use simba_lease::{Metadata, TlsFailure};
    use std::time::Duration;

    fn url() -> String {
        env_url(
            "SIMBA_PG_TLS_URL",
            "postgres://simba:simba-secret@127.0.0.1:5442/test",
        )
    }

    fn expired() -> String {
        env_url(
            "SIMBA_PG_TLS_EXPIRED_URL",
            "postgres://simba:simba-secret@127.0.0.1:5443/test",
        )
    }

    fn wrong_host() -> String {
        env_url(
            "SIMBA_PG_TLS_WRONG_HOST_URL",
            "postgres://simba:simba-secret@127.0.0.1:5444/test",
        )
    }

    mod tck {
        // Also the notifications: the LISTEN connection uses the same TLS settings.
        simba_lease::tck_suite!(|| super::super::sql_common::isolated(&super::trusted(
            &super::url()
        )));
    }

    #[test]
    fn verify_full_with_the_ca_and_scram() {
        assert_connects(&trusted(&url()));
        // `sslrootcert` is the same option as `ca`.
        assert_connects(&with(
            &url(),
            &format!("sslmode=verify-full&sslrootcert={}", file("ca.pem")),
        ));
        // `ca` alone means verify-full.
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
    fn notifications_arrive_over_tls() {
        // The server refuses plaintext: a notification proves the LISTEN connection is TLS.
        let b = super::isolated(&trusted(&url()));
        let inbox = super::Inbox::subscribe(&*b);
        let s = b
            .open_session(Duration::from_secs(60), &Metadata::default())
            .unwrap()
            .id;
        let job = super::name("job");
        super::term(&*b, &s, &job);
        inbox.until(&Notification::Acquired(job));
        assert!(b.0.listener_name().is_some());
    }

    #[test]
    fn plaintext_to_a_tls_only_server_fails_clearly() {
        for opts in ["", "sslmode=disable"] {
            assert_auth_fails(&with(&url(), opts), "no encryption");
        }
    }

    #[test]
    fn require_and_prefer_encrypt_without_a_ca() {
        // libpq's meaning: encrypted, the certificate not checked (even an expired one).
        assert_connects(&with(&url(), "sslmode=require"));
        assert_connects(&with(&url(), "sslmode=prefer"));
        assert_connects(&with(&expired(), "sslmode=require"));
        // With a CA, `require` checks the chain.
        assert_tls_fails(
            &with(
                &url(),
                &format!("sslmode=require&ca={}", file("other-ca.pem")),
            ),
            TlsFailure::UnknownIssuer,
        );
    }

    #[test]
    fn without_the_ca_or_with_another_ca_fails() {
        // The platform's roots do not hold the CI's throwaway CA.
        assert_tls_fails(
            &with(&url(), "sslmode=verify-full"),
            TlsFailure::UnknownIssuer,
        );
        assert_tls_fails(
            &with(&url(), "sslmode=verify-ca"),
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
        // verify-ca checks the chain, not the name.
        assert_connects(&with(
            &wrong_host(),
            &format!("sslmode=verify-ca&ca={}", file("ca.pem")),
        ));
        // The good certificate names 127.0.0.1 and localhost.
        assert_connects(&trusted(&url().replacen("127.0.0.1", "localhost", 1)));
    }

    #[test]
    fn wrong_password_fails_clearly() {
        let pw = "Wr0ng-Pa55word";
        let u = url().replacen("simba-secret", pw, 1);
        let e = super::sql_common::tls::connect_err(&trusted(&u));
        assert!(
            matches!(e, simba_lease::Error::Authentication { .. }),
            "{e:?}"
        );
        let report = e.report().to_string();
        assert!(
            report.contains("password authentication failed"),
            "{report}"
        );
        for text in [e.to_string(), format!("{e:?}"), report] {
            assert!(!text.contains(pw), "{text}");
        }
    }

    #[test]
    fn client_certificate() {
        // simba_cert must show a client certificate signed by the CA (clientcert=verify-ca).
        let u = url().replacen("simba:", "simba_cert:", 1);
        assert_connects(&with(
            &trusted(&u),
            &format!("cert={}&key={}", file("client.pem"), file("client.key")),
        ));
        assert_connects(&with(
            &trusted(&u),
            &format!(
                "sslcert={}&sslkey={}",
                file("client.pem"),
                file("client.key")
            ),
        ));
        assert_auth_fails(&trusted(&u), "certificate");
    }

    #[test]
    fn bad_tls_options_are_named() {
        bad_options_are_named(&url());
    }
}
