//! Why this file exists: the HybridLog must serve a data set four times its
//! memory budget (issue 7, item 3): pages are flushed once read-only passes
//! them and evicted once head does, and a read or RMW of an evicted record
//! goes pending, is read from disk asynchronously and finishes in
//! `complete_pending`. Single-threaded semantics are checked against a
//! `HashMap` throughout.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{AddU64, Config, SimStorage, Status, Store};

fn config() -> Config {
    config_with(true)
}

/// The test configuration, its index and frames on huge pages or not.
fn config_with(huge_pages: bool) -> Config {
    Config {
        huge_pages,
        index_buckets: 1 << 10,
        page_bits: 12,
        memory_bytes: 8 << 12,
        mutable_fraction: 0.5,
        max_sessions: 4,
        ..Config::default()
    }
}

#[test]
fn quarter_memory_reads_and_rmws_go_to_disk() {
    quarter_memory(true);
}

#[test]
fn quarter_memory_on_small_pages_too() {
    quarter_memory(false);
}

fn quarter_memory(huge_pages: bool) {
    let store = Store::open(
        Arc::new(SimStorage::new(3)),
        Path::new("/db"),
        config_with(huge_pages),
        AddU64,
    )
    .unwrap();
    let mut session = store.start_session().unwrap();
    // 32-byte records; 4096 keys = 128 KiB of data against 32 KiB of frames.
    let keys = 4096u64;
    let mut model = HashMap::new();
    for k in 0..keys {
        assert_eq!(
            session
                .upsert(&k.to_le_bytes(), &(k * 10).to_le_bytes())
                .unwrap(),
            Status::Ok
        );
        model.insert(k, k * 10);
    }
    let addresses = store.addresses();
    assert!(addresses.head > 64, "pages were evicted: {addresses:?}");
    assert!(addresses.tail - addresses.head <= 8 << 12);
    // RMW every key: the old ones are on disk.
    let mut pending = 0;
    for k in 0..keys {
        if session.rmw(&k.to_le_bytes(), 1).unwrap() == Status::Pending {
            pending += 1;
        }
        *model.get_mut(&k).unwrap() += 1;
    }
    assert!(pending > keys / 2, "most RMWs went to disk: {pending}");
    session.complete_pending(true).unwrap();
    // Read everything back, twice (the second pass after more eviction).
    for _ in 0..2 {
        let mut value = Vec::new();
        let mut waiting = HashMap::new();
        for k in 0..keys {
            match session.read(&k.to_le_bytes(), &mut value).unwrap() {
                Status::Ok => assert_eq!(value, model[&k].to_le_bytes(), "key {k}"),
                Status::Pending => {
                    waiting.insert(session.serial(), k);
                }
                Status::NotFound => panic!("key {k} lost"),
            }
        }
        for done in session.complete_pending(true).unwrap() {
            let k = waiting.remove(&done.serial).expect("a read we issued");
            assert_eq!(done.status, Status::Ok);
            assert_eq!(done.value.unwrap(), model[&k].to_le_bytes(), "key {k}");
        }
        assert!(waiting.is_empty());
    }
    let reads = store.disk_reads();
    assert!(
        reads.records > keys && reads.checked == reads.records,
        "every record read from disk was checked: {reads:?}"
    );
}

/// Pages of 64 KiB hold sixteen checksum blocks: a record read from disk is
/// checked against the pieces of the blocks around it, not its page's.
/// Four I/O threads share the reads.
#[test]
fn records_on_large_pages_are_checked_as_they_are_read() {
    let store = Store::open(
        Arc::new(SimStorage::new(5)),
        Path::new("/db"),
        Config {
            page_bits: 16,
            memory_bytes: 8 << 16,
            io_threads: 4,
            ..config()
        },
        AddU64,
    )
    .unwrap();
    let mut session = store.start_session().unwrap();
    // 32-byte records: 2 MiB of data against 512 KiB of frames.
    let keys = 65_536u64;
    for k in 0..keys {
        session
            .upsert(&k.to_le_bytes(), &(k + 3).to_le_bytes())
            .unwrap();
    }
    let mut value = Vec::new();
    let mut waiting = HashMap::new();
    for k in (0..keys).step_by(97) {
        match session.read(&k.to_le_bytes(), &mut value).unwrap() {
            Status::Ok => assert_eq!(value, (k + 3).to_le_bytes()),
            Status::Pending => {
                waiting.insert(session.serial(), k);
            }
            Status::NotFound => panic!("key {k} lost"),
        }
    }
    assert!(
        waiting.len() > 400,
        "most reads went to disk: {}",
        waiting.len()
    );
    for done in session.complete_pending(true).unwrap() {
        let k = waiting.remove(&done.serial).expect("a read we issued");
        assert_eq!(done.value.unwrap(), (k + 3).to_le_bytes(), "key {k}");
    }
    let reads = store.disk_reads();
    assert!(
        reads.records >= 400 && reads.checked == reads.records,
        "{reads:?}"
    );
}

#[test]
fn variable_length_values_survive_eviction() {
    let store = Store::open(
        Arc::new(SimStorage::new(4)),
        Path::new("/db"),
        config(),
        AddU64,
    )
    .unwrap();
    let mut session = store.start_session().unwrap();
    let mut model = HashMap::new();
    for k in 0..600u64 {
        let key = format!("key-{k}-{}", "x".repeat((k % 13) as usize));
        let value = vec![(k % 251) as u8; (k % 200) as usize];
        session.upsert(key.as_bytes(), &value).unwrap();
        model.insert(key, value);
    }
    for k in (0..600u64).step_by(3) {
        let key = format!("key-{k}-{}", "x".repeat((k % 13) as usize));
        assert!(matches!(
            session.delete(key.as_bytes()).unwrap(),
            Status::Ok | Status::Pending
        ));
        model.remove(&key);
    }
    session.complete_pending(true).unwrap();
    let mut waiting = HashMap::new();
    let mut value = Vec::new();
    for k in 0..600u64 {
        let key = format!("key-{k}-{}", "x".repeat((k % 13) as usize));
        match session.read(key.as_bytes(), &mut value).unwrap() {
            Status::Ok => assert_eq!(Some(&value), model.get(&key), "{key}"),
            Status::NotFound => assert!(!model.contains_key(&key), "{key}"),
            Status::Pending => {
                waiting.insert(session.serial(), key);
            }
        }
    }
    for done in session.complete_pending(true).unwrap() {
        let key = waiting.remove(&done.serial).unwrap();
        assert_eq!(done.value.as_ref(), model.get(&key), "{key}");
    }
}

/// A budget of many small pages (131,072 frames of 4 KiB, more than the
/// kernel's default 65,530 mappings per process) opens and works: the
/// frames share one mapping, faulted in as they are used.
#[test]
fn a_budget_of_many_small_frames_opens() {
    let config = Config {
        memory_bytes: 512 << 20,
        ..config()
    };
    let store = Store::open(
        Arc::new(SimStorage::new(4)),
        Path::new("/db"),
        config,
        AddU64,
    )
    .unwrap();
    let mut session = store.start_session().unwrap();
    for k in 0..10_000u64 {
        session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
    }
    let mut value = Vec::new();
    assert_eq!(
        session.read(&9_999u64.to_le_bytes(), &mut value).unwrap(),
        Status::Ok
    );
    assert_eq!(value, 9_999u64.to_le_bytes());
}
