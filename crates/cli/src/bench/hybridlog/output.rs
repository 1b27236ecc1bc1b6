//! What a `bench hybridlog` run shows: the summary table and the figure.

use std::path::Path;

use plotters::prelude::*;

use super::{PhaseSpan, Report, BEFORE_S, PHASES, PHASE_COLORS};
use crate::bench::plot::{time_panel, Line, Shade, COLORS};
use crate::bench::runner::format_count;

/// The summary printed at the end of a run.
pub(super) fn print_summary(r: &Report) {
    let c = &r.config;
    println!();
    println!(
        "hybridlog: {} keys, {} B values, mix {}, {}, {} threads, {} MiB frames ({:.0}% mutable; {:.1} MB of {} records){}",
        c.keys,
        c.value_size,
        c.mix,
        c.dist,
        c.threads,
        c.memory_mb,
        c.mutable_fraction * 100.0,
        c.data_mb,
        c.record_layout,
        if c.prefetch > 0 {
            format!(", prefetch {} ahead", c.prefetch)
        } else {
            String::new()
        }
    );
    println!(
        "  {:>10} ops/s ({} per thread); latency (sampled, ns) p50 {} p99 {} p999 {}; log {:.1} MB",
        format_count(r.throughput_txn_s),
        format_count(r.throughput_txn_s / c.threads as f64),
        r.latency_ns.p50,
        r.latency_ns.p99,
        r.latency_ns.p999,
        r.log_bytes as f64 / 1e6
    );
    if r.disk_reads > 0 {
        println!(
            "  records read from disk: {}, {} of them checked against log.sums",
            r.disk_reads, r.disk_reads_checked
        );
    }
    println!(
        "  sessions' CPU {:.0} ns per operation, {:.1}% of their wall time",
        r.session_cpu_ns_per_op,
        r.session_cpu_share * 100.0
    );
    for p in &r.latency_by_phase {
        println!(
            "  latency in {:<12} p50 {:>6} p99 {:>6} p999 {:>6} max {:>10} ns ({} samples)",
            p.phase,
            p.latency_ns.p50,
            p.latency_ns.p99,
            p.latency_ns.p999,
            p.latency_ns.max,
            p.samples
        );
    }
    for k in &r.checkpoints {
        let phases: Vec<String> = k
            .phases
            .iter()
            .map(|s| format!("{} {:.1}", s.phase, (s.to_s - s.from_s) * 1e3))
            .collect();
        println!(
            "  checkpoint v{} at {:.2}–{:.2} s ({}): {:.1} MB (index {:.1} MB at {:.0} MB/s{}, log {:.1} MB at {:.0} MB/s) at {:.0} MB/s{}; ms per phase: {}",
            k.version,
            k.start_s,
            k.end_s,
            if k.with_index {
                "index + log"
            } else {
                "log only"
            },
            k.bytes as f64 / 1e6,
            k.index_bytes as f64 / 1e6,
            k.index_write_mb_s,
            if k.index_over_spare {
                " over a spare file"
            } else if k.with_index {
                " into a new file"
            } else {
                ""
            },
            (k.bytes - k.index_bytes) as f64 / 1e6,
            k.log_write_mb_s,
            k.write_mb_s,
            r.disk_write_mb_s.map_or(String::new(), |d| format!(
                " ({:.0}% of the disk's {d:.0})",
                k.write_fraction_of_disk * 100.0
            )),
            phases.join(", ")
        );
        println!(
            "    throughput during {} ops/s vs rest {} ops/s: ratio {:.3} ({:.3} of the {BEFORE_S:.1} s before); back to 95% {}",
            format_count(k.during_txn_s),
            format_count(k.rest_txn_s),
            k.ratio,
            k.ratio_to_before,
            k.back_to_95_s
                .map_or("not within the run".to_string(), |s| format!(
                    "after {s:.2} s"
                ))
        );
    }
    if let Some(rec) = &r.recovery {
        println!(
            "  recovery of version {}: {:.3} s, {:.1} MB log + {:.1} MB index + {:.1} MB snapshot at {:.0} MB/s{}; index {:.3} s, replay {:.3} s on {} threads",
            rec.version,
            rec.seconds,
            rec.log_bytes as f64 / 1e6,
            rec.index_bytes as f64 / 1e6,
            rec.snapshot_bytes as f64 / 1e6,
            rec.read_mb_s,
            r.disk_read_mb_s.map_or(String::new(), |d| format!(
                " ({:.0}% of the disk's cold {d:.0})",
                rec.read_fraction_of_disk * 100.0
            )),
            rec.index_seconds,
            rec.replay_seconds,
            rec.replay_threads
        );
        let scrub = &rec.scrub;
        println!(
            "  scrub of the recovered log: {} pieces, {:.1} MB checked in {:.3} s ({:.0} MB/s); {:.1} MB without checksums",
            scrub.pieces,
            scrub.bytes as f64 / 1e6,
            scrub.seconds,
            scrub.mb_s,
            scrub.unchecked_bytes as f64 / 1e6
        );
    }
}

/// Throughput (0.5 s and 0.1 s), log size and p99 latency over time, each
/// CPR phase shaded in its colour (cpr-sigmod19 Figures 11, 12, 14).
pub(super) fn draw(path: &Path, r: &Report, spans: &[PhaseSpan]) -> Result<(), String> {
    let inner = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
        root.fill(&WHITE)?;
        let c = &r.config;
        let title = format!(
            "hybridlog {} {}, {} B values, {} threads; shaded: index grey, prepare yellow, in-progress orange, wait-pending red, wait-flush blue",
            c.mix, c.dist, c.value_size, c.threads
        );
        let root = root.titled(&title, ("sans-serif", 14))?;
        let panels = root.split_evenly((3, 1));
        let t_max = r.series.last().map_or(1.0, |w| w.t_s).max(c.duration_s);
        let shades: Vec<Shade> = spans
            .iter()
            .map(|s| Shade {
                from: s.from_s,
                to: s.to_s.max(s.from_s + t_max / 900.0),
                color: PHASE_COLORS[PHASES.iter().position(|p| *p == s.phase).unwrap_or(1) - 1]
                    .mix(0.6),
            })
            .collect();
        time_panel(
            &panels[0],
            t_max,
            "throughput (M ops/s)",
            &shades,
            &[
                Line {
                    label: Some("0.5 s windows".into()),
                    color: COLORS[0],
                    points: r.series.iter().map(|w| (w.t_s, w.txn_s / 1e6)).collect(),
                },
                Line {
                    label: Some("0.1 s windows".into()),
                    color: COLORS[1],
                    points: r
                        .fine_series
                        .iter()
                        .map(|w| (w.t_s, w.txn_s / 1e6))
                        .collect(),
                },
            ],
        )?;
        time_panel(
            &panels[1],
            t_max,
            "log size (MB)",
            &shades,
            &[Line {
                label: None,
                color: COLORS[2],
                points: r
                    .series
                    .iter()
                    .map(|w| (w.t_s, w.log_bytes as f64 / 1e6))
                    .collect(),
            }],
        )?;
        time_panel(
            &panels[2],
            t_max,
            "latency per 0.5 s (ns)",
            &shades,
            &[
                Line {
                    label: Some("p99".into()),
                    color: COLORS[3],
                    points: r.series.iter().map(|w| (w.t_s, w.p99_ns as f64)).collect(),
                },
                Line {
                    label: Some("p50".into()),
                    color: COLORS[4],
                    points: r.series.iter().map(|w| (w.t_s, w.p50_ns as f64)).collect(),
                },
            ],
        )?;
        root.present()?;
        Ok(())
    };
    inner().map_err(|e| format!("drawing {}: {e}", path.display()))
}
