//! Why this file exists: damage to data below the persisted SDL (data once
//! acknowledged) must be reported with the file and offset, never cut off
//! as if it were a torn tail; a damaged SDL slot falls back to the other.
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use epochdb_storage::{SimStorage, Storage};
use epochdb_wal::{read_log, LogKind, Wal, WalError};

/// A shut-down log of 200 entries; returns the disk and its files.
fn written(seed: u64) -> (SimStorage, Vec<String>) {
    let disk = SimStorage::new(seed);
    let (wal, _) = Wal::open(
        Arc::new(disk.clone()),
        "/db/wal",
        small_options(LogKind::Grasshopper),
    )
    .unwrap();
    let mut h = wal.thread_handle();
    for seq in 0..200 {
        h.append(&[&record(0, seq)]).unwrap();
    }
    drop(h);
    wal.shutdown().unwrap();
    let names = disk.list(Path::new("/db/wal")).unwrap();
    (disk, names)
}

#[test]
fn bit_flip_in_acknowledged_data_is_reported_with_file_and_offset() {
    for seed in 0..20 {
        let (disk, names) = written(seed);
        let log = names.iter().find(|n| n.ends_with(".log")).unwrap();
        let path = Path::new("/db/wal").join(log);
        let bit = disk.flip_random_bit(&path).unwrap();
        let err = Wal::open(
            Arc::new(disk.clone()),
            "/db/wal",
            small_options(LogKind::Grasshopper),
        )
        .map(|_| ())
        .unwrap_err();
        match err {
            WalError::Corrupted { file, offset, .. } => {
                assert_eq!(file, path);
                assert!(
                    offset <= bit / 8,
                    "reported offset {offset} after the flipped byte {}",
                    bit / 8
                );
            }
            e => panic!("seed {seed}: expected corruption, got {e}"),
        }
        // Nothing was changed: read-only inspection reports the same.
        assert!(matches!(
            read_log(&disk, Path::new("/db/wal")),
            Err(WalError::Corrupted { .. })
        ));
    }
}

#[test]
fn a_damaged_sdl_slot_falls_back_to_the_other() {
    let (disk, _) = written(1);
    let sdl = Path::new("/db/wal/wal.sdl");
    let before = read_log(&disk, Path::new("/db/wal")).unwrap();
    // Damage one slot's payload (bytes 16..32 of slot 0).
    disk.flip_bit(sdl, 20 * 8).unwrap();
    let after = read_log(&disk, Path::new("/db/wal")).unwrap();
    assert_eq!(after.entries, before.entries);
    // Both slots damaged: refuse.
    disk.flip_bit(sdl, (64 + 20) * 8).unwrap();
    assert!(matches!(
        read_log(&disk, Path::new("/db/wal")),
        Err(WalError::Corrupted { .. })
    ));
}

#[test]
fn a_missing_log_file_below_sdl_is_reported() {
    let (disk, names) = written(2);
    let log = names.iter().find(|n| n.ends_with(".log")).unwrap();
    disk.remove(&Path::new("/db/wal").join(log)).unwrap();
    assert!(matches!(
        Wal::open(
            Arc::new(disk),
            "/db/wal",
            small_options(LogKind::Grasshopper)
        ),
        Err(WalError::Corrupted { .. })
    ));
}
