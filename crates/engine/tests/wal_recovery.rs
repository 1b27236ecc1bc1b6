//! The `wal` mode end to end: acknowledged commits survive a reopen (on
//! real files and across simulated power loss), the bank-transfer total is
//! intact after recovery, large transactions split over several log
//! entries recover whole, read-only tickets wait for what they read, and
//! I/O errors fail-stop.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{count_with_tag, key, power_loss_after, rows, write_batch};
use epochdb_engine::{Config, Database, DurabilityKind, OpenError, Ticket, WalOptions};
use epochdb_storage::{CrashMode, FaultKind, FaultOp, SimStorage, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Small log buffer and files so rotation and splitting happen in tests.
fn small_wal() -> WalOptions {
    WalOptions {
        io_unit_bytes: 4 << 10,
        buffer_bytes: 64 << 10,
        hop_shift: 12,
        file_max_bytes: 48 << 10,
        ..WalOptions::default()
    }
}

fn config(dir: &Path) -> Config {
    Config {
        durability: DurabilityKind::Wal,
        dirs: vec![dir.to_path_buf()],
        epoch_interval: Duration::from_millis(5),
        wal: small_wal(),
        ..Config::default()
    }
}

fn sim_config(storage: &SimStorage) -> Config {
    Config {
        storage: Some(Arc::new(storage.clone()) as Arc<dyn Storage>),
        ..config(Path::new("/db"))
    }
}

#[test]
fn acknowledged_commits_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(config(dir.path())).unwrap();
        assert_eq!(db.durability_name(), "wal");
        write_batch(&db, 0, 500, 1);
        assert!(db.durability_stats().log_bytes > 500 * 40);
    }
    let db = Database::open(config(dir.path())).unwrap();
    let report = db.recovery_report().unwrap().clone();
    assert_eq!(report.records, 500, "{report:?}");
    assert_eq!(report.log_entries, 500, "{report:?}");
    assert_eq!(count_with_tag(&db, 1), (500, 500));
    write_batch(&db, 0, 250, 2);
    let table = db.table("t").unwrap();
    let mut worker = db.worker().unwrap();
    let ((), ticket) = worker
        .run(|tx| {
            for n in 400..450 {
                tx.delete(table, &key(n))?;
            }
            Ok(())
        })
        .unwrap();
    ticket.wait().unwrap();
    drop(worker);
    drop(db);
    let db = Database::open(config(dir.path())).unwrap();
    assert_eq!(count_with_tag(&db, 2), (450, 250));
    assert_eq!(count_with_tag(&db, 1).1, 200);
    // New commits after recovery order after the recovered ones.
    write_batch(&db, 0, 10, 3);
    drop(db);
    let db = Database::open(config(dir.path())).unwrap();
    assert_eq!(count_with_tag(&db, 3).1, 10);
    // More than one log file was written and read back.
    let files = std::fs::read_dir(dir.path().join("wal")).unwrap().count();
    assert!(files > 2, "{files} files in wal/");
}

#[test]
fn a_transaction_larger_than_a_log_entry_is_split_and_recovered_whole() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(config(dir.path())).unwrap();
        let table = db.create_table("big").unwrap();
        let mut worker = db.worker().unwrap();
        // 300 KiB of redo against a 64 KiB log buffer (16 KiB per part).
        let ((), ticket) = worker
            .run(|tx| {
                for n in 0..300 {
                    tx.put(table, &key(n), &[7u8; 1024])?;
                }
                Ok(())
            })
            .unwrap();
        ticket.wait().unwrap();
    }
    let db = Database::open(config(dir.path())).unwrap();
    let rows = rows(&db, "big");
    assert_eq!(rows.len(), 300);
    assert!(rows.iter().all(|(_, v)| *v == [7u8; 1024]));
    assert_eq!(db.recovery_report().unwrap().log_entries, 1);
}

/// A crash while a split transaction's parts are being logged: parts whose
/// COMMIT entry never became durable must not be applied. Every
/// transaction rewrites all of its keys with one generation number, so a
/// recovery that applied a part alone leaves mixed generations.
#[test]
fn a_split_transaction_cut_by_a_crash_is_dropped_whole() {
    const KEYS: u64 = 200;
    let mut dropped_total = 0;
    for seed in 0..8u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let storage = SimStorage::new(seed);
        let db = Database::open(sim_config(&storage)).unwrap();
        let table = db.create_table("t").unwrap();
        let stop = AtomicBool::new(false);
        let acked = Mutex::new(0u16);
        let crashed = std::thread::scope(|s| {
            let (db, stop, acked) = (&db, &stop, &acked);
            s.spawn(move || {
                let mut worker = db.worker().unwrap();
                for generation in 1u16.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let value = [generation.to_le_bytes(); 512].concat();
                    let Ok(((), ticket)) = worker.run(|tx| {
                        for n in 0..KEYS {
                            tx.put(table, &key(n), &value)?;
                        }
                        Ok(())
                    }) else {
                        break;
                    };
                    if ticket.wait().is_err() {
                        break;
                    }
                    *acked.lock().unwrap() = generation;
                }
            });
            power_loss_after(&storage, &mut rng, 2_000..40_000, stop)
        });
        drop(db);
        let acked = acked.into_inner().unwrap();
        // One recovery thread (the reader applies) and three (a reader and
        // two replayers), in turn.
        let mut config = sim_config(&crashed);
        config.silor.recovery_threads = if seed % 2 == 0 { 1 } else { 3 };
        let db = Database::open(config).unwrap();
        dropped_total += db.recovery_report().unwrap().dropped_blocks;
        let generations: Vec<u16> = match db.table("t") {
            Some(_) => rows(&db, "t")
                .iter()
                .map(|(_, v)| u16::from_le_bytes([v[0], v[1]]))
                .collect(),
            None => Vec::new(),
        };
        if generations.is_empty() {
            assert_eq!(
                acked, 0,
                "seed {seed}: acknowledged generation {acked} lost"
            );
            continue;
        }
        assert_eq!(generations.len() as u64, KEYS, "seed {seed}");
        assert!(
            generations.iter().all(|g| *g == generations[0]),
            "seed {seed}: a torn transaction was applied: {generations:?}"
        );
        assert!(
            generations[0] >= acked,
            "seed {seed}: lost generation {acked}"
        );
    }
    assert!(
        dropped_total > 0,
        "no crash landed inside a split transaction: the test checked nothing"
    );
}

#[test]
fn wrong_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut two = config(dir.path());
    two.dirs.push(dir.path().join("b"));
    assert!(matches!(Database::open(two), Err(OpenError::Config(_))));
    drop(Database::open(config(dir.path())).unwrap());
    let silor = Config {
        durability: DurabilityKind::Silor,
        ..config(dir.path())
    };
    let err = Database::open(silor).unwrap_err().to_string();
    assert!(err.contains("wal mode"), "{err}");

    let other = tempfile::tempdir().unwrap();
    drop(
        Database::open(Config {
            durability: DurabilityKind::Log,
            ..config(other.path())
        })
        .unwrap(),
    );
    let err = Database::open(config(other.path()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("log or silor"), "{err}");
}

const ACCOUNTS: u64 = 32;
const INITIAL: u64 = 1_000;

fn balance(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte balance"))
}

fn load_accounts(db: &Database) {
    let accounts = db.create_table("accounts").unwrap();
    let mut loader = db.worker().unwrap();
    let ((), ticket) = loader
        .run(|tx| {
            for a in 0..ACCOUNTS {
                tx.insert(accounts, &key(a), &INITIAL.to_le_bytes())?;
            }
            Ok(())
        })
        .unwrap();
    ticket.wait().unwrap();
}

/// Transfers between random accounts until `stop` or a durability error.
fn transfer(db: &Database, seed: u64, stop: &AtomicBool) {
    let accounts = db.table("accounts").unwrap();
    let Ok(mut worker) = db.worker() else { return };
    let mut rng = SmallRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let (from, to) = (rng.gen_range(0..ACCOUNTS), rng.gen_range(0..ACCOUNTS));
        if from == to {
            continue;
        }
        let amount = rng.gen_range(1..50u64);
        let result = worker.run(|tx| {
            let a = balance(tx.get(accounts, &key(from))?.expect("account"));
            let b = balance(tx.get(accounts, &key(to))?.expect("account"));
            if a < amount {
                return tx.abort();
            }
            tx.put(accounts, &key(from), &(a - amount).to_le_bytes())?;
            tx.put(accounts, &key(to), &(b + amount).to_le_bytes())?;
            Ok(())
        });
        if matches!(result, Err(epochdb_engine::TxError::Durability(_))) {
            return;
        }
    }
}

fn total(db: &Database) -> u64 {
    let rows = rows(db, "accounts");
    assert_eq!(rows.len() as u64, ACCOUNTS);
    rows.iter().map(|(_, v)| balance(v)).sum()
}

#[test]
fn bank_total_survives_reopen_and_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(config(dir.path())).unwrap();
        load_accounts(&db);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for seed in 0..3 {
                let (db, stop) = (&db, &stop);
                s.spawn(move || transfer(db, seed, stop));
            }
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Relaxed);
        });
    }
    let db = Database::open(config(dir.path())).unwrap();
    assert!(db.recovery_report().unwrap().log_entries > 10);
    assert_eq!(total(&db), ACCOUNTS * INITIAL);
    drop(db);

    // Power loss in the middle of the transfers, on a simulated disk.
    for seed in 0..8 {
        let storage = SimStorage::new(seed);
        let db = Database::open(sim_config(&storage)).unwrap();
        load_accounts(&db);
        let stop = AtomicBool::new(false);
        let crashed = std::thread::scope(|s| {
            for w in 0..2 {
                let (db, stop) = (&db, &stop);
                s.spawn(move || transfer(db, seed * 10 + w, stop));
            }
            std::thread::sleep(Duration::from_millis(5 + seed * 7));
            let mode = if seed % 2 == 0 {
                CrashMode::DropUnsynced
            } else {
                CrashMode::TearUnsynced
            };
            let crashed = storage.crash(mode);
            stop.store(true, Ordering::Relaxed);
            crashed
        });
        drop(db);
        let db = Database::open(sim_config(&crashed)).unwrap();
        assert_eq!(total(&db), ACCOUNTS * INITIAL, "seed {seed}");
    }
}

#[test]
fn every_acknowledged_commit_survives_simulated_crashes() {
    let mut acked_total = 0;
    for seed in 0..12u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let storage = SimStorage::new(seed);
        let acked: Mutex<HashMap<u64, u8>> = Mutex::new(HashMap::new());
        let db = Database::open(sim_config(&storage)).unwrap();
        let table = db.create_table("t").unwrap();
        let stop = AtomicBool::new(false);
        let crashed = std::thread::scope(|s| {
            for w in 0..2u64 {
                let (db, stop, acked) = (&db, &stop, &acked);
                s.spawn(move || {
                    let mut worker = db.worker().unwrap();
                    let mut pending: Vec<(u64, u8, Ticket)> = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let k = w * 1_000_000 + n;
                        let v = (n % 251) as u8;
                        n += 1;
                        let Ok(((), ticket)) = worker.run(|tx| {
                            tx.put(table, &key(k), &[v; 16])?;
                            Ok(())
                        }) else {
                            break;
                        };
                        pending.push((k, v, ticket));
                        pending.retain(|(k, v, t)| match t.is_durable() {
                            Ok(true) => {
                                acked.lock().unwrap().insert(*k, *v);
                                false
                            }
                            _ => true,
                        });
                    }
                });
            }
            power_loss_after(&storage, &mut rng, 1_000..30_000, &stop)
        });
        drop(db);
        let db = Database::open(sim_config(&crashed)).unwrap();
        let recovered: HashMap<Vec<u8>, Vec<u8>> = rows(&db, "t").into_iter().collect();
        let acked = acked.into_inner().unwrap();
        acked_total += acked.len();
        for (k, v) in &acked {
            assert_eq!(
                recovered.get(&key(*k)[..]),
                Some(&vec![*v; 16]),
                "seed {seed}: acknowledged key {k} lost"
            );
        }
        // Per worker the recovered keys are a prefix (LSN order within a
        // worker is commit order).
        for w in 0..2u64 {
            let mine: Vec<u64> = recovered
                .keys()
                .map(|k| u64::from_be_bytes(k[..].try_into().unwrap()))
                .filter(|k| k / 1_000_000 == w)
                .map(|k| k % 1_000_000)
                .collect();
            let max = mine.iter().max().map_or(0, |m| m + 1);
            assert_eq!(mine.len() as u64, max, "seed {seed} worker {w}: hole");
        }
    }
    assert!(
        acked_total > 100,
        "only {acked_total} commits were acknowledged"
    );
}

#[test]
fn sync_error_fails_stop_and_read_only_tickets_wait_for_their_reads() {
    let storage = SimStorage::new(3);
    let db = Database::open(sim_config(&storage)).unwrap();
    let table = db.create_table("t").unwrap();
    let mut worker = db.worker().unwrap();
    let ((), ticket) = worker
        .run(|tx| {
            tx.put(table, b"safe", b"1")?;
            Ok(())
        })
        .unwrap();
    ticket.wait().unwrap();
    // A read-only transaction over durable data resolves.
    let (_, ro) = worker
        .run(|tx| Ok(tx.get(table, b"safe")?.is_some()))
        .unwrap();
    assert!(ro.wait_timeout(Duration::from_secs(5)).unwrap());

    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    let ((), lost) = worker
        .run(|tx| {
            tx.put(table, b"lost", b"2")?;
            Ok(())
        })
        .unwrap();
    assert!(
        lost.wait().is_err(),
        "a commit whose sync failed was acknowledged"
    );
    // A reader of the unacknowledged write is never told it is durable.
    let (seen, reader) = worker
        .run(|tx| Ok(tx.get(table, b"lost")?.is_some()))
        .unwrap();
    assert!(seen);
    assert!(reader.wait().is_err());
    // Later commits fail at once.
    let later = worker.run(|tx| {
        tx.put(table, b"later", b"3")?;
        Ok(())
    });
    match later {
        Ok(((), t)) => assert!(t.wait().is_err()),
        Err(e) => assert!(matches!(e, epochdb_engine::TxError::Durability(_)), "{e}"),
    }
    drop(worker);
    drop(db);
    storage.clear_faults();
    let db = Database::open(sim_config(&storage.crash(CrashMode::DropUnsynced))).unwrap();
    let keys: Vec<Vec<u8>> = rows(&db, "t").into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&b"safe".to_vec()), "{keys:?}");
    assert!(!keys.contains(&b"later".to_vec()), "{keys:?}");
}
