//! Runs one workload under one durability mode: open, load, measure.
//!
//! Each benchmark thread owns a worker and a client and loops on
//! `client.step`. It counts commits per 0.5 s window and samples the latency
//! to durability of one transaction in [`LATENCY_SAMPLE_EVERY`]: the time
//! from the start of the transaction until its ticket is seen resolved (a
//! thread polls its pending tickets between transactions, so it never
//! blocks on durability).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use epochdb_engine::{Config, Database, DurabilityKind, PointIndexes, Ticket};
use epochdb_workloads::{Outcome, Workload};
use hdrhistogram::Histogram;

use super::report::{Latency, ModeKnobs, RunResult, Window};

/// Width of a time-series window (the papers' 0.5 s averaging window).
pub(crate) const WINDOW: Duration = Duration::from_millis(500);
/// One transaction in this many has its latency measured (timing every
/// transaction would cost a visible share of a sub-microsecond one).
pub(crate) const LATENCY_SAMPLE_EVERY: u64 = 16;
/// How often (in transactions) a thread checks the clock and publishes
/// its counters.
const CHECK_EVERY: u64 = 64;
/// Longest latency the histograms hold (60 s, in µs).
const LATENCY_MAX_US: u64 = 60_000_000;

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct RunSpec {
    pub(crate) mode: DurabilityKind,
    pub(crate) threads: usize,
    pub(crate) load_threads: usize,
    pub(crate) duration: Duration,
    pub(crate) epoch: Duration,
    pub(crate) dirs: Vec<PathBuf>,
    /// The silor checkpoint interval.
    pub(crate) checkpoint_interval: Duration,
    pub(crate) seed: u64,
    pub(crate) check: bool,
    /// The engine's and the modes' settings (reported as given).
    pub(crate) knobs: ModeKnobs,
    /// Point-read hash indexes on the workload's chosen tables
    /// (`Workload::point_indexes`); off with `--no-point-index`.
    pub(crate) point_index: bool,
}

/// An empty latency histogram (1 µs to 60 s, 3 significant figures).
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid histogram bounds")
}

struct ThreadCounters {
    commits: CachePadded<AtomicU64>,
    conflicts: CachePadded<AtomicU64>,
}

struct ThreadResult {
    commits: u64,
    rollbacks: u64,
    conflicts: u64,
    latency: Histogram<u64>,
    windows: Vec<(u64, Histogram<u64>)>,
    /// CPU time of the measured loop.
    cpu_ns: u64,
}

/// Waits until everything committed so far is durable, so that a durable
/// mode's measured run does not also pay for writing and syncing the log of
/// the load (hundreds of MB for TPC-C) while `none` has nothing to write.
fn wait_until_durable(db: &Database) -> Result<(), String> {
    const LIMIT: Duration = Duration::from_secs(120);
    let fail = |e: &dyn std::fmt::Display| format!("waiting for the load to be durable: {e}");
    let epoch = db.current_epoch();
    // `wal`: an empty transaction's ticket waits for every LSN reserved
    // before it.
    let mut worker = db.worker().map_err(|e| fail(&e))?;
    let ((), ticket) = worker.run(|_| Ok(())).map_err(|e| fail(&e))?;
    if db.durability_name() == "cpr" {
        // Durable only once a checkpoint holds it: take one now rather
        // than wait out the checkpoint interval.
        db.checkpoint().map_err(|e| fail(&e))?;
    }
    if !ticket.wait_timeout(LIMIT).map_err(|e| fail(&e))? {
        return Err(fail(&"not durable within 120 s"));
    }
    // Epoch-based modes: every epoch up to the current one.
    let start = Instant::now();
    while db.persistent_epoch().is_some_and(|durable| durable < epoch) {
        if start.elapsed() > LIMIT {
            return Err(fail(&"not durable within 120 s"));
        }
        db.end_epoch_soon();
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// The calling thread's CPU time so far, in nanoseconds.
pub(crate) fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Opens a database for `spec`, loads `workload` and measures it.
pub(crate) fn run(workload: &mut dyn Workload, spec: &RunSpec) -> Result<RunResult, String> {
    let knobs = &spec.knobs;
    let config = Config {
        durability: spec.mode,
        dirs: spec.dirs.clone(),
        silor: epochdb_engine::SilorOptions {
            checkpoint_interval: spec.checkpoint_interval,
            direct_io: knobs.direct_io,
            log_buffer_bytes: knobs.log_buffer,
            buffers_per_worker: knobs.log_buffers_per_worker,
            ..Default::default()
        },
        wal: epochdb_engine::WalOptions {
            direct_io: knobs.direct_io,
            io_unit_bytes: knobs.wal_io_unit,
            io_depth: knobs.wal_io_depth,
            worker_help_after_us: knobs.wal_help_after_us,
            yield_backlog_bytes: knobs.wal_yield_backlog,
            flusher_passes: knobs.wal_flusher_passes,
            buffer_bytes: knobs.wal_buffer,
            ..Default::default()
        },
        workers: spec.threads,
        epoch_interval: spec.epoch,
        max_workers: (spec.threads + spec.load_threads + 8).max(64),
        pin_threads: knobs.pin_threads,
        point_index: if spec.point_index {
            workload.point_indexes()
        } else {
            PointIndexes::None
        },
        ..Config::default()
    };
    let db = Database::open(config).map_err(|e| format!("opening the database: {e}"))?;

    let load_start = Instant::now();
    let last_shown = AtomicU64::new(0);
    let name = workload.name();
    let show = |fraction: f64| {
        let percent = (fraction * 100.0) as u64;
        if percent >= last_shown.load(Ordering::Relaxed) + 10 || percent == 100 {
            last_shown.store(percent, Ordering::Relaxed);
            eprintln!(
                "[{}] loading {name}: {percent}% ({:.1} s)",
                spec.mode,
                load_start.elapsed().as_secs_f64()
            );
        }
    };
    workload
        .load(&db, spec.load_threads, &show)
        .map_err(|e| format!("loading {}: {e}", workload.name()))?;
    let load_s = load_start.elapsed().as_secs_f64();
    if spec.mode.is_durable() {
        let waited = Instant::now();
        wait_until_durable(&db)?;
        eprintln!(
            "[{}] the load is durable ({:.1} s later); measuring",
            spec.mode,
            waited.elapsed().as_secs_f64()
        );
    } else {
        eprintln!("[{}] loaded in {load_s:.1} s; measuring", spec.mode);
    }

    let counters: Arc<Vec<ThreadCounters>> = Arc::new(
        (0..spec.threads)
            .map(|_| ThreadCounters {
                commits: CachePadded::new(AtomicU64::new(0)),
                conflicts: CachePadded::new(AtomicU64::new(0)),
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(spec.threads + 1));
    let windows = (spec.duration.as_nanos() / WINDOW.as_nanos()) as usize + 2;
    let mut checkpointing = vec![false; windows];

    let results = std::thread::scope(|scope| -> Result<Vec<ThreadResult>, String> {
        let mut handles = Vec::new();
        for thread in 0..spec.threads {
            let mut client = workload.client(thread, spec.threads, spec.seed);
            let mut worker = db.worker().map_err(|e| e.to_string())?;
            let (stop, barrier, counters) = (stop.clone(), barrier.clone(), counters.clone());
            handles.push(scope.spawn(move || -> Result<ThreadResult, String> {
                let mut result = ThreadResult {
                    commits: 0,
                    rollbacks: 0,
                    conflicts: 0,
                    latency: new_histogram(),
                    windows: (0..windows).map(|_| (0, new_histogram())).collect(),
                    cpu_ns: 0,
                };
                let mut pending: VecDeque<(Instant, usize, Ticket)> = VecDeque::new();
                worker
                    .pin_to_core()
                    .map_err(|e| format!("pinning worker {thread}: {e}"))?;
                barrier.wait();
                let start = Instant::now();
                let cpu_start = thread_cpu_ns();
                let mut window = 0usize;
                let mut steps = 0u64;
                loop {
                    if steps.is_multiple_of(CHECK_EVERY) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        window = ((start.elapsed().as_nanos() / WINDOW.as_nanos()) as usize)
                            .min(windows - 1);
                        counters[thread]
                            .commits
                            .store(result.commits, Ordering::Relaxed);
                        counters[thread]
                            .conflicts
                            .store(worker.stats().conflicts, Ordering::Relaxed);
                    }
                    let began = steps
                        .is_multiple_of(LATENCY_SAMPLE_EVERY)
                        .then(Instant::now);
                    steps += 1;
                    match client.step(&mut worker).map_err(|e| e.to_string())? {
                        Outcome::Committed(ticket) => {
                            result.commits += 1;
                            result.windows[window].0 += 1;
                            if let Some(began) = began {
                                pending.push_back((began, window, ticket));
                            }
                        }
                        Outcome::RolledBack => result.rollbacks += 1,
                    }
                    while let Some((began, w, ticket)) = pending.front() {
                        if !ticket.is_durable().map_err(|e| e.to_string())? {
                            break;
                        }
                        let us = began.elapsed().as_micros() as u64;
                        result.latency.saturating_record(us.max(1));
                        result.windows[*w].1.saturating_record(us.max(1));
                        pending.pop_front();
                    }
                }
                result.cpu_ns = thread_cpu_ns() - cpu_start;
                // Wait for the stragglers so their latency counts too.
                for (began, w, ticket) in pending {
                    if ticket
                        .wait_timeout(Duration::from_secs(30))
                        .map_err(|e| e.to_string())?
                    {
                        let us = began.elapsed().as_micros() as u64;
                        result.latency.saturating_record(us.max(1));
                        result.windows[w].1.saturating_record(us.max(1));
                    }
                }
                result.conflicts = worker.stats().conflicts;
                Ok(result)
            }));
        }

        barrier.wait();
        let start = Instant::now();
        let mut last = (start, 0u64);
        while start.elapsed() < spec.duration {
            // Sample the checkpoint flag every 10 ms for the series.
            let second_ends = start.elapsed() + Duration::from_secs(1);
            while start.elapsed() < second_ends.min(spec.duration) {
                if db.is_checkpointing() {
                    let window = (start.elapsed().as_nanos() / WINDOW.as_nanos()) as usize;
                    if let Some(flag) = checkpointing.get_mut(window) {
                        *flag = true;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let now = Instant::now();
            let commits: u64 = counters
                .iter()
                .map(|c| c.commits.load(Ordering::Relaxed))
                .sum();
            let conflicts: u64 = counters
                .iter()
                .map(|c| c.conflicts.load(Ordering::Relaxed))
                .sum();
            let rate = (commits - last.1) as f64 / (now - last.0).as_secs_f64();
            eprintln!(
                "[{}] {:5.1} s  {:>12} txn/s  {:>12} committed  aborts {:.2}%{}",
                spec.mode,
                start.elapsed().as_secs_f64(),
                format_count(rate),
                commits,
                100.0 * conflicts as f64 / (commits + conflicts).max(1) as f64,
                if db.is_checkpointing() {
                    "  checkpointing"
                } else {
                    ""
                },
            );
            last = (now, commits);
        }
        stop.store(true, Ordering::Relaxed);
        join_all(handles)
    })?;
    let elapsed = spec.duration.as_secs_f64();
    if spec.check {
        let started = Instant::now();
        workload.check(&db)?;
        eprintln!(
            "[{}] consistency check passed ({:.1} s)",
            spec.mode,
            started.elapsed().as_secs_f64()
        );
    }
    let stats = db.durability_stats();
    db.shutdown().map_err(|e| format!("shutting down: {e}"))?;
    let durability = super::report::DurabilityReport {
        log_bytes: stats.log_bytes,
        log_syncs: stats.log_syncs,
        log_rotations: stats.log_rotations,
        buffer_waits: stats.buffer_waits,
        buffer_wait_seconds: stats.buffer_wait_seconds,
        log_buffers_allocated: stats.log_buffers_allocated,
        log_buffers_peak: stats.log_buffers_peak,
        checkpoints: stats.checkpoints,
        checkpoint_bytes: stats.checkpoint_bytes,
        checkpoint_seconds: stats.checkpoint_seconds,
        checkpoint_s_per_gb: if stats.checkpoint_bytes > 0 {
            stats.checkpoint_seconds / (stats.checkpoint_bytes as f64 / 1e9)
        } else {
            0.0
        },
    };
    if spec.mode.is_durable() {
        eprintln!(
            "[{}] wrote {:.1} MB of log ({} syncs, {} rotations, workers waited for a buffer {} times, {:.3} s, log buffers {} at most, {} at the end); {} checkpoints, {:.1} MB in {:.2} s ({:.1} s/GB)",
            spec.mode,
            stats.log_bytes as f64 / 1e6,
            stats.log_syncs,
            stats.log_rotations,
            stats.buffer_waits,
            stats.buffer_wait_seconds,
            stats.log_buffers_peak,
            stats.log_buffers_allocated,
            stats.checkpoints,
            stats.checkpoint_bytes as f64 / 1e6,
            stats.checkpoint_seconds,
            durability.checkpoint_s_per_gb,
        );
    }

    let mut latency = new_histogram();
    let mut merged: Vec<(u64, Histogram<u64>)> =
        (0..windows).map(|_| (0, new_histogram())).collect();
    let (mut commits, mut rollbacks, mut conflicts) = (0u64, 0u64, 0u64);
    let worker_cpu_ns: u64 = results.iter().map(|result| result.cpu_ns).sum();
    for result in &results {
        commits += result.commits;
        rollbacks += result.rollbacks;
        conflicts += result.conflicts;
        latency.add(&result.latency).expect("same histogram bounds");
        for (into, from) in merged.iter_mut().zip(&result.windows) {
            into.0 += from.0;
            into.1.add(&from.1).expect("same histogram bounds");
        }
    }
    let full_windows = (spec.duration.as_nanos() / WINDOW.as_nanos()) as usize;
    let series = merged
        .iter()
        .take(full_windows)
        .enumerate()
        .map(|(i, (count, hist))| Window {
            t_s: (i + 1) as f64 * WINDOW.as_secs_f64(),
            txn_s: *count as f64 / WINDOW.as_secs_f64(),
            p50_us: hist.value_at_quantile(0.5),
            checkpointing: checkpointing[i],
        })
        .collect();
    Ok(RunResult {
        mode: spec.mode.name().to_string(),
        workload: workload.name(),
        throughput_txn_s: commits as f64 / elapsed,
        per_thread_txn_s: commits as f64 / elapsed / spec.threads as f64,
        abort_rate: conflicts as f64 / (commits + conflicts).max(1) as f64,
        worker_cpu_ns_per_txn: worker_cpu_ns as f64 / commits.max(1) as f64,
        worker_cpu_share: worker_cpu_ns as f64 / 1e9 / (elapsed * spec.threads as f64),
        commits,
        conflicts,
        rollbacks,
        latency_us: Latency::from_histogram(&latency),
        latency_samples: latency.len(),
        series,
        durability,
        load_seconds: load_s,
        config: super::report::RunConfig {
            durability: spec.mode.name().to_string(),
            threads: spec.threads,
            duration_s: spec.duration.as_secs_f64(),
            epoch_ms: spec.epoch.as_secs_f64() * 1e3,
            seed: spec.seed,
            knobs: spec.knobs.clone(),
            latency_sample_every: LATENCY_SAMPLE_EVERY,
            workload: workload.settings().into_iter().collect(),
        },
    })
}

/// Joins benchmark threads, collecting their results; the first error
/// (or panic) wins.
pub(crate) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T, String>>>,
) -> Result<Vec<T>, String> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| "a benchmark thread panicked".to_string())?
        })
        .collect()
}

/// `1234567.0` → `1.23 M`.
pub(crate) fn format_count(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2} M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1} K", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}
