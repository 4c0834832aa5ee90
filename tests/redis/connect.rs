//! Connecting and configuring: URL options, refused passwords, names rejected before any
//! I/O, the server's error messages, and the connect timeout.

use crate::common::*;
use simba_lease::backends::redis::RedisBackend;
use simba_lease::spi::LeaseBackend;
use simba_lease::{Config, Error, GroupName, LeaseName, Session};
use std::time::{Duration, Instant};

/// A user or password the server refuses is `Error::Authentication` (ACL `WRONGPASS`), on
/// one server and through a cluster's seeds, and no error text shows the password.
#[test]
fn a_refused_password_is_an_authentication_error() {
    let pw = "Wr0ng-Pa55word";
    for url in [standalone_url(), cluster_url()] {
        let (scheme, rest) = url.split_once("://").unwrap();
        let url = format!("{scheme}://no-such-user-{}:{pw}@{rest}", std::process::id());
        let e = RedisBackend::connect(&url).expect_err("refused");
        assert!(matches!(e, Error::Authentication { .. }), "{url}: {e:?}");
        for text in [e.to_string(), format!("{e:?}"), e.report().to_string()] {
            assert!(!text.contains(pw), "{text}");
        }
        assert!(!e.is_transient());
    }
}

#[test]
fn names_with_braces_spaces_or_globs_are_rejected_before_io() {
    for bad in ["a{b", "a}b", "{x}", "a b", "a*", "a?", "a[b]", "a\\b"] {
        assert!(
            matches!(LeaseName::new(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
        assert!(
            matches!(GroupName::new(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
    }
    // Through a session on a backend whose server is unreachable: rejected before any I/O.
    let b = standalone();
    let s = Session::open(b.clone(), Config::default()).unwrap();
    for bad in ["a{b}", "x y", "j*b"] {
        assert!(
            matches!(s.try_lock(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
        assert!(
            matches!(s.group(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
    }
    s.close().unwrap();
}

#[test]
fn redis_errors_surface_with_the_server_message() {
    let b = standalone();
    let s = open(&*b, Duration::from_secs(30));
    let name = LeaseName::new("wrongtype").unwrap();
    b.command(&["SET", &b.lease_key(&name), "not a hash"]);
    let err = b.acquire(&s, &name).unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(err.report().to_string().contains("WRONGTYPE"), "{err:?}");
    b.close_session(&s).unwrap();
}

#[test]
fn url_options_are_checked() {
    let e = simba_lease::connect(&with_options(&standalone_url(), "pool=3"))
        .err()
        .unwrap();
    assert!(
        matches!(&e, Error::InvalidConfig { setting, .. } if setting == "pool"),
        "{e}"
    );
    // A plaintext server: without the `tls` feature the URL is refused, with it the handshake
    // fails or times out (a plaintext server waits for the end of a line): never a plaintext
    // fallback.
    let e = simba_lease::connect("rediss://127.0.0.1:6379?connect_timeout=1s")
        .err()
        .unwrap();
    if cfg!(feature = "tls") {
        assert!(
            matches!(
                e,
                Error::Tls {
                    failure: simba_lease::TlsFailure::NotOffered,
                    ..
                }
            ),
            "{e:?}"
        );
    } else {
        assert!(e.to_string().contains("TLS"), "{e}");
    }
    // Only a database number may follow the host: nothing reaches the driver's own URL
    // syntax (its `#insecure` would turn certificate checks off).
    for path in ["/#insecure", "/%23insecure", "/0#insecure", "/x", "/123456"] {
        let url = format!("rediss://127.0.0.1:6390{path}");
        let e = RedisBackend::connect(&url).expect_err(path);
        assert!(matches!(e, Error::InvalidUrl { .. }), "{path}: {e:?}");
    }
    for (url, opts, expected) in [
        (cluster_url(), "route_by_slot=false", "route_by_slot"),
        (standalone_url(), "prefix=a{b}", "prefix"),
        (standalone_url(), "query_timeout=5h", "query_timeout"),
    ] {
        let e = simba_lease::connect(&with_options(&url, opts))
            .err()
            .unwrap();
        assert!(
            matches!(&e, Error::InvalidConfig { setting, .. } if setting == expected),
            "{e}"
        );
    }
    let b = simba_lease::connect(&with_options(
        &standalone_url(),
        "query_timeout=2s&connect_timeout=500ms&pool_size=2&prefix=simbatest-url",
    ))
    .unwrap();
    assert_eq!(b.kind(), "redis");
}

/// Issue 21.12: the connect timeout bounds a connect once. An address that accepts TCP
/// connections (the kernel's backlog) but never answers, with `connect_timeout=1s`: the
/// connect fails within 1.8 s (the timeout applied twice took 2×), on one server and as a
/// cluster's only seed.
#[test]
fn a_connect_to_an_address_that_never_answers_takes_the_timeout_once() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    for url in [
        format!("redis://{addr}?connect_timeout=1s"),
        format!("redis+cluster://{addr}?connect_timeout=1s"),
    ] {
        let start = Instant::now();
        let e = RedisBackend::connect(&url).expect_err("nothing answers");
        let took = start.elapsed();
        eprintln!("{url}: failed after {took:?}: {e}");
        assert!(e.is_transient(), "{url}: {e:?}");
        assert!(took < Duration::from_millis(1800), "{url}: took {took:?}");
    }
}
