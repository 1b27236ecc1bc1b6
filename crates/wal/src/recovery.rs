//! Reading the log back (eleda leaves recovery to the host engine; this is
//! the log's half: give back every entry up to the durable end, in LSN
//! order, verified).
//!
//! Decision table, applied to the first bad block found at LSN `l` (a
//! frame error, an unknown kind or version, a malformed payload, or an
//! embedded LSN that differs from the block's position):
//!
//! | where                                   | verdict                          |
//! |-----------------------------------------|----------------------------------|
//! | `l <` persisted SDL                     | `Corrupted { file, offset }`     |
//! | `l ≥` persisted SDL, in the last file   | torn tail: discarded             |
//! | `l ≥` persisted SDL, in an earlier file | `Corrupted` (files are rotated   |
//! |                                         | only after SDL passed them)      |
//! | last file's header torn, name ≥ SDL     | torn creation: file discarded    |
//! | files not contiguous, or SDL past end   | `Corrupted`                      |
//!
//! Every acknowledged entry lies below the persisted SDL, because the
//! flusher persists SDL before it publishes it (see `flusher.rs`), so a bit
//! flip in acknowledged data is reported, never silently cut off.

use std::path::{Path, PathBuf};

use epochdb_storage::{decode_block, Storage};

use crate::error::WalError;
use crate::format::{
    decode_entry_payload, decode_sdl_file, parse_log_file_name, payload_u64, FILE_HEADER_BYTES,
    FORMAT_VERSION, KIND_ENTRY, KIND_FILE_HEADER, LOG_MAGIC, SDL_FILE_NAME,
};
use crate::lsn::{Lsn, LsnRange};

/// What [`Wal::open`](crate::Wal::open) found on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveredLog {
    /// The first LSN still on disk (after [`truncate_before`](crate::Wal::truncate_before)
    /// this is above 0).
    pub start_lsn: Lsn,
    /// One past the last recovered byte: the first LSN of this run.
    pub end_lsn: Lsn,
    /// The SDL the SDL file held, if it existed.
    pub persisted_sdl: Option<Lsn>,
    /// Every entry in `[start_lsn, end_lsn)`, in LSN order.
    pub entries: Vec<RecoveredEntry>,
    /// The torn tail that was discarded, if any.
    pub discarded: Option<DiscardedTail>,
}

/// One recovered entry: the records of one append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredEntry {
    /// Where the entry sat.
    pub lsn: LsnRange,
    /// Its records, as appended.
    pub records: Vec<Vec<u8>>,
}

/// A torn tail found (and, by `Wal::open`, cut off) after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscardedTail {
    /// The file it was in.
    pub file: PathBuf,
    /// Where the first bad byte is (the file is cut here); 0 with
    /// `whole_file` when the file's header itself was torn.
    pub offset: u64,
    /// Bytes discarded.
    pub bytes: u64,
    /// Whether the whole file goes (its header was torn: a crash during
    /// rotation).
    pub whole_file: bool,
    /// Why the block there did not decode.
    pub reason: String,
}

/// The result of a scan, with what opening the log for appends needs.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) log: RecoveredLog,
    /// `(start LSN, path)` of every kept file, in order.
    pub(crate) files: Vec<(Lsn, PathBuf)>,
}

/// Reads and verifies the log in `dir` without changing anything: what
/// `Wal::open` would recover, for inspection tools.
pub fn read_log(storage: &dyn Storage, dir: &Path) -> Result<RecoveredLog, WalError> {
    Ok(scan(storage, dir)?.log)
}

/// Scans `dir` as the module's table says.
pub(crate) fn scan(storage: &dyn Storage, dir: &Path) -> Result<Scan, WalError> {
    let mut log = RecoveredLog::default();
    if !storage.exists(dir)? {
        return Ok(Scan {
            log,
            files: Vec::new(),
        });
    }
    let sdl_path = dir.join(SDL_FILE_NAME);
    if storage.exists(&sdl_path)? {
        let data = storage.read(&sdl_path)?;
        match decode_sdl_file(&data) {
            Some((_, sdl)) => log.persisted_sdl = Some(sdl),
            // A crash while the file was being created leaves it short or
            // zeroed; anything else is damage.
            None if data.iter().all(|&b| b == 0) => {}
            None => {
                return Err(WalError::Corrupted {
                    file: sdl_path,
                    offset: 0,
                    reason: "no valid SDL slot".to_string(),
                })
            }
        }
    }
    let persisted = log.persisted_sdl.unwrap_or(0);
    let mut names: Vec<(Lsn, PathBuf)> = storage
        .list(dir)?
        .iter()
        .filter_map(|n| parse_log_file_name(n).map(|s| (s, dir.join(n))))
        .collect();
    names.sort();
    let mut files = Vec::new();
    let mut expected: Option<Lsn> = None;
    let count = names.len();
    for (i, (start, path)) in names.into_iter().enumerate() {
        let last = i + 1 == count;
        let corrupt = |offset: u64, reason: String| WalError::Corrupted {
            file: path.clone(),
            offset,
            reason,
        };
        if let Some(exp) = expected {
            if start != exp {
                return Err(corrupt(
                    0,
                    format!("file starts at LSN {start}, but the previous file ends at {exp}"),
                ));
            }
        }
        if i == 0 {
            log.start_lsn = start;
        }
        let data = storage.read(&path)?;
        let header_ok = match decode_block(&data, 0, LOG_MAGIC) {
            Ok(Some((b, _))) => {
                b.kind == KIND_FILE_HEADER
                    && b.version == FORMAT_VERSION
                    && payload_u64(b.payload, 0) == Some(start)
                    && b.payload.len() == 8
            }
            _ => false,
        };
        if !header_ok {
            if last && start >= persisted && start == expected.unwrap_or(start) {
                log.discarded = Some(DiscardedTail {
                    file: path.clone(),
                    offset: 0,
                    bytes: data.len() as u64,
                    whole_file: true,
                    reason: "file header torn".to_string(),
                });
                expected = Some(start);
                break;
            }
            return Err(corrupt(0, "bad file header".to_string()));
        }
        let mut offset = FILE_HEADER_BYTES as usize;
        loop {
            let lsn = start + (offset as u64 - FILE_HEADER_BYTES);
            let bad = match decode_block(&data, offset, LOG_MAGIC) {
                Ok(None) => break,
                Ok(Some((block, next))) => {
                    if block.kind != KIND_ENTRY || block.version != FORMAT_VERSION {
                        Some(format!(
                            "block kind {} version {} is not a log entry",
                            block.kind, block.version
                        ))
                    } else {
                        match decode_entry_payload(block.payload) {
                            Ok((embedded, records)) if embedded == lsn => {
                                let end = lsn + (next - offset) as u64;
                                log.entries.push(RecoveredEntry {
                                    lsn: LsnRange { start: lsn, end },
                                    records,
                                });
                                offset = next;
                                None
                            }
                            Ok((embedded, _)) => Some(format!(
                                "entry carries LSN {embedded} but sits at LSN {lsn}"
                            )),
                            Err(reason) => Some(reason),
                        }
                    }
                }
                Err(e) => Some(e.to_string()),
            };
            if let Some(reason) = bad {
                if lsn < persisted || !last {
                    return Err(corrupt(
                        offset as u64,
                        format!("{reason} (LSN {lsn}, persisted SDL {persisted})"),
                    ));
                }
                log.discarded = Some(DiscardedTail {
                    file: path.clone(),
                    offset: offset as u64,
                    bytes: (data.len() - offset) as u64,
                    whole_file: false,
                    reason,
                });
                break;
            }
        }
        expected = Some(start + (offset as u64 - FILE_HEADER_BYTES));
        files.push((start, path));
    }
    log.end_lsn = expected.unwrap_or(persisted);
    if files.is_empty() && persisted > 0 {
        return Err(WalError::Corrupted {
            file: dir.to_path_buf(),
            offset: 0,
            reason: format!("no log file, but the SDL file says {persisted} bytes are durable"),
        });
    }
    if persisted > log.end_lsn {
        let (file, offset) = match files.last() {
            Some((start, path)) => (path.clone(), FILE_HEADER_BYTES + (log.end_lsn - start)),
            None => (dir.to_path_buf(), 0),
        };
        return Err(WalError::Corrupted {
            file,
            offset,
            reason: format!(
                "the log ends at LSN {} but the persisted SDL is {persisted}",
                log.end_lsn
            ),
        });
    }
    Ok(Scan { log, files })
}
