//! Why this file exists: recovery's log replay is CPU-bound once the disk
//! is fast (one index cache miss per record), and `Config::recovery_threads`
//! claims to spread it. This measures the replay and index-load time of one
//! checkpoint recovered over and over from a warm page cache (so the disk
//! is out of the picture) with 1, 2, 4 … threads. Ignored by default (a
//! measurement, not a test):
//!
//! ```text
//! cargo test --release -p epochdb-hybridlog --test recovery_speed -- --ignored --nocapture
//! ```
//!
//! `HYBRIDLOG_SPEED_KEYS` (default 2 Mi 8-byte keys: 64 MiB of log
//! replayed, 64 MiB of index), `HYBRIDLOG_SPEED_PASSES` (default 1: each
//! key written once, so every replayed record is a new key; 4 writes each
//! key four times, as a log of updates holds) and
//! `HYBRIDLOG_SPEED_THREADS` (default "1,2,4,8") choose the size, the
//! passes and the thread counts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use epochdb_hybridlog::{AddU64, Config, RealStorage, Store};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn config(keys: u64, passes: u64, threads: usize) -> Config {
    Config {
        index_buckets: (keys as usize / 2).next_power_of_two(),
        page_bits: 20,
        memory_bytes: (keys * passes * 32 * 2).next_power_of_two().max(64 << 20),
        recovery_threads: threads,
        // Through the page cache, so that recovery reads it warm.
        direct_io: false,
        ..Config::default()
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

#[test]
#[ignore = "a measurement"]
fn replay_time_by_thread_count() {
    let keys: u64 = env("HYBRIDLOG_SPEED_KEYS", "2097152").parse().unwrap();
    let passes: u64 = env("HYBRIDLOG_SPEED_PASSES", "1").parse().unwrap();
    let threads: Vec<usize> = env("HYBRIDLOG_SPEED_THREADS", "1,2,4,8")
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("store");
    {
        let store = Store::open(
            Arc::new(RealStorage::new()),
            &dir,
            config(keys, passes, 1),
            AddU64,
        )
        .unwrap();
        // The index checkpoint of an empty store: everything is replayed.
        store.checkpoint(true).unwrap();
        let mut session = store.start_session().unwrap();
        for pass in 0..passes {
            for k in 0..keys {
                session
                    .upsert(&k.to_le_bytes(), &(k + pass).to_le_bytes())
                    .unwrap();
            }
            drop(session);
            // A fold-over: the next pass's writes are new records.
            store.checkpoint(false).unwrap();
            session = store.start_session().unwrap();
        }
    }
    recover(&dir, keys, passes, 1); // warm the page cache
    for round in 0..3 {
        for &t in &threads {
            let (index, replay, log_bytes) = recover(&dir, keys, passes, t);
            println!(
                "round {round} threads {t}: replay {:.1} ms ({:.0} MB/s of log), index load {:.1} ms",
                replay.as_secs_f64() * 1e3,
                log_bytes as f64 / 1e6 / replay.as_secs_f64(),
                index.as_secs_f64() * 1e3,
            );
        }
    }
    for &t in &threads {
        let runs: Vec<_> = (0..5).map(|_| recover(&dir, keys, passes, t)).collect();
        let replay = median(runs.iter().map(|r| r.1).collect());
        let index = median(runs.iter().map(|r| r.0).collect());
        println!(
            "median of 5, threads {t}: replay {:.1} ms, index load {:.1} ms",
            replay.as_secs_f64() * 1e3,
            index.as_secs_f64() * 1e3
        );
    }
}

fn recover(dir: &Path, keys: u64, passes: u64, threads: usize) -> (Duration, Duration, u64) {
    let store = Store::open(
        Arc::new(RealStorage::new()),
        dir,
        config(keys, passes, threads),
        AddU64,
    )
    .unwrap();
    let info = store.recovered().unwrap();
    assert!(info.log_bytes >= keys * passes * 32, "{info:?}");
    (info.index_time, info.replay_time, info.log_bytes)
}
