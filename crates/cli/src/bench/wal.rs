//! `epochdb bench wal`: eleda §6.5.1's logging microbenchmark. Each
//! transaction buffers three log records of `--log-size` bytes in the
//! central log (three `append`s) and then commits (a 16-byte commit
//! record with a callback); the thread does not wait but goes on with the
//! next transaction ("transaction switching"), and the callback, run once
//! the flusher made the commit durable, records the commit latency (from
//! the transaction's first append). Every implementation (GRASSHOPPER, the
//! global mutex, the bitmap scan) × thread count × record size × I/O unit
//! runs back to back in one process on a fresh log, with the JSON of
//! DESIGN.md's contract. On a real disk each run is bracketed by two write
//! probes, and its write speed is given as a fraction of their mean (`of
//! disk`): the VM's disk speed moves too much within minutes for one probe
//! at the start to judge runs that come later.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use epochdb_storage::{RealStorage, Storage};
use epochdb_wal::{LogKind, Wal, WalOptions};
use hdrhistogram::Histogram;
use serde::Serialize;

use super::disk::{measure_write, measure_write_read, settle_removals};
use super::null_device::NullDevice;
use super::placement::Placement;
use super::report::write_json;
use super::runner::thread_cpu_ns;
use super::wal_plot::{draw_cdf, Curve};

/// MiB written (and read back) by the disk probe.
const DISK_PROBE_MIB: usize = 256;
/// MiB written by each of the probes just before and just after a run of
/// `duration` seconds: what the disk writes in about half a second here,
/// less for a short run (32 MiB at least).
fn run_probe_mib(duration: f64) -> usize {
    ((duration * 128.0) as usize).clamp(32, 256)
}

/// `bench wal` flags.
#[derive(Debug, Args)]
pub(crate) struct WalArgs {
    /// Database threads, comma-separated (the paper: 1 to 32).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    threads: Vec<usize>,
    /// Bytes of each of the three log records per transaction,
    /// comma-separated (the paper: 128 B to 8 KiB).
    #[arg(long, value_delimiter = ',', default_value = "128,1024,8192")]
    log_size: Vec<usize>,
    /// Flusher I/O unit in bytes, comma-separated (the paper: 64 KiB and
    /// 512 KiB).
    #[arg(long, value_delimiter = ',', default_value = "65536,524288")]
    io_unit: Vec<usize>,
    /// How many I/O units the flusher keeps in flight, comma-separated to
    /// compare (`WalOptions::io_depth`, beyond the paper; 1: one write at a
    /// time, as eleda's flusher). Only direct writes to the disk use it.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    io_depth: Vec<usize>,
    /// Implementations, comma-separated: grasshopper, mutex, scan (the
    /// table shows GRASSHOPPER with `--records staged` as `gh+staged`).
    #[arg(
        long = "impl",
        value_delimiter = ',',
        default_value = "grasshopper,mutex,scan"
    )]
    implementations: Vec<String>,
    /// Seconds per run.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Log buffer bytes (the paper: 32 MiB).
    #[arg(long, default_value_t = 32 << 20)]
    buffer_bytes: usize,
    /// Directory for the logs (each run uses a fresh subdirectory);
    /// default: a fresh temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the log goes: `file` (the disk under `--dir`) or `null` (a
    /// device whose writes and syncs cost nothing, so the runs measure the
    /// log's in-memory pipeline, not the disk).
    #[arg(long, default_value = "file", value_parser = ["file", "null"])]
    device: String,
    /// `--device null`: how long each sync takes, in microseconds (the
    /// thread sleeps, so a little longer in practice). The paper's NVMe
    /// took 50 µs (eleda §6.1); 0 makes syncs free, where the mutex log's
    /// flusher syncs after nearly every record.
    #[arg(long, default_value_t = 50)]
    null_sync_us: u64,
    /// Draw every run's commit-latency CDF into this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The ELEDA worker's nap after a pass that moved SBL by less than an
    /// I/O unit, in microseconds, comma-separated to compare (0: poll
    /// continuously; `WalOptions::worker_pace_us`). The mutex log has no
    /// worker and runs once whatever this says.
    #[arg(long, value_delimiter = ',', default_value = "20")]
    worker_pace_us: Vec<u64>,
    /// GRASSHOPPER's hopping distance as a power of two: the hopping index
    /// counts bytes per `2^hop-shift` LSNs (`WalOptions::hop_shift`;
    /// eleda's default 4 MiB is 22).
    #[arg(long, default_value_t = WalOptions::default().hop_shift)]
    hop_shift: u32,
    /// The flusher writes through the page cache instead of past it
    /// (`WalOptions::direct_io`; `O_DIRECT` is the default where the file
    /// system allows it).
    #[arg(long)]
    buffered_io: bool,
    /// Pins each database thread to a CPU of its own and the log's worker
    /// and flusher to the CPUs left over (none left: they are not pinned),
    /// as ELEDA gave its pipeline threads cores of their own (§6.1). On an
    /// oversubscribed machine this takes the scheduler's placement out of
    /// the comparison.
    #[arg(long)]
    pin_threads: bool,
    /// How a transaction's three records enter the log, comma-separated to
    /// compare: `appended` (each enqueued at once, as eleda §4.1.2 does) or
    /// `staged` (`ThreadHandle::stage`: GRASSHOPPER enqueues a thread's
    /// contiguous records as one run with the commit). The baselines treat
    /// both alike and run once, with the first value.
    #[arg(long, value_delimiter = ',', default_value = "appended", value_parser = ["appended", "staged"])]
    records: Vec<String>,
    /// Whether GRASSHOPPER's worker catches up with the lists' tails inside a
    /// range (`on`, `WalOptions::sbl_catch_up`, beyond the paper) or runs
    /// Algorithm 1 alone (`off`), comma-separated to compare. The
    /// baselines run once.
    #[arg(long, value_delimiter = ',', default_value = "on", value_parser = ["on", "off"])]
    catch_up: Vec<String>,
    /// After how many microseconds without a pass of GRASSHOPPER's worker (while
    /// entries wait beyond SBL) a database thread runs one itself, comma-separated to compare
    /// (`WalOptions::worker_help_after_us`, beyond the paper; 0: never, the
    /// paper's pipeline). The baselines run once.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    help_after_us: Vec<u64>,
    /// Above how many bytes reserved but not durable a GRASSHOPPER database
    /// thread yields its core, comma-separated to compare
    /// (`WalOptions::yield_backlog_bytes`, beyond the paper; 0: never, the
    /// paper's pipeline). The baselines run once.
    #[arg(long, value_delimiter = ',', default_value = "4194304")]
    yield_backlog: Vec<u64>,
    /// Whether GRASSHOPPER's flusher runs a pass of the worker's Algorithm 1
    /// after each flush while the worker sleeps through the flush (`on`,
    /// `WalOptions::flusher_passes`, beyond the paper) or the worker alone
    /// moves SBL (`off`), comma-separated to compare. The baselines run once.
    #[arg(long, value_delimiter = ',', default_value = "on", value_parser = ["on", "off"])]
    flusher_passes: Vec<String>,
    /// The most bytes of adjacent I/O units the flusher writes in one
    /// request, comma-separated to compare (`WalOptions::write_coalesce_bytes`,
    /// beyond the paper; 0: one request per unit, as eleda's flusher).
    #[arg(long, value_delimiter = ',', default_value = "524288")]
    write_coalesce: Vec<usize>,
}

#[derive(Serialize, Clone, Copy)]
struct Percentiles {
    p50: f64,
    p99: f64,
    p999: f64,
}

#[derive(Serialize)]
struct Run {
    #[serde(rename = "impl")]
    implementation: String,
    threads: usize,
    log_size: usize,
    io_unit: usize,
    /// `WalOptions::io_depth`.
    io_depth: usize,
    /// `WalOptions::worker_pace_us` (the mutex log has no worker).
    worker_pace_us: u64,
    /// `WalOptions::hop_shift` (GRASSHOPPER only).
    hop_shift: u32,
    /// `WalOptions::direct_io`.
    direct_io: bool,
    /// `appended` or `staged` (see `--records`).
    records: String,
    /// `WalOptions::sbl_catch_up` (GRASSHOPPER only).
    sbl_catch_up: bool,
    /// `WalOptions::worker_help_after_us` (GRASSHOPPER only).
    worker_help_after_us: u64,
    /// `WalOptions::flusher_passes` (GRASSHOPPER only).
    flusher_passes: bool,
    /// `WalOptions::yield_backlog_bytes` (GRASSHOPPER only).
    yield_backlog_bytes: u64,
    /// Times a database thread yielded its core to the backlog
    /// (GRASSHOPPER only).
    backlog_yields: u64,
    /// `WalOptions::write_coalesce_bytes`.
    write_coalesce_bytes: usize,
    /// Worker passes that database threads ran (GRASSHOPPER only).
    help_passes: u64,
    transactions: u64,
    seconds: f64,
    throughput_txn_s: f64,
    write_mb_s: f64,
    commit_latency_us: Percentiles,
    /// The database threads' own CPU time per transaction, in nanoseconds
    /// (`CLOCK_THREAD_CPUTIME_ID` over the append loop): what one
    /// transaction costs the thread that logs it, without the time it
    /// spent preempted, which on an oversubscribed machine the wall-clock
    /// throughput mixes in.
    db_cpu_ns_per_txn: f64,
    /// The commit-latency CDF: `(latency µs, fraction of commits ≤ it)`.
    commit_latency_cdf: Vec<(f64, f64)>,
    flushes: u64,
    /// The disk's sequential write speed around this run: the mean of the
    /// probes written just before and just after it (`None` on the null
    /// device). The disk's speed moves by tens of percent within minutes
    /// on the VM, so each run is judged against its own neighbours rather
    /// than against one probe at the start.
    disk_write_mb_s: Option<f64>,
    /// `write_mb_s` over `disk_write_mb_s`.
    write_fraction_of_disk: Option<f64>,
    crawl_ratio: Option<f64>,
    /// The share of SBL's advance made by catching up with the lists' tails
    /// (GRASSHOPPER only).
    catch_up_ratio: Option<f64>,
}

#[derive(Serialize)]
struct Config {
    device: String,
    /// `--device null`: the time each sync took, in microseconds.
    null_sync_us: u64,
    duration_s: f64,
    buffer_bytes: usize,
    records_per_txn: usize,
    commit_record_bytes: usize,
    cores: usize,
}

#[derive(Serialize)]
struct Report {
    disk_write_mb_s: f64,
    config: Config,
    runs: Vec<Run>,
}

const RECORDS_PER_TXN: usize = 3;
const COMMIT_RECORD_BYTES: usize = 16;

fn parse_kind(name: &str) -> Result<LogKind, String> {
    match name {
        "grasshopper" => Ok(LogKind::Grasshopper),
        "mutex" => Ok(LogKind::Vanilla),
        "scan" => Ok(LogKind::BitmapScan),
        other => Err(format!(
            "--impl {other}: unknown implementation (grasshopper, mutex, scan)"
        )),
    }
}

pub(crate) fn run(args: WalArgs) -> Result<(), String> {
    let kinds: Vec<(String, LogKind)> = args
        .implementations
        .iter()
        .map(|name| parse_kind(name).map(|k| (name.clone(), k)))
        .collect::<Result<_, _>>()?;
    if args.threads.contains(&0) || args.threads.is_empty() {
        return Err("--threads must be at least 1".into());
    }
    if args.log_size.contains(&0) || args.log_size.is_empty() {
        return Err("--log-size must be at least 1".into());
    }
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err("--duration must be positive".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(&most) = args.threads.iter().max() {
        if most + 2 > cores {
            eprintln!(
                "note: {most} database threads plus the log's worker and flusher threads on {cores} cores: the machine is oversubscribed, so throughput and latency measure time-sharing as much as the log"
            );
            if most > cores && args.yield_backlog.contains(&0) {
                eprintln!(
                    "note: with --yield-backlog 0 GRASSHOPPER's threads keep every core while the flusher and any preempted hole's owner wait for one (WalOptions::yield_backlog_bytes)"
                );
            }
        }
    }
    let (_scratch, root) = super::run_root(args.dir.as_ref())?;
    std::fs::create_dir_all(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let null_device = args.device == "null";
    let disk_write_mb_s = if null_device {
        eprintln!(
            "[wal] null device: writes are free, a sync takes {} µs, the disk is not measured",
            args.null_sync_us
        );
        0.0
    } else {
        // Probed the way the flusher writes (direct or buffered).
        let mb_s = measure_write_read(&root, DISK_PROBE_MIB, !args.buffered_io)?.write;
        let how = if args.buffered_io {
            "buffered"
        } else {
            "direct"
        };
        eprintln!("[wal] disk sequential write ({how}) with fsync: {mb_s:.0} MB/s");
        mb_s
    };
    println!(
        "{:<12} {:>7} {:>8} {:>8} {:>5} {:>8} {:>12} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "impl",
        "threads",
        "log B",
        "io unit",
        "depth",
        "pace us",
        "txn/s",
        "MB/s",
        "of disk",
        "p50 us",
        "p99 us",
        "p999 us",
        "db ns/txn"
    );
    let mut runs = Vec::new();
    let mut n = 0;
    let units = args
        .io_unit
        .iter()
        .flat_map(|&unit| args.io_depth.iter().map(move |&depth| (unit, depth)))
        .flat_map(|ud| args.write_coalesce.iter().map(move |&c| (ud, c)));
    for ((io_unit, io_depth), write_coalesce) in units {
        for &log_size in &args.log_size {
            for &threads in &args.threads {
                for (name, kind) in &kinds {
                    let paces: &[u64] = if *kind == LogKind::Vanilla {
                        &args.worker_pace_us[..1]
                    } else {
                        &args.worker_pace_us
                    };
                    let record_modes = grasshopper_only(*kind, &args.records);
                    let catch_ups = grasshopper_only(*kind, &args.catch_up);
                    let helps = grasshopper_only(*kind, &args.help_after_us);
                    let flusher_passes = grasshopper_only(*kind, &args.flusher_passes);
                    let yield_backlogs = grasshopper_only(*kind, &args.yield_backlog);
                    for (((((&pace, records), catch_up), &help_after), flusher_pass), &backlog) in
                        paces
                            .iter()
                            .flat_map(|p| record_modes.iter().map(move |r| (p, r)))
                            .flat_map(|pr| catch_ups.iter().map(move |c| (pr, c)))
                            .flat_map(|prc| helps.iter().map(move |h| (prc, h)))
                            .flat_map(|prch| flusher_passes.iter().map(move |f| (prch, f)))
                            .flat_map(|prchf| yield_backlogs.iter().map(move |y| (prchf, y)))
                    {
                        let catch_up = catch_up == "on";
                        let flusher_pass = flusher_pass == "on";
                        n += 1;
                        let dir = root.join(format!("wal-{n}"));
                        let options = WalOptions {
                            kind: *kind,
                            io_unit_bytes: io_unit,
                            io_depth,
                            buffer_bytes: args.buffer_bytes,
                            worker_pace_us: pace,
                            hop_shift: args.hop_shift,
                            sbl_catch_up: catch_up,
                            worker_help_after_us: help_after,
                            flusher_passes: flusher_pass,
                            yield_backlog_bytes: backlog,
                            write_coalesce_bytes: write_coalesce,
                            // The null device keeps no bytes to read back
                            // the partial block a direct appender starts
                            // from; its writes cost nothing either way.
                            direct_io: !args.buffered_io && !null_device,
                            ..WalOptions::default()
                        };
                        // A fresh null device per run (it keeps file names).
                        let storage: Arc<dyn Storage> = if null_device {
                            Arc::new(NullDevice::new(Duration::from_micros(args.null_sync_us)))
                        } else {
                            Arc::new(RealStorage::new())
                        };
                        let placement = Placement::new(args.pin_threads, threads);
                        let load = Load {
                            threads,
                            log_size,
                            duration: args.duration,
                            staged: records == "staged",
                        };
                        let probe = || {
                            measure_write(&root, run_probe_mib(args.duration), !args.buffered_io)
                        };
                        let before = (!null_device).then(probe).transpose()?;
                        let mut run = one_run(&storage, &dir, options, &load, &placement)
                            .map_err(|e| format!("{name}, {threads} threads, {log_size} B: {e}"))?;
                        let _ = std::fs::remove_dir_all(&dir);
                        settle_removals(&root)?;
                        if let Some(before) = before {
                            let disk = (before + probe()?) / 2.0;
                            run.disk_write_mb_s = Some(disk);
                            run.write_fraction_of_disk = Some(run.write_mb_s / disk);
                        }
                        let pace = (*kind != LogKind::Vanilla).then_some(pace);
                        let mut shown = if *kind == LogKind::Grasshopper && records == "staged" {
                            "gh+staged".to_string()
                        } else {
                            name.clone()
                        };
                        if *kind == LogKind::Grasshopper && !catch_up {
                            shown.push_str("-alg1");
                        }
                        if *kind == LogKind::Grasshopper && helps.len() > 1 {
                            shown.push_str(&format!("-h{help_after}"));
                        }
                        if *kind == LogKind::Grasshopper && !flusher_pass {
                            shown.push_str("-nofp");
                        }
                        if *kind == LogKind::Grasshopper && yield_backlogs.len() > 1 {
                            shown.push_str(&format!("-y{}", backlog >> 10));
                        }
                        if args.write_coalesce.len() > 1 {
                            shown.push_str(&format!("-c{}", write_coalesce >> 10));
                        }
                        print_row(&shown, &run, pace);
                        runs.push(Run {
                            implementation: name.clone(),
                            records: records.clone(),
                            ..run
                        });
                    }
                }
            }
        }
    }
    if let Some(path) = &args.plot {
        let curves: Vec<Curve> = runs
            .iter()
            .map(|r| Curve {
                label: format!(
                    "{}{}{}{} {}t {}B {}K d{} {}us",
                    r.implementation,
                    if r.records == "staged" { "+staged" } else { "" },
                    if r.implementation == "grasshopper" && !r.sbl_catch_up {
                        "-alg1"
                    } else {
                        ""
                    },
                    if r.implementation == "grasshopper" && args.yield_backlog.len() > 1 {
                        format!("-y{}", r.yield_backlog_bytes >> 10)
                    } else {
                        String::new()
                    },
                    r.threads,
                    r.log_size,
                    r.io_unit >> 10,
                    r.io_depth,
                    r.worker_pace_us
                ),
                points: r.commit_latency_cdf.clone(),
                color: kinds
                    .iter()
                    .position(|(name, _)| *name == r.implementation)
                    .unwrap_or(0),
                width: 1 + args
                    .threads
                    .iter()
                    .position(|&t| t == r.threads)
                    .unwrap_or(0) as u32,
            })
            .collect();
        draw_cdf(
            path,
            "bench wal: commit latency CDF (impl, threads, record bytes, I/O unit)",
            &curves,
        )?;
        eprintln!("figure written to {}", path.display());
    }
    if let Some(path) = &args.json {
        let report = Report {
            disk_write_mb_s,
            config: Config {
                device: args.device.clone(),
                null_sync_us: args.null_sync_us,
                duration_s: args.duration,
                buffer_bytes: args.buffer_bytes,
                records_per_txn: RECORDS_PER_TXN,
                commit_record_bytes: COMMIT_RECORD_BYTES,
                cores,
            },
            runs,
        };
        write_json(path, &report)?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}

/// One line of the table: the mutex log has no worker, so no pace.
fn print_row(name: &str, run: &Run, pace: Option<u64>) {
    let pace = pace.map_or_else(|| "-".to_string(), |p| p.to_string());
    println!(
        "{:<12} {:>7} {:>8} {:>8} {:>5} {:>8} {:>12.0} {:>10.1} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10.0}",
        name,
        run.threads,
        run.log_size,
        run.io_unit,
        run.io_depth,
        pace,
        run.throughput_txn_s,
        run.write_mb_s,
        run.write_fraction_of_disk
            .map_or_else(|| "-".to_string(), |f| format!("{f:.2}")),
        run.commit_latency_us.p50,
        run.commit_latency_us.p99,
        run.commit_latency_us.p999,
        run.db_cpu_ns_per_txn
    );
}

/// The CDF at 200 quantiles, denser in the tail (up to 99.99%).
fn cdf(latency: &Histogram<u64>) -> Vec<(f64, f64)> {
    if latency.is_empty() {
        return Vec::new();
    }
    let mut quantiles: Vec<f64> = (0..=100).map(|i| f64::from(i) / 100.0).collect();
    quantiles.extend((1..100).map(|i| 0.99 + f64::from(i) / 10_000.0));
    quantiles.sort_by(f64::total_cmp);
    quantiles
        .into_iter()
        .map(|q| (latency.value_at_quantile(q).max(1) as f64, q))
        .collect()
}

/// GRASSHOPPER's own options: every value to compare for it, the first
/// alone for a baseline (which has no such option).
fn grasshopper_only<T>(kind: LogKind, values: &[T]) -> &[T] {
    if kind == LogKind::Grasshopper {
        values
    } else {
        &values[..1]
    }
}

/// What the database threads of one run do.
struct Load {
    threads: usize,
    /// Bytes of each of the transaction's records.
    log_size: usize,
    /// Seconds.
    duration: f64,
    /// The records are staged (`ThreadHandle::stage`), not appended.
    staged: bool,
}

fn one_run(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    options: WalOptions,
    load: &Load,
    placement: &Placement,
) -> Result<Run, String> {
    let &Load {
        threads,
        log_size,
        duration,
        staged,
    } = load;
    // The log's worker and flusher inherit the opening thread's affinity.
    let (wal, recovered) = placement
        .for_background(|| Wal::open(storage.clone(), dir, options.clone()))
        .map_err(|e| e.to_string())?;
    let first = recovered.end_lsn;
    let stop = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let db_cpu_ns = AtomicU64::new(0);
    let record = vec![0x5au8; log_size];
    let commit = [0xc0u8; COMMIT_RECORD_BYTES];
    let latency = Mutex::new(Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds"));
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let mut handle = wal.thread_handle();
            let (stop, committed, failed, record, latency, db_cpu_ns) =
                (&stop, &committed, &failed, &record, &latency, &db_cpu_ns);
            s.spawn(move || {
                placement.pin_measured_thread(t);
                // The callbacks run on this thread; they share its histogram.
                let mine = Arc::new(Mutex::new(
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds"),
                ));
                let acked = Arc::new(AtomicU64::new(0));
                let cpu_start = thread_cpu_ns();
                while !stop.load(Ordering::Relaxed) {
                    let begun = Instant::now();
                    let mut ok = true;
                    for _ in 0..RECORDS_PER_TXN {
                        let logged = if staged {
                            handle.stage(&[record])
                        } else {
                            handle.append(&[record])
                        };
                        ok &= logged.is_ok();
                    }
                    let (mine2, acked2) = (mine.clone(), acked.clone());
                    let result = handle.commit(&[&commit], move |r| {
                        if r.is_ok() {
                            let us = begun.elapsed().as_micros() as u64;
                            let _ = mine2.lock().expect("not poisoned").record(us.max(1));
                            acked2.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    if !ok || result.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
                db_cpu_ns.fetch_add(thread_cpu_ns() - cpu_start, Ordering::Relaxed);
                drop(handle); // waits until durable, runs the last callbacks
                committed.fetch_add(acked.load(Ordering::Relaxed), Ordering::Relaxed);
                latency
                    .lock()
                    .expect("not poisoned")
                    .add(&*mine.lock().expect("not poisoned"))
                    .expect("same bounds");
            });
        }
        std::thread::sleep(Duration::from_secs_f64(duration));
        stop.store(true, Ordering::Relaxed);
    });
    let seconds = started.elapsed().as_secs_f64();
    let stats = wal.stats();
    wal.shutdown().map_err(|e| e.to_string())?;
    if failed.load(Ordering::Relaxed) > 0 {
        return Err("the log failed during the run".into());
    }
    let transactions = committed.load(Ordering::Relaxed);
    let latency = latency.into_inner().expect("not poisoned");
    let moved = stats.hop_bytes + stats.crawl_bytes + stats.catch_up_bytes;
    Ok(Run {
        implementation: String::new(),
        threads,
        log_size,
        io_unit: options.io_unit_bytes,
        io_depth: options.io_depth,
        worker_pace_us: options.worker_pace_us,
        hop_shift: options.hop_shift,
        direct_io: options.direct_io,
        records: String::new(),
        transactions,
        seconds,
        throughput_txn_s: transactions as f64 / seconds,
        write_mb_s: (stats.durable_lsn - first) as f64 / 1e6 / seconds,
        commit_latency_us: Percentiles {
            p50: latency.value_at_quantile(0.5) as f64,
            p99: latency.value_at_quantile(0.99) as f64,
            p999: latency.value_at_quantile(0.999) as f64,
        },
        commit_latency_cdf: cdf(&latency),
        db_cpu_ns_per_txn: db_cpu_ns.load(Ordering::Relaxed) as f64 / transactions.max(1) as f64,
        flushes: stats.flushes,
        disk_write_mb_s: None,
        write_fraction_of_disk: None,
        crawl_ratio: (options.kind == LogKind::Grasshopper && moved > 0)
            .then(|| stats.crawl_bytes as f64 / moved as f64),
        catch_up_ratio: (options.kind == LogKind::Grasshopper && moved > 0)
            .then(|| stats.catch_up_bytes as f64 / moved as f64),
        sbl_catch_up: options.sbl_catch_up,
        worker_help_after_us: options.worker_help_after_us,
        flusher_passes: options.flusher_passes,
        yield_backlog_bytes: options.yield_backlog_bytes,
        backlog_yields: stats.backlog_yields,
        write_coalesce_bytes: options.write_coalesce_bytes,
        help_passes: stats.help_passes,
    })
}
