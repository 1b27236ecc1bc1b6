//! Benchmark results: the JSON contract of DESIGN.md ("The `epochdb`
//! command") and the summary table.

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::runner::format_count;

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Latency {
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) p999: u64,
    pub(crate) max: u64,
}

impl Latency {
    pub(crate) fn from_histogram(histogram: &Histogram<u64>) -> Self {
        Self {
            p50: histogram.value_at_quantile(0.5),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
        }
    }
}

/// One 0.5 s window of a run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Window {
    pub(crate) t_s: f64,
    pub(crate) txn_s: f64,
    pub(crate) p50_us: u64,
    pub(crate) checkpointing: bool,
}

/// The engine and durability settings a run is given: read by the runner
/// when it opens the database, and written as they are into the run's JSON
/// report (flattened into its `config`).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ModeKnobs {
    /// Workers pinned to cores of their own (`Config::pin_threads`,
    /// `--pin-threads`).
    pub(crate) pin_threads: bool,
    /// Logs written past the page cache (`direct_io` of every mode; not
    /// `--buffered-io`).
    pub(crate) direct_io: bool,
    /// `WalOptions::io_unit_bytes` of the `wal` mode.
    pub(crate) wal_io_unit: usize,
    /// `WalOptions::io_depth`: I/O units the `wal` flusher keeps in flight.
    pub(crate) wal_io_depth: usize,
    /// `WalOptions::worker_help_after_us`: after how long without a worker
    /// pass a `wal` database thread runs one.
    pub(crate) wal_help_after_us: u64,
    /// `WalOptions::yield_backlog_bytes`: above how many bytes of backlog a
    /// `wal` database thread yields.
    pub(crate) wal_yield_backlog: u64,
    /// `WalOptions::flusher_passes`: whether the `wal` flusher passes after
    /// each flush.
    pub(crate) wal_flusher_passes: bool,
    /// `WalOptions::buffer_bytes`: the `wal` mode's log buffer in bytes.
    pub(crate) wal_buffer: usize,
    /// `SilorOptions::log_buffer_bytes`: each `log`/`silor` worker's log
    /// buffer in bytes.
    pub(crate) log_buffer: usize,
    /// `SilorOptions::buffers_per_worker` as given (0: automatic).
    pub(crate) log_buffers_per_worker: usize,
}

/// The settings a run used.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunConfig {
    pub(crate) durability: String,
    pub(crate) threads: usize,
    pub(crate) duration_s: f64,
    pub(crate) epoch_ms: f64,
    pub(crate) seed: u64,
    /// The engine's and its durability modes' settings, as given.
    #[serde(flatten)]
    pub(crate) knobs: ModeKnobs,
    pub(crate) latency_sample_every: u64,
    pub(crate) workload: BTreeMap<String, String>,
}

/// One run's results.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunResult {
    pub(crate) mode: String,
    pub(crate) workload: String,
    pub(crate) throughput_txn_s: f64,
    pub(crate) per_thread_txn_s: f64,
    pub(crate) abort_rate: f64,
    /// Workers' CPU time (`CLOCK_THREAD_CPUTIME_ID`, measured loop only)
    /// per committed transaction, in nanoseconds: the cost of a
    /// transaction without the time a worker was not running.
    pub(crate) worker_cpu_ns_per_txn: f64,
    /// Workers' CPU time over their wall time (1.0: never descheduled).
    pub(crate) worker_cpu_share: f64,
    pub(crate) commits: u64,
    pub(crate) conflicts: u64,
    pub(crate) rollbacks: u64,
    pub(crate) latency_us: Latency,
    pub(crate) latency_samples: u64,
    pub(crate) series: Vec<Window>,
    pub(crate) load_seconds: f64,
    /// What the durability mode wrote during load and run.
    pub(crate) durability: DurabilityReport,
    pub(crate) config: RunConfig,
}

/// The durability mode's counters for one run (load included).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct DurabilityReport {
    pub(crate) log_bytes: u64,
    pub(crate) log_syncs: u64,
    pub(crate) log_rotations: u64,
    /// Times workers waited for a free log buffer (backpressure).
    pub(crate) buffer_waits: u64,
    pub(crate) buffer_wait_seconds: f64,
    /// Log buffers the loggers' pools held at the end of the run.
    pub(crate) log_buffers_allocated: u64,
    /// The most they held at once.
    pub(crate) log_buffers_peak: u64,
    pub(crate) checkpoints: u64,
    pub(crate) checkpoint_bytes: u64,
    pub(crate) checkpoint_seconds: f64,
    /// Seconds per GB of checkpoint written (0 without checkpoints).
    pub(crate) checkpoint_s_per_gb: f64,
}

/// Several runs back to back, with throughput ratios to the first.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Comparison {
    pub(crate) runs: Vec<RunResult>,
    pub(crate) ratios: BTreeMap<String, f64>,
}

impl Comparison {
    pub(crate) fn new(runs: Vec<RunResult>) -> Self {
        let base = runs.first().map_or(1.0, |r| r.throughput_txn_s.max(1e-9));
        let mut ratios = BTreeMap::new();
        for (i, run) in runs.iter().enumerate() {
            // A mode listed twice (`--compare none,none`) keeps both ratios.
            let name = if ratios.contains_key(&run.mode) {
                format!("{}#{}", run.mode, i + 1)
            } else {
                run.mode.clone()
            };
            ratios.insert(name, run.throughput_txn_s / base);
        }
        Self { runs, ratios }
    }
}

/// Prints the summary table.
pub(crate) fn print_summary(runs: &[RunResult]) {
    let base = runs.first().map_or(1.0, |r| r.throughput_txn_s.max(1e-9));
    println!();
    println!(
        "{:<8} {:<12} {:>7} {:>12} {:>12} {:>8} {:>7} {:>9} {:>9} {:>9} {:>11}",
        "mode",
        "workload",
        "threads",
        "txn/s",
        "txn/s/thr",
        "aborts",
        "ratio",
        "p50 us",
        "p99 us",
        "p999 us",
        "cpu ns/txn"
    );
    for r in runs {
        println!(
            "{:<8} {:<12} {:>7} {:>12} {:>12} {:>7.2}% {:>7.3} {:>9} {:>9} {:>9} {:>11.0}",
            r.mode,
            r.workload,
            r.config.threads,
            format_count(r.throughput_txn_s),
            format_count(r.per_thread_txn_s),
            r.abort_rate * 100.0,
            r.throughput_txn_s / base,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            r.worker_cpu_ns_per_txn,
        );
    }
}

/// Writes `value` as pretty JSON to `path`.
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
}
