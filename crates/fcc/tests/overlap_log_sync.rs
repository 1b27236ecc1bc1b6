//! Why this exists: with `Config::overlap_log_sync` a tick's log sync runs
//! while the application computes the next tick, so at a crash one tick may
//! be in flight, and a checkpoint of it may already be durable. For every
//! algorithm, seeded random applications are crashed at random points on
//! the simulated disk; recovery must give the state of the last released
//! tick or of the one in flight, never anything else, and never less.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Fcc, SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const WORDS: usize = 3000;
const SEEDS_PER_ALGORITHM: u64 = 6;

fn crash_and_recover(algorithm: Algorithm, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let disk = SimStorage::new();
    let mut config = Config::new(algorithm);
    config.checkpoint_period_ticks = rng.gen_range(1..=4);
    config.overlap_log_sync = true;
    let initial = initial_state(WORDS, seed);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let mut app = Fcc::create(storage, initial.clone(), config).unwrap();
    let mut states = vec![initial];
    let mut released = 0;
    let ticks = rng.gen_range(1..50u64);
    let sync_at_end = rng.gen_bool(0.3);
    for t in 1..=ticks {
        let mut next = states.last().unwrap().clone();
        for _ in 0..rng.gen_range(0..12) {
            let rec = random_action(&mut rng, WORDS);
            app.log_action(&rec);
            apply(&mut app, &rec);
            apply(next.as_mut_slice(), &rec);
        }
        states.push(next);
        let r = app.point_of_consistency().unwrap();
        assert_eq!(app.tick(), t);
        assert!(
            r.tick + 1 >= t && r.tick >= released,
            "released {} at tick {t}",
            r.tick
        );
        released = r.tick;
    }
    if sync_at_end {
        released = app.sync_log().unwrap();
        assert_eq!(released, ticks);
    }
    disk.crash();
    drop(app);
    let disk = disk.after_crash(rng.gen());
    let recovered = recover(&disk, replay).unwrap();
    assert!(
        recovered.tick == released || recovered.tick == released + 1,
        "{algorithm} seed {seed}: released {released}, recovered {}",
        recovered.tick
    );
    assert!(
        recovered.words == states[recovered.tick as usize],
        "{algorithm} seed {seed}: state at tick {} differs",
        recovered.tick
    );
}

#[test]
fn overlapped_sync_recovers_the_released_or_the_in_flight_tick() {
    let seed = seed("overlap_log_sync", 20110615);
    for algorithm in Algorithm::ALL {
        for i in 0..SEEDS_PER_ALGORITHM {
            crash_and_recover(algorithm, algo_seed(seed, algorithm).wrapping_add(i << 32));
        }
    }
}
