//! Why this file exists: a request that finds no record of its key must
//! still obey the CPR version rules (cpr-sigmod19 Algorithm 4; FASTER's
//! `InternalRmw` takes the bucket's exclusive latch in IN_PROGRESS for a
//! key it did not find, as for any record older than v+1). Two keys that
//! share one index entry make it matter: an RMW of version v on key B
//! waits for a disk read of A's record (the chain's only one), holding its
//! bucket's shared latch; an IN_PROGRESS session's RMW on B reads the same
//! chain, finds no B and appends B at version v+1. Without the latch rule
//! it did so at once, and the version-v request then found a v+1 record
//! of its key: it shifted for ever (WAIT_PENDING never ended), and its
//! increment was never applied. Needs two colliding keys, so it lives
//! inside the crate, where the index's hash is visible.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::index::tag_of;
use crate::record::hash_key;
use crate::{
    AddU64, CheckpointKind, Config, CrashMode, Phase, ShiftMode, SimStorage, Status, Store,
};

fn config(shift_mode: ShiftMode) -> Config {
    Config {
        index_buckets: 64,
        page_bits: 12,
        memory_bytes: 8 << 12,
        mutable_fraction: 0.5,
        max_sessions: 4,
        shift_mode,
        ..Config::default()
    }
}

/// Two 8-byte keys with the same bucket and tag (so one index entry).
fn colliding_keys(buckets: u64) -> (u64, u64) {
    let mut seen = HashMap::new();
    for key in 1_000_000u64.. {
        let hash = hash_key(&key.to_le_bytes());
        let slot = (hash & (buckets - 1), tag_of(hash));
        if let Some(first) = seen.insert(slot, key) {
            return (first, key);
        }
    }
    unreachable!()
}

fn value_of(store: &Store<AddU64>, key: u64) -> Option<u64> {
    let mut session = store.start_session().unwrap();
    let mut out = Vec::new();
    let status = session.read(&key.to_le_bytes(), &mut out).unwrap();
    let bytes = match status {
        Status::Ok => Some(out),
        Status::NotFound => None,
        Status::Pending => session.complete_pending(true).unwrap().remove(0).value,
    };
    bytes.map(|v| u64::from_le_bytes(v[..8].try_into().unwrap()))
}

fn run(shift_mode: ShiftMode) {
    let what = format!("{shift_mode:?}");
    let (a, b) = colliding_keys(64);
    let disk = SimStorage::new(7);
    let dir = Path::new("/nk");
    let store =
        Arc::new(Store::open(Arc::new(disk.clone()), dir, config(shift_mode), AddU64).unwrap());
    {
        // A's record, then enough others to push it (the entry's whole
        // chain) to disk.
        let mut loader = store.start_session().unwrap();
        loader
            .upsert(&a.to_le_bytes(), &1u64.to_le_bytes())
            .unwrap();
        for filler in 0..4000u64 {
            loader
                .upsert(&filler.to_le_bytes(), &filler.to_le_bytes())
                .unwrap();
        }
    }
    let mut s1 = store.start_session().unwrap();
    let mut s2 = store.start_session().unwrap();
    let v = store.system_state().version;
    let checkpointer = {
        let store = store.clone();
        std::thread::spawn(move || store.checkpoint_with(true, CheckpointKind::FoldOver))
    };
    // s1 enters PREPARE and issues a version-v RMW of B, which must read
    // A's record first.
    while s1.state().phase != Phase::Prepare {
        s1.refresh();
        s2.refresh();
        std::thread::yield_now();
    }
    assert_eq!(
        s1.rmw(&b.to_le_bytes(), 5).unwrap(),
        Status::Pending,
        "{what}: B's chain should be on disk"
    );
    let s1_cpr = s1.serial();
    // Both cross into v+1; s1's request is now from before its CPR point,
    // so the state machine stops at WAIT_PENDING.
    while store.system_state().phase < Phase::WaitPending || s1.state().phase < Phase::InProgress {
        s1.refresh();
        s2.refresh();
        std::thread::yield_now();
    }
    assert_eq!(s2.state().version, v + 1, "{what}");
    // s2, at v+1, increments B: it too reads A's record and finds no B.
    let first = s2.rmw(&b.to_le_bytes(), 7).unwrap();
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut s2_done = first != Status::Pending;
    while !s2_done && Instant::now() < deadline {
        s2_done = !s2.complete_pending(false).unwrap().is_empty();
    }
    // s1's version-v request must complete as version v.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s1_done = false;
    while !s1_done && Instant::now() < deadline {
        s1_done = !s1.complete_pending(false).unwrap().is_empty();
        std::thread::yield_now();
    }
    if !s1_done {
        // Dropping the sessions would wait for the stuck checkpoint.
        std::mem::forget(s1);
        std::mem::forget(s2);
        panic!("{what}: the version-v RMW of B never completed (s2 done: {s2_done})");
    }
    // Both take part until the checkpoint ends.
    while !checkpointer.is_finished() {
        s1.complete_pending(false).unwrap();
        s2_done |= !s2.complete_pending(false).unwrap().is_empty();
        std::thread::yield_now();
    }
    if !s2_done {
        s2.complete_pending(true).unwrap();
    }
    let info = checkpointer.join().unwrap().unwrap();
    assert_eq!(info.version, v, "{what}");
    assert_eq!(value_of(&store, b), Some(12), "{what}: live value of B");
    let (id1, id2) = (s1.id(), s2.id());
    drop(s1);
    drop(s2);
    drop(store);

    let store = Store::open(
        Arc::new(disk.crash(CrashMode::DropUnsynced)),
        dir,
        config(shift_mode),
        AddU64,
    )
    .unwrap();
    assert_eq!(store.recovered().unwrap().version, v, "{what}");
    let (_, p1) = store.continue_session(id1).unwrap();
    assert_eq!(p1, s1_cpr, "{what}: s1's CPR point");
    let (_, p2) = store.continue_session(id2).unwrap();
    assert_eq!(p2, 0, "{what}: s2's CPR point is before its RMW");
    assert_eq!(value_of(&store, b), Some(5), "{what}: B after recovery");
    assert_eq!(value_of(&store, a), Some(1), "{what}: A after recovery");
}

#[test]
fn new_key_in_progress_waits_for_the_old_request_fine() {
    run(ShiftMode::Fine);
}

#[test]
fn new_key_in_progress_waits_for_the_old_request_coarse() {
    run(ShiftMode::Coarse);
}
