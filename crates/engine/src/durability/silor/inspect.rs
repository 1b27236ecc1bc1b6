//! `epochdb inspect`: every file of the `log` and `silor` modes in
//! human-readable form (DESIGN.md, storage rules: "`epochdb inspect` prints
//! any file"). The format is told by the block magic at offset 0 (the file
//! name decides only when the magic is unreadable); the payloads are decoded
//! with the parsers recovery uses (`format.rs`), so what inspect calls
//! intact is what recovery reads.
//!
//! A file's listing is one line per block, then a summary line:
//!
//! ```text
//! /db/old_data.17: log file, 1104 bytes
//!     offset     length  ver  kind  contents
//!          0        552    1     1  log epoch 12: 3 entries, 3 writes
//!        552        552    1     1  log epoch 13: 3 entries, 3 writes
//! summary: 2 blocks, 1104 bytes, intact
//! ```
//!
//! `length` counts the whole block (16-byte header and payload). Damage is
//! judged as recovery judges it (silor §5; DESIGN.md: a torn tail is
//! expected after a crash, damage inside synced data is corruption):
//!
//! * `catalog`, `pepoch` and `*.tmp` are appended to while the process
//!   runs, so an unfinished last block is a torn tail.
//! * `data.log` is too, but `pepoch` (in directory 0) records how much of
//!   directory 0's `data.log` was synced: damage inside that prefix, or
//!   followed by a block of an epoch at or below the persistent epoch, is
//!   corruption; other damage is the unsynced tail recovery drops. Without
//!   a `pepoch` beside it (directories other than 0, a copied file) inspect
//!   calls damage followed by any intact block corruption, which recovery
//!   tolerates when every block after it is above the persistent epoch.
//! * `old_data.<e>` and the `checkpoint` metadata are synced before they
//!   get their name, and the installed checkpoint's data files before it
//!   is installed: any damage in them, a torn tail included, is corruption.
//! * Files recovery removes unread (`remove_strays`) are strays whatever
//!   their damage: a checkpoint's data files other than the installed
//!   one's (written in place while it runs: a crash or a close leaves
//!   them), logs wholly below the installed checkpoint's `e_l`, and
//!   temporaries. The installed checkpoint is known from the `checkpoint`
//!   file beside the file; a directory with the catalog but no
//!   `checkpoint` has none installed; in the other directories of a
//!   multi-directory database inspect cannot tell (pass directory 0).
//!
//! Files are read a chunk at a time through the scan recovery uses
//! (`scan_blocks`), so listing one takes a few chunks of memory whatever
//! its size.
//!
//! Payloads are checked as recovery checks them: block kinds, TIDs (no
//! status bits; a log entry's TID in its block's epoch), catalog ids in
//! order after the header, exactly one metadata block.

use std::collections::BTreeSet;
use std::fmt::{self, Write};
use std::ops::ControlFlow;
use std::path::Path;

use epochdb_storage::{
    blocks, decode_block, read_rest, scan_blocks, Block, FrameError, ScanBuffers, ScanEnd, Storage,
    StorageError, BLOCK_HEADER_BYTES,
};

use super::files::{
    parse_ckpt_file_name, parse_log_name, LogName, CATALOG, CHECKPOINT_META, CPR_MARKER, DIRECTORY,
    PEPOCH, TMP_SUFFIX,
};
use super::format::{
    parse_catalog_table, parse_ckpt_block, parse_dir_identity, parse_log_block, parse_log_header,
    CheckpointMeta, PepochRecord, Reader, SyncedLog, CATALOG_MAGIC, CKPT_MAGIC, CPR_MAGIC,
    DIR_MAGIC, FORMAT_VERSION, KIND_CATALOG_HEADER, KIND_CATALOG_TABLE, KIND_CKPT, KIND_CPR,
    KIND_DIR, KIND_LOG, KIND_LOG_HEADER, KIND_META, KIND_PEPOCH, LOG_MAGIC, META_MAGIC,
    PEPOCH_MAGIC,
};
use crate::durability::wal::inspect::{
    inspect_log as inspect_wal_log, inspect_sdl as inspect_wal_sdl, LogContext as WalLogContext,
};
use crate::error::DurabilityError;
use crate::tid::{Tid, STATUS_MASK};

/// The subdirectory of a `wal` database that holds its central log.
const WAL_SUBDIR: &str = crate::durability::wal::WAL_SUBDIR;

/// Key bytes shown in hex before the rest is elided.
const KEY_HEX_BYTES_MAX: usize = 32;

/// The kinds of file the `log` and `silor` modes write (`format.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileFormat {
    /// `data.log`, `old_data.<e>[.<k>]`: log blocks (magic `eLOG`).
    Log,
    /// `pepoch`: persistent-epoch records (magic `ePEP`).
    Pepoch,
    /// `catalog`: the header, then one entry per table (magic `eCAT`).
    Catalog,
    /// `ckpt.<id>.t<table>.<j>`: checkpoint data blocks (magic `eCKP`).
    CheckpointData,
    /// `checkpoint`: the installed checkpoint's metadata (magic `eMET`).
    CheckpointMeta,
    /// `directory`: which of the database's directories this is (`eDIR`).
    Directory,
    /// `cpr`: marks a database of the `cpr` mode (`eCPR`).
    CprMarker,
    /// `wal/wal-<start LSN>.log`: the `wal` mode's central log, a header
    /// then one block per entry (magic `ELWL`; `wal/inspect.rs`).
    WalLog,
    /// `wal/wal.sdl`: the `wal` mode's persisted SDL, two slots (`ELSD`).
    WalSdl,
}

impl FileFormat {
    /// Every format, in the order inspect tries their magics.
    pub const ALL: [FileFormat; 9] = [
        FileFormat::Log,
        FileFormat::Pepoch,
        FileFormat::Catalog,
        FileFormat::CheckpointData,
        FileFormat::CheckpointMeta,
        FileFormat::Directory,
        FileFormat::CprMarker,
        FileFormat::WalLog,
        FileFormat::WalSdl,
    ];

    /// A short human name ("log", "checkpoint data", …).
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Log => "log",
            FileFormat::Pepoch => "pepoch",
            FileFormat::Catalog => "catalog",
            FileFormat::CheckpointData => "checkpoint data",
            FileFormat::CheckpointMeta => "checkpoint metadata",
            FileFormat::Directory => "directory identity",
            FileFormat::CprMarker => "cpr marker",
            FileFormat::WalLog => "wal log",
            FileFormat::WalSdl => "wal SDL",
        }
    }

    fn magic(self) -> u32 {
        match self {
            FileFormat::Log => LOG_MAGIC,
            FileFormat::Pepoch => PEPOCH_MAGIC,
            FileFormat::Catalog => CATALOG_MAGIC,
            FileFormat::CheckpointData => CKPT_MAGIC,
            FileFormat::CheckpointMeta => META_MAGIC,
            FileFormat::Directory => DIR_MAGIC,
            FileFormat::CprMarker => CPR_MAGIC,
            FileFormat::WalLog => u32::from_le_bytes(epochdb_wal::inspect::LOG_FILE_MAGIC),
            FileFormat::WalSdl => u32::from_le_bytes(epochdb_wal::inspect::SDL_FILE_MAGIC),
        }
    }

    /// The format whose magic `data` starts with, if any.
    pub fn detect(data: &[u8]) -> Option<FileFormat> {
        let head = data.get(..4)?;
        Self::ALL
            .into_iter()
            .find(|format| head == format.magic().to_le_bytes())
    }

    /// The format a file called `name` holds by epochdb's naming
    /// (`files.rs`), a `.tmp` suffix ignored; `None` for other names.
    pub fn from_file_name(name: &str) -> Option<FileFormat> {
        if epochdb_wal::inspect::log_file_start(name).is_some() {
            return Some(FileFormat::WalLog);
        }
        if name == epochdb_wal::inspect::SDL_FILE_NAME {
            return Some(FileFormat::WalSdl);
        }
        let name = name.strip_suffix(TMP_SUFFIX).unwrap_or(name);
        if parse_log_name(name).is_some() {
            Some(FileFormat::Log)
        } else if parse_ckpt_file_name(name).is_some() {
            Some(FileFormat::CheckpointData)
        } else {
            match name {
                PEPOCH => Some(FileFormat::Pepoch),
                CATALOG => Some(FileFormat::Catalog),
                CHECKPOINT_META => Some(FileFormat::CheckpointMeta),
                DIRECTORY => Some(FileFormat::Directory),
                CPR_MARKER => Some(FileFormat::CprMarker),
                _ => None,
            }
        }
    }
}

impl fmt::Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Damage found in a file; decoding stops at the first.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The unfinished last write of a crash: everything before `offset` is
    /// intact, the `bytes` from it on are discarded by recovery.
    TornTail {
        /// Where the unfinished block starts.
        offset: u64,
        /// Bytes from `offset` to the end of the file.
        bytes: u64,
    },
    /// Damage recovery refuses: inside synced data, or a payload that does
    /// not parse although its checksum matched.
    Corrupt {
        /// Where the damaged block starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A block written by a format version this build does not read.
    Incompatible {
        /// Where the block starts.
        offset: u64,
        /// Its format version.
        version: u16,
    },
}

impl Damage {
    /// Where the damage starts.
    pub fn offset(&self) -> u64 {
        match self {
            Damage::TornTail { offset, .. }
            | Damage::Corrupt { offset, .. }
            | Damage::Incompatible { offset, .. } => *offset,
        }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::TornTail { offset, bytes } => {
                write!(f, "torn tail at offset {offset} ({bytes} bytes)")
            }
            Damage::Corrupt { offset, reason } => write!(f, "CORRUPT at offset {offset}: {reason}"),
            Damage::Incompatible { offset, version } => write!(
                f,
                "INCOMPATIBLE at offset {offset}: format version {version}, this build reads version {FORMAT_VERSION}"
            ),
        }
    }
}

/// What inspecting one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectSummary {
    /// The file's format.
    pub format: FileFormat,
    /// Intact blocks decoded (before any damage).
    pub blocks: u64,
    /// The file's length in bytes.
    pub bytes: u64,
    /// Log entries (transactions) or checkpoint records in the intact
    /// blocks; 0 for the other formats.
    pub entries: u64,
    /// A one-line description of the contents ("epochs 3..=7", "e_p 17",
    /// "2 tables", …).
    pub detail: String,
    /// The first damage, if any.
    pub damage: Option<Damage>,
    /// Why recovery removes this file unread, if it does (a temporary, a
    /// checkpoint other than the installed one, a log wholly below its
    /// `e_l`: silor §5.1). Damage in such a file is not corruption.
    pub stray: Option<String>,
    /// The decoded metadata of a `checkpoint` file, for cross-checks.
    meta: Option<CheckpointMeta>,
    /// What other files must agree with, for cross-checks.
    facts: Facts,
}

/// What one file says that recovery checks against the other files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Facts {
    /// The newest epoch of a checkpoint data file's records (recovery
    /// refuses one past the checkpoint's `e_h`).
    newest_epoch: u64,
    /// The largest table id written by a checkpoint data file or by the
    /// log blocks recovery replays (it must be in the catalog).
    max_table: Option<u32>,
    /// A catalog's table count.
    catalog_tables: Option<u32>,
    /// A directory identity: the directory's index and the count.
    directory: Option<(u32, u32)>,
}

impl InspectSummary {
    /// A summary without checkpoint metadata.
    pub(crate) fn new(
        format: FileFormat,
        blocks: u64,
        bytes: u64,
        entries: u64,
        detail: String,
        damage: Option<Damage>,
    ) -> Self {
        Self {
            format,
            blocks,
            bytes,
            entries,
            detail,
            damage,
            stray: None,
            meta: None,
            facts: Facts::default(),
        }
    }

    /// Whether the file has damage recovery refuses (corruption or an
    /// unreadable format version); a torn tail is not, nor anything in a
    /// file recovery removes unread.
    pub fn is_corrupt(&self) -> bool {
        self.stray.is_none()
            && matches!(
                self.damage,
                Some(Damage::Corrupt { .. } | Damage::Incompatible { .. })
            )
    }

    /// The damage or "intact", and why recovery removes the file if it
    /// does.
    pub fn verdict(&self) -> String {
        let found = match &self.damage {
            Some(damage) => damage.to_string(),
            None => "intact".to_string(),
        };
        match &self.stray {
            Some(why) => format!("{found} (not read by recovery: {why})"),
            None => found,
        }
    }

    /// The summary line's text: blocks, bytes, and the verdict.
    pub fn summary_line(&self) -> String {
        format!(
            "{}, {} bytes, {}",
            count(self.blocks, "block", "blocks"),
            self.bytes,
            self.verdict()
        )
    }
}

/// What inspecting a directory found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirSummary {
    /// Every epochdb file, by name, in listing order.
    pub files: Vec<(String, InspectSummary)>,
    /// Entries that are not epochdb files (other files, subdirectories).
    pub skipped: Vec<String>,
    /// Damage between files: checkpoint files the installed checkpoint
    /// names that are missing or of the wrong length.
    pub problems: Vec<String>,
}

impl DirSummary {
    /// Files with damage recovery refuses, plus problems between files.
    pub fn corrupt(&self) -> usize {
        self.files.iter().filter(|(_, s)| s.is_corrupt()).count() + self.problems.len()
    }
}

/// The epochs whose log blocks recovery replays: from the installed
/// checkpoint's `e_l` to the persistent epoch (silor §5.2), as far as the
/// directory tells (all of them where it does not).
type Epochs = std::ops::RangeInclusive<u64>;

/// [`Epochs`] for a directory whose installed checkpoint is `installed`
/// and whose `pepoch` file (directory 0's) holds `pepoch`.
fn replayed_epochs(installed: &Installed, pepoch: Option<&PepochRecord>) -> Epochs {
    let e_l = match installed {
        Installed::Checkpoint(meta) => meta.e_l,
        _ => 0,
    };
    e_l..=pepoch.map_or(u64::MAX, |p| p.e_p)
}

/// How the file's name says a decoding failure must be judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TailPolicy {
    /// Appended to while running: the decoder's verdict stands.
    Appended,
    /// `data.log`: damage outside the synced prefix is the unsynced tail.
    CurrentLog {
        /// From the `pepoch` beside it: `e_p` and directory 0's synced log.
        durable: Option<(u64, SyncedLog)>,
    },
    /// Synced before named: any damage is corruption.
    Synced,
    /// A file of the `wal` mode's log directory, judged as that mode's
    /// recovery judges it (`wal/inspect.rs`).
    Wal(WalLogContext),
}

/// What the `wal` mode's recovery would know about the file `name` in a log
/// directory holding `names`, whose SDL file holds `persisted_sdl`.
fn wal_context(
    names: &[String],
    (persisted_sdl, replay_from): (Option<u64>, Option<u64>),
    name: &str,
) -> WalLogContext {
    let start = epochdb_wal::inspect::log_file_start(name);
    let last = names
        .iter()
        .filter_map(|n| epochdb_wal::inspect::log_file_start(n))
        .all(|other| start.is_some_and(|s| other <= s));
    WalLogContext {
        start,
        persisted_sdl,
        last,
        replay_from,
    }
}

/// The LSN the `wal` mode's recovery replays the log directory `wal_dir`
/// from: the start of the checkpoint installed in the database directory
/// above it (its `e_l`), if there is one.
fn wal_replay_from(storage: &dyn Storage, wal_dir: &Path) -> Option<u64> {
    let db_dir = wal_dir.parent()?;
    let names = storage.list(db_dir).ok()?;
    match installed_checkpoint(storage, db_dir, &names) {
        Installed::Checkpoint(meta) => Some(meta.e_l),
        _ => None,
    }
}

/// The SDL recovery would take from the SDL file in `dir`, if there is one.
fn wal_persisted_sdl(storage: &dyn Storage, dir: &Path) -> Option<u64> {
    let data = storage
        .read(&dir.join(epochdb_wal::inspect::SDL_FILE_NAME))
        .ok()?;
    epochdb_wal::inspect::persisted_sdl(&data)
}

/// The policy for a file called `name`; `pepoch` is the record recovery
/// would take from the `pepoch` file in the same directory, if any.
fn tail_policy(name: &str, pepoch: Option<&PepochRecord>, dir_index: usize) -> TailPolicy {
    if name.ends_with(TMP_SUFFIX) {
        return TailPolicy::Appended;
    }
    match parse_log_name(name) {
        Some(LogName::Current) => {
            // pepoch (in directory 0) records each directory's log in turn.
            let durable = pepoch.map(|p| {
                let synced = p.logs.get(dir_index).copied().unwrap_or_default();
                (p.e_p, synced)
            });
            return TailPolicy::CurrentLog { durable };
        }
        Some(LogName::Old { .. }) => return TailPolicy::Synced,
        None => {}
    }
    if parse_ckpt_file_name(name).is_some() || name == CHECKPOINT_META || name == DIRECTORY {
        TailPolicy::Synced
    } else {
        TailPolicy::Appended
    }
}

/// The record recovery takes from a `pepoch` file's bytes (`read_pepoch`):
/// the last one with the largest `e_p`, before any damage.
fn last_pepoch(data: &[u8]) -> Option<PepochRecord> {
    let mut last: Option<PepochRecord> = None;
    for item in blocks(data, PEPOCH_MAGIC) {
        let Ok((_, block)) = item else { break };
        let Ok(record) = PepochRecord::parse(block.payload) else {
            break;
        };
        if last.as_ref().is_none_or(|l| record.e_p >= l.e_p) {
            last = Some(record);
        }
    }
    last
}

/// The `pepoch` record recovery takes in the directory `dir` holding
/// `names`: in directory 0 (the one with the catalog) the file's last
/// record, or none at all (e_p 0) where the file is missing or holds no
/// record yet, as `read_pepoch` does; elsewhere `None` (unknown).
fn dir_pepoch(storage: &dyn Storage, dir: &Path, names: &[String]) -> Option<PepochRecord> {
    let record = storage
        .read(&dir.join(PEPOCH))
        .ok()
        .and_then(|data| last_pepoch(&data));
    let dir0 = names.iter().any(|n| n == CATALOG);
    if dir0 {
        Some(record.unwrap_or_default())
    } else {
        record
    }
}

fn listing_failed(_: fmt::Error) -> DurabilityError {
    DurabilityError::Io("writing the inspect listing failed".into())
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Prints the file `path` in human-readable form to `out`: a header line,
/// one line per block (offset, length, version, kind and the decoded
/// contents; with `verbose` also every log entry and write, every
/// checkpoint record), and a summary line (see the module documentation).
/// The file is read a chunk at a time, as recovery reads it, so a file of
/// any size is listed in the memory of a few chunks.
///
/// Damage in the file is part of the returned summary, not an error.
/// Errors: the file cannot be read, it is not an epochdb file (neither its
/// magic nor its name is one of `format.rs`'s), or writing to `out` failed.
pub fn inspect_file(
    storage: &dyn Storage,
    path: &Path,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<InspectSummary, DurabilityError> {
    let io = |e: StorageError| DurabilityError::from_storage(&e);
    let head = read_head(storage, path).map_err(io)?;
    let name = file_name(path);
    let format = FileFormat::detect(&head)
        .or_else(|| FileFormat::from_file_name(name))
        .ok_or_else(|| not_epochdb(path, &head))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let names = storage.list(dir).unwrap_or_default();
    let installed = installed_checkpoint(storage, dir, &names);
    let pepoch = dir_pepoch(storage, dir, &names);
    let stray = stray_reason(name, &installed);
    let policy = match format {
        FileFormat::WalLog | FileFormat::WalSdl => {
            let wal = (
                wal_persisted_sdl(storage, dir),
                wal_replay_from(storage, dir),
            );
            TailPolicy::Wal(wal_context(&names, wal, name))
        }
        _ if stray.is_some() => TailPolicy::Appended,
        _ => tail_policy(name, pepoch.as_ref(), 0),
    };
    let replayed = replayed_epochs(&installed, pepoch.as_ref());
    let len = storage.len(path).map_err(io)?;
    writeln!(out, "{}: {format} file, {len} bytes", path.display()).map_err(listing_failed)?;
    let judged = (policy, replayed);
    let mut summary = inspect_stored(storage, path, format, judged, verbose, Some(&mut *out))?;
    note_stray(&mut summary, name, &installed, stray);
    writeln!(out, "summary: {}", summary.summary_line()).map_err(listing_failed)?;
    Ok(summary)
}

/// The first bytes of `path`, enough for its magic (fewer if it is
/// shorter).
fn read_head(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>, StorageError> {
    let file = storage.open_read(path)?;
    let mut head = vec![0u8; 4];
    let got = file.read_at(0, &mut head)?;
    head.truncate(got);
    Ok(head)
}

fn not_epochdb(path: &Path, head: &[u8]) -> DurabilityError {
    let head: Vec<String> = head.iter().take(4).map(|b| format!("{b:02x}")).collect();
    DurabilityError::Incompatible(format!(
        "{}: not an epochdb file (starts with [{}], not eLOG, ePEP, eCAT, eCKP, eMET, eDIR, eCPR, ELWL or ELSD)",
        path.display(),
        head.join(" ")
    ))
}

/// What recovery would take as the installed checkpoint, as far as the
/// directory `dir` (holding `names`) tells.
enum Installed {
    /// Directory 0's `checkpoint` file names this one.
    Checkpoint(CheckpointMeta),
    /// Directory 0 (it holds the catalog) without a `checkpoint` file:
    /// none is installed.
    Nothing,
    /// Another directory (the metadata lives in directory 0 only), or a
    /// `checkpoint` file recovery would refuse.
    Unknown,
}

fn installed_checkpoint(storage: &dyn Storage, dir: &Path, names: &[String]) -> Installed {
    if names.iter().any(|n| n == CHECKPOINT_META) {
        let path = dir.join(CHECKPOINT_META);
        let format = FileFormat::CheckpointMeta;
        let judged = (TailPolicy::Synced, 0..=u64::MAX);
        match inspect_stored(storage, &path, format, judged, false, None) {
            Ok(summary) if !summary.is_corrupt() => summary
                .meta
                .map_or(Installed::Unknown, Installed::Checkpoint),
            _ => Installed::Unknown,
        }
    } else if names.iter().any(|n| n == CATALOG) {
        Installed::Nothing
    } else {
        Installed::Unknown
    }
}

/// Why recovery removes the file `name` unread (`remove_strays`, silor
/// §5.1), if it does: a temporary, a checkpoint other than the installed
/// one (a crash or a close mid-checkpoint leaves one, written in place and
/// not yet synced), or a log wholly below the installed checkpoint's `e_l`.
fn stray_reason(name: &str, installed: &Installed) -> Option<String> {
    if name.ends_with(TMP_SUFFIX) {
        return Some("a temporary file, which recovery removes".into());
    }
    let ckpt = parse_ckpt_file_name(name).map(|(id, _, _)| id);
    match (installed, ckpt) {
        (Installed::Checkpoint(meta), Some(id)) if id != meta.id => Some(format!(
            "checkpoint {id} is not the installed one ({}); recovery removes it",
            meta.id
        )),
        (Installed::Checkpoint(meta), None) => match parse_log_name(name) {
            Some(LogName::Old { epoch }) if epoch < meta.e_l => Some(format!(
                "a log wholly below the installed checkpoint's e_l {}; recovery removes it",
                meta.e_l
            )),
            _ => None,
        },
        (Installed::Nothing, Some(id)) => Some(format!(
            "checkpoint {id} was never installed; recovery removes it"
        )),
        _ => None,
    }
}

/// Records in `summary` of the file `name` why recovery removes it unread
/// (`stray`, from [`stray_reason`]); where inspect cannot tell which
/// checkpoint is installed (a directory other than 0), damage in a
/// checkpoint file says how to find out.
fn note_stray(
    summary: &mut InspectSummary,
    name: &str,
    installed: &Installed,
    stray: Option<String>,
) {
    summary.stray = stray;
    let unknown = matches!(installed, Installed::Unknown);
    if let (true, Some((id, _, _)), Some(Damage::Corrupt { reason, .. })) =
        (unknown, parse_ckpt_file_name(name), summary.damage.as_mut())
    {
        reason.push_str(&format!(
            " (unless checkpoint {id} is not the installed one, which directory 0's `checkpoint` file names: recovery removes the others unread)"
        ));
    }
}

/// Lists the epochdb files in directory `dir` to `out`, one line each
/// (name, format, blocks, bytes, contents, damage), then a summary line;
/// a `wal` database's log subdirectory is listed with them.
/// If `dir` holds the installed checkpoint's metadata, the checkpoint files
/// it names in this directory must exist with the recorded lengths.
/// Files are read a chunk at a time, one after another.
///
/// Errors: the directory cannot be listed, a file with an epochdb name
/// cannot be read, or writing to `out` failed.
pub fn inspect_dir(
    storage: &dyn Storage,
    dir: &Path,
    out: &mut dyn Write,
) -> Result<DirSummary, DurabilityError> {
    let mut summary = DirSummary::default();
    list_dir_files(storage, dir, "", &mut summary, None)?;
    list_wal_subdir(storage, dir, &mut summary)?;
    check_checkpoint_files(storage, &[dir.to_path_buf()], &mut summary);
    check_across_files(storage, dir, &mut summary);
    write_dir_listing(dir, &summary, out).map_err(listing_failed)?;
    Ok(summary)
}

/// Lists the directories of one database, `dirs` in the order it was
/// opened with (directory 0 first), as [`inspect_dir`] lists one: every
/// file judged with what directory 0 says (the installed checkpoint, the
/// persistent epoch), the files of directory `k > 0` named
/// `<dir k>/<name>`. Beyond one directory's checks it checks what recovery
/// checks across them: each directory's identity against its place, and
/// the installed checkpoint's files in every directory.
///
/// Errors: as [`inspect_dir`]; `dirs` is empty.
pub fn inspect_database(
    storage: &dyn Storage,
    dirs: &[std::path::PathBuf],
    out: &mut dyn Write,
) -> Result<DirSummary, DurabilityError> {
    let io = |e: StorageError| DurabilityError::from_storage(&e);
    let Some(dir0) = dirs.first() else {
        return Err(DurabilityError::Io("no directory to inspect".into()));
    };
    let database = DatabaseContext::of(storage, dir0, &storage.list(dir0).map_err(io)?);
    let mut summary = DirSummary::default();
    let prefix = |k: usize| match k {
        0 => String::new(),
        _ => format!("{}/", dirs[k].display()),
    };
    for (k, dir) in dirs.iter().enumerate() {
        list_dir_files(storage, dir, &prefix(k), &mut summary, Some((&database, k)))?;
    }
    list_wal_subdir(storage, dir0, &mut summary)?;
    let count = dirs.len() as u32;
    for (k, dir) in dirs.iter().enumerate() {
        let name = format!("{}{DIRECTORY}", prefix(k));
        let identity = summary
            .files
            .iter()
            .find(|(listed, _)| *listed == name)
            .and_then(|(_, file)| file.facts.directory);
        if let Some((index, of)) = identity.filter(|&found| found != (k as u32, count)) {
            summary.problems.push(format!(
                "{} is directory {index} of {of} of its database, but was given as directory {k} of {count}",
                dir.display()
            ));
        }
    }
    if let Installed::Checkpoint(meta) = &database.installed {
        if meta.dirs != count {
            summary.problems.push(format!(
                "checkpoint {} spans {} directories, but the database has {count}",
                meta.id, meta.dirs
            ));
        }
    }
    check_checkpoint_files(storage, dirs, &mut summary);
    check_across_files(storage, dir0, &mut summary);
    write_dir_listing(dir0, &summary, out).map_err(listing_failed)?;
    Ok(summary)
}

/// A `wal` database keeps its central log in a subdirectory of directory
/// 0 (`dir0`): lists it with the rest, its files named `wal/…`.
fn list_wal_subdir(
    storage: &dyn Storage,
    dir0: &Path,
    summary: &mut DirSummary,
) -> Result<(), DurabilityError> {
    if let Some(at) = summary.skipped.iter().position(|n| n == WAL_SUBDIR) {
        let wal_dir = dir0.join(WAL_SUBDIR);
        if storage.list(&wal_dir).is_ok() {
            summary.skipped.remove(at);
            list_dir_files(storage, &wal_dir, "wal/", summary, None)?;
        }
    }
    Ok(())
}

/// What directory 0 of a database says about the files of every
/// directory: the installed checkpoint and the persistent epoch.
struct DatabaseContext {
    installed: Installed,
    pepoch: Option<PepochRecord>,
}

impl DatabaseContext {
    fn of(storage: &dyn Storage, dir0: &Path, names: &[String]) -> Self {
        Self {
            installed: installed_checkpoint(storage, dir0, names),
            pepoch: dir_pepoch(storage, dir0, names),
        }
    }
}

/// Adds the files of `dir` to `summary`, each named `prefix` + its name,
/// judged with `database`'s directory 0 if given, `dir` being directory
/// `k` of it (else with what `dir` itself holds).
fn list_dir_files(
    storage: &dyn Storage,
    dir: &Path,
    prefix: &str,
    summary: &mut DirSummary,
    database: Option<(&DatabaseContext, usize)>,
) -> Result<(), DurabilityError> {
    let io = |e: StorageError| DurabilityError::from_storage(&e);
    let names = storage.list(dir).map_err(io)?;
    let own;
    let DatabaseContext { installed, pepoch } = match database {
        Some((database, _)) => database,
        None => {
            own = DatabaseContext::of(storage, dir, &names);
            &own
        }
    };
    let wal = (
        wal_persisted_sdl(storage, dir),
        wal_replay_from(storage, dir),
    );
    for name in &names {
        let path = dir.join(name);
        let by_name = FileFormat::from_file_name(name);
        let listed = format!("{prefix}{name}");
        let head = match read_head(storage, &path) {
            Ok(head) => head,
            // Subdirectories and unreadable strangers are not ours.
            Err(_) if by_name.is_none() => {
                summary.skipped.push(listed);
                continue;
            }
            Err(error) => return Err(io(error)),
        };
        let Some(format) = FileFormat::detect(&head).or(by_name) else {
            summary.skipped.push(listed);
            continue;
        };
        let stray = stray_reason(name, installed);
        let policy = match format {
            FileFormat::WalLog | FileFormat::WalSdl => {
                TailPolicy::Wal(wal_context(&names, wal, name))
            }
            _ if stray.is_some() => TailPolicy::Appended,
            // `pepoch` records directory 0's synced `data.log` only.
            _ => tail_policy(name, pepoch.as_ref(), database.map_or(0, |(_, k)| k)),
        };
        let judged = (policy, replayed_epochs(installed, pepoch.as_ref()));
        let mut file = inspect_stored(storage, &path, format, judged, false, None)?;
        note_stray(&mut file, name, installed, stray);
        summary.files.push((listed, file));
    }
    Ok(())
}

/// The installed checkpoint's files in `dirs` (directory 0, the one
/// holding its metadata, and those after it if known) must exist with the
/// lengths it recorded (recovery checks both).
fn check_checkpoint_files(
    storage: &dyn Storage,
    dirs: &[std::path::PathBuf],
    summary: &mut DirSummary,
) {
    let Some(meta) = summary
        .files
        .iter()
        .find(|(name, _)| name == CHECKPOINT_META)
        .and_then(|(_, file)| file.meta.clone())
    else {
        return;
    };
    for (index, name, expected) in &meta.files {
        let Some(dir) = dirs.get(*index as usize) else {
            continue;
        };
        match storage.len(&dir.join(name)) {
            Ok(len) if len == *expected => {}
            Ok(len) => summary.problems.push(format!(
                "checkpoint {} recorded {name} as {expected} bytes, but it has {len}",
                meta.id
            )),
            Err(_) => summary.problems.push(format!(
                "checkpoint {} names {name}, which is missing",
                meta.id
            )),
        }
    }
}

/// What recovery checks between directory 0's files beyond the
/// checkpoint's file list: its `e_h` against `pepoch`'s persistent epoch
/// (not in the `cpr` mode, which has no log), its records' epochs against
/// `e_h`, and the tables the checkpoint and the replayed log write against
/// the catalog.
fn check_across_files(storage: &dyn Storage, dir: &Path, summary: &mut DirSummary) {
    let find = |format: FileFormat| {
        summary
            .files
            .iter()
            .find(|(name, f)| f.format == format && !name.contains('/'))
            .map(|(_, f)| f)
    };
    let meta = find(FileFormat::CheckpointMeta).and_then(|f| f.meta.clone());
    let catalog_tables = find(FileFormat::Catalog).and_then(|f| f.facts.catalog_tables);
    let cpr = find(FileFormat::CprMarker).is_some();
    let identity = find(FileFormat::Directory).and_then(|f| f.facts.directory);
    let mut problems = Vec::new();
    // The catalog lives in directory 0 only.
    if let (Some((index, _)), Some(_)) = (identity, catalog_tables) {
        if index != 0 {
            problems.push(format!(
                "the directory holds the catalog, so it is directory 0, but its identity says directory {index}"
            ));
        }
    }
    let names = storage.list(dir).unwrap_or_default();
    let pepoch = dir_pepoch(storage, dir, &names);
    let logs = pepoch.as_ref().map_or(0, |p| p.logs.len() as u32);
    if let (Some((_, dirs)), true) = (identity, logs > 0) {
        if dirs != logs {
            problems.push(format!(
                "the directory identity counts {dirs} directories, but pepoch records the logs of {logs}"
            ));
        }
    }
    if let (Some((_, dirs)), Some(meta)) = (identity, &meta) {
        if dirs != meta.dirs {
            problems.push(format!(
                "the directory identity counts {dirs} directories, but checkpoint {} spans {}",
                meta.id, meta.dirs
            ));
        }
    }
    if let (Some(meta), false) = (&meta, cpr) {
        let e_p = pepoch.as_ref().map(|p| p.e_p);
        if let Some(e_p) = e_p.filter(|&e_p| meta.e_h > e_p) {
            problems.push(format!(
                "checkpoint {} ends at epoch {}, but pepoch says only {e_p} is persistent",
                meta.id, meta.e_h
            ));
        }
    }
    for (listed, file) in &summary.files {
        let wal = matches!(file.format, FileFormat::WalLog | FileFormat::WalSdl);
        if file.stray.is_some() || wal {
            continue;
        }
        let name = listed.rsplit('/').next().unwrap_or(listed);
        // (The `wal` mode, with no catalog, keeps LSNs in e_l and e_h.)
        let installed = parse_ckpt_file_name(name)
            .zip(meta.as_ref())
            .filter(|((id, _, _), meta)| *id == meta.id && catalog_tables.is_some());
        if let Some((_, meta)) = installed.filter(|(_, m)| file.facts.newest_epoch > m.e_h) {
            problems.push(format!(
                "{listed} holds a record of epoch {}, past checkpoint {}'s e_h {}",
                file.facts.newest_epoch, meta.id, meta.e_h
            ));
        }
        if let (Some(table), Some(tables)) = (file.facts.max_table, catalog_tables) {
            if table >= tables {
                problems.push(format!(
                    "{listed} writes table {table}, but the catalog holds {}",
                    count(u64::from(tables), "table", "tables")
                ));
            }
        }
    }
    summary.problems.extend(problems);
}

fn write_dir_listing(dir: &Path, summary: &DirSummary, out: &mut dyn Write) -> fmt::Result {
    writeln!(
        out,
        "{}: {} epochdb files",
        dir.display(),
        summary.files.len()
    )?;
    let width = summary
        .files
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    for (name, file) in &summary.files {
        writeln!(
            out,
            "{name:<width$}  {:<19} {:>14} {:>12} bytes  {}  {}",
            file.format.name(),
            count(file.blocks, "block", "blocks"),
            file.bytes,
            file.detail,
            file.verdict()
        )?;
    }
    for name in &summary.skipped {
        writeln!(out, "{name:<width$}  (not an epochdb file, skipped)")?;
    }
    for problem in &summary.problems {
        writeln!(out, "CORRUPT: {problem}")?;
    }
    let bytes: u64 = summary.files.iter().map(|(_, f)| f.bytes).sum();
    let torn = summary
        .files
        .iter()
        .filter(|(_, f)| matches!(f.damage, Some(Damage::TornTail { .. })))
        .count();
    let strays = summary
        .files
        .iter()
        .filter(|(_, f)| f.stray.is_some())
        .count();
    write!(
        out,
        "summary: {} files, {bytes} bytes, {torn} with a torn tail, {} corrupt",
        summary.files.len(),
        summary.corrupt()
    )?;
    if strays > 0 {
        write!(out, ", {strays} that recovery removes unread")?;
    }
    writeln!(out)
}

/// Why a listing stopped early.
enum ListFailure {
    /// Reading the file failed.
    Storage(StorageError),
    /// Writing to the listing's output failed.
    Listing,
}

impl From<StorageError> for ListFailure {
    fn from(error: StorageError) -> Self {
        ListFailure::Storage(error)
    }
}

impl From<fmt::Error> for ListFailure {
    fn from(_: fmt::Error) -> Self {
        ListFailure::Listing
    }
}

impl From<ListFailure> for DurabilityError {
    fn from(failure: ListFailure) -> Self {
        match failure {
            ListFailure::Storage(error) => DurabilityError::from_storage(&error),
            ListFailure::Listing => listing_failed(fmt::Error),
        }
    }
}

/// Decodes the file `path` as `format`, writing the block lines to `out`
/// if given. Block-framed files are read through recovery's chunked scan
/// (`scan_blocks`); the bytes after a damaged block are read only when
/// judging it needs them (`data.log`: does an intact block follow?).
fn inspect_stored(
    storage: &dyn Storage,
    path: &Path,
    format: FileFormat,
    (policy, replayed): (TailPolicy, Epochs),
    verbose: bool,
    out: Option<&mut dyn Write>,
) -> Result<InspectSummary, DurabilityError> {
    let io = |e: StorageError| DurabilityError::from_storage(&e);
    match format {
        FileFormat::WalLog => {
            // Both callers give `wal` files their context (`wal_context`).
            let context = match policy {
                TailPolicy::Wal(context) => context,
                // No directory around it: the last file, nothing persisted.
                _ => WalLogContext {
                    last: true,
                    ..WalLogContext::default()
                },
            };
            return inspect_wal_log(storage, path, context, verbose, out);
        }
        FileFormat::WalSdl => {
            let data = storage.read(path).map_err(io)?;
            return inspect_wal_sdl(&data, out).map_err(listing_failed);
        }
        _ => {}
    }
    let mut lister =
        BlockLister::new(format, (policy, replayed), verbose, out).map_err(listing_failed)?;
    let (end, len) = scan_blocks::<ListFailure>(
        storage,
        path,
        format.magic(),
        &mut ScanBuffers::default(),
        false,
        |offset, block| Ok(lister.block(offset, &block)?),
    )?;
    if let ScanEnd::Damaged { offset, error } = end {
        lister.frame_error(&error, len, |from, e_p| {
            let rest = read_rest(storage, path, offset)?;
            let from = from.saturating_sub(offset) as usize;
            Ok(log_block_after(&rest, from, e_p).map(|at| offset + at as u64))
        })?;
    }
    lister.finish(len).map_err(listing_failed)
}

/// Lists a block-framed file one block at a time, as a scan hands them
/// over, and judges where its blocks end (module docs).
struct BlockLister<'o> {
    decoder: Decoder,
    policy: TailPolicy,
    verbose: bool,
    blocks: u64,
    damage: Option<Damage>,
    /// The current block's lines, written to `out` whole.
    text: String,
    out: Option<&'o mut dyn Write>,
}

impl<'o> BlockLister<'o> {
    /// A lister that has written the column header to `out`.
    fn new(
        format: FileFormat,
        (policy, replayed): (TailPolicy, Epochs),
        verbose: bool,
        mut out: Option<&'o mut dyn Write>,
    ) -> Result<Self, fmt::Error> {
        if let Some(out) = out.as_deref_mut() {
            writeln!(
                out,
                "{:>10} {:>10} {:>4} {:>5}  contents",
                "offset", "length", "ver", "kind"
            )?;
        }
        Ok(Self {
            decoder: Decoder::new(format, replayed),
            policy,
            verbose,
            blocks: 0,
            damage: None,
            text: String::new(),
            out,
        })
    }

    /// Lists the intact frame at `offset`; breaks once its payload is
    /// damaged (decoding stops at the first damage).
    fn block(&mut self, offset: u64, block: &Block<'_>) -> Result<ControlFlow<()>, fmt::Error> {
        self.text.clear();
        let text = &mut self.text;
        let length = BLOCK_HEADER_BYTES + block.payload.len();
        write!(
            text,
            "{offset:>10} {length:>10} {:>4} {:>5}  ",
            block.version, block.kind
        )?;
        let prefix_len = text.len();
        let verdict = if block.version == FORMAT_VERSION {
            self.decoder.block(offset, block, self.verbose, text)
        } else {
            Err(Damage::Incompatible {
                offset,
                version: block.version,
            })
        };
        match verdict {
            Err(found) => {
                if text.len() == prefix_len {
                    writeln!(text, "{found}")?;
                } else {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    writeln!(text, "{:>12}{found}", "")?;
                }
                self.damage = Some(found);
            }
            Ok(()) => {
                self.blocks += 1;
                if !text.ends_with('\n') {
                    text.push('\n');
                }
            }
        }
        if let Some(out) = self.out.as_deref_mut() {
            out.write_str(&self.text)?;
        }
        Ok(if self.damage.is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }

    /// Lists the framing failure `error` at which the blocks of a file of
    /// `len` bytes end, judged by the tail policy; `block_after(from, e_p)`
    /// finds the first intact log block at or after file offset `from` (of
    /// an epoch at or below `e_p` if given).
    fn frame_error(
        &mut self,
        error: &FrameError,
        len: u64,
        block_after: impl FnOnce(u64, Option<u64>) -> Result<Option<u64>, ListFailure>,
    ) -> Result<(), ListFailure> {
        let found = judge(
            error,
            len,
            self.policy,
            self.decoder.log_header_seq,
            block_after,
        )?;
        let offset = found.offset();
        self.text.clear();
        write!(
            self.text,
            "{offset:>10} {:>10} {:>4} {:>5}  {found}",
            len - offset,
            "-",
            "-"
        )?;
        if let (Damage::TornTail { .. }, FrameError::Corrupt { reason, .. }) = (&found, error) {
            // data.log's unsynced tail may hold any bytes.
            write!(self.text, " ({reason}; no intact block follows)")?;
        }
        self.text.push('\n');
        if let Some(out) = self.out.as_deref_mut() {
            out.write_str(&self.text)?;
        }
        self.damage = Some(found);
        Ok(())
    }

    /// The summary of a file of `len` bytes, after the damage a file has
    /// by what it lacks (listed too).
    fn finish(mut self, len: u64) -> Result<InspectSummary, fmt::Error> {
        if self.damage.as_ref().is_none_or(|d| !is_refused(d)) {
            if let Some(missing) = self.decoder.missing() {
                if let Some(out) = self.out {
                    writeln!(
                        out,
                        "{:>10} {:>10} {:>4} {:>5}  {missing}",
                        0, "-", "-", "-"
                    )?;
                }
                self.damage = Some(missing);
            }
        }
        let format = self.decoder.format;
        let (detail, entries, meta, facts) = self.decoder.finish();
        Ok(InspectSummary {
            format,
            blocks: self.blocks,
            bytes: len,
            entries,
            detail,
            damage: self.damage,
            stray: None,
            meta,
            facts,
        })
    }
}

fn is_refused(damage: &Damage) -> bool {
    !matches!(damage, Damage::TornTail { .. })
}

/// Judges a framing failure in a file of `len` bytes by the file's tail
/// policy (module docs), as `replay_file` does; `header_seq` is the
/// sequence number of the log header at offset 0, `block_after` as in
/// [`BlockLister::frame_error`].
fn judge(
    error: &FrameError,
    len: u64,
    policy: TailPolicy,
    header_seq: Option<u64>,
    block_after: impl FnOnce(u64, Option<u64>) -> Result<Option<u64>, ListFailure>,
) -> Result<Damage, ListFailure> {
    let (offset, torn) = match error {
        FrameError::TornTail { offset } => (*offset as u64, true),
        FrameError::Corrupt { offset, .. } => (*offset as u64, false),
        _ => (0, false),
    };
    let bytes = len.saturating_sub(offset);
    let tail = Damage::TornTail { offset, bytes };
    let corrupt = |reason: String| Damage::Corrupt { offset, reason };
    let reason = match error {
        FrameError::Corrupt { reason, .. } => reason.to_string(),
        other => other.to_string(),
    };
    Ok(match policy {
        // `wal` files never reach here (`inspect_stored`).
        TailPolicy::Appended | TailPolicy::Wal(_) if torn => tail,
        TailPolicy::Appended | TailPolicy::Wal(_) => corrupt(reason),
        TailPolicy::CurrentLog {
            durable: Some((e_p, synced)),
        } => {
            if header_seq == Some(synced.seq) && offset < synced.len {
                corrupt(format!(
                    "{reason}, inside the {} bytes pepoch records as synced",
                    synced.len
                ))
            } else if let Some(next) = block_after(offset + 1, Some(e_p))? {
                corrupt(format!(
                    "{reason}; yet the block at {next}, of a persistent epoch (e_p {e_p}), follows it"
                ))
            } else {
                tail
            }
        }
        TailPolicy::CurrentLog { durable: None } => match block_after(offset + 1, None)? {
            None => tail,
            Some(next) => corrupt(format!("{reason}; yet an intact block follows at {next}")),
        },
        TailPolicy::Synced if torn => corrupt(format!(
            "the file ends inside a block ({bytes} bytes), but it was synced before it was named"
        )),
        TailPolicy::Synced => corrupt(reason),
    })
}

/// The offset of the first intact log block at or after `from`, of an
/// epoch at or below `e_p` if given (recovery's `persistent_block_after`).
fn log_block_after(data: &[u8], from: usize, e_p: Option<u64>) -> Option<usize> {
    let magic = LOG_MAGIC.to_le_bytes();
    let tail = data.get(from..)?;
    tail.windows(4)
        .enumerate()
        .filter(|(_, window)| *window == magic)
        .map(|(at, _)| from + at)
        .find(|&at| match decode_block(data, at, LOG_MAGIC) {
            Ok(Some((block, _))) => match e_p {
                None => true,
                Some(e_p) => {
                    block.kind == KIND_LOG
                        && parse_log_block(block.payload).is_ok_and(|b| b.epoch <= e_p)
                }
            },
            _ => false,
        })
}

/// A key in hex (its first `KEY_HEX_BYTES_MAX` bytes) and its length.
pub(crate) fn key_hex(key: &[u8]) -> String {
    if key.is_empty() {
        return "(empty)".into();
    }
    let mut text = String::with_capacity(2 * KEY_HEX_BYTES_MAX + 24);
    for byte in key.iter().take(KEY_HEX_BYTES_MAX) {
        let _ = write!(text, "{byte:02x}");
    }
    if key.len() > KEY_HEX_BYTES_MAX {
        text.push('…');
    }
    let _ = write!(text, " ({} bytes)", key.len());
    text
}

/// `n` and the noun in the right number.
pub(crate) fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A TID as `0x…` with its epoch and sequence number.
pub(crate) fn tid_text(raw: u64) -> String {
    let tid = Tid::from_raw(raw);
    format!(
        "{raw:#018x} (epoch {}, seq {})",
        tid.epoch(),
        tid.sequence()
    )
}

/// Per-format decoding state across the blocks of one file.
struct Decoder {
    format: FileFormat,
    /// The epochs recovery replays: log blocks outside them are skipped
    /// unread, so damage inside their entries is not corruption.
    replayed: Epochs,
    entries: u64,
    writes: u64,
    epochs: Option<(u64, u64)>,
    /// The sequence number of the log header at offset 0.
    log_header_seq: Option<u64>,
    e_p_max: Option<u64>,
    catalog_header: Option<u32>,
    catalog_tables: u32,
    ckpt_tables: BTreeSet<u32>,
    meta: Option<CheckpointMeta>,
    directory: Option<(u32, u32)>,
    cpr_marker: bool,
    facts: Facts,
}

impl Decoder {
    fn new(format: FileFormat, replayed: Epochs) -> Self {
        Self {
            format,
            replayed,
            entries: 0,
            writes: 0,
            epochs: None,
            log_header_seq: None,
            e_p_max: None,
            catalog_header: None,
            catalog_tables: 0,
            ckpt_tables: BTreeSet::new(),
            meta: None,
            directory: None,
            cpr_marker: false,
            facts: Facts::default(),
        }
    }

    /// Decodes one intact block into `text` (its contents after the line's
    /// prefix, then verbose lines); the damage if its payload is wrong.
    fn block(
        &mut self,
        offset: u64,
        block: &Block<'_>,
        verbose: bool,
        text: &mut String,
    ) -> Result<(), Damage> {
        let corrupt = |reason: String| Damage::Corrupt { offset, reason };
        let expected_kinds: &[u16] = match self.format {
            FileFormat::Log => &[KIND_LOG, KIND_LOG_HEADER],
            FileFormat::Pepoch => &[KIND_PEPOCH],
            FileFormat::Catalog => &[KIND_CATALOG_HEADER, KIND_CATALOG_TABLE],
            FileFormat::CheckpointData => &[KIND_CKPT],
            FileFormat::CheckpointMeta => &[KIND_META],
            FileFormat::Directory => &[KIND_DIR],
            FileFormat::CprMarker => &[KIND_CPR],
            // Decoded by `wal/inspect.rs`, never by this decoder.
            FileFormat::WalLog | FileFormat::WalSdl => &[],
        };
        if !expected_kinds.contains(&block.kind) {
            text.push_str("unknown kind");
            return Err(corrupt(format!(
                "block kind {} is not one of the {} format's",
                block.kind, self.format
            )));
        }
        let result = match self.format {
            FileFormat::Log if block.kind == KIND_LOG_HEADER => {
                self.log_header_block(offset, block.payload, text)
            }
            FileFormat::Log => self.log_block(block.payload, verbose, text),
            FileFormat::Pepoch => self.pepoch_block(block.payload, text),
            FileFormat::Catalog => self.catalog_block(offset, block, text),
            FileFormat::CheckpointData => self.ckpt_block(block.payload, verbose, text),
            FileFormat::CheckpointMeta => self.meta_block(block.payload, text),
            FileFormat::Directory => self.directory_block(block.payload, text),
            FileFormat::CprMarker => self.cpr_marker_block(block.payload, text),
            FileFormat::WalLog | FileFormat::WalSdl => Ok(()),
        };
        match result {
            Ok(()) => Ok(()),
            Err(Problem::Payload(reason)) => Err(corrupt(reason)),
            // Writing to a String never fails; were it to, the listing of
            // this block is incomplete, which is all the reader must know.
            Err(Problem::Fmt) => Err(corrupt("the block's listing could not be written".into())),
        }
    }

    fn log_block(
        &mut self,
        payload: &[u8],
        verbose: bool,
        text: &mut String,
    ) -> Result<(), Problem> {
        // Validate and count first, so a bad entry is reported before any
        // of the block's entries are listed.
        let mut parsed = parse_log_block(payload)?;
        let epoch = parsed.epoch;
        let mut writes = Vec::new();
        let (mut entries, mut write_count) = (0u64, 0u64);
        let counted = (|| {
            while let Some(raw) = parsed.next_entry(&mut writes)? {
                check_log_tid(raw, epoch)?;
                entries += 1;
                write_count += writes.len() as u64;
            }
            Ok::<_, Problem>(())
        })();
        if let Err(Problem::Payload(reason)) = &counted {
            if !self.replayed.contains(&epoch) {
                // Recovery skips the block by its epoch (`replay_file`).
                write!(
                    text,
                    "log epoch {epoch}: {reason} (outside the epochs {}..={} recovery replays: not read)",
                    self.replayed.start(),
                    self.replayed.end()
                )?;
                return Ok(());
            }
        }
        counted?;
        if self.replayed.contains(&epoch) {
            let mut parsed = parse_log_block(payload)?;
            while parsed.next_entry(&mut writes)?.is_some() {
                let most = writes.iter().map(|w| w.table).max();
                self.facts.max_table = self.facts.max_table.max(most);
            }
        }
        write!(
            text,
            "log epoch {epoch}: {}, {}",
            count(entries, "entry", "entries"),
            count(write_count, "write", "writes")
        )?;
        self.entries += entries;
        self.writes += write_count;
        self.epochs = Some(match self.epochs {
            None => (epoch, epoch),
            Some((low, high)) => (low.min(epoch), high.max(epoch)),
        });
        if verbose {
            text.push('\n');
            let mut parsed = parse_log_block(payload)?;
            while let Some(raw) = parsed.next_entry(&mut writes)? {
                writeln!(
                    text,
                    "{:>12}tid {}: {}",
                    "",
                    tid_text(raw),
                    count(writes.len() as u64, "write", "writes")
                )?;
                for write in &writes {
                    let value = match write.value {
                        Some(value) => format!("value {} bytes", value.len()),
                        None => "tombstone".to_string(),
                    };
                    writeln!(
                        text,
                        "{:>14}table {} key {} {value}",
                        "",
                        write.table,
                        key_hex(write.key)
                    )?;
                }
            }
        }
        Ok(())
    }

    fn log_header_block(
        &mut self,
        offset: u64,
        payload: &[u8],
        text: &mut String,
    ) -> Result<(), Problem> {
        let seq = parse_log_header(payload)?;
        write!(text, "log file header: sequence {seq}")?;
        if offset != 0 {
            return Err(Problem::Payload("a log file header not at offset 0".into()));
        }
        self.log_header_seq = Some(seq);
        Ok(())
    }

    fn pepoch_block(&mut self, payload: &[u8], text: &mut String) -> Result<(), Problem> {
        let record = PepochRecord::parse(payload)?;
        let e_p = record.e_p;
        self.e_p_max = Some(self.e_p_max.map_or(e_p, |max| max.max(e_p)));
        write!(text, "pepoch e_p {e_p}")?;
        for (dir, log) in record.logs.iter().enumerate() {
            write!(
                text,
                "; dir {dir}: data.log #{} synced to {} bytes",
                log.seq, log.len
            )?;
        }
        Ok(())
    }

    fn catalog_block(
        &mut self,
        offset: u64,
        block: &Block<'_>,
        text: &mut String,
    ) -> Result<(), Problem> {
        if block.kind == KIND_CATALOG_HEADER {
            if offset != 0 {
                text.push_str("catalog header");
                return Err(Problem::Payload(
                    "a second catalog header, not at offset 0".into(),
                ));
            }
            let mut reader = Reader::new(block.payload);
            let version = reader.u32("catalog header version")?;
            if !reader.is_empty() {
                return Err(Problem::Payload(
                    "trailing bytes after the catalog header".into(),
                ));
            }
            self.catalog_header = Some(version);
            write!(text, "catalog header: format version {version}")?;
            return Ok(());
        }
        let (id, name) = parse_catalog_table(block.payload)?;
        write!(text, "table {id} {name:?}")?;
        if self.catalog_header.is_none() {
            return Err(Problem::Payload(
                "table entry before the catalog header".into(),
            ));
        }
        if id != self.catalog_tables {
            return Err(Problem::Payload(format!(
                "table id {id} out of order (expected {})",
                self.catalog_tables
            )));
        }
        self.catalog_tables += 1;
        Ok(())
    }

    fn ckpt_block(
        &mut self,
        payload: &[u8],
        verbose: bool,
        text: &mut String,
    ) -> Result<(), Problem> {
        let mut parsed = parse_ckpt_block(payload)?;
        let table = parsed.table;
        let mut records = 0u64;
        while let Some(record) = parsed.next_record()? {
            check_ckpt_tid(record.tid)?;
            records += 1;
            let epoch = Tid::from_raw(record.tid).epoch();
            self.facts.newest_epoch = self.facts.newest_epoch.max(epoch);
        }
        self.facts.max_table = self.facts.max_table.max(Some(table));
        write!(
            text,
            "checkpoint table {table}: {}",
            count(records, "record", "records")
        )?;
        self.entries += records;
        self.ckpt_tables.insert(table);
        if verbose {
            text.push('\n');
            let mut parsed = parse_ckpt_block(payload)?;
            while let Some(record) = parsed.next_record()? {
                writeln!(
                    text,
                    "{:>12}key {} tid {} value {} bytes",
                    "",
                    key_hex(record.key),
                    tid_text(record.tid),
                    record.value.len()
                )?;
            }
        }
        Ok(())
    }

    fn meta_block(&mut self, payload: &[u8], text: &mut String) -> Result<(), Problem> {
        if self.meta.is_some() {
            text.push_str("checkpoint metadata");
            return Err(Problem::Payload(
                "trailing bytes after checkpoint metadata".into(),
            ));
        }
        let meta = CheckpointMeta::parse(payload)?;
        write!(
            text,
            "checkpoint {}: e_l {}, e_h {}, {}, {}, {}",
            meta.id,
            meta.e_l,
            meta.e_h,
            count(u64::from(meta.dirs), "dir", "dirs"),
            count(meta.tables.len() as u64, "table", "tables"),
            count(meta.files.len() as u64, "file", "files")
        )?;
        for (id, name) in &meta.tables {
            write!(text, "\n{:>12}table {id} {name:?}", "")?;
        }
        for (dir, name, bytes) in &meta.files {
            write!(text, "\n{:>12}file dir {dir} {name} ({bytes} bytes)", "")?;
        }
        for (session, serial) in &meta.sessions {
            write!(text, "\n{:>12}session {session} CPR point {serial}", "")?;
        }
        self.meta = Some(meta);
        Ok(())
    }

    fn directory_block(&mut self, payload: &[u8], text: &mut String) -> Result<(), Problem> {
        if self.directory.is_some() {
            text.push_str("directory identity");
            return Err(Problem::Payload("a second directory identity block".into()));
        }
        let (index, count) = parse_dir_identity(payload)?;
        write!(text, "directory {index} of {count}")?;
        self.directory = Some((index, count));
        Ok(())
    }

    fn cpr_marker_block(&mut self, payload: &[u8], text: &mut String) -> Result<(), Problem> {
        if self.cpr_marker || payload != b"cpr" {
            text.push_str("cpr marker");
            return Err(Problem::Payload(if self.cpr_marker {
                "a second cpr marker block".into()
            } else {
                format!("cpr marker payload {payload:?}, not \"cpr\"")
            }));
        }
        text.push_str("a database of the cpr mode");
        self.cpr_marker = true;
        Ok(())
    }

    /// Damage a file has by what it lacks: a catalog without its header, a
    /// metadata file without its block (recovery refuses both).
    fn missing(&self) -> Option<Damage> {
        let reason = match self.format {
            FileFormat::Catalog if self.catalog_header.is_none() => "no catalog header",
            FileFormat::CheckpointMeta if self.meta.is_none() => "no checkpoint metadata block",
            FileFormat::Directory if self.directory.is_none() => "no directory identity block",
            FileFormat::CprMarker if !self.cpr_marker => "no cpr marker block",
            _ => return None,
        };
        Some(Damage::Corrupt {
            offset: 0,
            reason: reason.into(),
        })
    }

    /// The one-line detail, entries, and the metadata.
    fn finish(mut self) -> (String, u64, Option<CheckpointMeta>, Facts) {
        if self.format == FileFormat::Catalog && self.catalog_header.is_some() {
            self.facts.catalog_tables = Some(self.catalog_tables);
        }
        self.facts.directory = self.directory;
        let detail = match self.format {
            FileFormat::Log => match self.epochs {
                Some((low, high)) => format!(
                    "epochs {low}..={high}, {}, {}",
                    count(self.entries, "entry", "entries"),
                    count(self.writes, "write", "writes")
                ),
                None => "no blocks".into(),
            },
            FileFormat::Pepoch => match self.e_p_max {
                Some(e_p) => format!("e_p {e_p}"),
                None => "no e_p yet".into(),
            },
            FileFormat::Catalog => match self.catalog_header {
                Some(version) => format!(
                    "format {version}, {}",
                    count(u64::from(self.catalog_tables), "table", "tables")
                ),
                None => "no header".into(),
            },
            FileFormat::CheckpointData if self.ckpt_tables.is_empty() => "no records".into(),
            FileFormat::CheckpointData => {
                let tables: Vec<String> = self.ckpt_tables.iter().map(u32::to_string).collect();
                format!(
                    "table {}, {}",
                    tables.join(","),
                    count(self.entries, "record", "records")
                )
            }
            FileFormat::CheckpointMeta => match &self.meta {
                Some(meta) => format!(
                    "checkpoint {}, e_l {}, e_h {}, {}",
                    meta.id,
                    meta.e_l,
                    meta.e_h,
                    count(meta.files.len() as u64, "file", "files")
                ),
                None => "empty".into(),
            },
            FileFormat::Directory => match self.directory {
                Some((index, count)) => format!("directory {index} of {count}"),
                None => "empty".into(),
            },
            FileFormat::CprMarker if self.cpr_marker => "cpr mode".into(),
            FileFormat::CprMarker => "empty".into(),
            FileFormat::WalLog | FileFormat::WalSdl => String::new(),
        };
        (detail, self.entries, self.meta, self.facts)
    }
}

/// Why a payload could not be listed.
enum Problem {
    /// It does not parse or breaks a rule recovery checks.
    Payload(String),
    /// Writing the text failed (never, for a `String`).
    Fmt,
}

impl From<fmt::Error> for Problem {
    fn from(_: fmt::Error) -> Self {
        Problem::Fmt
    }
}

impl From<super::format::Malformed> for Problem {
    fn from(error: super::format::Malformed) -> Self {
        Problem::Payload(error.to_string())
    }
}

/// A logged TID has no status bits and lies in its block's epoch
/// (recovery's check, silor §3.4: a buffer holds one epoch).
fn check_log_tid(raw: u64, epoch: u64) -> Result<(), Problem> {
    if raw & STATUS_MASK != 0 || Tid::from_raw(raw).epoch() != epoch {
        return Err(Problem::Payload(format!(
            "tid {raw:#x} outside block epoch {epoch}"
        )));
    }
    Ok(())
}

fn check_ckpt_tid(raw: u64) -> Result<(), Problem> {
    if raw & STATUS_MASK != 0 {
        return Err(Problem::Payload(format!("bad tid {raw:#x}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use epochdb_storage::{encode_block, SimStorage};
    use proptest::prelude::*;

    use super::super::format::{
        encode_catalog_header, encode_catalog_table, encode_log_header, put_ckpt_record,
        put_entry_header, put_write, seal_ckpt_block, seal_log_block, start_ckpt_block,
        start_log_block,
    };
    use super::*;
    use crate::{Config, Database, DurabilityKind, SilorOptions};

    type Write<'a> = (u32, &'a [u8], Option<&'a [u8]>);

    fn encode_pepoch(e_p: u64) -> Vec<u8> {
        PepochRecord {
            e_p,
            logs: vec![SyncedLog { seq: 1, len: 24 }],
        }
        .encode()
    }

    fn tid(epoch: u64, seq: u64) -> u64 {
        Tid::first_of_epoch(epoch).raw() + (seq << STATUS_MASK.count_ones())
    }

    fn log_block(epoch: u64, entries: &[(u64, &[Write<'_>])]) -> Vec<u8> {
        let mut buffer = Vec::new();
        start_log_block(&mut buffer, epoch);
        for (tid, writes) in entries {
            put_entry_header(&mut buffer, *tid, writes.len() as u32);
            for (table, key, value) in *writes {
                put_write(&mut buffer, *table, key, *value);
            }
        }
        seal_log_block(&mut buffer);
        buffer
    }

    /// Two log blocks (epochs 5 and 6) and the length of the first.
    fn two_blocks() -> (Vec<u8>, usize) {
        let mut data = log_block(
            5,
            &[
                (tid(5, 1), &[(0, b"k1", Some(b"abc")), (1, b"k2", None)]),
                (tid(5, 2), &[(0, b"k3", Some(b""))]),
            ],
        );
        let first = data.len();
        data.extend(log_block(6, &[(tid(6, 0), &[(0, b"k1", Some(b"xyz"))])]));
        (data, first)
    }

    fn disk(files: &[(&str, &[u8])]) -> SimStorage {
        let disk = SimStorage::new(1);
        disk.create_dir_all(Path::new("/db")).unwrap();
        for (name, bytes) in files {
            let mut file = disk.create(&Path::new("/db").join(name)).unwrap();
            file.append(bytes).unwrap();
        }
        disk
    }

    fn inspect(name: &str, bytes: &[u8], verbose: bool) -> (InspectSummary, String) {
        let disk = disk(&[(name, bytes)]);
        let mut out = String::new();
        let summary = inspect_file(&disk, &Path::new("/db").join(name), verbose, &mut out).unwrap();
        (summary, out)
    }

    #[test]
    fn the_cpr_marker_is_recognised_and_checked() {
        let marker = super::super::format::encode_cpr_marker();
        let (summary, out) = inspect("cpr", &marker, false);
        assert_eq!(summary.format, FileFormat::CprMarker);
        assert_eq!(summary.detail, "cpr mode", "{out}");
        assert!(summary.damage.is_none(), "{out}");
        let mut bad = Vec::new();
        encode_block(&mut bad, CPR_MAGIC, FORMAT_VERSION, KIND_CPR, b"xyz");
        let (summary, out) = inspect("cpr", &bad, false);
        assert!(
            matches!(summary.damage, Some(Damage::Corrupt { .. })),
            "{out}"
        );
    }

    #[test]
    fn log_file_lists_blocks_entries_and_writes() {
        let (data, first) = two_blocks();
        let (summary, out) = inspect("old_data.6", &data, true);
        assert_eq!(summary.format, FileFormat::Log);
        assert_eq!((summary.blocks, summary.entries), (2, 3), "{out}");
        assert_eq!(summary.damage, None);
        assert_eq!(summary.detail, "epochs 5..=6, 3 entries, 4 writes");
        assert!(out.starts_with("/db/old_data.6: log file,"), "{out}");
        assert!(
            out.contains(&format!(
                "{:>10} {first:>10}    2     1  log epoch 5: 2 entries, 3 writes",
                0
            )),
            "{out}"
        );
        assert!(out.contains("log epoch 6: 1 entry, 1 write"), "{out}");
        assert!(
            out.contains("tid 0x0000000005000010 (epoch 5, seq 1): 2 writes"),
            "{out}"
        );
        assert!(
            out.contains("table 0 key 6b31 (2 bytes) value 3 bytes"),
            "{out}"
        );
        assert!(
            out.contains("table 1 key 6b32 (2 bytes) tombstone"),
            "{out}"
        );
        assert!(out.contains("value 0 bytes"), "{out}");
        assert!(
            out.ends_with(&format!(
                "summary: 2 blocks, {} bytes, intact\n",
                data.len()
            )),
            "{out}"
        );
        // Without --verbose: one line per block.
        let (_, short) = inspect("old_data.6", &data, false);
        assert!(!short.contains("tid "), "{short}");
        assert_eq!(short.lines().count(), 5, "{short}");
    }

    #[test]
    fn long_keys_are_shown_truncated() {
        let key = [0xabu8; 40];
        let data = log_block(3, &[(tid(3, 0), &[(2, &key, Some(b"v"))])]);
        let (_, out) = inspect("data.log", &data, true);
        let shown = format!("key {}… (40 bytes)", "ab".repeat(KEY_HEX_BYTES_MAX));
        assert!(out.contains(&shown), "{out}");
    }

    #[test]
    fn a_torn_tail_is_expected_in_data_log_and_corruption_in_old_data() {
        let (mut data, first) = two_blocks();
        data.truncate(data.len() - 5);
        let torn = Damage::TornTail {
            offset: first as u64,
            bytes: (data.len() - first) as u64,
        };
        let (summary, out) = inspect("data.log", &data, false);
        assert_eq!(summary.damage, Some(torn.clone()));
        assert!(!summary.is_corrupt());
        assert_eq!(summary.blocks, 1);
        assert!(
            out.ends_with(&format!(
                "summary: 1 block, {} bytes, torn tail at offset {first} ({} bytes)\n",
                data.len(),
                data.len() - first
            )),
            "{out}"
        );
        for name in ["catalog.tmp", "old_data.6.tmp"] {
            let (summary, _) = inspect(name, &data, false);
            assert!(!summary.is_corrupt(), "{name}");
        }
        let (summary, out) = inspect("old_data.6", &data, false);
        assert!(summary.is_corrupt(), "{out}");
        assert!(
            out.contains(&format!(
                "CORRUPT at offset {first}: the file ends inside a block"
            )),
            "{out}"
        );
    }

    #[test]
    fn a_flipped_byte_is_corruption_unless_it_is_in_the_unsynced_tail() {
        let (data, first) = two_blocks();
        let mut early = data.clone();
        early[first - 3] ^= 0x10;
        let mut late = data.clone();
        late[data.len() - 3] ^= 0x10;

        let (summary, out) = inspect("old_data.6", &early, false);
        assert!(summary.is_corrupt(), "{out}");
        assert!(out.contains("CORRUPT at offset 0: crc32c"), "{out}");
        assert_eq!(summary.blocks, 0);
        let (summary, out) = inspect("old_data.6", &late, false);
        assert!(
            matches!(&summary.damage, Some(Damage::Corrupt { offset, .. }) if *offset == first as u64),
            "{out}"
        );
        // data.log: the last block may be the crash's unfinished write; an
        // earlier one is followed by an intact block, so it was synced.
        let (summary, out) = inspect("data.log", &late, false);
        assert!(
            matches!(summary.damage, Some(Damage::TornTail { offset, .. }) if offset == first as u64),
            "{out}"
        );
        assert!(out.contains("; no intact block follows)"), "{out}");
        let (summary, out) = inspect("data.log", &early, false);
        assert!(summary.is_corrupt(), "{out}");
        assert!(
            out.contains(&format!("intact block follows at {first}")),
            "{out}"
        );
    }

    fn pepoch_of(e_p: u64, seq: u64, len: usize) -> Vec<u8> {
        PepochRecord {
            e_p,
            logs: vec![SyncedLog {
                seq,
                len: len as u64,
            }],
        }
        .encode()
    }

    #[test]
    fn pepoch_tells_synced_data_log_damage_from_a_torn_tail() {
        // data.log: its header (sequence 7), then blocks of epochs 5 and 6.
        let header = encode_log_header(7);
        let (blocks, first) = two_blocks();
        let mut data = header.clone();
        data.extend(&blocks);
        let second = header.len() + first;
        let mut late = data.clone();
        late[data.len() - 3] ^= 0x10;
        let mut early = data.clone();
        early[second - 3] ^= 0x10;
        // inspect_file (pepoch beside the file) and inspect_dir agree.
        let list = |log: &[u8], pepoch: Vec<u8>| {
            let disk = disk(&[("data.log", log), ("pepoch", &pepoch)]);
            let mut out = String::new();
            let summary = inspect_file(&disk, Path::new("/db/data.log"), true, &mut out).unwrap();
            let dir = inspect_dir(&disk, Path::new("/db"), &mut String::new()).unwrap();
            let (_, listed) = dir.files.iter().find(|(n, _)| n == "data.log").unwrap();
            assert_eq!(listed.damage, summary.damage, "{out}");
            (summary, out)
        };
        // All of it synced: the damaged last block is corruption.
        let (summary, out) = list(&late, pepoch_of(6, 7, data.len()));
        assert!(summary.is_corrupt(), "{out}");
        let synced = format!("inside the {} bytes pepoch records as synced", data.len());
        assert!(out.contains(&synced), "{out}");
        // Synced only up to the damaged block: its unsynced tail.
        let (summary, out) = list(&late, pepoch_of(6, 7, second));
        let torn = Damage::TornTail {
            offset: second as u64,
            bytes: (data.len() - second) as u64,
        };
        assert_eq!(summary.damage, Some(torn), "{out}");
        // The record names an older data.log: nothing of this one is known.
        let (summary, out) = list(&late, pepoch_of(6, 6, data.len()));
        assert!(!summary.is_corrupt(), "{out}");
        // Damage followed by a block of epoch 6: synced when e_p ≥ 6 (a
        // sync covers everything before it), the unsynced tail when e_p is 5.
        let (summary, out) = list(&early, pepoch_of(6, 7, header.len()));
        assert!(summary.is_corrupt(), "{out}");
        let follows = format!("yet the block at {second}, of a persistent epoch (e_p 6)");
        assert!(out.contains(&follows), "{out}");
        let (summary, out) = list(&early, pepoch_of(5, 7, header.len()));
        assert!(
            matches!(summary.damage, Some(Damage::TornTail { .. })),
            "{out}"
        );
    }

    #[test]
    fn payloads_are_checked_as_recovery_checks_them() {
        // A TID of another epoch than its block's passes the checksum.
        let data = log_block(5, &[(tid(6, 0), &[(0, b"k", None)])]);
        let (summary, out) = inspect("old_data.5", &data, true);
        assert!(summary.is_corrupt(), "{out}");
        assert!(out.contains("outside block epoch 5"), "{out}");
        // A truncated entry inside an intact block.
        let mut buffer = Vec::new();
        start_log_block(&mut buffer, 5);
        put_entry_header(&mut buffer, tid(5, 0), 2);
        put_write(&mut buffer, 0, b"k", None);
        seal_log_block(&mut buffer);
        let (summary, out) = inspect("data.log", &buffer, false);
        assert!(summary.is_corrupt(), "{out}");
        assert!(out.contains("malformed payload: write table"), "{out}");
        // A block of another kind.
        let mut other = Vec::new();
        encode_block(
            &mut other,
            LOG_MAGIC,
            FORMAT_VERSION,
            9,
            &5u64.to_le_bytes(),
        );
        let (summary, out) = inspect("data.log", &other, false);
        assert!(summary.is_corrupt(), "{out}");
        assert!(out.contains("block kind 9"), "{out}");
        // A block of another format version.
        let mut newer = Vec::new();
        encode_block(
            &mut newer,
            LOG_MAGIC,
            FORMAT_VERSION + 1,
            KIND_LOG,
            &5u64.to_le_bytes(),
        );
        let (summary, out) = inspect("data.log", &newer, false);
        assert_eq!(
            summary.damage,
            Some(Damage::Incompatible {
                offset: 0,
                version: FORMAT_VERSION + 1
            })
        );
        assert!(summary.is_corrupt());
        assert!(out.contains("INCOMPATIBLE at offset 0"), "{out}");
    }

    #[test]
    fn pepoch_and_catalog_are_listed() {
        let mut pepoch = encode_pepoch(7);
        pepoch.extend(encode_pepoch(9));
        pepoch.extend(encode_pepoch(8));
        let (summary, out) = inspect("pepoch", &pepoch, false);
        assert_eq!(summary.format, FileFormat::Pepoch);
        assert_eq!(summary.detail, "e_p 9");
        assert!(
            out.contains("pepoch e_p 7") && out.contains("pepoch e_p 8"),
            "{out}"
        );

        let mut catalog = encode_catalog_header();
        catalog.extend(encode_catalog_table(0, "accounts"));
        catalog.extend(encode_catalog_table(1, "history"));
        let (summary, out) = inspect("catalog", &catalog, false);
        assert_eq!(summary.detail, "format 2, 2 tables");
        assert!(out.contains("catalog header: format version 2"), "{out}");
        assert!(out.contains("table 1 \"history\""), "{out}");
        assert_eq!(summary.damage, None);

        let mut skipped = encode_catalog_header();
        skipped.extend(encode_catalog_table(1, "history"));
        let (summary, out) = inspect("catalog", &skipped, false);
        assert!(summary.is_corrupt());
        assert!(
            out.contains("table id 1 out of order (expected 0)"),
            "{out}"
        );
        let (summary, out) = inspect("catalog", &encode_catalog_table(0, "a"), false);
        assert!(out.contains("before the catalog header"), "{out}");
        assert!(summary.is_corrupt());
        let (summary, out) = inspect("catalog", b"", false);
        assert!(
            out.contains("CORRUPT at offset 0: no catalog header"),
            "{out}"
        );
        assert!(summary.is_corrupt());
    }

    #[test]
    fn checkpoint_files_are_listed() {
        let mut block = Vec::new();
        start_ckpt_block(&mut block, 2);
        put_ckpt_record(&mut block, b"a", tid(4, 1), b"value");
        put_ckpt_record(&mut block, b"b", tid(3, 0), b"");
        seal_ckpt_block(&mut block);
        let (summary, out) = inspect("ckpt.3.t2.0", &block, true);
        assert_eq!(summary.format, FileFormat::CheckpointData);
        assert_eq!(
            (summary.entries, summary.detail.as_str()),
            (2, "table 2, 2 records")
        );
        assert!(out.contains("checkpoint table 2: 2 records"), "{out}");
        assert!(
            out.contains("key 61 (1 bytes) tid 0x0000000004000010 (epoch 4, seq 1) value 5 bytes"),
            "{out}"
        );

        let meta = CheckpointMeta {
            id: 3,
            e_l: 10,
            e_h: 12,
            dirs: 1,
            tables: vec![(0, "t".into())],
            files: vec![(0, "ckpt.3.t0.0".into(), 100)],
            sessions: vec![(1, 42)],
        };
        let bytes = meta.encode();
        let (summary, out) = inspect("checkpoint", &bytes, false);
        assert_eq!(summary.detail, "checkpoint 3, e_l 10, e_h 12, 1 file");
        assert!(out.contains("checkpoint 3: e_l 10, e_h 12, 1 dir, 1 table, 1 file"));
        assert!(out.contains("table 0 \"t\""), "{out}");
        assert!(out.contains("session 1 CPR point 42"), "{out}");
        assert!(out.contains("file dir 0 ckpt.3.t0.0 (100 bytes)"), "{out}");
        let mut twice = bytes.clone();
        twice.extend(&bytes);
        let (summary, out) = inspect("checkpoint", &twice, false);
        assert!(summary.is_corrupt());
        assert!(
            out.contains("trailing bytes after checkpoint metadata"),
            "{out}"
        );
    }

    #[test]
    fn the_format_comes_from_the_magic_then_the_name() {
        // The magic wins over the name.
        let (summary, _) = inspect("data.log", &encode_pepoch(3), false);
        assert_eq!(summary.format, FileFormat::Pepoch);
        // A damaged magic: the name says what it should have been.
        let (mut data, _) = two_blocks();
        data[0] ^= 1;
        let (summary, out) = inspect("old_data.9", &data, false);
        assert_eq!(summary.format, FileFormat::Log);
        assert!(out.contains("CORRUPT at offset 0: bad magic"), "{out}");
        // An empty log is a fresh one.
        let (summary, _) = inspect("data.log", b"", false);
        assert_eq!((summary.blocks, summary.damage), (0, None));
        // Neither: not ours.
        let disk = disk(&[("notes.txt", b"hello")]);
        let error =
            inspect_file(&disk, Path::new("/db/notes.txt"), false, &mut String::new()).unwrap_err();
        assert!(error.to_string().contains("not an epochdb file"), "{error}");
    }

    #[test]
    fn a_database_directory_is_listed_and_checked() {
        let disk = Arc::new(SimStorage::new(7));
        let dir = PathBuf::from("/db");
        let config = Config {
            durability: DurabilityKind::Silor,
            dirs: vec![dir.clone()],
            storage: Some(disk.clone()),
            epoch_interval: std::time::Duration::from_millis(2),
            ..Config::default()
        };
        {
            let db = Database::open(config).unwrap();
            let table = db.create_table("t").unwrap();
            let mut worker = db.worker().unwrap();
            for n in 0..50u32 {
                let (_, ticket) = worker
                    .run(|tx| tx.put(table, &n.to_be_bytes(), b"value"))
                    .unwrap();
                ticket.wait().unwrap();
            }
            drop(worker);
            db.checkpoint().unwrap();
        }
        let mut out = String::new();
        let summary = inspect_dir(disk.as_ref(), &dir, &mut out).unwrap();
        assert_eq!(summary.corrupt(), 0, "{out}");
        let formats: BTreeSet<&str> = summary.files.iter().map(|(_, f)| f.format.name()).collect();
        for format in [
            "catalog",
            "pepoch",
            "checkpoint metadata",
            "checkpoint data",
            "log",
        ] {
            assert!(formats.contains(format), "{format} missing: {out}");
        }
        let records: u64 = summary
            .files
            .iter()
            .filter(|(_, f)| f.format == FileFormat::CheckpointData)
            .map(|(_, f)| f.entries)
            .sum();
        assert_eq!(records, 50, "{out}");
        assert!(
            out.lines().last().unwrap().starts_with("summary: "),
            "{out}"
        );

        // A checkpoint file that lost its end no longer matches the metadata.
        let (name, _) = summary
            .files
            .iter()
            .find(|(_, f)| f.format == FileFormat::CheckpointData && f.entries > 0)
            .unwrap();
        let mut file = disk.open(&dir.join(name)).unwrap();
        let len = file.size().unwrap();
        file.truncate(len - 1).unwrap();
        let mut out = String::new();
        let summary = inspect_dir(disk.as_ref(), &dir, &mut out).unwrap();
        assert_eq!(summary.corrupt(), 2, "{out}");
        assert!(
            out.contains(&format!("recorded {name} as {len} bytes")),
            "{out}"
        );
    }

    /// Checkpoint 3's metadata: one table, e_l 10, `e_h`, `files`.
    fn checkpoint_3(e_h: u64, files: Vec<(u32, String, u64)>) -> Vec<u8> {
        CheckpointMeta {
            id: 3,
            e_l: 10,
            e_h,
            dirs: 1,
            tables: vec![(0, "t".into())],
            files,
            sessions: vec![],
        }
        .encode()
    }

    #[test]
    fn files_recovery_removes_unread_are_strays_not_corruption() {
        // A torn checkpoint file: what a crash or a close mid-checkpoint
        // leaves, written in place and never synced.
        let mut torn = Vec::new();
        start_ckpt_block(&mut torn, 0);
        put_ckpt_record(&mut torn, b"a", tid(4, 1), b"value");
        seal_ckpt_block(&mut torn);
        torn.truncate(torn.len() - 3);
        let (old, _) = two_blocks();
        let mut broken_old = old.clone();
        broken_old[30] ^= 1;
        let meta = checkpoint_3(12, vec![]);
        let catalog = encode_catalog_header();
        let pepoch = encode_pepoch(20);
        let files: Vec<(&str, &[u8])> = vec![
            ("catalog", &catalog),
            ("checkpoint", &meta),
            ("pepoch", &pepoch),
            ("ckpt.4.t0.0", &torn),
            ("old_data.6", &broken_old),
            ("old_data.11", &old),
            ("pepoch.tmp", b"eLOGgarbage"),
        ];
        let disk = disk(&files);
        let dir = Path::new("/db");
        let mut out = String::new();
        let summary = inspect_dir(&disk, dir, &mut out).unwrap();
        assert_eq!(summary.corrupt(), 0, "{out}");
        let stray = |name: &str| {
            let (_, file) = summary.files.iter().find(|(n, _)| n == name).unwrap();
            (file.stray.clone(), file.damage.is_some())
        };
        let (why, damaged) = stray("ckpt.4.t0.0");
        assert!(damaged, "{out}");
        assert!(
            why.unwrap()
                .contains("checkpoint 4 is not the installed one (3)"),
            "{out}"
        );
        let (why, damaged) = stray("old_data.6");
        assert!(damaged, "{out}");
        assert!(why
            .unwrap()
            .contains("below the installed checkpoint's e_l 10"));
        assert_eq!(stray("old_data.11"), (None, false), "{out}");
        assert!(stray("pepoch.tmp").0.is_some(), "{out}");
        assert!(
            out.contains("0 corrupt, 3 that recovery removes unread"),
            "{out}"
        );
        // One file alone is judged by the checkpoint beside it.
        let mut out = String::new();
        let file = inspect_file(&disk, &dir.join("ckpt.4.t0.0"), false, &mut out).unwrap();
        assert!(!file.is_corrupt(), "{out}");
        assert!(out.contains("(not read by recovery: checkpoint 4"), "{out}");

        // Without an installed checkpoint every checkpoint file is a stray;
        // the installed one's own files are synced, so damage in them is
        // corruption.
        let disk = self::disk(&[("catalog", &catalog), ("ckpt.4.t0.0", &torn)]);
        let file =
            inspect_file(&disk, &dir.join("ckpt.4.t0.0"), false, &mut String::new()).unwrap();
        assert!(file.stray.unwrap().contains("never installed"));
        let disk = self::disk(&[
            ("catalog", &catalog),
            ("checkpoint", &meta),
            ("ckpt.3.t0.0", &torn),
        ]);
        let file =
            inspect_file(&disk, &dir.join("ckpt.3.t0.0"), false, &mut String::new()).unwrap();
        assert!(file.is_corrupt());
        // A directory other than 0 (no catalog) cannot tell, and says so.
        let disk = self::disk(&[("ckpt.4.t0.0", &torn)]);
        let mut out = String::new();
        let file = inspect_file(&disk, &dir.join("ckpt.4.t0.0"), false, &mut out).unwrap();
        assert!(file.stray.is_none() && file.is_corrupt());
        assert!(
            out.contains("unless checkpoint 4 is not the installed one"),
            "{out}"
        );
    }

    /// A log block of `epoch` whose one entry promises two writes and
    /// holds one: framed and checksummed, malformed inside.
    fn malformed_log_block(epoch: u64) -> Vec<u8> {
        let mut buffer = Vec::new();
        start_log_block(&mut buffer, epoch);
        put_entry_header(&mut buffer, tid(epoch, 1), 2);
        put_write(&mut buffer, 0, b"k", Some(b"v"));
        seal_log_block(&mut buffer);
        buffer
    }

    #[test]
    fn log_blocks_recovery_skips_by_their_epoch_are_not_corruption() {
        let meta = checkpoint_3(12, vec![]);
        let mut catalog = encode_catalog_header();
        catalog.extend(encode_catalog_table(0, "t"));
        let pepoch = PepochRecord {
            e_p: 20,
            logs: vec![SyncedLog { seq: 1, len: 0 }],
        }
        .encode();
        for (epoch, replayed) in [(5, false), (11, true), (25, false)] {
            let mut old = log_block(11, &[(tid(11, 0), &[(0, b"k1", Some(b"abc"))])]);
            old.extend(malformed_log_block(epoch));
            let files: Vec<(&str, &[u8])> = vec![
                ("catalog", &catalog),
                ("checkpoint", &meta),
                ("pepoch", &pepoch),
                ("old_data.30", &old),
            ];
            let disk = disk(&files);
            let mut out = String::new();
            let path = Path::new("/db/old_data.30");
            let summary = inspect_file(&disk, path, false, &mut out).unwrap();
            assert_eq!(summary.is_corrupt(), replayed, "epoch {epoch}: {out}");
            assert_eq!(
                out.contains("recovery replays: not read"),
                !replayed,
                "{out}"
            );
            let mut out = String::new();
            let listing = inspect_dir(&disk, Path::new("/db"), &mut out).unwrap();
            assert_eq!(
                listing.corrupt(),
                usize::from(replayed),
                "epoch {epoch}: {out}"
            );
        }
    }

    #[test]
    fn files_that_disagree_are_reported_as_recovery_refuses_them() {
        let mut catalog = encode_catalog_header();
        catalog.extend(encode_catalog_table(0, "t"));
        let mut ckpt = Vec::new();
        start_ckpt_block(&mut ckpt, 0);
        put_ckpt_record(&mut ckpt, b"a", tid(12, 1), b"value");
        seal_ckpt_block(&mut ckpt);
        let meta = |e_h: u64, bytes: usize| {
            checkpoint_3(e_h, vec![(0, "ckpt.3.t0.0".into(), bytes as u64)])
        };
        let pepoch = |e_p: u64| {
            PepochRecord {
                e_p,
                logs: vec![SyncedLog { seq: 1, len: 0 }],
            }
            .encode()
        };
        let log = log_block(14, &[(tid(14, 0), &[(0, b"k1", Some(b"abc"))])]);
        let listing = |meta: &[u8], pepoch: &[u8], ckpt: &[u8], log: &[u8]| {
            let disk = disk(&[
                ("catalog", &catalog),
                ("checkpoint", meta),
                ("pepoch", pepoch),
                ("ckpt.3.t0.0", ckpt),
                ("data.log", log),
            ]);
            let mut out = String::new();
            let summary = inspect_dir(&disk, Path::new("/db"), &mut out).unwrap();
            (summary.problems, out)
        };
        let (problems, out) = listing(&meta(12, ckpt.len()), &pepoch(20), &ckpt, &log);
        assert!(problems.is_empty(), "{out}");
        // e_h past the persistent epoch.
        let (problems, out) = listing(&meta(12, ckpt.len()), &pepoch(11), &ckpt, &log);
        assert_eq!(problems.len(), 1, "{out}");
        assert!(out.contains("pepoch says only 11 is persistent"), "{out}");
        // A record past e_h.
        let (problems, out) = listing(&meta(11, ckpt.len()), &pepoch(20), &ckpt, &log);
        assert_eq!(problems.len(), 1, "{out}");
        assert!(
            out.contains("record of epoch 12, past checkpoint 3's e_h 11"),
            "{out}"
        );
        // Tables the catalog does not hold, in the checkpoint and in a
        // replayed log block (one recovery skips is not checked).
        let mut other = Vec::new();
        start_ckpt_block(&mut other, 2);
        put_ckpt_record(&mut other, b"a", tid(12, 1), b"value");
        seal_ckpt_block(&mut other);
        let log2 = log_block(14, &[(tid(14, 0), &[(5, b"k1", Some(b"abc"))])]);
        let (problems, out) = listing(&meta(12, other.len()), &pepoch(20), &other, &log2);
        assert_eq!(problems.len(), 2, "{out}");
        assert!(
            out.contains("ckpt.3.t0.0 writes table 2, but the catalog holds 1 table"),
            "{out}"
        );
        assert!(out.contains("data.log writes table 5"), "{out}");
        let (problems, out) = listing(&meta(12, ckpt.len()), &pepoch(13), &ckpt, &log2);
        assert!(problems.is_empty(), "epoch 14 is past e_p 13: {out}");
        // The catalog's directory says it is another one, of two.
        let (meta, pepoch) = (meta(12, ckpt.len()), pepoch(20));
        let identity = super::super::format::encode_dir_identity(1, 2);
        let disk = disk(&[
            ("catalog", &catalog),
            ("checkpoint", &meta),
            ("pepoch", &pepoch),
            ("ckpt.3.t0.0", &ckpt),
            ("directory", &identity),
        ]);
        let mut out = String::new();
        let summary = inspect_dir(&disk, Path::new("/db"), &mut out).unwrap();
        assert_eq!(summary.problems.len(), 3, "{out}");
        assert!(out.contains("so it is directory 0"), "{out}");
        assert!(out.contains("pepoch records the logs of 1"), "{out}");
        assert!(
            out.contains("counts 2 directories, but checkpoint 3 spans 1"),
            "{out}"
        );
    }

    #[test]
    fn a_database_of_two_directories_is_listed_and_checked_across_them() {
        let disk = Arc::new(SimStorage::new(8));
        let dirs = vec![PathBuf::from("/db/a"), PathBuf::from("/db/b")];
        let config = Config {
            durability: DurabilityKind::Silor,
            dirs: dirs.clone(),
            storage: Some(disk.clone()),
            epoch_interval: std::time::Duration::from_millis(2),
            // One data.log per directory for the whole run.
            silor: SilorOptions {
                rotate_epochs: 1_000_000,
                ..SilorOptions::default()
            },
            ..Config::default()
        };
        {
            let db = Database::open(config).unwrap();
            let table = db.create_table("t").unwrap();
            // Two workers: each directory's logger takes one's buffers.
            let mut workers = [db.worker().unwrap(), db.worker().unwrap()];
            for n in 0..200u32 {
                // After the checkpoint only directory 1's logger writes, so
                // its log outgrows directory 0's.
                let worker = if n < 100 { n as usize % 2 } else { 1 };
                let (_, ticket) = workers[worker]
                    .run(|tx| tx.put(table, &n.to_be_bytes(), b"value"))
                    .unwrap();
                ticket.wait().unwrap();
                if n == 99 {
                    // Commits after the checkpoint stay in the logs.
                    db.checkpoint().unwrap();
                }
            }
        }
        let mut out = String::new();
        let summary = inspect_database(disk.as_ref(), &dirs, &mut out).unwrap();
        assert_eq!(summary.corrupt(), 0, "{out}");
        let in_b: Vec<&str> = summary
            .files
            .iter()
            .filter_map(|(name, _)| name.strip_prefix("/db/b/"))
            .collect();
        assert!(in_b.contains(&"directory"), "{out}");
        let ckpt_b = in_b
            .iter()
            .find(|n| n.starts_with("ckpt."))
            .map(|n| n.to_string())
            .unwrap_or_else(|| panic!("no checkpoint file in /db/b: {out}"));

        // A torn file of an uninstalled checkpoint in directory 1 is a
        // stray, judged by directory 0's checkpoint; alone, inspect could
        // not tell.
        let mut torn = Vec::new();
        start_ckpt_block(&mut torn, 0);
        put_ckpt_record(&mut torn, b"a", tid(4, 1), b"value");
        seal_ckpt_block(&mut torn);
        torn.truncate(torn.len() - 3);
        let mut file = disk.create(Path::new("/db/b/ckpt.9.t0.0")).unwrap();
        file.append(&torn).unwrap();
        drop(file);
        let mut out = String::new();
        let summary = inspect_database(disk.as_ref(), &dirs, &mut out).unwrap();
        assert_eq!(summary.corrupt(), 0, "{out}");
        assert!(
            out.contains("checkpoint 9 is not the installed one"),
            "{out}"
        );
        let alone = inspect_dir(disk.as_ref(), Path::new("/db/b"), &mut String::new()).unwrap();
        assert_eq!(alone.corrupt(), 1);

        // Given in the wrong order: both identities disagree.
        let swapped = vec![dirs[1].clone(), dirs[0].clone()];
        let mut out = String::new();
        let summary = inspect_database(disk.as_ref(), &swapped, &mut out).unwrap();
        assert_eq!(summary.problems.len(), 2, "{out}");
        assert!(
            out.contains(
                "/db/b is directory 1 of 2 of its database, but was given as directory 0 of 2"
            ),
            "{out}"
        );

        // Damage inside what pepoch records as synced of directory 1's
        // data.log: corruption (recovery refuses it), judged with pepoch's
        // record of that directory.
        let log_b = dirs[1].join("data.log");
        let len_a = disk.len(&dirs[0].join("data.log")).unwrap();
        // Inside directory 1's last block, past directory 0's whole log.
        let at = disk.len(&log_b).unwrap() - 20;
        assert!(at > len_a, "{out}");
        disk.flip_bit(&log_b, at * 8).unwrap();
        let mut out = String::new();
        let summary = inspect_database(disk.as_ref(), &dirs, &mut out).unwrap();
        assert!(summary.corrupt() >= 1, "{out}");
        assert!(out.contains("pepoch records as synced"), "{out}");
        disk.flip_bit(&log_b, at * 8).unwrap();

        // The installed checkpoint's file in directory 1 cut short.
        let mut file = disk.open(&dirs[1].join(&ckpt_b)).unwrap();
        let len = file.size().unwrap();
        file.truncate(len - 1).unwrap();
        drop(file);
        let mut out = String::new();
        let summary = inspect_database(disk.as_ref(), &dirs, &mut out).unwrap();
        assert!(summary.corrupt() >= 1, "{out}");
        assert!(
            out.contains(&format!("recorded {ckpt_b} as {len} bytes")),
            "{out}"
        );
    }

    proptest! {
        // The listing never panics, whatever follows a valid magic.
        #[test]
        fn inspect_never_panics(
            format in 0usize..5,
            name in prop::sample::select(vec!["data.log", "old_data.3", "catalog", "x.tmp"]),
            verbose in any::<bool>(),
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let format = FileFormat::ALL[format];
            let mut data = format.magic().to_le_bytes().to_vec();
            data.extend(tail);
            let mut out = String::new();
            let disk = disk(&[(name, &data)]);
            let path = Path::new("/db").join(name);
            let pepoch = PepochRecord { e_p: 2, logs: vec![SyncedLog { seq: 1, len: 40 }] };
            for pepoch in [None, Some(&pepoch)] {
                let policy = tail_policy(name, pepoch, 0);
                let summary =
                    inspect_stored(&disk, &path, format, (policy, 0..=u64::MAX), verbose, Some(&mut out)).unwrap();
                prop_assert_eq!(summary.bytes, data.len() as u64);
            }
        }
    }
}
