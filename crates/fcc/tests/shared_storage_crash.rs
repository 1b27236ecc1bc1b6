//! Why this exists: the project's shared simulated disk
//! (`epochdb_storage::SimStorage`) is stricter than fcc's own: a file's
//! name survives a crash only if its directory was synced, unsynced tails
//! are torn at random, and a failed write or sync (EIO, ENOSPC) latches the
//! disk. Every algorithm runs a seeded random application on it through
//! [`SharedStorage`], the disk loses power (or first fails a random sync or
//! write), and recovery must give the state at the last released point of
//! consistency — or the one after, when a failed sync had in fact made that
//! tick's log block durable.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Fcc, SharedStorage, Storage};
use epochdb_storage::{CrashMode, FaultKind, FaultOp, SimStorage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const WORDS: usize = 2000;
const SEEDS_PER_ALGORITHM: u64 = 4;

fn on(disk: &SimStorage) -> SharedStorage {
    SharedStorage::new(Arc::new(disk.clone()), "/fcc").unwrap()
}

fn crash_and_recover(algorithm: Algorithm, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let disk = SimStorage::new(seed);
    let mut config = Config::new(algorithm);
    config.checkpoint_period_ticks = rng.gen_range(1..=3);
    let initial = initial_state(WORDS, seed);
    let storage: Arc<dyn Storage> = Arc::new(on(&disk));
    let mut app = Fcc::create(storage, initial.clone(), config).unwrap();

    // states[t]: the model state after tick t (every tick of this life).
    let mut states = vec![initial];
    let ticks = rng.gen_range(5..60u64);
    // Half the runs: a random sync or write fails first (EIO or ENOSPC).
    if rng.gen_bool(0.5) {
        let op = [FaultOp::Sync, FaultOp::Write][rng.gen_range(0..2)];
        let kind = [FaultKind::Eio, FaultKind::NoSpace][rng.gen_range(0..2)];
        disk.fail_nth(op, rng.gen_range(1..200), kind);
    }
    let mut released = 0;
    for t in 1..=ticks {
        let mut next = states.last().unwrap().clone();
        for _ in 0..rng.gen_range(0..10) {
            let rec = random_action(&mut rng, WORDS);
            app.log_action(&rec);
            apply(&mut app, &rec);
            apply(next.as_mut_slice(), &rec);
        }
        states.push(next);
        match app.point_of_consistency() {
            Ok(r) => {
                assert_eq!(r.tick, t);
                released = t;
            }
            Err(_) => break, // fail-stop: nothing more is released
        }
    }
    let mode = [CrashMode::DropUnsynced, CrashMode::TearUnsynced][rng.gen_range(0..2)];
    let after = disk.crash(mode);
    drop(app);
    let recovered = recover(&on(&after), replay).unwrap_or_else(|e| {
        panic!("{algorithm} seed {seed}: recovery failed after tick {released}: {e}")
    });
    assert!(
        recovered.tick == released || recovered.tick == released + 1,
        "{algorithm} seed {seed}: released {released}, recovered tick {}",
        recovered.tick
    );
    assert!(
        recovered.words == states[recovered.tick as usize],
        "{algorithm} seed {seed}: state at tick {} differs",
        recovered.tick
    );
}

#[test]
fn every_algorithm_recovers_on_the_shared_simulated_disk() {
    let seed = seed("shared_storage_crash", 20110614);
    for algorithm in Algorithm::ALL {
        for i in 0..SEEDS_PER_ALGORITHM {
            crash_and_recover(algorithm, algo_seed(seed, algorithm).wrapping_add(i << 32));
        }
    }
}
