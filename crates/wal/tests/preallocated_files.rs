//! With `io_depth` above 1 the active log file is preallocated, so that
//! the flusher's direct writes can run side by side: a copy of the log
//! taken while it runs (as a crash would leave it) has zeros after the
//! data, which recovery reads as a torn tail; a clean shutdown cuts them.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{record, small_options};
use epochdb_storage::RealStorage;
use epochdb_wal::{LogKind, Wal, WalOptions};

const COUNT: u32 = 3000;

fn options() -> WalOptions {
    WalOptions {
        direct_io: true,
        io_depth: 4,
        // Split every flush, however small, so that helpers write.
        io_depth_min_bytes: 1,
        file_max_bytes: 1 << 20,
        ..small_options(LogKind::Grasshopper)
    }
}

/// Copies the SDL file first, then the log files: the copy's log holds at
/// least what its SDL says is durable, as after a crash.
fn copy_log(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(from)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|n| n.ends_with(".log"));
    for name in names {
        std::fs::copy(from.join(&name), to.join(&name)).unwrap();
    }
}

fn check_entries(entries: &[epochdb_wal::RecoveredEntry], at_least: u32) {
    assert!(
        entries.len() >= at_least as usize,
        "{} entries recovered, {at_least} acknowledged",
        entries.len()
    );
    for (seq, entry) in entries.iter().enumerate() {
        assert_eq!(entry.records, vec![record(0, seq as u32)], "entry {seq}");
    }
}

#[test]
fn a_preallocated_log_recovers_whole_and_shuts_down_trimmed() {
    let root = tempfile::tempdir().unwrap();
    let (live, copy) = (root.path().join("live"), root.path().join("copy"));
    let storage = Arc::new(RealStorage::new());
    let (wal, _) = Wal::open(storage.clone(), &live, options()).unwrap();
    let mut handle = wal.thread_handle();
    let mut last = None;
    for seq in 0..COUNT {
        let lsn = handle.append(&[&record(0, seq)]).unwrap();
        if seq % 97 == 0 {
            handle.wait_durable(lsn.end).unwrap();
        }
        last = Some(lsn.end);
    }
    handle.wait_durable(last.unwrap()).unwrap();
    // Every entry is durable and the flusher idle: copy it as a crash
    // would leave it, zeros after the data included.
    copy_log(&live, &copy);
    let (reopened, recovered) = Wal::open(storage.clone(), &copy, options()).unwrap();
    check_entries(&recovered.entries, COUNT);
    assert_eq!(recovered.entries.len(), COUNT as usize);
    // Every file system we run on preallocates (ext4, tmpfs): the zeros
    // are there, and only they go.
    let tail = recovered
        .discarded
        .as_ref()
        .expect("the copied active file holds preallocated zeros");
    assert!(!tail.whole_file && tail.bytes > 0, "{tail:?}");
    reopened.shutdown().unwrap();
    drop(handle);
    wal.shutdown().unwrap();
    let (_, recovered) = Wal::open(storage, &live, options()).unwrap();
    assert!(
        recovered.discarded.is_none(),
        "a clean shutdown leaves no zeros: {:?}",
        recovered.discarded
    );
    check_entries(&recovered.entries, COUNT);
}
