//! The engine's durable modes' images and harness: `silor` (SiloR's value
//! logs, pepoch file, fuzzy checkpoints in two directories), `log` (value
//! logs only) and `wal` (GRASSHOPPER's central log and its checkpoints).
//!
//! Each image is a deterministic one-worker workload over two tables —
//! puts of values of 1–70 bytes, updates, deletes, a checkpoint between
//! two batches where the mode has them — whose last commit was waited
//! durable, captured as the synced files after a power cut: recovery must
//! bring back exactly the workload's final state.

use std::collections::BTreeMap;
use std::ops::Bound::Unbounded;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::durability::{inspect_dir, inspect_file};
use epochdb_engine::{Config, Database, DurabilityKind, SilorOptions, WalOptions};
use epochdb_storage::{CrashMode, SimStorage, Storage};

use crate::damage::Damage;
use crate::image::{self, Image};

/// The images, by name (`images/NAME.img`), and their modes.
pub const IMAGES: [(&str, DurabilityKind); 3] = [
    ("engine-silor", DurabilityKind::Silor),
    ("engine-log", DurabilityKind::Log),
    ("engine-wal", DurabilityKind::Wal),
];

/// Where the images keep the database.
const ROOT: &str = "/db";

/// The tables and their rows: table name → key → value.
pub type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// The configuration of `mode` over `storage`: small log buffers, files
/// and checkpoint blocks so an image holds several of each; checkpoints
/// only when the workload asks.
pub fn config(mode: DurabilityKind, storage: Arc<dyn Storage>) -> Config {
    let dirs: Vec<PathBuf> = if mode == DurabilityKind::Wal {
        vec!["/db/a".into()]
    } else {
        vec!["/db/a".into(), "/db/b".into()]
    };
    Config {
        durability: mode,
        dirs,
        storage: Some(storage),
        epoch_interval: Duration::from_millis(1),
        workers: 1,
        wal: WalOptions {
            io_unit_bytes: 4 << 10,
            buffer_bytes: 64 << 10,
            hop_shift: 12,
            file_max_bytes: 16 << 10,
            ..WalOptions::default()
        },
        silor: SilorOptions {
            log_buffer_bytes: 4 << 10,
            rotate_epochs: 2,
            rotate_bytes: 1 << 20,
            checkpoint_interval: Duration::from_secs(3600),
            checkpoint_block_bytes: 4096,
            checkpoint_sync_bytes: 4 << 10,
            recovery_threads: 2,
            direct_io: mode != DurabilityKind::Log,
            ..SilorOptions::default()
        },
        ..Config::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

/// A change: table, key, new value (`None`: delete).
type Change = (&'static str, Vec<u8>, Option<Vec<u8>>);

/// The two batches of the workload (a checkpoint runs between them).
fn batches() -> [Vec<Change>; 2] {
    let mut first: Vec<Change> = (0..300u64)
        .map(|k| {
            (
                "t",
                key(k),
                Some(vec![(k % 251) as u8; (k % 40 + 1) as usize]),
            )
        })
        .collect();
    first.extend((0..50u64).map(|k| ("u", key(k), Some(k.to_le_bytes().repeat(2)))));
    let mut second: Vec<Change> = (0..300u64)
        .filter(|k| k % 3 == 0)
        .map(|k| ("t", key(k), Some(vec![0xab; 70])))
        .collect();
    second.extend((0..300u64).step_by(17).map(|k| ("t", key(k), None)));
    second.extend((50..80u64).map(|k| ("u", key(k), Some(vec![k as u8; 3]))));
    [first, second]
}

/// The state the workload leaves.
pub fn expected() -> Tables {
    let mut tables = Tables::new();
    for (table, key, value) in batches().into_iter().flatten() {
        let rows = tables.entry(table.to_string()).or_default();
        match value {
            Some(v) => drop(rows.insert(key, v)),
            None => drop(rows.remove(&key)),
        }
    }
    tables
}

/// Runs the workload in `mode` on a fresh simulated disk and captures
/// what a power cut at its end leaves.
pub fn build(mode: DurabilityKind) -> Image {
    let disk = SimStorage::new(1);
    let db = Database::open(config(mode, Arc::new(disk.clone()))).expect("open");
    let ids = [
        db.create_table("t").expect("t"),
        db.create_table("u").expect("u"),
    ];
    let mut worker = db.worker().expect("worker");
    for (i, batch) in batches().into_iter().enumerate() {
        if i == 1 && mode != DurabilityKind::Log {
            // An idle worker must leave the epoch table, or the checkpoint
            // waits for its epoch to end.
            worker.quiesce();
            db.checkpoint().expect("checkpoint");
        }
        let mut last = None;
        // Ten changes a transaction.
        for chunk in batch.chunks(10) {
            let ((), ticket) = worker
                .run(|tx| {
                    for (table, key, value) in chunk {
                        let id = ids[usize::from(*table == "u")];
                        match value {
                            Some(v) => tx.put(id, key, v)?,
                            None => drop(tx.delete(id, key)?),
                        }
                    }
                    Ok(())
                })
                .expect("commit");
            last = Some(ticket);
        }
        last.expect("a commit").wait().expect("durable");
    }
    let image = Image::capture(&disk.crash(CrashMode::DropUnsynced), Path::new(ROOT));
    drop(worker);
    drop(db);
    image.expect("capture")
}

/// Every row of every table, read in one transaction.
pub fn read_all(db: &Database) -> Result<Tables, String> {
    let mut worker = db.worker().map_err(|e| e.to_string())?;
    let mut out = Tables::new();
    for name in ["t", "u"] {
        let Some(table) = db.table(name) else {
            continue;
        };
        let (rows, _) = worker
            .run(|tx| {
                let rows = tx.scan_collect(table, Unbounded, Unbounded, usize::MAX)?;
                Ok(rows
                    .into_iter()
                    .map(|(k, v)| (k, v.to_vec()))
                    .collect::<BTreeMap<_, _>>())
            })
            .map_err(|e| e.to_string())?;
        out.insert(name.to_string(), rows);
    }
    Ok(out)
}

/// Opens a database in `mode` over `image`.
pub fn open(image: &Image, mode: DurabilityKind) -> Result<Database, String> {
    let disk = image.restore().map_err(|e| e.to_string())?;
    Database::open(config(mode, Arc::new(disk))).map_err(|e| e.to_string())
}

/// The loaded images, in [`IMAGES`] order.
pub fn images() -> &'static [Image] {
    static LOADED: std::sync::OnceLock<Vec<Image>> = std::sync::OnceLock::new();
    LOADED.get_or_init(|| IMAGES.iter().map(|(name, _)| image::load(name)).collect())
}

/// The fuzz target: damages an image as `data` says, lists it as
/// `epochdb inspect` would and opens the database over it; if recovery succeeds, reads every row, commits a
/// little (waiting a bounded time for durability) and checkpoints. Errors
/// are fine; a panic or a hang is the bug.
pub fn recover_damaged(data: &[u8]) {
    let damage = Damage::from_bytes(data);
    let which = usize::from(damage.image) % IMAGES.len();
    let image = damage.apply(&images()[which]);
    let mode = IMAGES[which].1;
    inspect(&image);
    let Ok(db) = open(&image, mode) else {
        return;
    };
    let _ = exercise(&db);
}

/// `epochdb inspect` over the damaged directories and each file (verbose):
/// its decoders are separate from recovery's.
fn inspect(image: &Image) {
    let Ok(disk) = image.restore() else { return };
    let mut out = String::new();
    for dir in ["/db/a", "/db/b"] {
        let _ = inspect_dir(&disk, Path::new(dir), &mut out);
    }
    for file in &image.files {
        out.clear();
        let _ = inspect_file(&disk, &file.path, true, &mut out);
    }
}

fn exercise(db: &Database) -> Result<(), String> {
    read_all(db)?;
    let table = match db.table("t") {
        Some(t) => t,
        None => db.create_table("t").map_err(|e| e.to_string())?,
    };
    let mut worker = db.worker().map_err(|e| e.to_string())?;
    let ((), ticket) = worker
        .run(|tx| {
            tx.put(table, &key(1), b"after")?;
            tx.delete(table, &key(2))?;
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    worker.quiesce();
    ticket
        .wait_timeout(Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    db.checkpoint().map_err(|e| e.to_string())
}
