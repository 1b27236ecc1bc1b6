//! Why this exists: serializability under contention. Workers move money
//! between accounts while auditors sum every balance in read-only
//! transactions; every committed audit must see exactly the initial total.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::{Config, Database};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const ACCOUNTS: u64 = 64;
const INITIAL: u64 = 1_000;

fn key(account: u64) -> [u8; 8] {
    account.to_be_bytes()
}

fn balance(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte balance"))
}

#[test]
fn transfers_preserve_the_total_seen_by_concurrent_audits() {
    let db = Database::open(Config {
        epoch_interval: Duration::from_millis(5),
        ..Config::default()
    })
    .unwrap();
    let accounts = db.create_table("accounts").unwrap();
    let mut loader = db.worker().unwrap();
    let _ticket = loader
        .run(|tx| {
            for a in 0..ACCOUNTS {
                tx.insert(accounts, &key(a), &INITIAL.to_le_bytes())?;
            }
            Ok(())
        })
        .unwrap();
    drop(loader);

    let stop = Arc::new(AtomicBool::new(false));
    let audits = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for seed in 0..3u64 {
        let (db, stop) = (db.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut transfers = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (from, to) = (rng.gen_range(0..ACCOUNTS), rng.gen_range(0..ACCOUNTS));
                let amount = rng.gen_range(1..50u64);
                let result = worker.run(|tx| {
                    let a = balance(tx.get(accounts, &key(from))?.expect("account"));
                    if a < amount {
                        return tx.abort();
                    }
                    let b = if from == to {
                        a - amount
                    } else {
                        balance(tx.get(accounts, &key(to))?.expect("account"))
                    };
                    tx.put(accounts, &key(from), &(a - amount).to_le_bytes())?;
                    tx.put(accounts, &key(to), &(b + amount).to_le_bytes())?;
                    Ok(())
                });
                if result.is_ok() {
                    transfers += 1;
                }
            }
            transfers
        }));
    }
    for mode in 0..2u64 {
        let (db, stop, audits) = (db.clone(), stop.clone(), audits.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            while !stop.load(Ordering::Relaxed) {
                let (total, _) = worker
                    .run(|tx| {
                        let mut total = 0u64;
                        if mode == 0 {
                            for a in 0..ACCOUNTS {
                                total += balance(tx.get(accounts, &key(a))?.expect("account"));
                            }
                        } else {
                            tx.scan(
                                accounts,
                                Bound::Unbounded,
                                Bound::Unbounded,
                                usize::MAX,
                                |_, v| {
                                    total += balance(v);
                                    true
                                },
                            )?;
                        }
                        Ok(total)
                    })
                    .unwrap();
                assert_eq!(
                    total,
                    ACCOUNTS * INITIAL,
                    "an audit saw money appear or vanish"
                );
                audits.fetch_add(1, Ordering::Relaxed);
            }
            0
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let transfers: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(transfers > 100, "too few transfers committed: {transfers}");
    assert!(audits.load(Ordering::Relaxed) > 10, "too few audits");
}
