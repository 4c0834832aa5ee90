//! The server's clock against this host's: reported, never a trap (leases are measured by
//! the server's clock alone).

use super::{Findings, Level};
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// An offset beyond which the clock finding is a warning (still no trap).
const CLOCK_WARN_MS: i64 = 60_000;

/// The server clock against the local one, read in a round trip that started at `sent_ms`:
/// compared with the midpoint of the round trip.
pub(super) fn clock(f: &mut Findings, server_ms: Option<i64>, sent_ms: i64) {
    clock_at(f, server_ms.map(|ms| (ms, (sent_ms + unix_ms()) / 2)));
}

/// The server clock `(server_ms, local_ms)` against the local one: reported, leases never
/// depend on it; more than a minute apart is a warning (logs and metrics of the two hosts
/// will not line up), never a trap.
fn clock_at(f: &mut Findings, reading: Option<(i64, i64)>) {
    match reading {
        Some((server, local)) => {
            let offset = server - local;
            let text = format!(
                "server clock {offset:+} ms from this host (leases are measured by the server's \
                 clock alone)"
            );
            if offset.abs() > CLOCK_WARN_MS {
                f.add(
                    Level::Warn,
                    "clock",
                    format!("{text}; over a minute apart: check NTP on both hosts"),
                );
            } else {
                f.add(Level::Info, "clock", text);
            }
        }
        None => f.add(Level::Unknown, "clock", "could not read the server's clock"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_offset_is_reported_and_over_a_minute_only_warned() {
        let mut f = Findings::default();
        clock_at(&mut f, Some((1_000_000, 1_000_250)));
        clock_at(&mut f, Some((1_000_000 + CLOCK_WARN_MS + 1, 1_000_000)));
        clock_at(&mut f, None);
        let levels: Vec<Level> = f.0.iter().map(|x| x.level).collect();
        assert_eq!(levels, [Level::Info, Level::Warn, Level::Unknown]);
        assert!(f.0[0].text.contains("-250 ms"), "{}", f.0[0].text);
        assert!(f.0[1].text.contains("over a minute"), "{}", f.0[1].text);
    }
}
