//! Why this file exists: a failed fsync must stop the log for good (fail-
//! stop, never retried): SDL never passes the failed sync, every callback
//! not yet durable receives the error, later commits are refused, and after
//! a restart every acknowledged commit is still there.
#![cfg(not(loom))]

mod common;

use std::sync::Arc;

use common::*;
use epochdb_storage::{CrashMode, FaultKind, FaultOp, SimStorage};
use epochdb_wal::{LogKind, Wal, WalError};

fn sync_fails(kind: LogKind, nth: u64) {
    let disk = SimStorage::new(nth);
    let (wal, _) = Wal::open(Arc::new(disk.clone()), "/db/wal", small_options(kind)).unwrap();
    disk.fail_nth(FaultOp::Sync, nth, FaultKind::Eio);
    let acks = Acks::default();
    let mut h = wal.thread_handle();
    let committed = commit_all(&mut h, 0, 20_000, &acks);
    assert!(committed < 20_000, "the failure must stop commits");
    let frozen = wal.durable_lsn();
    assert!(matches!(
        h.commit(&[b"late"], |_| {}),
        Err(WalError::Storage(_))
    ));
    h.poll_callbacks();
    assert_eq!(wal.durable_lsn(), frozen, "SDL moved after the failure");
    {
        let acks = acks.lock().unwrap();
        assert_eq!(acks.len(), committed as usize, "every callback ran");
        for (seq, r) in acks.iter() {
            match r {
                Ok(range) => assert!(range.end <= frozen, "seq {seq} acked past SDL"),
                Err(WalError::Storage(_)) => {}
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert!(
            acks.iter().any(|(_, r)| r.is_err()),
            "someone saw the error"
        );
    }
    drop(h);
    assert!(matches!(wal.shutdown(), Err(WalError::Storage(_))));
    let revived = disk.crash(CrashMode::DropUnsynced);
    let (_wal, rec) = Wal::open(Arc::new(revived), "/db/wal", small_options(kind)).unwrap();
    let seen = check_prefix(&rec);
    check_acked_present(0, &acks, &seen);
}

#[test]
fn failed_sync_stops_grasshopper() {
    for nth in [1, 2, 5, 17] {
        sync_fails(LogKind::Grasshopper, nth);
    }
}

#[test]
fn failed_sync_stops_baselines() {
    sync_fails(LogKind::Vanilla, 4);
    sync_fails(LogKind::BitmapScan, 4);
}

/// A failed write (ENOSPC) is fatal the same way.
#[test]
fn failed_write_stops_the_log() {
    let disk = SimStorage::new(9);
    let (wal, _) = Wal::open(
        Arc::new(disk.clone()),
        "/db/wal",
        small_options(LogKind::Grasshopper),
    )
    .unwrap();
    disk.fail_nth(FaultOp::Write, 3, FaultKind::NoSpace);
    let acks = Acks::default();
    let mut h = wal.thread_handle();
    assert!(commit_all(&mut h, 0, 20_000, &acks) < 20_000);
    drop(h);
    assert!(wal.failure().is_some());
}
