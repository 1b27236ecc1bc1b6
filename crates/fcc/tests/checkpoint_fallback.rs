//! Why this exists: the log is trimmed as checkpoints complete, but only
//! down to what the *older* checkpoint of the double backup still needs.
//! If the newest checkpoint is damaged, recovery must be able to start from
//! the older one and replay a longer log. And Ping-Pong's Merge writer,
//! which reads the previous checkpoint back, must refuse to build on a
//! damaged one rather than write a checkpoint that looks valid.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Fcc, PingPongWriter, SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;

const WORDS: usize = 2048;

fn tick(app: &mut Fcc, model: &mut Vec<u64>, rng: &mut SmallRng) -> epochdb_fcc::Released {
    for _ in 0..4 {
        let rec = random_action(rng, WORDS);
        app.log_action(&rec);
        apply(app, &rec);
        apply(model.as_mut_slice(), &rec);
    }
    app.point_of_consistency().unwrap()
}

#[test]
fn damaged_newest_checkpoint_falls_back_with_a_longer_replay() {
    let seed = seed("checkpoint_fallback", 3);
    for algorithm in [Algorithm::NaiveSnapshot, Algorithm::ZigzagPacked] {
        let disk = SimStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut model = initial_state(WORDS, seed);
        let mut config = Config::new(algorithm);
        config.checkpoint_period_ticks = 5;
        let mut app = Fcc::create(storage, model.clone(), config).unwrap();
        for _ in 0..23 {
            tick(&mut app, &mut model, &mut rng);
            // Let every checkpoint finish so they start on schedule.
            app.wait_for_checkpoints().unwrap();
        }
        let newest = app.durable_checkpoint();
        assert!(newest >= 4, "checkpoints ran: {newest}");
        drop(app);

        let clean = recover(&disk, replay).unwrap();
        assert_eq!(clean.checkpoint_id, newest);
        assert!(clean.words == model);

        disk.flip_bit(&format!("ckpt.{}", newest % 2), 100, 3);
        let fallback = recover(&disk, replay).unwrap();
        assert_eq!(fallback.rejected_checkpoints, 1);
        assert_eq!(fallback.checkpoint_id, newest - 1, "{algorithm}");
        assert_eq!(fallback.tick, 23);
        assert!(fallback.replayed_ticks > clean.replayed_ticks);
        assert!(
            fallback.words == model,
            "{algorithm}: state differs after fallback"
        );
    }
}

#[test]
fn merge_writer_refuses_a_damaged_previous_checkpoint() {
    for algorithm in [
        Algorithm::PingPongNaive(PingPongWriter::Merge),
        Algorithm::PingPongInterleaved(PingPongWriter::Merge),
    ] {
        let disk = SimStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let mut rng = SmallRng::seed_from_u64(5);
        let mut model = initial_state(WORDS, 5);
        let mut app = Fcc::create(storage, model.clone(), Config::new(algorithm)).unwrap();
        // Damage checkpoint 1; checkpoint 2 merges onto it.
        disk.flip_bit("ckpt.1", 64, 0);
        let mut failed = false;
        for _ in 0..1000 {
            if app.wait_for_checkpoints().is_err() {
                failed = true;
                break;
            }
            tick(&mut app, &mut model, &mut rng);
        }
        assert!(failed, "{algorithm}: the merge noticed the damage");
        drop(app);
        // Checkpoint 2 was never completed; recovery still has checkpoint 1
        // only, which is damaged: nothing valid is left to start from.
        assert!(recover(&disk, replay).is_err());
    }
}
