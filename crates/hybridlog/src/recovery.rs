//! Recovery from a CPR checkpoint (cpr-sigmod19 §6.4).
//!
//! Decision table, newest metadata file first:
//!
//! | what is found                           | what recovery does                   |
//! |-----------------------------------------|--------------------------------------|
//! | no `cpr-*.meta`                         | a fresh, empty store                 |
//! | `*.tmp` files                           | an unfinished checkpoint: removed    |
//! | newest metadata fails its checksum      | `Error::Corrupted` (file, offset)    |
//! | its index file is missing or corrupt    | `Error::Corrupted` / `Storage`       |
//! | the log is shorter than `l_e`           | `Error::Corrupted` (log, offset)     |
//! | a record in `[l_h, l_e)` is malformed   | `Error::Corrupted` (log, offset)     |
//! | log bytes replayed fail their checksum  | `Error::Corrupted` (log, piece start)|
//! | a replayed byte has no checksum         | `Error::Corrupted` (`log.sums` where |
//! |                                         | a block was unreadable, else log)    |
//!
//! Metadata is renamed into place only after everything it names is synced,
//! so an interrupted checkpoint leaves no metadata and is simply not seen:
//! the previous whole checkpoint is used.
//!
//! Steps: load the fuzzy index; read `log.sums` (`sums.rs`); replay the
//! log from `l_h` to `l_e`, checking each page's checksums and setting
//! each record's index entry — except version-(v+1) records at or above
//! `l_s`, which are marked invalid, in memory and on disk (§6.4); load the
//! partial last page; restore the session table. Loading the index and
//! the replay run on `Config::recovery_threads` threads while the files
//! are read ahead in large chunks (`index_load.rs`, `replay.rs`).

use std::path::Path;

use std::sync::Arc;

use epochdb_storage::{Storage, StorageFile};

use crate::address::FIRST_ADDRESS;
use crate::checkpoint::{
    self, index_name, meta_name, parse_meta_name, parse_snap_name, snap_name, Metadata,
    SPARE_INDEX_NAME, SPARE_SNAPSHOT_NAME,
};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::index_load::read_index;
use crate::record::Header;
use crate::replay::{replay, replay_threads};
use crate::segment::{SegmentedFile, LOG_NAME};
use crate::store::{Config, FRESH_TAIL};
use crate::sums::{self, piece_spans, Check, Claims, Piece, Sums, SUMS_NAME};

/// The segment size a new log uses: `requested` (0: one file), at least a
/// page.
pub(crate) fn segment_bits(requested: u32, page_bits: u32) -> u32 {
    if requested == 0 {
        0
    } else {
        requested.max(page_bits)
    }
}

/// What recovery hands to `Store::open`.
pub(crate) struct RecoveredState {
    pub(crate) meta: Option<Metadata>,
    pub(crate) index: Index,
    pub(crate) file: SegmentedFile,
    pub(crate) sums: Sums,
    pub(crate) page_bits: u32,
    pub(crate) tail: u64,
    pub(crate) last_page: Vec<u8>,
    pub(crate) log_bytes: u64,
    pub(crate) index_bytes: u64,
    pub(crate) invalidated: usize,
    pub(crate) snapshot_bytes: u64,
    pub(crate) index_time: std::time::Duration,
    pub(crate) replay_time: std::time::Duration,
    pub(crate) replay_threads: usize,
}

pub(crate) fn recover(
    storage_arc: &Arc<dyn Storage>,
    dir: &Path,
    config: &Config,
) -> Result<RecoveredState> {
    let storage = storage_arc.as_ref();
    let names = storage.list(dir)?;
    let mut removed = false;
    for name in names
        .iter()
        .filter(|n| n.ends_with(epochdb_storage::TMP_SUFFIX))
    {
        storage.remove(&dir.join(name))?;
        removed = true;
    }
    let newest = names.iter().filter_map(|n| parse_meta_name(n)).max();
    let Some(version) = newest else {
        // A fresh store: any log bytes (and snapshot files) from a life
        // without a checkpoint are unreachable; start with no log files.
        for name in &names {
            let log_file = name == LOG_NAME
                || name == SUMS_NAME
                || (name.starts_with("log-") && name.ends_with(".seg"));
            if log_file || parse_snap_name(name).is_some() {
                storage.remove(&dir.join(name))?;
                removed = true;
            }
        }
        let bits = segment_bits(config.log_segment_bits, config.page_bits);
        let file = SegmentedFile::open(storage_arc.clone(), dir, bits)?;
        if removed {
            storage.sync_dir(dir)?;
        }
        let sums = Sums::install(storage_arc.clone(), dir, Claims::default())?;
        return Ok(RecoveredState {
            meta: None,
            index: Index::new_in(config.index_buckets, config.huge_pages),
            file,
            sums,
            page_bits: config.page_bits,
            tail: FRESH_TAIL,
            last_page: Vec::new(),
            log_bytes: 0,
            index_bytes: 0,
            invalidated: 0,
            snapshot_bytes: 0,
            index_time: std::time::Duration::ZERO,
            replay_time: std::time::Duration::ZERO,
            replay_threads: 0,
        });
    };
    let meta = checkpoint::read_metadata(storage, &dir.join(meta_name(version)))?;
    let index_path = dir.join(index_name(meta.index_id));
    let threads = replay_threads(config.recovery_threads);
    let started = std::time::Instant::now();
    let (index, index_bytes) = read_index(
        storage,
        &index_path,
        threads,
        config.huge_pages,
        config.direct_io,
    )?;
    let index_time = started.elapsed();
    let file = SegmentedFile::open(storage_arc.clone(), dir, meta.segment_bits)?;
    let log_path = file.path().to_path_buf();
    let page_bits = meta.page_bits;
    let started = std::time::Instant::now();
    let (mut claims, checks) = log_checks(storage, dir, &file, &log_path, &meta)?;
    let check_time = started.elapsed();
    let (snapshot_bytes, restored) = restore_snapshot(storage, dir, &file, &meta)?;
    let started = std::time::Instant::now();
    let invalid = replay(
        &file,
        &log_path,
        &index,
        &meta,
        threads,
        config.direct_io,
        &checks,
    )?;
    let replay_time = started.elapsed() + check_time;
    // What the log holds now, for the checkpoints to come: the restored
    // snapshot pieces, nothing above l_e (written again once the store
    // runs), and the marks below, made durable before the log changes.
    for piece in restored {
        claims.add_piece(piece);
    }
    claims.keep_between(meta.begin, meta.l_e);
    for &address in &invalid {
        claims.add_mark(address);
    }
    let sums = Sums::install(storage_arc.clone(), dir, claims)?;
    for &address in &invalid {
        let mut word = [0u8; 8];
        file.read_at(address, &mut word)?;
        let header = Header(u64::from_le_bytes(word)).with_invalid();
        file.write_at(address, &header.0.to_le_bytes())?;
    }
    // Neither these marks nor the restored snapshot pieces are synced
    // here: until the next checkpoint's metadata (which syncs the log files
    // first) they are redone by any later recovery from the same
    // checkpoint, whose files stay until then.
    if removed {
        storage.sync_dir(dir)?;
    }
    let page_start = (meta.l_e >> page_bits) << page_bits;
    let mut last_page = vec![0u8; (meta.l_e - page_start) as usize];
    // Nothing is ever written below the first address.
    let start = page_start.max(FIRST_ADDRESS).min(meta.l_e);
    let tail_part = &mut last_page[(start - page_start) as usize..];
    let n = file.read_at(start, tail_part)?;
    if n < tail_part.len() {
        return Err(Error::Corrupted {
            file: log_path,
            offset: start + n as u64,
            reason: format!("log ends before the checkpoint's end {}", meta.l_e),
        });
    }
    Ok(RecoveredState {
        tail: meta.l_e,
        log_bytes: meta.l_e - meta.l_h,
        index_bytes,
        invalidated: invalid.len(),
        snapshot_bytes,
        index_time,
        replay_time,
        replay_threads: threads,
        meta: Some(meta),
        index,
        file,
        sums,
        page_bits,
        last_page,
    })
}

/// A snapshot checkpoint (Appendix C): copies every piece of
/// `[snapshot start, l_e)` from the snapshot files its map names (composing
/// an incremental chain) into the log file at its address, so that the log
/// file holds version v up to `l_e` and records there can be read from
/// disk like any other. Returns the bytes copied. Not synced here: the next
/// checkpoint syncs the log files before its metadata, and until then the
/// snapshot files are kept and a recovery copies them again.
/// The log file's bytes in that range (flushed after the checkpoint, with
/// later in-place updates) are overwritten; doing it again after a crash
/// gives the same file.
fn restore_snapshot(
    storage: &dyn Storage,
    dir: &Path,
    log: &dyn StorageFile,
    meta: &Metadata,
) -> Result<(u64, Vec<Piece>)> {
    let Some(map) = &meta.snapshot else {
        return Ok((0, Vec::new()));
    };
    let mut restored = Vec::with_capacity(map.pieces.len());
    let mut files: std::collections::HashMap<u32, Box<dyn StorageFile>> =
        std::collections::HashMap::new();
    let mut buf = Vec::new();
    let mut bytes = 0;
    for piece in &map.pieces {
        let file = match files.entry(piece.file) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(storage.open(&dir.join(snap_name(piece.file)))?)
            }
        };
        checkpoint::read_piece(file.as_ref(), piece, &mut buf)?;
        // Nothing is ever written below the first address.
        let skip = FIRST_ADDRESS.saturating_sub(piece.address).min(piece.bytes) as usize;
        log.write_at(piece.address + skip as u64, &buf[skip..])?;
        let start = piece.address + skip as u64;
        for (from, to) in piece_spans(start, piece.address + buf.len() as u64) {
            let bytes = &buf[(from - piece.address) as usize..(to - piece.address) as usize];
            restored.push(Piece::of(from, bytes));
        }
        bytes += piece.bytes;
    }
    Ok((bytes, restored))
}

/// The checksums of the log bytes replay reads (`sums.rs`): the claims of
/// `log.sums`, and the checks of the pieces below the end of what the log
/// file holds of the checkpoint (`l_e`, or a snapshot's start), from the
/// first page replay reads. A piece that runs past `l_e` is checked here,
/// and replaced in the claims by its part below `l_e`. If the metadata
/// says the log has checksums, a byte of `[max(l_h, begin), end)` without
/// one is corruption (of `log.sums`, where a block was unreadable).
fn log_checks(
    storage: &dyn Storage,
    dir: &Path,
    file: &dyn StorageFile,
    log_path: &Path,
    meta: &Metadata,
) -> Result<(Claims, Vec<Check>)> {
    let read = sums::read(storage, dir)?;
    let mut claims = read.claims;
    let end = meta
        .snapshot
        .as_ref()
        .map_or(meta.l_e, |map| map.start.min(meta.l_e));
    let first = meta.l_h.max(meta.begin).max(FIRST_ADDRESS);
    if first >= end {
        return Ok((claims, Vec::new()));
    }
    if !meta.log_sums {
        // A store from before the log had checksums: what it holds now is
        // all there is to trust; checksummed once here, a block at a time.
        let mut bytes = Vec::new();
        for (at, to) in piece_spans(first, end) {
            bytes.resize((to - at) as usize, 0);
            if file.read_at(at, &mut bytes)? < bytes.len() {
                break;
            }
            claims.add_piece(Piece::of(at, &bytes));
        }
        return Ok((claims, Vec::new()));
    }
    if let Some(gap) = claims.first_gap(first, end) {
        return Err(match read.damage {
            Some((offset, reason)) => Error::Corrupted {
                file: dir.join(SUMS_NAME),
                offset,
                reason: format!("{reason}; log bytes from {gap} have no checksum"),
            },
            None => Error::Corrupted {
                file: log_path.to_path_buf(),
                offset: gap,
                reason: format!("no checksum recorded for log bytes from {gap}"),
            },
        });
    }
    let mut checks = claims.checks((first >> meta.page_bits) << meta.page_bits, end);
    if let Some(check) = checks
        .iter()
        .find(|c| c.piece.from >> meta.page_bits != (c.piece.to - 1) >> meta.page_bits)
    {
        // Every piece lies on one page: this claim was damaged.
        return Err(Error::Corrupted {
            file: dir.join(SUMS_NAME),
            offset: 0,
            reason: format!(
                "a checksum for log bytes [{}, {}) spans pages",
                check.piece.from, check.piece.to
            ),
        });
    }
    if let Some(last) = checks.last().filter(|c| c.piece.to > end).cloned() {
        checks.pop();
        let mut bytes = Vec::new();
        check_on_disk(file, log_path, &last, &mut bytes)?;
        claims.add_piece(Piece::of(
            last.piece.from,
            &bytes[..(end - last.piece.from) as usize],
        ));
    }
    Ok((claims, checks))
}

/// Reads `check`'s piece from `file` into `bytes` and checks it: a short
/// read or a mismatch is the piece's [`piece_mismatch`].
pub(crate) fn check_on_disk(
    file: &dyn StorageFile,
    log_path: &Path,
    check: &Check,
    bytes: &mut Vec<u8>,
) -> Result<()> {
    bytes.resize((check.piece.to - check.piece.from) as usize, 0);
    if file.read_at(check.piece.from, bytes)? < bytes.len() || !check.matches(bytes) {
        return Err(piece_mismatch(log_path, &check.piece));
    }
    Ok(())
}

/// The error for log bytes that do not match their checksum.
pub(crate) fn piece_mismatch(log_path: &Path, piece: &Piece) -> Error {
    Error::Corrupted {
        file: log_path.to_path_buf(),
        offset: piece.from,
        reason: format!(
            "log bytes [{}, {}) do not match their checksum in {SUMS_NAME}",
            piece.from, piece.to
        ),
    }
}

/// Removes metadata older than `version`, index files other than
/// `index_id` and snapshot files other than `snapshots`, once checkpoint
/// `version` is durable. One old index file and one old snapshot file are
/// not removed but renamed to the spares the next checkpoints write over
/// ([`SPARE_INDEX_NAME`], [`SPARE_SNAPSHOT_NAME`]).
pub(crate) fn remove_old_checkpoints(
    storage: &dyn Storage,
    dir: &Path,
    version: u32,
    index_id: u64,
    snapshots: &[u32],
) -> Result<()> {
    let keep_index = index_name(index_id);
    let mut removed = false;
    let (mut kept_index, mut kept_snapshot) = (false, false);
    for name in storage.list(dir)? {
        let old_meta = parse_meta_name(&name).is_some_and(|v| v < version);
        let old_index = name.starts_with("index-") && name.ends_with(".dat") && name != keep_index;
        let old_snapshot = parse_snap_name(&name).is_some_and(|s| !snapshots.contains(&s));
        // One of each kept for the next checkpoint to write over.
        if old_index && !kept_index {
            storage.rename(&dir.join(&name), &dir.join(SPARE_INDEX_NAME))?;
            kept_index = true;
            removed = true;
        } else if old_snapshot && !kept_snapshot {
            storage.rename(&dir.join(&name), &dir.join(SPARE_SNAPSHOT_NAME))?;
            kept_snapshot = true;
            removed = true;
        } else if old_meta || old_index || old_snapshot {
            storage.remove(&dir.join(&name))?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir)?;
    }
    Ok(())
}
