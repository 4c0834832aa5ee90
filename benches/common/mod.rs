//! Timing, percentiles and the result table shared by the benches (`mod common;`).

// Each bench uses part of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// `SIMBA_BENCH_ITERS`, else `default`; `short` when `cargo test --benches` runs the bench
/// (without `--bench`), to keep that run short.
pub fn iterations(default: usize, short: usize) -> usize {
    if !std::env::args().any(|a| a == "--bench") {
        return short;
    }
    std::env::var("SIMBA_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `f`, adds how long it took to `samples` and returns its result.
pub fn time<T>(samples: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    samples.push(t.elapsed());
    r
}

/// The `p` quantile of `samples` (0.5 is the median): the sample of rank ⌊(n − 1)·p⌋.
pub fn pct(samples: &[Duration], p: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    s[((s.len() - 1) as f64 * p) as usize]
}

/// One operation of a table: its samples and an optional note (the last column).
pub struct Row {
    pub name: &'static str,
    pub samples: Vec<Duration>,
    pub note: &'static str,
}

impl Row {
    pub fn new(name: &'static str, samples: Vec<Duration>) -> Row {
        Row {
            name,
            samples,
            note: "",
        }
    }

    /// The same row with `note` in the last column.
    pub fn note(self, note: &'static str) -> Row {
        Row { note, ..self }
    }
}

/// Prints p50 and p99 of every row in µs and the ratio of its p50 to the floor's, the
/// first row; `notes` heads a last column with the rows' notes.
pub fn print_table(rows: &[Row], notes: Option<&str>) {
    let Some(floor) = rows.first() else { return };
    let floor = pct(&floor.samples, 0.5).as_secs_f64().max(1e-9);
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .chain(["operation".len()])
        .max()
        .unwrap_or(0);
    let note = |n: &str| notes.map_or(String::new(), |_| format!(" {n:>12}"));
    println!(
        "{:<w$} {:>10} {:>10} {:>9}{}",
        "operation",
        "p50 µs",
        "p99 µs",
        "p50/floor",
        note(notes.unwrap_or(""))
    );
    for r in rows {
        let (p50, p99) = (pct(&r.samples, 0.5), pct(&r.samples, 0.99));
        println!(
            "{:<w$} {:>10.1} {:>10.1} {:>9.2}{}",
            r.name,
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            p50.as_secs_f64() / floor,
            note(r.note)
        );
    }
}
