//! Why this file exists: in REST, an update of a record below safe
//! read-only appends a copy to the tail without `execute`
//! (`Session::copy_source` and `Session::append_copy`, FASTER's
//! read-copy-update, cpr-sigmod19 §5.1). The copy must build on the newest
//! value and enter the chain only by a CAS of the entry it read: two
//! sessions copying the same record at once must not both win, or one
//! update is lost. Here the mutable region is a small part of the data, so
//! nearly every update copies, and the results are checked against what
//! was issued: exact counter sums from two threads, and a single-threaded
//! model of upserts of several value sizes (one past the RMW copy's
//! 64-byte stack buffer), with the prefetch hints given before each
//! operation.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{AddU64, Config, Session, ShiftMode, SimStorage, Status, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;

fn config() -> Config {
    common::mostly_copies_config(ShiftMode::Fine)
}

fn open() -> Store<AddU64> {
    Store::open(
        Arc::new(SimStorage::new(7)),
        Path::new("/db"),
        config(),
        AddU64,
    )
    .unwrap()
}

fn read(session: &mut Session<AddU64>, key: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match session.read(&key.to_le_bytes(), &mut out).unwrap() {
        Status::Ok => Some(out),
        Status::NotFound => None,
        Status::Pending => {
            let done = session.complete_pending(true).unwrap();
            assert_eq!(done.len(), 1);
            match done[0].status {
                Status::Ok => done[0].value.clone(),
                _ => None,
            }
        }
    }
}

#[test]
fn concurrent_copies_lose_no_increment() {
    const KEYS: u64 = 1_000;
    const PER_THREAD: usize = 40_000;
    let store = Arc::new(open());
    let tail_before = store.addresses().tail;
    let counts: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                let store = store.clone();
                scope.spawn(move || {
                    let mut session = store.start_session().unwrap();
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut counts = vec![0u64; KEYS as usize];
                    for i in 0..PER_THREAD {
                        // Most of the keys, plus a few hot ones both
                        // threads copy at the same moment.
                        let key = if i % 4 == 0 {
                            rng.gen_range(0..4)
                        } else {
                            rng.gen_range(0..KEYS)
                        };
                        session.rmw(&key.to_le_bytes(), 1).unwrap();
                        counts[key as usize] += 1;
                        if i % 256 == 0 {
                            session.complete_pending(false).unwrap();
                        }
                    }
                    session.complete_pending(true).unwrap();
                    counts
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut session = store.start_session().unwrap();
    for key in 0..KEYS {
        let expected = counts[0][key as usize] + counts[1][key as usize];
        let got =
            read(&mut session, key).map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()));
        assert_eq!(got, expected, "key {key}");
    }
    // Many increments were copies (12,000–33,000 of the 80,000 in runs
    // here, depending on how the threads interleave).
    let appended = (store.addresses().tail - tail_before) / 32;
    assert!(
        appended > 5_000,
        "only {appended} records appended: the updates did not copy"
    );
}

#[test]
fn copied_upserts_of_every_size_match_a_model() {
    const KEYS: u64 = 600;
    let store = open();
    let tail_before = store.addresses().tail;
    let mut session = store.start_session().unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    for i in 0..20_000u64 {
        let key = rng.gen_range(0..KEYS);
        // The prefetch hints change nothing, whether the key is absent,
        // in memory or evicted (a key past the others is never written).
        session.prefetch_bucket(&(key + 1).to_le_bytes());
        session.prefetch_record(&key.to_le_bytes());
        session.prefetch_record(&(KEYS + 1).to_le_bytes());
        match rng.gen_range(0..10) {
            0..=5 => {
                // 8 bytes (the one-word case), 24, and 100 (past the RMW
                // copy's stack buffer); a length change is a copy too.
                let len = [8usize, 24, 100][rng.gen_range(0..3)];
                let value: Vec<u8> = (0..len).map(|b| (i as u8).wrapping_add(b as u8)).collect();
                let status = session.upsert(&key.to_le_bytes(), &value).unwrap();
                assert_ne!(status, Status::NotFound);
                model.insert(key, value);
                if status == Status::Pending {
                    // A pending update may finish after a later one of the
                    // same key: finish it now, so the model is exact.
                    session.complete_pending(true).unwrap();
                }
            }
            6..=8 => {
                // AddU64 adds to the first word and keeps 8 bytes: a
                // 24-byte value is copied through the stack buffer, a
                // 100-byte one by `execute`.
                let status = session.rmw(&key.to_le_bytes(), 3).unwrap();
                assert_ne!(status, Status::NotFound);
                if status == Status::Pending {
                    session.complete_pending(true).unwrap();
                }
                let new = model
                    .get(&key)
                    .map_or(3, |v| u64::from_le_bytes(v[..8].try_into().unwrap()) + 3);
                model.insert(key, new.to_le_bytes().to_vec());
            }
            _ => {
                assert_eq!(
                    read(&mut session, key),
                    model.get(&key).cloned(),
                    "key {key}"
                );
            }
        }
    }
    assert!(
        store.addresses().tail - tail_before > 10_000 * 32,
        "the updates did not copy"
    );
    for key in 0..KEYS {
        assert_eq!(
            read(&mut session, key),
            model.get(&key).cloned(),
            "key {key}"
        );
    }
}
