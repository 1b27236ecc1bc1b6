//! The log's files block by block, for inspection tools (`epochdb
//! inspect`): what each block of a log file holds and where the first bad
//! one is, the two slots of the SDL file, and the verdict recovery gives a
//! bad block. Decoding uses recovery's own checks (`recovery.rs`), so what
//! a listing calls intact is what recovery reads.

use std::ops::ControlFlow;

use std::path::Path;

use epochdb_storage::{
    blocks, decode_block, scan_blocks, Block, FrameError, ScanBuffers, ScanEnd, Storage,
    StorageError, BLOCK_HEADER_BYTES,
};

use crate::format::{self, KIND_SDL, LOG_MAGIC, SDL_MAGIC};
use crate::lsn::Lsn;
use crate::recovery::{entry_at, file_header_size, EntryRef};

/// The first bytes of every log file (its header block's magic, "ELWL").
pub const LOG_FILE_MAGIC: [u8; 4] = LOG_MAGIC.to_le_bytes();
/// The first bytes of a valid SDL file (its first slot's magic, "ELSD").
pub const SDL_FILE_MAGIC: [u8; 4] = SDL_MAGIC.to_le_bytes();
/// The SDL file's name in the log directory.
pub const SDL_FILE_NAME: &str = format::SDL_FILE_NAME;
/// Slots in the SDL file, written in turn.
pub const SDL_SLOTS: usize = 2;
/// Bytes of one SDL slot.
pub const SDL_SLOT_BYTES: u64 = format::SDL_SLOT_BYTES;

/// The start LSN a log file's name (`wal-<20 digits>.log`) encodes, if it
/// is a log file's name.
pub fn log_file_start(name: &str) -> Option<Lsn> {
    format::parse_log_file_name(name)
}

/// One intact block of a log file.
#[derive(Debug, Clone)]
pub enum LogBlock<'a> {
    /// The file header: the LSN of the file's first entry.
    Header {
        /// The LSN the file starts at.
        start: Lsn,
    },
    /// One entry (one append), checked as recovery checks it.
    Entry(EntryRef<'a>),
}

/// Where a log file's decoding stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBlock {
    /// The bad block's file offset.
    pub offset: u64,
    /// Its LSN, when the header before it was intact.
    pub lsn: Option<Lsn>,
    /// What is wrong with it.
    pub reason: String,
}

/// Where one block of a log file lies, and its frame's version and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPlace {
    /// The block's file offset.
    pub offset: u64,
    /// Its length, frame header included.
    pub len: u64,
    /// The frame's format version.
    pub version: u16,
    /// The frame's kind.
    pub kind: u16,
}

/// What a log file scan hands each intact block to.
pub type LogVisitor<'v> = dyn FnMut(&BlockPlace, LogBlock<'_>) -> ControlFlow<()> + 'v;

/// Decodes the log file `data` (whose name says it starts at `start`, if it
/// is a log file's name) block by block, handing each intact block to
/// `visit` with its place, until the end, a bad block (returned) or `visit`
/// breaks. The first block must be the file's header; entries must carry
/// the LSN their place in the file gives them.
pub fn scan_log_file(
    data: &[u8],
    start: Option<Lsn>,
    visit: &mut LogVisitor<'_>,
) -> Option<BadBlock> {
    let mut check = LogFileCheck::new(start);
    for item in blocks(data, LOG_MAGIC) {
        match item {
            Ok((offset, block)) => match check.block(offset as u64, &block, visit) {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(())) => return None,
                Err(bad) => return Some(bad),
            },
            Err(error) => return Some(check.frame_error(&error)),
        }
    }
    None
}

/// [`scan_log_file`] over the stored file `path`, read a chunk at a time
/// as recovery reads it (`scan_blocks`), so a log file of any size is
/// listed in the memory of a few chunks. Returns the bad block, if any,
/// and the file's length.
///
/// # Errors
///
/// Reading the file failed.
pub fn scan_log_path(
    storage: &dyn Storage,
    path: &Path,
    start: Option<Lsn>,
    visit: &mut LogVisitor<'_>,
) -> Result<(Option<BadBlock>, u64), StorageError> {
    let mut check = LogFileCheck::new(start);
    let mut bad = None;
    let (end, len) = scan_blocks::<StorageError>(
        storage,
        path,
        LOG_MAGIC,
        &mut ScanBuffers::default(),
        false,
        |offset, block| {
            Ok(match check.block(offset, &block, visit) {
                Ok(flow) => flow,
                Err(found) => {
                    bad = Some(found);
                    ControlFlow::Break(())
                }
            })
        },
    )?;
    if let ScanEnd::Damaged { error, .. } = end {
        bad = Some(check.frame_error(&error));
    }
    Ok((bad, len))
}

/// Checks a log file's blocks in order as recovery does: the header first,
/// then entries at the LSNs their places give them.
struct LogFileCheck {
    /// The start LSN the file's name gives.
    start: Option<Lsn>,
    /// The header's start LSN and length, once read.
    header: Option<(Lsn, u64)>,
}

impl LogFileCheck {
    fn new(start: Option<Lsn>) -> Self {
        Self {
            start,
            header: None,
        }
    }

    /// Checks the intact frame at `offset` and hands it to `visit`; the
    /// bad block if it is not what recovery expects there.
    fn block(
        &mut self,
        offset: u64,
        block: &Block<'_>,
        visit: &mut LogVisitor<'_>,
    ) -> Result<ControlFlow<()>, BadBlock> {
        let len = (BLOCK_HEADER_BYTES + block.payload.len()) as u64;
        let place = BlockPlace {
            offset,
            len,
            version: block.version,
            kind: block.kind,
        };
        match self.header {
            None => {
                // The header names its own start; a name, if any, must agree.
                let named = self.start.or_else(|| format::payload_u64(block.payload, 0));
                match named.and_then(|s| file_header_size(block, s).map(|bytes| (s, bytes))) {
                    Some((first, bytes)) => {
                        self.header = Some((first, bytes));
                        Ok(visit(&place, LogBlock::Header { start: first }))
                    }
                    None => Err(BadBlock {
                        offset,
                        lsn: None,
                        reason: match self.start {
                            Some(s) => format!("not the header of a log file starting at LSN {s}"),
                            None => "not a log file header".to_string(),
                        },
                    }),
                }
            }
            Some((first, bytes)) => {
                let lsn = first + (offset - bytes);
                match entry_at(block, lsn, len) {
                    Ok(entry) => Ok(visit(&place, LogBlock::Entry(entry))),
                    Err(reason) => Err(BadBlock {
                        offset,
                        lsn: Some(lsn),
                        reason,
                    }),
                }
            }
        }
    }

    /// The bad block a framing failure makes.
    fn frame_error(&self, error: &FrameError) -> BadBlock {
        let (offset, reason) = match error {
            FrameError::TornTail { offset } => {
                (*offset as u64, "the file ends inside a block".to_string())
            }
            FrameError::Corrupt { offset, reason } => (*offset as u64, reason.to_string()),
            other => (0, other.to_string()),
        };
        BadBlock {
            offset,
            lsn: self.header.map(|(first, bytes)| first + (offset - bytes)),
            reason,
        }
    }
}

/// Recovery's verdict on a bad block at `lsn` (`recovery.rs`'s table):
/// a torn tail, discarded, only at or above the persisted SDL and in the
/// last log file; anything else is corruption, refused.
pub fn is_torn_tail(lsn: Lsn, persisted_sdl: Lsn, last_file: bool) -> bool {
    lsn >= persisted_sdl && last_file
}

/// One slot of the SDL file: `(seq, sdl)`, or why it does not decode.
pub type SdlSlot = Result<(u64, Lsn), String>;

/// The SDL file's slots, each decoded on its own.
pub fn sdl_slots(data: &[u8]) -> [SdlSlot; SDL_SLOTS] {
    std::array::from_fn(|slot| {
        let from = slot * SDL_SLOT_BYTES as usize;
        let bytes = data
            .get(from..(from + SDL_SLOT_BYTES as usize).min(data.len()))
            .unwrap_or_default();
        if bytes.iter().all(|&b| b == 0) {
            return Err("empty".to_string());
        }
        match decode_block(bytes, 0, SDL_MAGIC) {
            Ok(Some((block, _)))
                if block.kind == KIND_SDL && block.version == format::FORMAT_VERSION =>
            {
                match (
                    format::payload_u64(block.payload, 0),
                    format::payload_u64(block.payload, 8),
                ) {
                    (Some(seq), Some(sdl)) => Ok((seq, sdl)),
                    _ => Err("payload too short".to_string()),
                }
            }
            Ok(Some((block, _))) => Err(format!(
                "block kind {} version {} is not an SDL slot",
                block.kind, block.version
            )),
            Ok(None) => Err("empty".to_string()),
            Err(error) => Err(error.to_string()),
        }
    })
}

/// The SDL recovery takes from the SDL file's bytes: the valid slot with
/// the larger `seq`, if any slot is valid.
pub fn persisted_sdl(data: &[u8]) -> Option<Lsn> {
    format::decode_sdl_file(data).map(|(_, sdl)| sdl)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::format::{encode_entry, encode_file_header, encode_sdl_slot, log_file_name};

    fn file(start: Lsn, entries: usize) -> Vec<u8> {
        let mut data = encode_file_header(start);
        let header = data.len() as u64;
        let mut entry = Vec::new();
        for i in 0..entries {
            let lsn = start + (data.len() as u64 - header);
            encode_entry(&mut entry, lsn, &[&[i as u8; 10], b"second"]);
            data.extend_from_slice(&entry);
        }
        data
    }

    fn entry_len() -> u64 {
        crate::entry_bytes(&[&[0u8; 10], b"second"]).unwrap() as u64
    }

    fn visitor(
        lines: &mut Vec<String>,
    ) -> impl FnMut(&BlockPlace, LogBlock<'_>) -> ControlFlow<()> + '_ {
        |place: &BlockPlace, block: LogBlock<'_>| {
            let (offset, len) = (place.offset, place.len);
            lines.push(match block {
                LogBlock::Header { start } => format!("{offset} {len} header {start}"),
                LogBlock::Entry(entry) => format!(
                    "{offset} {len} entry {}..{} {}",
                    entry.lsn.start,
                    entry.lsn.end,
                    entry.records().count()
                ),
            });
            ControlFlow::Continue(())
        }
    }

    /// The blocks and the bad one, from memory and from a stored copy
    /// read in chunks (which must agree).
    fn listing(data: &[u8], start: Option<Lsn>) -> (Vec<String>, Option<BadBlock>) {
        let mut lines = Vec::new();
        let bad = scan_log_file(data, start, &mut visitor(&mut lines));
        let disk = epochdb_storage::SimStorage::new(1);
        let path = Path::new("/log/wal.log");
        disk.create_dir_all(Path::new("/log")).unwrap();
        disk.create(path).unwrap().append(data).unwrap();
        let mut stored = Vec::new();
        let (stored_bad, len) =
            scan_log_path(&disk, path, start, &mut visitor(&mut stored)).unwrap();
        assert_eq!(len, data.len() as u64);
        assert_eq!(stored_bad, bad);
        assert_eq!(stored, lines);
        (lines, bad)
    }

    #[test]
    fn an_intact_file_lists_its_header_and_entries() {
        let start = 5000;
        let data = file(start, 3);
        let (lines, bad) = listing(&data, log_file_start(&log_file_name(start)));
        assert_eq!(bad, None);
        assert_eq!(lines.len(), 4, "{lines:?}");
        let header = format::file_header_bytes(start);
        let e = entry_len();
        assert_eq!(lines[0], format!("0 {header} header {start}"));
        assert_eq!(
            lines[1],
            format!("{header} {e} entry {start}..{} 2", start + e)
        );
        // Without a name the header's own start is taken.
        assert_eq!(listing(&data, None).0, lines);
    }

    #[test]
    fn the_first_bad_block_is_reported_with_its_lsn() {
        let start = 0;
        let mut data = file(start, 3);
        let header = format::file_header_bytes(start);
        let e = entry_len();
        let second = header + e;
        data[second as usize + 20] ^= 1;
        let (lines, bad) = listing(&data, Some(start));
        assert_eq!(lines.len(), 2);
        let bad = bad.expect("damage found");
        assert_eq!((bad.offset, bad.lsn), (second, Some(e)));
        // A file cut inside its last entry ends in a torn block.
        let data = file(start, 3);
        let (_, bad) = listing(&data[..data.len() - 5], Some(start));
        assert_eq!(bad.expect("torn").lsn, Some(2 * e));
        // A header that disagrees with the name.
        let (lines, bad) = listing(&file(4096, 1), Some(0));
        assert!(lines.is_empty());
        assert_eq!(bad.expect("bad header").lsn, None);
    }

    #[test]
    fn sdl_slots_decode_one_by_one() {
        let mut data = encode_sdl_slot(7, 100);
        data.extend(encode_sdl_slot(8, 200));
        assert_eq!(sdl_slots(&data), [Ok((7, 100)), Ok((8, 200))]);
        assert_eq!(persisted_sdl(&data), Some(200));
        data[SDL_SLOT_BYTES as usize + 20] ^= 1;
        let slots = sdl_slots(&data);
        assert_eq!(slots[0], Ok((7, 100)));
        assert!(slots[1].is_err());
        assert_eq!(persisted_sdl(&data), Some(100));
        let one = encode_sdl_slot(1, 10);
        assert_eq!(sdl_slots(&one)[1], Err("empty".to_string()));
    }

    proptest::proptest! {
        /// A damaged log or SDL file decodes to blocks and a bad one, never
        /// a panic; blocks before the damage are listed as they were.
        #[test]
        fn damaged_files_never_panic(
            entries in 0usize..6,
            edits in proptest::collection::vec((0usize..1 << 13, proptest::prelude::any::<u8>()), 0..4),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            named in proptest::prelude::any::<bool>(),
        ) {
            let mut data = file(4096, entries);
            for (at, byte) in &edits {
                let at = at % data.len();
                data[at] ^= byte;
            }
            let cut = cut.index(data.len() + 1);
            let data = &data[..cut];
            let (lines, bad) = listing(data, named.then_some(4096));
            if let Some(bad) = bad {
                proptest::prop_assert!(bad.offset <= data.len() as u64);
            }
            proptest::prop_assert!(lines.len() <= entries + 1);
            let _ = sdl_slots(data);
            let _ = persisted_sdl(data);
        }
    }

    #[test]
    fn verdicts_follow_recoverys_table() {
        assert!(is_torn_tail(100, 100, true));
        assert!(!is_torn_tail(99, 100, true));
        assert!(!is_torn_tail(100, 100, false));
    }
}
