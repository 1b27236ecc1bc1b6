//! What the crash tests share: reading every counter back after recovery.

use epochdb_hybridlog::{AddU64, Status, Store};

/// Counters `0..keys` of `store` (8-byte little-endian values; 0 where a
/// key is absent), read in one session, from disk where they are there.
pub(crate) fn read_counters(store: &Store<AddU64>, keys: u64) -> Vec<u64> {
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
