//! `epochdb bench`: the papers' experiments, with the flags and JSON fields
//! of DESIGN.md's contract. Comparisons run back to back in one process
//! with identical settings and report ratios.

mod disk;
mod fcc;
mod fcc_plot;
mod hybridlog;
mod null_device;
mod placement;
mod plot;
mod report;
mod runner;
mod wal;
mod wal_plot;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use epochdb_engine::DurabilityKind;
use epochdb_workloads::{Tpcc, TpccConfig, Variant, Workload, Ycsb, YcsbConfig};

use report::{print_summary, write_json, Comparison};
use runner::RunSpec;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// YCSB: SiloR's variant (70/30 get/put, 100-byte values, uniform), CPR's
    /// (8-byte values, Zipf 0.1) or the core workloads A–F.
    Ycsb(YcsbArgs),
    /// TPC-C: the nine tables, two secondary indexes and the five
    /// transactions in the standard mix, one home warehouse per thread.
    Tpcc(TpccArgs),
    /// Checkpoints for frequently-consistent applications (Cao et al.):
    /// overhead per checkpoint period and the mutator's latency peaks.
    Fcc(Box<fcc::FccArgs>),
    /// ELEDA's logging microbenchmark (eleda §6.5.1): three records then a
    /// commit per transaction; GRASSHOPPER, mutex and bitmap scan side by
    /// side over threads, record sizes and I/O units.
    Wal(wal::WalArgs),
    /// YCSB on the hybridlog store with CPR checkpoints (cpr-sigmod19 §7):
    /// throughput and log size over time with the CPR phases, latency per
    /// phase, checkpoint write speed and recovery speed against the disk.
    Hybridlog(Box<hybridlog::HybridlogArgs>),
}

/// Settings every engine benchmark shares.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// Worker threads running transactions.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seconds to measure (after loading).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Durability mode.
    #[arg(long, default_value = "none")]
    durability: DurabilityKind,
    /// Run these modes back to back instead (comma-separated) and report
    /// each one's throughput as a ratio to the first.
    #[arg(long, value_delimiter = ',')]
    compare: Vec<DurabilityKind>,
    /// Directories for logs and checkpoints (repeat for several disks);
    /// each run uses a fresh subdirectory `<mode>-<n>` of each. Default: a
    /// fresh temporary directory.
    #[arg(long)]
    dir: Vec<PathBuf>,
    /// Seconds between the end of one checkpoint and the start of the next
    /// (`silor`, `wal`, `cpr`; the paper's C, silor §4.3). In `cpr` it
    /// bounds the latency to durability.
    #[arg(long, default_value_t = 10.0)]
    checkpoint_interval: f64,
    /// Epoch length in milliseconds.
    #[arg(long, default_value_t = 40)]
    epoch_ms: u64,
    /// Threads that load the initial data (default: all cores).
    #[arg(long)]
    load_threads: Option<usize>,
    /// Pin each worker to a core of its own and the loggers and
    /// checkpointers to the cores left over, as Silo and SiloR do
    /// (the engine's `Config::pin_threads`). Loading is not pinned.
    #[arg(long)]
    pin_threads: bool,
    /// Loggers (and the `wal` flusher) write through the page cache instead
    /// of past it (`O_DIRECT` is the default where the file system allows
    /// it).
    #[arg(long)]
    buffered_io: bool,
    /// The `wal` flusher's I/O unit in bytes, a power of two
    /// (`WalOptions::io_unit_bytes`; eleda §6.1 used 64 KiB and 512 KiB).
    #[arg(long, default_value_t = epochdb_engine::WalOptions::default().io_unit_bytes)]
    wal_io_unit: usize,
    /// How many I/O units the `wal` flusher keeps in flight
    /// (`WalOptions::io_depth`, beyond the paper; 1: one write at a time,
    /// as eleda's flusher). Only direct writes use it.
    #[arg(long, default_value_t = epochdb_engine::WalOptions::default().io_depth)]
    wal_io_depth: usize,
    /// After how many microseconds without a pass of GRASSHOPPER's worker
    /// a `wal` database thread runs one itself
    /// (`WalOptions::worker_help_after_us`, beyond the paper; 0: never).
    #[arg(long, default_value_t = epochdb_engine::WalOptions::default().worker_help_after_us)]
    wal_help_after_us: u64,
    /// Above how many bytes reserved but not durable a `wal` database
    /// thread yields its core (`WalOptions::yield_backlog_bytes`, beyond
    /// the paper; 0: never).
    #[arg(long, default_value_t = epochdb_engine::WalOptions::default().yield_backlog_bytes)]
    wal_yield_backlog: u64,
    /// Whether the `wal` flusher runs a GRASSHOPPER pass after each flush
    /// while the worker rests through long flushes
    /// (`WalOptions::flusher_passes`, beyond the paper).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    wal_flusher_passes: String,
    /// The `wal` mode's central log buffer in bytes, a power of two
    /// (`WalOptions::buffer_bytes`; eleda §6.1 used 32 MiB).
    #[arg(long, default_value_t = epochdb_engine::WalOptions::default().buffer_bytes)]
    wal_buffer: usize,
    /// Each `log`/`silor` worker's log buffer in bytes
    /// (`SilorOptions::log_buffer_bytes`; silor §3 used 512 KiB).
    #[arg(long, default_value_t = epochdb_engine::SilorOptions::default().log_buffer_bytes)]
    log_buffer: usize,
    /// Log buffers each `log`/`silor` worker's pool may hold, the
    /// backpressure bound (`SilorOptions::buffers_per_worker`; 0: about a
    /// tenth of the machine's memory over its cores, as silor §3.4 set it).
    #[arg(long, default_value_t = epochdb_engine::SilorOptions::default().buffers_per_worker)]
    log_buffers_per_worker: usize,
    /// Point reads through the B+-tree only: no hash index beside it (the
    /// engine's `Config::point_index`; by default the workload's
    /// read-mostly tables keep one).
    #[arg(long)]
    no_point_index: bool,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// After the run, check the workload's consistency conditions (TPC-C
    /// §3.3.2) and fail if one does not hold.
    #[arg(long)]
    check: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw throughput and latency over time as SVG here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Fault in this many MiB through the allocator before the first run
    /// and keep freed memory for reuse, so the database's growth does not
    /// pay for first touches of fresh pages on the workers (as Silo's
    /// `--numa-memory`); 0: off.
    #[arg(long, default_value_t = 0)]
    prefault_mb: usize,
}

/// `bench ycsb` flags.
#[derive(Debug, Args)]
pub(crate) struct YcsbArgs {
    /// silor, cpr, or a core workload a–f.
    #[arg(long, default_value = "silor")]
    variant: Variant,
    /// Keys loaded.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes (default: 100, or 8 for cpr).
    #[arg(long)]
    value_size: Option<usize>,
    /// Keys per transaction (CPR uses 1 and 10).
    #[arg(long, default_value_t = 1)]
    ops_per_txn: usize,
    /// Percent reads in a read/update mix (CPR uses 100 and 50); default:
    /// the variant's own mix.
    #[arg(long)]
    read_percent: Option<u8>,
    #[command(flatten)]
    common: CommonArgs,
}

/// `bench tpcc` flags.
#[derive(Debug, Args)]
pub(crate) struct TpccArgs {
    /// Warehouses (default: one per thread).
    #[arg(long)]
    warehouses: Option<u32>,
    /// Load a reduced database (1,000 items, 300 customers per district)
    /// for quick runs; the default is the specification's sizes.
    #[arg(long)]
    small: bool,
    /// Percent of New-Order, Payment, Order-Status, Delivery and
    /// Stock-Level, comma-separated, summing to 100 (for measuring one
    /// transaction type alone, e.g. 0,0,0,0,100)
    #[arg(long, value_delimiter = ',', default_values_t = epochdb_workloads::TpccConfig::STANDARD_MIX)]
    mix: Vec<u8>,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(command: BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Ycsb(args) => {
            if args.keys == 0 {
                return Err("--keys must be at least 1".into());
            }
            if args.ops_per_txn == 0 {
                return Err("--ops-per-txn must be at least 1".into());
            }
            if args.read_percent.is_some_and(|p| p > 100) {
                return Err("--read-percent must be at most 100".into());
            }
            let make = || -> Box<dyn Workload> {
                let mut config = YcsbConfig::new(args.variant, args.keys);
                if let Some(size) = args.value_size {
                    config.value_size = size;
                }
                config.ops_per_txn = args.ops_per_txn;
                if let Some(read) = args.read_percent {
                    config = config.with_read_percent(read);
                }
                Box::new(Ycsb::new(config))
            };
            run_modes(&args.common, &make, "YCSB")
        }
        BenchCommand::Fcc(args) => fcc::run(*args),
        BenchCommand::Wal(args) => wal::run(args),
        BenchCommand::Hybridlog(args) => hybridlog::run(*args),
        BenchCommand::Tpcc(args) => {
            let warehouses = args.warehouses.unwrap_or(args.common.threads as u32);
            let mut config = if args.small {
                TpccConfig::small(warehouses)
            } else {
                TpccConfig::new(warehouses)
            };
            config.mix = args
                .mix
                .as_slice()
                .try_into()
                .map_err(|_| "--mix takes five percentages".to_string())?;
            config
                .validate()
                .map_err(|e| format!("--warehouses, --mix: {e}"))?;
            let make = || -> Box<dyn Workload> { Box::new(Tpcc::new(config.clone())) };
            run_modes(&args.common, &make, "TPC-C")
        }
    }
}

/// The directory a run writes under: `dir`, or a fresh temporary one
/// (returned too, so that it lives as long as the run and is removed after).
pub(crate) fn run_root(
    dir: Option<&PathBuf>,
) -> Result<(Option<tempfile::TempDir>, PathBuf), String> {
    match dir {
        Some(dir) => Ok((None, dir.clone())),
        None => {
            let scratch = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
            let root = scratch.path().to_path_buf();
            Ok((Some(scratch), root))
        }
    }
}

/// Runs the workload under each requested mode, back to back, then
/// reports.
fn run_modes(
    common: &CommonArgs,
    make: &dyn Fn() -> Box<dyn Workload>,
    title: &str,
) -> Result<(), String> {
    if common.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if !common.duration.is_finite() || common.duration <= 0.0 {
        return Err("--duration must be positive".into());
    }
    if common.epoch_ms == 0 {
        return Err("--epoch-ms must be at least 1".into());
    }
    let modes = if common.compare.is_empty() {
        vec![common.durability]
    } else {
        common.compare.clone()
    };
    let load_threads = common
        .load_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    crate::prefault::warm_allocator(common.prefault_mb);
    let mut runs = Vec::new();
    for (index, mode) in modes.iter().enumerate() {
        let scratch = if common.dir.is_empty() {
            Some(tempfile::tempdir().map_err(|e| format!("creating a temporary directory: {e}"))?)
        } else {
            None
        };
        let dirs = if let Some(scratch) = &scratch {
            vec![scratch.path().to_path_buf()]
        } else {
            // Each run gets fresh subdirectories: a run never recovers
            // another's data, and nothing of the user's is overwritten.
            let mut dirs = Vec::new();
            for dir in &common.dir {
                let run_dir = dir.join(format!("{}-{}", mode.name(), index + 1));
                if run_dir.exists() {
                    return Err(format!(
                        "--dir {}: {} exists from an earlier run; remove it or choose another --dir",
                        dir.display(),
                        run_dir.display()
                    ));
                }
                dirs.push(run_dir);
            }
            dirs
        };
        let spec = RunSpec {
            mode: *mode,
            threads: common.threads,
            load_threads,
            duration: Duration::from_secs_f64(common.duration),
            epoch: Duration::from_millis(common.epoch_ms),
            dirs,
            checkpoint_interval: Duration::from_secs_f64(common.checkpoint_interval),
            seed: common.seed,
            check: common.check,
            knobs: report::ModeKnobs {
                pin_threads: common.pin_threads,
                direct_io: !common.buffered_io,
                wal_io_unit: common.wal_io_unit,
                wal_io_depth: common.wal_io_depth,
                wal_help_after_us: common.wal_help_after_us,
                wal_yield_backlog: common.wal_yield_backlog,
                wal_flusher_passes: common.wal_flusher_passes == "on",
                wal_buffer: common.wal_buffer,
                log_buffer: common.log_buffer,
                log_buffers_per_worker: common.log_buffers_per_worker,
            },
            point_index: !common.no_point_index,
        };
        let mut workload = make();
        runs.push(runner::run(workload.as_mut(), &spec)?);
        // This mode's files are removed, and their discards finish before
        // the next mode writes (`disk::settle_removals`).
        if let Some(scratch) = scratch {
            let parent = scratch.path().parent().map(Path::to_path_buf);
            drop(scratch);
            if let Some(parent) = parent {
                disk::settle_removals(&parent)?;
            }
        }
    }
    print_summary(&runs);
    if let Some(path) = &common.plot {
        plot::draw(path, title, &runs)?;
        eprintln!("plot written to {}", path.display());
    }
    if let Some(path) = &common.json {
        if common.compare.is_empty() {
            write_json(path, &runs[0])?;
        } else {
            write_json(path, &Comparison::new(runs))?;
        }
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}
