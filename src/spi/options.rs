//! The one parser of backend URL options, shared by every backend, and the bounds of the
//! durations they accept (from a URL or a builder).
//!
//! * Durations: a whole number with a unit, `250ms`, `5s`, `2m` (or `2min`), `1h`; never
//!   negative, fractional or with spaces. A number without a unit (`connect_timeout=5`) is
//!   refused with an [`Error::InvalidConfig`] naming the option and the units (only `0` may
//!   go without one).
//! * Integers: decimal, within the option's bounds.
//! * Booleans: `true`/`false`, `1`/`0`, `yes`/`no` (any case).
//! * Hosts: `host`, `host:port`, `[v6]` or `[v6]:port`; a bare IPv6 address must be
//!   bracketed.
//!
//! # Time limits
//!
//! One rule on every backend: a timeout (`query_timeout`, `connect_timeout`,
//! `connection_timeout`, `request_timeout`, `reader_session_timeout`) must be more than zero
//! and at most [`MAX_TIMEOUT`] (one hour), and `purge_interval` at most [`MAX_INTERVAL`] (one
//! week). A longer one is rejected when the backend is configured (URL parsed or builder
//! built) with [`Error::InvalidConfig`] naming the option, so no deadline computed from it
//! can overflow an `Instant`.
//!
//! Every problem with one `?option=value` of a URL (an unknown option, a value that does not
//! parse or is out of bounds) is an [`Error::InvalidConfig`] whose `setting` is the option's
//! name, on every backend; a value is quoted in the reason only up to 64 characters.

#![cfg_attr(
    not(all(
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "zookeeper"
    )),
    allow(dead_code)
)]

use crate::error::{Error, Result};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

pub use crate::types::limits::MAX_TIMEOUT;

pub use crate::types::limits::MAX_INTERVAL;

/// `v` cut to its first 64 characters.
pub(crate) fn cut(v: &str) -> &str {
    match v.char_indices().nth(64) {
        Some((i, _)) => &v[..i],
        None => v,
    }
}

/// `v` for a message: quoted, and cut to 64 characters.
pub(crate) fn quote(v: &str) -> String {
    let c = cut(v);
    if c.len() < v.len() {
        format!("{c:?}…")
    } else {
        format!("{v:?}")
    }
}

/// Parses a duration option (see the module documentation) and checks it against `max`;
/// zero is allowed here (callers that need more check it).
pub(crate) fn duration(option: &str, v: &str, max: Duration) -> Result<Duration> {
    let bad = || {
        Error::config(
            option,
            format!("{} is not a duration like 250ms, 5s, 2m or 1h", quote(v)),
        )
    };
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    let too_long = || {
        Error::config(
            option,
            format!("{} is longer than the {max:?} maximum", quote(v)),
        )
    };
    let per_unit: u64 = match unit {
        // Zero is zero in every unit; any other number must say which one it counts.
        "" if num.bytes().all(|b| b == b'0') => 1,
        "" => {
            return Err(Error::config(
                option,
                format!(
                    "{} has no unit: write the duration with ms, s, m or h (e.g. {}s or {}ms)",
                    quote(v),
                    cut(num),
                    cut(num)
                ),
            ))
        }
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    // A number too large for u64 is certainly too long.
    let n: u64 = num.parse().map_err(|_| too_long())?;
    let ms = n.checked_mul(per_unit).ok_or_else(too_long)?;
    let d = Duration::from_millis(ms);
    if d > max {
        return Err(too_long());
    }
    Ok(d)
}

/// Checks a timeout given to a builder or a config: more than zero, at most [`MAX_TIMEOUT`].
pub(crate) fn check_timeout(option: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::config(option, "must be greater than zero"));
    }
    if d > MAX_TIMEOUT {
        return Err(Error::config(
            option,
            format!("{d:?} is longer than the {MAX_TIMEOUT:?} maximum"),
        ));
    }
    Ok(())
}

/// Parses a timeout option: [`duration`], then [`check_timeout`].
pub(crate) fn timeout(option: &str, v: &str) -> Result<Duration> {
    let d = duration(option, v, MAX_TIMEOUT)?;
    check_timeout(option, d)?;
    Ok(d)
}

/// Parses a decimal integer option within `min..=max`.
pub(crate) fn integer<T>(option: &str, v: &str, min: T, max: T) -> Result<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let out_of_range = || {
        Error::config(
            option,
            format!("{} is not a whole number from {min} to {max}", quote(v)),
        )
    };
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(out_of_range());
    }
    let n: T = v.parse().map_err(|_| out_of_range())?;
    if n < min || n > max {
        return Err(out_of_range());
    }
    Ok(n)
}

/// Parses a boolean option: `true`/`false`, `1`/`0`, `yes`/`no`, any case.
pub(crate) fn boolean(option: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(Error::config(
            option,
            format!("{} is not a boolean (true or false)", quote(v)),
        )),
    }
}

/// One entry of a host list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostPort {
    /// The host name or address, without brackets.
    pub(crate) host: String,
    /// Whether `host` is an IPv6 address (written in brackets).
    pub(crate) ipv6: bool,
    /// The port, if given.
    pub(crate) port: Option<u16>,
}

impl HostPort {
    /// `host:port` with the brackets back on an IPv6 address and `default` when no port
    /// was given.
    pub(crate) fn with_port(&self, default: u16) -> String {
        let port = self.port.unwrap_or(default);
        if self.ipv6 {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }
}

/// Parses one `host`, `host:port`, `[v6]` or `[v6]:port`; the error is the reason.
pub(crate) fn host_port(entry: &str) -> std::result::Result<HostPort, String> {
    let port_of = |p: &str| -> std::result::Result<u16, String> {
        match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(format!("bad port {} in host {}", quote(p), quote(entry))),
        }
    };
    if let Some(rest) = entry.strip_prefix('[') {
        let Some((addr, after)) = rest.split_once(']') else {
            return Err(format!("unclosed `[` in host {}", quote(entry)));
        };
        if addr.parse::<Ipv6Addr>().is_err() {
            return Err(format!(
                "{} in brackets is not an IPv6 address",
                quote(addr)
            ));
        }
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(port_of(p)?),
                None => {
                    return Err(format!(
                        "expected `:port` after `]` in host {}",
                        quote(entry)
                    ))
                }
            },
        };
        return Ok(HostPort {
            host: addr.to_owned(),
            ipv6: true,
            port,
        });
    }
    let (host, port) = match entry.split_once(':') {
        Some((h, p)) if p.contains(':') => {
            let _ = h;
            return Err(format!(
                "{}: an IPv6 address must be written in brackets, e.g. [::1]:port",
                quote(entry)
            ));
        }
        Some((h, p)) => (h, Some(port_of(p)?)),
        None => (entry, None),
    };
    if host.is_empty() {
        return Err(format!("empty host name in {}", quote(entry)));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '[' | ']' | '/' | '@'))
    {
        return Err(format!("bad host name {}", quote(host)));
    }
    Ok(HostPort {
        host: host.to_owned(),
        ipv6: false,
        port,
    })
}

/// `now + limit` without the panic of `Instant + Duration`: a limit beyond what an `Instant`
/// can hold gives the latest one it can (in practice configured limits never get there, they
/// are bounded by [`MAX_TIMEOUT`]).
pub(crate) fn deadline(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit)
        .or_else(|| now.checked_add(MAX_INTERVAL))
        .unwrap_or(now)
}

/// Checks a lease handed to a backend (the engine's [`Config`](crate::Config) already
/// bounds it; direct callers of the SPI get the same rule): more than zero and at most
/// [`Config::MAX_LEASE`](crate::types::limits::MAX_LEASE), so no deadline arithmetic can overflow.
pub(crate) fn check_lease(lease: Duration) -> Result<()> {
    if lease.is_zero() || lease > crate::types::limits::MAX_LEASE {
        return Err(Error::config(
            "lease",
            format!(
                "{lease:?} is out of range: more than zero and at most {:?}",
                crate::types::limits::MAX_LEASE
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_are_bounded() {
        let max = MAX_INTERVAL;
        let ms = Duration::from_millis;
        assert_eq!(duration("t", "250ms", max).unwrap(), ms(250));
        assert_eq!(duration("t", "0", max).unwrap(), ms(0));
        let e = duration("connect_timeout", "5", max).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { setting, .. } if setting == "connect_timeout"),
            "{e}"
        );
        for unit in ["ms", "s", "m", "h", "no unit"] {
            assert!(e.to_string().contains(unit), "{unit}: {e}");
        }
        assert_eq!(duration("t", "5s", max).unwrap(), ms(5_000));
        assert_eq!(duration("t", "2m", max).unwrap(), ms(120_000));
        assert_eq!(duration("t", "2min", max).unwrap(), ms(120_000));
        assert_eq!(duration("t", "1h", max).unwrap(), ms(3_600_000));
        for bad in [
            "", "s", "-1s", "1.5s", "5 s", " 5s", "5S", "5d", "ms5", "١s", "5sec",
        ] {
            let e = duration("the_option", bad, max).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidConfig { setting, .. } if setting == "the_option"),
                "{bad:?}: {e}"
            );
        }
        // Overflowing values are rejected, not panicking.
        for huge in [
            "307445734561825861m",
            "18446744073709551615s",
            "99999999999999999999999ms",
            "5124095576030432h",
        ] {
            let e = duration("t", huge, max).unwrap_err().to_string();
            assert!(e.contains("maximum"), "{huge}: {e}");
        }
        assert!(duration("t", "169h", max).is_err());
        assert!(duration("t", "168h", max).is_ok());
    }

    #[test]
    fn timeouts_are_positive_and_at_most_an_hour() {
        assert_eq!(timeout("t", "1h").unwrap(), MAX_TIMEOUT);
        assert!(timeout("t", "61m").is_err());
        assert!(timeout("t", "0s").is_err());
        assert!(check_timeout("t", Duration::MAX).is_err());
        assert!(check_timeout("t", Duration::ZERO).is_err());
        assert!(check_timeout("t", Duration::from_nanos(1)).is_ok());
    }

    #[test]
    fn integers_and_booleans() {
        assert_eq!(integer::<usize>("n", "4", 1, 1000).unwrap(), 4);
        for bad in [
            "",
            "0",
            "1001",
            "+4",
            "-1",
            " 4",
            "4x",
            "99999999999999999999999",
        ] {
            assert!(integer::<usize>("n", bad, 1, 1000).is_err(), "{bad:?}");
        }
        for (v, b) in [("true", true), ("YES", true), ("1", true), ("no", false)] {
            assert_eq!(boolean("b", v).unwrap(), b);
        }
        assert!(boolean("b", "maybe").is_err());
    }

    #[test]
    fn hosts_with_ports_and_ipv6() {
        let hp = |h: &str, v6: bool, p: Option<u16>| HostPort {
            host: h.into(),
            ipv6: v6,
            port: p,
        };
        assert_eq!(host_port("db1").unwrap(), hp("db1", false, None));
        assert_eq!(host_port("db1:5432").unwrap(), hp("db1", false, Some(5432)));
        assert_eq!(host_port("[::1]").unwrap(), hp("::1", true, None));
        assert_eq!(
            host_port("[::1]:7000").unwrap(),
            hp("::1", true, Some(7000))
        );
        assert_eq!(host_port("[::1]").unwrap().with_port(6379), "[::1]:6379");
        assert_eq!(host_port("h:1").unwrap().with_port(6379), "h:1");
        for bad in [
            "::1", "[::1", "[::1]x", "[nope]:1", "h:", "h:0", "h:65536", "h:+1", ":5432", "a b",
            "[::1]:", "h:1:2",
        ] {
            assert!(host_port(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn deadlines_saturate() {
        let now = Instant::now();
        assert!(deadline(Duration::MAX) > now);
        assert!(deadline(Duration::from_secs(1)) > now);
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "x".repeat(1000);
        let e = duration("t", &long, MAX_TIMEOUT).unwrap_err().to_string();
        assert!(e.len() < 200, "{e}");
        assert_eq!(quote("é"), "\"é\"");
    }
}
