//! Why this file exists: power loss at a random moment, while threads are
//! committing, must leave a log that recovers to an LSN prefix holding
//! every commit whose callback reported durability — with unsynced data
//! dropped, or with a random prefix of it kept and the last write torn.
//! Each seed replays (SimStorage draws everything from it).
#![cfg(not(loom))]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use epochdb_storage::{CrashMode, SimStorage};
use epochdb_wal::{LogKind, Wal};

const THREADS: u32 = 3;

/// Returns how many commits were acknowledged before the crash.
fn crash_once(kind: LogKind, seed: u64, mode: CrashMode) -> usize {
    let disk = SimStorage::new(seed);
    let mut opts = small_options(kind);
    opts.file_max_bytes = 64 << 10; // rotate often, so crashes hit rotation
    opts.direct_io = seed.is_multiple_of(2); // both write paths: past the page cache, and through it
    let (wal, _) = Wal::open(Arc::new(disk.clone()), "/db/wal", opts.clone()).unwrap();
    let acks: Vec<Acks> = (0..THREADS).map(|_| Acks::default()).collect();
    let after = disk.clone();
    let revived = std::thread::scope(|s| {
        for t in 0..THREADS {
            let mut h = wal.thread_handle();
            let acks = acks[t as usize].clone();
            s.spawn(move || {
                commit_all(&mut h, t, 100_000, &acks);
            });
        }
        std::thread::sleep(Duration::from_micros(500 + seed * 997 % 20_000));
        after.crash(mode)
    });
    // The old process is dead: its flusher failed, its threads stopped.
    assert!(
        wal.failure().is_some(),
        "seed {seed}: the crash must fail the old log"
    );
    drop(wal);
    let (_wal, rec) = Wal::open(Arc::new(revived), "/db/wal", opts)
        .unwrap_or_else(|e| panic!("seed {seed} {mode:?}: recovery failed: {e}"));
    let seen = check_prefix(&rec);
    let mut acked = 0;
    for (t, a) in acks.iter().enumerate() {
        acked += check_acked_present(t as u32, a, &seen);
    }
    assert!(seen.len() >= acked);
    acked
}

#[test]
fn crash_drop_unsynced_grasshopper() {
    let acked: usize = (0..6)
        .map(|seed| crash_once(LogKind::Grasshopper, seed, CrashMode::DropUnsynced))
        .sum();
    assert!(acked > 0, "crashes came before any commit was acknowledged");
}

#[test]
fn crash_tear_unsynced_grasshopper() {
    let acked: usize = (0..6)
        .map(|seed| crash_once(LogKind::Grasshopper, seed, CrashMode::TearUnsynced))
        .sum();
    assert!(acked > 0, "crashes came before any commit was acknowledged");
}

#[test]
fn crash_tear_unsynced_baselines() {
    for seed in 0..3 {
        crash_once(LogKind::Vanilla, seed, CrashMode::TearUnsynced);
        crash_once(LogKind::BitmapScan, seed, CrashMode::TearUnsynced);
    }
}

#[test]
#[ignore = "long: many seeds"]
fn crash_many_seeds() {
    for seed in 0..200 {
        for mode in [CrashMode::DropUnsynced, CrashMode::TearUnsynced] {
            for kind in KINDS {
                crash_once(kind, seed, mode);
            }
        }
    }
}
