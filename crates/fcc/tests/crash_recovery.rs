//! Why this exists: the core promise of the crate. For every algorithm,
//! run a seeded random application, crash the simulated disk at a random
//! point (everything unsynced is lost, unsynced tails may be torn), recover
//! with the application's replay function, and compare with a model: the
//! state must be exactly the state at the last released point of
//! consistency. Then resume from the recovered state (possibly under
//! another algorithm), run and crash again.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Fcc, SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const WORDS: usize = 3000;
const SEEDS_PER_ALGORITHM: u64 = 6;

/// Runs up to `ticks` ticks, crashing the disk at `crash_at = (tick,
/// action)`. Returns the last released tick and the model state at it.
fn run_until_crash(
    app: &mut Fcc,
    disk: &SimStorage,
    model: &mut Vec<u64>,
    rng: &mut SmallRng,
    ticks: u64,
    crash_at: (u64, usize),
) -> (u64, Vec<u64>) {
    let mut released = (app.tick(), model.clone());
    for t in 1..=ticks {
        let actions = rng.gen_range(0..12);
        for a in 0..=actions {
            if (t, a) == crash_at {
                disk.crash();
            }
            if a == actions {
                break;
            }
            let rec = random_action(rng, WORDS);
            app.log_action(&rec);
            apply(app, &rec);
            apply(model.as_mut_slice(), &rec);
        }
        match app.point_of_consistency() {
            Ok(r) => {
                assert!(!disk.has_crashed(), "nothing is released after a crash");
                assert_eq!(r.tick, released.0 + 1);
                released = (r.tick, model.clone());
                // The mutator always sees the current state.
                if t % 8 == 0 {
                    assert_eq!(
                        &app.snapshot(),
                        model,
                        "live state diverged at tick {}",
                        r.tick
                    );
                }
            }
            Err(_) => {
                assert!(disk.has_crashed());
                return released;
            }
        }
    }
    disk.crash();
    released
}

fn crash_and_recover(algorithm: Algorithm, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut disk = SimStorage::new();
    let mut model = initial_state(WORDS, seed);
    let mut config = Config::new(algorithm);
    config.checkpoint_period_ticks = rng.gen_range(1..=4);
    config.cou_block_words = [1, 4, 64][rng.gen_range(0..3)];
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let mut app = Fcc::create(storage, model.clone(), config).unwrap();

    for round in 0..2 {
        let ticks = 40;
        let crash_at = (rng.gen_range(1..=ticks), rng.gen_range(0..12));
        let (tick, state) = run_until_crash(&mut app, &disk, &mut model, &mut rng, ticks, crash_at);
        drop(app);
        disk = disk.after_crash(rng.gen());
        let recovered = recover(&disk, replay).unwrap();
        assert_eq!(
            recovered.tick, tick,
            "{algorithm} seed {seed} round {round}: recovered tick (checkpoint {} at tick {})",
            recovered.checkpoint_id, recovered.checkpoint_tick
        );
        assert!(
            recovered.words == state,
            "{algorithm} seed {seed} round {round}: state differs"
        );
        model = state;
        // Resume, sometimes under another algorithm.
        let mut next = config;
        if rng.gen_bool(0.3) {
            next.algorithm = Algorithm::ALL[rng.gen_range(0..Algorithm::ALL.len())];
        }
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        app = Fcc::resume(storage, recovered, next).unwrap();
        assert_eq!(app.snapshot(), model);
    }
}

#[test]
fn every_algorithm_recovers_the_last_released_state() {
    let seed = seed("crash_recovery", 20110612);
    for algorithm in Algorithm::ALL {
        for i in 0..SEEDS_PER_ALGORITHM {
            let s = algo_seed(seed, algorithm).wrapping_add(i << 32);
            crash_and_recover(algorithm, s);
        }
    }
}
