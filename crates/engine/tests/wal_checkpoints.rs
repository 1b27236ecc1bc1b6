//! The `wal` mode's checkpoints: a checkpoint truncates the central log and
//! recovery loads it and replays only the log since its start LSN; with
//! checkpoints running all the time under concurrent writers, power loss at
//! random moments (often mid-checkpoint) loses no acknowledged commit and
//! recovers, per worker, exactly a prefix of its commits.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{assert_slots_hold_prefix, key, power_loss_after, row_map};
use epochdb_engine::{Config, Database, DurabilityKind, SilorOptions, Ticket, WalOptions};
use epochdb_storage::{SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::SeedableRng;

fn config(dir: &Path, checkpoint_interval: Duration) -> Config {
    Config {
        durability: DurabilityKind::Wal,
        dirs: vec![dir.to_path_buf()],
        epoch_interval: Duration::from_millis(2),
        wal: WalOptions {
            io_unit_bytes: 4 << 10,
            buffer_bytes: 64 << 10,
            hop_shift: 12,
            file_max_bytes: 32 << 10,
            ..WalOptions::default()
        },
        silor: SilorOptions {
            checkpoint_interval,
            checkpoint_files_per_table: 2,
            checkpoint_block_bytes: 4096,
            checkpoint_sync_bytes: 16 << 10,
            ..SilorOptions::default()
        },
        ..Config::default()
    }
}

fn log_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".log")
        })
        .count()
}

#[test]
fn a_checkpoint_truncates_the_log_and_recovery_starts_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let never = Duration::from_secs(3600);
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let (files_before, files_after) = {
        let db = Database::open(config(dir.path(), never)).unwrap();
        let table = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let mut put = |n: u64, v: Option<u8>| -> Ticket {
            let ((), ticket) = worker
                .run(|tx| match v {
                    Some(v) => tx.put(table, &key(n), &[v; 64]),
                    None => tx.delete(table, &key(n)).map(|_| ()),
                })
                .unwrap();
            match v {
                Some(v) => model.insert(key(n).to_vec(), vec![v; 64]),
                None => model.remove(&key(n)[..]),
            };
            ticket
        };
        let mut last = None;
        for n in 0..3000 {
            last = Some(put(n, Some(1)));
        }
        for n in (0..3000).step_by(3) {
            last = Some(put(n, Some(2)));
        }
        for n in (0..3000).step_by(7) {
            last = Some(put(n, None));
        }
        last.take().unwrap().wait().unwrap();
        let files_before = log_files(dir.path());
        db.checkpoint().unwrap();
        let stats = db.durability_stats();
        assert_eq!(stats.checkpoints, 1);
        assert!(stats.checkpoint_bytes > 2000 * 64, "{stats:?}");
        let files_after = log_files(dir.path());
        // After the checkpoint: overwrite, delete and re-insert keys the
        // checkpoint holds, and add new ones.
        for n in (0..3000).step_by(5) {
            last = Some(put(n, Some(3)));
        }
        for n in (1..3000).step_by(11) {
            last = Some(put(n, None));
        }
        for n in 3000..3100 {
            last = Some(put(n, Some(4)));
        }
        last.take().unwrap().wait().unwrap();
        (files_before, files_after)
    };
    assert!(files_before > 4, "{files_before} log files before");
    assert!(
        files_after <= 2,
        "{files_after} log files after the checkpoint ({files_before} before)"
    );
    let db = Database::open(config(dir.path(), never)).unwrap();
    let report = db.recovery_report().unwrap().clone();
    assert!(report.checkpoint_bytes > 0, "{report:?}");
    // Only the commits since the checkpoint are replayed.
    assert!(report.log_entries < 2000, "{report:?}");
    assert_eq!(row_map(&db, "t"), model);
    // A second checkpoint after recovery replaces the first.
    db.checkpoint().unwrap();
    drop(db);
    let db = Database::open(config(dir.path(), never)).unwrap();
    assert_eq!(db.recovery_report().unwrap().log_entries, 0);
    assert_eq!(row_map(&db, "t"), model);
}

/// Keys a worker writes: `w * 1_000_000 + n % SLOTS`, value `n` (8
/// bytes). Enough slots that a checkpoint's scan takes a while, so writes
/// land behind it and only the log from the checkpoint's start has them.
const SLOTS: u64 = 3000;

#[test]
fn power_loss_during_frequent_checkpoints_keeps_a_prefix_of_every_worker() {
    let mut acked_total = 0;
    let mut checkpoints_total = 0;
    for seed in 0..16u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let storage = SimStorage::new(seed);
        let sim = |s: &SimStorage| Config {
            storage: Some(Arc::new(s.clone()) as Arc<dyn Storage>),
            ..config(Path::new("/db"), Duration::from_millis(3))
        };
        let db = Database::open(sim(&storage)).unwrap();
        let table = db.create_table("t").unwrap();
        // Per worker, the highest `n` acknowledged.
        let acked: Mutex<HashMap<u64, u64>> = Mutex::new(HashMap::new());
        let stop = AtomicBool::new(false);
        let crashed = std::thread::scope(|s| {
            for w in 0..2u64 {
                let (db, stop, acked) = (&db, &stop, &acked);
                s.spawn(move || {
                    let mut worker = db.worker().unwrap();
                    let mut pending: Vec<(u64, Ticket)> = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let k = w * 1_000_000 + n % SLOTS;
                        let Ok(((), ticket)) =
                            worker.run(|tx| tx.put(table, &key(k), &n.to_le_bytes()))
                        else {
                            break;
                        };
                        n += 1;
                        pending.push((n - 1, ticket));
                        pending.retain(|(m, t)| match t.is_durable() {
                            Ok(true) => {
                                let mut acked = acked.lock().unwrap();
                                let e = acked.entry(w).or_insert(0);
                                *e = (*e).max(*m + 1);
                                false
                            }
                            _ => true,
                        });
                    }
                });
            }
            power_loss_after(&storage, &mut rng, 5_000..60_000, &stop)
        });
        checkpoints_total += db.durability_stats().checkpoints;
        drop(db);
        let db = Database::open(sim(&crashed)).unwrap();
        let recovered = row_map(&db, "t");
        let acked = acked.into_inner().unwrap();
        for w in 0..2u64 {
            // The recovered state of worker w must be exactly the state
            // after its first `count` commits, for some count ≥ acked.
            let values: Vec<u64> = (0..SLOTS)
                .filter_map(|slot| recovered.get(&key(w * 1_000_000 + slot)[..]))
                .map(|v| u64::from_le_bytes(v[..].try_into().unwrap()))
                .collect();
            let count = values.iter().max().map_or(0, |m| m + 1);
            let acked_w = acked.get(&w).copied().unwrap_or(0);
            acked_total += acked_w;
            assert!(
                count >= acked_w,
                "seed {seed} worker {w}: {count} commits recovered, {acked_w} acknowledged"
            );
            assert_slots_hold_prefix(
                &recovered,
                w,
                count,
                SLOTS,
                &format!("seed {seed} worker {w}"),
            );
        }
    }
    assert!(
        acked_total > 200,
        "only {acked_total} commits were acknowledged"
    );
    assert!(
        checkpoints_total > 5,
        "only {checkpoints_total} checkpoints were installed"
    );
}
