//! Why this file exists: copies to the tail in every CPR phase, and
//! pending requests across phases, under contention. In REST and
//! WAIT_FLUSH an update of a record below safe read-only appends a copy
//! without a latch (cpr-sigmod19 Algorithm 4; `Session::copy_source`); in
//! WAIT_FLUSH it must carry the session's version v+1 and must never be
//! taken of a record another session may still update in place (the
//! mutable region, where a snapshot leaves version-v records and updates
//! them in place once captured); IN_PROGRESS and WAIT_PENDING copy under
//! the bucket's exclusive latch. A request that went pending before the
//! session's CPR point keeps its shared latch until it is done, or a
//! version-(v+1) copy overtakes it and WAIT_PENDING never ends (these runs
//! found that: a retry in PREPARE gave the latch up; `Session::attempt`).
//! Two sessions RMW-increment counters, a quarter of the increments on
//! four hot keys, with 5% of the log mutable, while checkpoints of every
//! kind are taken back to back. The live counters must be exact, and after
//! a power loss each counter must equal the increments at or below the
//! serial numbers the sessions recover.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

mod common;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, Phase, ShiftMode, SimStorage, Store,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: u64 = 1_000;
/// Increments per session, at least; a session goes on until
/// `CHECKPOINTS` checkpoints have been taken while it ran.
const PER_SESSION: usize = 40_000;
const CHECKPOINTS: usize = 6;

/// The store: 5% of the log mutable (nearly every update copies), or,
/// with `mostly_mutable`, 90% (a snapshot's WAIT_FLUSH then copies
/// version-v records from the mutable region under the bucket's exclusive
/// latch while captured ones are updated in place).
fn config(shift_mode: ShiftMode, mostly_mutable: bool) -> Config {
    let config = common::mostly_copies_config(shift_mode);
    if mostly_mutable {
        Config {
            mutable_fraction: 0.9,
            ..config
        }
    } else {
        config
    }
}

/// What one session did: its id, the key of each increment in serial
/// order (serial `i + 1` for index `i`), and how many it issued while in
/// WAIT_FLUSH.
struct SessionRun {
    id: u64,
    keys: Vec<u64>,
    in_wait_flush: usize,
}

fn run(shift_mode: ShiftMode, seed: u64, mostly_mutable: bool) {
    let what = format!("{shift_mode:?}, seed {seed}, mostly mutable {mostly_mutable}");
    let disk = SimStorage::new(seed);
    let dir = Path::new("/cc");
    let store = Arc::new(
        Store::open(
            Arc::new(disk.clone()),
            dir,
            config(shift_mode, mostly_mutable),
            AddU64,
        )
        .unwrap(),
    );
    // Sessions done issuing; and the checkpoints over, after which the
    // sessions may leave (a checkpoint waits for every session's refresh).
    let issued = AtomicUsize::new(0);
    let taken = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (runs, checkpoints) = std::thread::scope(|scope| {
        let sessions: Vec<_> = (0..2u64)
            .map(|t| {
                let store = store.clone();
                let (issued, taken, stop) = (&issued, &taken, &stop);
                scope.spawn(move || {
                    let mut session = store.start_session().unwrap();
                    let mut rng = SmallRng::seed_from_u64(seed * 10 + t);
                    let mut keys = Vec::with_capacity(PER_SESSION);
                    let mut in_wait_flush = 0;
                    let mut i = 0;
                    while i < PER_SESSION || taken.load(Ordering::Relaxed) < CHECKPOINTS {
                        let key = if i % 4 == 0 {
                            rng.gen_range(0..4)
                        } else {
                            rng.gen_range(0..KEYS)
                        };
                        if session.state().phase == Phase::WaitFlush {
                            in_wait_flush += 1;
                        }
                        session.rmw(&key.to_le_bytes(), 1).unwrap();
                        keys.push(key);
                        if i.is_multiple_of(256) {
                            session.complete_pending(false).unwrap();
                        }
                        i += 1;
                    }
                    session.complete_pending(true).unwrap();
                    issued.fetch_add(1, Ordering::SeqCst);
                    // Stay until the checkpoints stop, so that a checkpoint
                    // never waits for a session that has gone quiet.
                    let id = session.id();
                    let finished = SessionRun {
                        id,
                        keys,
                        in_wait_flush,
                    };
                    while !stop.load(Ordering::Relaxed) {
                        session.refresh();
                        std::thread::yield_now();
                    }
                    drop(session);
                    finished
                })
            })
            .collect();
        let checkpointer = {
            let store = store.clone();
            let (issued, taken, stop) = (&issued, &taken, &stop);
            scope.spawn(move || {
                let kinds = [
                    CheckpointKind::FoldOver,
                    CheckpointKind::Snapshot,
                    CheckpointKind::IncrementalSnapshot,
                ];
                let mut count = 0usize;
                while issued.load(Ordering::SeqCst) < 2 {
                    store
                        .checkpoint_with(count.is_multiple_of(4), kinds[count % kinds.len()])
                        .unwrap();
                    count += 1;
                    taken.store(count, Ordering::Relaxed);
                }
                stop.store(true, Ordering::SeqCst);
                count
            })
        };
        let runs: Vec<SessionRun> = sessions.into_iter().map(|s| s.join().unwrap()).collect();
        (runs, checkpointer.join().unwrap())
    });
    assert!(
        checkpoints >= CHECKPOINTS,
        "{what}: only {checkpoints} checkpoints"
    );
    let in_wait_flush: usize = runs.iter().map(|r| r.in_wait_flush).sum();
    assert!(
        in_wait_flush > 100,
        "{what}: only {in_wait_flush} increments issued in WAIT_FLUSH"
    );

    // Live: every increment, exactly once.
    let mut expected = vec![0u64; KEYS as usize];
    for run in &runs {
        for &key in &run.keys {
            expected[key as usize] += 1;
        }
    }
    assert_eq!(
        common::read_counters(&store, KEYS),
        expected,
        "{what}: live counters"
    );

    // After a power loss: the increments each session's recovered serial
    // number commits, and no other.
    let restarted = disk.crash(CrashMode::DropUnsynced);
    drop(store);
    let store = Store::open(
        Arc::new(restarted),
        dir,
        config(shift_mode, mostly_mutable),
        AddU64,
    )
    .unwrap();
    let mut expected = vec![0u64; KEYS as usize];
    for run in &runs {
        let (session, committed) = store.continue_session(run.id).unwrap();
        drop(session);
        assert!(committed as usize <= run.keys.len(), "{what}");
        for &key in &run.keys[..committed as usize] {
            expected[key as usize] += 1;
        }
    }
    assert_eq!(
        common::read_counters(&store, KEYS),
        expected,
        "{what}: recovered counters"
    );
}

/// `run` on a thread of its own, failing rather than hanging when a
/// checkpoint never ends: the failure these runs found first was a
/// version-v request left pending for ever (see `Session::attempt`).
fn run_or_fail_if_stuck(shift_mode: ShiftMode, seed: u64, mostly_mutable: bool) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        run(shift_mode, seed, mostly_mutable);
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => {}
        Err(RecvTimeoutError::Disconnected) => panic!("{shift_mode:?}, seed {seed}: failed"),
        Err(RecvTimeoutError::Timeout) => {
            panic!("{shift_mode:?}, seed {seed}: stuck for 120 s (a checkpoint never ended)")
        }
    }
}

#[test]
fn copies_in_every_phase_lose_no_increment_fine_shift() {
    for seed in 1..=3 {
        run_or_fail_if_stuck(ShiftMode::Fine, seed, false);
    }
}

#[test]
fn copies_in_every_phase_lose_no_increment_coarse_shift() {
    for seed in 1..=3 {
        run_or_fail_if_stuck(ShiftMode::Coarse, seed, false);
    }
}

#[test]
fn copies_of_mutable_records_in_snapshots_lose_no_increment() {
    for seed in 1..=3 {
        run_or_fail_if_stuck(ShiftMode::Fine, seed, true);
        run_or_fail_if_stuck(ShiftMode::Coarse, seed, true);
    }
}
