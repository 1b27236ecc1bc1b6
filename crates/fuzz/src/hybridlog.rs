//! The HybridLog store's images and harness (cpr-sigmod19 §6.4 recovery:
//! checkpoint metadata, the fuzzy index file, log segments, snapshot files).
//!
//! Each image is a deterministic single-session workload over 8-byte and
//! variable-length keys (upserts, RMWs, deletes) with checkpoints of one
//! kind in between; it is captured as the synced files after a power cut,
//! so recovery must come back to the last checkpoint's state. The
//! `hybridlog-fixed` image's store has the fixed record layout (8-byte keys
//! and values only); the others have the variable one, and were made with
//! metadata format 3, before the layout was recorded (kept so that the
//! fuzzers and `tests/images.rs` read stores of that format too).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, RecordLayout, Session, SimStorage, Status, Storage,
    Store,
};

use crate::damage::Damage;
use crate::image::{self, Image};

/// The store's directory in every image.
pub const DIR: &str = "/hlog";
/// The images, by name (`images/NAME.img`).
pub const IMAGES: [&str; 4] = [
    "hybridlog-foldover",
    "hybridlog-snapshot",
    "hybridlog-truncated",
    "hybridlog-fixed",
];

/// The image whose store has the fixed record layout.
const FIXED_IMAGE: &str = "hybridlog-fixed";

/// The store's configuration: 4 KiB pages, eight of them in memory, 16 KiB
/// log segments and a small index, so the images hold evicted pages,
/// several segments and overflow buckets while staying a few hundred KiB.
pub fn config() -> Config {
    Config {
        index_buckets: 64,
        page_bits: 12,
        memory_bytes: 8 << 12,
        mutable_fraction: 0.5,
        max_sessions: 4,
        log_segment_bits: 14,
        recovery_threads: 2,
        huge_pages: false,
        ..Config::default()
    }
}

/// One step of a workload.
#[derive(Debug, Clone)]
enum Step {
    Upsert(Vec<u8>, Vec<u8>),
    Rmw(Vec<u8>, u64),
    Delete(Vec<u8>),
    Checkpoint {
        index: bool,
        kind: CheckpointKind,
    },
    /// Remember the tail: a later `ShiftBegin` truncates the log below it.
    MarkCut,
    ShiftBegin,
}

fn u64_key(k: u64) -> Vec<u8> {
    k.to_le_bytes().to_vec()
}

fn var_key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// Every key a workload touches.
pub fn keys() -> Vec<Vec<u8>> {
    (0..600).map(u64_key).chain((0..100).map(var_key)).collect()
}

/// The fixed layout's 8-byte counters only: no variable-length key or
/// value.
fn fixed_only(steps: Vec<Step>) -> Vec<Step> {
    steps
        .into_iter()
        .filter(|step| match step {
            Step::Upsert(k, v) => k.len() == 8 && v.len() == 8,
            Step::Rmw(k, _) | Step::Delete(k) => k.len() == 8,
            _ => true,
        })
        .collect()
}

/// Loads: 600 counters, 100 values of 0–49 bytes.
fn load() -> Vec<Step> {
    let mut steps: Vec<Step> = (0..600)
        .map(|k| Step::Upsert(u64_key(k), k.to_le_bytes().to_vec()))
        .collect();
    steps.extend((0..100).map(|i| Step::Upsert(var_key(i), vec![i as u8; (i % 50) as usize])));
    steps
}

/// Updates after a first checkpoint: RMWs, longer values, deletes.
fn churn(round: u64) -> Vec<Step> {
    let mut steps: Vec<Step> = (0..600)
        .filter(|k| k % 3 == round % 3)
        .map(|k| Step::Rmw(u64_key(k), 1000 + round))
        .collect();
    steps.extend(
        (0..100)
            .step_by(7)
            .map(|i| Step::Upsert(var_key(i), vec![round as u8; 60])),
    );
    steps.extend(
        (0..600)
            .step_by(41)
            .map(|k| Step::Delete(u64_key(k + round))),
    );
    steps
}

fn workload(name: &str) -> Vec<Step> {
    let checkpoint = |index, kind| Step::Checkpoint { index, kind };
    let mut steps = load();
    match name {
        "hybridlog-foldover" => {
            steps.push(checkpoint(true, CheckpointKind::FoldOver));
            steps.extend(churn(1));
            steps.push(checkpoint(false, CheckpointKind::FoldOver));
            steps.extend(churn(2));
        }
        "hybridlog-snapshot" => {
            steps.push(checkpoint(true, CheckpointKind::Snapshot));
            steps.extend(churn(1));
            steps.push(checkpoint(false, CheckpointKind::IncrementalSnapshot));
            steps.extend(churn(2));
            steps.push(checkpoint(false, CheckpointKind::IncrementalSnapshot));
            steps.extend(churn(3));
        }
        FIXED_IMAGE => {
            steps = fixed_only(steps);
            steps.push(checkpoint(true, CheckpointKind::FoldOver));
            steps.extend(fixed_only(churn(1)));
            steps.push(checkpoint(false, CheckpointKind::Snapshot));
            steps.extend(fixed_only(churn(2)));
            steps.push(checkpoint(false, CheckpointKind::IncrementalSnapshot));
            steps.extend(fixed_only(churn(3)));
        }
        "hybridlog-truncated" => {
            steps.push(checkpoint(true, CheckpointKind::Snapshot));
            steps.push(Step::MarkCut);
            steps.extend(load());
            steps.extend(churn(1));
            steps.push(Step::ShiftBegin);
            steps.push(checkpoint(false, CheckpointKind::FoldOver));
            steps.extend(churn(2));
        }
        _ => panic!("no HybridLog image {name}"),
    }
    steps
}

/// The state the last checkpoint of `name`'s workload committed.
pub fn committed(name: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut now = BTreeMap::new();
    let mut committed = BTreeMap::new();
    // Keys written since `MarkCut`, while one is pending.
    let mut since_cut: Option<BTreeSet<Vec<u8>>> = None;
    for step in workload(name) {
        let written = match &step {
            Step::Upsert(k, _) | Step::Rmw(k, _) | Step::Delete(k) => Some(k.clone()),
            _ => None,
        };
        if let (Some(cut), Some(k)) = (since_cut.as_mut(), written) {
            cut.insert(k);
        }
        match step {
            Step::Upsert(k, v) => drop(now.insert(k, v)),
            Step::Rmw(k, add) => {
                let old = now
                    .get(&k)
                    .and_then(|v: &Vec<u8>| v.get(..8))
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                now.insert(k, old.wrapping_add(add).to_le_bytes().to_vec());
            }
            Step::Delete(k) => drop(now.remove(&k)),
            Step::Checkpoint { .. } => committed = now.clone(),
            Step::MarkCut => since_cut = Some(BTreeSet::new()),
            Step::ShiftBegin => {
                // Keys written only below the cut are gone with the log.
                let kept = since_cut.take().unwrap_or_default();
                now.retain(|k, _| kept.contains(k));
            }
        }
    }
    committed
}

/// Drives a checkpoint from another thread while `session` refreshes.
fn checkpoint(
    store: &Store<AddU64>,
    session: &mut Session<AddU64>,
    index: bool,
    kind: CheckpointKind,
) -> epochdb_hybridlog::Result<()> {
    while session.pending() > 0 {
        session.complete_pending(true)?;
    }
    std::thread::scope(|scope| {
        let job = scope.spawn(|| store.checkpoint_with(index, kind));
        while !job.is_finished() {
            session.refresh();
            std::thread::yield_now();
        }
        job.join().expect("checkpoint thread").map(|_| ())
    })
}

/// Completes `status`'s request if it went pending.
fn settle(session: &mut Session<AddU64>, status: epochdb_hybridlog::Result<Status>) {
    if status.expect("request") == Status::Pending {
        session.complete_pending(true).expect("pending");
    }
}

/// Runs `name`'s workload on a fresh simulated disk and captures what a
/// power cut at its end leaves.
pub fn build(name: &str) -> Image {
    let disk = SimStorage::new(1);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let config = if name == FIXED_IMAGE {
        Config {
            record_layout: RecordLayout::Fixed {
                key_bytes: 8,
                value_bytes: 8,
            },
            ..config()
        }
    } else {
        config()
    };
    let store = Store::open(storage, Path::new(DIR), config, AddU64).expect("open");
    let mut session = store.start_session().expect("session");
    let mut cut = 0;
    for step in workload(name) {
        match step {
            // A request that went pending (its record was on disk) is
            // completed before the next: pending requests may finish after
            // later ones, and the model is sequential.
            Step::Upsert(k, v) => {
                let status = session.upsert(&k, &v);
                settle(&mut session, status)
            }
            Step::Rmw(k, add) => {
                let status = session.rmw(&k, add);
                settle(&mut session, status)
            }
            Step::Delete(k) => {
                let status = session.delete(&k);
                settle(&mut session, status)
            }
            Step::Checkpoint { index, kind } => {
                checkpoint(&store, &mut session, index, kind).expect("checkpoint")
            }
            Step::MarkCut => cut = store.addresses().tail,
            Step::ShiftBegin => {
                session.complete_pending(true).expect("pending");
                store.shift_begin_address(cut);
            }
        }
    }
    session.complete_pending(true).expect("pending");
    Image::capture(&disk.crash(CrashMode::DropUnsynced), Path::new(DIR)).expect("capture")
}

/// Every key's value, read through a new session (reads from disk
/// completed).
pub fn read_all(store: &Store<AddU64>) -> epochdb_hybridlog::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut session = store.start_session()?;
    let mut out = BTreeMap::new();
    let mut waiting = BTreeMap::new();
    let mut value = Vec::new();
    let fixed = store.record_layout() != RecordLayout::Variable;
    for key in keys() {
        if fixed && key.len() != 8 {
            continue;
        }
        match session.read(&key, &mut value)? {
            Status::Ok => drop(out.insert(key, value.clone())),
            Status::NotFound => {}
            Status::Pending => drop(waiting.insert(session.serial(), key)),
        }
    }
    for done in session.complete_pending(true)? {
        if let (Some(key), Some(value)) = (waiting.remove(&done.serial), done.value) {
            out.insert(key, value);
        }
    }
    Ok(out)
}

/// Opens the store over `image`.
pub fn open(image: &Image) -> epochdb_hybridlog::Result<Store<AddU64>> {
    let disk = image.restore()?;
    Store::open(Arc::new(disk), Path::new(DIR), config(), AddU64)
}

/// The loaded images, in [`IMAGES`] order.
pub fn images() -> &'static [Image] {
    static IMAGES_LOADED: std::sync::OnceLock<Vec<Image>> = std::sync::OnceLock::new();
    IMAGES_LOADED.get_or_init(|| IMAGES.iter().map(|name| image::load(name)).collect())
}

/// The fuzz target: damages an image as `data` says, lists it as `epochdb
/// inspect` would and recovers it; if
/// recovery succeeds, reads every key, continues the sessions it names,
/// writes a little and takes a checkpoint. Errors are fine; a panic or a
/// hang is the bug.
pub fn recover_damaged(data: &[u8]) {
    let damage = Damage::from_bytes(data);
    let images = images();
    let image = damage.apply(&images[usize::from(damage.image) % images.len()]);
    inspect(&image);
    let Ok(store) = open(&image) else { return };
    let _ = exercise(&store);
}

/// `epochdb inspect` over the damaged store and each of its files
/// (verbose): its decoders are separate from recovery's.
fn inspect(image: &Image) {
    let Ok(disk) = image.restore() else { return };
    let mut out = String::new();
    let _ = epochdb_hybridlog::inspect::inspect_dir(&disk, Path::new(DIR), &mut out);
    for file in &image.files {
        out.clear();
        let _ = epochdb_hybridlog::inspect::inspect_file(&disk, &file.path, true, &mut out);
    }
}

fn exercise(store: &Store<AddU64>) -> epochdb_hybridlog::Result<()> {
    let sessions = store
        .recovered()
        .map(|info| info.sessions.clone())
        .unwrap_or_default();
    read_all(store)?;
    for (id, _) in sessions.iter().take(2) {
        drop(store.continue_session(*id));
    }
    let mut session = store.start_session()?;
    for k in [0u64, 1, 599, 1000] {
        session.upsert(&u64_key(k), &k.to_le_bytes())?;
        session.rmw(&u64_key(k + 3), 5)?;
    }
    if store.record_layout() == RecordLayout::Variable {
        session.delete(&var_key(3))?;
    }
    checkpoint(store, &mut session, false, CheckpointKind::FoldOver)
}
