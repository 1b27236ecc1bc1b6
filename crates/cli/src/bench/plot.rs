//! Throughput and latency over time as an SVG (the papers' Figures 1 and
//! 5): one line per run, periods when a checkpoint ran shaded grey.

use std::path::Path;

use plotters::prelude::*;

use super::report::RunResult;

const COLORS: [RGBColor; 5] = [BLUE, RED, GREEN, MAGENTA, BLACK];

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
    let tput_max = runs
        .iter()
        .flat_map(|r| r.series.iter().map(|w| w.txn_s / 1e6))
        .fold(0.0f64, f64::max)
        * 1.15
        + 1e-6;
    let lat_max = runs
        .iter()
        .flat_map(|r| r.series.iter().map(|w| w.p50_us as f64 / 1e3))
        .fold(0.0f64, f64::max)
        * 1.15
        + 1e-3;

    let mut chart = ChartBuilder::on(&top)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, 0.0..tput_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("throughput (Mtxn/s)")
        .draw()?;
    shade_checkpoints(&mut chart, runs, tput_max)?;
    for (i, run) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                run.series.iter().map(|w| (w.t_s, w.txn_s / 1e6)),
                color.stroke_width(2),
            ))?
            .label(run.mode.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    let mut chart = ChartBuilder::on(&bottom)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, 0.0..lat_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("p50 latency to durability (ms)")
        .draw()?;
    shade_checkpoints(&mut chart, runs, lat_max)?;
    for (i, run) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart.draw_series(LineSeries::new(
            run.series.iter().map(|w| (w.t_s, w.p50_us as f64 / 1e3)),
            color.stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(())
}

fn shade_checkpoints<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    runs: &[RunResult],
    y_max: f64,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    for run in runs {
        let width = super::runner::WINDOW.as_secs_f64();
        chart.draw_series(run.series.iter().filter(|w| w.checkpointing).map(|w| {
            Rectangle::new(
                [(w.t_s - width, 0.0), (w.t_s, y_max)],
                RGBColor(200, 200, 200).mix(0.5).filled(),
            )
        }))?;
    }
    Ok(())
}
