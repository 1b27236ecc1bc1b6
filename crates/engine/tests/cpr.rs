//! The `cpr` mode (cpr-sigmod19 §2–4 on Silo's OCC): a commit is durable
//! exactly when a checkpoint holding it is installed; recovery restores a
//! transaction-consistent state that holds, for every session, a prefix of
//! its transactions up to the CPR point the checkpoint recorded; values
//! overwritten or deleted while a checkpoint is being captured reach it
//! through their stable copies.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{assert_slots_hold_prefix, key, power_loss_after, row_map};
use epochdb_engine::{
    Config, Database, DurabilityError, DurabilityKind, OpenError, SilorOptions, Ticket,
};
use epochdb_storage::{SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn config(dir: &Path, checkpoint_interval: Duration) -> Config {
    Config {
        durability: DurabilityKind::Cpr,
        dirs: vec![dir.to_path_buf()],
        epoch_interval: Duration::from_millis(2),
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

const NEVER: Duration = Duration::from_secs(3600);

#[test]
fn a_commit_is_durable_once_a_checkpoint_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    {
        let db = Database::open(config(dir.path(), NEVER)).unwrap();
        let table = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let mut put = |n: u64, v: Option<u8>| -> Ticket {
            let ((), ticket) = worker
                .run(|tx| match v {
                    Some(v) => tx.put(table, &key(n), &[v; 40]),
                    None => tx.delete(table, &key(n)).map(|_| ()),
                })
                .unwrap();
            match v {
                Some(v) => model.insert(key(n).to_vec(), vec![v; 40]),
                None => model.remove(&key(n)[..]),
            };
            ticket
        };
        let mut tickets = Vec::new();
        for n in 0..2000 {
            tickets.push(put(n, Some(1)));
        }
        for n in (0..2000).step_by(7) {
            tickets.push(put(n, None));
        }
        std::thread::sleep(Duration::from_millis(20));
        // No checkpoint yet: nothing is durable, however many epochs pass.
        assert!(!tickets[0].is_durable().unwrap());
        assert_eq!(db.durability_stats().checkpoints, 0);
        drop(worker);
        db.checkpoint().unwrap();
        for ticket in &tickets {
            assert!(ticket.is_durable().unwrap());
        }
        let stats = db.durability_stats();
        assert_eq!(stats.checkpoints, 1);
        assert!(stats.checkpoint_bytes > 1500 * 40, "{stats:?}");
        assert_eq!(stats.log_bytes, 0, "the cpr mode writes no log");
        // After the checkpoint: overwrite, delete and add.
        let mut worker = db.worker().unwrap();
        let mut later = Vec::new();
        for n in (0..2000).step_by(5) {
            let ((), t) = worker.run(|tx| tx.put(table, &key(n), &[3; 40])).unwrap();
            model.insert(key(n).to_vec(), vec![3; 40]);
            later.push(t);
        }
        assert!(!later[0].is_durable().unwrap());
        // Dropping the last handle shuts the mode down with a last
        // checkpoint: these become durable too.
    }
    let db = Database::open(config(dir.path(), NEVER)).unwrap();
    let report = db.recovery_report().unwrap().clone();
    assert!(report.checkpoint_bytes > 0, "{report:?}");
    assert_eq!(report.log_bytes, 0);
    assert_eq!(row_map(&db, "t"), model);
    // Two sessions so far: worker 0 (2,000 + 286 commits) and worker 1
    // (400); the one `row_map` ran had no write.
    let sessions: HashMap<u64, u64> = report.sessions.iter().copied().collect();
    assert_eq!(
        sessions.get(&0),
        Some(&(2000 + 2000usize.div_ceil(7) as u64))
    );
    assert_eq!(sessions.get(&1), Some(&400));
}

#[test]
fn the_other_modes_and_cpr_refuse_each_others_directories() {
    let silor_dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(Config {
            durability: DurabilityKind::Silor,
            ..config(silor_dir.path(), NEVER)
        })
        .unwrap();
        db.create_table("t").unwrap();
    }
    let refused = |result: Result<Database, OpenError>, want: &str| match result {
        Err(OpenError::Durability(DurabilityError::Incompatible(message))) => {
            assert!(message.contains(want), "{message}")
        }
        Err(other) => panic!("expected Incompatible, got {other}"),
        Ok(_) => panic!("opened"),
    };
    refused(
        Database::open(config(silor_dir.path(), NEVER)),
        "log or silor mode",
    );
    let cpr_dir = tempfile::tempdir().unwrap();
    drop(Database::open(config(cpr_dir.path(), NEVER)).unwrap());
    for mode in [
        DurabilityKind::Silor,
        DurabilityKind::Log,
        DurabilityKind::Wal,
    ] {
        refused(
            Database::open(Config {
                durability: mode,
                ..config(cpr_dir.path(), NEVER)
            }),
            "--durability cpr",
        );
    }
    // And it still opens as what it is.
    drop(Database::open(config(cpr_dir.path(), NEVER)).unwrap());
}

#[test]
fn a_session_numbers_on_from_its_recovered_point() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(config(dir.path(), NEVER)).unwrap();
        let table = db.create_table("t").unwrap();
        let mut a = db.worker().unwrap();
        let mut b = db.worker().unwrap();
        for n in 0..5 {
            let _ = a.run(|tx| tx.put(table, &key(n), b"a")).unwrap();
        }
        for n in 0..3 {
            let _ = b.run(|tx| tx.put(table, &key(100 + n), b"b")).unwrap();
        }
    }
    let report = |db: &Database| db.recovery_report().unwrap().sessions.clone();
    {
        let db = Database::open(config(dir.path(), NEVER)).unwrap();
        assert_eq!(report(&db), vec![(0, 5), (1, 3)]);
        // Session 0 comes back and commits twice more; session 1 does not
        // come back: the next checkpoint keeps its point.
        let table = db.table("t").unwrap();
        let mut a = db.worker().unwrap();
        assert_eq!(a.id(), 0);
        for n in 0..2 {
            let _ = a.run(|tx| tx.put(table, &key(200 + n), b"a")).unwrap();
        }
    }
    let db = Database::open(config(dir.path(), NEVER)).unwrap();
    assert_eq!(report(&db), vec![(0, 7), (1, 3)]);
}

/// Keys a worker writes: `w * 1_000_000 + n % SLOTS`, value `n` (8
/// bytes). Enough slots that a checkpoint's scan takes a while, so many
/// writes replace values the scan has not reached yet (stable copies).
const SLOTS: u64 = 3000;

#[test]
fn power_loss_during_frequent_checkpoints_keeps_each_sessions_prefix() {
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
        // Per writer: its session id and the highest `n` acknowledged.
        let acked: Mutex<HashMap<u64, (u64, u64)>> = Mutex::new(HashMap::new());
        let stop = AtomicBool::new(false);
        let crashed = std::thread::scope(|s| {
            for w in 0..2u64 {
                let (db, stop, acked) = (&db, &stop, &acked);
                s.spawn(move || {
                    let mut worker = db.worker().unwrap();
                    let session = worker.id() as u64;
                    acked.lock().unwrap().insert(w, (session, 0));
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
                                let e = &mut acked.get_mut(&w).unwrap().1;
                                *e = (*e).max(*m + 1);
                                false
                            }
                            _ => true,
                        });
                    }
                    // Idle from here on: holds nothing back.
                    worker.quiesce();
                });
            }
            power_loss_after(&storage, &mut rng, 5_000..60_000, &stop)
        });
        checkpoints_total += db.durability_stats().checkpoints;
        drop(db);
        let db = Database::open(sim(&crashed)).unwrap();
        let recovered = row_map(&db, "t");
        let sessions: HashMap<u64, u64> = db
            .recovery_report()
            .unwrap()
            .sessions
            .iter()
            .copied()
            .collect();
        let acked = acked.into_inner().unwrap();
        for w in 0..2u64 {
            // The recovered state of writer w must be exactly the state
            // after its first `count` commits, for some count ≥ acked, and
            // `count` must be its session's CPR point.
            let values: Vec<u64> = (0..SLOTS)
                .filter_map(|slot| recovered.get(&key(w * 1_000_000 + slot)[..]))
                .map(|v| u64::from_le_bytes(v[..].try_into().unwrap()))
                .collect();
            let count = values.iter().max().map_or(0, |m| m + 1);
            let (session, acked_w) = acked[&w];
            acked_total += acked_w;
            assert!(
                count >= acked_w,
                "seed {seed} writer {w}: {count} commits recovered, {acked_w} acknowledged"
            );
            assert_eq!(
                sessions.get(&session).copied().unwrap_or(0),
                count,
                "seed {seed} writer {w}: the CPR point of session {session}"
            );
            assert_slots_hold_prefix(
                &recovered,
                w,
                count,
                SLOTS,
                &format!("seed {seed} writer {w}"),
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

const ACCOUNTS: u64 = 64;
const OPENING: u64 = 100;

// The bank: money moves between accounts; an emptied account is deleted
// (absent reads as 0) and comes back when paid. Transfers touch two keys at
// once, so a checkpoint that mixed versions would break the total.
#[test]
fn checkpoints_under_concurrent_transfers_keep_the_total() {
    for seed in 0..8u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let storage = SimStorage::new(seed);
        let sim = |s: &SimStorage| Config {
            storage: Some(Arc::new(s.clone()) as Arc<dyn Storage>),
            ..config(Path::new("/bank"), Duration::from_millis(2))
        };
        let db = Database::open(sim(&storage)).unwrap();
        let table = db.create_table("accounts").unwrap();
        {
            let mut worker = db.worker().unwrap();
            let ((), ticket) = worker
                .run(|tx| {
                    for a in 0..ACCOUNTS {
                        tx.put(table, &key(a), &OPENING.to_le_bytes())?;
                    }
                    Ok(())
                })
                .unwrap();
            drop(worker);
            db.checkpoint().unwrap();
            assert!(ticket.is_durable().unwrap());
        }
        let stop = AtomicBool::new(false);
        let crashed = std::thread::scope(|s| {
            for w in 0..2u64 {
                let (db, stop) = (&db, &stop);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 10 + w);
                    let mut worker = db.worker().unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        let from = rng.gen_range(0..ACCOUNTS);
                        let to = (from + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
                        let want = rng.gen_range(1..=OPENING);
                        let result = worker.run(|tx| {
                            let balance = |v: Option<&[u8]>| {
                                v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
                            };
                            let have = balance(tx.get(table, &key(from))?);
                            let paid = balance(tx.get(table, &key(to))?);
                            let amount = want.min(have);
                            if amount == 0 {
                                return Ok(());
                            }
                            if have == amount {
                                tx.delete(table, &key(from))?;
                            } else {
                                tx.put(table, &key(from), &(have - amount).to_le_bytes())?;
                            }
                            tx.put(table, &key(to), &(paid + amount).to_le_bytes())
                        });
                        if result.is_err() {
                            break;
                        }
                    }
                    worker.quiesce();
                });
            }
            power_loss_after(&storage, &mut rng, 10_000..80_000, &stop)
        });
        let installed = db.durability_stats().checkpoints;
        drop(db);
        let db = Database::open(sim(&crashed)).unwrap();
        let total: u64 = row_map(&db, "accounts")
            .values()
            .map(|v| u64::from_le_bytes(v[..].try_into().unwrap()))
            .sum();
        assert_eq!(
            total,
            ACCOUNTS * OPENING,
            "seed {seed}: the recovered accounts do not add up ({installed} checkpoints installed)"
        );
    }
}
