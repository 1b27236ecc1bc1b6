//! Why this file exists: issue 7's speed targets for checkpoints and
//! recovery, and Appendix B's fine- vs coarse-grained shift, measured
//! rather than assumed. Ignored by default (measurements, not tests); run
//! one at a time on the real disk with
//!
//! ```text
//! cargo test --release -p epochdb-hybridlog --test checkpoint_speed -- --ignored --nocapture --test-threads 1
//! ```
//!
//! `HYBRIDLOG_SPEED_DIR` picks the directory (default: the system's
//! temporary directory); `HYBRIDLOG_SPEED_KEYS` the number of 8-byte keys
//! (default 8 Mi: 256 MiB of log, 128 MiB of index).
//!
//! * `disk_baseline`: sequential write (8 MiB writes, then fdatasync) and
//!   read (8 MiB reads, the page cache dropped first with
//!   `dd iflag=nocache`) of a 512 MiB file — the yardstick.
//! * `checkpoint_write_and_recovery_read`: per checkpoint kind, load the
//!   keys (all in memory, all mutable), take a full checkpoint (index and
//!   log), update 5% of the keys (a contiguous 5% of the log), take a
//!   log-only checkpoint; then drop the page cache and recover. Reports
//!   MB/s of the index write, the log write of each checkpoint, and the
//!   recovery read (index + log replayed + snapshot pieces, over recovery's
//!   wall time).
//! * `shift_modes_during_checkpoints`: two threads RMW uniform keys while a
//!   third takes log-only checkpoints back to back; ops/s with no
//!   checkpoint, fold-over with the fine and the coarse shift, snapshot and
//!   incremental snapshot (fine), three runs each, interleaved.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, RealStorage, ShiftMode, SimStorage, Storage, Store,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn base_dir() -> PathBuf {
    std::env::var_os("HYBRIDLOG_SPEED_DIR").map_or_else(std::env::temp_dir, PathBuf::from)
}

fn keys() -> u64 {
    std::env::var("HYBRIDLOG_SPEED_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8 << 20)
}

fn mb_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / 1e6 / time.as_secs_f64().max(1e-9)
}

/// Drops the page cache of every file in `dir` (clean pages only, which
/// they are after their sync).
fn drop_cache(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let status = std::process::Command::new("dd")
            .arg(format!("if={}", path.display()))
            .args(["iflag=nocache", "count=0", "status=none"])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// Bytes that no layer below can compress or deduplicate away (a constant
/// pattern measured 3–5 times faster than the store's own writes here).
fn varied_bytes(len: usize) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(len as u64);
    (0..len).map(|_| rng.gen()).collect()
}

/// Sequential write (+ fdatasync) and read (page cache dropped) of
/// `total` bytes in 8 MiB calls: `(write MB/s, read MB/s)`.
fn disk_speed(total: u64) -> (f64, f64) {
    let dir = tempfile::tempdir_in(base_dir()).unwrap();
    let storage = RealStorage::new();
    let path = dir.path().join("baseline.dat");
    let chunk = varied_bytes(8 << 20);
    let file = storage.create(&path).unwrap();
    let started = Instant::now();
    let mut at = 0;
    while at < total {
        file.write_at(at, &chunk).unwrap();
        at += chunk.len() as u64;
    }
    file.sync().unwrap();
    let write = started.elapsed();
    drop_cache(dir.path());
    let mut buf = vec![0u8; 8 << 20];
    let started = Instant::now();
    let mut at = 0;
    while at < total {
        at += file.read_at(at, &mut buf).unwrap() as u64;
    }
    (mb_s(total, write), mb_s(total, started.elapsed()))
}

#[test]
#[ignore = "a measurement on the real disk"]
fn disk_baseline() {
    let dir = tempfile::tempdir_in(base_dir()).unwrap();
    let storage = RealStorage::new();
    let path = dir.path().join("baseline.dat");
    let chunk = varied_bytes(8 << 20);
    let total = 512u64 << 20;
    for run in 0..3 {
        let _ = std::fs::remove_file(&path);
        let file = storage.create(&path).unwrap();
        let started = Instant::now();
        let mut at = 0;
        while at < total {
            file.write_at(at, &chunk).unwrap();
            at += chunk.len() as u64;
        }
        file.sync().unwrap();
        let write = started.elapsed();
        drop_cache(dir.path());
        let mut buf = vec![0u8; 8 << 20];
        let started = Instant::now();
        let mut at = 0;
        while at < total {
            at += file.read_at(at, &mut buf).unwrap() as u64;
        }
        let read = started.elapsed();
        println!(
            "disk run {run}: write+fdatasync {:.0} MB/s, read (cache dropped) {:.0} MB/s",
            mb_s(total, write),
            mb_s(total, read)
        );
    }
}

fn speed_config(keys: u64) -> Config {
    Config {
        index_buckets: (keys as usize / 4).next_power_of_two(),
        page_bits: 22,
        // Twice the log: everything stays in memory and mutable.
        memory_bytes: (keys * 32 * 2).next_power_of_two(),
        mutable_fraction: 0.9,
        max_sessions: 4,
        ..Config::default()
    }
}

#[test]
#[ignore = "a measurement on the real disk"]
fn checkpoint_write_and_recovery_read() {
    let keys = keys();
    for kind in [
        CheckpointKind::FoldOver,
        CheckpointKind::Snapshot,
        CheckpointKind::IncrementalSnapshot,
    ] {
        let (disk_write, disk_read) = disk_speed(keys * 32);
        println!("{kind:?}: the disk just before: write+fdatasync {disk_write:.0} MB/s, read {disk_read:.0} MB/s");
        let dir = tempfile::tempdir_in(base_dir()).unwrap();
        let storage: Arc<dyn Storage> = Arc::new(RealStorage::new());
        let store = Store::open(storage.clone(), dir.path(), speed_config(keys), AddU64).unwrap();
        let mut session = store.start_session().unwrap();
        for k in 0..keys {
            session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
        }
        drop(session);
        let first = store.checkpoint_with(true, kind).unwrap();
        let index_bytes = (keys as usize / 4).next_power_of_two() as u64 * 64;
        let (log_bytes, log_time) = if kind == CheckpointKind::FoldOver {
            (first.l_e, first.phase_times[3])
        } else {
            (first.snapshot_bytes, first.snapshot_time)
        };
        println!(
            "{kind:?}: index {:.0} MiB in {:?} = {:.0} MB/s; log {:.0} MiB in {:?} = {:.0} MB/s",
            index_bytes as f64 / 1048576.0,
            first.index_time,
            mb_s(index_bytes, first.index_time),
            log_bytes as f64 / 1048576.0,
            log_time,
            mb_s(log_bytes, log_time)
        );
        let mut session = store.start_session().unwrap();
        for k in 0..keys / 20 {
            session.rmw(&k.to_le_bytes(), 1).unwrap();
        }
        session.complete_pending(true).unwrap();
        drop(session);
        let second = store.checkpoint_with(false, kind).unwrap();
        let (log_bytes, log_time) = if kind == CheckpointKind::FoldOver {
            (second.bytes, second.phase_times[3])
        } else {
            (second.snapshot_bytes, second.snapshot_time)
        };
        println!(
            "{kind:?}: after updating 5% of the keys, log-only: {:.1} MiB in {:?} = {:.0} MB/s; checkpoint total {:?}",
            log_bytes as f64 / 1048576.0,
            log_time,
            mb_s(log_bytes, log_time),
            second.phase_times.iter().sum::<Duration>()
        );
        drop(store);
        drop_cache(dir.path());
        let store = Store::open(storage, dir.path(), speed_config(keys), AddU64).unwrap();
        let info = store.recovered().unwrap().clone();
        let read = info.index_bytes + info.log_bytes + info.snapshot_bytes;
        println!(
            "{kind:?}: recovery: index {:.0} MiB + log {:.0} MiB + snapshot {:.0} MiB read in {:?} = {:.0} MB/s (open with frame allocation {:?})",
            info.index_bytes as f64 / 1048576.0,
            info.log_bytes as f64 / 1048576.0,
            info.snapshot_bytes as f64 / 1048576.0,
            info.read_time,
            mb_s(read, info.read_time),
            info.elapsed,
        );
    }
}

/// Ops/s of two RMW threads while checkpoints run back to back (or, with
/// `checkpointing` false, while none runs).
fn during_checkpoints(
    shift_mode: ShiftMode,
    seconds: f64,
    checkpointing: Option<CheckpointKind>,
) -> (f64, u64) {
    let keys = 1u64 << 20;
    let config = Config {
        index_buckets: (keys as usize / 4).next_power_of_two(),
        page_bits: 22,
        memory_bytes: 512 << 20,
        mutable_fraction: 0.9,
        max_sessions: 4,
        shift_mode,
        ..Config::default()
    };
    let store = Arc::new(
        Store::open(
            Arc::new(SimStorage::new(1)),
            Path::new("/shift"),
            config,
            AddU64,
        )
        .unwrap(),
    );
    {
        let mut session = store.start_session().unwrap();
        for k in 0..keys {
            session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
        }
    }
    store.checkpoint(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (store, stop, ops) = (store.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut session = store.start_session().unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        session
                            .rmw(&rng.gen_range(0..keys).to_le_bytes(), 1)
                            .unwrap();
                    }
                    session.complete_pending(false).unwrap();
                    n += 256;
                }
                session.complete_pending(true).unwrap();
                ops.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let started = Instant::now();
    let mut checkpoints = 0;
    while started.elapsed().as_secs_f64() < seconds {
        let Some(kind) = checkpointing else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        store.checkpoint_with(false, kind).unwrap();
        checkpoints += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    for w in workers {
        w.join().unwrap();
    }
    (
        ops.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        checkpoints,
    )
}

#[test]
#[ignore = "a measurement"]
fn shift_modes_during_checkpoints() {
    let fold = Some(CheckpointKind::FoldOver);
    let variants = [
        ("no checkpoint", ShiftMode::Fine, None),
        ("fine, fold-over", ShiftMode::Fine, fold),
        ("coarse, fold-over", ShiftMode::Coarse, fold),
        (
            "fine, snapshot",
            ShiftMode::Fine,
            Some(CheckpointKind::Snapshot),
        ),
        (
            "fine, incremental",
            ShiftMode::Fine,
            Some(CheckpointKind::IncrementalSnapshot),
        ),
    ];
    let mut results: Vec<(&str, f64)> = Vec::new();
    for run in 0..3 {
        for (name, mode, checkpointing) in variants {
            let (rate, checkpoints) = during_checkpoints(mode, 3.0, checkpointing);
            println!(
                "run {run} {name}: {:.2} M RMW/s with {checkpoints} checkpoints in 3 s",
                rate / 1e6
            );
            results.push((name, rate));
        }
    }
    for (name, _, _) in variants {
        let mut rates: Vec<f64> = results
            .iter()
            .filter(|r| r.0 == name)
            .map(|r| r.1)
            .collect();
        rates.sort_by(f64::total_cmp);
        println!("{name}: median {:.2} M RMW/s", rates[1] / 1e6);
    }
}
