//! Why this file exists: two promises that only show under a damaged or
//! shrinking disk.
//!
//! * Log truncation: after `shift_begin_address` and a durable checkpoint,
//!   the log files below begin are gone, every key whose newest record is
//!   above begin still reads right — before and after a crash — and a key
//!   whose newest record was below begin reads as absent.
//! * Every checkpoint kind is whole or ignored: the same single-session
//!   workload with one checkpoint of each kind is run once per sync call
//!   (and once per write call), failing exactly that call with EIO and then
//!   cutting power (torn unsynced writes); recovery must give back exactly
//!   the state of one of the checkpoints that returned `Ok` (or an empty
//!   store), never a mix, and the session's serial number of that
//!   checkpoint.
//!
//! `HYBRIDLOG_FAULT_STRIDE` (default 1: every call) thins the sweep.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, Error, ShiftMode, SimStorage, Status, Storage, Store,
};
use epochdb_storage::{FaultKind, FaultOp};

fn config(shift_mode: ShiftMode) -> Config {
    Config {
        index_buckets: 256,
        page_bits: 12,
        memory_bytes: 8 << 12,
        mutable_fraction: 0.5,
        max_sessions: 2,
        shift_mode,
        // 16 KiB segments: four pages each.
        log_segment_bits: 14,
        ..Config::default()
    }
}

fn read_all(store: &Store<AddU64>, keys: u64) -> Vec<Option<u64>> {
    let mut session = store.start_session().unwrap();
    let mut out = vec![None; keys as usize];
    let mut waiting = HashMap::new();
    let mut value = Vec::new();
    for k in 0..keys {
        match session.read(&k.to_le_bytes(), &mut value).unwrap() {
            Status::Ok => {
                out[k as usize] = Some(u64::from_le_bytes(value[..8].try_into().unwrap()))
            }
            Status::NotFound => {}
            Status::Pending => {
                waiting.insert(session.serial(), k);
            }
        }
    }
    for done in session.complete_pending(true).unwrap() {
        let k = waiting[&done.serial];
        out[k as usize] = done
            .value
            .map(|v| u64::from_le_bytes(v[..8].try_into().unwrap()));
    }
    out
}

/// Checkpoints from another thread while the session refreshes.
fn checkpoint(
    store: &Store<AddU64>,
    session: &mut epochdb_hybridlog::Session<AddU64>,
    with_index: bool,
    kind: CheckpointKind,
) -> Result<epochdb_hybridlog::CheckpointInfo, Error> {
    while session.pending() > 0 {
        session.complete_pending(false)?;
    }
    std::thread::scope(|scope| {
        let job = scope.spawn(|| store.checkpoint_with(with_index, kind));
        while !job.is_finished() {
            session.refresh();
            std::thread::yield_now();
        }
        job.join().unwrap()
    })
}

#[test]
fn truncation_frees_segments_and_keeps_live_keys() {
    for kind in [
        CheckpointKind::FoldOver,
        CheckpointKind::Snapshot,
        CheckpointKind::IncrementalSnapshot,
    ] {
        let disk = SimStorage::new(7);
        let dir = Path::new("/trunc");
        let store =
            Store::open(Arc::new(disk.clone()), dir, config(ShiftMode::Fine), AddU64).unwrap();
        let mut session = store.start_session().unwrap();
        let keys = 2000u64;
        // A key written once, early: it will lie below begin.
        session.upsert(b"early-only", &1u64.to_le_bytes()).unwrap();
        for k in 0..keys {
            session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
        }
        checkpoint(&store, &mut session, true, kind).unwrap();
        let before = store.log_disk_bytes().unwrap();
        let cut = store.addresses().tail;
        // Rewrite every key: all their old records are dead.
        for k in 0..keys {
            session
                .upsert(&k.to_le_bytes(), &(k + 1_000_000).to_le_bytes())
                .unwrap();
        }
        session.complete_pending(true).unwrap();
        let begin = store.shift_begin_address(cut);
        assert!(begin > 64 && begin <= cut, "begin {begin}");
        let info = checkpoint(&store, &mut session, false, kind).unwrap();
        assert!(
            info.log_bytes_freed >= 16 << 10,
            "{kind:?}: a segment was freed: {info:?}"
        );
        let after = store.log_disk_bytes().unwrap();
        assert!(
            after + info.log_bytes_freed >= before && after < before + (keys * 32),
            "{kind:?}: {before} → {after}"
        );
        let mut value = Vec::new();
        let early = session.read(b"early-only", &mut value).unwrap();
        let early = if early == Status::Pending {
            session.complete_pending(true).unwrap()[0].status
        } else {
            early
        };
        assert_eq!(early, Status::NotFound, "{kind:?}: below begin is dropped");
        let id = session.id();
        drop(session);
        let expected: Vec<Option<u64>> = (0..keys).map(|k| Some(k + 1_000_000)).collect();
        assert_eq!(read_all(&store, keys), expected, "{kind:?}: before a crash");
        drop(store);
        let store = Store::open(
            Arc::new(disk.crash(CrashMode::TearUnsynced)),
            dir,
            config(ShiftMode::Fine),
            AddU64,
        )
        .unwrap();
        assert_eq!(store.addresses().begin, begin, "{kind:?}: begin recovered");
        assert!(store.continue_session(id).is_ok());
        assert_eq!(read_all(&store, keys), expected, "{kind:?}: after a crash");
    }
}

const KEYS: u64 = 1500;

/// A checkpoint attempted: serial number, model, returned `Ok`.
type Committed = (u64, Vec<Option<u64>>, bool);

/// The workload: RMWs and upserts over `KEYS` keys, a checkpoint of each
/// kind (and more incremental ones) in between. Returns, for each
/// checkpoint attempted, the session's serial number, the model at it and
/// whether it returned `Ok`; stops at the first error (the store
/// fail-stops).
fn workload(store: &Store<AddU64>) -> (u64, Vec<Committed>) {
    let mut session = store.start_session().unwrap();
    let id = session.id();
    let mut model = vec![None; KEYS as usize];
    let mut committed = Vec::new();
    let kinds = [
        (true, CheckpointKind::Snapshot),
        (false, CheckpointKind::IncrementalSnapshot),
        (false, CheckpointKind::IncrementalSnapshot),
        (true, CheckpointKind::FoldOver),
        (false, CheckpointKind::IncrementalSnapshot),
    ];
    'outer: for (round, &(with_index, kind)) in kinds.iter().enumerate() {
        for i in 0..1500u64 {
            let k = (i * 7 + round as u64 * 13) % KEYS;
            let result = if i % 5 == 0 {
                model[k as usize] = Some(i);
                session.upsert(&k.to_le_bytes(), &i.to_le_bytes())
            } else {
                model[k as usize] = Some(model[k as usize].unwrap_or(0) + 3);
                session.rmw(&k.to_le_bytes(), 3)
            };
            let ok = result.is_ok()
                && (result.unwrap() != Status::Pending || session.complete_pending(true).is_ok());
            if !ok {
                break 'outer;
            }
        }
        match checkpoint(store, &mut session, with_index, kind) {
            Ok(info) => {
                assert_eq!(info.sessions, vec![(id, session.serial())]);
                committed.push((session.serial(), model.clone(), true));
            }
            Err(_) => {
                // Its metadata may have become durable before the failure.
                committed.push((session.serial(), model.clone(), false));
                break;
            }
        }
    }
    drop(session);
    (id, committed)
}

fn sweep(op: FaultOp, shift_mode: ShiftMode) -> (u64, u64) {
    let stride: u64 = std::env::var("HYBRIDLOG_FAULT_STRIDE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let dir = Path::new("/faults");
    // A clean run counts the calls.
    let disk = SimStorage::new(1);
    let before = disk.calls(op);
    let store = Store::open(Arc::new(disk.clone()), dir, config(shift_mode), AddU64).unwrap();
    let (_, clean) = workload(&store);
    drop(store);
    assert!(
        clean.len() == 5 && clean.iter().all(|c| c.2),
        "the clean run commits every checkpoint"
    );
    let calls = disk.calls(op) - before;
    let mut runs = 0;
    let mut recovered_some = 0;
    let mut nth = 1;
    while nth <= calls + 2 {
        let disk = SimStorage::new(nth);
        disk.fail_nth(op, nth, FaultKind::Eio);
        let store = Store::open(Arc::new(disk.clone()), dir, config(shift_mode), AddU64);
        let (id, committed) = match &store {
            Ok(store) => workload(store),
            // The fault hit the open itself: nothing was committed.
            Err(_) => (1, Vec::new()),
        };
        drop(store);
        let restarted = disk.crash(CrashMode::TearUnsynced);
        restarted.clear_faults();
        let store = Store::open(Arc::new(restarted), dir, config(shift_mode), AddU64)
            .unwrap_or_else(|e| panic!("{op:?} #{nth}: recovery failed: {e}"));
        let serial = match store.continue_session(id) {
            Ok((session, serial)) => {
                drop(session);
                serial
            }
            Err(Error::UnknownSession(_)) => 0,
            Err(e) => panic!("{op:?} #{nth}: {e}"),
        };
        let got = read_all(&store, KEYS);
        let expected: Vec<Option<u64>> = match committed.iter().find(|c| c.0 == serial) {
            Some((_, model, _)) => model.clone(),
            None if serial == 0 => vec![None; KEYS as usize],
            None => panic!(
                "{op:?} #{nth}: recovered serial {serial}, committed {:?}",
                committed.iter().map(|c| c.0).collect::<Vec<_>>()
            ),
        };
        // The newest checkpoint that returned Ok must be the one recovered
        // (nothing reported durable is lost) — or a later one that was
        // durable when the fault struck its cleanup.
        let newest_ok = committed.iter().rfind(|c| c.2).map_or(0, |c| c.0);
        assert!(
            serial >= newest_ok,
            "{op:?} #{nth}: recovered {serial}, but {newest_ok} was reported durable"
        );
        if let Some(k) = (0..KEYS as usize).find(|&k| got[k] != expected[k]) {
            panic!(
                "{op:?} #{nth}: state at serial {serial}: key {k} is {:?}, expected {:?}",
                got[k], expected[k]
            );
        }
        runs += 1;
        recovered_some += u64::from(serial > 0);
        nth += stride;
    }
    (runs, recovered_some)
}

#[test]
fn every_sync_failed_then_power_lost() {
    for shift in [ShiftMode::Fine, ShiftMode::Coarse] {
        let (runs, recovered) = sweep(FaultOp::Sync, shift);
        println!("sync faults, {shift:?}: {runs} runs, {recovered} recovered a checkpoint");
        assert!(recovered > runs / 2);
    }
}

#[test]
fn every_write_failed_then_power_lost() {
    let (runs, recovered) = sweep(FaultOp::Write, ShiftMode::Fine);
    println!("write faults: {runs} runs, {recovered} recovered a checkpoint");
    assert!(recovered > runs / 2);
}

/// A flipped bit in any durable checkpoint file — metadata, index, a
/// snapshot piece of a full or an incremental chain, the log's checksums
/// — is reported as
/// `Error::Corrupted` at open, never used.
#[test]
fn a_flipped_bit_in_a_checkpoint_file_is_reported() {
    for (kind, target) in [
        (CheckpointKind::Snapshot, "snap-"),
        (CheckpointKind::IncrementalSnapshot, "snap-"),
        (CheckpointKind::FoldOver, "index-"),
        (CheckpointKind::Snapshot, "cpr-"),
        (CheckpointKind::FoldOver, "log.sums"),
    ] {
        let disk = SimStorage::new(11);
        let dir = Path::new("/flip");
        let store =
            Store::open(Arc::new(disk.clone()), dir, config(ShiftMode::Fine), AddU64).unwrap();
        let mut session = store.start_session().unwrap();
        for k in 0..KEYS {
            session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
        }
        checkpoint(&store, &mut session, true, kind).unwrap();
        for k in 0..KEYS / 10 {
            session.rmw(&k.to_le_bytes(), 1).unwrap();
        }
        checkpoint(&store, &mut session, false, kind).unwrap();
        drop(session);
        drop(store);
        let restarted = disk.crash(CrashMode::DropUnsynced);
        let mut names = restarted.list(dir).unwrap();
        names.sort();
        // The oldest file of the kind: for an incremental chain, the one
        // the newest map refers back to.
        let name = names
            .iter()
            .find(|n| n.starts_with(target))
            .unwrap_or_else(|| panic!("{kind:?}: no {target} file in {names:?}"));
        let path = dir.join(name);
        let len = restarted.len(&path).unwrap();
        // A bit in the middle (payload, not the framing).
        restarted.flip_bit(&path, len * 8 / 2 + 3).unwrap();
        match Store::open(Arc::new(restarted), dir, config(ShiftMode::Fine), AddU64) {
            Err(Error::Corrupted { file, .. }) => {
                assert_eq!(file, path, "{kind:?}: the damaged file is named")
            }
            other => panic!("{kind:?} {name}: expected Corrupted, got {other:?}"),
        }
    }
}

/// Requests left pending when the log stops flushing fail in
/// `complete_pending(true)` instead of retrying forever: their disk reads
/// come back, but the copies to the tail need pages that can never be
/// freed (head cannot pass what is flushed). Before the fix this hung in
/// one `every_sync_failed_then_power_lost` run in about a hundred.
#[test]
fn a_pending_request_fails_when_the_log_stops_flushing() {
    let disk = SimStorage::new(5);
    let store = Store::open(
        Arc::new(disk.clone()),
        Path::new("/stop"),
        // Enough buckets that a key's chain on disk is one record long: one
        // read each, all done before the fault.
        Config {
            index_buckets: 1 << 16,
            ..config(ShiftMode::Coarse)
        },
        AddU64,
    )
    .unwrap();
    let mut session = store.start_session().unwrap();
    for k in 0..4096u64 {
        session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
    }
    assert!(store.addresses().head > 64, "key 0 is on disk only");
    // More copies than fit in the tail page that will be left.
    for k in 0..300u64 {
        assert_eq!(session.rmw(&k.to_le_bytes(), 1).unwrap(), Status::Pending);
    }
    // Let the I/O thread read them (the replies wait in the session's
    // channel) before the failed sync makes the disk refuse reads.
    std::thread::sleep(std::time::Duration::from_millis(300));
    disk.fail_nth(FaultOp::Sync, disk.calls(FaultOp::Sync) + 1, FaultKind::Eio);
    // Fill the log until the flush failure stops the tail.
    let stopped = (1u64 << 20..(1 << 20) + 100_000)
        .any(|k| session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).is_err());
    assert!(stopped, "the failed sync stopped the log");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = session.complete_pending(true).map(|c| c.len());
        let _ = done_tx.send(result);
    });
    match done_rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(result) => assert!(result.is_err(), "expected a failure, got {result:?}"),
        Err(_) => panic!("complete_pending(true) still waits after 60 s"),
    }
}
