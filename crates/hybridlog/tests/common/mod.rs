//! What the crash tests share: reading every counter back after recovery.

use std::sync::atomic::{AtomicBool, Ordering};

use epochdb_hybridlog::{Config, Functions, ShiftMode, Status, Store};

/// Counters `0..keys` of `store` (8-byte little-endian values; 0 where a
/// key is absent), read in one session, from disk where they are there.
#[allow(dead_code)] // not every test file that shares this module uses it
pub(crate) fn read_counters<F: Functions>(store: &Store<F>, keys: u64) -> Vec<u64> {
    let counter = |bytes: &[u8]| u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let mut session = store.start_session().unwrap();
    let mut counters = vec![0; keys as usize];
    let mut value = Vec::new();
    let mut waiting = Vec::new();
    for key in 0..keys {
        match session.read(&key.to_le_bytes(), &mut value).unwrap() {
            Status::Ok => counters[key as usize] = counter(&value),
            Status::NotFound => {}
            Status::Pending => waiting.push((session.serial(), key)),
        }
    }
    for done in session.complete_pending(true).unwrap() {
        let key = waiting.iter().find(|(s, _)| *s == done.serial).unwrap().1;
        counters[key as usize] = done.value.map_or(0, |v| counter(&v));
    }
    counters
}

/// A store where nearly every update copies: 64 frames of 4 KiB, 5% of
/// them mutable (about 100 records of 32 bytes at a time, against the
/// tests' 1,000 keys).
#[allow(dead_code)] // not every test file that shares this module uses it
pub(crate) fn mostly_copies_config(shift_mode: ShiftMode) -> Config {
    Config {
        index_buckets: 1 << 8,
        page_bits: 12,
        memory_bytes: 64 << 12,
        mutable_fraction: 0.05,
        max_sessions: 4,
        shift_mode,
        ..Config::default()
    }
}

/// One session's part of a hot-key test: RMW-adds 1 to the key
/// `next_key(issued)` gives until `stop`, completing pending requests every
/// 64 operations and all of them at the end. Returns (increments issued,
/// how many went pending).
#[allow(dead_code)] // not every test file that shares this module uses it
pub(crate) fn increment_until<F: Functions<Input = u64>>(
    store: &Store<F>,
    stop: &AtomicBool,
    mut next_key: impl FnMut(u64) -> u64,
) -> (u64, u64) {
    let mut session = store.start_session().unwrap();
    let mut issued = 0u64;
    let mut pending = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = next_key(issued);
        if session.rmw(&key.to_le_bytes(), 1).unwrap() == Status::Pending {
            pending += 1;
        }
        issued += 1;
        if issued.is_multiple_of(64) {
            session.complete_pending(false).unwrap();
        }
    }
    session.complete_pending(true).unwrap();
    (issued, pending)
}
