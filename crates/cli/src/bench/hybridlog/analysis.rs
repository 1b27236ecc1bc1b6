//! What a `bench hybridlog` run measured, turned into its report: the
//! threads' histograms merged, throughput and log size per window with
//! the CPR phase of each, the throughput during each checkpoint against
//! the rest (and how soon it is back to 95%), and the time in each phase.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{
    ns_histogram, CheckpointReport, FineReport, PhaseSpan, Taken, ThreadResult, WindowReport,
    BEFORE_S, FINE_WINDOW_S, PHASES,
};
use crate::bench::runner::WINDOW;

/// What the run collected.
pub(super) struct Measured<'a> {
    /// Each worker thread's counts and histograms.
    pub(super) results: &'a [ThreadResult],
    /// `(seconds from t0, operations, log bytes)` every 10 ms.
    pub(super) samples: &'a [(f64, u64, u64)],
    /// The checkpoints taken.
    pub(super) taken: &'a [Taken],
    /// When the measured run began.
    pub(super) t0: Instant,
    /// Latency windows per thread.
    pub(super) windows: usize,
    /// `--duration`.
    pub(super) duration: Duration,
    /// The disk's measured sequential write speed, if probed.
    pub(super) disk_write: Option<f64>,
}

/// The run's figures.
pub(super) struct Analysis {
    pub(super) latency: Histogram<u64>,
    pub(super) by_phase: Vec<Histogram<u64>>,
    pub(super) series: Vec<WindowReport>,
    pub(super) fine_series: Vec<FineReport>,
    pub(super) checkpoints: Vec<CheckpointReport>,
    pub(super) phase_seconds: HashMap<&'static str, f64>,
    pub(super) spans: Vec<PhaseSpan>,
    pub(super) measured_s: f64,
    pub(super) measured_ops: u64,
}

/// Computes the report's figures from what the run measured.
pub(super) fn analyze(measured: &Measured<'_>) -> Analysis {
    let Measured {
        results,
        samples,
        taken,
        t0,
        windows,
        duration,
        disk_write,
    } = *measured;
    // Merge the threads' results.
    let mut latency = ns_histogram();
    let mut by_phase: Vec<Histogram<u64>> = (0..PHASES.len()).map(|_| ns_histogram()).collect();
    let mut merged: Vec<(u64, Histogram<u64>)> =
        (0..windows).map(|_| (0, ns_histogram())).collect();
    let mut ops = 0;
    for r in results {
        ops += r.ops;
        latency.add(&r.latency).expect("same bounds");
        for (into, from) in by_phase.iter_mut().zip(&r.by_phase) {
            into.add(from).expect("same bounds");
        }
        for (into, from) in merged.iter_mut().zip(&r.windows) {
            into.0 += from.0;
            into.1.add(&from.1).expect("same bounds");
        }
    }
    // The run's throughput counts what the 10 ms samples saw by the end of
    // `--duration`: a checkpoint still running then keeps the workers going
    // a little longer (they stop after it), and those operations are left
    // out.
    let (measured_s, measured_ops) = samples
        .last()
        .map_or((duration.as_secs_f64(), ops), |s| (s.0, s.1));
    let spans: Vec<PhaseSpan> = taken.iter().flat_map(|c| c.spans(t0)).collect();
    let phase_at = |from: f64, to: f64| -> &'static str {
        // The phase covering most of [from, to), or rest.
        let mut best = ("rest", 0.0f64);
        for span in &spans {
            let overlap = span.to_s.min(to) - span.from_s.max(from);
            if overlap > best.1 {
                best = (span.phase, overlap);
            }
        }
        best.0
    };
    let width = WINDOW.as_secs_f64();
    let full_windows = (duration.as_nanos() / WINDOW.as_nanos()) as usize;
    let log_at = |t: f64| -> u64 {
        samples
            .iter()
            .take_while(|s| s.0 <= t + 1e-9)
            .last()
            .map_or(0, |s| s.2)
    };
    let series: Vec<WindowReport> = merged
        .iter()
        .take(full_windows)
        .enumerate()
        .map(|(i, (count, hist))| {
            let (from, to) = (i as f64 * width, (i + 1) as f64 * width);
            WindowReport {
                t_s: to,
                txn_s: *count as f64 / width,
                p50_us: hist.value_at_quantile(0.5).div_ceil(1000),
                p50_ns: hist.value_at_quantile(0.5),
                p99_ns: hist.value_at_quantile(0.99),
                checkpointing: taken.iter().any(|c| {
                    (c.start - t0).as_secs_f64() < to && (c.end - t0).as_secs_f64() > from
                }),
                phase: phase_at(from, to),
                log_bytes: log_at(to),
            }
        })
        .collect();
    // Operations at time t, interpolated between the 10 ms samples.
    let ops_at = |t: f64| -> f64 {
        let i = samples.partition_point(|s| s.0 < t);
        match (i.checked_sub(1).map(|j| samples[j]), samples.get(i)) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                a.1 as f64 + (b.1 - a.1) as f64 * (t - a.0) / (b.0 - a.0)
            }
            (_, Some(b)) => b.1 as f64 * (t / b.0.max(1e-9)).min(1.0),
            (Some(a), None) => a.1 as f64,
            (None, None) => 0.0,
        }
    };
    let rate = |from: f64, to: f64| (ops_at(to) - ops_at(from)) / (to - from).max(1e-9);
    let end_s = samples.last().map_or(0.0, |s| s.0);
    let fine_series: Vec<FineReport> = (1..)
        .map(|i| f64::from(i) * FINE_WINDOW_S)
        .take_while(|t| *t <= end_s + 1e-9)
        .map(|t| FineReport {
            t_s: t,
            txn_s: rate(t - FINE_WINDOW_S, t),
            phase: phase_at(t - FINE_WINDOW_S, t),
        })
        .collect();
    // The rest throughput: every time outside a checkpoint and the second
    // after it.
    let intervals: Vec<(f64, f64)> = taken
        .iter()
        .map(|c| ((c.start - t0).as_secs_f64(), (c.end - t0).as_secs_f64()))
        .collect();
    let (mut rest_ops, mut rest_s) = (0.0, 0.0);
    for pair in samples.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if !intervals.iter().any(|(s, e)| b.0 > *s && a.0 < e + 1.0) {
            rest_ops += (b.1 - a.1) as f64;
            rest_s += b.0 - a.0;
        }
    }
    let rest_txn_s = if rest_s > 0.0 { rest_ops / rest_s } else { 0.0 };
    let checkpoints: Vec<CheckpointReport> = taken
        .iter()
        .map(|c| {
            let (start_s, end_s_ckpt) = ((c.start - t0).as_secs_f64(), (c.end - t0).as_secs_f64());
            let writing = c.info.index_time + c.info.phase_times[3];
            let mb_s = |bytes: u64, d: Duration| bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9);
            let write_mb_s = mb_s(c.info.bytes, writing);
            let index_bytes = c.index_bytes.min(c.info.bytes);
            let during = rate(start_s, end_s_ckpt);
            let before = rate((start_s - BEFORE_S).max(0.0), start_s);
            let back = fine_series
                .iter()
                .filter(|w| w.t_s - FINE_WINDOW_S >= end_s_ckpt - 1e-9)
                .find(|w| w.txn_s >= 0.95 * rest_txn_s)
                .map(|w| (w.t_s - FINE_WINDOW_S - end_s_ckpt).max(0.0));
            CheckpointReport {
                version: c.info.version,
                with_index: c.info.with_index,
                start_s,
                end_s: end_s_ckpt,
                phases: c.spans(t0),
                bytes: c.info.bytes,
                index_bytes,
                index_write_mb_s: if c.info.with_index {
                    mb_s(index_bytes, c.info.index_time)
                } else {
                    0.0
                },
                index_over_spare: c.info.index_over_spare,
                log_write_mb_s: mb_s(c.info.bytes - index_bytes, c.info.phase_times[3]),
                write_mb_s,
                write_fraction_of_disk: disk_write.map_or(0.0, |d| write_mb_s / d),
                during_txn_s: during,
                rest_txn_s,
                ratio: during / rest_txn_s.max(1e-9),
                before_txn_s: before,
                ratio_to_before: during / before.max(1e-9),
                back_to_95_s: back,
            }
        })
        .collect();
    let mut phase_seconds: HashMap<&'static str, f64> = HashMap::new();
    for span in &spans {
        *phase_seconds.entry(span.phase).or_insert(0.0) += span.to_s - span.from_s;
    }

    Analysis {
        latency,
        by_phase,
        series,
        fine_series,
        checkpoints,
        phase_seconds,
        spans,
        measured_s,
        measured_ops,
    }
}
