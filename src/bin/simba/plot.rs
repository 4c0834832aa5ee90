//! `simba bench --plot FILE`: each operation's percentile curve beside the floor's, on a
//! log-scale latency axis, drawn with plotters as SVG.

use crate::report::Samples;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use simba_lease::{Error, Result};
use std::ops::Range;

/// The percentile a number of nines stands for (`2` → `p99`).
fn percentile(nines: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-nines));
    if p < 99.0 {
        format!("p{p:.0}")
    } else {
        let digits = (nines - 2.0).ceil().max(0.0) as usize;
        format!("p{p:.digits$}")
    }
}

/// A latency in µs as a short label (`850ns`, `12µs`, `3.4ms`, `1.2s`).
fn latency(us: f64) -> String {
    if us < 1.0 {
        format!("{:.0}ns", us * 1000.0)
    } else if us < 1000.0 {
        format!("{us:.0}µs")
    } else if us < 1_000_000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

/// The percentiles labelled on the x axis, up to `top` nines: p0, p50, p90, p99, p99.9 and
/// p99.99.
fn key_points(top: f64) -> Vec<f64> {
    [0.0, 2f64.log10(), 1.0, 2.0, 3.0, 4.0]
        .into_iter()
        .filter(|n| *n <= top + 1e-9)
        .collect()
}

/// The x axis: percentiles as nines (`-log10(1 - q)`) from 0 to `top`, with a mark and a
/// label at each of [`key_points`].
struct Nines {
    top: f64,
}

impl Ranged for Nines {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (v / self.top * span).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        key_points(self.top)
    }

    fn range(&self) -> Range<f64> {
        0.0..self.top
    }
}

impl ValueFormatter<f64> for Nines {
    fn format(v: &f64) -> String {
        percentile(*v)
    }
}

fn drawing(e: impl std::fmt::Display) -> Error {
    Error::config("plot", format!("drawing the plot failed: {e}"))
}

/// Writes the SVG of `rows` (those with samples), one panel each with `floor` drawn in it,
/// to `path`. Only SVG: a `.png` path is refused (PNG would need a font library).
pub(crate) fn write(path: &str, title: &str, floor: &Samples, rows: &[Samples]) -> Result<()> {
    check_path(path)?;
    let svg = render(title, floor, rows)?;
    std::fs::write(path, svg)
        .map_err(|e| Error::config("plot", format!("cannot write {path:?}: {e}")))
}

/// Refuses a file name that does not end in `.svg` (checked before the run).
pub(crate) fn check_path(path: &str) -> Result<()> {
    if path.to_ascii_lowercase().ends_with(".svg") {
        return Ok(());
    }
    Err(Error::config(
        "plot",
        format!("{path:?}: the plot is written as SVG; give a file name ending in .svg"),
    ))
}

/// The SVG document.
pub(crate) fn render(title: &str, floor: &Samples, rows: &[Samples]) -> Result<String> {
    let rows: Vec<&Samples> = rows.iter().filter(|r| r.len() > 0).collect();
    let (cols, lines) = (2usize, rows.len().div_ceil(2).max(1));
    let mut svg = String::new();
    {
        let size = (1200u32, 60 + 320 * lines as u32);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let root = root
            .titled(
                &format!("{title}: latency by percentile (log scale), beside the floor"),
                ("sans-serif", 22),
            )
            .map_err(drawing)?;
        let floor_curve = floor.curve();
        for (panel, row) in root.split_evenly((lines, cols)).iter().zip(&rows) {
            let curve = row.curve();
            let all = curve.iter().chain(&floor_curve).map(|(_, us)| *us);
            let lo = all.clone().fold(f64::INFINITY, f64::min).max(0.001);
            let hi = all.fold(0.0, f64::max).max(lo * 10.0);
            let top = curve
                .iter()
                .chain(&floor_curve)
                .map(|(n, _)| *n)
                .fold(1.0, f64::max);
            let mut chart = ChartBuilder::on(panel)
                .caption(&row.name, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(32)
                .y_label_area_size(64)
                // Room above the curves for the legend.
                .build_cartesian_2d(Nines { top }, (lo / 1.5..hi * 8.0).log_scale())
                .map_err(drawing)?;
            chart
                .configure_mesh()
                .x_desc("percentile")
                .y_desc("latency")
                .y_labels(8)
                .max_light_lines(1)
                .y_label_formatter(&|us| latency(*us))
                .draw()
                .map_err(drawing)?;
            let op_color = RGBColor(200, 40, 40);
            chart
                .draw_series(LineSeries::new(curve, op_color.stroke_width(2)))
                .map_err(drawing)?
                .label(&row.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], op_color.stroke_width(2))
                });
            chart
                .draw_series(LineSeries::new(
                    floor_curve.clone(),
                    RGBColor(90, 90, 90).stroke_width(1),
                ))
                .map_err(drawing)?
                .label(&floor.name)
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(90, 90, 90)));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(drawing)?;
        }
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_latencies_are_labelled_shortly() {
        assert_eq!(percentile(0.0), "p0");
        assert_eq!(percentile(2f64.log10()), "p50");
        assert_eq!(key_points(2.5).len(), 4);
        assert_eq!(percentile(1.0), "p90");
        assert_eq!(percentile(2.0), "p99");
        assert_eq!(percentile(3.0), "p99.9");
        assert_eq!(percentile(4.0), "p99.99");
        assert_eq!(latency(0.5), "500ns");
        assert_eq!(latency(12.0), "12µs");
        assert_eq!(latency(3400.0), "3.4ms");
        assert_eq!(latency(1_200_000.0), "1.20s");
    }
}
