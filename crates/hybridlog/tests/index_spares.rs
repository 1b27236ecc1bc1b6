//! Why this file exists: an index checkpoint writes over the file an older
//! one left (`index.spare`, blocks already allocated) instead of a new
//! file whenever there is one, and says which it did
//! (`CheckpointInfo::index_over_spare`): new files write slower on ext4,
//! and the benchmark reports the two apart. The first two index
//! checkpoints of a store have no spare (the first old index file is
//! retired once the second checkpoint is durable); every later one has.

use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{AddU64, Config, SimStorage, Store};

fn config() -> Config {
    Config {
        index_buckets: 64,
        page_bits: 12,
        memory_bytes: 16 << 12,
        mutable_fraction: 0.5,
        max_sessions: 2,
        ..Config::default()
    }
}

#[test]
fn index_checkpoints_from_the_third_on_write_over_a_spare() {
    let disk = Arc::new(SimStorage::new(11));
    let store = Store::open(disk.clone(), Path::new("/s"), config(), AddU64).unwrap();
    let mut over_spare = Vec::new();
    for round in 1..=4u64 {
        {
            let mut session = store.start_session().unwrap();
            for key in 0..32u64 {
                session.rmw(&key.to_le_bytes(), round).unwrap();
            }
            session.complete_pending(true).unwrap();
        }
        let info = store.checkpoint(true).unwrap();
        assert!(info.with_index);
        over_spare.push(info.index_over_spare);
    }
    assert_eq!(over_spare, [false, false, true, true]);
    let log_only = store.checkpoint(false).unwrap();
    assert!(!log_only.with_index);
    assert!(
        !log_only.index_over_spare,
        "a checkpoint without an index wrote none"
    );
    drop(store);
    // After a restart the spare is still there for the next one.
    let store = Store::open(disk, Path::new("/s"), config(), AddU64).unwrap();
    assert!(store.checkpoint(true).unwrap().index_over_spare);
}
