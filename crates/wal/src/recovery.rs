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

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use epochdb_storage::{scan_blocks, Block, ScanBuffers, ScanEnd, Storage, StorageError};

use crate::error::WalError;
use crate::format::{
    decode_sdl_file, file_header_bytes, parse_entry_payload, parse_log_file_name, payload_u64,
    EntryRecords, FILE_HEADER_MIN_BYTES, FILE_HEADER_VERSION, FORMAT_VERSION, KIND_ENTRY,
    KIND_FILE_HEADER, LOG_MAGIC, SDL_FILE_NAME,
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
    /// Every entry in `[start_lsn, end_lsn)`, in LSN order (empty when the
    /// entries went to a visitor instead: [`Wal::open_streaming`](crate::Wal::open_streaming)).
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

/// One verified entry as a streaming recovery visits it: borrowed from the
/// read buffer, valid for the visit only.
#[derive(Clone, Debug)]
pub struct EntryRef<'a> {
    /// Where the entry sits.
    pub lsn: LsnRange,
    records: EntryRecords<'a>,
}

impl<'a> EntryRef<'a> {
    /// Its records, as appended.
    pub fn records(&self) -> EntryRecords<'a> {
        self.records.clone()
    }

    /// An owned copy.
    pub fn to_entry(&self) -> RecoveredEntry {
        RecoveredEntry {
            lsn: self.lsn,
            records: self.records().map(<[u8]>::to_vec).collect(),
        }
    }
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
    /// The size of the last kept file's header (0 without files).
    pub(crate) last_header_bytes: u64,
}

/// Reads and verifies the log in `dir` without changing anything: what
/// `Wal::open` would recover, for inspection tools.
pub fn read_log(storage: &dyn Storage, dir: &Path) -> Result<RecoveredLog, WalError> {
    let mut entries = Vec::new();
    let mut scanned = scan::<WalError>(storage, dir, false, &mut |entry| {
        entries.push(entry.to_entry());
        Ok(())
    })?;
    scanned.log.entries = entries;
    Ok(scanned.log)
}

/// Why a file's scan stopped: the log's own verdict, or the visitor's.
enum Stop<E> {
    Log(WalError),
    Visitor(E),
}

impl<E> From<StorageError> for Stop<E> {
    fn from(error: StorageError) -> Self {
        Stop::Log(error.into())
    }
}

/// The size of `block` if it is the header of a log file starting at
/// `start`: format 1's 24 bytes, or format 2's padded header (see
/// `format.rs`).
pub(crate) fn file_header_size(block: &Block<'_>, start: Lsn) -> Option<u64> {
    if block.kind != KIND_FILE_HEADER || payload_u64(block.payload, 0) != Some(start) {
        return None;
    }
    let size = (epochdb_storage::BLOCK_HEADER_BYTES + block.payload.len()) as u64;
    let fits = match block.version {
        1 => size == FILE_HEADER_MIN_BYTES,
        FILE_HEADER_VERSION => {
            size == file_header_bytes(start) && block.payload[8..].iter().all(|&b| b == 0)
        }
        _ => false,
    };
    fits.then_some(size)
}

/// The entry in `block` if it is a well-formed entry at `lsn`; else why not.
pub(crate) fn entry_at<'a>(block: &Block<'a>, lsn: Lsn, len: u64) -> Result<EntryRef<'a>, String> {
    if block.kind != KIND_ENTRY || block.version != FORMAT_VERSION {
        return Err(format!(
            "block kind {} version {} is not a log entry",
            block.kind, block.version
        ));
    }
    match parse_entry_payload(block.payload)? {
        (embedded, records) if embedded == lsn => Ok(EntryRef {
            lsn: LsnRange {
                start: lsn,
                end: lsn + len,
            },
            records,
        }),
        (embedded, _) => Err(format!(
            "entry carries LSN {embedded} but sits at LSN {lsn}"
        )),
    }
}

/// Scans `dir` as the module's table says, handing each verified entry to
/// `visit` in LSN order as it is read (files are read in chunks through one
/// buffer, never whole; past the page cache if `direct`). An error from
/// `visit` ends the scan.
pub(crate) fn scan<E: From<WalError>>(
    storage: &dyn Storage,
    dir: &Path,
    direct: bool,
    visit: &mut dyn FnMut(EntryRef<'_>) -> Result<(), E>,
) -> Result<Scan, E> {
    let mut log = RecoveredLog::default();
    if !storage.exists(dir).map_err(WalError::from)? {
        return Ok(Scan {
            log,
            files: Vec::new(),
            last_header_bytes: 0,
        });
    }
    let sdl_path = dir.join(SDL_FILE_NAME);
    if storage.exists(&sdl_path).map_err(WalError::from)? {
        let data = storage.read(&sdl_path).map_err(WalError::from)?;
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
                }
                .into())
            }
        }
    }
    let persisted = log.persisted_sdl.unwrap_or(0);
    let mut names: Vec<(Lsn, PathBuf)> = storage
        .list(dir)
        .map_err(WalError::from)?
        .iter()
        .filter_map(|n| parse_log_file_name(n).map(|s| (s, dir.join(n))))
        .collect();
    names.sort();
    let mut files = Vec::new();
    let mut last_header_bytes = 0;
    let mut expected: Option<Lsn> = None;
    let mut buffer = ScanBuffers::default();
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
                )
                .into());
            }
        }
        if i == 0 {
            log.start_lsn = start;
        }
        let mut header_bytes = None;
        let mut bad_entry = None;
        let scanned = scan_blocks::<Stop<E>>(
            storage,
            &path,
            LOG_MAGIC,
            &mut buffer,
            direct,
            |offset, block| {
                let Some(header) = header_bytes else {
                    header_bytes = file_header_size(&block, start);
                    return Ok(if header_bytes.is_some() {
                        ControlFlow::Continue(())
                    } else {
                        ControlFlow::Break(())
                    });
                };
                let lsn = start + (offset - header);
                let len = (epochdb_storage::BLOCK_HEADER_BYTES + block.payload.len()) as u64;
                match entry_at(&block, lsn, len) {
                    Ok(entry) => visit(entry)
                        .map(|()| ControlFlow::Continue(()))
                        .map_err(Stop::Visitor),
                    Err(reason) => {
                        bad_entry = Some(reason);
                        Ok(ControlFlow::Break(()))
                    }
                }
            },
        );
        let (end, size) = match scanned {
            Ok(done) => done,
            Err(Stop::Log(error)) => return Err(error.into()),
            Err(Stop::Visitor(error)) => return Err(error),
        };
        let Some(header) = header_bytes else {
            if last && start >= persisted && start == expected.unwrap_or(start) {
                log.discarded = Some(DiscardedTail {
                    file: path.clone(),
                    offset: 0,
                    bytes: size,
                    whole_file: true,
                    reason: "file header torn".to_string(),
                });
                expected = Some(start);
                break;
            }
            return Err(corrupt(0, "bad file header".to_string()).into());
        };
        let bad = match end {
            ScanEnd::Clean => None,
            ScanEnd::Damaged { offset, error } => Some((offset, error.to_string())),
            ScanEnd::Stopped { offset } => Some((
                offset,
                bad_entry
                    .take()
                    .expect("the visitor stops only on a bad entry"),
            )),
        };
        let end_offset = match bad {
            None => size,
            Some((offset, reason)) => {
                let lsn = start + (offset - header);
                if !crate::inspect::is_torn_tail(lsn, persisted, last) {
                    return Err(corrupt(
                        offset,
                        format!("{reason} (LSN {lsn}, persisted SDL {persisted})"),
                    )
                    .into());
                }
                log.discarded = Some(DiscardedTail {
                    file: path.clone(),
                    offset,
                    bytes: size - offset,
                    whole_file: false,
                    reason,
                });
                offset
            }
        };
        expected = Some(start + (end_offset - header));
        last_header_bytes = header;
        files.push((start, path));
    }
    log.end_lsn = expected.unwrap_or(persisted);
    if files.is_empty() && persisted > 0 {
        return Err(WalError::Corrupted {
            file: dir.to_path_buf(),
            offset: 0,
            reason: format!("no log file, but the SDL file says {persisted} bytes are durable"),
        }
        .into());
    }
    if persisted > log.end_lsn {
        let (file, offset) = match files.last() {
            Some((start, path)) => (path.clone(), last_header_bytes + (log.end_lsn - start)),
            None => (dir.to_path_buf(), 0),
        };
        return Err(WalError::Corrupted {
            file,
            offset,
            reason: format!(
                "the log ends at LSN {} but the persisted SDL is {persisted}",
                log.end_lsn
            ),
        }
        .into());
    }
    Ok(Scan {
        log,
        files,
        last_header_bytes,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use epochdb_storage::{encode_block, SimStorage, Storage};

    use crate::format::{encode_entry, encode_sdl_slot, log_file_name, SDL_SLOT_BYTES};
    use crate::{LogKind, Wal, WalOptions};

    use super::*;

    /// A log written by format 1 (a 24-byte header, so file offsets and
    /// LSNs disagree modulo 4096) is recovered, appended to by copying,
    /// and rotated into a format-2 file.
    #[test]
    fn a_format_1_log_is_read_and_appended_to() {
        let disk = SimStorage::new(3);
        let dir = Path::new("/db/wal");
        disk.create_dir_all(dir).unwrap();
        let mut log = Vec::new();
        encode_block(
            &mut log,
            LOG_MAGIC,
            1,
            KIND_FILE_HEADER,
            &0u64.to_le_bytes(),
        );
        let mut entry = Vec::new();
        for i in 0..10u8 {
            let lsn = log.len() as u64 - FILE_HEADER_MIN_BYTES;
            encode_entry(&mut entry, lsn, &[&[i; 100]]);
            log.extend_from_slice(&entry);
        }
        let end = log.len() as u64 - FILE_HEADER_MIN_BYTES;
        let mut file = disk.create(&dir.join(log_file_name(0))).unwrap();
        file.append(&log).unwrap();
        file.sync().unwrap();
        let mut sdl = encode_sdl_slot(1, end);
        sdl.resize(2 * SDL_SLOT_BYTES as usize, 0);
        let mut file = disk.create(&dir.join(SDL_FILE_NAME)).unwrap();
        file.append(&sdl).unwrap();
        file.sync().unwrap();
        disk.sync_dir(dir).unwrap();

        let options = WalOptions {
            kind: LogKind::Grasshopper,
            io_unit_bytes: 4 << 10,
            buffer_bytes: 64 << 10,
            hop_shift: 10,
            file_max_bytes: 32 << 10,
            ..WalOptions::default()
        };
        assert!(options.writes_in_place());
        let (wal, recovered) = Wal::open(Arc::new(disk.clone()), dir, options.clone()).unwrap();
        assert_eq!((recovered.entries.len(), recovered.end_lsn), (10, end));
        let mut h = wal.thread_handle();
        for i in 0..200u32 {
            let r = h.append(&[&i.to_le_bytes().repeat(60)]).unwrap();
            if i % 7 == 0 {
                h.wait_durable(r.end).unwrap();
            }
        }
        drop(h);
        wal.shutdown().unwrap();
        let (_, recovered) = Wal::open(Arc::new(disk.clone()), dir, options).unwrap();
        assert_eq!(recovered.entries.len(), 210);
        assert_eq!(recovered.entries[3].records, vec![vec![3u8; 100]]);
        assert_eq!(
            recovered.entries[209].records,
            vec![199u32.to_le_bytes().repeat(60)]
        );
        let names = disk.list(dir).unwrap();
        let logs: Vec<_> = names.iter().filter(|n| n.ends_with(".log")).collect();
        assert!(logs.len() >= 2, "rotated: {logs:?}");
        let first = disk.read(&dir.join(log_file_name(0))).unwrap();
        assert_eq!(&first[..24], &log[..24], "the format-1 header stays");
    }
}
