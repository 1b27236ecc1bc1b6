//! `epochdb bench hybridlog`: YCSB on the hybridlog store with CPR
//! checkpoints (cpr-sigmod19 §7, Figures 11–14; issue 7 item 7).
//!
//! 8-byte keys, values of `--value-size` bytes, uniform or Zipf keys, a
//! read:blind-update mix or all read-modify-writes, one session per
//! thread. Checkpoints run at the times `--checkpoint-at` names (seconds
//! into the measured run), each timed phase by phase. The run reports
//! throughput and log size every 0.5 s with the phase of each window,
//! operation latency per window and per CPR phase (sampled), checkpoint
//! bytes and write speed against the disk's measured sequential write
//! speed, the throughput during each checkpoint as a fraction of the rest
//! and how soon it is back to 95%, and (`--recover`) recovery time and
//! read speed from a cold page cache against the disk's cold read speed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use crossbeam_utils::CachePadded;
use epochdb_hybridlog::{
    CheckpointInfo, CheckpointKind, Config, Functions, Phase, RealStorage, RecordLayout, ShiftMode,
    Status, Store, Value,
};
use epochdb_workloads::{KeyChooser, Zipf};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

mod analysis;
mod output;

use analysis::{Analysis, Measured};
use output::{draw, print_summary};

use super::disk::{evict_dir, measure_write_read};
use super::placement::Placement;
use super::report::{write_json, Latency};
use super::runner::{format_count, join_all, thread_cpu_ns, WINDOW};

/// One operation in this many has its latency measured. Each sample reads
/// the clock twice, and the clock read waits for the operations before it
/// to finish (it ends the overlap of their cache misses): at one in 16,
/// as the transaction benchmarks sample, that cost 10-15% of the 1-thread
/// in-memory throughput here (`BENCHMARKS.md`). One in 128 still gives
/// ~30,000 samples a second at 4 M operations a second.
const LATENCY_SAMPLE_EVERY: u64 = 128;

/// `bench hybridlog` flags.
#[derive(Debug, Args)]
pub(crate) struct HybridlogArgs {
    /// Keys loaded (8-byte keys 0..N).
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes (the paper: 8 and 100; at least 8).
    #[arg(long, default_value_t = 8)]
    value_size: usize,
    /// `R:U`, percent reads : percent blind updates (100:0, 90:10, 50:50,
    /// 0:100), or `rmw` (every operation a read-modify-write that adds to
    /// the value's first word).
    #[arg(long, default_value = "50:50")]
    mix: String,
    /// Key distribution.
    #[arg(long, default_value = "uniform", value_parser = ["uniform", "zipf"])]
    dist: String,
    /// Zipf skew θ.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Threads, one session each.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seconds to measure (after loading).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Memory for the log's page frames in MiB (default: four times the
    /// loaded records, at least 16); less than the data puts part of it on
    /// disk.
    #[arg(long)]
    memory_mb: Option<u64>,
    /// Checkpoint kind: `foldover` (read-only moves to the checkpoint's end;
    /// the log is the checkpoint, §6.2), `snapshot` (the in-memory log to a
    /// separate file, Appendix C) or `incremental` (a snapshot of the pages
    /// changed since the previous one).
    #[arg(long, default_value = "foldover", value_parser = ["foldover", "snapshot", "incremental"])]
    checkpoint: String,
    /// Take a checkpoint at these times, in seconds into the measured run
    /// (comma-separated).
    #[arg(long, value_delimiter = ',')]
    checkpoint_at: Vec<f64>,
    /// Checkpoints write only the log (Appendix D): one index checkpoint is
    /// taken after loading, before the measured run.
    #[arg(long)]
    log_only: bool,
    /// The CPR shift (Appendix B): `fine` (bucket latches) or `coarse`
    /// (latch only when going pending).
    #[arg(long, default_value = "fine", value_parser = ["fine", "coarse"])]
    shift: String,
    /// After the run, drop the store, evict its files from the page cache
    /// and recover it, timing the recovery.
    #[arg(long)]
    recover: bool,
    /// Threads that load the index and replay the log at `--recover` (0:
    /// one per core).
    #[arg(long, default_value_t = 0)]
    recovery_threads: usize,
    /// Flush the log through the page cache instead of past it (`O_DIRECT`,
    /// the default where the file system allows it).
    #[arg(long)]
    buffered_io: bool,
    /// Do not check records read from disk against the log's checksums
    /// (`Config::check_disk_reads`, on by default), to measure what the
    /// check costs.
    #[arg(long)]
    unchecked_disk_reads: bool,
    /// Threads that read evicted records from disk (`Config::io_threads`;
    /// 0: one per core, at most 8)
    #[arg(long, default_value_t = 0)]
    io_threads: usize,
    /// The share of the in-memory log that is mutable (`Config::
    /// mutable_fraction`, FASTER's mutable region): below it an update
    /// copies the record to the tail instead of updating it in place.
    #[arg(long, default_value_t = 0.9)]
    mutable_fraction: f64,
    /// Software prefetch, as a caller that knows its next keys can do
    /// (`Session::prefetch_bucket` and `Session::prefetch_record`): each
    /// operation first asks for the index bucket of the key N operations
    /// ahead in its batch and for the record of the key N/2 ahead. 0 (the
    /// default): none, as FASTER's benchmark driver.
    #[arg(long, default_value_t = 0)]
    prefetch: usize,
    /// How records hold their lengths (`Config::record_layout`): `fixed`
    /// (the default: 8-byte keys and `--value-size` values with no length
    /// word, FASTER's fixed-size records, 24 bytes for 8-byte values) or
    /// `variable` (a length word per record, 32 bytes for 8-byte values).
    #[arg(long, default_value = "fixed", value_parser = ["fixed", "variable"])]
    record_layout: String,
    /// Transparent huge pages for the index and the log's frames: on (the
    /// default, `Config::huge_pages`) or off (4 KiB pages).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    huge_pages: String,
    /// Whether the log's frames are faulted in on a background thread when
    /// the store opens (`on`, the default, `Config::prefault_frames`) or
    /// on first touch (`off`).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    prefault_frames: String,
    /// Pins each session thread to a CPU of its own and the store's own
    /// threads (flush, I/O, the checkpoint driver and the writers it
    /// starts) and the sampler to the CPUs left over (none left: they are
    /// not pinned), so that a checkpoint's work does not share the
    /// sessions' cores. Loading is not pinned.
    #[arg(long)]
    pin_threads: bool,
    /// Directory for the store (it uses a fresh `hybridlog` subdirectory);
    /// default: a fresh temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw throughput, log size and p99 latency over time, CPR phases
    /// shaded, as SVG here.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// RMW for values of any size of at least 8 bytes: adds the input to the
/// first word (AddU64 on the first 8 bytes, the rest kept).
#[derive(Debug, Clone, Copy)]
struct AddFirstWord {
    value_size: usize,
}

impl Functions for AddFirstWord {
    type Input = u64;

    fn initial_len(&self, _input: &u64) -> usize {
        self.value_size
    }

    fn initial(&self, input: &u64, value: &mut [u8]) {
        value[..8].copy_from_slice(&input.to_le_bytes());
    }

    fn in_place(&self, value: &Value<'_>, input: &u64) -> bool {
        if value.len() < 8 {
            return false;
        }
        value.word(0).fetch_add(*input, Ordering::Relaxed);
        true
    }

    fn copy_len(&self, old: &[u8], _input: &u64) -> usize {
        old.len().max(8)
    }

    fn copy(&self, old: &[u8], input: &u64, value: &mut [u8]) {
        value[..old.len()].copy_from_slice(old);
        let first = old
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        value[..8].copy_from_slice(&first.wrapping_add(*input).to_le_bytes());
    }
}

/// The operation mix.
#[derive(Debug, Clone, Copy)]
struct Mix {
    read_percent: u32,
    rmw: bool,
}

fn parse_mix(text: &str) -> Result<Mix, String> {
    if text == "rmw" {
        return Ok(Mix {
            read_percent: 0,
            rmw: true,
        });
    }
    let bad = || format!("--mix {text}: expected R:U with R + U = 100 (e.g. 90:10), or rmw");
    let (r, u) = text.split_once(':').ok_or_else(bad)?;
    let r: u32 = r.parse().map_err(|_| bad())?;
    let u: u32 = u.parse().map_err(|_| bad())?;
    if r + u != 100 {
        return Err(bad());
    }
    Ok(Mix {
        read_percent: r,
        rmw: false,
    })
}

/// CPR phases as reported: `index` is the fuzzy index checkpoint, written
/// in REST before PREPARE.
const PHASES: [&str; 6] = [
    "rest",
    "index",
    "prepare",
    "in_progress",
    "wait_pending",
    "wait_flush",
];

/// Shading colours of the phases after `rest` (Figures 11, 12, 14).
const PHASE_COLORS: [RGBColor; 5] = [
    RGBColor(160, 160, 160),
    RGBColor(255, 215, 0),
    RGBColor(255, 140, 0),
    RGBColor(220, 20, 60),
    RGBColor(100, 149, 237),
];

fn session_phase(phase: Phase) -> usize {
    match phase {
        Phase::Rest => 0,
        Phase::Prepare => 2,
        Phase::InProgress => 3,
        Phase::WaitPending => 4,
        Phase::WaitFlush => 5,
    }
}

/// The disk probe: large enough to get past the device's write cache.
const PROBE_MIB: usize = 256;
/// Longest latency the histograms hold (60 s, in ns): operations take
/// well under a microsecond.
const LATENCY_MAX_NS: u64 = 60_000_000_000;

/// An empty latency histogram in nanoseconds.
fn ns_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("valid histogram bounds")
}

/// Percentiles of a nanosecond histogram, in microseconds (rounded up).
fn micros(latency: &Latency) -> Latency {
    let us = |ns: u64| ns.div_ceil(1000);
    Latency {
        p50: us(latency.p50),
        p99: us(latency.p99),
        p999: us(latency.p999),
        max: us(latency.max),
    }
}

/// Fine samples of the run (every 10 ms).
const SAMPLE: Duration = Duration::from_millis(10);
/// Seconds before a checkpoint whose throughput `ratio_to_before` compares
/// with the checkpoint's.
const BEFORE_S: f64 = 0.5;
/// Width of the windows the dip and the return to 95% are judged on.
const FINE_WINDOW_S: f64 = 0.1;

#[derive(Serialize, Clone)]
struct PhaseSpan {
    phase: &'static str,
    from_s: f64,
    to_s: f64,
}

#[derive(Serialize)]
struct CheckpointReport {
    version: u32,
    with_index: bool,
    start_s: f64,
    end_s: f64,
    phases: Vec<PhaseSpan>,
    bytes: u64,
    /// Of `bytes`, the index checkpoint file (0 for a log-only one).
    index_bytes: u64,
    /// The index file over the index phase.
    index_write_mb_s: f64,
    /// Whether the index was written over the spare file an older
    /// checkpoint left rather than into a new file
    /// (`CheckpointInfo::index_over_spare`): new files write slower.
    index_over_spare: bool,
    /// The rest of `bytes` (log flushed for the fold-over) over WAIT_FLUSH.
    log_write_mb_s: f64,
    /// Bytes over the time spent writing: the index phase and WAIT_FLUSH.
    write_mb_s: f64,
    /// `write_mb_s` over the disk's measured sequential write speed.
    write_fraction_of_disk: f64,
    during_txn_s: f64,
    rest_txn_s: f64,
    /// `during_txn_s / rest_txn_s` (target ≥ 0.8).
    ratio: f64,
    /// Throughput over the [`BEFORE_S`] seconds just before the
    /// checkpoint began (from the run's start if it began sooner).
    before_txn_s: f64,
    /// `during_txn_s / before_txn_s`: the dip against the machine's speed
    /// right then, which on a shared VM drifts by ±30% over seconds, where
    /// `rest_txn_s` averages the whole run (with checkpoints every second,
    /// only its first second).
    ratio_to_before: f64,
    /// Seconds after the end until a 0.1 s window reaches 95% of the rest
    /// throughput (target ≤ 1); `None` if the run ended first.
    back_to_95_s: Option<f64>,
}

#[derive(Serialize)]
struct WindowReport {
    t_s: f64,
    txn_s: f64,
    p50_us: u64,
    p50_ns: u64,
    p99_ns: u64,
    checkpointing: bool,
    phase: &'static str,
    log_bytes: u64,
}

#[derive(Serialize)]
struct FineReport {
    t_s: f64,
    txn_s: f64,
    phase: &'static str,
}

#[derive(Serialize)]
struct PhaseLatency {
    phase: &'static str,
    samples: u64,
    latency_ns: Latency,
}

#[derive(Serialize)]
struct RecoveryReport {
    seconds: f64,
    version: u32,
    log_bytes: u64,
    index_bytes: u64,
    /// Snapshot pieces read (and copied into the log file) by a snapshot
    /// checkpoint's recovery (Appendix C); 0 after a fold-over.
    snapshot_bytes: u64,
    /// Log, index and snapshot bytes over the whole recovery's wall time
    /// (`seconds`, which includes allocating the log's frames).
    read_mb_s: f64,
    read_fraction_of_disk: f64,
    index_seconds: f64,
    replay_seconds: f64,
    replay_threads: usize,
    /// `Store::verify_log` right after the recovery: the whole log on disk
    /// read back and checked against its checksums (mostly from the page
    /// cache the recovery just filled).
    scrub: ScrubReport,
}

/// What a scrub of the recovered log read ([`RecoveryReport::scrub`]).
#[derive(Serialize)]
struct ScrubReport {
    pieces: u64,
    bytes: u64,
    unchecked_bytes: u64,
    seconds: f64,
    mb_s: f64,
}

#[derive(Serialize)]
struct RunConfig {
    store: &'static str,
    keys: u64,
    value_size: usize,
    /// `--record-layout`.
    record_layout: String,
    mix: String,
    dist: String,
    theta: f64,
    threads: usize,
    duration_s: f64,
    memory_mb: u64,
    mutable_fraction: f64,
    prefetch: usize,
    /// `--pin-threads`.
    pin_threads: bool,
    data_mb: f64,
    page_bytes: u64,
    index_buckets: usize,
    checkpoint: String,
    checkpoint_at: Vec<f64>,
    log_only: bool,
    shift: String,
    seed: u64,
    latency_sample_every: u64,
}

#[derive(Serialize)]
struct Report {
    throughput_txn_s: f64,
    operations: u64,
    /// The sessions' CPU time per operation over their whole loops, ns.
    session_cpu_ns_per_op: f64,
    /// The sessions' CPU time over their wall time (1.0: never off a
    /// core; lower: preempted, or waiting).
    session_cpu_share: f64,
    abort_rate: f64,
    latency_us: Latency,
    latency_ns: Latency,
    latency_by_phase: Vec<PhaseLatency>,
    series: Vec<WindowReport>,
    fine_series: Vec<FineReport>,
    checkpoints: Vec<CheckpointReport>,
    phase_seconds: HashMap<&'static str, f64>,
    log_bytes: u64,
    /// Records read from the log file below head during the run (loading
    /// included), and of those how many were checked against `log.sums`.
    disk_reads: u64,
    disk_reads_checked: u64,
    load_seconds: f64,
    disk_write_mb_s: Option<f64>,
    /// The disk's cold sequential read speed: the faster of the two below.
    disk_read_mb_s: Option<f64>,
    /// Read through the page cache.
    disk_read_buffered_mb_s: Option<f64>,
    /// Read past the page cache (`O_DIRECT`).
    disk_read_direct_mb_s: Option<f64>,
    /// Whether the log was flushed past the page cache (and the disk's
    /// write speed probed the same way).
    direct_io: bool,
    /// Whether the index and the frames asked for huge pages.
    huge_pages: bool,
    /// Whether the frames were faulted in when the store opened.
    prefault_frames: bool,
    recovery: Option<RecoveryReport>,
    config: RunConfig,
}

/// One checkpoint as the checkpoint thread saw it.
struct Taken {
    start: Instant,
    end: Instant,
    info: CheckpointInfo,
    index_bytes: u64,
}

impl Taken {
    /// The phase spans, in seconds from `t0`.
    fn spans(&self, t0: Instant) -> Vec<PhaseSpan> {
        let mut at = (self.start - t0).as_secs_f64();
        let mut spans = Vec::new();
        let durations = std::iter::once(self.info.index_time).chain(self.info.phase_times);
        for (i, d) in durations.enumerate() {
            let to = at + d.as_secs_f64();
            if i > 0 || self.info.with_index {
                spans.push(PhaseSpan {
                    phase: PHASES[i + 1],
                    from_s: at,
                    to_s: to,
                });
            }
            at = to;
        }
        spans
    }
}

struct ThreadResult {
    ops: u64,
    /// The thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) and wall time
    /// over its operation loop, in ns.
    cpu_ns: u64,
    wall_ns: u64,
    latency: Histogram<u64>,
    by_phase: Vec<Histogram<u64>>,
    windows: Vec<(u64, Histogram<u64>)>,
}

/// The checkpoint kind and shift `--checkpoint` and `--shift` name.
fn kind_and_shift(args: &HybridlogArgs) -> (CheckpointKind, ShiftMode) {
    let kind = match args.checkpoint.as_str() {
        "snapshot" => CheckpointKind::Snapshot,
        "incremental" => CheckpointKind::IncrementalSnapshot,
        _ => CheckpointKind::FoldOver,
    };
    let shift = match args.shift.as_str() {
        "coarse" => ShiftMode::Coarse,
        _ => ShiftMode::Fine,
    };
    (kind, shift)
}

/// Checks the flags together; returns the parsed mix.
fn check_args(args: &HybridlogArgs) -> Result<Mix, String> {
    let mix = parse_mix(&args.mix)?;
    if args.keys == 0 || args.threads == 0 {
        return Err("--keys and --threads must be at least 1".into());
    }
    if args.value_size < 8 {
        return Err("--value-size must be at least 8".into());
    }
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err("--duration must be positive".into());
    }
    if !(args.mutable_fraction > 0.0 && args.mutable_fraction <= 1.0) {
        return Err("--mutable-fraction must be in (0, 1]".into());
    }
    if args.dist == "zipf" && !(args.theta > 0.0 && args.theta != 1.0) {
        return Err("--theta must be positive and not 1".into());
    }
    if let Some(&bad) = args
        .checkpoint_at
        .iter()
        .find(|t| !(t.is_finite() && **t >= 0.0 && **t < args.duration))
    {
        return Err(format!("--checkpoint-at {bad}: must be in [0, --duration)"));
    }
    if args.recover && args.checkpoint_at.is_empty() && !args.log_only {
        return Err("--recover needs a checkpoint (--checkpoint-at or --log-only)".into());
    }
    Ok(mix)
}

pub(crate) fn run(args: HybridlogArgs) -> Result<(), String> {
    let (checkpoint_kind, shift_mode) = kind_and_shift(&args);
    let mix = check_args(&args)?;
    let record_layout = if args.record_layout == "fixed" {
        RecordLayout::Fixed {
            key_bytes: 8,
            value_bytes: u32::try_from(args.value_size)
                .map_err(|_| format!("--value-size {} is too large", args.value_size))?,
        }
    } else {
        RecordLayout::Variable
    };
    let header_bytes = if args.record_layout == "fixed" { 8 } else { 16 };
    let record_bytes = header_bytes + 8 + args.value_size.div_ceil(8) as u64 * 8;
    let data_bytes = args.keys * record_bytes;
    let memory_mb = args
        .memory_mb
        .unwrap_or_else(|| (4 * data_bytes).div_ceil(1 << 20).max(16));
    let page_bits = 20;
    if memory_mb < 4 {
        return Err("--memory-mb must be at least 4 (four 1 MiB pages)".into());
    }
    let config = Config {
        index_buckets: config_buckets(args.keys),
        page_bits,
        memory_bytes: memory_mb << 20,
        mutable_fraction: args.mutable_fraction,
        max_sessions: args.threads + 8,
        checkpoint_kind,
        shift_mode,
        recovery_threads: args.recovery_threads,
        direct_io: !args.buffered_io,
        check_disk_reads: !args.unchecked_disk_reads,
        io_threads: args.io_threads,
        huge_pages: args.huge_pages == "on",
        prefault_frames: args.prefault_frames == "on",
        record_layout,
        ..Config::default()
    };
    let (_scratch, root) = super::run_root(args.dir.as_ref())?;
    let dir = root.join("hybridlog");
    if dir.exists() {
        return Err(format!(
            "--dir {}: {} exists from an earlier run; remove it or choose another --dir",
            root.display(),
            dir.display()
        ));
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let (disk_write, disk_read) = if args.checkpoint_at.is_empty() && !args.recover {
        (None, None)
    } else {
        // The write is probed the way the store flushes: past the page
        // cache unless --buffered-io.
        let speeds = measure_write_read(&root, PROBE_MIB, config.direct_io)?;
        eprintln!(
            "[hybridlog] disk: sequential write ({}) with fsync {:.0} MB/s, cold read {:.0} MB/s \
                 (buffered {:.0}, direct {:.0}: the faster is the disk's)",
            if config.direct_io {
                "direct"
            } else {
                "buffered"
            },
            speeds.write,
            speeds.read(),
            speeds.read_buffered,
            speeds.read_direct,
        );
        (Some(speeds.write), Some(speeds))
    };
    let functions = AddFirstWord {
        value_size: args.value_size,
    };
    let placement = Placement::new(args.pin_threads, args.threads);
    // The store's flush and I/O threads inherit the opening thread's
    // affinity.
    let store = placement
        .for_background(|| {
            Store::open(
                Arc::new(RealStorage::new()),
                &dir,
                config.clone(),
                functions,
            )
        })
        .map_err(|e| format!("opening the store: {e}"))?;

    let load_start = Instant::now();
    load(&store, args.keys, args.value_size, args.threads)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    eprintln!(
        "[hybridlog] loaded {} keys of {} B values ({:.1} MB of records, {} MiB of frames) in {load_seconds:.1} s",
        args.keys,
        args.value_size,
        data_bytes as f64 / 1e6,
        memory_mb
    );
    if args.log_only {
        let info = store
            .checkpoint(true)
            .map_err(|e| format!("the initial index checkpoint: {e}"))?;
        eprintln!(
            "[hybridlog] initial index checkpoint (version {}): {:.1} MB",
            info.version,
            info.bytes as f64 / 1e6
        );
    }

    let chooser = if args.dist == "zipf" {
        KeyChooser::ScrambledZipf(Zipf::new(args.keys, args.theta))
    } else {
        KeyChooser::Uniform { n: args.keys }
    };
    let duration = Duration::from_secs_f64(args.duration);
    let windows = (duration.as_nanos() / WINDOW.as_nanos()) as usize + 2;
    let counters: Vec<CachePadded<AtomicU64>> = (0..args.threads)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect();
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(args.threads + 2);
    let taken: Mutex<Vec<Taken>> = Mutex::new(Vec::new());
    let checkpoint_error: Mutex<Option<String>> = Mutex::new(None);
    let mut at = args.checkpoint_at.clone();
    at.sort_by(f64::total_cmp);
    // (t, operations, log bytes) every 10 ms.
    let mut samples: Vec<(f64, u64, u64)> = Vec::new();
    let mut t0 = Instant::now();

    // The sampler (this thread) and the checkpoint driver run on the
    // background CPUs with `--pin-threads`; recovery afterwards does not.
    let results = placement.for_background(|| {
        std::thread::scope(|scope| -> Result<Vec<ThreadResult>, String> {
            let mut handles = Vec::new();
            for thread in 0..args.threads {
                let (store, chooser, counters, stop, barrier) =
                    (&store, &chooser, &counters, &stop, &barrier);
                let seed = args
                    .seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add(thread as u64);
                let value_size = args.value_size;
                let prefetch = args.prefetch;
                let placement = &placement;
                handles.push(scope.spawn(move || {
                    placement.pin_measured_thread(thread);
                    worker(
                        store,
                        chooser,
                        mix,
                        seed,
                        value_size,
                        prefetch,
                        windows,
                        &counters[thread],
                        stop,
                        barrier,
                    )
                }));
            }
            let checkpointer = {
                let (store, stop, barrier, taken, checkpoint_error, at, dir) = (
                    &store,
                    &stop,
                    &barrier,
                    &taken,
                    &checkpoint_error,
                    &at,
                    &dir,
                );
                let with_index = !args.log_only;
                // Spawned on the background CPUs (this scope runs there), so
                // the checkpoint's writer and sync threads start there too.
                scope.spawn(move || {
                    barrier.wait();
                    if let Err(error) = take_checkpoints(store, at, with_index, dir, stop, taken) {
                        *checkpoint_error.lock().expect("not poisoned") = Some(error);
                    }
                })
            };
            barrier.wait();
            t0 = Instant::now();
            let mut next_report = t0 + Duration::from_secs(1);
            let mut last = (t0, 0u64);
            let total = || -> u64 { counters.iter().map(|c| c.load(Ordering::Relaxed)).sum() };
            while t0.elapsed() < duration {
                std::thread::sleep(SAMPLE);
                let now = Instant::now();
                let ops = total();
                let addresses = store.addresses();
                samples.push((
                    (now - t0).as_secs_f64(),
                    ops,
                    addresses.tail - addresses.begin,
                ));
                if now >= next_report {
                    let rate = (ops - last.1) as f64 / (now - last.0).as_secs_f64();
                    let state = store.system_state();
                    eprintln!(
                        "[hybridlog] {:5.1} s  {:>10} ops/s  log {:>8.1} MB  {:?} v{}",
                        (now - t0).as_secs_f64(),
                        format_count(rate),
                        (addresses.tail - addresses.begin) as f64 / 1e6,
                        state.phase,
                        state.version
                    );
                    last = (now, ops);
                    next_report += Duration::from_secs(1);
                }
            }
            // A checkpoint still running needs the sessions: stop them after it.
            let _ = checkpointer.join();
            stop.store(true, Ordering::Relaxed);
            join_all(handles)
        })
    })?;
    if let Some(error) = checkpoint_error.into_inner().expect("not poisoned") {
        return Err(error);
    }
    let taken = taken.into_inner().expect("not poisoned");
    let log_bytes = {
        let a = store.addresses();
        a.tail - a.begin
    };
    let disk_reads = store.disk_reads();

    let Analysis {
        latency,
        by_phase,
        series,
        fine_series,
        checkpoints,
        phase_seconds,
        spans,
        measured_s,
        measured_ops,
    } = analysis::analyze(&Measured {
        results: &results,
        samples: &samples,
        taken: &taken,
        t0,
        windows,
        duration,
        disk_write,
    });

    let recovery = if args.recover {
        drop(store);
        evict_dir(&dir)?;
        let recovered = Store::open(Arc::new(RealStorage::new()), &dir, config, functions)
            .map_err(|e| format!("recovering: {e}"))?;
        let info = recovered
            .recovered()
            .cloned()
            .ok_or("recovering: no checkpoint found")?;
        let scrub_started = Instant::now();
        let verified = recovered
            .verify_log()
            .map_err(|e| format!("checking the recovered log: {e}"))?;
        let scrub_seconds = scrub_started.elapsed().as_secs_f64();
        drop(recovered);
        let read_mb_s = info.mb_per_second();
        Some(RecoveryReport {
            seconds: info.elapsed.as_secs_f64(),
            version: info.version,
            log_bytes: info.log_bytes,
            index_bytes: info.index_bytes,
            snapshot_bytes: info.snapshot_bytes,
            read_mb_s,
            read_fraction_of_disk: disk_read.map_or(0.0, |d| read_mb_s / d.read()),
            index_seconds: info.index_time.as_secs_f64(),
            replay_seconds: info.replay_time.as_secs_f64(),
            replay_threads: info.replay_threads,
            scrub: ScrubReport {
                pieces: verified.pieces,
                bytes: verified.bytes,
                unchecked_bytes: verified.unchecked_bytes,
                seconds: scrub_seconds,
                mb_s: verified.bytes as f64 / 1e6 / scrub_seconds.max(1e-9),
            },
        })
    } else {
        drop(store);
        None
    };

    let (cpu_ns, wall_ns, loop_ops) = results.iter().fold((0u64, 0u64, 0u64), |t, r| {
        (t.0 + r.cpu_ns, t.1 + r.wall_ns, t.2 + r.ops)
    });
    let report = Report {
        throughput_txn_s: measured_ops as f64 / measured_s.max(1e-9),
        operations: measured_ops,
        session_cpu_ns_per_op: cpu_ns as f64 / loop_ops.max(1) as f64,
        session_cpu_share: cpu_ns as f64 / wall_ns.max(1) as f64,
        abort_rate: 0.0,
        latency_us: micros(&Latency::from_histogram(&latency)),
        latency_ns: Latency::from_histogram(&latency),
        latency_by_phase: PHASES
            .iter()
            .zip(&by_phase)
            .filter(|(_, h)| !h.is_empty())
            .map(|(phase, h)| PhaseLatency {
                phase,
                samples: h.len(),
                latency_ns: Latency::from_histogram(h),
            })
            .collect(),
        series,
        fine_series,
        checkpoints,
        phase_seconds,
        log_bytes,
        disk_reads: disk_reads.records,
        disk_reads_checked: disk_reads.checked,
        load_seconds,
        disk_write_mb_s: disk_write,
        disk_read_mb_s: disk_read.map(|d| d.read()),
        disk_read_buffered_mb_s: disk_read.map(|d| d.read_buffered),
        disk_read_direct_mb_s: disk_read.map(|d| d.read_direct),
        direct_io: !args.buffered_io,
        huge_pages: args.huge_pages == "on",
        prefault_frames: args.prefault_frames == "on",
        recovery,
        config: RunConfig {
            store: "hybridlog",
            keys: args.keys,
            value_size: args.value_size,
            record_layout: args.record_layout.clone(),
            mix: args.mix.clone(),
            dist: args.dist.clone(),
            theta: args.theta,
            threads: args.threads,
            duration_s: args.duration,
            memory_mb,
            mutable_fraction: args.mutable_fraction,
            prefetch: args.prefetch,
            pin_threads: args.pin_threads,
            data_mb: data_bytes as f64 / 1e6,
            page_bytes: 1 << page_bits,
            index_buckets: config_buckets(args.keys),
            checkpoint: args.checkpoint.clone(),
            checkpoint_at: at,
            log_only: args.log_only,
            shift: args.shift.clone(),
            seed: args.seed,
            latency_sample_every: LATENCY_SAMPLE_EVERY,
        },
    };
    print_summary(&report);
    if let Some(path) = &args.plot {
        draw(path, &report, &spans)?;
        eprintln!("plot written to {}", path.display());
    }
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}

/// Takes a checkpoint at each of the times `at` (seconds from now), timing
/// each, until `stop`; returns the first failure.
fn take_checkpoints(
    store: &Store<AddFirstWord>,
    at: &[f64],
    with_index: bool,
    dir: &Path,
    stop: &AtomicBool,
    taken: &Mutex<Vec<Taken>>,
) -> Result<(), String> {
    let start = Instant::now();
    for &t in at {
        let due = start + Duration::from_secs_f64(t);
        while Instant::now() < due {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(5)));
        }
        let begun = Instant::now();
        let info = store
            .checkpoint(with_index)
            .map_err(|e| format!("checkpoint at {t} s: {e}"))?;
        let end = Instant::now();
        let index_bytes = if info.with_index {
            index_file_bytes(dir)
        } else {
            0
        };
        taken.lock().expect("not poisoned").push(Taken {
            start: begun,
            end,
            info,
            index_bytes,
        });
    }
    Ok(())
}

/// The size of the index checkpoint file in `dir` (after a checkpoint
/// commits, older ones are removed), or 0.
fn index_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("index-") && name.ends_with(".dat")
        })
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .max()
        .unwrap_or(0)
}

/// Primary buckets: two keys per bucket of seven entries.
fn config_buckets(keys: u64) -> usize {
    (keys as usize / 2).next_power_of_two().max(1024)
}

/// Loads keys `0..keys` with `threads` sessions, each a stripe.
fn load(
    store: &Store<AddFirstWord>,
    keys: u64,
    value_size: usize,
    threads: usize,
) -> Result<(), String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                scope.spawn(move || -> Result<(), String> {
                    let mut session = store.start_session().map_err(|e| e.to_string())?;
                    let mut value = vec![0u8; value_size];
                    let mut key = t;
                    while key < keys {
                        value[..8].copy_from_slice(&key.to_le_bytes());
                        session
                            .upsert(&key.to_le_bytes(), &value)
                            .map_err(|e| e.to_string())?;
                        key += threads as u64;
                    }
                    session.complete_pending(true).map_err(|e| e.to_string())?;
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| "a load thread panicked".to_string())?)
    })
}

/// `--prefetch`'s hints: the bucket of `keys[bucket]` and the record of
/// `keys[record]`, where the batch has them.
#[inline(never)]
fn prefetch_ahead(
    session: &epochdb_hybridlog::Session<AddFirstWord>,
    keys: &[u64],
    bucket: usize,
    record: usize,
) {
    if let Some(key) = keys.get(bucket) {
        session.prefetch_bucket(&key.to_le_bytes());
    }
    if let Some(key) = keys.get(record) {
        session.prefetch_record(&key.to_le_bytes());
    }
}

/// One session's run: batches of 64 operations between clock checks.
#[allow(clippy::too_many_arguments)]
fn worker(
    store: &Store<AddFirstWord>,
    chooser: &KeyChooser,
    mix: Mix,
    seed: u64,
    value_size: usize,
    prefetch: usize,
    windows: usize,
    counter: &AtomicU64,
    stop: &AtomicBool,
    barrier: &Barrier,
) -> Result<ThreadResult, String> {
    const BATCH: u64 = 64;
    let mut session = store.start_session().map_err(|e| e.to_string())?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut result = ThreadResult {
        ops: 0,
        cpu_ns: 0,
        wall_ns: 0,
        latency: ns_histogram(),
        by_phase: (0..PHASES.len()).map(|_| ns_histogram()).collect(),
        windows: (0..windows).map(|_| (0, ns_histogram())).collect(),
    };
    let mut value = vec![0u8; value_size];
    let mut out = Vec::with_capacity(value_size);
    // Sampled operations that went pending: serial → (issued, window, phase).
    let mut waiting: HashMap<u64, (Instant, usize, usize)> = HashMap::new();
    barrier.wait();
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let failed = |e: epochdb_hybridlog::Error| e.to_string();
    // A batch's keys and read/update choices are drawn before it runs (the
    // same draws in the same order as one at a time), as FASTER's driver
    // reads pre-drawn keys from an array: the operation loop then holds
    // little besides the operations, so the out-of-order window reaches
    // the next operation's index lookup while this one waits on memory.
    let mut keys = [0u64; BATCH as usize];
    let mut reads = [false; BATCH as usize];
    while !stop.load(Ordering::Relaxed) {
        let window = ((start.elapsed().as_nanos() / WINDOW.as_nanos()) as usize).min(windows - 1);
        for (key, read) in keys.iter_mut().zip(&mut reads) {
            *key = chooser.next(&mut rng, 0);
            *read = !mix.rmw && rng.gen_range(0..100) < mix.read_percent;
        }
        // `--prefetch`: the first keys' buckets before the batch, then
        // per operation one bucket and one record further ahead.
        let records_ahead = prefetch / 2;
        if prefetch > 0 {
            for i in 0..prefetch {
                prefetch_ahead(&session, &keys, i, usize::MAX);
            }
        }
        for (i, (&key, &read)) in keys.iter().zip(&reads).enumerate() {
            if prefetch > 0 {
                prefetch_ahead(&session, &keys, i + prefetch, i + records_ahead);
            }
            let key = key.to_le_bytes();
            let sampled = result.ops.is_multiple_of(LATENCY_SAMPLE_EVERY);
            let began = sampled.then(Instant::now);
            let phase = if sampled {
                session_phase(session.state().phase)
            } else {
                0
            };
            let status = if mix.rmw {
                session.rmw(&key, 1).map_err(failed)?
            } else if read {
                session.read(&key, &mut out).map_err(failed)?
            } else {
                value[..8].copy_from_slice(&result.ops.to_le_bytes());
                session.upsert(&key, &value).map_err(failed)?
            };
            result.ops += 1;
            if let Some(began) = began {
                if status == Status::Pending {
                    waiting.insert(session.serial(), (began, window, phase));
                } else {
                    record(&mut result, began, window, phase);
                }
            }
        }
        result.windows[window].0 += BATCH;
        counter.store(result.ops, Ordering::Relaxed);
        if session.pending() > 0 {
            for done in session.complete_pending(false).map_err(failed)? {
                if let Some((began, w, p)) = waiting.remove(&done.serial) {
                    record(&mut result, began, w, p);
                }
            }
        }
    }
    for done in session.complete_pending(true).map_err(failed)? {
        if let Some((began, w, p)) = waiting.remove(&done.serial) {
            record(&mut result, began, w, p);
        }
    }
    result.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
    result.wall_ns = start.elapsed().as_nanos() as u64;
    Ok(result)
}

fn record(result: &mut ThreadResult, began: Instant, window: usize, phase: usize) {
    let ns = (began.elapsed().as_nanos() as u64).max(1);
    result.latency.saturating_record(ns);
    result.by_phase[phase].saturating_record(ns);
    result.windows[window].1.saturating_record(ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse() {
        assert!(parse_mix("rmw").unwrap().rmw);
        assert_eq!(parse_mix("90:10").unwrap().read_percent, 90);
        assert!(parse_mix("90:20").is_err());
        assert!(parse_mix("x").is_err());
    }

    #[test]
    fn add_first_word_keeps_the_rest() {
        let f = AddFirstWord { value_size: 16 };
        let mut old = vec![0u8; 16];
        old[..8].copy_from_slice(&5u64.to_le_bytes());
        old[8] = 9;
        let mut new = vec![0u8; f.copy_len(&old, &2)];
        f.copy(&old, &2, &mut new);
        assert_eq!(u64::from_le_bytes(new[..8].try_into().unwrap()), 7);
        assert_eq!(new[8], 9);
    }
}
