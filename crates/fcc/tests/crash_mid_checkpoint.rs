//! Why this exists: the double backup (§2.2) is only worth something if a
//! crash while the writer is half-way through a checkpoint leaves the
//! previous one usable. The simulated disk is armed to crash inside the
//! n-th next append to a checkpoint file, which tears that checkpoint (its
//! slot was truncated on creation); recovery must reject it, fall back to
//! the other slot, replay the log from there, and land exactly on the last
//! released point of consistency.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Fcc, SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// 160 KiB of state: three appends per checkpoint.
const WORDS: usize = 20_000;

fn crash_inside_a_checkpoint(algorithm: Algorithm, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let disk = SimStorage::new();
    let mut model = initial_state(WORDS, seed);
    let mut config = Config::new(algorithm);
    config.checkpoint_period_ticks = rng.gen_range(1..=3);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let mut app = Fcc::create(storage, model.clone(), config).unwrap();

    let arm_at = rng.gen_range(2..20u64);
    let mut released = (0, model.clone());
    let mut last_started = 1;
    for t in 1..=10_000u64 {
        if t == arm_at {
            disk.crash_on_append("ckpt", rng.gen_range(1..=3));
        }
        for _ in 0..rng.gen_range(0..10) {
            let rec = random_action(&mut rng, WORDS);
            app.log_action(&rec);
            apply(&mut app, &rec);
            apply(model.as_mut_slice(), &rec);
        }
        match app.point_of_consistency() {
            Ok(r) => {
                released = (r.tick, model.clone());
                if let Some(id) = r.checkpoint_started {
                    last_started = id;
                }
            }
            Err(_) => break,
        }
        // Give the writer time to get going now and then, so the crash
        // lands at different points relative to the mutator.
        if rng.gen_bool(0.2) {
            std::thread::yield_now();
        }
    }
    assert!(
        disk.has_crashed(),
        "{algorithm} seed {seed}: the armed crash never fired"
    );
    drop(app);
    let disk = disk.after_crash(rng.gen());
    let recovered = recover(&disk, replay).unwrap();
    assert_eq!(
        recovered.rejected_checkpoints, 1,
        "{algorithm} seed {seed}: torn slot"
    );
    assert_eq!(
        recovered.checkpoint_id,
        last_started - 1,
        "{algorithm} seed {seed}: fell back to the previous checkpoint"
    );
    assert_eq!(recovered.tick, released.0, "{algorithm} seed {seed}: tick");
    assert!(
        recovered.words == released.1,
        "{algorithm} seed {seed}: state differs"
    );
}

#[test]
fn a_torn_checkpoint_falls_back_to_the_previous_one() {
    let seed = seed("crash_mid_checkpoint", 4_2011);
    for algorithm in Algorithm::ALL {
        for i in 0..4 {
            crash_inside_a_checkpoint(algorithm, algo_seed(seed, algorithm).wrapping_add(i << 32));
        }
    }
}
