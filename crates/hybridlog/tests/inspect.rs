//! `epochdb_hybridlog::inspect` over a store's real files: every kind is
//! listed and intact after checkpoints of both captures, and damage in each
//! synced file is reported where recovery would find it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use epochdb_hybridlog::inspect::{inspect_dir, inspect_file, is_store_dir, StoreFile};
use epochdb_hybridlog::{AddU64, CheckpointKind, Config, SimStorage, Storage, Store};

const KEYS: u64 = 5_000;
const DIR: &str = "/store";

fn config() -> Config {
    Config {
        index_buckets: 1 << 10,
        page_bits: 12,
        memory_bytes: 16 << 20,
        max_sessions: 2,
        ..Config::default()
    }
}

/// One session adds `input(key)` to every key in `keys`, then ends: a
/// checkpoint waits for every session to pass its phases, so none is open
/// while one runs here.
fn pass(store: &Store<AddU64>, keys: std::ops::Range<u64>, input: impl Fn(u64) -> u64) {
    let mut session = store.start_session().unwrap();
    for key in keys {
        session.rmw(&key.to_le_bytes(), input(key)).unwrap();
    }
    session.complete_pending(true).unwrap();
}

/// A store with a fold-over checkpoint (index included), more updates,
/// then a snapshot checkpoint; closed cleanly.
fn build(seed: u64) -> SimStorage {
    let disk = SimStorage::new(seed);
    let store = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(), AddU64).unwrap();
    pass(&store, 0..KEYS, |key| key);
    store
        .checkpoint_with(true, CheckpointKind::FoldOver)
        .unwrap();
    pass(&store, 0..KEYS / 2, |_| 1);
    store
        .checkpoint_with(false, CheckpointKind::Snapshot)
        .unwrap();
    drop(store);
    disk
}

fn names(disk: &SimStorage) -> Vec<String> {
    let mut names = disk.list(Path::new(DIR)).unwrap();
    names.sort();
    names
}

fn file_of(disk: &SimStorage, kind: StoreFile) -> PathBuf {
    let name = names(disk)
        .into_iter()
        .find(|n| StoreFile::of_name(n) == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} file in {:?}", names(disk)));
    Path::new(DIR).join(name)
}

#[test]
fn every_file_of_a_store_is_listed_intact() {
    let disk = build(1);
    assert!(is_store_dir(&names(&disk)));
    let mut out = String::new();
    let listing = inspect_dir(&disk, Path::new(DIR), &mut out).unwrap();
    let files = &listing.files;
    assert!(listing.problems.is_empty(), "{out}");
    for kind in [
        StoreFile::Metadata,
        StoreFile::Index,
        StoreFile::Snapshot,
        StoreFile::Sums,
        StoreFile::Log,
    ] {
        assert!(
            files.iter().any(|(_, f)| f.kind == kind),
            "no {kind}: {out}"
        );
    }
    for (name, file) in files {
        assert_eq!(file.damage, None, "{name}: {out}");
    }
    assert!(out.ends_with("0 corrupt\n"), "{out}");
    let log = files
        .iter()
        .find(|(_, f)| f.kind == StoreFile::Log)
        .map(|(_, f)| f)
        .unwrap();
    assert!(!log.detail.contains(" 0 checksummed"), "{out}");

    // The metadata lists every session with verbose.
    let mut out = String::new();
    let meta = file_of(&disk, StoreFile::Metadata);
    let summary = inspect_file(&disk, &meta, true, &mut out).unwrap();
    assert_eq!(summary.damage, None, "{out}");
    assert!(out.contains("    session 1: serial "), "{out}");
}

#[test]
fn damage_in_synced_files_is_corruption() {
    for kind in [
        StoreFile::Index,
        StoreFile::Log,
        StoreFile::Snapshot,
        StoreFile::Metadata,
    ] {
        let disk = build(2);
        let path = file_of(&disk, kind);
        let len = disk.len(&path).unwrap();
        // A bit in the middle: inside a checksummed block or log piece.
        disk.flip_bit(&path, len / 2 * 8 + 3).unwrap();
        let mut out = String::new();
        let summary = inspect_file(&disk, &path, false, &mut out).unwrap();
        assert!(summary.is_corrupt(), "{kind}: {out}");
        let mut listing = String::new();
        let found = inspect_dir(&disk, Path::new(DIR), &mut listing).unwrap();
        assert_eq!(found.corrupt(), 1, "{kind}: {listing}");
    }
}

#[test]
fn a_checkpoint_missing_its_files_is_reported() {
    let disk = build(5);
    disk.remove(&file_of(&disk, StoreFile::Index)).unwrap();
    let mut out = String::new();
    let listing = inspect_dir(&disk, Path::new(DIR), &mut out).unwrap();
    assert_eq!(listing.problems.len(), 1, "{out}");
    assert!(out.contains("which is missing"), "{out}");
    let opened = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(), AddU64);
    assert!(opened.is_err(), "recovery needs the index checkpoint too");
    let disk = build(6);
    disk.remove(&file_of(&disk, StoreFile::Snapshot)).unwrap();
    let mut out = String::new();
    let listing = inspect_dir(&disk, Path::new(DIR), &mut out).unwrap();
    assert_eq!(listing.corrupt(), 1, "{out}");
    assert!(out.contains("names the snapshot snap-"), "{out}");
}

#[test]
fn a_torn_tail_of_the_checksums_is_not_corruption() {
    let disk = build(3);
    let path = file_of(&disk, StoreFile::Sums);
    let mut file = disk.open(&path).unwrap();
    file.append(&[0x5A; 19]).unwrap();
    file.sync().unwrap();
    drop(file);
    let mut out = String::new();
    let summary = inspect_file(&disk, &path, false, &mut out).unwrap();
    let damage = summary.damage.clone().expect("the tail is reported");
    assert!(!damage.refused && !summary.is_corrupt(), "{out}");
    assert!(out.contains("torn tail at offset"), "{out}");
}

/// A checksum file whose last blocks (well framed) claim a piece shorter
/// than a record header, and a mark, inside the log recovery replays:
/// recovery and inspect report or accept them, never panic (before the fix
/// both hit a reversed range in `Claims::checks`).
#[test]
fn a_tiny_checksum_piece_is_no_panic() {
    let disk = SimStorage::new(4);
    let store = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(), AddU64).unwrap();
    pass(&store, 0..KEYS, |key| key);
    store
        .checkpoint_with(true, CheckpointKind::FoldOver)
        .unwrap();
    // More updates, then a log-only checkpoint: recovery replays them.
    pass(&store, 0..KEYS, |_| 1);
    store
        .checkpoint_with(false, CheckpointKind::FoldOver)
        .unwrap();
    drop(store);
    // In the log's last page, which recovery replays.
    let at = disk.len(&file_of(&disk, StoreFile::Log)).unwrap() - 4096 + 64;
    let path = file_of(&disk, StoreFile::Sums);
    let mut blocks = Vec::new();
    // The side file's framing: magic "HLSM", version 1; kind 1 pieces
    // (from, to, crc), kind 2 marks (addresses).
    let words = |list: &[u64]| {
        list.iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<u8>>()
    };
    epochdb_storage::encode_block(&mut blocks, 0x4d53_4c48, 1, 1, &words(&[at, at + 3, 0]));
    epochdb_storage::encode_block(&mut blocks, 0x4d53_4c48, 1, 2, &words(&[at]));
    let mut file = disk.open(&path).unwrap();
    file.append(&blocks).unwrap();
    file.sync().unwrap();
    drop(file);
    let mut out = String::new();
    let listing = inspect_dir(&disk, Path::new(DIR), &mut out).unwrap();
    assert!(listing.corrupt() >= 1, "{out}");
    assert!(out.contains("does not match its CRC32C"), "{out}");
    // Recovery checks the replayed range against the claims: before the
    // fix it panicked here (found by the fuzz corpus through inspect).
    let opened = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(), AddU64);
    assert!(opened.is_err(), "the claim does not match the log");
}
