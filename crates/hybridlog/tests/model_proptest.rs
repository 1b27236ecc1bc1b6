//! Why this file exists: single-threaded semantics must match a `HashMap`
//! across everything that moves records around — in-place updates,
//! read-copy-update, eviction to disk and reads back, deletes, checkpoints
//! and recovery (which must restore exactly the state at the last
//! checkpoint and the session's serial number at it).
//!
//! It runs for both record layouts: variable (keys of three lengths, values
//! of any length) and fixed (8-byte keys and values, FASTER's 24-byte
//! records), where a recovery sometimes reopens with the variable layout
//! configured and must keep the checkpoint's.
//!
//! As in FASTER, a pending update is not ordered before the session's later
//! operations on the same key (it retries when it completes, on whatever is
//! there then), so the model completes a pending update before going on.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, RecordLayout, ShiftMode, SimStorage, Status, Store,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Action {
    Upsert(u8, Vec<u8>),
    Rmw(u8, u64),
    Delete(u8),
    Read(u8),
    /// With an index checkpoint; the kind (fold-over, snapshot,
    /// incremental snapshot).
    Checkpoint(bool, u8),
    CrashAndRecover,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(k, v)| Action::Upsert(k, v)),
        6 => (any::<u8>(), 1..100u64).prop_map(|(k, a)| Action::Rmw(k, a)),
        2 => any::<u8>().prop_map(Action::Delete),
        4 => any::<u8>().prop_map(Action::Read),
        1 => (any::<bool>(), 0..3u8).prop_map(|(i, k)| Action::Checkpoint(i, k)),
        1 => Just(Action::CrashAndRecover),
    ]
}

/// FASTER's benchmark records: 8-byte keys and values.
const FIXED: RecordLayout = RecordLayout::Fixed {
    key_bytes: 8,
    value_bytes: 8,
};

fn config(shift_mode: ShiftMode, record_layout: RecordLayout) -> Config {
    Config {
        record_layout,
        index_buckets: 16,
        page_bits: 12,
        memory_bytes: 4 << 12,
        mutable_fraction: 0.3,
        max_sessions: 2,
        shift_mode,
        // The one-file log, `log.dat` (the sum-store test uses segments).
        log_segment_bits: 0,
        ..Config::default()
    }
}

const KINDS: [CheckpointKind; 3] = [
    CheckpointKind::FoldOver,
    CheckpointKind::Snapshot,
    CheckpointKind::IncrementalSnapshot,
];

/// Keys of several lengths, so that variable-length keys and the 8-byte
/// fast path both run, and chains share tags; 8-byte keys only in a fixed
/// layout.
fn key(k: u8, fixed: bool) -> Vec<u8> {
    if fixed {
        return u64::from(k).to_le_bytes().to_vec();
    }
    match k % 3 {
        0 => u64::from(k).to_le_bytes().to_vec(),
        1 => vec![k],
        _ => format!("key-{k}-padding").into_bytes(),
    }
}

fn rmw_model(old: Option<&Vec<u8>>, add: u64) -> Vec<u8> {
    let base = old
        .and_then(|v| v.get(..8))
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
    base.wrapping_add(add).to_le_bytes().to_vec()
}

fn run(actions: Vec<Action>, seed: u64, shift_mode: ShiftMode, fixed: bool) {
    let layout = if fixed { FIXED } else { RecordLayout::Variable };
    let key = |k: u8| key(k, fixed);
    let mut disk = SimStorage::new(seed);
    let dir = Path::new("/model");
    let mut store = Store::open(
        Arc::new(disk.clone()),
        dir,
        config(shift_mode, layout),
        AddU64,
    )
    .unwrap();
    assert_eq!(store.record_layout(), layout);
    // The layout of the open store (a crash before any checkpoint reopens
    // it empty with the configured one).
    let mut current = layout;
    let mut session = store.start_session().unwrap();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    // The model and serial number as of the last checkpoint.
    let mut committed: (HashMap<Vec<u8>, Vec<u8>>, u64) = (HashMap::new(), 0);
    let mut has_checkpoint = false;
    // Pending reads: serial → (key, model value when issued). A key's entry
    // is dropped when the key is updated before the read completes (a
    // pending read may see the later value).
    let mut reads: HashMap<u64, (Vec<u8>, Option<Vec<u8>>)> = HashMap::new();
    let mut value = Vec::new();
    let mut fillers = 0u64;
    for action in actions {
        match action {
            Action::Upsert(k, mut v) => {
                if fixed {
                    v.resize(8, 0xa5);
                }
                reads.retain(|_, (rk, _)| *rk != key(k));
                let status = session.upsert(&key(k), &v).unwrap();
                model.insert(key(k), v);
                if status == Status::Pending {
                    finish(&mut session, &mut reads, &model);
                }
            }
            Action::Rmw(k, a) => {
                reads.retain(|_, (rk, _)| *rk != key(k));
                let status = session.rmw(&key(k), a).unwrap();
                let new = rmw_model(model.get(&key(k)), a);
                model.insert(key(k), new);
                if status == Status::Pending {
                    finish(&mut session, &mut reads, &model);
                }
            }
            Action::Delete(k) => {
                reads.retain(|_, (rk, _)| *rk != key(k));
                let status = session.delete(&key(k)).unwrap();
                model.remove(&key(k));
                if status == Status::Pending {
                    finish(&mut session, &mut reads, &model);
                }
            }
            Action::Read(k) => match session.read(&key(k), &mut value).unwrap() {
                Status::Ok => assert_eq!(Some(&value), model.get(&key(k))),
                Status::NotFound => assert_eq!(None, model.get(&key(k))),
                Status::Pending => {
                    reads.insert(session.serial(), (key(k), model.get(&key(k)).cloned()));
                }
            },
            Action::Checkpoint(with_index, kind) => {
                // Pending updates finish first, so the model is exact.
                finish(&mut session, &mut reads, &model);
                std::thread::scope(|scope| {
                    let job = scope.spawn(|| {
                        store
                            .checkpoint_with(with_index, KINDS[kind as usize])
                            .unwrap()
                    });
                    while !job.is_finished() {
                        session.refresh();
                        std::thread::yield_now();
                    }
                    job.join().unwrap();
                });
                committed = (model.clone(), session.serial());
                has_checkpoint = true;
            }
            Action::CrashAndRecover => {
                finish(&mut session, &mut reads, &model);
                let id = session.id();
                drop(session);
                drop(store);
                disk = disk.crash(CrashMode::TearUnsynced);
                // A fixed store reopened with the default (variable) layout
                // configured keeps its checkpoint's; without a checkpoint
                // it starts empty as configured.
                let configured = if fixed && seed.is_multiple_of(2) {
                    RecordLayout::Variable
                } else {
                    layout
                };
                store = Store::open(
                    Arc::new(disk.clone()),
                    dir,
                    config(shift_mode, configured),
                    AddU64,
                )
                .unwrap();
                if !has_checkpoint {
                    current = configured;
                }
                assert_eq!(store.record_layout(), current);
                model = committed.0.clone();
                session = if has_checkpoint {
                    let (session, serial) = store.continue_session(id).unwrap();
                    assert_eq!(serial, committed.1, "recovered serial number");
                    session
                } else {
                    assert!(store.continue_session(id).is_err());
                    store.start_session().unwrap()
                };
            }
        }
        if fixed {
            // Fixed records are small: new keys beside every action push
            // the actions' keys below head, so that reads and updates of
            // them go to disk as the variable layout's larger ones do.
            for _ in 0..2 {
                fillers += 1;
                let (k, v) = ((1u64 << 40) + fillers, fillers.to_le_bytes().to_vec());
                let status = session.upsert(&k.to_le_bytes(), &v).unwrap();
                model.insert(k.to_le_bytes().to_vec(), v);
                if status == Status::Pending {
                    finish(&mut session, &mut reads, &model);
                }
            }
        }
        if reads.len() > 8 {
            finish(&mut session, &mut reads, &model);
        }
    }
    finish(&mut session, &mut reads, &model);
    for (k, v) in &model {
        let status = session.read(k, &mut value).unwrap();
        match status {
            Status::Ok => assert_eq!(&value, v),
            Status::Pending => {
                let done = session.complete_pending(true).unwrap();
                assert_eq!(done[0].value.as_ref(), Some(v));
            }
            Status::NotFound => panic!("lost {k:?}"),
        }
    }
}

/// Completes pending requests; a pending read whose key was not updated
/// after it must return the model's value from when it was issued.
fn finish(
    session: &mut epochdb_hybridlog::Session<AddU64>,
    reads: &mut HashMap<u64, (Vec<u8>, Option<Vec<u8>>)>,
    model: &HashMap<Vec<u8>, Vec<u8>>,
) {
    // A deadline, not a round count: on a loaded machine the I/O thread
    // may not run for a while.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while session.pending() > 0 {
        for done in session.complete_pending(false).unwrap() {
            if let Some((k, expected)) = reads.remove(&done.serial) {
                assert_eq!(done.value, expected, "pending read of {k:?}");
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pending requests never finish: {session:?} {:?}",
            model.len()
        );
        std::thread::yield_now();
    }
    reads.clear();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_a_hashmap(actions in proptest::collection::vec(action(), 1..400), seed in any::<u64>(), coarse in any::<bool>()) {
        run(actions, seed, if coarse { ShiftMode::Coarse } else { ShiftMode::Fine }, false);
    }

    #[test]
    fn fixed_layout_store_matches_a_hashmap(actions in proptest::collection::vec(action(), 1..400), seed in any::<u64>(), coarse in any::<bool>()) {
        run(actions, seed, if coarse { ShiftMode::Coarse } else { ShiftMode::Fine }, true);
    }
}
