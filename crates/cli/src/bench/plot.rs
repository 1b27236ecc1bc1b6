//! Throughput and latency over time as an SVG (the papers' Figures 1 and
//! 5): one line per run, periods when a checkpoint ran shaded grey. The
//! time-axis panel ([`time_panel`]) is shared with `bench hybridlog`'s
//! figures (cpr-sigmod19 Figures 11, 12, 14), which shade each CPR phase.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::RunResult;

/// Line colours, one per run or series.
pub(crate) const COLORS: [RGBColor; 5] = [BLUE, RED, GREEN, MAGENTA, BLACK];

/// One line of a [`time_panel`]: `(t seconds, y)` points, and a legend
/// label (the legend is drawn when any line has one).
pub(crate) struct Line {
    pub(crate) label: Option<String>,
    pub(crate) color: RGBColor,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A shaded time span `[from, to)` of a [`time_panel`].
pub(crate) struct Shade {
    pub(crate) from: f64,
    pub(crate) to: f64,
    pub(crate) color: RGBAColor,
}

/// Draws `runs` into `path` (SVG).
pub(crate) fn draw(path: &Path, title: &str, runs: &[RunResult]) -> Result<(), String> {
    draw_inner(path, title, runs).map_err(|e| format!("drawing {}: {e}", path.display()))
}

fn draw_inner(
    path: &Path,
    title: &str,
    runs: &[RunResult],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (top, bottom) = root.split_vertically(350);
    let t_max = runs
        .iter()
        .flat_map(|r| r.series.last().map(|w| w.t_s))
        .fold(1.0f64, f64::max);
    let width = super::runner::WINDOW.as_secs_f64();
    let shades: Vec<Shade> = runs
        .iter()
        .flat_map(|run| run.series.iter().filter(|w| w.checkpointing))
        .map(|w| Shade {
            from: w.t_s - width,
            to: w.t_s,
            color: RGBColor(200, 200, 200).mix(0.5),
        })
        .collect();
    let lines = |y: &dyn Fn(&super::report::Window) -> f64, labels: bool| -> Vec<Line> {
        runs.iter()
            .enumerate()
            .map(|(i, run)| Line {
                label: labels.then(|| run.mode.clone()),
                color: COLORS[i % COLORS.len()],
                points: run.series.iter().map(|w| (w.t_s, y(w))).collect(),
            })
            .collect()
    };
    time_panel(
        &top,
        t_max,
        "throughput (Mtxn/s)",
        &shades,
        &lines(&|w| w.txn_s / 1e6, true),
    )?;
    time_panel(
        &bottom,
        t_max,
        "p50 latency to durability (ms)",
        &shades,
        &lines(&|w| w.p50_us as f64 / 1e3, false),
    )?;
    root.present()?;
    Ok(())
}

/// One panel with time (s) on the x axis from 0 to `t_max`: `shades`
/// behind, then `lines`; the y axis runs from 0 to 15% above the highest
/// point.
pub(crate) fn time_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    t_max: f64,
    y_desc: &str,
    shades: &[Shade],
    lines: &[Line],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        * 1.15
        + 1e-6;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_desc)
        .draw()?;
    chart.draw_series(
        shades
            .iter()
            .map(|s| Rectangle::new([(s.from, 0.0), (s.to, y_max)], s.color.filled())),
    )?;
    for line in lines {
        let color = line.color;
        let series = chart.draw_series(LineSeries::new(
            line.points.iter().copied(),
            color.stroke_width(2),
        ))?;
        if let Some(label) = &line.label {
            series.label(label.clone()).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    if lines.iter().any(|l| l.label.is_some()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}
