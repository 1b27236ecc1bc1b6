//! Why this file exists: log files rotate at entry boundaries once full,
//! recovery stitches them back into one LSN space, and `truncate_before`
//! removes exactly the files a checkpoint no longer needs.
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use epochdb_storage::{SimStorage, Storage};
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

#[test]
fn entries_too_large_are_refused() {
    let disk = SimStorage::new(4);
    let (wal, _) = Wal::open(
        Arc::new(disk),
        "/db/wal",
        small_options(LogKind::Grasshopper),
    )
    .unwrap();
    let mut h = wal.thread_handle();
    let big = vec![0u8; 64 << 10];
    assert!(matches!(
        h.append(&[&big]),
        Err(epochdb_wal::WalError::EntryTooLarge { .. })
    ));
    // The largest entry that fits still goes through.
    let fits =
        vec![
            1u8;
            (64 << 10) - epochdb_wal::ENTRY_OVERHEAD_BYTES - epochdb_wal::RECORD_OVERHEAD_BYTES
        ];
    let r = h.append(&[&fits]).unwrap();
    h.wait_durable(r.end).unwrap();
}
