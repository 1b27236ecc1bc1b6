//! The store's files one at a time, in human-readable form, for `epochdb
//! inspect` (DESIGN.md: "`epochdb inspect` prints any file"): checkpoint
//! metadata, index checkpoints, snapshots, the log's checksums and the log
//! itself, each decoded with the checks recovery makes (`checkpoint.rs`,
//! `sums.rs`), so what a listing calls intact is what recovery reads.
//!
//! Every file but `log.sums` is synced before it gets its name, so any
//! damage in it is corruption. `log.sums` is appended to while the store
//! runs: a bad last block is the torn tail of claims that were not synced.
//! The log has no framing of its own; it is checked against `log.sums`
//! (every piece at or above the newest checkpoint's `begin`), which is
//! what recovery does for the range it replays.

use std::fmt::{self, Write};
use std::ops::ControlFlow;
use std::path::Path;

use epochdb_storage::{
    scan_blocks, Block, FrameError, ScanBuffers, ScanEnd, Storage, StorageError,
};

use crate::address::FIRST_ADDRESS;
use crate::checkpoint::{
    self, Metadata, FORMAT_VERSION, INDEX_MAGIC, KIND_INDEX_HEADER, KIND_INDEX_WORDS,
    KIND_SNAP_HEADER, KIND_SNAP_PIECE, SNAP_MAGIC,
};
use crate::error::{Error, Result};
use crate::record::RecordLayout;
use crate::segment;
use crate::sums;

/// The kinds of file a store's directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreFile {
    /// `cpr-<version>.meta`: a checkpoint's metadata, written last.
    Metadata,
    /// `index-<id>.dat`: a fuzzy index checkpoint (§6.3).
    Index,
    /// `snap-<version>.dat`: a snapshot checkpoint's log pages (Appendix C).
    Snapshot,
    /// `log.sums`: the CRC32C of every range of the log written.
    Sums,
    /// `log.dat` or `log-<n>.seg`: the HybridLog's pages on disk.
    Log,
    /// `index.spare`, `snap.spare`: a retired checkpoint file kept to be
    /// written over by the next one (no checkpoint's data).
    Spare,
}

impl StoreFile {
    /// The kind a file called `name` is, by the store's naming.
    pub fn of_name(name: &str) -> Option<StoreFile> {
        if checkpoint::parse_meta_name(name).is_some() {
            Some(StoreFile::Metadata)
        } else if checkpoint::parse_index_name(name).is_some() {
            Some(StoreFile::Index)
        } else if checkpoint::parse_snap_name(name).is_some() {
            Some(StoreFile::Snapshot)
        } else if name == sums::SUMS_NAME {
            Some(StoreFile::Sums)
        } else if name == segment::LOG_NAME || segment::parse_segment_name(name).is_some() {
            Some(StoreFile::Log)
        } else if name == checkpoint::SPARE_INDEX_NAME || name == checkpoint::SPARE_SNAPSHOT_NAME {
            Some(StoreFile::Spare)
        } else {
            None
        }
    }

    /// A short human name.
    pub fn name(self) -> &'static str {
        match self {
            StoreFile::Metadata => "hybridlog checkpoint metadata",
            StoreFile::Index => "hybridlog index checkpoint",
            StoreFile::Snapshot => "hybridlog snapshot",
            StoreFile::Sums => "hybridlog log checksums",
            StoreFile::Log => "hybridlog log",
            StoreFile::Spare => "hybridlog spare",
        }
    }
}

impl fmt::Display for StoreFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a directory holding `names` is a HybridLog store's.
pub fn is_store_dir(names: &[String]) -> bool {
    names
        .iter()
        .any(|name| StoreFile::of_name(name).is_some_and(|kind| kind != StoreFile::Spare))
}

/// Damage found in a file: where, why, and whether recovery refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDamage {
    /// Byte offset of the damage.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
    /// `false` for the torn tail of `log.sums`, which recovery tolerates,
    /// and for bytes recovery does not read.
    pub refused: bool,
    /// Recovery does not read these bytes (a snapshot's blocks that the
    /// newest checkpoint takes no piece from).
    pub unread: bool,
}

impl fmt::Display for FileDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unread {
            write!(
                f,
                "damage recovery does not read at offset {}: {}",
                self.offset, self.reason
            )
        } else if self.refused {
            write!(f, "CORRUPT at offset {}: {}", self.offset, self.reason)
        } else {
            write!(f, "torn tail at offset {}: {}", self.offset, self.reason)
        }
    }
}

/// What inspecting one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    /// The file's kind.
    pub kind: StoreFile,
    /// Its length in bytes.
    pub bytes: u64,
    /// A one-line description of its contents.
    pub detail: String,
    /// The first damage, if any.
    pub damage: Option<FileDamage>,
}

impl FileSummary {
    /// Whether the file has damage recovery refuses.
    pub fn is_corrupt(&self) -> bool {
        self.damage.as_ref().is_some_and(|d| d.refused)
    }
}

/// Prints the store file `path` to `out`: a header line, its contents
/// (with `verbose`, every session, snapshot piece and checksum claim), and
/// a summary line. Damage is part of the returned summary, not an error.
///
/// Errors: the name is not one of the store's files, or it cannot be read.
pub fn inspect_file(
    storage: &dyn Storage,
    path: &Path,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<FileSummary> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let kind = StoreFile::of_name(name).ok_or_else(|| Error::Corrupted {
        file: path.to_path_buf(),
        offset: 0,
        reason: "not a file of a hybridlog store (by its name)".into(),
    })?;
    let len = storage.len(path)?;
    let listed = (|| {
        writeln!(out, "{}: {kind} file, {len} bytes", path.display())?;
        let summary = match kind {
            StoreFile::Metadata => metadata(path, &storage.read(path)?, verbose, out)?,
            StoreFile::Index => index(storage, path, out)?,
            StoreFile::Snapshot => snapshot(storage, path, verbose, out)?,
            StoreFile::Sums => claims(&storage.read(path)?, verbose, out)?,
            StoreFile::Log => log(storage, path, name, out)?,
            StoreFile::Spare => FileSummary {
                kind,
                bytes: len,
                detail: "space kept for the next checkpoint file; no checkpoint's data".into(),
                damage: None,
            },
        };
        let verdict = match &summary.damage {
            Some(damage) => damage.to_string(),
            None => "intact".into(),
        };
        writeln!(out, "summary: {}; {verdict}", summary.detail)?;
        Ok::<_, Failure>(summary)
    })();
    listed.map_err(|failure| match failure {
        Failure::Read(error) => error,
        Failure::Listing => Error::Corrupted {
            file: path.to_path_buf(),
            offset: 0,
            reason: "writing the listing failed".into(),
        },
    })
}

/// Why a file's listing stopped early.
enum Failure {
    /// Reading the file failed.
    Read(Error),
    /// Writing to the listing's output failed.
    Listing,
}

impl From<fmt::Error> for Failure {
    fn from(_: fmt::Error) -> Self {
        Failure::Listing
    }
}

impl From<StorageError> for Failure {
    fn from(error: StorageError) -> Self {
        Failure::Read(error.into())
    }
}

/// Hands each block of the stored file `path` (format `magic`) to `visit`,
/// reading it a chunk at a time as recovery does (`scan_blocks`), so a
/// file of any size is listed in the memory of a few chunks. Records the
/// frame error that ended the blocks, if any, in `damage` (every file read
/// this way is synced before it is named: damage is corruption); returns
/// the file's length.
fn each_block(
    storage: &dyn Storage,
    path: &Path,
    magic: u32,
    damage: &mut Option<FileDamage>,
    visit: impl FnMut(u64, Block<'_>) -> std::result::Result<ControlFlow<()>, Failure>,
) -> std::result::Result<u64, Failure> {
    let (end, len) = scan_blocks::<Failure>(
        storage,
        path,
        magic,
        &mut ScanBuffers::default(),
        false,
        visit,
    )?;
    if let ScanEnd::Damaged { offset, error } = end {
        let offset = match &error {
            FrameError::TornTail { offset } | FrameError::Corrupt { offset, .. } => *offset as u64,
            _ => offset,
        };
        *damage = corrupt(offset, error.to_string());
    }
    Ok(len)
}

fn corrupt(offset: u64, reason: impl Into<String>) -> Option<FileDamage> {
    Some(FileDamage {
        offset,
        reason: reason.into(),
        refused: true,
        unread: false,
    })
}

fn metadata(
    path: &Path,
    data: &[u8],
    verbose: bool,
    out: &mut dyn Write,
) -> std::result::Result<FileSummary, fmt::Error> {
    let summary = |detail: String, damage| FileSummary {
        kind: StoreFile::Metadata,
        bytes: data.len() as u64,
        detail,
        damage,
    };
    let meta = match Metadata::decode(path, data) {
        Ok(meta) => meta,
        Err(Error::Corrupted { offset, reason, .. }) => {
            return Ok(summary("unreadable".into(), corrupt(offset, reason)))
        }
        Err(other) => return Ok(summary("unreadable".into(), corrupt(0, other.to_string()))),
    };
    writeln!(
        out,
        "checkpoint v{} ({:?}): L_s {}, L_e {}, begin {}",
        meta.version, meta.kind, meta.l_s, meta.l_e, meta.begin
    )?;
    writeln!(
        out,
        "index checkpoint {:016x}: L_h {}, L_i {}",
        meta.index_id, meta.l_h, meta.l_i
    )?;
    let layout = match meta.layout {
        RecordLayout::Variable => "variable".to_string(),
        RecordLayout::Fixed {
            key_bytes,
            value_bytes,
        } => format!("fixed, {key_bytes}-byte keys, {value_bytes}-byte values"),
    };
    let segments = match meta.segment_bits {
        0 => "one file (log.dat)".to_string(),
        bits => format!("segments of {} MiB", (1u64 << bits) >> 20),
    };
    writeln!(
        out,
        "log: pages of {} KiB, {segments}, record layout {layout}, checksums {}",
        (1u64 << meta.page_bits) >> 10,
        if meta.log_sums {
            "in log.sums"
        } else {
            "none (older format)"
        }
    )?;
    writeln!(
        out,
        "sessions: {} (next id {})",
        meta.sessions.len(),
        meta.next_session_id
    )?;
    if verbose {
        for (id, serial) in &meta.sessions {
            writeln!(out, "    session {id}: serial {serial}")?;
        }
    }
    if let Some(map) = &meta.snapshot {
        writeln!(
            out,
            "snapshot: [{}, {}) in {} pieces",
            map.start,
            meta.l_e,
            map.pieces.len()
        )?;
        if verbose {
            for piece in &map.pieces {
                writeln!(
                    out,
                    "    [{}, {}): {} at offset {}",
                    piece.address,
                    piece.address + piece.bytes,
                    checkpoint::snap_name(piece.file),
                    piece.offset
                )?;
            }
        }
    }
    Ok(summary(
        format!(
            "checkpoint v{}, {:?}, L_e {}, {} sessions",
            meta.version,
            meta.kind,
            meta.l_e,
            meta.sessions.len()
        ),
        None,
    ))
}

fn index(
    storage: &dyn Storage,
    path: &Path,
    out: &mut dyn Write,
) -> std::result::Result<FileSummary, Failure> {
    let mut header: Option<(u64, u64)> = None;
    let mut words = 0u64;
    let mut used = 0u64;
    let mut damage = None;
    let mut found = None;
    let len = each_block(storage, path, INDEX_MAGIC, &mut damage, |offset, block| {
        if block.version != FORMAT_VERSION {
            found = corrupt(offset, format!("format version {}", block.version));
            return Ok(ControlFlow::Break(()));
        }
        match (block.kind, header) {
            (KIND_INDEX_HEADER, None) if block.payload.len() == 16 => {
                let b = u64::from_le_bytes(block.payload[..8].try_into().expect("8"));
                let o = u64::from_le_bytes(block.payload[8..].try_into().expect("8"));
                writeln!(
                    out,
                    "{offset:>10}  header: {b} buckets, {o} overflow buckets"
                )?;
                header = Some((b, o));
            }
            (KIND_INDEX_WORDS, Some((b, o)))
                if block.payload.len().is_multiple_of(64)
                    && words + block.payload.len() as u64 / 8
                        <= b.saturating_add(o).saturating_mul(8) =>
            {
                for bucket in block.payload.chunks_exact(64) {
                    // Seven entries, then the overflow pointer.
                    used += bucket[..56]
                        .chunks_exact(8)
                        .filter(|word| word.iter().any(|&b| b != 0))
                        .count() as u64;
                }
                words += block.payload.len() as u64 / 8;
            }
            (kind, _) => {
                found = corrupt(
                    offset,
                    format!(
                        "block of kind {kind} does not belong here ({} bytes)",
                        block.payload.len()
                    ),
                );
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let mut damage = found.or(damage);
    let detail = match header {
        Some((b, o)) => {
            let total = b.saturating_add(o).saturating_mul(8);
            if damage.is_none() && words != total {
                damage = corrupt(len, format!("the index has {words} of its {total} words"));
            }
            format!("{b} buckets, {o} overflow, {used} entries in use")
        }
        None => {
            if damage.is_none() {
                damage = corrupt(0, "no header block");
            }
            "no header".into()
        }
    };
    writeln!(out, "words: {words} ({} MiB)", (words * 8) >> 20)?;
    Ok(FileSummary {
        kind: StoreFile::Index,
        bytes: len,
        detail,
        damage,
    })
}

fn snapshot(
    storage: &dyn Storage,
    path: &Path,
    verbose: bool,
    out: &mut dyn Write,
) -> std::result::Result<FileSummary, Failure> {
    let mut header: Option<(u64, u64)> = None;
    let mut pieces = 0u64;
    let mut log_bytes = 0u64;
    let mut damage = None;
    let mut found = None;
    let len = each_block(storage, path, SNAP_MAGIC, &mut damage, |offset, block| {
        let word = |i: usize| {
            block
                .payload
                .get(8 * i..8 * i + 8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
        };
        match (block.kind, header) {
            (KIND_SNAP_HEADER, None) if block.version == FORMAT_VERSION => {
                let (Some(version), Some(page_bits), Some(start), Some(end)) =
                    (word(0), word(1), word(2), word(3))
                else {
                    found = corrupt(offset, "short header");
                    return Ok(ControlFlow::Break(()));
                };
                writeln!(
                    out,
                    "{offset:>10}  header: version {version}, pages of {} KiB, log [{start}, {end})",
                    (1u64 << page_bits.min(40)) >> 10
                )?;
                header = Some((start, end));
            }
            (KIND_SNAP_PIECE, Some((start, end))) if block.version == FORMAT_VERSION => {
                let Some(address) = word(0) else {
                    found = corrupt(offset, "piece without an address");
                    return Ok(ControlFlow::Break(()));
                };
                let bytes = block.payload.len() as u64 - 8;
                let piece_end = address.saturating_add(bytes);
                if address < start || piece_end > end {
                    found = corrupt(
                        offset,
                        format!("piece [{address}, {piece_end}) outside [{start}, {end})"),
                    );
                    return Ok(ControlFlow::Break(()));
                }
                if verbose {
                    writeln!(
                        out,
                        "{offset:>10}  piece [{address}, {piece_end}), {bytes} bytes"
                    )?;
                }
                pieces += 1;
                log_bytes += bytes;
            }
            (kind, _) => {
                found = corrupt(
                    offset,
                    format!(
                        "block of kind {kind} version {} does not belong here",
                        block.version
                    ),
                );
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let mut damage = found.or(damage);
    if header.is_none() && damage.is_none() {
        damage = corrupt(0, "no header block");
    }
    // Recovery reads only the pieces the newest checkpoint's map names, each
    // at its offset (`read_piece`): check those, and call damage elsewhere
    // what it is.
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let names = storage.list(dir).unwrap_or_default();
    if let (Some(version), Some((_, meta))) = (
        checkpoint::parse_snap_name(name),
        newest_checkpoint(storage, dir, &names),
    ) {
        let read: Vec<_> = meta
            .snapshot
            .iter()
            .flat_map(|map| map.pieces.iter())
            .filter(|piece| piece.file == version)
            .collect();
        let file = storage.open_read(path)?;
        let mut buf = Vec::new();
        let bad_piece = read
            .iter()
            .find_map(|piece| checkpoint::read_piece(file.as_ref(), piece, &mut buf).err());
        damage = match bad_piece {
            Some(Error::Corrupted { offset, reason, .. }) => corrupt(offset, reason),
            Some(other) => return Err(Failure::Read(other)),
            None => damage.map(|d| FileDamage {
                reason: format!(
                    "{} (checkpoint v{} takes {} from this file, all intact)",
                    d.reason,
                    meta.version,
                    match read.len() {
                        1 => "1 piece".to_string(),
                        n => format!("{n} pieces"),
                    }
                ),
                refused: false,
                unread: true,
                ..d
            }),
        };
    }
    Ok(FileSummary {
        kind: StoreFile::Snapshot,
        bytes: len,
        detail: format!("{pieces} pieces, {log_bytes} bytes of log"),
        damage,
    })
}

fn claims(
    data: &[u8],
    verbose: bool,
    out: &mut dyn Write,
) -> std::result::Result<FileSummary, fmt::Error> {
    let read = sums::decode(data);
    let (pieces, covered, marks) = read.claims.totals();
    if verbose {
        for check in read.claims.checks(0, u64::MAX) {
            writeln!(
                out,
                "    [{}, {}): crc32c {:#010x}{}",
                check.piece.from,
                check.piece.to,
                check.piece.crc,
                if check.marks.is_empty() {
                    String::new()
                } else {
                    format!(", {} records marked invalid since", check.marks.len())
                }
            )?;
        }
    }
    // Appended while running: a bad last block is the unsynced tail.
    let damage = read.damage.map(|(offset, reason)| FileDamage {
        offset,
        reason,
        refused: false,
        unread: false,
    });
    Ok(FileSummary {
        kind: StoreFile::Sums,
        bytes: data.len() as u64,
        detail: format!("{pieces} pieces covering {covered} bytes of log, {marks} marks"),
        damage,
    })
}

/// Checks a log file against `log.sums`: every piece at or above the
/// newest checkpoint's `begin` that lies in this file, read a run of
/// adjacent pieces at a time (`sums::read_pieces`).
fn log(
    storage: &dyn Storage,
    path: &Path,
    name: &str,
    out: &mut dyn Write,
) -> std::result::Result<FileSummary, Failure> {
    let file = storage.open_read(path)?;
    let len = file.size()?;
    let summary = |detail: String, damage| FileSummary {
        kind: StoreFile::Log,
        bytes: len,
        detail,
        damage,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let names = storage.list(dir).unwrap_or_default();
    // Recovery checks the log from l_h up to where the checkpoint's part
    // of it ends: l_e, or a snapshot's start (its pieces hold the rest);
    // it keeps nothing above l_e.
    let (segment_bits, begin, l_h, read_end) =
        newest_checkpoint(storage, dir, &names).map_or((0, 0, 0, u64::MAX), |(_, meta)| {
            let read_end = meta
                .snapshot
                .as_ref()
                .map_or(meta.l_e, |map| map.start.min(meta.l_e));
            (meta.segment_bits, meta.begin, meta.l_h, read_end)
        });
    let first = match segment::parse_segment_name(name) {
        Some(n) if segment_bits > 0 => match n.checked_mul(1u64 << segment_bits) {
            Some(first) => first,
            None => {
                return Ok(summary(
                    "a segment past the log's address space".into(),
                    None,
                ))
            }
        },
        Some(_) => {
            return Ok(summary(
                "a segment, but no checkpoint says how large segments are".into(),
                None,
            ))
        }
        None => 0,
    };
    let end = first.saturating_add(len);
    let Ok(sums_data) = storage.read(&dir.join(sums::SUMS_NAME)) else {
        return Ok(summary(
            format!("log [{first}, {end}), no log.sums to check it against"),
            None,
        ));
    };
    let read = sums::decode(&sums_data);
    let mut checked = 0u64;
    let mut bytes = 0u64;
    let mut damage = None;
    let mut checks = read.claims.checks(first.max(begin), end);
    checks.retain(|check| check.piece.from >= first.max(begin) && check.piece.to <= end);
    sums::read_pieces(file.as_ref(), first, &checks, |check, read| {
        let (from, to) = (check.piece.from, check.piece.to);
        match read {
            sums::PieceBytes::Read(piece) if check.matches(piece) => {
                checked += 1;
                bytes += to - from;
                return ControlFlow::Continue(());
            }
            sums::PieceBytes::Failed => return ControlFlow::Break(()),
            sums::PieceBytes::Read(_) | sums::PieceBytes::Short => {}
        }
        // Recovery checks the log from the index checkpoint's l_h up;
        // below it the index already points into the log, and a record
        // there is checked only when a request reads it from disk
        // (`verify_log` scrubs them all).
        let below = if to <= l_h {
            format!(
                " (below the index checkpoint's L_h {l_h}: recovery does not read it, and a read of its records would fail)"
            )
        } else {
            String::new()
        };
        let reason = format!("log [{from}, {to}) does not match its CRC32C in log.sums{below}");
        damage = if from >= read_end {
            Some(FileDamage {
                offset: from - first,
                reason: format!(
                    "{reason} (at or above {read_end}, where the checkpoint's part of the log ends: recovery does not read it)"
                ),
                refused: false,
                unread: true,
            })
        } else {
            corrupt(from - first, reason)
        };
        ControlFlow::Break(())
    })?;
    writeln!(
        out,
        "log [{first}, {end}); checked from {}: {checked} pieces, {bytes} bytes",
        first.max(begin)
    )?;
    Ok(summary(
        format!("log [{first}, {end}), {checked} checksummed pieces verified"),
        damage,
    ))
}

/// The checkpoint recovery starts from, as it finds it: the metadata file
/// in `names` (of `dir`) with the highest version, and its contents if they
/// decode (recovery refuses the store otherwise; the file itself is then
/// listed as corrupt).
fn newest_checkpoint(
    storage: &dyn Storage,
    dir: &Path,
    names: &[String],
) -> Option<(String, Metadata)> {
    let (_, name) = names
        .iter()
        .filter_map(|n| checkpoint::parse_meta_name(n).map(|v| (v, n)))
        .max()?;
    let meta = checkpoint::read_metadata(storage, &dir.join(name)).ok()?;
    Some((name.clone(), meta))
}

/// What inspecting a store's directory found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreListing {
    /// Every store file, by name, in name order.
    pub files: Vec<(String, FileSummary)>,
    /// Damage between files: the newest checkpoint's metadata naming an
    /// index checkpoint or a snapshot file that is missing or too short.
    pub problems: Vec<String>,
}

impl StoreListing {
    /// Files with damage recovery refuses, plus problems between files.
    pub fn corrupt(&self) -> usize {
        self.files.iter().filter(|(_, f)| f.is_corrupt()).count() + self.problems.len()
    }
}

/// Lists every store file of `dir` to `out`, one line each (name, kind,
/// bytes, contents, damage), then what is wrong between files (the newest
/// checkpoint's metadata must find the index checkpoint and the snapshot
/// pieces it names), then a summary line.
pub fn inspect_dir(storage: &dyn Storage, dir: &Path, out: &mut dyn Write) -> Result<StoreListing> {
    let mut names = storage.list(dir)?;
    names.sort();
    let mut listing = StoreListing::default();
    let mut skipped = Vec::new();
    for name in &names {
        if StoreFile::of_name(name).is_none() {
            skipped.push(name.clone());
            continue;
        }
        let mut sink = String::new();
        let summary = inspect_file(storage, &dir.join(name), false, &mut sink)?;
        listing.files.push((name.clone(), summary));
    }
    if let Some((name, meta)) = newest_checkpoint(storage, dir, &names) {
        listing.problems = missing_files(storage, dir, &name, &meta);
    }
    let listed = (|| {
        writeln!(
            out,
            "{}: hybridlog store, {} files",
            dir.display(),
            listing.files.len()
        )?;
        let width = listing
            .files
            .iter()
            .map(|(n, _)| n.len())
            .max()
            .unwrap_or(4);
        for (name, file) in &listing.files {
            let verdict = match &file.damage {
                Some(damage) => damage.to_string(),
                None => "intact".into(),
            };
            writeln!(
                out,
                "{name:<width$}  {:<30} {:>12} bytes  {}  {verdict}",
                file.kind.name(),
                file.bytes,
                file.detail
            )?;
        }
        for name in &skipped {
            writeln!(out, "{name:<width$}  (not a store file, skipped)")?;
        }
        for problem in &listing.problems {
            writeln!(out, "CORRUPT: {problem}")?;
        }
        writeln!(
            out,
            "summary: {} files, {} corrupt",
            listing.files.len(),
            listing.corrupt()
        )
    })();
    listed.map_err(|_| Error::Corrupted {
        file: dir.to_path_buf(),
        offset: 0,
        reason: "writing the listing failed".into(),
    })?;
    Ok(listing)
}

/// What recovery from checkpoint `meta` (in the metadata file `name`)
/// finds wrong with the log before it replays it (`recovery::log_checks`
/// and what follows): a byte of the range it checks that `log.sums` has no
/// checksum for, or (a fold-over) a log on disk that ends before `l_e`.
fn log_problems(storage: &dyn Storage, dir: &Path, name: &str, meta: &Metadata) -> Vec<String> {
    let mut problems = Vec::new();
    let end = meta
        .snapshot
        .as_ref()
        .map_or(meta.l_e, |map| map.start.min(meta.l_e));
    let first = meta.l_h.max(meta.begin).max(FIRST_ADDRESS);
    if meta.log_sums && first < end {
        if let Ok(read) = sums::read(storage, dir) {
            if let Some(gap) = read.claims.first_gap(first, end) {
                problems.push(format!(
                    "{name} needs checksums of log [{first}, {end}), but log.sums has none from {gap}"
                ));
            }
        }
    }
    // With a snapshot, recovery writes its pieces into the log first; the
    // check that the log reaches l_e is then the pieces'.
    if meta.snapshot.is_none() && end > FIRST_ADDRESS {
        let last = end - 1;
        let (file, at) = match meta.segment_bits {
            0 => (segment::LOG_NAME.to_string(), last),
            bits => (
                segment::segment_name(last >> bits),
                last & ((1u64 << bits) - 1),
            ),
        };
        let len = storage.len(&dir.join(&file)).unwrap_or(0);
        if len <= at {
            problems.push(format!(
                "{name} needs the log up to {end}, but {file} ends at offset {len}"
            ));
        }
    }
    problems
}

/// The files checkpoint `meta` (in the metadata file `name`) needs that
/// `dir` lacks: its index checkpoint, and each snapshot file holding one of
/// its pieces, long enough for the piece. Recovery reads them all; the
/// metadata is written last, so a whole checkpoint has them.
fn missing_files(storage: &dyn Storage, dir: &Path, name: &str, meta: &Metadata) -> Vec<String> {
    let mut problems = Vec::new();
    let index = checkpoint::index_name(meta.index_id);
    if !storage.exists(&dir.join(&index)).unwrap_or(false) {
        problems.push(format!(
            "{name} names the index checkpoint {index}, which is missing"
        ));
    }
    problems.extend(log_problems(storage, dir, name, meta));
    let Some(map) = &meta.snapshot else {
        return problems;
    };
    let mut needed: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for piece in &map.pieces {
        // The piece's block: frame header, address word, the log bytes.
        let end = piece.offset + epochdb_storage::BLOCK_HEADER_BYTES as u64 + 8 + piece.bytes;
        let at_least = needed.entry(piece.file).or_default();
        *at_least = (*at_least).max(end);
    }
    for (version, at_least) in needed {
        let snap = checkpoint::snap_name(version);
        match storage.len(&dir.join(&snap)) {
            Ok(len) if len >= at_least => {}
            Ok(len) => problems.push(format!(
                "{name} needs {at_least} bytes of {snap}, which has {len}"
            )),
            Err(_) => problems.push(format!(
                "{name} names the snapshot {snap}, which is missing"
            )),
        }
    }
    problems
}
