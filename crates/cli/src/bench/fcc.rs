//! `epochdb bench fcc`: checkpointing for frequently-consistent
//! applications (fc-checkpoint-sigmod11 §5), every state size × huge-page
//! setting × update rate × algorithm back to back, with the JSON of
//! DESIGN.md's contract. `--recovery` measures §5.4's recovery time instead.

use std::path::PathBuf;

use clap::Args;
use epochdb_fcc::{
    run_bench, run_mmo_recovery, Algorithm, BenchConfig, BenchWriter, HugePages, RecoveryConfig,
    Workload,
};
use serde::Serialize;

use super::report::write_json;

/// Bytes per Zipf object (§5.1: 8 KB objects).
const OBJECT_BYTES: usize = 8192;

/// `bench fcc` flags.
#[derive(Debug, Args)]
pub(crate) struct FccArgs {
    /// The synthetic workload: `zipf` (§5.3) or `mmo` (§5.4; its update
    /// rate is the model's, about 531,530 per second with 2,000 players).
    #[arg(long, default_value = "zipf")]
    workload: Workload,
    /// Algorithms, comma-separated: ns, cou (bacou), nzz, zigzag (bazz),
    /// npp (npp-copy), npp-merge, pingpong (ipp-copy), ipp-merge.
    #[arg(long, value_delimiter = ',', default_value = "ns,cou,zigzag,pingpong")]
    algo: Vec<Algorithm>,
    /// Updates per second of simulated time, comma-separated (the paper
    /// sweeps 10,000 to 5,120,000). Zipf only.
    #[arg(long, value_delimiter = ',', default_value = "320000")]
    updates_per_sec: Vec<u64>,
    /// Instead of --updates-per-sec: updates per second as a percentage of
    /// the state's 4-byte words, comma-separated (Figures 6 and 7: 0.08 and
    /// 2.56, i.e. 40,000 and 1,280,000 per second on 200 MB).
    #[arg(long, value_delimiter = ',')]
    update_percent: Vec<f64>,
    /// Simulated seconds per run.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Application state in MiB, comma-separated (Zipf).
    #[arg(long, value_delimiter = ',', default_value = "32")]
    state_mb: Vec<usize>,
    /// Instead of --state-mb: the number of 8 KiB objects, comma-separated
    /// (the paper: 25,000, about 200 MB; Figures 6-7: 12,500 to 200,000).
    #[arg(long, value_delimiter = ',')]
    objects: Vec<usize>,
    /// Players in the MMO workload (the paper: 2,000 of about 100 KB).
    #[arg(long, default_value_t = 2000)]
    players: usize,
    /// Checkpoint period in simulated seconds (the paper: about 4).
    #[arg(long, default_value_t = 4.0)]
    checkpoint_period: f64,
    /// Zipf parameter for objects and words (the paper: 0.5).
    #[arg(long, default_value_t = 0.5)]
    alpha: f64,
    /// Transparent huge pages for the state arrays, comma-separated:
    /// default (the system setting), on (madvise MADV_HUGEPAGE), off
    /// (MADV_NOHUGEPAGE). §5.6.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    huge_pages: Vec<HugePages>,
    /// The asynchronous writer: `off` as in §5.1 (each checkpoint completes
    /// at once, reading nothing), or `between` (the algorithm's writer runs
    /// between intervals, off the clock), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    writer: Vec<BenchWriter>,
    /// Run the whole grid this many times (the JSON marks each run's
    /// repetition), for medians on a noisy machine.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Trace seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// MMO recovery time (§5.4) instead of overheads: run the MMO through
    /// the framework on files in --dir with logical logging, ticks paced
    /// at 0.1 s, then recover cold and warm, for each --algo.
    #[arg(long)]
    recovery: bool,
    /// --recovery: real seconds per tick (0: as fast as possible).
    #[arg(long, default_value_t = 0.1)]
    tick_s: f64,
    /// --recovery: overlap each tick's log sync with the next tick,
    /// comma-separated (off, on).
    #[arg(long, value_delimiter = ',', default_value = "off")]
    overlap_log_sync: Vec<String>,
    /// Directory for --recovery (default: a fresh temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the mutator's time per interval (Figures 8, 9, 11) for the
    /// first state size, huge-page setting, writer and rate as an SVG here
    /// (scripts/plot-fcc.py draws every figure from the JSON).
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Serialize)]
struct Added {
    p50: f64,
    max: f64,
}

#[derive(Serialize)]
struct Run {
    algo: String,
    workload: String,
    state_mb: f64,
    huge_pages: String,
    writer: String,
    repeat: u32,
    updates_per_sec: u64,
    overhead_ms_per_period: f64,
    interval_added_ms: Added,
    interval_ms_p50: f64,
    interval_ms_max: f64,
    raw_interval_ms_p50: f64,
    /// The same three by the mutator thread's CPU time, which leaves out
    /// preemption by other processes (`epochdb_fcc` `clock.rs`).
    interval_cpu_added_ms_p50: f64,
    interval_cpu_ms_p50: f64,
    interval_cpu_ms_max: f64,
    checkpoints: u64,
    huge_page_mb: f64,
    interval_ms: Vec<f64>,
    raw_interval_ms: Vec<f64>,
    interval_cpu_ms: Vec<f64>,
    raw_interval_cpu_ms: Vec<f64>,
}

#[derive(Serialize)]
struct Report {
    workload: String,
    duration_s: f64,
    checkpoint_period_s: f64,
    zipf_alpha: f64,
    runs: Vec<Run>,
}

#[derive(Serialize)]
struct RecoveryRun {
    algo: String,
    overlap_log_sync: bool,
    run_s: f64,
    state_mb: f64,
    checkpoint_mb: f64,
    log_mb: f64,
    updates_per_sec: f64,
    replayed_ticks: u64,
    cold_s: f64,
    cold_replay_s: f64,
    warm_s: f64,
    state_matches: bool,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn run(args: FccArgs) -> Result<(), String> {
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err("--duration must be positive".into());
    }
    if args.recovery {
        return recovery(&args);
    }
    // State sizes in words: --objects wins over --state-mb; MMO has one.
    let sizes: Vec<usize> = match args.workload {
        Workload::Mmo => vec![0],
        Workload::Zipf if !args.objects.is_empty() => {
            args.objects.iter().map(|o| o * OBJECT_BYTES / 8).collect()
        }
        Workload::Zipf => args.state_mb.iter().map(|mb| mb * (1 << 20) / 8).collect(),
    };
    if sizes.contains(&0) && args.workload == Workload::Zipf {
        return Err("--state-mb and --objects must be at least 1".into());
    }
    let mut runs = Vec::new();
    println!(
        "{:<10} {:>9} {:>5} {:>11} {:>12} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "algo",
        "state MB",
        "huge",
        "updates/s",
        "ovh ms/ckpt",
        "added p50",
        "added max",
        "ms p50",
        "ms max",
        "cpu p50",
        "cpu max"
    );
    for repeat in 0..args.repeat {
        for &words in &sizes {
            // Rates: fixed, or scaled with the state (4-byte words, as the
            // paper counts them).
            let rates: Vec<u64> = if args.workload == Workload::Mmo {
                vec![0]
            } else if args.update_percent.is_empty() {
                args.updates_per_sec.clone()
            } else {
                args.update_percent
                    .iter()
                    .map(|p| (p / 100.0 * (words * 2) as f64).round() as u64)
                    .collect()
            };
            for (&huge, &writer) in args
                .huge_pages
                .iter()
                .flat_map(|h| args.writer.iter().map(move |w| (h, w)))
            {
                for &rate in &rates {
                    let config = BenchConfig {
                        workload: args.workload,
                        state_words: words,
                        updates_per_sec: rate,
                        zipf_alpha: args.alpha,
                        mmo_players: args.players,
                        duration_s: args.duration,
                        checkpoint_period_s: args.checkpoint_period,
                        huge_pages: huge,
                        writer,
                        seed: args.seed,
                        ..BenchConfig::default()
                    };
                    eprintln!(
                        "[fcc] repeat {repeat}: {} MB, huge pages {huge}, writer {writer}, {} updates/s: {} algorithms",
                        words * 8 / 1_000_000,
                        rate,
                        args.algo.len()
                    );
                    let report = run_bench(&config, &args.algo)
                        .map_err(|e| format!("fcc benchmark: {e}"))?;
                    let state_mb = report.state_words as f64 * 8.0 / 1e6;
                    let rate = report.updates_per_sec.round() as u64;
                    let raw_p50 = median(&report.raw_interval_ms);
                    for r in report.runs {
                        println!(
                            "{:<10} {:>9.1} {:>5} {:>11} {:>12.2} {:>10.3} {:>10.3} {:>10.3} {:>8.3} {:>8.3} {:>8.3}",
                            r.algorithm.name(),
                            state_mb,
                            huge.to_string(),
                            rate,
                            r.overhead_ms_per_period,
                            r.interval_added_ms_p50,
                            r.interval_added_ms_max,
                            r.interval_ms_p50,
                            r.interval_ms_max,
                            r.interval_cpu_ms_p50,
                            r.interval_cpu_ms_max,
                        );
                        runs.push(Run {
                            algo: r.algorithm.name().to_string(),
                            workload: args.workload.to_string(),
                            state_mb,
                            huge_pages: huge.to_string(),
                            writer: writer.to_string(),
                            repeat,
                            updates_per_sec: rate,
                            overhead_ms_per_period: r.overhead_ms_per_period,
                            interval_added_ms: Added {
                                p50: r.interval_added_ms_p50,
                                max: r.interval_added_ms_max,
                            },
                            interval_ms_p50: r.interval_ms_p50,
                            interval_ms_max: r.interval_ms_max,
                            raw_interval_ms_p50: raw_p50,
                            interval_cpu_added_ms_p50: r.interval_cpu_added_ms_p50,
                            interval_cpu_ms_p50: r.interval_cpu_ms_p50,
                            interval_cpu_ms_max: r.interval_cpu_ms_max,
                            checkpoints: r.checkpoints,
                            huge_page_mb: r.huge_page_bytes as f64 / 1e6,
                            interval_ms: r.interval_ms,
                            raw_interval_ms: report.raw_interval_ms.clone(),
                            interval_cpu_ms: r.interval_cpu_ms,
                            raw_interval_cpu_ms: report.raw_interval_cpu_ms.clone(),
                        });
                    }
                }
            }
        }
    }
    if let Some(path) = &args.plot {
        if let Some(first) = runs.first() {
            let same = |r: &&Run| {
                r.repeat == 0
                    && r.state_mb == first.state_mb
                    && r.huge_pages == first.huge_pages
                    && r.writer == first.writer
                    && r.updates_per_sec == first.updates_per_sec
            };
            let mut series: Vec<(String, Vec<f64>)> = runs
                .iter()
                .filter(same)
                .map(|r| (r.algo.clone(), r.interval_ms.clone()))
                .collect();
            series.push(("raw mutator".into(), first.raw_interval_ms.clone()));
            let title = format!(
                "{}: {:.0} MB, {} updates/s, mutator time per 0.1 s",
                args.workload, first.state_mb, first.updates_per_sec
            );
            super::fcc_plot::draw(path, &title, &series)?;
            eprintln!("figure written to {}", path.display());
        }
    }
    if let Some(path) = &args.json {
        let report = Report {
            workload: args.workload.to_string(),
            duration_s: args.duration,
            checkpoint_period_s: args.checkpoint_period,
            zipf_alpha: args.alpha,
            runs,
        };
        write_json(path, &report)?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}

/// `--recovery`: §5.4's recovery time, one run per algorithm and overlap
/// setting.
fn recovery(args: &FccArgs) -> Result<(), String> {
    let period_ticks = (args.checkpoint_period * 10.0).round().max(1.0) as u64;
    let ticks = (args.duration * 10.0).round() as u64;
    let mut out = Vec::new();
    println!(
        "{:<10} {:>7} {:>7} {:>9} {:>8} {:>8} {:>11} {:>8} {:>8} {:>10} {:>8} {:>6}",
        "algo",
        "overlap",
        "run s",
        "state MB",
        "ckpt MB",
        "log MB",
        "updates/s",
        "ticks",
        "cold s",
        "replay s",
        "warm s",
        "match"
    );
    let overlaps: Vec<bool> = args
        .overlap_log_sync
        .iter()
        .map(|v| match v.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            other => Err(format!("--overlap-log-sync {other}: not on or off")),
        })
        .collect::<Result<_, _>>()?;
    for (&algo, &overlap) in args
        .algo
        .iter()
        .flat_map(|a| overlaps.iter().map(move |o| (a, o)))
    {
        let temp;
        let dir = match &args.dir {
            Some(d) => {
                let d = d.join(format!("{}-{}", algo.name(), overlap));
                if d.exists() {
                    std::fs::remove_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
                }
                d
            }
            None => {
                temp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
                temp.path().to_path_buf()
            }
        };
        let config = RecoveryConfig {
            players: args.players,
            algorithm: algo,
            period_ticks,
            ticks,
            huge_pages: args.huge_pages.first().copied().unwrap_or_default(),
            tick_s: args.tick_s,
            overlap_log_sync: overlap,
            seed: args.seed,
        };
        eprintln!(
            "[fcc] recovery: {algo}, overlap {overlap}, {ticks} ticks ({} s each), a checkpoint every {period_ticks}",
            args.tick_s
        );
        let r = run_mmo_recovery(&dir, &config).map_err(|e| format!("fcc recovery: {e}"))?;
        println!(
            "{:<10} {:>7} {:>7.2} {:>9.1} {:>8.1} {:>8.1} {:>11.0} {:>8} {:>8.3} {:>10.3} {:>8.3} {:>6}",
            algo.name(),
            overlap,
            r.run_s,
            r.state_bytes as f64 / 1e6,
            r.checkpoint_bytes as f64 / 1e6,
            r.log_bytes as f64 / 1e6,
            r.updates_per_sec,
            r.replayed_ticks,
            r.cold_s,
            r.cold_replay_s,
            r.warm_s,
            r.state_matches
        );
        out.push(RecoveryRun {
            algo: algo.name().to_string(),
            overlap_log_sync: overlap,
            run_s: r.run_s,
            state_mb: r.state_bytes as f64 / 1e6,
            checkpoint_mb: r.checkpoint_bytes as f64 / 1e6,
            log_mb: r.log_bytes as f64 / 1e6,
            updates_per_sec: r.updates_per_sec,
            replayed_ticks: r.replayed_ticks,
            cold_s: r.cold_s,
            cold_replay_s: r.cold_replay_s,
            warm_s: r.warm_s,
            state_matches: r.state_matches,
        });
    }
    let mismatches = out.iter().filter(|r| !r.state_matches).count();
    if let Some(path) = &args.json {
        #[derive(Serialize)]
        struct RecoveryReport {
            workload: &'static str,
            players: usize,
            runs: Vec<RecoveryRun>,
        }
        let report = RecoveryReport {
            workload: "mmo",
            players: args.players,
            runs: out,
        };
        write_json(path, &report)?;
        eprintln!("results written to {}", path.display());
    }
    if mismatches > 0 {
        return Err(format!(
            "{mismatches} recovered states differ from the last released state"
        ));
    }
    Ok(())
}
