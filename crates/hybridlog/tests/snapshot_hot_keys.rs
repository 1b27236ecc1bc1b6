//! Why this file exists: while a snapshot checkpoint copies version v
//! (cpr-sigmod19 Appendix C), sessions at v+1 update a version-v record in
//! place once the snapshot has copied it, and append a copy of it before
//! that. Two sessions on one hot key can be on both sides of that line at
//! once: one copying the record to the tail (it read the value, its index
//! CAS still to come) while the other adds to the record in place. Unless
//! the two exclude each other, the in-place increment lands on a record
//! the CAS is about to replace, and is lost. Here three sessions take keys
//! from one shared cursor, two operations per key, so that two of them
//! often update the same key at the same moment, sweeping the keys in the
//! order the snapshot copies them, while snapshots are taken back to back.
//! No crash: the live counters must add up to exactly the increments
//! issued.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use epochdb_hybridlog::{AddU64, CheckpointKind, Config, SimStorage, Store};

const KEYS: u64 = 20_000;
const THREADS: u64 = 3;

fn config() -> Config {
    Config {
        index_buckets: 1 << 10,
        page_bits: 12,
        memory_bytes: 64 << 20,
        mutable_fraction: 0.9,
        max_sessions: 8,
        ..Config::default()
    }
}

#[test]
fn hot_keys_lose_no_increment_while_snapshots_run() {
    let seconds = std::env::var("HYBRIDLOG_HOT_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3u64);
    let disk = SimStorage::new(3);
    let store = Arc::new(Store::open(Arc::new(disk), Path::new("/hot"), config(), AddU64).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let cursor = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (store, stop, cursor) = (store.clone(), stop.clone(), cursor.clone());
            std::thread::spawn(move || {
                common::increment_until(&store, &stop, |_| {
                    cursor.fetch_add(1, Ordering::Relaxed) / 2 % KEYS
                })
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut checkpoints = 0u64;
    let no_checkpoints = std::env::var("HYBRIDLOG_HOT_NO_CKPT").is_ok();
    while no_checkpoints && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    while Instant::now() < deadline {
        let kind = if std::env::var("HYBRIDLOG_HOT_FOLDOVER").is_ok() {
            CheckpointKind::FoldOver
        } else if checkpoints.is_multiple_of(2) {
            CheckpointKind::Snapshot
        } else {
            CheckpointKind::IncrementalSnapshot
        };
        store
            .checkpoint_with(checkpoints.is_multiple_of(16), kind)
            .unwrap();
        checkpoints += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut issued, mut pending) = (0, 0);
    for worker in workers {
        let (i, p) = worker.join().unwrap();
        issued += i;
        pending += p;
    }
    let counters = common::read_counters(&store, KEYS);
    let total: u64 = counters.iter().sum();
    assert_eq!(
        total, issued,
        "{checkpoints} snapshots: the counters hold {total} of {issued} increments ({pending} went pending)"
    );
    assert!(
        no_checkpoints || checkpoints >= 10,
        "only {checkpoints} snapshots in {seconds} s"
    );
}
