//! Why this file exists: after a snapshot checkpoint, an in-place update
//! of a record from the checkpoint's version takes its bucket's shared
//! latch until every session has adopted REST (a session still in a CPR
//! phase may be copying the record to the tail). Latching for the rest of
//! the run cost 10% of an 8 M-key run (BENCHMARKS.md), so the store marks
//! the REST settled once the last session adopts it, and each session
//! reads that at its refresh. If the mark stopped being set, nothing would
//! fail but the speed; these checks make it fail. (`tests/snapshot_hot_keys.rs`
//! checks the other side: that no update is lost.)

use std::path::Path;
use std::sync::Arc;

use crate::{AddU64, CheckpointKind, Config, Phase, SimStorage, Store};

fn config() -> Config {
    Config {
        index_buckets: 64,
        page_bits: 12,
        memory_bytes: 16 << 12,
        max_sessions: 4,
        ..Config::default()
    }
}

#[test]
fn rest_settles_once_every_session_has_adopted_it() {
    let store = Arc::new(
        Store::open(
            Arc::new(SimStorage::new(1)),
            Path::new("/s"),
            config(),
            AddU64,
        )
        .unwrap(),
    );
    let mut s1 = store.start_session().unwrap();
    let mut s2 = store.start_session().unwrap();
    for key in 0u64..100 {
        s1.rmw(&key.to_le_bytes(), 1).unwrap();
    }
    let v = store.system_state().version;
    assert_eq!(store.rest_settled_version(), v, "settled at open");
    assert!(s1.rest_settled_seen() && s2.rest_settled_seen());
    for kind in [CheckpointKind::Snapshot, CheckpointKind::FoldOver] {
        let v = store.system_state().version;
        let checkpointer = {
            let store = store.clone();
            std::thread::spawn(move || store.checkpoint_with(false, kind))
        };
        while !checkpointer.is_finished() {
            s1.refresh();
            s2.refresh();
        }
        checkpointer.join().unwrap().unwrap();
        assert_eq!(store.system_state().version, v + 1);
        // One session at the new REST, the other maybe not yet: settled
        // exactly when both are there.
        s1.refresh();
        assert_eq!(s1.state().phase, Phase::Rest);
        let both = s2.state() == s1.state();
        assert_eq!(store.rest_settled_version() == v + 1, both, "{kind:?}");
        assert_eq!(s1.rest_settled_seen(), both, "{kind:?}");
        s2.refresh();
        assert_eq!(store.rest_settled_version(), v + 1, "{kind:?}");
        assert!(s2.rest_settled_seen(), "{kind:?}");
        assert!(!s1.rest_settled_seen() || both, "{kind:?}");
        s1.refresh();
        assert!(s1.rest_settled_seen(), "{kind:?}");
    }
    // A session that leaves while the others are at REST settles it too.
    let mut s3 = store.start_session().unwrap();
    let v = store.system_state().version;
    let checkpointer = {
        let store = store.clone();
        std::thread::spawn(move || store.checkpoint_with(false, CheckpointKind::Snapshot))
    };
    while !checkpointer.is_finished() {
        s1.refresh();
        s2.refresh();
        s3.refresh();
    }
    checkpointer.join().unwrap().unwrap();
    s1.refresh();
    s2.refresh();
    assert_eq!(
        store.rest_settled_version() == v + 1,
        s3.state() == s1.state()
    );
    drop(s3);
    assert_eq!(store.rest_settled_version(), v + 1);
}
