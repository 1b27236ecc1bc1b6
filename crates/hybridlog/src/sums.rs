//! Checksums of the log file, kept beside it in `log.sums`.
//!
//! The HybridLog goes to disk exactly as it lies in memory (FASTER's format,
//! cpr-sigmod19 §5): a record has no room for a checksum, and the flush
//! writes the frames themselves. So every range of the log that is written
//! gets its CRC32C recorded in a side file, and recovery checks the bytes it
//! replays against it: a bit flipped in a value is reported with the log
//! file and offset instead of being recovered silently.
//!
//! The file is a sequence of framed blocks (magic `HLSM`, version, CRC32C;
//! `epochdb_storage::frame`), each a batch of one kind of claim, in the
//! order they were made:
//!
//! * a **piece** `(from, to, crc)`: the log bytes `[from, to)` (never
//!   across a page) had this CRC32C when they were written. A later piece
//!   overlapping an earlier one replaces it whole (the bytes were written
//!   again).
//! * a **mark** `address`: recovery set the invalid bit of the record
//!   header at `address` in place (§6.4). A piece made before the mark is
//!   checked with that bit cleared again, which gives back the bytes it was
//!   computed on: recovery only marks records whose bit was clear. Marks are
//!   made durable before the log is changed, so either way a crash leaves
//!   the bytes checkable.
//!
//! Who writes what, and when it must be durable:
//!
//! * The flush thread records a piece per [`SUM_BLOCK_BYTES`] block (cut
//!   at `from` and `to` too) after the range is written
//!   **and synced** (`Log::flush_loop`), so a piece that reached the disk
//!   always describes durable bytes. The checkpoint syncs this file before
//!   it installs its metadata, so every piece below `l_e` is durable too.
//! * Recovery records the snapshot pieces it copies into the log, a piece
//!   for the part below `l_e` of a piece that runs past it (the bytes above
//!   `l_e` are written again once the store runs), and its marks; it
//!   rewrites the file from its in-memory model, synced, before it writes
//!   the marks into the log.
//! * After each checkpoint, once the log below its `begin` is gone, the
//!   file is rewritten without the claims below it when it has grown to
//!   more than twice what is live.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use epochdb_storage::{blocks, encode_block, replace_atomically, Storage, StorageFile};
use parking_lot::Mutex;

use crate::error::Result;

/// The side file's name, in the store's directory.
pub(crate) const SUMS_NAME: &str = "log.sums";
/// Magic of the side file's blocks ("HLSM").
const SUMS_MAGIC: u32 = 0x4d53_4c48;
/// Format version of the side file.
const SUMS_VERSION: u16 = 1;
/// A block of pieces: `(from, to, crc)` as three little-endian u64s each.
const KIND_PIECES: u16 = 1;
/// A block of marks: one little-endian u64 address each.
const KIND_MARKS: u16 = 2;
/// Bit of the header word's byte 7 that is the record's invalid bit (bit 61).
const INVALID_BIT_IN_BYTE_7: u8 = 1 << 5;
/// Rewrite the file once it holds this much more than what is live.
const COMPACT_SLACK_BYTES: u64 = 1 << 20;
/// log2 of [`SUM_BLOCK_BYTES`].
pub(crate) const SUM_BLOCK_BITS: u32 = 12;
/// The most log bytes one piece covers: pieces are cut at every multiple
/// of it (and pages are whole multiples of it). Small, so that a record
/// read from disk below head (`io.rs`) is checked by reading one or two
/// blocks around it, as a block-checksummed file is read; a piece per
/// 4 MiB page, as before session 52, would have cost a page's read per
/// record. The price is a 24-byte claim per 4 KiB of log in `log.sums`
/// (0.6%) and about as much again in memory.
pub(crate) const SUM_BLOCK_BYTES: u64 = 1 << SUM_BLOCK_BITS;

/// The CRC32C the log bytes `[from, to)` had when they were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    /// First log address.
    pub(crate) from: u64,
    /// One past the last log address.
    pub(crate) to: u64,
    /// CRC32C of the bytes.
    pub(crate) crc: u32,
}

impl Piece {
    /// The piece of `bytes`, which lie at log address `from`.
    pub(crate) fn of(from: u64, bytes: &[u8]) -> Self {
        Piece {
            from,
            to: from + bytes.len() as u64,
            crc: crc32c::crc32c(bytes),
        }
    }
}

/// A piece to check, with the addresses recovery marked invalid after it
/// was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// The piece.
    pub(crate) piece: Piece,
    /// Record headers in the piece whose invalid bit was set since.
    pub(crate) marks: Vec<u64>,
}

impl Check {
    /// Whether `bytes` (the piece's range, read now) are what was written.
    pub(crate) fn matches(&self, bytes: &[u8]) -> bool {
        debug_assert_eq!(bytes.len() as u64, self.piece.to - self.piece.from);
        if self.marks.is_empty() {
            return crc32c::crc32c(bytes) == self.piece.crc;
        }
        let mut original = bytes.to_vec();
        for &mark in &self.marks {
            original[(mark - self.piece.from) as usize + 7] &= !INVALID_BIT_IN_BYTE_7;
        }
        crc32c::crc32c(&original) == self.piece.crc
    }
}

/// The claims of the side file that still hold: its in-memory model.
/// Claims are numbered in the order they were made (`seq`).
#[derive(Debug, Default, Clone)]
pub(crate) struct Claims {
    /// Disjoint pieces by first address, each with its number.
    pieces: BTreeMap<u64, (Piece, u64)>,
    /// Marks by address, each with its number.
    marks: BTreeMap<u64, u64>,
    next_seq: u64,
}

impl Claims {
    /// Adds a piece; pieces it overlaps are dropped.
    pub(crate) fn add_piece(&mut self, piece: Piece) {
        debug_assert!(piece.from < piece.to);
        let overlapped: Vec<u64> = self
            .pieces
            .range(..piece.to)
            .rev()
            .take_while(|(_, (p, _))| p.to > piece.from)
            .map(|(&from, _)| from)
            .collect();
        for from in overlapped {
            self.pieces.remove(&from);
        }
        self.pieces.insert(piece.from, (piece, self.next_seq));
        self.next_seq += 1;
    }

    /// [`Claims::add_piece`] for a reader of many claims (`decode`): a
    /// piece past every piece so far waits in `run` and the run enters the
    /// map in one bulk build (a side file of 4 KiB pieces holds a quarter
    /// of a million per GB of log, mostly in address order); any other
    /// piece ends the run first. Call [`Claims::end_run`] after the last.
    fn add_piece_in_order(&mut self, piece: Piece, run: &mut Vec<(u64, (Piece, u64))>) {
        let last_to = match run.last() {
            Some((_, (last, _))) => Some(last.to),
            None => self.pieces.last_key_value().map(|(_, (last, _))| last.to),
        };
        // `decode` checked that every piece is non-empty.
        if last_to.is_none_or(|to| to <= piece.from) {
            run.push((piece.from, (piece, self.next_seq)));
            self.next_seq += 1;
        } else {
            self.end_run(run);
            self.add_piece(piece);
        }
    }

    /// Puts the pieces `add_piece_in_order` kept in `run` into the map.
    fn end_run(&mut self, run: &mut Vec<(u64, (Piece, u64))>) {
        if self.pieces.is_empty() {
            // Sorted and distinct: a bulk build, not an insert per piece.
            self.pieces = run.drain(..).collect();
        } else {
            self.pieces.extend(run.drain(..));
        }
    }

    /// Adds a mark: the invalid bit of the header at `address` was set.
    pub(crate) fn add_mark(&mut self, address: u64) {
        self.marks.insert(address, self.next_seq);
        self.next_seq += 1;
    }

    /// The pieces that overlap `[from, to)`, in address order, each with
    /// the marks made after it.
    pub(crate) fn checks(&self, from: u64, to: u64) -> Vec<Check> {
        let mut out = Vec::new();
        self.checks_into(from, to, &mut out);
        out
    }

    /// [`Claims::checks`] into `out` (cleared first), for a caller that
    /// checks record after record (`io.rs`).
    pub(crate) fn checks_into(&self, from: u64, to: u64, out: &mut Vec<Check>) {
        out.clear();
        if from >= to {
            return;
        }
        // One descent, walking down from `to`: a record's pieces are few.
        let overlapping = self
            .pieces
            .range(..to)
            .rev()
            .take_while(|(_, (p, _))| p.to > from);
        out.extend(overlapping.map(|(_, &(piece, seq))| Check {
            piece,
            marks: if self.marks.is_empty() {
                Vec::new()
            } else {
                self.marks
                    // A header's 8 bytes lie in the piece; a damaged file's
                    // piece may be shorter than one (then no mark is).
                    .range(piece.from..piece.to.saturating_sub(7).max(piece.from))
                    .filter(|&(_, &mark_seq)| mark_seq > seq)
                    .map(|(&address, _)| address)
                    .collect()
            },
        }));
        out.reverse();
    }

    /// Pieces, log bytes they cover, and marks: what the claims hold.
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        let covered = self.pieces.values().map(|(p, _)| p.to - p.from).sum();
        (self.pieces.len() as u64, covered, self.marks.len() as u64)
    }

    /// The first address in `[from, to)` that no piece covers.
    pub(crate) fn first_gap(&self, from: u64, to: u64) -> Option<u64> {
        let mut at = from;
        for check in self.checks(from, to) {
            if check.piece.from > at {
                return Some(at);
            }
            at = at.max(check.piece.to);
            if at >= to {
                return None;
            }
        }
        (at < to).then_some(at)
    }

    /// Drops every claim wholly below `begin` (the log there is gone) and
    /// every piece that reaches past `end` (its bytes are written again).
    pub(crate) fn keep_between(&mut self, begin: u64, end: u64) {
        self.pieces
            .retain(|_, (piece, _)| piece.to > begin && piece.to <= end);
        let pieces = &self.pieces;
        // A mark matters only to an older piece that holds it.
        self.marks.retain(|&address, &mut seq| {
            pieces
                .range(..=address)
                .next_back()
                .is_some_and(|(_, (p, piece_seq))| address < p.to && *piece_seq < seq)
        });
    }

    /// Bytes the claims take in the file, about.
    fn live_bytes(&self) -> u64 {
        24 * self.pieces.len() as u64 + 8 * self.marks.len() as u64
    }

    /// The file that holds exactly these claims, in the order they were
    /// made (a mark must stay after the pieces it applies to): a block per
    /// run of claims of one kind.
    fn encode(&self) -> Vec<u8> {
        let mut items: Vec<(u64, u16, [u64; 3])> = self
            .pieces
            .values()
            .map(|&(p, seq)| (seq, KIND_PIECES, [p.from, p.to, u64::from(p.crc)]))
            .chain(
                self.marks
                    .iter()
                    .map(|(&address, &seq)| (seq, KIND_MARKS, [address, 0, 0])),
            )
            .collect();
        items.sort_unstable_by_key(|&(seq, ..)| seq);
        let mut out = Vec::new();
        for run in items.chunk_by(|a, b| a.1 == b.1) {
            let kind = run[0].1;
            let words = if kind == KIND_PIECES { 3 } else { 1 };
            let words: Vec<u64> = run
                .iter()
                .flat_map(|item| &item.2[..words])
                .copied()
                .collect();
            out.extend_from_slice(&claims_block(kind, &words));
        }
        out
    }
}

/// One block of claims of `kind`, their words in order.
fn claims_block(kind: u16, words: &[u64]) -> Vec<u8> {
    let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut out = Vec::new();
    encode_block(&mut out, SUMS_MAGIC, SUMS_VERSION, kind, &payload);
    out
}

/// Bytes a scrub reads at a time: a run of adjacent pieces up to this long
/// is read in one go, not a piece per read (there are 256 per MiB).
const RUN_READ_BYTES: u64 = 1 << 20;

/// What [`read_pieces`] found for one piece.
pub(crate) enum PieceBytes<'a> {
    /// Its bytes as they are in the file now.
    Read(&'a [u8]),
    /// The file ends inside it.
    Short,
    /// The read of its run failed: if `each` stops here, `read_pieces`
    /// returns the error.
    Failed,
}

/// Reads the bytes of `checks` (pieces in address order) from `file`, whose
/// first byte is log address `first`, each run of adjacent pieces (up to a
/// MiB) in one read, and hands every check its bytes in order. Stops early
/// when `each` says so; the error is the failed read `each` stopped at.
pub(crate) fn read_pieces(
    file: &dyn StorageFile,
    first: u64,
    checks: &[Check],
    mut each: impl FnMut(&Check, PieceBytes<'_>) -> std::ops::ControlFlow<()>,
) -> std::result::Result<(), epochdb_storage::StorageError> {
    let mut buf = Vec::new();
    let mut at = 0;
    while at < checks.len() {
        let from = checks[at].piece.from;
        let mut end = at + 1;
        while end < checks.len()
            && checks[end].piece.from == checks[end - 1].piece.to
            && checks[end].piece.to - from <= RUN_READ_BYTES
        {
            end += 1;
        }
        let to = checks[end - 1].piece.to;
        buf.resize((to - from) as usize, 0);
        let read = file.read_at(from - first, &mut buf);
        for check in &checks[at..end] {
            let (start, stop) = (
                (check.piece.from - from) as usize,
                (check.piece.to - from) as usize,
            );
            let bytes = match &read {
                Ok(n) if *n >= stop => PieceBytes::Read(&buf[start..stop]),
                Ok(_) => PieceBytes::Short,
                Err(_) => PieceBytes::Failed,
            };
            if each(check, bytes).is_break() {
                return read.map(|_| ());
            }
        }
        at = end;
    }
    Ok(())
}

/// `[from, to)` cut where its pieces are: at every [`SUM_BLOCK_BYTES`].
pub(crate) fn piece_spans(from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> {
    page_spans(from, to, SUM_BLOCK_BITS)
}

/// `[from, to)` cut at page boundaries (pages of `2^page_bits` bytes).
pub(crate) fn page_spans(from: u64, to: u64, page_bits: u32) -> impl Iterator<Item = (u64, u64)> {
    let mut start = from;
    std::iter::from_fn(move || {
        (start < to).then(|| {
            let span = (start, to.min(((start >> page_bits) + 1) << page_bits));
            start = span.1;
            span
        })
    })
}

/// What reading the side file found.
#[derive(Debug, Default)]
pub(crate) struct ReadSums {
    /// The claims of every block up to the first one that could not be
    /// read.
    pub(crate) claims: Claims,
    /// Where that block starts and why it could not be read (a torn tail
    /// of unsynced claims, or damage); `None` if every block was whole.
    pub(crate) damage: Option<(u64, String)>,
}

/// Reads `dir`'s side file (an absent file has no claims).
pub(crate) fn read(storage: &dyn Storage, dir: &Path) -> Result<ReadSums> {
    let path = dir.join(SUMS_NAME);
    if !storage.exists(&path)? {
        return Ok(ReadSums::default());
    }
    Ok(decode(&storage.read(&path)?))
}

/// The claims of a side file's bytes.
pub(crate) fn decode(data: &[u8]) -> ReadSums {
    let mut read = ReadSums::default();
    let mut claims = Claims::default();
    let mut run = Vec::new();
    for block in blocks(data, SUMS_MAGIC) {
        let (offset, block) = match block {
            Ok(b) => b,
            Err(e) => {
                let offset = match e {
                    epochdb_storage::FrameError::TornTail { offset }
                    | epochdb_storage::FrameError::Corrupt { offset, .. } => offset,
                    _ => 0,
                };
                read.damage = Some((offset as u64, e.to_string()));
                break;
            }
        };
        let words: Vec<u64> = block
            .payload
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let well_formed = block.version == SUMS_VERSION
            && block.payload.len().is_multiple_of(8)
            && match block.kind {
                KIND_PIECES => {
                    words.len().is_multiple_of(3)
                        && words
                            .chunks_exact(3)
                            .all(|p| p[0] < p[1] && p[2] <= u64::from(u32::MAX))
                }
                KIND_MARKS => words.iter().all(|m| m.is_multiple_of(8)),
                _ => false,
            };
        if !well_formed {
            read.damage = Some((
                offset as u64,
                format!(
                    "block of kind {} version {} is not a list of claims",
                    block.kind, block.version
                ),
            ));
            break;
        }
        if block.kind == KIND_PIECES {
            for p in words.chunks_exact(3) {
                claims.add_piece_in_order(
                    Piece {
                        from: p[0],
                        to: p[1],
                        crc: p[2] as u32,
                    },
                    &mut run,
                );
            }
        } else {
            for &address in &words {
                claims.add_mark(address);
            }
        }
    }
    claims.end_run(&mut run);
    read.claims = claims;
    read
}

/// The side file of a running store: the flush thread records pieces,
/// checkpoints sync and compact it, and the I/O thread checks the records
/// it reads against its claims.
///
/// Two locks, taken in this order: `file` (appends, syncs and rewrites,
/// which may wait for the disk) and `claims` (the in-memory model, held
/// only to change or query it). A claim enters the model while its
/// append still holds `file`, so a rewrite, which holds `file` throughout,
/// sees every claim appended before it and none after; and a reader of
/// the claims never waits for a sync.
#[derive(Debug)]
pub(crate) struct Sums {
    path: PathBuf,
    file: Mutex<SumsFile>,
    claims: Mutex<Claims>,
}

#[derive(Debug)]
struct SumsFile {
    storage: Arc<dyn Storage>,
    file: Box<dyn StorageFile>,
    /// Bytes in the file.
    bytes: u64,
}

impl Sums {
    /// Writes `claims` as the new side file of `dir`, durably (atomic
    /// replace), and opens it to record more.
    pub(crate) fn install(storage: Arc<dyn Storage>, dir: &Path, claims: Claims) -> Result<Self> {
        let path = dir.join(SUMS_NAME);
        let bytes = claims.encode();
        replace_atomically(storage.as_ref(), &path, &bytes)?;
        let file = storage.open(&path)?;
        Ok(Sums {
            path,
            file: Mutex::new(SumsFile {
                storage,
                file,
                bytes: bytes.len() as u64,
            }),
            claims: Mutex::new(claims),
        })
    }

    /// Records pieces (not synced).
    pub(crate) fn record(&self, pieces: &[Piece]) -> Result<()> {
        if pieces.is_empty() {
            return Ok(());
        }
        let words: Vec<u64> = pieces
            .iter()
            .flat_map(|p| [p.from, p.to, u64::from(p.crc)])
            .collect();
        let block = claims_block(KIND_PIECES, &words);
        let mut file = self.file.lock();
        file.file.append(&block)?;
        file.bytes += block.len() as u64;
        let mut claims = self.claims.lock();
        for &piece in pieces {
            claims.add_piece(piece);
        }
        Ok(())
    }

    /// The checks of every piece that overlaps `[from, to)` now.
    pub(crate) fn checks(&self, from: u64, to: u64) -> Vec<Check> {
        self.claims.lock().checks(from, to)
    }

    /// [`Sums::checks`] into `out` (cleared first).
    pub(crate) fn checks_into(&self, from: u64, to: u64, out: &mut Vec<Check>) {
        self.claims.lock().checks_into(from, to, out);
    }

    /// Makes every recorded claim durable.
    pub(crate) fn sync(&self) -> Result<()> {
        Ok(self.file.lock().file.sync()?)
    }

    /// Drops the claims below `begin` (the log there was removed) and
    /// rewrites the file without them, durably, if it has grown to more
    /// than twice what is live. Call only when every recorded piece
    /// describes durable bytes (after a checkpoint synced the log).
    pub(crate) fn compact(&self, begin: u64) -> Result<()> {
        let mut file = self.file.lock();
        let bytes = {
            let mut claims = self.claims.lock();
            claims.keep_between(begin, u64::MAX);
            if file.bytes <= 2 * claims.live_bytes() + COMPACT_SLACK_BYTES {
                return Ok(());
            }
            claims.encode()
        };
        replace_atomically(file.storage.as_ref(), &self.path, &bytes)?;
        file.file = file.storage.open(&self.path)?;
        file.bytes = bytes.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(from: u64, to: u64, crc: u32) -> Piece {
        Piece { from, to, crc }
    }

    /// Decoding takes runs of ascending pieces in bulk; the claims must come
    /// out exactly as added one by one, overlaps and marks included.
    #[test]
    fn decoding_in_runs_gives_the_claims_added_one_by_one() {
        enum C {
            P(u64, u64, u32),
            M(u64),
        }
        let sequence = [
            C::P(64, 100, 1),
            C::P(100, 200, 2),
            C::M(104),
            C::P(200, 300, 3),
            C::P(150, 210, 4), // overlaps two: ends the run
            C::P(400, 500, 5),
            C::M(408),
            C::P(500, 600, 6),
            C::P(0, 64, 7), // below all: ends the run again
            C::P(600, 700, 8),
        ];
        let mut one_by_one = Claims::default();
        let mut file = Vec::new();
        for claim in &sequence {
            match *claim {
                C::P(from, to, crc) => {
                    one_by_one.add_piece(piece(from, to, crc));
                    file.extend(claims_block(KIND_PIECES, &[from, to, u64::from(crc)]));
                }
                C::M(address) => {
                    one_by_one.add_mark(address);
                    file.extend(claims_block(KIND_MARKS, &[address]));
                }
            }
        }
        let decoded = decode(&file).claims;
        assert_eq!(decoded.checks(0, u64::MAX), one_by_one.checks(0, u64::MAX));
        assert_eq!(decoded.totals(), one_by_one.totals());
        assert_eq!(decoded.encode(), one_by_one.encode());
    }

    /// Each piece gets exactly its own bytes, in a run of adjacent pieces
    /// and after a gap, and a piece the file ends inside is reported short.
    #[test]
    fn read_pieces_hands_each_piece_its_own_bytes() {
        let disk = epochdb_storage::SimStorage::new(1);
        let mut file = disk.create(Path::new("/log")).unwrap();
        let bytes: Vec<u8> = (0..35u8).collect();
        file.append(&bytes).unwrap();
        let mut claims = Claims::default();
        for (from, to) in [(100, 110), (110, 120)] {
            claims.add_piece(Piece::of(
                from,
                &bytes[from as usize - 100..to as usize - 100],
            ));
        }
        // Past the file's 35 bytes.
        claims.add_piece(piece(130, 140, 0));
        let checks = claims.checks(0, u64::MAX);
        let mut seen = Vec::new();
        read_pieces(file.as_ref(), 100, &checks, |check, read| {
            seen.push(match read {
                PieceBytes::Read(b) => (check.piece.from, b.to_vec(), check.matches(b)),
                PieceBytes::Short => (check.piece.from, Vec::new(), false),
                PieceBytes::Failed => unreachable!("the reads succeed"),
            });
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (100, bytes[..10].to_vec(), true),
                (110, bytes[10..20].to_vec(), true),
                (130, Vec::new(), false),
            ]
        );
    }

    #[test]
    fn a_later_piece_replaces_the_ones_it_overlaps() {
        let mut claims = Claims::default();
        claims.add_piece(piece(64, 100, 1));
        claims.add_piece(piece(100, 200, 2));
        claims.add_piece(piece(200, 300, 3));
        claims.add_piece(piece(150, 210, 4));
        let left: Vec<_> = claims.checks(0, 1000).iter().map(|c| c.piece).collect();
        assert_eq!(left, vec![piece(64, 100, 1), piece(150, 210, 4)]);
        assert_eq!(claims.first_gap(64, 100), None);
        assert_eq!(claims.first_gap(64, 210), Some(100));
        assert_eq!(claims.first_gap(150, 210), None);
        assert_eq!(claims.first_gap(150, 211), Some(210));
        assert_eq!(claims.first_gap(40, 100), Some(40));
    }

    /// A damaged side file (its checksums recomputed) may claim pieces
    /// shorter than a record header, and a caller may ask for an empty
    /// range: neither panics (the fuzz corpus found the first through
    /// `epochdb inspect`).
    #[test]
    fn tiny_pieces_and_empty_ranges_are_no_panic() {
        let mut claims = Claims::default();
        claims.add_piece(piece(64, 66, 1));
        claims.add_mark(64);
        claims.add_piece(piece(80, 81, 2));
        assert_eq!(claims.checks(0, 1000).len(), 2);
        assert!(claims.checks(500, 100).is_empty());
        assert!(claims.checks(64, 64).is_empty());
        assert_eq!(claims.first_gap(500, 100), None);
    }

    #[test]
    fn a_mark_applies_only_to_pieces_made_before_it() {
        let mut claims = Claims::default();
        claims.add_piece(piece(64, 128, 1));
        claims.add_mark(80);
        claims.add_piece(piece(128, 192, 2));
        claims.add_mark(96);
        claims.add_mark(136);
        let checks = claims.checks(64, 192);
        assert_eq!(checks[0].marks, vec![80, 96]);
        assert_eq!(checks[1].marks, vec![136]);
        // A piece written again after a mark no longer needs it.
        claims.add_piece(piece(64, 128, 3));
        assert!(claims.checks(64, 128)[0].marks.is_empty());
        claims.keep_between(0, u64::MAX);
        assert_eq!(claims.marks.len(), 1, "only the mark at 136 still applies");
    }

    #[test]
    fn a_marked_header_checks_against_the_bytes_written() {
        let mut bytes = vec![0u8; 64];
        bytes[16] = 7;
        let mut claims = Claims::default();
        claims.add_piece(Piece::of(1024, &bytes));
        claims.add_mark(1024 + 8);
        // Recovery sets bit 61 of the header word at 1032.
        let mut marked = bytes.clone();
        marked[8 + 7] |= INVALID_BIT_IN_BYTE_7;
        let check = &claims.checks(1024, 1088)[0];
        assert!(check.matches(&marked));
        assert!(check.matches(&bytes), "a mark that never reached the disk");
        let mut flipped = marked.clone();
        flipped[40] ^= 1;
        assert!(!check.matches(&flipped));
    }

    #[test]
    fn the_file_round_trips_in_order_and_stops_at_damage() {
        let mut claims = Claims::default();
        claims.add_piece(piece(64, 128, 1));
        claims.add_mark(72);
        claims.add_piece(piece(128, 192, 2));
        let bytes = claims.encode();
        let read = decode(&bytes);
        assert!(read.damage.is_none());
        assert_eq!(read.claims.checks(0, 192), claims.checks(0, 192));
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 3);
        let read = decode(&torn);
        assert!(read.damage.is_some());
        assert_eq!(read.claims.first_gap(64, 192), Some(128));
        let mut flipped = bytes.clone();
        flipped[20] ^= 0x10;
        let read = decode(&flipped);
        assert_eq!(read.damage.as_ref().map(|d| d.0), Some(0));
        assert_eq!(read.claims.first_gap(64, 192), Some(64));
    }

    #[test]
    fn keeping_a_range_drops_pieces_past_its_end_and_orphaned_marks() {
        let mut claims = Claims::default();
        claims.add_piece(piece(64, 128, 1));
        claims.add_piece(piece(128, 256, 2));
        claims.add_mark(160);
        claims.keep_between(100, 200);
        assert_eq!(claims.checks(0, 1000).len(), 1);
        assert!(claims.marks.is_empty());
    }
}
