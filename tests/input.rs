//! Bad input gets typed errors, never a panic, a hang or a password in a message (issue 10).
//!
//! Nothing here needs a server: URLs either fail before any I/O or point at a closed loopback
//! port (`127.0.0.1:1`, refused at once) with tiny timeouts.

use proptest::prelude::*;
use simba_lease::backends::redis::{RedisBackend, RedisConfig};
use simba_lease::backends::{BackendUrl, SqlBackend, ZooKeeperBackend};
use simba_lease::{connect, Error, GroupName, LeaseName, Metadata};
use std::time::Duration;

const PW: &str = "s3cr3t-PW";

/// A port nothing listens on: connecting is refused at once.
const CLOSED: &str = "127.0.0.1:1";

fn err_of<T>(r: simba_lease::Result<T>) -> Error {
    match r {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    }
}

/// Every string a user could see for an error: its message, its `Debug` and its sources.
fn texts(e: &Error) -> String {
    let mut out = format!("{e} | {e:?}");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        out.push_str(&format!(" | {s} | {s:?}"));
        src = s.source();
    }
    out
}

fn assert_setting(e: &Error, option: &str) {
    assert!(
        matches!(e, Error::InvalidConfig { setting, .. } if setting == option),
        "expected InvalidConfig naming {option}, got {e:?}"
    );
}

#[test]
fn duration_overflow_in_url_options_is_a_typed_error() {
    // `n * 60` overflowed (a panic in debug builds) in the Redis and ZooKeeper parsers, and
    // huge seconds overflowed `Instant + Duration` later on.
    for huge in [
        "307445734561825861m",
        "18446744073709551615s",
        "5124095576030432h",
    ] {
        for (url, option) in [
            (format!("redis://{CLOSED}/0"), "query_timeout"),
            (format!("redis://{CLOSED}/0"), "connect_timeout"),
            (format!("redis+cluster://{CLOSED}"), "query_timeout"),
            (format!("zookeeper://{CLOSED}/simba"), "connection_timeout"),
            (format!("zookeeper://{CLOSED}/simba"), "connect_timeout"),
            (format!("zookeeper://{CLOSED}/simba"), "request_timeout"),
            (format!("postgres://u@{CLOSED}/db"), "query_timeout"),
            (format!("postgres://u@{CLOSED}/db"), "purge_interval"),
            (format!("mysql://u@{CLOSED}/db"), "query_timeout"),
        ] {
            let full = format!("{url}?{option}={huge}");
            let e = err_of(connect(&full));
            assert_setting(&e, option);
            assert!(e.to_string().contains("maximum"), "{full}: {e}");
        }
    }
}

#[test]
fn huge_builder_timeouts_are_rejected_at_configuration() {
    let pg = || SqlBackend::builder(format!("postgres://u@{CLOSED}/db"));
    assert_setting(
        &err_of(pg().query_timeout(Duration::MAX).build()),
        "query_timeout",
    );
    assert_setting(
        &err_of(pg().purge_interval(Duration::MAX).build()),
        "purge_interval",
    );
    let zk = || ZooKeeperBackend::builder(CLOSED);
    assert_setting(
        &err_of(zk().connection_timeout(Duration::MAX).build()),
        "connection_timeout",
    );
    assert_setting(
        &err_of(zk().request_timeout(Duration::MAX).build()),
        "request_timeout",
    );
    assert_setting(
        &err_of(zk().reader_session_timeout(Duration::MAX).build()),
        "reader_session_timeout",
    );
    for (cfg, option) in [
        (
            RedisConfig {
                query_timeout: Duration::MAX,
                ..RedisConfig::default()
            },
            "query_timeout",
        ),
        (
            RedisConfig {
                connect_timeout: Duration::MAX,
                ..RedisConfig::default()
            },
            "connect_timeout",
        ),
    ] {
        let url = format!("redis://{CLOSED}");
        assert_setting(&err_of(RedisBackend::standalone(&url, cfg)), option);
    }
}

#[test]
fn every_bad_url_option_is_invalid_config_naming_it() {
    for (url, option) in [
        (format!("redis://{CLOSED}?pool=3"), "pool"),
        (format!("redis://{CLOSED}?pool_size=many"), "pool_size"),
        (
            format!("redis://{CLOSED}?route_by_slot=maybe"),
            "route_by_slot",
        ),
        (
            format!("redis://{CLOSED}?wait_replicas=-1"),
            "wait_replicas",
        ),
        (format!("redis://{CLOSED}?query_timeout=0"), "query_timeout"),
        (format!("zookeeper://{CLOSED}/simba?pool=3"), "pool"),
        (format!("zookeeper://{CLOSED}/simba?acl=everyone"), "acl"),
        (
            format!("zookeeper://{CLOSED}/simba?request_timeout=5x"),
            "request_timeout",
        ),
        (format!("postgres://u@{CLOSED}/db?pool=3"), "pool"),
        (format!("postgres://u@{CLOSED}/db?pool_size=0"), "pool_size"),
        (
            format!("mysql://u@{CLOSED}/db?query_timeout=2h"),
            "query_timeout",
        ),
        (
            format!("mysql://u@{CLOSED}/db?purge_interval=1.5s"),
            "purge_interval",
        ),
        ("memory://?x=1".to_owned(), "x"),
    ] {
        assert_setting(&err_of(connect(&url)), option);
    }
}

#[test]
fn hosts_accept_bracketed_ipv6_and_reject_bad_entries() {
    let u = BackendUrl::parse("redis+cluster://[::1]:7000,[::1],h:7001").unwrap();
    assert_eq!(u.hosts, ["[::1]:7000", "[::1]", "h:7001"]);
    for bad in [
        "redis://[::1",
        "redis://::1",
        "redis://h:0",
        "redis://h:",
        "postgres://u@:5432/db",
        "zookeeper://[zk]:2181/simba",
    ] {
        assert!(
            matches!(BackendUrl::parse(bad), Err(Error::InvalidUrl { .. })),
            "{bad}"
        );
    }
}

/// URLs of every scheme, valid and invalid, each with the password [`PW`].
fn urls_with_password() -> Vec<String> {
    let mut v = Vec::new();
    for scheme in [
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "redis",
        "rediss",
        "redis+cluster",
        "zookeeper",
        "zk",
        "memory",
        "etcd",
        "",
        "bad scheme",
    ] {
        let sep = if scheme.is_empty() { "" } else { "://" };
        for tail in [
            format!("u:{PW}@{CLOSED}/db"),
            format!(":{PW}@{CLOSED}"),
            format!("u:{PW}@{CLOSED}/db?unknown_option=1"),
            format!("u:{PW}@{CLOSED}/db?query_timeout=5x&connection_timeout=5x"),
            format!("u:{PW}@{CLOSED}/db?query_timeout=100ms&connection_timeout=100ms"),
            format!("u:{PW}@h:99999/db"),
            format!("u:{PW}@[::1/db"),
            format!("u:{PW}@/db"),
            format!("u:{PW}%zz@{CLOSED}/db"),
            format!("u:{PW}%ff@{CLOSED}/db"),
            format!("u:{PW}/x?y@{CLOSED}/db"),
            format!("u:{PW}@h1:1,h2:2/db"),
            format!("u:{PW}@{CLOSED}/db%zz"),
            format!("u:{PW}@{CLOSED}/a//b?request_timeout=100ms"),
            format!("{PW}:{PW}@{CLOSED}"),
            // TLS options (issue 12): refused before I/O, or a handshake that cannot start.
            format!("u:{PW}@{CLOSED}/db?sslmode=verify-full&ca=/nonexistent/ca.pem"),
            format!("u:{PW}@{CLOSED}/db?sslmode=disable&sslcert=/x.pem"),
            format!("u:{PW}@{CLOSED}/db?sslmode=verify"),
            format!("u:{PW}@{CLOSED}/db?sslmode=require&query_timeout=100ms"),
        ] {
            let mut url = format!("{scheme}{sep}{tail}");
            // ZooKeeper retries a refused connection until its connection timeout.
            let after_at = url.rsplit('@').next().unwrap_or("");
            if scheme.starts_with('z') && !after_at.contains('?') {
                url.push_str("?connection_timeout=100ms");
            }
            v.push(url);
        }
    }
    v.push(format!("u:{PW}@localhost:5432"));
    v.push(format!("u:{PW}@host://x"));
    v
}

#[test]
fn passwords_never_appear_in_errors_or_debug() {
    for url in urls_with_password() {
        let mut seen = Vec::new();
        match BackendUrl::parse(&url) {
            Ok(u) => {
                seen.push(format!("{u:?}"));
                seen.push(u.redacted().to_owned());
            }
            Err(e) => seen.push(texts(&e)),
        }
        match connect(&url) {
            Ok(b) => seen.push(b.kind().to_owned()),
            Err(e) => seen.push(texts(&e)),
        }
        let builder = SqlBackend::builder(url.clone());
        seen.push(format!("{builder:?}"));
        if let Err(e) = builder.build() {
            seen.push(texts(&e));
        }
        for s in seen {
            // The user name `s3cr3t-PW` of the last URLs may show, its password not.
            let s = s.replace(&format!("{PW}:***"), "");
            let s = s.replace(&format!("{PW}@"), "");
            assert!(!s.contains(PW), "{url}: {s}");
        }
    }
    let zk = ZooKeeperBackend::builder(CLOSED).digest("u", PW);
    assert!(!format!("{zk:?}").contains(PW));
    let pg = SqlBackend::builder(format!("postgres://u:{PW}@{CLOSED}/db"))
        .postgres_config(format!("postgres://u:{PW}@{CLOSED}/db").parse().unwrap());
    assert!(!format!("{pg:?}").contains(PW), "{pg:?}");
    let my = SqlBackend::builder(format!("mysql://u:{PW}@{CLOSED}/db"))
        .mysql_opts(mysql::Opts::from_url(&format!("mysql://u:{PW}@{CLOSED}/db")).unwrap());
    assert!(!format!("{my:?}").contains(PW), "{my:?}");
}

/// The option names of every backend, with one URL (closed port, tiny timeouts) per backend.
fn option_cases() -> Vec<(String, &'static str)> {
    let mut v = Vec::new();
    // Redis: refused at once; the random option comes last so it is the one used.
    for o in [
        "prefix",
        "wait_replicas",
        "query_timeout",
        "connect_timeout",
        "route_by_slot",
        "pool_size",
    ] {
        v.push((format!("redis://u:{PW}@{CLOSED}/0?"), o));
        v.push((format!("redis+cluster://u:{PW}@{CLOSED}?"), o));
    }
    for o in [
        "connection_timeout",
        "connect_timeout",
        "request_timeout",
        "acl",
    ] {
        // A root with an empty segment fails when the builder is built, after the options
        // were parsed and before any I/O.
        v.push((format!("zookeeper://u:{PW}@{CLOSED}/a//b?"), o));
    }
    for o in [
        "query_timeout",
        "pool_size",
        "table_prefix",
        "purge_interval",
        "sslmode",
    ] {
        v.push((format!("postgres://u:{PW}@{CLOSED}/db?"), o));
        v.push((format!("mysql://u:{PW}@{CLOSED}/db?"), o));
    }
    v
}

fn check_no_password(r: simba_lease::Result<std::sync::Arc<dyn simba_lease::spi::LeaseBackend>>) {
    if let Err(e) = r {
        let t = texts(&e);
        assert!(!t.contains(PW), "{t}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_urls_never_panic(s in "\\PC{0,80}") {
        // Only strings that cannot reach a server: no `://` of a networked scheme, or a
        // scheme that is not one.
        let lower = s.to_ascii_lowercase();
        let networked = ["postgres", "mysql", "mariadb", "redis", "zookeeper", "zk:"]
            .iter()
            .any(|n| lower.contains(n));
        if !networked {
            let _ = connect(&s);
        }
        let _ = BackendUrl::parse(&s);
        let _ = LeaseName::new(s.clone());
        let _ = GroupName::new(s.clone());
        let _ = Metadata::new(s);
    }

    #[test]
    fn arbitrary_urls_with_a_password_never_show_it(
        scheme in prop::sample::select(vec![
            "postgres", "mysql", "redis", "redis+cluster", "zookeeper", "memory", "x y", "",
        ]),
        sep in prop::sample::select(vec!["://", ":/", ""]),
        user in "[a-z]{0,3}",
        rest in "[^\\s]{0,40}",
    ) {
        let url = format!("{scheme}{sep}{user}:{PW}@{rest}");
        let parsed = BackendUrl::parse(&url);
        match &parsed {
            Ok(u) => {
                let d = format!("{u:?}");
                prop_assert!(!d.contains(PW), "{}", d);
            }
            Err(e) => prop_assert!(!texts(e).contains(PW), "{}", texts(e)),
        }
        // Reach `connect` only where no network I/O can follow: the URL failed to parse, or
        // has an unknown option.
        if parsed.is_err() {
            check_no_password(connect(&url));
        } else {
            let with_unknown = if url.contains('?') {
                format!("{url}&zzz_unknown=1")
            } else {
                format!("{url}?zzz_unknown=1")
            };
            check_no_password(connect(&with_unknown));
        }
    }

    #[test]
    fn arbitrary_option_values_never_panic(
        case in prop::sample::select(option_cases()),
        value in prop_oneof![
            "\\PC{0,30}",
            "[0-9]{0,25}(ms|s|m|min|h|d|)",
            "(-|\\+)?[0-9]{1,22}",
            prop::sample::select(vec![
                "true", "false", "yes", "0", "1", "18446744073709551615", "4294967296",
                "307445734561825861m", "18446744073709551615s", "0ms", "1ms",
            ]).prop_map(str::to_owned),
        ],
    ) {
        let (base, option) = case;
        // Tiny timeouts first: a valid random value of the same option comes last and wins,
        // but then it is at most the one hour maximum and the port is closed (refused at once).
        let tiny = if base.starts_with("zookeeper") {
            "connection_timeout=100ms&request_timeout=100ms&"
        } else if base.starts_with("redis") {
            "connect_timeout=100ms&query_timeout=100ms&"
        } else {
            "query_timeout=100ms&"
        };
        let enc: String = value
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect();
        let url = format!("{base}{tiny}{option}={enc}");
        check_no_password(connect(&url));
    }
}

/// ZooKeeper's `connect_timeout` is another name of `connection_timeout`: both at once are
/// refused before any I/O rather than one silently winning.
#[test]
fn a_timeout_given_under_both_of_its_names_is_refused() {
    let url = format!("zookeeper://{CLOSED}/simba?connect_timeout=1s&connection_timeout=2s");
    assert_setting(&err_of(simba_lease::connect(&url)), "connect_timeout");
}
