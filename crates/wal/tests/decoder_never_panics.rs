//! Why this file exists: recovery decodes whatever is on disk; no byte
//! pattern may make it panic, and whatever it accepts from a damaged copy
//! of a valid log must be a prefix of what was written (or an error).
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use epochdb_storage::{SimStorage, Storage};
use epochdb_wal::{read_log, LogKind, Wal};
use proptest::prelude::*;

fn put(disk: &SimStorage, name: &str, bytes: &[u8]) {
    let path = Path::new("/w").join(name);
    let _ = disk.remove(&path);
    let mut f = disk.create(&path).unwrap();
    f.append(bytes).unwrap();
}

/// The files of a valid log of `n` entries.
fn valid_log(n: u32) -> (Vec<u8>, Vec<u8>, Vec<Vec<u8>>) {
    let disk = SimStorage::new(5);
    let (wal, _) = Wal::open(
        Arc::new(disk.clone()),
        "/w",
        small_options(LogKind::Grasshopper),
    )
    .unwrap();
    let mut h = wal.thread_handle();
    let records: Vec<Vec<u8>> = (0..n)
        .map(|s| record(1, s)[..(8 + s as usize % 40)].to_vec())
        .collect();
    for r in &records {
        h.append(&[r]).unwrap();
    }
    drop(h);
    wal.shutdown().unwrap();
    let log = disk
        .read(Path::new("/w/wal-00000000000000000000.log"))
        .unwrap();
    let sdl = disk.read(Path::new("/w/wal.sdl")).unwrap();
    (log, sdl, records)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(log in proptest::collection::vec(any::<u8>(), 0..600),
                                   sdl in proptest::collection::vec(any::<u8>(), 0..140)) {
        let disk = SimStorage::new(1);
        disk.create_dir_all(Path::new("/w")).unwrap();
        put(&disk, "wal-00000000000000000000.log", &log);
        put(&disk, "wal.sdl", &sdl);
        let _ = read_log(&disk, Path::new("/w"));
    }

    #[test]
    fn damaged_valid_logs_give_a_prefix_or_an_error(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        keep_sdl in any::<bool>(),
    ) {
        let (mut log, sdl, records) = valid_log(30);
        for (at, byte) in edits {
            let i = at.index(log.len());
            log[i] ^= byte;
        }
        if truncate {
            log.truncate(cut.index(log.len() + 1));
        }
        let disk = SimStorage::new(2);
        disk.create_dir_all(Path::new("/w")).unwrap();
        put(&disk, "wal-00000000000000000000.log", &log);
        if keep_sdl {
            put(&disk, "wal.sdl", &sdl);
        }
        if let Ok(rec) = read_log(&disk, Path::new("/w")) {
            prop_assert!(rec.entries.len() <= records.len());
            for (e, r) in rec.entries.iter().zip(&records) {
                prop_assert_eq!(&e.records[0], r);
            }
        }
    }
}
