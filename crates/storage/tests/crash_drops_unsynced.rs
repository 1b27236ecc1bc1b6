//! Why: every durability mode's correctness rests on the simulated disk
//! forgetting exactly what a real power loss may forget — unsynced bytes and
//! names whose directory was not synced — and never anything synced.

use std::path::{Path, PathBuf};

use epochdb_storage::{CrashMode, SimStorage, Storage, StorageError};

/// A disk with a durable, empty `/db`.
fn fresh(seed: u64) -> (SimStorage, PathBuf) {
    let disk = SimStorage::new(seed);
    let dir = PathBuf::from("/db");
    disk.create_dir_all(&dir).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    (disk, dir)
}

#[test]
fn unsynced_bytes_are_dropped_synced_bytes_kept() {
    let (disk, dir) = fresh(1);
    let path = dir.join("log");
    let mut file = disk.create(&path).unwrap();
    disk.sync_dir(&dir).unwrap();
    file.append(b"synced").unwrap();
    file.sync().unwrap();
    file.append(b" lost").unwrap();
    file.write_at(0, b"S").unwrap();
    assert_eq!(disk.read(&path).unwrap(), b"Synced lost");

    let disk = disk.crash(CrashMode::DropUnsynced);
    assert_eq!(disk.read(&path).unwrap(), b"synced");
}

#[test]
fn unsynced_truncate_is_dropped() {
    let (disk, dir) = fresh(2);
    let path = dir.join("f");
    let mut file = disk.create(&path).unwrap();
    disk.sync_dir(&dir).unwrap();
    file.append(b"0123456789").unwrap();
    file.sync().unwrap();
    file.truncate(3).unwrap();
    let disk = disk.crash(CrashMode::DropUnsynced);
    assert_eq!(disk.len(&path).unwrap(), 10);
}

#[test]
fn create_without_dir_sync_is_lost_even_if_file_synced() {
    let (disk, dir) = fresh(3);
    let path = dir.join("new");
    let mut file = disk.create(&path).unwrap();
    file.append(b"data").unwrap();
    file.sync().unwrap();
    let disk = disk.crash(CrashMode::DropUnsynced);
    assert!(!disk.exists(&path).unwrap());
    assert!(disk.list(&dir).unwrap().is_empty());
}

#[test]
fn rename_without_dir_sync_is_lost() {
    let (disk, dir) = fresh(4);
    let (tmp, fin) = (dir.join("ckpt.tmp"), dir.join("ckpt"));
    let mut file = disk.create(&tmp).unwrap();
    file.append(b"checkpoint").unwrap();
    file.sync().unwrap();
    disk.sync_dir(&dir).unwrap();
    disk.rename(&tmp, &fin).unwrap();

    let after = disk.crash(CrashMode::DropUnsynced);
    assert_eq!(after.list(&dir).unwrap(), vec!["ckpt.tmp".to_string()]);

    // The same sequence with the directory synced survives.
    after.rename(&tmp, &fin).unwrap();
    after.sync_dir(&dir).unwrap();
    let again = after.crash(CrashMode::DropUnsynced);
    assert_eq!(again.list(&dir).unwrap(), vec!["ckpt".to_string()]);
    assert_eq!(again.read(&fin).unwrap(), b"checkpoint");
}

#[test]
fn remove_without_dir_sync_is_undone() {
    let (disk, dir) = fresh(5);
    let path = dir.join("old");
    let mut file = disk.create(&path).unwrap();
    file.append(b"x").unwrap();
    file.sync().unwrap();
    disk.sync_dir(&dir).unwrap();
    disk.remove(&path).unwrap();
    let disk = disk.crash(CrashMode::DropUnsynced);
    assert_eq!(disk.read(&path).unwrap(), b"x");
}

#[test]
fn new_directory_needs_its_parent_synced() {
    let (disk, dir) = fresh(6);
    let sub = dir.join("part-1");
    disk.create_dir_all(&sub).unwrap();
    let path = sub.join("f");
    let mut file = disk.create(&path).unwrap();
    file.append(b"x").unwrap();
    file.sync().unwrap();
    disk.sync_dir(&sub).unwrap();
    // `dir` itself was never synced after mkdir: the whole subtree is lost.
    let after = disk.crash(CrashMode::DropUnsynced);
    assert!(!after.exists(&sub).unwrap());

    after.create_dir_all(&sub).unwrap();
    let mut file = after.create(&path).unwrap();
    file.append(b"y").unwrap();
    file.sync().unwrap();
    after.sync_dir(&sub).unwrap();
    after.sync_dir(&dir).unwrap();
    let again = after.crash(CrashMode::DropUnsynced);
    assert_eq!(again.read(&path).unwrap(), b"y");
}

#[test]
fn handles_from_before_the_crash_are_dead() {
    let (disk, dir) = fresh(7);
    let path = dir.join("f");
    let mut file = disk.create(&path).unwrap();
    disk.sync_dir(&dir).unwrap();
    let after = disk.crash(CrashMode::DropUnsynced);
    assert!(matches!(
        file.append(b"zombie"),
        Err(StorageError::Io { .. })
    ));
    assert!(matches!(file.sync(), Err(StorageError::Io { .. })));
    assert!(matches!(
        disk.create(&dir.join("g")),
        Err(StorageError::Io { .. })
    ));
    assert_eq!(after.len(&path).unwrap(), 0);
    assert_eq!(after.list(&dir).unwrap(), vec!["f".to_string()]);
}

/// Appends `count` 8-byte records, syncing after the first `synced`; then
/// renames a synced file without syncing the directory. Returns the disk
/// after a torn crash: (log bytes, whether the rename survived).
fn torn_run(seed: u64, synced: usize, count: usize) -> (Vec<u8>, bool) {
    let (disk, dir) = fresh(seed);
    let log = dir.join("log");
    let mut file = disk.create(&log).unwrap();
    let other = disk.create(&dir.join("a")).unwrap();
    other.sync().unwrap();
    disk.sync_dir(&dir).unwrap();
    for i in 0..count {
        file.append(&(i as u64).to_le_bytes()).unwrap();
        if i + 1 == synced {
            file.sync().unwrap();
        }
    }
    disk.rename(&dir.join("a"), &dir.join("b")).unwrap();
    let after = disk.crash(CrashMode::TearUnsynced);
    let renamed = after.exists(&dir.join("b")).unwrap();
    // A rename is atomic: the file is under exactly one of its names.
    assert_ne!(renamed, after.exists(&dir.join("a")).unwrap());
    (after.read(&log).unwrap(), renamed)
}

#[test]
fn torn_crash_keeps_synced_prefix_and_a_prefix_of_the_rest() {
    let (synced, count) = (5, 20);
    let mut expected = Vec::new();
    for i in 0..count as u64 {
        expected.extend_from_slice(&i.to_le_bytes());
    }
    let mut lengths = std::collections::BTreeSet::new();
    let mut renames = std::collections::BTreeSet::new();
    for seed in 0..300 {
        let (bytes, renamed) = torn_run(seed, synced, count);
        assert!(bytes.len() >= synced * 8, "seed {seed}: synced bytes lost");
        assert!(expected.starts_with(&bytes), "seed {seed}: not a prefix");
        lengths.insert(bytes.len());
        renames.insert(renamed);
    }
    // Both extremes and torn lengths in between occur.
    assert!(lengths.contains(&(synced * 8)));
    assert!(lengths.contains(&(count * 8)));
    assert!(lengths.iter().any(|len| len % 8 != 0));
    assert_eq!(
        renames.len(),
        2,
        "an unsynced rename should sometimes survive"
    );
}

#[test]
fn same_seed_same_crash() {
    for seed in 0..20 {
        assert_eq!(torn_run(seed, 3, 12), torn_run(seed, 3, 12));
    }
}
