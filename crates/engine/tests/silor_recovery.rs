//! The `log` and `silor` modes end to end on real files: what a ticket
//! acknowledged survives a reopen, checkpoints install and truncate logs,
//! and recovery refuses what it must.

use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

mod common;

use common::{count_with_tag, key, rows, write_batch};
use epochdb_engine::{
    Config, Database, DurabilityError, DurabilityKind, OpenError, RecoveryPhase, RecoveryProgress,
    SilorOptions,
};

fn config(mode: DurabilityKind, dir: &Path) -> Config {
    Config {
        durability: mode,
        dirs: vec![dir.to_path_buf()],
        epoch_interval: Duration::from_millis(5),
        ..Config::default()
    }
}

/// How many files in `dir` have names starting with `prefix`.
fn files_named(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with(prefix)
        })
        .count()
}

#[test]
fn acknowledged_commits_survive_reopen_in_both_modes() {
    for mode in [DurabilityKind::Log, DurabilityKind::Silor] {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Database::open(config(mode, dir.path())).unwrap();
            write_batch(&db, 0, 500, 1);
        }
        let db = Database::open(config(mode, dir.path())).unwrap();
        let report = db.recovery_report().unwrap().clone();
        assert_eq!(report.records, 500, "{mode}: {report:?}");
        assert_eq!(count_with_tag(&db, 1), (500, 500));
        // Overwrite half, delete some, reopen again.
        write_batch(&db, 0, 250, 2);
        let table = db.table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let ((), ticket) = worker
            .run(|tx| {
                for n in 400..450 {
                    tx.delete(table, &key(n))?;
                }
                Ok(())
            })
            .unwrap();
        ticket.wait().unwrap();
        drop(worker);
        drop(db);
        let db = Database::open(config(mode, dir.path())).unwrap();
        assert_eq!(count_with_tag(&db, 2), (450, 250), "{mode}");
        assert_eq!(count_with_tag(&db, 1).1, 200, "{mode}");
    }
}

#[test]
fn a_log_rotates_by_size_and_recovery_replays_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let sized = |dir: &Path| Config {
        silor: SilorOptions {
            rotate_bytes: 1 << 20,
            // Never by epochs: the size alone rotates.
            rotate_epochs: 1_000_000,
            ..SilorOptions::default()
        },
        ..config(DurabilityKind::Log, dir)
    };
    let rows = 60_000;
    {
        let db = Database::open(sized(dir.path())).unwrap();
        // The logger checks the size only when its epoch advances, so one
        // fast burst may land in a single file however large. Waiting out
        // each batch of 3,000 (about 200 KB of log) makes every file hold
        // at most 1 MiB plus one batch, whatever the machine's speed.
        for from in (0..rows).step_by(3_000) {
            write_batch(&db, from, from + 3_000, 1);
        }
        let rotations = db.durability_stats().log_rotations;
        assert!(rotations >= 3, "{rotations} rotations");
    }
    let old_files = files_named(dir.path(), "old_data.");
    // Several MB of log in files of about 1 MiB.
    assert!(old_files >= 3, "{old_files} rotated files");
    let progress = Arc::new(RecoveryProgress::new());
    let db = Database::open(Config {
        recovery_progress: Some(progress.clone()),
        ..config(DurabilityKind::Log, dir.path())
    })
    .unwrap();
    let report = db.recovery_report().unwrap().clone();
    assert_eq!(report.records, rows, "{report:?}");
    assert_eq!(report.log_entries, rows, "{report:?}");
    // Every file's bytes counted once, by the threads that replayed them.
    assert_eq!(progress.phase(), RecoveryPhase::Done);
    assert_eq!(progress.bytes(), (report.log_bytes, report.log_bytes));
    assert_eq!(count_with_tag(&db, 1), (rows as usize, rows as usize));
}

/// One log file and four replay threads: three have no file of their own
/// and replay blocks the fourth hands them while it scans. Overwrites and
/// deletes land in different blocks, so the state is right only if every
/// handed block is applied and the largest TID wins whoever applies it.
#[test]
fn idle_replayers_share_the_blocks_of_one_long_log() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let mut model: BTreeMap<u64, u8> = BTreeMap::new();
    {
        let db = Database::open(config(DurabilityKind::Log, dir.path())).unwrap();
        let table = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let mut last = None;
        for pass in 1..=6u8 {
            for n in 0..3_000u64 {
                let delete = (n + u64::from(pass)) % 5 == 0;
                let ((), ticket) = worker
                    .run(|tx| {
                        if delete {
                            tx.delete(table, &key(n))?;
                        } else {
                            tx.put(table, &key(n), &[pass; 40])?;
                        }
                        Ok(())
                    })
                    .unwrap();
                if delete {
                    model.remove(&n);
                } else {
                    model.insert(n, pass);
                }
                last = Some(ticket);
            }
            // A few epochs between passes: more, smaller blocks.
            std::thread::sleep(Duration::from_millis(12));
        }
        last.unwrap().wait().unwrap();
    }
    assert_eq!(files_named(dir.path(), "old_data."), 0, "one log file");
    let four = |dir: &Path| Config {
        silor: SilorOptions {
            recovery_threads: 4,
            ..SilorOptions::default()
        },
        ..config(DurabilityKind::Log, dir)
    };
    // Whether a helper is waiting when a block is scanned is up to the
    // scheduler; each reopen replays the same log again (the `log` mode
    // keeps every file), so try a few times before calling sharing broken.
    let mut shared = 0;
    for _ in 0..5 {
        let db = Database::open(four(dir.path())).unwrap();
        let report = db.recovery_report().unwrap().clone();
        assert_eq!(report.log_threads, 4, "{report:?}");
        assert_eq!(report.records, model.len() as u64, "{report:?}");
        let recovered: BTreeMap<u64, u8> = rows(&db, "t")
            .iter()
            .map(|(k, v)| (u64::from_be_bytes(k[..].try_into().unwrap()), v[0]))
            .collect();
        assert_eq!(recovered, model);
        shared = report.log_blocks_shared;
        if shared > 0 {
            break;
        }
    }
    assert!(
        shared > 0,
        "no block was handed to an idle replayer in 5 recoveries"
    );
}

#[test]
fn checkpoint_files_per_table_count_every_core_when_threads_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    let pinned = Config {
        pin_threads: true,
        workers: 1,
        ..config(DurabilityKind::Silor, dir.path())
    };
    let db = Database::open(pinned).unwrap();
    write_batch(&db, 0, 20_000, 1);
    // The checkpointers run on the cores the worker leaves; recovery will
    // have every core, and loads one file of each table per thread.
    db.checkpoint().unwrap();
    let files = files_named(dir.path(), "ckpt.1.t0.");
    assert_eq!(files, cores);
}

#[test]
fn recovery_loads_a_checkpoint_of_many_files_with_the_threads_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let with = |files: usize, threads: usize| Config {
        silor: SilorOptions {
            checkpoint_files_per_table: files,
            recovery_threads: threads,
            ..SilorOptions::default()
        },
        ..config(DurabilityKind::Silor, dir.path())
    };
    {
        let db = Database::open(with(8, 0)).unwrap();
        write_batch(&db, 0, 20_000, 1);
        db.checkpoint().unwrap();
    }
    assert_eq!(files_named(dir.path(), "ckpt.1.t0."), 8);
    // A checkpoint written on a machine with more cores than recovery is
    // given: its eight files go to the two threads.
    let db = Database::open(with(8, 2)).unwrap();
    let report = db.recovery_report().unwrap().clone();
    assert_eq!(report.checkpoint_threads, 2, "{report:?}");
    assert_eq!(count_with_tag(&db, 1), (20_000, 20_000));
}

#[test]
fn checkpoint_installs_and_recovery_uses_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(config(DurabilityKind::Silor, dir.path())).unwrap();
        write_batch(&db, 0, 2000, 1);
        db.checkpoint().unwrap();
        write_batch(&db, 1000, 3000, 3);
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().any(|n| n == "checkpoint"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("ckpt.1.t0.")),
        "{names:?}"
    );
    let db = Database::open(config(DurabilityKind::Silor, dir.path())).unwrap();
    let report = db.recovery_report().unwrap().clone();
    assert!(report.checkpoint_epochs.is_some(), "{report:?}");
    assert!(report.checkpoint_bytes > 0, "{report:?}");
    assert_eq!(count_with_tag(&db, 1), (3000, 1000));
    assert_eq!(count_with_tag(&db, 3).1, 2000);
}

/// The ids of the checkpoint data files in `dir`.
fn checkpoint_ids(dir: &Path) -> std::collections::BTreeSet<u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("ckpt.")?.split('.').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn closing_mid_checkpoint_leaves_no_partial_checkpoint_behind() {
    let dir = tempfile::tempdir().unwrap();
    let busy = Config {
        silor: SilorOptions {
            checkpoint_interval: Duration::ZERO,
            ..SilorOptions::default()
        },
        ..config(DurabilityKind::Silor, dir.path())
    };
    {
        let db = Database::open(busy).unwrap();
        let table = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        for n in 0..1_000_000u64 {
            let ((), _) = worker.run(|tx| tx.put(table, &key(n), &[7; 100])).unwrap();
        }
        drop(worker);
        // Checkpoints follow each other back to back: close while one
        // (of a million keys, whose walk takes a while) is being written:
        // its first file has grown, it is not installed yet. (Checked: with
        // the removal taken out, its files were left behind.)
        loop {
            let next = db.durability_stats().checkpoints + 1;
            let first = dir.path().join(format!("ckpt.{next}.t0.0"));
            if std::fs::metadata(&first).is_ok_and(|m| m.len() > 0) {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    // What is left is the installed checkpoint, or none at all: the one
    // being written when the database closed was removed.
    let ids = checkpoint_ids(dir.path());
    let installed = dir.path().join("checkpoint").exists();
    assert!(ids.len() <= usize::from(installed), "{ids:?}");
    let db = Database::open(config(DurabilityKind::Silor, dir.path())).unwrap();
    assert_eq!(rows(&db, "t").len(), 1_000_000);
}

/// Rewrites the first block of `path` as of kind `kind`, its checksum made
/// valid again: damage only the decoders behind CRC32C can see.
fn reframe_first_block(path: &Path, kind: u16) {
    let mut bytes = std::fs::read(path).unwrap();
    let magic = u32::from_le_bytes(bytes[..4].try_into().unwrap());
    let version = u16::from_le_bytes(bytes[4..6].try_into().unwrap());
    let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let end = epochdb_storage::BLOCK_HEADER_BYTES + len;
    epochdb_storage::seal_block(&mut bytes[..end], magic, version, kind);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_checksummed_block_of_the_wrong_kind_is_refused_as_inspect_flags_it() {
    for file in ["pepoch", "checkpoint", "directory", "ckpt.1.t0.0"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Database::open(config(DurabilityKind::Silor, dir.path())).unwrap();
            write_batch(&db, 0, 100, 1);
            db.checkpoint().unwrap();
        }
        let path = dir.path().join(file);
        reframe_first_block(&path, 9);
        let mut listing = String::new();
        let storage = epochdb_storage::RealStorage::new();
        let summary =
            epochdb_engine::durability::inspect_file(&storage, &path, false, &mut listing).unwrap();
        assert!(summary.is_corrupt(), "{file}: {listing}");
        match Database::open(config(DurabilityKind::Silor, dir.path())) {
            Err(OpenError::Durability(DurabilityError::Corrupt(text))) => {
                assert!(text.contains("block kind 9"), "{file}: {text}");
            }
            Err(other) => panic!("{file}: {other}"),
            Ok(_) => panic!("{file}: a block of kind 9 was recovered"),
        }
    }
}

#[test]
fn log_mode_refuses_checkpoints_and_needs_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(config(DurabilityKind::Log, dir.path())).unwrap();
    assert!(db.checkpoint().is_err());
    drop(db);
    let mut no_dir = config(DurabilityKind::Log, dir.path());
    no_dir.dirs.clear();
    assert!(matches!(Database::open(no_dir), Err(OpenError::Config(_))));
}

#[test]
fn incompatible_format_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    drop(Database::open(config(DurabilityKind::Log, dir.path())).unwrap());
    // A catalog written by a future version 99, checksummed correctly.
    let mut bytes = Vec::new();
    let magic = u32::from_le_bytes(*b"eCAT");
    epochdb_storage::encode_block(&mut bytes, magic, 99, 1, &99u32.to_le_bytes());
    std::fs::write(dir.path().join("catalog"), &bytes).unwrap();
    match Database::open(config(DurabilityKind::Log, dir.path())) {
        Err(OpenError::Durability(DurabilityError::Incompatible(text))) => {
            assert!(text.contains("version 99"), "{text}");
        }
        other => panic!("expected an incompatible-format error, got {other:?}"),
    }
}

#[test]
fn a_clean_shutdown_makes_every_commit_durable() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(config(DurabilityKind::Log, dir.path())).unwrap();
        let table = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        for n in 0..100 {
            // Tickets dropped unawaited: the shutdown must cover them.
            let _ = worker
                .run(|tx| {
                    tx.put(table, &key(n), &[5; 40])?;
                    Ok(())
                })
                .unwrap();
        }
    }
    let db = Database::open(config(DurabilityKind::Log, dir.path())).unwrap();
    assert_eq!(count_with_tag(&db, 5), (100, 100));
}

mod sim {
    use super::*;
    use epochdb_storage::{FaultKind, FaultOp, SimStorage, Storage};
    use std::sync::Arc;

    fn sim_config(storage: &SimStorage) -> Config {
        Config {
            storage: Some(Arc::new(storage.clone()) as Arc<dyn Storage>),
            ..config(DurabilityKind::Log, Path::new("/db"))
        }
    }

    /// While nothing is logged the persistent epoch moves without syncing
    /// `pepoch` (an idle server with 1 ms epochs would sync it a thousand
    /// times a second); a checkpoint taken then still survives power loss,
    /// because installing it brings the file up to its `e_h` first.
    #[test]
    fn an_idle_log_does_not_sync_and_a_checkpoint_then_survives_power_loss() {
        let storage = SimStorage::new(7);
        let db = Database::open(Config {
            storage: Some(Arc::new(storage.clone()) as Arc<dyn Storage>),
            ..config(DurabilityKind::Silor, Path::new("/db"))
        })
        .unwrap();
        write_batch(&db, 0, 300, 1);
        let before_idle = db.persistent_epoch().unwrap();
        let syncs_before = storage.calls(FaultOp::Sync);
        // 5 ms epochs: about 30 epochs go by with nothing to log.
        std::thread::sleep(Duration::from_millis(150));
        let idle_syncs = storage.calls(FaultOp::Sync) - syncs_before;
        let after_idle = db.persistent_epoch().unwrap();
        assert!(
            after_idle >= before_idle + 5,
            "e_p must keep moving while idle: {before_idle} -> {after_idle}"
        );
        assert!(
            idle_syncs <= 2,
            "{idle_syncs} syncs while idle for {} epochs",
            after_idle - before_idle
        );
        // A read-only transaction of the current epoch is acknowledged
        // without anything new being logged.
        let table = db.table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let (_, read_ticket) = worker
            .run(|tx| Ok(tx.get(table, &key(3))?.is_some()))
            .unwrap();
        read_ticket.wait().unwrap();
        drop(worker);
        db.checkpoint().unwrap();
        let crashed = storage.crash(epochdb_storage::CrashMode::DropUnsynced);
        drop(db);
        let db = Database::open(Config {
            storage: Some(Arc::new(crashed) as Arc<dyn Storage>),
            ..config(DurabilityKind::Silor, Path::new("/db"))
        })
        .unwrap();
        let report = db.recovery_report().unwrap().clone();
        assert!(report.checkpoint_epochs.is_some(), "{report:?}");
        assert_eq!(count_with_tag(&db, 1), (300, 300));
    }

    /// A failed write or sync stops acknowledgements for good, and a full
    /// disk says so.
    #[test]
    fn io_errors_are_fail_stop_and_a_full_disk_is_named() {
        for (op, kind) in [
            (FaultOp::Sync, FaultKind::Eio),
            (FaultOp::Write, FaultKind::NoSpace),
        ] {
            let storage = SimStorage::new(1);
            let db = Database::open(sim_config(&storage)).unwrap();
            let table = db.create_table("t").unwrap();
            let mut worker = db.worker().unwrap();
            let ((), first) = worker
                .run(|tx| {
                    tx.put(table, b"a", b"1")?;
                    Ok(())
                })
                .unwrap();
            first.wait().unwrap();
            storage.fail_nth(op, 1, kind);
            let mut failures = Vec::new();
            for n in 0..200u64 {
                let ((), ticket) = worker
                    .run(|tx| {
                        tx.put(table, &key(n), b"2")?;
                        Ok(())
                    })
                    .unwrap();
                if let Err(error) = ticket.wait() {
                    failures.push(error);
                    break;
                }
            }
            let error = failures.pop().expect("a commit after the fault must fail");
            match kind {
                FaultKind::NoSpace => {
                    assert!(matches!(error, DurabilityError::NoSpace(_)), "{error}")
                }
                _ => assert!(matches!(error, DurabilityError::Io(_)), "{error}"),
            }
            // Later commits are never acknowledged either.
            let ((), later) = worker
                .run(|tx| {
                    tx.put(table, b"z", b"3")?;
                    Ok(())
                })
                .unwrap();
            assert!(later.wait().is_err());
            assert!(
                first.is_durable().unwrap(),
                "durable before the fault stays so"
            );
        }
    }

    fn write_and_close(storage: &SimStorage, rows: u64) {
        let db = Database::open(sim_config(storage)).unwrap();
        write_batch(&db, 0, rows, 7);
    }

    /// Damage inside the synced prefix of `data.log` (which pepoch records)
    /// is corruption and refused, never mistaken for a torn tail; garbage
    /// past it is a torn tail and discarded.
    #[test]
    fn synced_damage_is_refused_and_a_torn_tail_is_not() {
        for bit_offset in [40u64, 300, 2_000] {
            let storage = SimStorage::new(bit_offset);
            write_and_close(&storage, 300);
            let path = Path::new("/db/data.log");
            let len = storage.len(path).unwrap();
            assert!(len * 8 > bit_offset * 8 + 8, "data.log has {len} bytes");
            // A bit inside a block of the synced prefix.
            storage.flip_bit(path, bit_offset * 8 + 3).unwrap();
            match Database::open(sim_config(&storage)) {
                Err(OpenError::Durability(DurabilityError::Corrupt(text))) => {
                    assert!(text.contains("data.log"), "{text}");
                }
                other => panic!("flip at byte {bit_offset}: expected corruption, got {other:?}"),
            }
        }

        let storage = SimStorage::new(99);
        write_and_close(&storage, 300);
        let path = Path::new("/db/data.log");
        let mut file = storage.open(path).unwrap();
        file.append(b"eLOG\x01\x00\x01\x00garbage of a torn write")
            .unwrap();
        file.sync().unwrap();
        drop(file);
        let db = Database::open(sim_config(&storage)).unwrap();
        let report = db.recovery_report().unwrap();
        assert!(report.torn_tail_bytes > 0, "{report:?}");
        assert_eq!(count_with_tag(&db, 7), (300, 300));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Recovery never panics on damaged files: flipped bits and random
        /// tails anywhere make it succeed or refuse, nothing else.
        #[test]
        fn recovery_never_panics_on_damage(
            seed in 0u64..1_000,
            flips in proptest::collection::vec((0usize..6, 0u64..1 << 20), 1..4),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let storage = SimStorage::new(seed);
            {
                let mut config = sim_config(&storage);
                config.durability = DurabilityKind::Silor;
                let db = Database::open(config).unwrap();
                write_batch(&db, 0, 200, 1);
                db.checkpoint().unwrap();
                write_batch(&db, 100, 300, 2);
            }
            let files = storage.list(Path::new("/db")).unwrap();
            for (which, bit) in flips {
                let path = Path::new("/db").join(&files[which % files.len()]);
                let bits = storage.len(&path).unwrap() * 8;
                if bits > 0 {
                    storage.flip_bit(&path, bit % bits).unwrap();
                }
            }
            let mut file = storage.open(Path::new("/db/data.log")).unwrap();
            file.append(&tail).unwrap();
            file.sync().unwrap();
            drop(file);
            let mut config = sim_config(&storage);
            config.durability = DurabilityKind::Silor;
            // Either outcome is fine; a panic is not.
            let _ = Database::open(config);
        }
    }
}

#[test]
fn a_missing_or_reordered_directory_is_refused() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mut two = config(DurabilityKind::Log, a.path());
    two.dirs.push(b.path().to_path_buf());
    {
        let db = Database::open(two.clone()).unwrap();
        write_batch(&db, 0, 50, 1);
    }
    match Database::open(config(DurabilityKind::Log, a.path())) {
        Err(OpenError::Durability(DurabilityError::Incompatible(text))) => {
            assert!(text.contains("directory 0 of 2"), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The same directories in the other order are refused too.
    let mut swapped = config(DurabilityKind::Log, b.path());
    swapped.dirs.push(a.path().to_path_buf());
    match Database::open(swapped) {
        Err(OpenError::Durability(DurabilityError::Incompatible(text))) => {
            assert!(text.contains("given as directory 0 of 2"), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let db = Database::open(two).unwrap();
    assert_eq!(count_with_tag(&db, 1), (50, 50));
}

#[test]
fn a_database_open_elsewhere_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(config(DurabilityKind::Log, dir.path())).unwrap();
    match Database::open(config(DurabilityKind::Log, dir.path())) {
        Err(OpenError::Durability(DurabilityError::InUse(text))) => {
            assert!(text.contains("LOCK"), "{text}");
        }
        other => panic!("expected the directory to be in use, got {other:?}"),
    }
    drop(db);
    Database::open(config(DurabilityKind::Log, dir.path())).expect("free after close");
}
