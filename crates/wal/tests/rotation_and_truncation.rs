//! Why this file exists: log files rotate at entry boundaries once full,
//! recovery stitches them back into one LSN space, and `truncate_before`
//! removes exactly the files a checkpoint no longer needs — renamed out of
//! the log first, so a crash while one is being cut down leaves a file
//! recovery deletes, never a shortened log file.
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use epochdb_storage::{CrashMode, FaultKind, FaultOp, SimStorage, Storage};
use epochdb_wal::{LogKind, Wal};

fn log_files(disk: &SimStorage) -> Vec<String> {
    disk.list(Path::new("/db/wal"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect()
}

#[test]
fn rotates_recovers_across_files_and_truncates() {
    let disk = SimStorage::new(3);
    let mut opts = small_options(LogKind::Grasshopper);
    opts.file_max_bytes = 32 << 10;
    let (wal, _) = Wal::open(Arc::new(disk.clone()), "/db/wal", opts.clone()).unwrap();
    let mut h = wal.thread_handle();
    let mut ranges = Vec::new();
    for seq in 0..400 {
        let r = h.append(&[&record(0, seq)]).unwrap();
        ranges.push(r);
        if seq % 50 == 49 {
            h.wait_durable(r.end).unwrap(); // separate flushes, so files fill
        }
    }
    h.wait_durable(ranges.last().unwrap().end).unwrap();
    let files = log_files(&disk);
    assert!(files.len() >= 4, "expected rotation, got {files:?}");

    // Truncate below the middle entry: only whole files below it go.
    let cut = ranges[200].start;
    let removed = wal.truncate_before(cut).unwrap();
    assert!(removed >= 1);
    assert_eq!(log_files(&disk).len(), files.len() - removed);
    assert_eq!(
        disk.list(Path::new("/db/wal")).unwrap().len(),
        log_files(&disk).len() + 1,
        "only the log files and the SDL file remain"
    );
    drop(h);
    let end = wal.shutdown().unwrap();

    let (wal, rec) = Wal::open(Arc::new(disk.clone()), "/db/wal", opts.clone()).unwrap();
    assert!(rec.start_lsn > 0 && rec.start_lsn <= cut);
    assert_eq!(rec.end_lsn, end);
    let first = rec.entries.first().unwrap();
    assert_eq!(first.lsn.start, rec.start_lsn);
    let mut next = rec.start_lsn;
    for e in &rec.entries {
        assert_eq!(e.lsn.start, next);
        next = e.lsn.end;
        let seq = u32::from_le_bytes(e.records[0][4..8].try_into().unwrap());
        assert_eq!(ranges[seq as usize], e.lsn);
    }
    // New appends continue the LSN space after a restart.
    let mut h = wal.thread_handle();
    let r = h.append(&[b"after restart"]).unwrap();
    assert_eq!(r.start, end);
    drop(h);
    // Truncating everything keeps the active file.
    wal.truncate_before(u64::MAX).unwrap();
    assert_eq!(log_files(&disk).len(), 1);
    let end2 = wal.shutdown().unwrap();
    let (_wal, rec) = Wal::open(Arc::new(disk), "/db/wal", opts).unwrap();
    assert_eq!(rec.end_lsn, end2);
    assert_eq!(rec.entries.last().unwrap().records[0], b"after restart");
}

/// A crash while `truncate_before` renames, cuts down or removes files:
/// an I/O error at the `nth` write (a truncation) or sync stops it there,
/// the power fails, and recovery must remove every half-removed file and
/// recover the whole log after the files that went.
#[test]
fn a_file_half_removed_at_a_crash_is_removed_at_recovery() {
    let mut opts = small_options(LogKind::Grasshopper);
    opts.file_max_bytes = 32 << 10;
    let mut half_removed = 0;
    for seed in 0..24u64 {
        let disk = SimStorage::new(100 + seed);
        let (wal, _) = Wal::open(Arc::new(disk.clone()), "/db/wal", opts.clone()).unwrap();
        let mut h = wal.thread_handle();
        let mut end = 0;
        let mut cut = 0;
        for seq in 0..300 {
            let r = h.append(&[&record(0, seq)]).unwrap();
            end = r.end;
            if seq == 200 {
                cut = r.start;
            }
            if seq % 50 == 49 {
                h.wait_durable(r.end).unwrap();
            }
        }
        h.wait_durable(end).unwrap();
        drop(h);
        let op = if seed % 2 == 0 {
            FaultOp::Sync
        } else {
            FaultOp::Write
        };
        disk.fail_nth(op, 1 + seed / 2 % 4, FaultKind::Eio);
        let _ = wal.truncate_before(cut);
        drop(wal);
        let crashed = disk.crash(CrashMode::DropUnsynced);
        crashed.clear_faults();
        half_removed += crashed
            .list(Path::new("/db/wal"))
            .unwrap()
            .iter()
            .filter(|n| n.ends_with(".removing"))
            .count();
        let (_wal, rec) = Wal::open(Arc::new(crashed.clone()), "/db/wal", opts.clone())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(rec.end_lsn, end, "seed {seed}");
        assert!(rec.start_lsn <= cut, "seed {seed}: removed past the cut");
        // Contiguous from wherever the files that went ended.
        let mut next = rec.start_lsn;
        let first_seq = rec.entries.first().map(|e| e.records[0][4..8].to_vec());
        let first_seq = u32::from_le_bytes(first_seq.unwrap().try_into().unwrap());
        for (i, e) in rec.entries.iter().enumerate() {
            assert_eq!(e.lsn.start, next, "seed {seed}: hole before {}", e.lsn);
            next = e.lsn.end;
            assert_eq!(e.records[0], record(0, first_seq + i as u32), "seed {seed}");
        }
        assert_eq!(next, end, "seed {seed}");
        let names = crashed.list(Path::new("/db/wal")).unwrap();
        assert!(
            names.iter().all(|n| !n.ends_with(".removing")),
            "seed {seed}: a half-removed file survived recovery: {names:?}"
        );
    }
    assert!(
        half_removed > 0,
        "no run stopped part-way through a removal"
    );
}

#[test]
fn entries_too_large_are_refused() {
    let disk = SimStorage::new(4);
    let options = small_options(LogKind::Grasshopper);
    let max = options.entry_max_bytes();
    assert!(max <= options.buffer_bytes, "an entry fits the ring");
    let (wal, _) = Wal::open(Arc::new(disk), "/db/wal", options).unwrap();
    let mut h = wal.thread_handle();
    let big =
        vec![0u8; max + 1 - epochdb_wal::ENTRY_OVERHEAD_BYTES - epochdb_wal::RECORD_OVERHEAD_BYTES];
    assert!(matches!(
        h.append(&[&big]),
        Err(epochdb_wal::WalError::EntryTooLarge { .. })
    ));
    // The largest entry that fits still goes through.
    let fits =
        vec![1u8; max - epochdb_wal::ENTRY_OVERHEAD_BYTES - epochdb_wal::RECORD_OVERHEAD_BYTES];
    let r = h.append(&[&fits]).unwrap();
    h.wait_durable(r.end).unwrap();
}
