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
    /// The name of the row this one is a ratio to ([`print_ratios`]).
    pub vs: Option<&'static str>,
}

impl Row {
    pub fn new(name: &'static str, samples: Vec<Duration>) -> Row {
        Row {
            name,
            samples,
            note: "",
            vs: None,
        }
    }

    /// The same row with `note` in the last column.
    pub fn note(self, note: &'static str) -> Row {
        Row { note, ..self }
    }

    /// The same row as a ratio to the row named `floor` ([`print_ratios`]).
    pub fn vs(self, floor: &'static str) -> Row {
        Row {
            vs: Some(floor),
            ..self
        }
    }
}

/// The ratio of the medians of `row` and `floor`, and its lowest and highest over `blocks`
/// consecutive blocks of each one's samples (in the order they were taken: the samples of
/// operations measured round-robin are aligned block by block), the spread within the run.
pub fn ratio_spread(row: &[Duration], floor: &[Duration], blocks: usize) -> (f64, f64, f64) {
    let r = |a: &[Duration], b: &[Duration]| {
        pct(a, 0.5).as_secs_f64() / pct(b, 0.5).as_secs_f64().max(1e-9)
    };
    let all = r(row, floor);
    let blocks = blocks.clamp(1, row.len().min(floor.len()).max(1));
    let chunk = |s: &[Duration], j: usize| -> Vec<Duration> {
        s[j * s.len() / blocks..(j + 1) * s.len() / blocks].to_vec()
    };
    let (mut lo, mut hi) = (f64::INFINITY, 0f64);
    for j in 0..blocks {
        let (a, b) = (chunk(row, j), chunk(floor, j));
        if a.is_empty() || b.is_empty() {
            continue;
        }
        let x = r(&a, &b);
        lo = lo.min(x);
        hi = hi.max(x);
    }
    (all, lo.min(all), hi.max(all))
}

/// Prints p50 and p99 of every row in µs and, for a row with a floor ([`Row::vs`]), the
/// ratio of its p50 to the floor's with the lowest and highest ratio over `blocks` blocks
/// of the run ([`ratio_spread`]); `notes` heads a last column with the rows' notes.
pub fn print_ratios(rows: &[Row], blocks: usize, notes: Option<&str>) {
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .chain(["operation".len()])
        .max()
        .unwrap_or(0);
    let v = rows
        .iter()
        .filter_map(|r| r.vs.map(|f| f.chars().count()))
        .chain(["floor".len()])
        .max()
        .unwrap_or(0);
    let note = |n: &str| notes.map_or(String::new(), |_| format!("  {n}"));
    println!(
        "{:<w$} {:>9} {:>9}  {:<v$} {:>6} {:>13}{}",
        "operation",
        "p50 µs",
        "p99 µs",
        "floor",
        "ratio",
        "block spread",
        note(notes.unwrap_or(""))
    );
    for r in rows {
        let (p50, p99) = (pct(&r.samples, 0.5), pct(&r.samples, 0.99));
        let floor =
            r.vs.and_then(|f| rows.iter().find(|x| x.name == f).map(|x| (f, x)));
        let (vs, ratio, spread) = match floor {
            Some((f, x)) => {
                let (all, lo, hi) = ratio_spread(&r.samples, &x.samples, blocks);
                (f, format!("{all:.2}"), format!("{lo:.2}–{hi:.2}"))
            }
            None => ("", String::new(), String::new()),
        };
        println!(
            "{:<w$} {:>9.1} {:>9.1}  {:<v$} {:>6} {:>13}{}",
            r.name,
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            vs,
            ratio,
            spread,
            note(r.note)
        );
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

/// The order `0..n` shuffled (xorshift, from `*state`): operations measured round-robin
/// run in a new order each iteration, so none always follows the same neighbour (a durable
/// commit right after another one waits longer on a shared disk).
pub fn shuffled(n: usize, state: &mut u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for k in (1..n).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        order.swap(k, (*state % (k as u64 + 1)) as usize);
    }
    order
}
