//! `epochdb bench fcc`: checkpointing for frequently-consistent
//! applications (fc-checkpoint-sigmod11 §5), every algorithm × update rate
//! back to back, with the JSON of DESIGN.md's contract.

use std::path::PathBuf;

use clap::Args;
use epochdb_fcc::{run_bench, Algorithm, BenchConfig};
use serde::Serialize;

use super::report::write_json;

/// `bench fcc` flags.
#[derive(Debug, Args)]
pub(crate) struct FccArgs {
    /// The synthetic workload: `zipf` (§5.1). The MMO workload is not
    /// implemented yet.
    #[arg(long, default_value = "zipf")]
    workload: String,
    /// Algorithms, comma-separated: ns, cou (bacou), nzz, zigzag (bazz),
    /// npp, npp-merge, pingpong (ipp-copy), ipp-merge.
    #[arg(long, value_delimiter = ',', default_value = "ns,cou,zigzag,pingpong")]
    algo: Vec<Algorithm>,
    /// Updates per second of simulated time, comma-separated (the paper
    /// sweeps 10,000 to 5,120,000).
    #[arg(long, value_delimiter = ',', default_value = "320000")]
    updates_per_sec: Vec<u64>,
    /// Simulated seconds per run.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Application state in MiB (the paper: 200).
    #[arg(long, default_value_t = 32)]
    state_mb: usize,
    /// Checkpoint period in simulated seconds (the paper: about 4).
    #[arg(long, default_value_t = 4.0)]
    checkpoint_period: f64,
    /// Zipf parameter for objects and words (the paper: 0.5).
    #[arg(long, default_value_t = 0.5)]
    alpha: f64,
    /// Trace seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Added {
    p50: f64,
    max: f64,
}

#[derive(Serialize)]
struct Run {
    algo: String,
    updates_per_sec: u64,
    overhead_ms_per_period: f64,
    interval_added_ms: Added,
    checkpoints: u64,
    interval_ms: Vec<f64>,
}

#[derive(Serialize)]
struct Report {
    workload: String,
    state_mb: usize,
    duration_s: f64,
    checkpoint_period_s: f64,
    zipf_alpha: f64,
    runs: Vec<Run>,
}

pub(crate) fn run(args: FccArgs) -> Result<(), String> {
    if args.workload != "zipf" {
        return Err(format!(
            "--workload {}: only 'zipf' is implemented (the MMO workload is not yet)",
            args.workload
        ));
    }
    if args.state_mb == 0 {
        return Err("--state-mb must be at least 1".into());
    }
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err("--duration must be positive".into());
    }
    let mut runs = Vec::new();
    println!(
        "{:<10} {:>14} {:>16} {:>14} {:>14}",
        "algo", "updates/s", "overhead ms/ckpt", "added p50 ms", "added max ms"
    );
    for &rate in &args.updates_per_sec {
        let config = BenchConfig {
            state_words: args.state_mb * (1 << 20) / 8,
            updates_per_sec: rate,
            zipf_alpha: args.alpha,
            duration_s: args.duration,
            checkpoint_period_s: args.checkpoint_period,
            seed: args.seed,
            ..BenchConfig::default()
        };
        eprintln!(
            "[fcc] {} updates/s: running {} algorithms",
            rate,
            args.algo.len()
        );
        let report = run_bench(&config, &args.algo).map_err(|e| format!("fcc benchmark: {e}"))?;
        for r in report.runs {
            println!(
                "{:<10} {:>14} {:>16.2} {:>14.3} {:>14.3}",
                r.algorithm.name(),
                rate,
                r.overhead_ms_per_period,
                r.interval_added_ms_p50,
                r.interval_added_ms_max
            );
            runs.push(Run {
                algo: r.algorithm.name().to_string(),
                updates_per_sec: rate,
                overhead_ms_per_period: r.overhead_ms_per_period,
                interval_added_ms: Added {
                    p50: r.interval_added_ms_p50,
                    max: r.interval_added_ms_max,
                },
                checkpoints: r.checkpoints,
                interval_ms: r.interval_ms,
            });
        }
    }
    if let Some(path) = &args.json {
        let report = Report {
            workload: args.workload.clone(),
            state_mb: args.state_mb,
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
