//! Why this exists: phantom protection. Writers insert and delete keys in a
//! range and keep a counter record equal to the number of keys there, in
//! the same transaction. Readers scan the range and read the counter; a
//! committed reader that sees a count different from its scan saw a phantom.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::{Config, Database};
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn item(n: u64) -> Vec<u8> {
    let mut key = b"item/".to_vec();
    key.extend_from_slice(&n.to_be_bytes());
    key
}

fn count(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().unwrap())
}

#[test]
fn scans_never_see_phantoms() {
    let db = Database::open(Config {
        epoch_interval: Duration::from_millis(5),
        ..Config::default()
    })
    .unwrap();
    let t = db.create_table("items").unwrap();
    let _ticket = db
        .worker()
        .unwrap()
        .run(|tx| tx.put(t, b"count", &0u64.to_le_bytes()))
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for seed in 0..2u64 {
        let (db, stop) = (db.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            let mut rng = SmallRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let n = rng.gen_range(0..40u64);
                let _ticket = worker
                    .run(|tx| {
                        let c = count(tx.get(t, b"count")?.unwrap());
                        // OCC bodies may see inconsistent states; validation
                        // aborts them, so no assertion belongs here.
                        let c = if tx.get(t, &item(n))?.is_some() {
                            c - u64::from(tx.delete(t, &item(n))?)
                        } else {
                            c + u64::from(tx.insert(t, &item(n), &n.to_le_bytes())?)
                        };
                        tx.put(t, b"count", &c.to_le_bytes())
                    })
                    .unwrap();
            }
        }));
    }
    for limit in [usize::MAX, 5] {
        let (db, stop, checks) = (db.clone(), stop.clone(), checks.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            while !stop.load(Ordering::Relaxed) {
                let ((scanned, counted), _) = worker
                    .run(|tx| {
                        let lo = b"item/".as_slice();
                        let hi = b"item0".as_slice();
                        let mut keys = 0u64;
                        tx.scan(
                            t,
                            Bound::Included(lo),
                            Bound::Excluded(hi),
                            limit,
                            |_, _| {
                                keys += 1;
                                true
                            },
                        )?;
                        let c = count(tx.get(t, b"count")?.unwrap());
                        Ok((keys, c))
                    })
                    .unwrap();
                if limit == usize::MAX {
                    assert_eq!(scanned, counted, "a scan saw a phantom");
                } else {
                    assert_eq!(
                        scanned,
                        counted.min(limit as u64),
                        "a limited scan is wrong"
                    );
                }
                checks.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(checks.load(Ordering::Relaxed) > 10);
}
