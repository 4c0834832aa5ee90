//! TLS (`rediss://`, issue 12) against the servers of `ensure_redis_tls`.

use crate::common::*;
use simba_lease::backends::redis::{RedisBackend, Role};
use simba_lease::spi::LeaseBackend;
use simba_lease::{Error, TlsFailure};
use std::time::Duration;

pub(super) fn url() -> String {
    env_url("SIMBA_REDIS_TLS_URL", "rediss://127.0.0.1:6390")
}

pub(super) fn file(name: &str) -> String {
    let dir = std::env::var("SIMBA_REDIS_TLS_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/ci/redis-tls").to_owned());
    format!("{dir}/{name}")
}

/// `url` with `ca` set to the CI's CA.
pub(super) fn trusted(url: &str) -> String {
    with_options(url, &format!("ca={}&connect_timeout=3s", file("ca.pem")))
}

fn backend_error(url: &str) -> Error {
    match RedisBackend::connect(url) {
        Ok(b) => match b.ping() {
            Ok(()) => panic!("{url}: connected"),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `connect` fails with `Error::Tls` for `failure`.
fn assert_handshake_fails(url: &str, failure: TlsFailure) {
    let e = backend_error(url);
    assert!(
        matches!(&e, Error::Tls { failure: f, .. } if *f == failure),
        "{url}: {e:?}"
    );
}

// A 2 s lease: the debug build's TLS handshakes of new pool connections take hundreds of
// ms on a loaded 2-core machine, enough to end a 600 ms term before a case looks at it.
mod tck {
    simba_lease::tck_suite!(
        || std::sync::Arc::new(crate::common::Isolated::new(
            &super::trusted(&super::url()),
            ""
        )),
        lease = std::time::Duration::from_secs(2)
    );
}

#[test]
fn tls_with_the_ca_answers_over_tls_only() {
    let b = RedisBackend::connect(&trusted(&url())).unwrap();
    b.ping().unwrap();
    // The server has no plaintext port: the connection really is TLS.
    let plain = url().replacen("rediss://", "redis://", 1);
    let e = simba_lease::connect(&format!("{plain}?connect_timeout=2s"))
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::Backend { .. } | Error::Timeout { .. }),
        "{e:?}"
    );
}

#[test]
fn tls_without_the_ca_fails() {
    // The platform's roots do not hold the CI's throwaway CA.
    assert_handshake_fails(
        &with_options(&url(), "connect_timeout=3s"),
        TlsFailure::UnknownIssuer,
    );
}

#[test]
fn tls_with_another_ca_fails() {
    assert_handshake_fails(
        &with_options(
            &url(),
            &format!("ca={}&connect_timeout=3s", file("other-ca.pem")),
        ),
        TlsFailure::UnknownIssuer,
    );
}

#[test]
fn tls_certificate_for_another_host_fails() {
    let url = env_url("SIMBA_REDIS_TLS_WRONG_HOST_URL", "rediss://127.0.0.1:6392");
    assert_handshake_fails(&trusted(&url), TlsFailure::NameMismatch);
}

#[test]
fn tls_expired_certificate_fails() {
    let url = env_url("SIMBA_REDIS_TLS_EXPIRED_URL", "rediss://127.0.0.1:6391");
    assert_handshake_fails(&trusted(&url), TlsFailure::Expired);
}

#[test]
fn tls_acl_user_and_password() {
    let u = url().replacen("rediss://", "rediss://simba:simba-secret@", 1);
    let b = RedisBackend::connect(&trusted(&u)).unwrap();
    let who = b
        .scripting()
        .command(Role::Other, &["ACL", "WHOAMI"])
        .unwrap();
    assert_eq!(who.as_str(), Some("simba"), "{who:?}");
    assert!(!format!("{b:?}").contains("simba-secret"), "{b:?}");

    let pw = "Wr0ng-Pa55word";
    let u = url().replacen("rediss://", &format!("rediss://simba:{pw}@"), 1);
    let e = backend_error(&trusted(&u));
    for text in [e.to_string(), format!("{e:?}"), e.report().to_string()] {
        assert!(!text.contains(pw), "{text}");
    }
    assert!(matches!(e, Error::Authentication { .. }), "{e:?}");
}

#[test]
fn tls_client_certificate() {
    // This server requires a client certificate signed by the CA.
    let auth_url = env_url("SIMBA_REDIS_TLS_CLIENT_AUTH_URL", "rediss://127.0.0.1:6393");
    let u = with_options(
        &trusted(&auth_url),
        &format!("cert={}&key={}", file("client.pem"), file("client.key")),
    );
    RedisBackend::connect(&u).unwrap().ping().unwrap();
    assert_handshake_fails(&trusted(&auth_url), TlsFailure::ClientCertificate);
    let e = simba_lease::connect(&with_options(
        &trusted(&url()),
        &format!("cert={}", file("client.pem")),
    ))
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::InvalidConfig { setting, .. } if setting == "key"),
        "{e:?}"
    );
}

/// The builder's methods have the URL options' names and meanings, override them, and
/// are checked the same way.
#[test]
fn tls_builder_methods_are_the_url_options() {
    let u = url().replacen("rediss://", "rediss://simba:simba-secret@", 1);
    let b = RedisBackend::builder(u.as_str())
        .ca(file("ca.pem"))
        .prefix("simba-builder")
        .pool_size(2)
        .query_timeout(Duration::from_secs(3))
        .build()
        .unwrap_or_else(|e| panic!("{}", e.report()));
    b.ping().unwrap();
    assert_eq!(
        (b.config().prefix.as_str(), b.config().pool_size),
        ("simba-builder", 2)
    );
    assert_eq!(b.config().query_timeout, Duration::from_secs(3));
    // The method wins over the URL's option.
    let other = with_options(&u, &format!("ca={}", file("other-ca.pem")));
    RedisBackend::builder(other.as_str())
        .ca(file("ca.pem"))
        .build()
        .unwrap_or_else(|e| panic!("{}", e.report()))
        .ping()
        .unwrap();
    let e = RedisBackend::builder(u.as_str())
        .ca(file("other-ca.pem"))
        .build()
        .expect_err("another CA");
    assert!(
        matches!(
            e,
            Error::Tls {
                failure: TlsFailure::UnknownIssuer,
                ..
            }
        ),
        "{e:?}"
    );
    let builder = RedisBackend::builder(u.as_str()).cert(file("client.pem"));
    assert!(
        !format!("{builder:?}").contains("simba-secret"),
        "{builder:?}"
    );
    let e = builder.build().expect_err("cert without key");
    assert!(
        matches!(&e, Error::InvalidConfig { setting, .. } if setting == "key"),
        "{e:?}"
    );
    // TLS files on a plaintext URL, and counts out of the URL's bounds: refused alike.
    let e = RedisBackend::builder(standalone_url())
        .ca(file("ca.pem"))
        .build()
        .expect_err("plaintext");
    assert!(
        matches!(&e, Error::InvalidConfig { setting, .. } if setting == "ca"),
        "{e:?}"
    );
    let e = RedisBackend::builder(standalone_url())
        .pool_size(1001)
        .build()
        .expect_err("pool_size");
    assert!(
        matches!(&e, Error::InvalidConfig { setting, .. } if setting == "pool_size"),
        "{e:?}"
    );
}

#[test]
fn tls_files_are_checked() {
    let not_pem = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    for (opts, setting) in [
        ("ca=/nonexistent/ca.pem".to_owned(), "ca"),
        (format!("ca={not_pem}"), "ca"),
        (format!("ca={}", file("client.key")), "ca"),
        (format!("cert={}&key={not_pem}", file("client.pem")), "key"),
        // A key that does not belong to the certificate.
        (
            format!("cert={}&key={}", file("client.pem"), file("server.key")),
            "key",
        ),
    ] {
        let e = simba_lease::connect(&with_options(&url(), &opts))
            .err()
            .unwrap();
        assert!(
            matches!(&e, Error::InvalidConfig { setting: s, .. } if s == setting),
            "{opts}: {e:?}"
        );
    }
    // TLS options on a plaintext URL: refused, never ignored.
    let e = simba_lease::connect(&with_options(
        &standalone_url(),
        &format!("ca={}", file("ca.pem")),
    ))
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::InvalidConfig { setting, .. } if setting == "ca"),
        "{e:?}"
    );
}

pub(super) fn cluster_url() -> String {
    env_url(
        "SIMBA_REDIS_TLS_CLUSTER_URL",
        "rediss+cluster://127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102",
    )
}

// A 2 s lease, as for the one-server TLS suite.
mod cluster_tck {
    simba_lease::tck_suite!(
        || std::sync::Arc::new(crate::common::Isolated::new(
            &super::trusted(&super::cluster_url()),
            ""
        )),
        lease = std::time::Duration::from_secs(2)
    );
}

/// The scan reaches every master over TLS (the seed's TLS settings carry over).
#[test]
fn tls_cluster_scan_reaches_every_master() {
    let b = Isolated::new(&trusted(&cluster_url()), "");
    let keys: Vec<String> = (0..30).map(|i| format!("{}:scan:{i}", b.prefix)).collect();
    for k in &keys {
        b.command(&["SET", k, "1"]);
    }
    let mut found = b
        .inner
        .scripting()
        .scan(&format!("{}:scan:*", b.prefix), 1000)
        .unwrap();
    found.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(found, expected);
}

/// `rediss+cluster://` to the plaintext test cluster: its seeds answer a plaintext `PING`.
#[test]
fn tls_to_a_plaintext_cluster_is_not_offered() {
    let plain = crate::common::cluster_url().replacen("redis+cluster://", "rediss+cluster://", 1);
    assert_handshake_fails(
        &with_options(&plain, "connect_timeout=2s"),
        TlsFailure::NotOffered,
    );
}

#[test]
fn tls_cluster_with_another_ca_fails() {
    assert_handshake_fails(
        &with_options(
            &cluster_url(),
            &format!("ca={}&connect_timeout=3s", file("other-ca.pem")),
        ),
        TlsFailure::UnknownIssuer,
    );
}
