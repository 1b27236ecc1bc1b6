//! `inspect_dir` and `inspect_file` on the `wal` mode's files: the central
//! log entry by entry with its records decoded, the SDL file's slots, and
//! damage judged as the mode's recovery judges it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::durability::{inspect_dir, inspect_file, Damage, FileFormat};
use epochdb_engine::{Config, Database, DurabilityKind, WalOptions};
use epochdb_storage::{SimStorage, Storage};

const KEYS: u64 = 40;

fn config(storage: &SimStorage) -> Config {
    Config {
        durability: DurabilityKind::Wal,
        dirs: vec![PathBuf::from("/db")],
        epoch_interval: Duration::from_millis(5),
        storage: Some(Arc::new(storage.clone()) as Arc<dyn Storage>),
        wal: WalOptions {
            io_unit_bytes: 4 << 10,
            buffer_bytes: 64 << 10,
            hop_shift: 12,
            file_max_bytes: 1 << 20,
            ..WalOptions::default()
        },
        ..Config::default()
    }
}

/// `KEYS` single-put commits, one commit deleting two of them, and a
/// clean shutdown. Returns the commits.
fn write_database(storage: &SimStorage) -> u64 {
    let db = Database::open(config(storage)).unwrap();
    let table = db.create_table("accounts").unwrap();
    let mut worker = db.worker().unwrap();
    for n in 0..KEYS {
        let ((), ticket) = worker
            .run(|tx| tx.put(table, &n.to_be_bytes(), &[7u8; 24]))
            .unwrap();
        ticket.wait().unwrap();
    }
    let (_, ticket) = worker
        .run(|tx| {
            tx.delete(table, &0u64.to_be_bytes())?;
            tx.delete(table, &1u64.to_be_bytes())
        })
        .unwrap();
    ticket.wait().unwrap();
    drop(worker);
    db.shutdown().unwrap();
    KEYS + 1
}

fn log_file(storage: &SimStorage) -> PathBuf {
    let wal = Path::new("/db/wal");
    let name = storage
        .list(wal)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".log"))
        .expect("a log file");
    wal.join(name)
}

#[test]
fn a_wal_database_is_listed_with_its_log_directory() {
    let storage = SimStorage::new(1);
    let commits = write_database(&storage);
    let mut out = String::new();
    let summary = inspect_dir(&storage, Path::new("/db"), &mut out).unwrap();
    assert_eq!(summary.corrupt(), 0, "{out}");
    let log = summary
        .files
        .iter()
        .find(|(name, _)| name.starts_with("wal/wal-") && name.ends_with(".log"))
        .map(|(_, file)| file)
        .unwrap_or_else(|| panic!("no log file listed: {out}"));
    assert_eq!(log.format, FileFormat::WalLog);
    assert_eq!(log.entries, commits, "{out}");
    assert_eq!(log.damage, None);
    assert!(log.detail.contains("1 table"), "{out}");
    assert!(
        log.detail.contains(&format!("{} writes", KEYS + 2)),
        "{out}"
    );
    let sdl = summary
        .files
        .iter()
        .find(|(name, _)| name == "wal/wal.sdl")
        .map(|(_, file)| file)
        .unwrap_or_else(|| panic!("no SDL file listed: {out}"));
    assert_eq!(sdl.format, FileFormat::WalSdl);
    assert!(sdl.detail.starts_with("SDL "), "{out}");
    assert!(!summary.skipped.iter().any(|n| n == "wal"), "{out}");
}

#[test]
fn a_log_file_lists_every_entry_and_write() {
    let storage = SimStorage::new(2);
    let commits = write_database(&storage);
    let mut out = String::new();
    let summary = inspect_file(&storage, &log_file(&storage), true, &mut out).unwrap();
    assert_eq!(summary.damage, None, "{out}");
    assert_eq!(out.matches(": commit 0x").count() as u64, commits, "{out}");
    assert!(out.contains("file header: starts at LSN 0"), "{out}");
    assert!(out.contains("table 0 \"accounts\""), "{out}");
    assert_eq!(out.matches("value 24 bytes").count() as u64, KEYS, "{out}");
    assert_eq!(out.matches(" delete").count(), 2, "{out}");
    assert!(out.ends_with("intact\n"), "{out}");
}

#[test]
fn damage_is_judged_as_recovery_judges_it() {
    // A flipped bit inside the durable prefix: corruption, refused by both.
    let storage = SimStorage::new(3);
    write_database(&storage);
    let log = log_file(&storage);
    let header = 4096u64; // the first file's header (format 2)
    storage.flip_bit(&log, (header + 100) * 8).unwrap();
    let mut out = String::new();
    let summary = inspect_file(&storage, &log, false, &mut out).unwrap();
    assert!(summary.is_corrupt(), "{out}");
    assert!(out.contains("below the persisted SDL"), "{out}");
    assert!(Database::open(config(&storage)).is_err());

    // Bytes past the persisted SDL in the last file: a torn tail, which
    // recovery cuts off.
    let storage = SimStorage::new(4);
    write_database(&storage);
    let log = log_file(&storage);
    let mut file = storage.open(&log).unwrap();
    file.append(&[0xAB; 37]).unwrap();
    file.sync().unwrap();
    drop(file);
    let mut out = String::new();
    let summary = inspect_file(&storage, &log, false, &mut out).unwrap();
    assert!(
        matches!(summary.damage, Some(Damage::TornTail { bytes: 37, .. })),
        "{out}"
    );
    assert!(!summary.is_corrupt());
    let db = Database::open(config(&storage)).unwrap();
    assert_eq!(
        db.recovery_report().unwrap().records,
        KEYS - 2,
        "recovery kept every acknowledged commit"
    );
}

#[test]
fn an_sdl_file_without_a_valid_slot_is_corrupt() {
    let storage = SimStorage::new(5);
    write_database(&storage);
    let sdl = Path::new("/db/wal/wal.sdl");
    // Damage both slots' payloads.
    storage.flip_bit(sdl, 20 * 8).unwrap();
    storage.flip_bit(sdl, (64 + 20) * 8).unwrap();
    let mut out = String::new();
    let summary = inspect_file(&storage, sdl, false, &mut out).unwrap();
    assert!(summary.is_corrupt(), "{out}");
    assert_eq!(out.matches("slot ").count(), 2, "{out}");
    assert!(Database::open(config(&storage)).is_err());
}

/// Makes the PUT record of key `n` malformed (its key length overruns the
/// record), the entry's checksum made valid again: damage only the record
/// decoder behind CRC32C sees.
fn break_put_record(storage: &SimStorage, log: &Path, n: u64) {
    let mut data = storage.read(log).unwrap();
    let mut needle = n.to_be_bytes().to_vec();
    needle.extend_from_slice(&24u32.to_le_bytes());
    needle.extend_from_slice(&[7u8; 24]);
    let key_at = data
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the put is logged");
    let magic = u32::from_le_bytes(data[..4].try_into().unwrap());
    let (block_at, block) = epochdb_storage::blocks(&data, magic)
        .map(Result::unwrap)
        .find(|(at, block)| {
            *at <= key_at && key_at < at + epochdb_storage::BLOCK_HEADER_BYTES + block.payload.len()
        })
        .expect("a block holds it");
    let (version, kind, len) = (block.version, block.kind, block.payload.len());
    data[key_at - 4..key_at].copy_from_slice(&200u32.to_le_bytes());
    let end = block_at + epochdb_storage::BLOCK_HEADER_BYTES + len;
    epochdb_storage::seal_block(&mut data[block_at..end], magic, version, kind);
    let file = storage.open(log).unwrap();
    file.write_at(block_at as u64, &data[block_at..end])
        .unwrap();
    file.sync().unwrap();
}

#[test]
fn a_malformed_record_the_checkpoint_covers_is_not_corruption() {
    for (n, covered) in [(3, true), (KEYS + 5, false)] {
        let storage = SimStorage::new(6);
        {
            let db = Database::open(config(&storage)).unwrap();
            let table = db.create_table("accounts").unwrap();
            let mut worker = db.worker().unwrap();
            for n in 0..2 * KEYS {
                let ((), ticket) = worker
                    .run(|tx| tx.put(table, &n.to_be_bytes(), &[7u8; 24]))
                    .unwrap();
                ticket.wait().unwrap();
                if n == KEYS {
                    db.checkpoint().unwrap();
                }
            }
            drop(worker);
            db.shutdown().unwrap();
        }
        let log = log_file(&storage);
        break_put_record(&storage, &log, n);
        let mut out = String::new();
        let summary = inspect_file(&storage, &log, true, &mut out).unwrap();
        let recovered = Database::open(config(&storage));
        if covered {
            assert!(!summary.is_corrupt(), "{out}");
            assert!(out.contains("not replayed"), "{out}");
            assert!(recovered.is_ok(), "{:?}", recovered.err());
        } else {
            assert!(summary.is_corrupt(), "{out}");
            assert!(recovered.is_err());
        }
    }
}
