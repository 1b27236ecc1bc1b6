//! The on-disk formats, byte by byte. Every block uses the storage crate's
//! framing (magic u32, version u16, kind u16, len u32, crc32c u32, payload;
//! all little-endian), so every block carries a magic, a version and a
//! checksum (CONVENTIONS "every on-disk block").
//!
//! # Log files: `wal-<start LSN, 20 digits>.log`
//!
//! ```text
//! offset       block
//!      0       file header   kind 1, version 2, payload: start_lsn u64,
//!                            then zeros: H bytes in all, where H is the
//!                            least H ≥ 24 with H ≡ start_lsn (mod 4096)
//!      H       entry at LSN start_lsn       kind 2 (see below)
//!      H + n   entry at LSN start_lsn + n   ...
//! ```
//!
//! The log is framed **per entry** (one append = one entry = one pending LSN
//! node of eleda §4.1): the frame is built by the database thread and copied
//! into the ring buffer at its LSN, so the file is a byte-exact image of the
//! LSN space `[start_lsn, …)` behind its header, and the entry at LSN `l`
//! sits at file offset `H + (l - start_lsn)`. The header's padding makes
//! that offset ≡ `l` (mod 4096), as the entry's place in the ring is: so
//! the flusher writes the ring's 4 KiB blocks to the file's blocks as they
//! are, past the page cache, without copying them (`segments.rs`). Files
//! of format 1 (a 24-byte header) are still read, and appended to by
//! copying. SBL and SDL always fall
//! on entry ends (§4.2.1's straddling rule), so no flush splits an entry;
//! a crash can still tear the last write, which the frame decoder reports
//! as a torn tail.
//!
//! Entry payload:
//!
//! ```text
//!      0   8  lsn      (u64: the entry's own start LSN, §4.1.2 "embedding
//!                       the assigned LSN in the logs"; recovery checks it)
//!      8   4  count    (u32: number of records)
//!     12   …  count × { len u32, len bytes }
//! ```
//!
//! # SDL file: `wal.sdl` (eleda §4.3: "the SDL is stored in stable storage")
//!
//! Two 64-byte slots, written alternately with `write_at` and synced, so a
//! torn slot write leaves the other slot intact. Each slot holds one block
//! (its own magic, kind 3) whose payload is `seq u64, sdl u64`; recovery
//! takes the valid slot with the larger `seq`.

use epochdb_storage::{decode_block, encode_block, BLOCK_HEADER_BYTES};

/// Magic of log file blocks: "ELWL".
pub(crate) const LOG_MAGIC: u32 = u32::from_le_bytes(*b"ELWL");
/// Magic of SDL slots: "ELSD".
pub(crate) const SDL_MAGIC: u32 = u32::from_le_bytes(*b"ELSD");
/// Format version of entries and SDL slots.
pub(crate) const FORMAT_VERSION: u16 = 1;
/// Format version of the log file header this build writes: 2, padded so
/// file offsets and LSNs agree modulo 4096. Version 1 (no padding) is
/// read too.
pub(crate) const FILE_HEADER_VERSION: u16 = 2;

/// Block kind of a log file's header.
pub(crate) const KIND_FILE_HEADER: u16 = 1;
/// Block kind of a log entry.
pub(crate) const KIND_ENTRY: u16 = 2;
/// Block kind of an SDL slot.
pub(crate) const KIND_SDL: u16 = 3;

/// Bytes of a log file's header block at the least (format 1's size).
pub(crate) const FILE_HEADER_MIN_BYTES: u64 = (BLOCK_HEADER_BYTES + 8) as u64;
/// The file offsets and LSNs of a log file agree modulo this.
pub(crate) const LSN_ALIGN: u64 = epochdb_storage::DIRECT_ALIGN as u64;
/// Bytes an entry adds to its records: frame header, lsn, count.
pub const ENTRY_OVERHEAD_BYTES: usize = BLOCK_HEADER_BYTES + 12;
/// Bytes each record adds inside an entry: its length.
pub const RECORD_OVERHEAD_BYTES: usize = 4;
/// Bytes of one SDL slot.
pub(crate) const SDL_SLOT_BYTES: u64 = 64;

const _: () = assert!(BLOCK_HEADER_BYTES + 16 <= SDL_SLOT_BYTES as usize);

/// The SDL file's name.
pub(crate) const SDL_FILE_NAME: &str = "wal.sdl";

/// Appended to a log file's name when a checkpoint made it unneeded: the
/// file is then cut down a piece at a time and removed, and recovery
/// deletes any such file a crash left behind without reading it (its name
/// no longer parses as a log file's).
pub(crate) const REMOVING_SUFFIX: &str = ".removing";

/// The name of the log file starting at `start`.
pub(crate) fn log_file_name(start: u64) -> String {
    format!("wal-{start:020}.log")
}

/// The start LSN encoded in a log file's name, if it is one.
pub(crate) fn parse_log_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Bytes of the entry holding `records`, or `None` on overflow.
pub fn entry_bytes(records: &[&[u8]]) -> Option<usize> {
    records.iter().try_fold(ENTRY_OVERHEAD_BYTES, |acc, r| {
        acc.checked_add(RECORD_OVERHEAD_BYTES)?.checked_add(r.len())
    })
}

/// Encodes the entry at `lsn` holding `records` into `out` (cleared first);
/// `out.len()` ends up `entry_bytes(records)`.
///
/// # Panics
///
/// If a record or the count exceeds `u32`: callers check
/// [`entry_bytes`] against the entry limit first.
pub(crate) fn encode_entry(out: &mut Vec<u8>, lsn: u64, records: &[&[u8]]) {
    out.clear();
    out.resize(BLOCK_HEADER_BYTES, 0);
    out.extend_from_slice(&lsn.to_le_bytes());
    let count = u32::try_from(records.len()).expect("record count fits u32");
    out.extend_from_slice(&count.to_le_bytes());
    for r in records {
        let len = u32::try_from(r.len()).expect("record length fits u32");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(r);
    }
    epochdb_storage::seal_block(out, LOG_MAGIC, FORMAT_VERSION, KIND_ENTRY);
}

/// Checks a checksum-verified entry payload's structure; returns its LSN
/// and the records, borrowed. Never panics; a malformed payload gives the
/// reason.
pub(crate) fn parse_entry_payload(payload: &[u8]) -> Result<(u64, EntryRecords<'_>), String> {
    let lsn = read_u64(payload, 0).ok_or("entry payload shorter than its lsn")?;
    let count = read_u32(payload, 8).ok_or("entry payload shorter than its count")?;
    // Each record needs at least its length: bounds the walk.
    if count as usize > payload.len() / RECORD_OVERHEAD_BYTES {
        return Err(format!("record count {count} too large for the payload"));
    }
    let mut at = 12usize;
    for i in 0..count {
        let len = read_u32(payload, at).ok_or(format!("record {i} has no length"))? as usize;
        at += RECORD_OVERHEAD_BYTES;
        at = at
            .checked_add(len)
            .filter(|&end| end <= payload.len())
            .ok_or(format!("record {i} of {len} bytes runs past the entry"))?;
    }
    if at != payload.len() {
        return Err(format!(
            "{} stray bytes after the last record",
            payload.len() - at
        ));
    }
    let records = EntryRecords {
        rest: &payload[12..],
        left: count,
    };
    Ok((lsn, records))
}

/// The records of an entry whose payload recovery checked, in order.
#[derive(Clone, Debug)]
pub struct EntryRecords<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> Iterator for EntryRecords<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        // The structure was checked when `self` was made.
        let len = read_u32(self.rest, 0)? as usize;
        let (record, rest) = self.rest.get(RECORD_OVERHEAD_BYTES..)?.split_at(len);
        self.rest = rest;
        self.left -= 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for EntryRecords<'_> {}

/// Splits a checksum-verified entry payload into its LSN and owned records.
#[cfg(test)]
pub(crate) fn decode_entry_payload(payload: &[u8]) -> Result<(u64, Vec<Vec<u8>>), String> {
    let (lsn, records) = parse_entry_payload(payload)?;
    Ok((lsn, records.map(<[u8]>::to_vec).collect()))
}

/// Bytes of the (format 2) header of the log file starting at `start`:
/// the least `H ≥ FILE_HEADER_MIN_BYTES` with `H ≡ start (mod LSN_ALIGN)`.
pub(crate) fn file_header_bytes(start: u64) -> u64 {
    FILE_HEADER_MIN_BYTES + (start.wrapping_sub(FILE_HEADER_MIN_BYTES) % LSN_ALIGN)
}

/// The header block of the log file starting at `start`
/// ([`file_header_bytes`] long).
pub(crate) fn encode_file_header(start: u64) -> Vec<u8> {
    let bytes = file_header_bytes(start) as usize;
    let mut payload = vec![0u8; bytes - BLOCK_HEADER_BYTES];
    payload[..8].copy_from_slice(&start.to_le_bytes());
    let mut out = Vec::with_capacity(bytes);
    encode_block(
        &mut out,
        LOG_MAGIC,
        FILE_HEADER_VERSION,
        KIND_FILE_HEADER,
        &payload,
    );
    debug_assert_eq!(out.len(), bytes);
    out
}

/// One SDL slot, padded to [`SDL_SLOT_BYTES`].
pub(crate) fn encode_sdl_slot(seq: u64, sdl: u64) -> Vec<u8> {
    let mut payload = [0u8; 16];
    payload[..8].copy_from_slice(&seq.to_le_bytes());
    payload[8..].copy_from_slice(&sdl.to_le_bytes());
    let mut out = Vec::with_capacity(SDL_SLOT_BYTES as usize);
    encode_block(&mut out, SDL_MAGIC, FORMAT_VERSION, KIND_SDL, &payload);
    out.resize(SDL_SLOT_BYTES as usize, 0);
    out
}

/// The `(seq, sdl)` of the valid slot with the larger `seq`, if any slot is
/// valid. Never panics.
pub(crate) fn decode_sdl_file(data: &[u8]) -> Option<(u64, u64)> {
    (0..2)
        .filter_map(|slot| {
            let from = slot * SDL_SLOT_BYTES as usize;
            let bytes = data.get(from..(from + SDL_SLOT_BYTES as usize).min(data.len()))?;
            let (block, _) = decode_block(bytes, 0, SDL_MAGIC).ok()??;
            if block.kind != KIND_SDL || block.version != FORMAT_VERSION {
                return None;
            }
            Some((read_u64(block.payload, 0)?, read_u64(block.payload, 8)?))
        })
        .max()
}

fn read_u64(data: &[u8], at: usize) -> Option<u64> {
    let bytes = data.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads a u64 at `at`, for the recovery of file headers.
pub(crate) fn payload_u64(data: &[u8], at: usize) -> Option<u64> {
    read_u64(data, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_roundtrip() {
        let records: [&[u8]; 3] = [b"alpha", b"", b"gamma-gamma"];
        let mut out = Vec::new();
        encode_entry(&mut out, 4242, &records);
        assert_eq!(out.len(), entry_bytes(&records).unwrap());
        let (block, next) = decode_block(&out, 0, LOG_MAGIC).unwrap().unwrap();
        assert_eq!(next, out.len());
        assert_eq!(block.kind, KIND_ENTRY);
        let (lsn, got) = decode_entry_payload(block.payload).unwrap();
        assert_eq!(lsn, 4242);
        assert_eq!(got, records.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
    }

    #[test]
    fn malformed_payloads_are_refused() {
        assert!(decode_entry_payload(&[0; 11]).is_err());
        let mut p = vec![0u8; 12];
        p[8] = 1; // one record, no length
        assert!(decode_entry_payload(&p).is_err());
        p.extend_from_slice(&10u32.to_le_bytes()); // length 10, no bytes
        assert!(decode_entry_payload(&p).is_err());
        let mut q = vec![0u8; 13]; // zero records, one stray byte
        q[12] = 7;
        assert!(decode_entry_payload(&q).is_err());
    }

    #[test]
    fn sdl_slots_take_the_newest_valid() {
        let mut file = encode_sdl_slot(7, 100);
        file.extend(encode_sdl_slot(8, 200));
        assert_eq!(decode_sdl_file(&file), Some((8, 200)));
        file[SDL_SLOT_BYTES as usize + 20] ^= 1; // damage the newer slot
        assert_eq!(decode_sdl_file(&file), Some((7, 100)));
        assert_eq!(decode_sdl_file(&[]), None);
    }

    #[test]
    fn file_headers_put_entries_at_offsets_congruent_to_their_lsns() {
        for start in [
            0,
            1,
            23,
            24,
            25,
            4095,
            4096,
            4119,
            4120,
            1 << 40,
            u64::MAX - 7,
        ] {
            let header = encode_file_header(start);
            let bytes = header.len() as u64;
            assert_eq!(bytes, file_header_bytes(start));
            assert!((FILE_HEADER_MIN_BYTES..FILE_HEADER_MIN_BYTES + LSN_ALIGN).contains(&bytes));
            assert_eq!(bytes % LSN_ALIGN, start % LSN_ALIGN, "start {start}");
            let (block, next) = decode_block(&header, 0, LOG_MAGIC).unwrap().unwrap();
            assert_eq!(next as u64, bytes);
            assert_eq!(
                (block.kind, block.version),
                (KIND_FILE_HEADER, FILE_HEADER_VERSION)
            );
            assert_eq!(payload_u64(block.payload, 0), Some(start));
        }
    }

    #[test]
    fn file_names_roundtrip() {
        assert_eq!(parse_log_file_name(&log_file_name(12345)), Some(12345));
        assert_eq!(parse_log_file_name("wal-12.log"), None);
        assert_eq!(parse_log_file_name("wal.sdl"), None);
    }
}
