//! Why this file exists: a store written before the log had checksums
//! (metadata format 2, no `log.sums`) must still open, get its log's
//! checksums at that first open, and from then on be checked like any
//! other. Without the first open's checksumming, the next checkpoint's
//! recovery would find log bytes without a checksum and refuse the store.

use std::path::Path;
use std::sync::Arc;

use crate::checkpoint::{meta_name, parse_meta_name, read_metadata, write_metadata};
use crate::sums::SUMS_NAME;
use crate::{AddU64, CheckpointKind, Config, CrashMode, SimStorage, Status, Storage, Store};

const DIR: &str = "/older";
const KEYS: u64 = 3000;

fn config() -> Config {
    Config {
        index_buckets: 256,
        page_bits: 12,
        memory_bytes: 16 << 12,
        max_sessions: 2,
        log_segment_bits: 0,
        ..Config::default()
    }
}

fn open(disk: &SimStorage) -> Store<AddU64> {
    let disk = disk.crash(CrashMode::DropUnsynced);
    Store::open(Arc::new(disk), Path::new(DIR), config(), AddU64).unwrap()
}

/// Every counter, read through a new session.
fn counters(store: &Store<AddU64>) -> Vec<u64> {
    let mut session = store.start_session().unwrap();
    let mut out = vec![0; KEYS as usize];
    let mut value = Vec::new();
    for key in 0..KEYS {
        match session.read(&key.to_le_bytes(), &mut value).unwrap() {
            Status::Ok => out[key as usize] = u64::from_le_bytes(value[..8].try_into().unwrap()),
            Status::NotFound => {}
            Status::Pending => {
                for done in session.complete_pending(true).unwrap() {
                    let value = done.value.expect("written");
                    out[key as usize] = u64::from_le_bytes(value[..8].try_into().unwrap());
                }
            }
        }
    }
    out
}

/// Adds `amount` to every counter, then takes a checkpoint.
fn add_all(store: &Store<AddU64>, amount: u64, with_index: bool) {
    let mut session = store.start_session().unwrap();
    for key in 0..KEYS {
        session.rmw(&key.to_le_bytes(), amount).unwrap();
    }
    session.complete_pending(true).unwrap();
    drop(session);
    store
        .checkpoint_with(with_index, CheckpointKind::FoldOver)
        .unwrap();
}

#[test]
fn a_store_without_log_checksums_gets_them_at_its_first_open() {
    let disk = SimStorage::new(3);
    let store = open(&disk);
    add_all(&store, 1, true);
    add_all(&store, 2, false);
    drop(store);
    // Make it a store from before checksums: metadata format 2, no
    // `log.sums`.
    let older = disk.crash(CrashMode::DropUnsynced);
    let dir = Path::new(DIR);
    let version = older
        .list(dir)
        .unwrap()
        .iter()
        .filter_map(|name| parse_meta_name(name))
        .max()
        .unwrap();
    let mut meta = read_metadata(&older, &dir.join(meta_name(version))).unwrap();
    assert!(meta.log_sums);
    meta.log_sums = false;
    older.remove(&dir.join(meta_name(version))).unwrap();
    older.remove(&dir.join(SUMS_NAME)).unwrap();
    older.sync_dir(dir).unwrap();
    write_metadata(&older, dir, &meta).unwrap();

    let store = open(&older);
    assert_eq!(counters(&store), vec![3; KEYS as usize]);
    // Below the index checkpoint's l_h the first open read nothing.
    let verified = store.verify_log().unwrap();
    assert!(
        verified.pieces > 0 && verified.unchecked_bytes > 0,
        "{verified:?}"
    );
    // A log-only checkpoint: its recovery replays the older log too.
    add_all(&store, 4, false);
    drop(store);
    let store = open(&older);
    assert_eq!(counters(&store), vec![7; KEYS as usize]);
    let later = store.verify_log().unwrap();
    assert!(later.pieces > verified.pieces, "{later:?}");
    assert_eq!(later.unchecked_bytes, verified.unchecked_bytes);
}
