//! Why this exists: point reads go through a hash index beside the B+-tree
//! (`Config::point_index`), which must never hand out a record the tree no
//! longer holds. Accounts hop between key slots — a delete of one short key
//! and an insert of another in one transaction, so records are unlinked and
//! keys re-inserted all the time — while transfers and audits find them by
//! point reads only. Every committed audit must see each account exactly
//! once and the initial total. Once on a fresh database (the index filled
//! by inserts) and once on a recovered one (recovery fills the tree alone;
//! reads fill the index).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use epochdb_engine::{Config, Database, DurabilityKind, PointIndexes, TableId, Transaction};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const SLOTS: u64 = 48;
const ACCOUNTS: u64 = 16;
const INITIAL: u64 = 1_000;

fn key(slot: u64) -> [u8; 4] {
    (slot as u32).to_be_bytes()
}

/// A slot's value: the account in it and its balance.
fn encode(account: u64, balance: u64) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&account.to_le_bytes());
    value[8..].copy_from_slice(&balance.to_le_bytes());
    value
}

fn decode(bytes: &[u8]) -> (u64, u64) {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    (word(0), word(8))
}

/// Every slot by point read: `(slot, account, balance)` of the occupied ones.
fn occupied(
    tx: &mut Transaction<'_>,
    table: TableId,
) -> Result<Vec<(u64, u64, u64)>, epochdb_engine::Abort> {
    let mut found = Vec::new();
    for slot in 0..SLOTS {
        if let Some(value) = tx.get(table, &key(slot))? {
            let (account, balance) = decode(value);
            found.push((slot, account, balance));
        }
    }
    Ok(found)
}

fn config(point_index: PointIndexes) -> Config {
    Config {
        epoch_interval: Duration::from_millis(2),
        point_index,
        ..Config::default()
    }
}

/// Opens `config`'s database and puts the accounts in their first slots.
fn loaded(config: Config) -> (Database, TableId) {
    let db = Database::open(config).unwrap();
    let table = db.create_table("slots").unwrap();
    let mut loader = db.worker().unwrap();
    let _ticket = loader
        .run(|tx| {
            for account in 0..ACCOUNTS {
                tx.insert(table, &key(account * 3), &encode(account, INITIAL))?;
            }
            Ok(())
        })
        .unwrap();
    (db, table)
}

fn run((db, table): (Database, TableId)) -> (u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (moves, audits) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut threads = Vec::new();
    for seed in 0..3u64 {
        let (db, stop, moves) = (db.clone(), stop.clone(), moves.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            let mut rng = SmallRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let (pick, amount, hop) =
                    (rng.gen::<u64>(), rng.gen_range(1..50u64), rng.gen_bool(0.5));
                let result = worker.run(|tx| {
                    let found = occupied(tx, table)?;
                    let n = found.len() as u64;
                    if n < 2 {
                        return tx.abort(); // an inconsistent view: validation would fail
                    }
                    let (slot, account, balance) = found[(pick % n) as usize];
                    if hop {
                        // Move the account to a free slot.
                        let free: Vec<u64> = (0..SLOTS)
                            .filter(|s| found.iter().all(|f| f.0 != *s))
                            .collect();
                        let to = free[(pick / n) as usize % free.len()];
                        tx.delete(table, &key(slot))?;
                        tx.insert(table, &key(to), &encode(account, balance))?;
                    } else {
                        let (other, other_account, other_balance) =
                            found[((pick / n) % n) as usize];
                        if other == slot || balance < amount {
                            return tx.abort();
                        }
                        tx.put(table, &key(slot), &encode(account, balance - amount))?;
                        tx.put(
                            table,
                            &key(other),
                            &encode(other_account, other_balance + amount),
                        )?;
                    }
                    Ok(())
                });
                if result.is_ok() && hop {
                    moves.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    {
        let (db, stop, audits) = (db.clone(), stop.clone(), audits.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Ok((found, _ticket)) = worker.run(|tx| occupied(tx, table)) {
                    let mut accounts: Vec<u64> = found.iter().map(|f| f.1).collect();
                    accounts.sort_unstable();
                    assert_eq!(accounts, (0..ACCOUNTS).collect::<Vec<_>>(), "{found:?}");
                    let total: u64 = found.iter().map(|f| f.2).sum();
                    assert_eq!(total, ACCOUNTS * INITIAL, "{found:?}");
                    audits.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    // A stale entry in the point index makes a reader retry forever on an
    // unlinked record: fail instead of hanging.
    let deadline = Instant::now() + Duration::from_secs(30);
    while threads.iter().any(|t| !t.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "a worker hung for 30 s after the stop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for thread in threads {
        thread.join().expect("a thread panicked");
    }
    (
        moves.load(Ordering::Relaxed),
        audits.load(Ordering::Relaxed),
    )
}

#[test]
fn accounts_hopping_between_keys_are_seen_once_by_point_reads() {
    let (moves, audits) = run(loaded(config(PointIndexes::All)));
    assert!(moves > 100, "only {moves} moves committed");
    assert!(audits > 10, "only {audits} audits committed");
}

#[test]
fn the_same_holds_through_the_tree_alone() {
    let (moves, audits) = run(loaded(config(PointIndexes::None)));
    assert!(moves > 100 && audits > 10, "{moves} moves, {audits} audits");
}

#[test]
fn the_same_holds_after_recovery_with_the_index_filled_by_reads() {
    let dir = tempfile::tempdir().unwrap();
    let durable = Config {
        durability: DurabilityKind::Silor,
        dirs: vec![dir.path().to_path_buf()],
        ..config(PointIndexes::All)
    };
    // Dropping the database makes the load durable.
    drop(loaded(durable.clone()));
    let db = Database::open(durable).unwrap();
    let table = db.table("slots").expect("recovered");
    let (moves, audits) = run((db, table));
    assert!(moves > 100 && audits > 10, "{moves} moves, {audits} audits");
}
