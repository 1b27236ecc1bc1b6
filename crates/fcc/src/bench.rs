//! The synthetic Zipf experiment of §5.1/§5.3, as a library function for
//! the CLI: the state is a set of objects; each update picks an object and
//! then a word in it, both from Zipf distributions with parameter `alpha`.
//! A trace of updates is generated up front and applied as fast as
//! possible, grouped into intervals standing for `interval_s` of simulated
//! application time, with a point of consistency at the end of each. Each
//! algorithm runs the same trace; so does a raw mutator with no
//! checkpointing, the baseline the overheads are measured against.
//!
//! As in §5.1, logical logging is off. Unlike §5.1, the writer thread stays
//! on (Ping-Pong and Zigzag need its pass to finish before the next
//! checkpoint), writing into [`NullStorage`]; the mutator waits for each
//! pass off the clock, so the writer's work is not counted, as in §5.1,
//! and every period starts a checkpoint, since in simulated time the
//! period is long enough for the writer. Ping-Pong's Merge writer must
//! read its previous checkpoint back, so its runs write into a
//! [`SimStorage`] (memory) instead.

use crate::algo::{
    copy_on_update as cou, naive_snapshot as ns, pingpong_interleaved as ipp,
    pingpong_naive as npp, zigzag_naive as nzz, zigzag_packed as bazz,
};
use crate::algorithm::Algorithm;
use crate::engine::Engine;
use crate::error::Error;
use crate::io::{NullStorage, SimStorage, Storage};
use crate::scheme::{ImageWriter, MutatorScheme};
use crate::PingPongWriter;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// Largest trace kept in memory, in updates; longer runs cycle through it.
const TRACE_UPDATES_MAX: usize = 1 << 22;

/// Parameters of a benchmark run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// Application state size in words (8 bytes each).
    pub state_words: usize,
    /// Words per object (the paper's objects are 8 KB: 1024 words).
    pub object_words: usize,
    /// Updates per second of simulated application time.
    pub updates_per_sec: u64,
    /// Zipf parameter for both the object and the word choice (paper: 0.5).
    pub zipf_alpha: f64,
    /// Simulated duration in seconds.
    pub duration_s: f64,
    /// Simulated time per point of consistency (paper: 0.1 s).
    pub interval_s: f64,
    /// Checkpoint period in simulated seconds (paper: about 4 s).
    pub checkpoint_period_s: f64,
    /// Copy-on-Update block size in words.
    pub cou_block_words: usize,
    /// Trace seed.
    pub seed: u64,
}

impl Default for BenchConfig {
    /// 32 MiB of state in 8 KiB objects, 320,000 updates/s, α = 0.5, 20 s
    /// simulated, 0.1 s intervals, a checkpoint every 4 s.
    fn default() -> Self {
        Self {
            state_words: 4 << 20,
            object_words: 1024,
            updates_per_sec: 320_000,
            zipf_alpha: 0.5,
            duration_s: 20.0,
            interval_s: 0.1,
            checkpoint_period_s: 4.0,
            cou_block_words: 4,
            seed: 1,
        }
    }
}

/// One algorithm's results.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRun {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Mutator time above the raw mutator, per checkpoint period (ms).
    pub overhead_ms_per_period: f64,
    /// Median over intervals of the mutator's time above the raw mutator's
    /// in the same interval (ms).
    pub interval_added_ms_p50: f64,
    /// Largest such difference: the latency spike (ms).
    pub interval_added_ms_max: f64,
    /// The mutator's time in each interval (ms), for plotting (Figure 8).
    pub interval_ms: Vec<f64>,
    /// Checkpoints started during the run (not counting the initial one).
    pub checkpoints: u64,
}

/// Results of [`run_bench`].
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// Updates applied per interval.
    pub updates_per_interval: usize,
    /// Intervals per checkpoint period.
    pub period_intervals: u64,
    /// The raw mutator's time in each interval (ms).
    pub raw_interval_ms: Vec<f64>,
    /// One entry per algorithm, in the order asked for.
    pub runs: Vec<BenchRun>,
}

/// Zipf(α) over `0..n` by inverse CDF (rank 0 most popular).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, alpha: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for rank in 1..=n {
            sum += 1.0 / (rank as f64).powf(alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Self { cdf }
    }

    fn sample(&self, rng: &mut SmallRng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Runs the Zipf experiment for each of `algorithms`.
pub fn run_bench(config: &BenchConfig, algorithms: &[Algorithm]) -> Result<BenchReport, Error> {
    if config.state_words == 0
        || config.object_words == 0
        || config.interval_s <= 0.0
        || config.duration_s < config.interval_s
        || config.checkpoint_period_s < config.interval_s
    {
        return Err(Error::Config("bench: sizes and times must be positive"));
    }
    let per_interval = (config.updates_per_sec as f64 * config.interval_s).round() as usize;
    let intervals = (config.duration_s / config.interval_s).round() as usize;
    let period = (config.checkpoint_period_s / config.interval_s)
        .round()
        .max(1.0) as u64;

    let objects = config.state_words.div_ceil(config.object_words);
    let object_zipf = Zipf::new(objects, config.zipf_alpha);
    let word_zipf = Zipf::new(config.object_words, config.zipf_alpha);
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let trace_len = (per_interval * intervals).clamp(1, TRACE_UPDATES_MAX);
    let trace: Vec<usize> = (0..trace_len)
        .map(|_| {
            let object = object_zipf.sample(&mut rng);
            let word = word_zipf.sample(&mut rng);
            (object * config.object_words + word) % config.state_words
        })
        .collect();
    let initial: Vec<u64> = (0..config.state_words as u64).collect();

    let raw = measure_raw(&initial, &trace, per_interval, intervals);
    let raw_total: f64 = raw.iter().sum();
    let mut runs = Vec::new();
    for &algorithm in algorithms {
        let storage: Arc<dyn Storage> = match algorithm {
            Algorithm::PingPongNaive(PingPongWriter::Merge)
            | Algorithm::PingPongInterleaved(PingPongWriter::Merge) => Arc::new(SimStorage::new()),
            _ => Arc::new(NullStorage),
        };
        let t = (storage, &trace[..], per_interval, intervals, period);
        let (interval_ms, checkpoints) = match algorithm {
            Algorithm::NaiveSnapshot => measure(ns::new(&initial), t)?,
            Algorithm::CopyOnUpdate => measure(cou::new(&initial, config.cou_block_words), t)?,
            Algorithm::ZigzagNaive => measure(nzz::new(&initial), t)?,
            Algorithm::ZigzagPacked => measure(bazz::new(&initial), t)?,
            Algorithm::PingPongNaive(m) => measure(npp::new(&initial, m), t)?,
            Algorithm::PingPongInterleaved(m) => measure(ipp::new(&initial, m), t)?,
        };
        let total: f64 = interval_ms.iter().sum();
        let mut added: Vec<f64> = interval_ms.iter().zip(&raw).map(|(a, r)| a - r).collect();
        added.sort_by(f64::total_cmp);
        runs.push(BenchRun {
            algorithm,
            overhead_ms_per_period: (total - raw_total) / (intervals as f64 / period as f64),
            interval_added_ms_p50: added[added.len() / 2],
            interval_added_ms_max: *added.last().expect("at least one interval"),
            interval_ms,
            checkpoints,
        });
    }
    Ok(BenchReport {
        updates_per_interval: per_interval,
        period_intervals: period,
        raw_interval_ms: raw,
        runs,
    })
}

fn measure_raw(
    initial: &[u64],
    trace: &[usize],
    per_interval: usize,
    intervals: usize,
) -> Vec<f64> {
    let mut state = initial.to_vec();
    let mut pos = 0;
    let mut out = Vec::with_capacity(intervals);
    for _ in 0..intervals {
        let start = Instant::now();
        for _ in 0..per_interval {
            state[trace[pos]] = pos as u64;
            pos = if pos + 1 == trace.len() { 0 } else { pos + 1 };
        }
        black_box(&mut state);
        out.push(start.elapsed().as_secs_f64() * 1e3);
    }
    out
}

fn measure<M: MutatorScheme, W: ImageWriter>(
    (mutator, writer): (M, W),
    (storage, trace, per_interval, intervals, period): (
        Arc<dyn Storage>,
        &[usize],
        usize,
        usize,
        u64,
    ),
) -> Result<(Vec<f64>, u64), Error> {
    let mut engine = Engine::start(mutator, writer, storage, 1, 0, period)?;
    engine.wait_idle()?;
    let mut pos = 0;
    let mut checkpoints = 0;
    let mut out = Vec::with_capacity(intervals);
    for tick in 1..=intervals as u64 {
        let start = Instant::now();
        for _ in 0..per_interval {
            engine.mutator.handle_write(trace[pos], pos as u64);
            pos = if pos + 1 == trace.len() { 0 } else { pos + 1 };
        }
        engine.check()?;
        let started = engine.point_of_consistency(tick).is_some();
        out.push(start.elapsed().as_secs_f64() * 1e3);
        if started {
            checkpoints += 1;
            // Off the clock: let the writer finish before the mutator goes
            // on, standing for a checkpoint period long enough for the
            // writer (§5.1) and keeping its work out of the mutator's times.
            engine.wait_idle()?;
        }
    }
    Ok((out, checkpoints))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_runs_every_algorithm_and_starts_every_checkpoint() {
        let config = BenchConfig {
            state_words: 1 << 14,
            object_words: 256,
            updates_per_sec: 20_000,
            duration_s: 1.0,
            checkpoint_period_s: 0.5,
            ..BenchConfig::default()
        };
        let report = run_bench(&config, &Algorithm::ALL).unwrap();
        assert_eq!(report.updates_per_interval, 2000);
        assert_eq!(report.period_intervals, 5);
        assert_eq!(report.raw_interval_ms.len(), 10);
        for run in &report.runs {
            assert_eq!(run.checkpoints, 2, "{}", run.algorithm);
            assert_eq!(run.interval_ms.len(), 10);
        }
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(100, 0.99);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut hits = [0u32; 100];
        for _ in 0..10_000 {
            hits[z.sample(&mut rng)] += 1;
        }
        assert!(
            hits[0] > hits[50] * 5,
            "rank 0 is hot: {} vs {}",
            hits[0],
            hits[50]
        );
    }
}
