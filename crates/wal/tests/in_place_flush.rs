//! Why this file exists: with direct writes the flusher writes the ring's
//! blocks to the log file in place, without copying them (the file's
//! offsets agree with LSNs modulo 4096), rewriting the block the previous
//! flush ended in from the ring. A wrong offset, a block the ring had
//! already reused, or a header overwritten would each leave a file that
//! differs from what the copying path writes. So the same appends, made
//! once each way, must leave byte-identical files, across rotations, a
//! reopened file and many flush boundaries.
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use epochdb_storage::{SimStorage, Storage};
use epochdb_wal::{LogKind, Wal, WalOptions};

/// Appends `count` records from `from` on, one thread, waiting for
/// durability every `wait_every` entries so that flushes end at many
/// different places, small ones included.
fn append_records(wal: &Wal, from: u32, count: u32, wait_every: u32) {
    let mut h = wal.thread_handle();
    for seq in from..from + count {
        let r = h.append(&[&record(0, seq)]).unwrap();
        if seq % wait_every == 0 {
            h.wait_durable(r.end).unwrap();
        }
    }
}

/// Every file of the log directory with its bytes, by name.
fn files(disk: &SimStorage, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = disk.list(dir).unwrap();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = disk.read(&dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// Runs the same appends with `options` in two sessions (the second
/// reopens the last file) and returns the files and the recovered count.
fn run(kind: LogKind, direct_io: bool) -> (Vec<(String, Vec<u8>)>, usize) {
    let disk = SimStorage::new(7);
    let dir = Path::new("/db/wal");
    let options = WalOptions {
        direct_io,
        file_max_bytes: 96 << 10,
        ..small_options(kind)
    };
    assert_eq!(
        options.writes_in_place(),
        direct_io,
        "direct writes with these options flush in place"
    );
    for (from, wait_every) in [(0, 3), (400, 17)] {
        let (wal, _) = Wal::open(Arc::new(disk.clone()), dir, options.clone()).unwrap();
        append_records(&wal, from, 400, wait_every);
        wal.shutdown().unwrap();
    }
    let (_, recovered) = Wal::open(Arc::new(disk.clone()), dir, options).unwrap();
    assert!(
        recovered.discarded.is_none(),
        "a clean shutdown tears nothing"
    );
    (files(&disk, dir), recovered.entries.len())
}

#[test]
fn in_place_flushes_write_what_copying_writes() {
    for kind in KINDS {
        let (in_place, entries) = run(kind, true);
        let (copied, copied_entries) = run(kind, false);
        assert_eq!(entries, 800, "{kind:?}: every entry recovered");
        assert_eq!(copied_entries, 800);
        let logs = in_place.iter().filter(|(n, _)| n.ends_with(".log")).count();
        assert!(logs >= 3, "{kind:?}: the log rotated ({logs} files)");
        assert_eq!(
            in_place.len(),
            copied.len(),
            "{kind:?}: the same files either way"
        );
        for ((name, bytes), (copied_name, copied_bytes)) in in_place.iter().zip(&copied) {
            assert_eq!(name, copied_name);
            if name.ends_with(".log") {
                assert!(
                    bytes == copied_bytes,
                    "{kind:?}: {name} differs ({} bytes in place, {} copied)",
                    bytes.len(),
                    copied_bytes.len()
                );
            }
        }
    }
}
