//! Why: after a failed write or sync nobody knows what reached the media, and
//! retrying an fsync can report success for data that is gone (fsyncgate).
//! So the first failure latches: every later call says PreviousIo, and only a
//! restart (recovery from what is durable) goes on.

use std::path::{Path, PathBuf};

use epochdb_storage::{
    CrashMode, FaultKind, FaultOp, RealStorage, SimStorage, Storage, StorageError,
};

fn fresh(seed: u64) -> (SimStorage, PathBuf) {
    let disk = SimStorage::new(seed);
    let dir = PathBuf::from("/db");
    disk.create_dir_all(&dir).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    (disk, dir)
}

/// Every kind of call, on the storage and on an open file, is refused.
fn assert_latched(storage: &dyn Storage, file: &mut dyn epochdb_storage::StorageFile, dir: &Path) {
    let previous = |r: Result<(), StorageError>| {
        assert!(matches!(r, Err(StorageError::PreviousIo)), "got {r:?}");
    };
    previous(file.append(b"more").map(drop));
    previous(file.write_at(0, b"x"));
    previous(file.sync());
    previous(file.truncate(0));
    previous(file.read_at(0, &mut [0; 4]).map(drop));
    previous(file.size().map(drop));
    previous(storage.create(&dir.join("new")).map(drop));
    previous(storage.open(file.path()).map(drop));
    previous(storage.read(file.path()).map(drop));
    previous(storage.list(dir).map(drop));
    previous(storage.len(file.path()).map(drop));
    previous(storage.exists(dir).map(drop));
    previous(storage.rename(file.path(), &dir.join("other")));
    previous(storage.remove(file.path()));
    previous(storage.create_dir_all(&dir.join("sub")));
    previous(storage.sync_dir(dir));
}

#[test]
fn each_fault_latches_until_restart() {
    for op in [FaultOp::Write, FaultOp::Sync] {
        for kind in [FaultKind::Eio, FaultKind::NoSpace] {
            let (disk, dir) = fresh(11);
            let path = dir.join("log");
            let mut file = disk.create(&path).unwrap();
            disk.sync_dir(&dir).unwrap();
            file.append(b"durable").unwrap();
            file.sync().unwrap();

            disk.fail_nth(op, 2, kind);
            let mut call = || match op {
                FaultOp::Write => file.append(b" more").map(drop),
                FaultOp::Sync => file.sync(),
            };
            call().expect("the first call is not the planned one");
            let failed = call().expect_err("the second call is the planned one");
            match kind {
                FaultKind::Eio => assert!(
                    matches!(&failed, StorageError::Io { source, .. } if source.raw_os_error() == Some(5)),
                    "{failed:?}"
                ),
                FaultKind::NoSpace => {
                    assert!(matches!(failed, StorageError::NoSpace { .. }), "{failed:?}");
                    assert!(failed.to_string().contains("no space left"));
                }
            }
            assert_latched(&disk, file.as_mut(), &dir);
            // A clone of the view is latched too: it is the same process.
            assert!(matches!(
                disk.clone().list(&dir),
                Err(StorageError::PreviousIo)
            ));

            let restarted = disk.crash(CrashMode::DropUnsynced);
            let data = restarted.read(&path).unwrap();
            assert!(data.starts_with(b"durable"), "{op:?} {kind:?}: {data:?}");
            let mut file = restarted.open(&path).unwrap();
            file.append(b"!").unwrap();
            file.sync().unwrap();
        }
    }
}

#[test]
fn failed_sync_dir_latches() {
    let (disk, dir) = fresh(12);
    let mut file = disk.create(&dir.join("f")).unwrap();
    disk.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    assert!(matches!(disk.sync_dir(&dir), Err(StorageError::Io { .. })));
    assert_latched(&disk, file.as_mut(), &dir);
}

#[test]
fn namespace_answers_do_not_latch() {
    let (disk, dir) = fresh(13);
    assert!(matches!(
        disk.open(&dir.join("missing")),
        Err(StorageError::NotFound { .. })
    ));
    disk.create(&dir.join("f")).unwrap();
    assert!(matches!(
        disk.create(&dir.join("f")),
        Err(StorageError::AlreadyExists { .. })
    ));
    disk.sync_dir(&dir).unwrap();
}

/// The redb fuzzer's idea: run a workload once to count its calls, then
/// fail each call in turn. Whatever fails, a sync that returned Ok is kept.
#[test]
fn fail_every_call_in_turn_keeps_acknowledged_data() {
    const RECORDS: u64 = 8;
    let workload = |disk: &SimStorage, dir: &Path| -> u64 {
        let mut acked = 0;
        let Ok(mut file) = disk.create(&dir.join("log")) else {
            return acked;
        };
        if disk.sync_dir(dir).is_err() {
            return acked;
        }
        for i in 1..=RECORDS {
            if file.append(&i.to_le_bytes()).is_err() || file.sync().is_err() {
                return acked;
            }
            acked = i;
        }
        acked
    };
    let (disk, dir) = fresh(14);
    let (writes0, syncs0) = (disk.calls(FaultOp::Write), disk.calls(FaultOp::Sync));
    assert_eq!(workload(&disk, &dir), RECORDS);
    let writes = disk.calls(FaultOp::Write) - writes0;
    let syncs = disk.calls(FaultOp::Sync) - syncs0;
    assert_eq!((writes, syncs), (RECORDS, RECORDS + 1));

    for (op, calls) in [(FaultOp::Write, writes), (FaultOp::Sync, syncs)] {
        for nth in 1..=calls {
            for seed in 0..8 {
                let (disk, dir) = fresh(seed);
                disk.fail_nth(op, nth, FaultKind::Eio);
                let acked = workload(&disk, &dir);
                assert!(acked < RECORDS, "{op:?} #{nth} did not fail");
                let after = disk.crash(CrashMode::TearUnsynced);
                let data = after.read(&dir.join("log")).unwrap_or_default();
                let durable = data.len() as u64 / 8;
                assert!(
                    durable >= acked,
                    "{op:?} #{nth} seed {seed}: acked {acked}, found {durable}"
                );
                for (i, record) in data.chunks_exact(8).enumerate() {
                    assert_eq!(record, (i as u64 + 1).to_le_bytes());
                }
            }
        }
    }
}

/// On Linux, /dev/full fails every write with ENOSPC: the real mapping and
/// the real latch, without filling a disk.
#[test]
fn real_enospc_maps_to_no_space_and_latches() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        return;
    }
    let storage = RealStorage::new();
    let file = storage.open(full).unwrap();
    let err = file.write_at(0, b"x").unwrap_err();
    assert!(matches!(err, StorageError::NoSpace { .. }), "{err:?}");
    assert!(matches!(file.sync(), Err(StorageError::PreviousIo)));
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(
        storage.list(tmp.path()),
        Err(StorageError::PreviousIo)
    ));
    // A fresh storage (a restart) is not latched.
    assert!(RealStorage::new().list(tmp.path()).unwrap().is_empty());
}

/// The parent of a bare relative name (`Path::new("db").parent()`) is the
/// empty path: syncing it syncs the working directory rather than failing
/// with "not found" (found by `epochdb crashtest --store hybridlog --dir
/// db`, which could not open its store).
#[test]
fn syncing_the_parent_of_a_bare_relative_name_syncs_the_working_directory() {
    let storage = RealStorage::new();
    let parent = Path::new("db").parent().expect("a relative name has one");
    assert!(parent.as_os_str().is_empty());
    storage.sync_dir(parent).unwrap();
    // And nothing latched.
    storage.sync_dir(Path::new(".")).unwrap();
}
