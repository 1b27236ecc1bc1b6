//! `bench wal --plot`: the commit-latency CDF of every run (eleda §6.5.1
//! reports latency distributions), latency on a log scale.

use std::path::Path;

use plotters::prelude::*;

const COLORS: [RGBColor; 6] = [BLUE, RED, GREEN, MAGENTA, BLACK, CYAN];

/// One curve: its label, `(latency µs, fraction ≤ it)` points, a colour
/// (one per implementation) and a line width (one per thread count).
pub(crate) struct Curve {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) color: usize,
    pub(crate) width: u32,
}

/// Draws `curves` into `path` (SVG).
pub(crate) fn draw_cdf(path: &Path, title: &str, curves: &[Curve]) -> Result<(), String> {
    draw(path, title, curves).map_err(|e| format!("drawing {}: {e}", path.display()))
}

fn draw(path: &Path, title: &str, curves: &[Curve]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let latencies = || curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
    let max_us = latencies().fold(10.0f64, f64::max) * 1.5;
    let min_us = (latencies().fold(f64::INFINITY, f64::min) / 2.0).clamp(1.0, max_us / 10.0);
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((min_us..max_us).log_scale(), 0.0f64..1.0)?;
    chart
        .configure_mesh()
        .x_desc("commit latency to durability (µs, log scale)")
        .y_desc("fraction of commits")
        .draw()?;
    for curve in curves {
        let color = COLORS[curve.color % COLORS.len()];
        let width = curve.width;
        chart
            .draw_series(LineSeries::new(
                curve.points.iter().copied(),
                color.stroke_width(width),
            ))?
            .label(curve.label.clone())
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], color.stroke_width(width))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
