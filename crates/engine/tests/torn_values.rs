//! Why this exists: values are overwritten in place (Silo's layout) and
//! readers copy them out optimistically. A reader must never return a value
//! mixing two writes, whether the new value fits the old space or needs a
//! larger block. Every value written here is self-describing (`n` copies of
//! the byte `n`), so any torn read is visible.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::{Config, Database};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const KEYS: u64 = 8;

#[test]
fn reads_never_mix_two_writes() {
    let db = Database::open(Config {
        epoch_interval: Duration::from_millis(2),
        ..Config::default()
    })
    .unwrap();
    let t = db.create_table("t").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for seed in 0..2u64 {
        let (db, stop) = (db.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            let mut rng = SmallRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let key = rng.gen_range(0..KEYS).to_be_bytes();
                let n: u8 = rng.gen_range(1..=250);
                let _ticket = worker
                    .run(|tx| tx.put(t, &key, &vec![n; n as usize]))
                    .unwrap();
            }
        }));
    }
    {
        let (db, stop, reads) = (db.clone(), stop.clone(), reads.clone());
        threads.push(std::thread::spawn(move || {
            let mut worker = db.worker().unwrap();
            let mut rng = SmallRng::seed_from_u64(99);
            while !stop.load(Ordering::Relaxed) {
                let key = rng.gen_range(0..KEYS).to_be_bytes();
                let _ticket = worker
                    .run(|tx| {
                        if let Some(value) = tx.get(t, &key)? {
                            let n = value.len();
                            assert!(n > 0, "empty value");
                            assert!(
                                value.iter().all(|&b| b as usize == n),
                                "torn value of {n} bytes"
                            );
                        }
                        Ok(())
                    })
                    .unwrap();
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(1200));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(reads.load(Ordering::Relaxed) > 1000);
}
