//! Latency rows: percentiles from an HDR histogram, printed as a table or JSON.

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::time::Duration;

/// Samples of one operation, in nanoseconds.
pub(crate) struct Samples {
    pub(crate) name: String,
    hist: Histogram<u64>,
}

impl Samples {
    pub(crate) fn new(name: impl Into<String>) -> Self {
        Samples {
            name: name.into(),
            // 1 ns to 1 h, 3 significant digits.
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
        }
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.hist.saturating_record(ns);
    }

    pub(crate) fn merge(&mut self, other: &Samples) {
        let _ = self.hist.add(&other.hist);
    }

    pub(crate) fn len(&self) -> u64 {
        self.hist.len()
    }

    /// The percentile curve: `(nines, µs)` points, where `nines` is `-log10(1 - q)` for the
    /// quantile `q` (0 is the fastest sample, 1 the p90, 2 the p99, …), up to the quantile
    /// the samples resolve (one in `len`, at most p99.99).
    pub(crate) fn curve(&self) -> Vec<(f64, f64)> {
        let n = self.len();
        if n == 0 {
            return Vec::new();
        }
        let top = (n as f64).log10().clamp(1.0, 4.0);
        let steps = (top * 20.0).ceil() as u32;
        (0..=steps)
            .map(|i| {
                let nines = top * f64::from(i) / f64::from(steps);
                let q = 1.0 - 10f64.powf(-nines);
                (nines, self.us(q).max(0.001))
            })
            .collect()
    }

    fn us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Prints the rows as a table, with each p50 as a ratio to the floor's p50.
pub(crate) fn table(title: &str, floor: &Samples, rows: &[Samples]) -> String {
    let mut out = format!(
        "{title}\n{:<36} {:>7} {:>10} {:>10} {:>10} {:>9}\n",
        "operation", "n", "p50 µs", "p99 µs", "p999 µs", "p50/floor"
    );
    for r in std::iter::once(floor).chain(rows) {
        if r.len() == 0 {
            continue;
        }
        out += &format!(
            "{:<36} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>9.2}\n",
            r.name,
            r.len(),
            r.us(0.5),
            r.us(0.99),
            r.us(0.999),
            r.us(0.5) / floor.us(0.5).max(0.001)
        );
    }
    out
}

/// The same as JSON: `{"backend": .., "floor": {..}, "operations": [..]}`.
pub(crate) fn json(backend: &str, floor: &Samples, rows: &[Samples]) -> Value {
    let row = |r: &Samples| {
        json!({
            "operation": r.name,
            "samples": r.len(),
            "p50_us": r.us(0.5),
            "p99_us": r.us(0.99),
            "p999_us": r.us(0.999),
            "p50_over_floor": r.us(0.5) / floor.us(0.5).max(0.001),
        })
    };
    json!({
        "backend": backend,
        "floor": row(floor),
        "operations": rows.iter().filter(|r| r.len() > 0).map(row).collect::<Vec<_>>(),
    })
}
