//! Prints the synthetic Zipf experiment (§5.3) as a table.
//!
//! ```text
//! cargo run --release -p epochdb-fcc --example fcc_bench -- \
//!     [--state-mb 32] [--rate 320000] [--alpha 0.5] [--duration 20] [--period 4] [--algo ns,ipp-copy,...]
//! ```

use epochdb_fcc::{run_bench, Algorithm, BenchConfig};

fn main() {
    let mut config = BenchConfig::default();
    let mut algorithms: Vec<Algorithm> = Algorithm::ALL.to_vec();
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            eprintln!("flags take a value: {pair:?}");
            std::process::exit(2);
        };
        let bad = |what: &str| -> ! {
            eprintln!("{flag}: bad {what} {value:?}");
            std::process::exit(2)
        };
        match flag.as_str() {
            "--state-mb" => {
                let mb: usize = value.parse().unwrap_or_else(|_| bad("size"));
                config.state_words = mb * (1 << 20) / 8;
            }
            "--rate" => config.updates_per_sec = value.parse().unwrap_or_else(|_| bad("rate")),
            "--alpha" => config.zipf_alpha = value.parse().unwrap_or_else(|_| bad("alpha")),
            "--duration" => config.duration_s = value.parse().unwrap_or_else(|_| bad("duration")),
            "--period" => {
                config.checkpoint_period_s = value.parse().unwrap_or_else(|_| bad("period"))
            }
            "--seed" => config.seed = value.parse().unwrap_or_else(|_| bad("seed")),
            "--algo" => {
                algorithms = value
                    .split(',')
                    .map(|a| a.parse().unwrap_or_else(|e: String| bad(&e)))
                    .collect()
            }
            _ => {
                eprintln!("unknown flag {flag}");
                std::process::exit(2);
            }
        }
    }
    eprintln!(
        "state {} MiB, {} updates/s, alpha {}, {} s simulated, checkpoint every {} s",
        (config.state_words * 8) >> 20,
        config.updates_per_sec,
        config.zipf_alpha,
        config.duration_s,
        config.checkpoint_period_s
    );
    let report = match run_bench(&config, &algorithms) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    };
    let raw_p50 = {
        let mut r = report.raw_interval_ms.clone();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    println!(
        "{:.0} updates/s, {} intervals per checkpoint period, raw mutator p50 {:.3} ms/interval",
        report.updates_per_sec, report.period_intervals, raw_p50
    );
    println!(
        "{:<10} {:>12} {:>22} {:>22} {:>12}",
        "algo", "checkpoints", "overhead ms/period", "added ms/interval p50", "max"
    );
    for run in &report.runs {
        println!(
            "{:<10} {:>12} {:>22.3} {:>22.3} {:>12.3}",
            run.algorithm.name(),
            run.checkpoints,
            run.overhead_ms_per_period,
            run.interval_added_ms_p50,
            run.interval_added_ms_max
        );
    }
}
