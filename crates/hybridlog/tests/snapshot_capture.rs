//! Why this file exists: while a snapshot checkpoint writes version v
//! (cpr-sigmod19 Appendix C), sessions already at v+1 may update a
//! version-v record in place only once the snapshot has copied it
//! (`Inner::snapshot_captured`); before that they must append a copy, or
//! their update, which is past their CPR point, would reach the snapshot.
//! The sum-store test's hot counters are mostly copied to v+1 before the
//! snapshot starts, so it rarely meets that window. Here every key is
//! updated once per pass over many keys on small pages, so most records are
//! still version v, and being copied, while the session updates them.
//! After a crash, each counter must equal exactly the increments at or
//! below the serial number `continue_session` returns.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

mod common;

use epochdb_hybridlog::{AddU64, CheckpointKind, Config, CrashMode, SimStorage, Store};

const KEYS: u64 = 40_000;

fn config() -> Config {
    Config {
        index_buckets: 1 << 14,
        page_bits: 12,
        // Everything stays in memory and mutable: the snapshot copies it.
        memory_bytes: 64 << 20,
        mutable_fraction: 0.9,
        max_sessions: 4,
        ..Config::default()
    }
}

/// One run: a session increments keys 0, 1, 2, … in turn while `kind`
/// checkpoints are taken; then power fails and the store recovers.
fn run(kind: CheckpointKind, seed: u64) {
    let disk = SimStorage::new(seed);
    let dir = Path::new("/snap");
    let store = Arc::new(Store::open(Arc::new(disk.clone()), dir, config(), AddU64).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let issued = Arc::new(AtomicU64::new(0));
    let worker = {
        let (store, stop, issued) = (store.clone(), stop.clone(), issued.clone());
        std::thread::spawn(move || {
            let mut session = store.start_session().unwrap();
            let id = session.id();
            let mut ops = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = ops % KEYS;
                session.rmw(&key.to_le_bytes(), 1).unwrap();
                ops += 1;
                issued.store(ops, Ordering::Relaxed);
            }
            session.complete_pending(true).unwrap();
            drop(session);
            (id, ops)
        })
    };
    for round in 1..=3u64 {
        while issued.load(Ordering::Relaxed) < round * 2 * KEYS {
            std::thread::yield_now();
        }
        store.checkpoint_with(round == 1, kind).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (id, ops) = worker.join().unwrap();
    let restarted = disk.crash(CrashMode::DropUnsynced);
    drop(store);

    let store = Store::open(Arc::new(restarted), dir, config(), AddU64).unwrap();
    let (session, committed) = store.continue_session(id).unwrap();
    drop(session);
    assert!(
        committed <= ops,
        "{kind:?}: recovered serial {committed} of {ops}"
    );
    assert!(
        committed >= 6 * KEYS,
        "{kind:?}: the third checkpoint's serial {committed} is below its start"
    );
    // Increment i (serial i + 1) went to key i mod KEYS.
    let expected = |key: u64| committed / KEYS + u64::from(key < committed % KEYS);
    let counters = common::read_counters(&store, KEYS);
    for key in 0..KEYS {
        assert_eq!(
            counters[key as usize],
            expected(key),
            "{kind:?}: counter {key} (committed serial {committed})"
        );
    }
}

#[test]
fn snapshots_hold_no_update_made_after_the_commit_point() {
    for seed in 1..=3 {
        run(CheckpointKind::Snapshot, seed);
        run(CheckpointKind::IncrementalSnapshot, seed);
    }
}
