//! `bench fcc --plot`: the mutator's time per 0.1 s interval for each
//! algorithm and for the raw mutator, as the paper's Figures 8, 9 and 11
//! draw it (log scale: Naive-Snapshot's spike is two orders of magnitude
//! above the rest). `scripts/plot-fcc.py` draws the full set of figures from
//! the JSON.

use std::path::Path;

use plotters::prelude::*;

const COLORS: [RGBColor; 6] = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];

/// Draws each `(name, ms per interval)` series into `path` (SVG).
pub(crate) fn draw(path: &Path, title: &str, series: &[(String, Vec<f64>)]) -> Result<(), String> {
    draw_inner(path, title, series).map_err(|e| format!("drawing {}: {e}", path.display()))
}

fn draw_inner(
    path: &Path,
    title: &str,
    series: &[(String, Vec<f64>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = series
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let values = series.iter().flat_map(|(_, s)| s.iter().copied());
    let lo = values.clone().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    let hi = values.fold(0.0f64, f64::max);
    let (lo, hi) = if lo <= hi {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.01, 1.0)
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1..n, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("0.1 s interval")
        .y_desc("mutator ms per interval")
        .y_label_formatter(&|v| format!("{v:.3}"))
        .draw()?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.iter()
                    .enumerate()
                    .filter(|(_, v)| **v > 0.0)
                    .map(|(k, v)| (k + 1, *v)),
                color,
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
