//! Issue 21.9, the figure: contending processes on a private cluster whose lock's master is
//! failed over again and again (a measurement, ignored unless asked for).

use crate::common::*;
use crate::private_cluster::{node_con, PrivateCluster};
use simba_lease::backends::redis::key_slot;
use simba_lease::{Config, LeaseName, Session};
use std::time::{Duration, Instant};

/// Nanoseconds since the Unix epoch: one clock for every process on this machine.
fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A small pseudo-random source for the figure's timings (no cryptography involved).
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        let now = u64::try_from(wall_ns() % u128::from(u64::MAX)).unwrap_or(1);
        Jitter((now ^ (u64::from(std::process::id()) << 32)) | 1)
    }

    /// A duration in `[lo, hi)` ms.
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(lo + self.0 % (hi - lo).max(1))
    }
}

/// Issue 21.9, the figure: five contending *processes* (this test binary run again as
/// [`failover_figure_contender`]) take one lock in turns on a private 3+3 cluster while the
/// lock's master is failed over with `CLUSTER FAILOVER FORCE` every 6–8 s, for 60 s, with
/// `wait_replicas` 0 and 1 (lease 1.5 s, renew every 500 ms, `query_timeout=1s`). Each
/// contender reports every hold: its token and the interval it believed it held the lock
/// (from the lock's return to the unlock, or to the last instant `is_valid()` was true).
/// Counted: tokens granted twice, and the longest overlap of two holders' intervals.
///
/// `cargo test --features redis,tck --test redis -- --ignored --exact failover_figure::forced_failovers_figure --nocapture`
/// (about 2½ minutes; `SIMBA_FIGURE_SECS` changes the 60 s).
#[test]
#[ignore = "a measurement (about 2½ minutes): run with --ignored --exact failover_figure::forced_failovers_figure"]
fn forced_failovers_figure() {
    let secs: u64 = std::env::var("SIMBA_FIGURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    for wait in [0, 1] {
        let cluster = PrivateCluster::start_with(3, 1);
        let prefix = random_prefix();
        let url = with_options(
            &cluster.url(),
            &format!("prefix={prefix}&wait_replicas={wait}&query_timeout=1s"),
        );
        let name = "figure";
        let slot = key_slot(&format!("{prefix}:lease:{{{name}}}"));
        let children: Vec<std::process::Child> = (0..5)
            .map(|i| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--ignored",
                        "--exact",
                        "failover_figure::failover_figure_contender",
                    ])
                    .args(["--nocapture", "--test-threads", "1"])
                    .env("SIMBA_FIGURE_URL", &url)
                    .env("SIMBA_FIGURE_NAME", name)
                    .env("SIMBA_FIGURE_SECS", secs.to_string())
                    .env("SIMBA_FIGURE_PROC", i.to_string())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("a contender process")
            })
            .collect();
        // The failovers, each of the lock's current master to its replica.
        let mut jitter = Jitter::new();
        let end = Instant::now() + Duration::from_secs(secs);
        let mut failovers = 0;
        loop {
            let pause = jitter.ms(6000, 8000);
            if Instant::now() + pause >= end {
                break;
            }
            std::thread::sleep(pause);
            let Some(master) = cluster.master_of_slot(slot) else {
                continue;
            };
            let Some(&replica) = cluster.replicas_of(master).first() else {
                continue;
            };
            let forced: redis::RedisResult<()> = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .arg("FORCE")
                .query(&mut node_con(replica));
            if forced.is_ok() {
                failovers += 1;
            }
        }
        let mut holds: Vec<(usize, u64, u128, u128, bool)> = Vec::new();
        let mut errors = 0usize;
        for child in children {
            let out = child.wait_with_output().expect("a contender's output");
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let f: Vec<&str> = line.split(' ').collect();
                match f.as_slice() {
                    ["HOLD", p, t, a, b, lost] => holds.push((
                        p.parse().unwrap(),
                        t.parse().unwrap(),
                        a.parse().unwrap(),
                        b.parse().unwrap(),
                        *lost == "1",
                    )),
                    ["FAILED", ..] => errors += 1,
                    _ => {}
                }
            }
        }
        // A token held by two processes was granted twice; one process holding a token
        // again is a re-acquire of its own term (its unlock had failed).
        let mut by_token: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
        for h in &holds {
            by_token.entry(h.1).or_default().push(h.0);
        }
        let twice: Vec<(&u64, &Vec<usize>)> = by_token
            .iter()
            .filter(|(_, p)| p.iter().any(|&x| x != p[0]))
            .collect();
        let reheld = by_token
            .values()
            .filter(|p| p.len() > 1 && p.iter().all(|&x| x == p[0]))
            .count();
        // A token not above one granted before it (by the start of its hold).
        let mut sorted = holds.clone();
        sorted.sort_by_key(|h| h.2);
        let mut highest = 0;
        let mut regressed = 0;
        for h in &sorted {
            if h.1 < highest {
                regressed += 1;
            }
            highest = highest.max(h.1);
        }
        let (mut same, mut other, mut overlaps) = (0u128, 0u128, 0usize);
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                let overlap = a.3.min(b.3).saturating_sub(a.2.max(b.2));
                if a.0 != b.0 && overlap > 0 {
                    overlaps += 1;
                    if a.1 == b.1 {
                        same = same.max(overlap);
                    } else {
                        other = other.max(overlap);
                    }
                }
            }
        }
        let lost = holds.iter().filter(|h| h.4).count();
        eprintln!(
            "wait_replicas={wait}: {failovers} forced failovers in {secs} s; {} holds ({lost} \
             ended by a loss, {reheld} re-acquires of a process's own term), {errors} failed \
             lock attempts; tokens granted to two processes: {} {:?}; tokens below an earlier \
             one: {regressed}; overlapping holds: {overlaps}, longest {:.1} ms (same token) \
             and {:.1} ms (different tokens)",
            holds.len(),
            twice.len(),
            &twice[..twice.len().min(5)],
            same as f64 / 1e6,
            other as f64 / 1e6,
        );
    }
}

/// One contender of [`forced_failovers_figure`] (does nothing unless that test runs it):
/// takes the lock in turns, holds it 50–300 ms while checking `is_valid()` every
/// millisecond, and prints `HOLD proc token start_ns end_ns lost` per hold and `FAILED` per
/// failed attempt.
#[test]
#[ignore = "run by forced_failovers_figure"]
fn failover_figure_contender() {
    let Ok(url) = std::env::var("SIMBA_FIGURE_URL") else {
        return;
    };
    let name = LeaseName::new(std::env::var("SIMBA_FIGURE_NAME").unwrap()).unwrap();
    let proc_id = std::env::var("SIMBA_FIGURE_PROC").unwrap();
    let secs: u64 = std::env::var("SIMBA_FIGURE_SECS").unwrap().parse().unwrap();
    let config = Config::builder()
        .lease(Duration::from_millis(1500))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(secs);
    let mut jitter = Jitter::new();
    let session = loop {
        match Session::connect(&url, config.clone()) {
            Ok(s) => break s,
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("{e}"),
        }
    };
    while Instant::now() < end {
        let guard = match session.lock_timeout(&name, Duration::from_secs(2)) {
            Ok(g) => g,
            Err(_) => {
                println!("FAILED");
                std::thread::sleep(jitter.ms(10, 50));
                continue;
            }
        };
        let start = wall_ns();
        let hold = Instant::now() + jitter.ms(50, 300);
        let mut last_valid = start;
        let mut lost = false;
        while Instant::now() < hold {
            if !guard.is_valid() {
                lost = true;
                break;
            }
            last_valid = wall_ns();
            std::thread::sleep(Duration::from_millis(1));
        }
        println!(
            "HOLD {proc_id} {} {start} {last_valid} {}",
            guard.token().get(),
            u8::from(lost)
        );
        drop(guard);
        std::thread::sleep(jitter.ms(0, 20));
    }
    let _ = session.close();
}
