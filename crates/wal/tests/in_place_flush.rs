//! Why this file exists: with direct writes the flusher writes the ring's
//! blocks to the log file in place, without copying them (the file's
//! offsets agree with LSNs modulo 4096), rewriting the block the previous
//! flush ended in from the ring. A wrong offset, a block the ring had
//! already reused, or a header overwritten would each leave a file that
//! differs from what the copying path writes. So the same appends, made
//! once each way, must leave byte-identical log streams (every file's
//! bytes after its header, in order; where files rotate depends on flush
//! timing), across rotations, a reopened file and many flush boundaries,
//! and every header must put its file's offsets ≡ LSNs (mod 4096).
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use epochdb_storage::{decode_block, SimStorage, Storage};
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

/// The log stream: every log file's bytes after its header, in order.
/// Checks that each file starts at the LSN the stream has reached and
/// that its header is as long as format 2 makes it.
fn log_stream(disk: &SimStorage, dir: &Path) -> (Vec<u8>, usize) {
    let mut names: Vec<String> = disk
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    let mut stream = Vec::new();
    for name in &names {
        let bytes = disk.read(&dir.join(name)).unwrap();
        let start: u64 = name[4..24].parse().unwrap();
        assert_eq!(
            start,
            stream.len() as u64,
            "{name} starts where the last ended"
        );
        let magic = u32::from_le_bytes(*b"ELWL");
        let (_, header) = decode_block(&bytes, 0, magic).unwrap().unwrap();
        assert!(header >= 24, "{name}");
        assert_eq!(
            header as u64 % 4096,
            start % 4096,
            "{name}: offsets agree with LSNs mod 4096"
        );
        stream.extend_from_slice(&bytes[header..]);
    }
    (stream, names.len())
}

/// Runs the same appends with `options` in two sessions (the second
/// reopens the last file) and returns the files and the recovered count.
/// `coalesce`: `WalOptions::write_coalesce_bytes`.
fn run(kind: LogKind, direct_io: bool, coalesce: usize) -> (Vec<u8>, usize, usize) {
    let disk = SimStorage::new(7);
    let dir = Path::new("/db/wal");
    let options = WalOptions {
        direct_io,
        // Several units in flight: the order they land in must not matter.
        io_depth: 4,
        // Split every flush, however small, so that helpers write.
        io_depth_min_bytes: 1,
        file_max_bytes: 96 << 10,
        write_coalesce_bytes: coalesce,
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
    let (stream, files) = log_stream(&disk, dir);
    (stream, files, recovered.entries.len())
}

/// In place, with one write per 4 KiB unit, with adjacent units written
/// 16 KiB at a time, and with a coalescing size beyond the 64 KiB ring
/// (capped at it, so writes end at the ring's end).
#[test]
fn in_place_flushes_write_what_copying_writes() {
    for kind in KINDS {
        let (copied, _, copied_entries) = run(kind, false, 0);
        assert_eq!(copied_entries, 800);
        for coalesce in [0, 16 << 10, 1 << 20] {
            let (in_place, files, entries) = run(kind, true, coalesce);
            assert_eq!(entries, 800, "{kind:?} {coalesce}: every entry recovered");
            assert!(files >= 3, "{kind:?}: the log rotated ({files} files)");
            assert_eq!(
                in_place.len(),
                copied.len(),
                "{kind:?} {coalesce}: as long either way"
            );
            if let Some(at) = in_place.iter().zip(&copied).position(|(a, b)| a != b) {
                panic!("{kind:?} {coalesce}: the streams differ first at LSN {at}");
            }
        }
    }
}
