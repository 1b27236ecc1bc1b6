//! Why this exists: the same recovery path on real files. Each algorithm
//! runs against a directory, shuts down cleanly, and recovery must give the
//! final state; then the application resumes under the next algorithm in
//! the list (the file formats do not depend on the algorithm) and recovers
//! again.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Fcc, FsStorage, Storage};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;

const WORDS: usize = 4096;

fn run(app: &mut Fcc, model: &mut Vec<u64>, rng: &mut SmallRng, ticks: u64) {
    for _ in 0..ticks {
        for _ in 0..5 {
            let rec = random_action(rng, WORDS);
            app.log_action(&rec);
            apply(app, &rec);
            apply(model.as_mut_slice(), &rec);
        }
        app.point_of_consistency().unwrap();
    }
}

#[test]
fn every_algorithm_round_trips_through_real_files() {
    let seed = seed("fs_round_trip", 7);
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new(dir.path()).unwrap());
        let mut rng = SmallRng::seed_from_u64(algo_seed(seed, algorithm));
        let mut model = initial_state(WORDS, seed);
        let mut config = Config::new(algorithm);
        config.checkpoint_period_ticks = 3;
        let mut app = Fcc::create(storage.clone(), model.clone(), config).unwrap();
        run(&mut app, &mut model, &mut rng, 20);
        drop(app);

        let recovered = recover(&*storage, replay).unwrap();
        assert_eq!(recovered.tick, 20, "{algorithm}");
        assert!(recovered.words == model, "{algorithm}: state differs");

        let next = Algorithm::ALL[(i + 1) % Algorithm::ALL.len()];
        let mut app = Fcc::resume(storage.clone(), recovered, Config::new(next)).unwrap();
        run(&mut app, &mut model, &mut rng, 10);
        app.wait_for_checkpoints().unwrap();
        drop(app);
        let recovered = recover(&*storage, replay).unwrap();
        assert_eq!(recovered.tick, 30, "{algorithm} then {next}");
        assert!(
            recovered.words == model,
            "{algorithm} then {next}: state differs"
        );
    }
}
