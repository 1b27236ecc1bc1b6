//! Reading a file's blocks in chunks through reused buffers. Recovery
//! reads gigabytes: a fresh buffer per file made the kernel zero every page
//! it faulted in (perf: three quarters of a silor recovery's time went to
//! `clear_page_erms`), and a whole-file read held the file in memory. The
//! engine's checkpoints and logs and the central log all read through here.

use std::ops::ControlFlow;
use std::path::Path;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, TrySendError};

use crate::direct::{read_appending, DirectVec};
use crate::error::StorageError;
use crate::frame::{
    decode_block, Block, CorruptReason, FrameError, BLOCK_HEADER_BYTES, BLOCK_PAYLOAD_MAX_BYTES,
};
use crate::seam::{Storage, StorageFile};

/// Bytes read per chunk.
pub const SCAN_CHUNK_BYTES: usize = 4 << 20;

/// How a [`scan_blocks`] ended.
#[derive(Debug)]
pub enum ScanEnd {
    /// Every byte was a valid block.
    Clean,
    /// The block at `offset` (in the file) did not decode.
    Damaged {
        /// Where the bad block starts.
        offset: u64,
        /// Why it did not decode; its offsets are file offsets.
        error: FrameError,
    },
    /// The visitor asked to stop at the block at `offset` (it found the
    /// block valid as a frame but not usable, e.g. of another version).
    Stopped {
        /// Where that block starts.
        offset: u64,
    },
}

/// The buffers a [`scan_blocks`] reads through, kept from one scan to the
/// next so that their pages are faulted in once (a fresh buffer per file
/// made the kernel zero every page: see the module docs).
#[derive(Debug, Default)]
pub struct ScanBuffers {
    /// Chunk buffers: the one being decoded and, when a reader thread reads
    /// ahead, the ones it is filling or has queued.
    chunks: Vec<DirectVec>,
    /// A block that straddles two chunks, gathered whole.
    spill: Vec<u8>,
}

/// Chunk buffers in flight with a reader thread: one being decoded, one
/// queued, one being read.
const READ_AHEAD_BUFFERS: usize = 3;

/// A chunk of the file: its offset and its bytes.
type Chunk = (u64, DirectVec);

/// What a scan hands each block (and whether to go on).
type Visitor<'v, E> = dyn FnMut(u64, Block<'_>) -> Result<ControlFlow<()>, E> + 'v;

/// Where the decoder gets the next chunk, handing back the one it is done
/// with.
type NextChunk<'n> = dyn FnMut(Option<DirectVec>) -> Result<Option<Chunk>, StorageError> + 'n;

/// Calls `visit(offset, block)` for each block of `path` (format `magic`)
/// in order, reading it [`SCAN_CHUNK_BYTES`] at a time into `buffers`.
/// Stops at the first damaged block, when `visit` breaks, or at an error
/// from `visit`. Returns how the scan ended and the file's length.
///
/// With `direct` the chunks are read past the page cache
/// ([`read_appending`]): the file is read once, and the copy out of the
/// cache cost a recovering thread about a tenth of its time (BENCHMARKS.md,
/// session 30). A direct read has no kernel read-ahead, so for a file of
/// more than one chunk a reader thread reads the next chunks while this
/// one decodes (measured: without it, loading a silor checkpoint went from
/// 0.27–0.41 s to 0.40–0.52 s). Chunks are read whole at aligned offsets;
/// a block that straddles two is gathered in `buffers`' spill buffer.
pub fn scan_blocks<E: From<StorageError>>(
    storage: &dyn Storage,
    path: &Path,
    magic: u32,
    buffers: &mut ScanBuffers,
    direct: bool,
    visit: impl FnMut(u64, Block<'_>) -> Result<ControlFlow<()>, E>,
) -> Result<(ScanEnd, u64), E> {
    let chunk = SCAN_CHUNK_BYTES;
    scan_in_chunks(storage, path, magic, buffers, (direct, chunk), visit)
}

/// [`scan_blocks`] with chunks of `chunk` bytes (a multiple of
/// `DIRECT_ALIGN`; tests use small ones).
fn scan_in_chunks<E: From<StorageError>>(
    storage: &dyn Storage,
    path: &Path,
    magic: u32,
    buffers: &mut ScanBuffers,
    (direct, chunk): (bool, usize),
    mut visit: impl FnMut(u64, Block<'_>) -> Result<ControlFlow<()>, E>,
) -> Result<(ScanEnd, u64), E> {
    let file = storage.open_read(path)?;
    let size = file.size()?;
    let ScanBuffers { chunks, spill } = buffers;
    if !direct || size <= chunk as u64 {
        // Through the page cache the kernel reads ahead; a single chunk
        // has nothing to read ahead.
        let mut offset = 0u64;
        let mut next = |recycled: Option<DirectVec>| -> Result<Option<Chunk>, StorageError> {
            let mut buf = recycled.or_else(|| chunks.pop()).unwrap_or_default();
            match read_chunk(file.as_ref(), (&mut offset, size, chunk), &mut buf, direct)? {
                Some(at) => Ok(Some((at, buf))),
                None => {
                    chunks.push(buf);
                    Ok(None)
                }
            }
        };
        let (end, last) = decode_chunks(size, magic, spill, &mut next, &mut visit)?;
        chunks.extend(last);
        return Ok(end);
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (to_reader, free) = sync_channel::<DirectVec>(READ_AHEAD_BUFFERS);
        // Every buffer, plus the end of the file (`Ok(None)`) or an error:
        // the reader's sends never block.
        let (to_decoder, full) =
            sync_channel::<Result<Option<Chunk>, StorageError>>(READ_AHEAD_BUFFERS + 1);
        for _ in 0..READ_AHEAD_BUFFERS {
            let buf = chunks.pop().unwrap_or_default();
            to_reader.send(buf).expect("the channel has room");
        }
        let (file, stop_reading) = (file.as_ref(), &stop);
        let reader = scope.spawn(move || {
            let mut offset = 0u64;
            let mut spare = Vec::new();
            let mut done = false;
            // Reads until the file ends, a read fails or the decoder stops
            // (it says so); then keeps the buffers it gets back until the
            // decoder drops its end of the channel.
            while let Ok(mut buf) = free.recv() {
                if done || stop_reading.load(Relaxed) {
                    spare.push(buf);
                    continue;
                }
                let read = read_chunk(file, (&mut offset, size, chunk), &mut buf, true);
                let message = match read {
                    Ok(Some(at)) => Ok(Some((at, buf))),
                    // The end (also of a file that shrank under us: the
                    // decoder, still short of `size`, must hear it) or a
                    // failed read: nothing more to read.
                    Ok(None) | Err(_) => {
                        spare.push(buf);
                        done = true;
                        read.map(|_| None)
                    }
                };
                if to_decoder.send(message).is_err() {
                    break;
                }
            }
            spare
        });
        let mut next = |recycled: Option<DirectVec>| -> Result<Option<Chunk>, StorageError> {
            if let Some(buf) = recycled {
                // The reader may have finished: then the buffer is kept below.
                if let Err(back) = to_reader.try_send(buf) {
                    chunks.push(match back {
                        TrySendError::Full(b) | TrySendError::Disconnected(b) => b,
                    });
                }
            }
            // A reader gone without a word has panicked: the join says so.
            full.recv().unwrap_or(Ok(None))
        };
        let decoded = decode_chunks(size, magic, spill, &mut next, &mut visit);
        stop.store(true, Relaxed);
        drop(to_reader);
        // Unblock a reader waiting to hand over a chunk, and keep the buffers.
        for message in full.iter() {
            if let Ok(Some((_, buf))) = message {
                chunks.push(buf);
            }
        }
        chunks.extend(reader.join().expect("the scan's reader thread panicked"));
        let (end, last) = decoded?;
        chunks.extend(last);
        Ok(end)
    })
}

/// Reads the chunk (`chunk` bytes) of `file` at `*offset` into `buf` (cleared first) and
/// moves `*offset` past it: `Some(offset read at)`, or `None` at the end of
/// the file. A short read (the file shrank under us) ends the file there.
fn read_chunk(
    file: &dyn StorageFile,
    (offset, size, chunk): (&mut u64, u64, usize),
    buf: &mut DirectVec,
    direct: bool,
) -> Result<Option<u64>, StorageError> {
    if *offset >= size {
        return Ok(None);
    }
    buf.clear();
    let want = chunk.min((size - *offset) as usize);
    let got = read_appending(file, *offset, want, buf, direct)?;
    if got == 0 {
        return Ok(None);
    }
    let at = *offset;
    // Only a file that shrank reads short before its end: stop after it.
    *offset = if got < want { size } else { at + got as u64 };
    Ok(Some(at))
}

/// How many more bytes the block gathered in `spill` needs, by its header;
/// `None` when the header does not say (not a block of format `magic`, or
/// a length the decoder refuses): then the whole next chunk is added, so
/// the decoder judges the damage on everything up to the file's end, as
/// it would have in one buffer.
fn bytes_needed(spill: &[u8], magic: u32) -> Option<usize> {
    let seen = spill.len().min(4);
    if spill[..seen] != magic.to_le_bytes()[..seen] {
        return None;
    }
    if spill.len() < BLOCK_HEADER_BYTES {
        return Some(BLOCK_HEADER_BYTES - spill.len());
    }
    let len = u32::from_le_bytes(spill[8..12].try_into().expect("4 bytes")) as usize;
    if len > BLOCK_PAYLOAD_MAX_BYTES {
        return None;
    }
    Some(
        (BLOCK_HEADER_BYTES + len)
            .saturating_sub(spill.len())
            .max(1),
    )
}

/// The decoding half of [`scan_blocks`]: takes the file's chunks in order
/// from `next` (handing back the one it is done with) and visits their
/// blocks. Returns how the scan ended and the last chunk's buffer.
fn decode_chunks<E: From<StorageError>>(
    size: u64,
    magic: u32,
    spill: &mut Vec<u8>,
    next: &mut NextChunk<'_>,
    visit: &mut Visitor<'_, E>,
) -> Result<((ScanEnd, u64), Option<DirectVec>), E> {
    // The file shrank under us: what is left from `offset` is its end.
    let shrank = torn_end;
    let Some((mut base, mut cur)) = next(None)? else {
        let end = if size == 0 {
            (ScanEnd::Clean, 0)
        } else {
            shrank(0, 0)
        };
        return Ok((end, None));
    };
    let mut pos = 0usize;
    loop {
        let chunk_end = base + cur.len() as u64;
        let at_end = chunk_end >= size;
        match decode_block(&cur, pos, magic) {
            Ok(Some((block, next_pos))) => {
                let offset = base + pos as u64;
                if visit(offset, block)?.is_break() {
                    return Ok(((ScanEnd::Stopped { offset }, size), Some(cur)));
                }
                pos = next_pos;
                continue;
            }
            Ok(None) if at_end => return Ok(((ScanEnd::Clean, size), Some(cur))),
            Ok(None) => {
                // This chunk is used up, on a block boundary.
                let Some((b, c)) = next(Some(cur))? else {
                    return Ok((shrank(chunk_end, chunk_end), None));
                };
                (base, cur, pos) = (b, c, 0);
                continue;
            }
            // A block that runs past the chunk may simply continue in the
            // next one.
            Err(FrameError::TornTail { .. }) if !at_end => {}
            Err(FrameError::Corrupt {
                reason: CorruptReason::LengthPastEnd { .. },
                ..
            }) if !at_end => {}
            Err(error) => {
                let offset = base + pos as u64;
                let error = rebase(error, offset);
                return Ok(((ScanEnd::Damaged { offset, error }, size), Some(cur)));
            }
        }
        let start = base + pos as u64;
        if cur[pos..].iter().all(|&b| b == 0) {
            // No block starts with a zero byte: this is the zeros after
            // the data (direct writes' padding, a preallocated file's
            // unused space, or a torn write), which may run for the rest
            // of a large file. Check it chunk by chunk instead of
            // gathering it, and end as gathering would: torn if only zeros
            // follow, a bad magic if anything else does.
            return zero_run(start, magic, size, base, cur, next);
        }
        // Gather the straddling block in `spill`: its part here, then what
        // its header says it still needs from the next chunks.
        spill.clear();
        spill.extend_from_slice(&cur[pos..]);
        pos = cur.len();
        loop {
            if pos == cur.len() {
                let read_to = base + cur.len() as u64;
                let Some((b, c)) = next(Some(cur))? else {
                    return Ok((shrank(start, read_to), None));
                };
                (base, cur, pos) = (b, c, 0);
            }
            let left = cur.len() - pos;
            let take = bytes_needed(spill, magic).map_or(left, |n| n.min(left));
            spill.extend_from_slice(&cur[pos..pos + take]);
            pos += take;
            // Everything up to the file's end is gathered.
            let at_end = base + cur.len() as u64 >= size && pos == cur.len();
            match decode_block(spill, 0, magic) {
                Ok(Some((block, _))) => {
                    if visit(start, block)?.is_break() {
                        return Ok(((ScanEnd::Stopped { offset: start }, size), Some(cur)));
                    }
                    break;
                }
                Err(FrameError::TornTail { .. }) if !at_end => {}
                Err(FrameError::Corrupt {
                    reason: CorruptReason::LengthPastEnd { .. },
                    ..
                }) if !at_end => {}
                // `Ok(None)` needs an empty spill, which a straddling block
                // never leaves; report it as the end if it ever came.
                Ok(None) => return Ok(((ScanEnd::Clean, size), Some(cur))),
                Err(error) => {
                    let error = rebase(error, start);
                    return Ok((
                        (
                            ScanEnd::Damaged {
                                offset: start,
                                error,
                            },
                            size,
                        ),
                        Some(cur),
                    ));
                }
            }
        }
    }
}

/// The end of a scan that met zeros at `start`, in the chunk `cur` read
/// at `base`: reads on while the chunks hold only zeros.
fn zero_run<E: From<StorageError>>(
    start: u64,
    magic: u32,
    size: u64,
    mut base: u64,
    mut cur: DirectVec,
    next: &mut NextChunk<'_>,
) -> Result<((ScanEnd, u64), Option<DirectVec>), E> {
    loop {
        let read_to = base + cur.len() as u64;
        if read_to >= size {
            return Ok((torn_end(start, size), Some(cur)));
        }
        let Some((b, c)) = next(Some(cur))? else {
            return Ok((torn_end(start, read_to), None));
        };
        (base, cur) = (b, c);
        if cur.iter().any(|&b| b != 0) {
            let error = FrameError::Corrupt {
                offset: start as usize,
                reason: CorruptReason::BadMagic {
                    expected: magic,
                    found: 0,
                },
            };
            let end = ScanEnd::Damaged {
                offset: start,
                error,
            };
            return Ok(((end, size), Some(cur)));
        }
    }
}

/// A scan that ends in a torn tail at `offset`, having read to `read_to`.
fn torn_end(offset: u64, read_to: u64) -> (ScanEnd, u64) {
    let error = FrameError::TornTail {
        offset: offset as usize,
    };
    (ScanEnd::Damaged { offset, error }, read_to)
}

/// The error with its offset made relative to the file, not the buffer.
fn rebase(error: FrameError, offset: u64) -> FrameError {
    let offset = offset as usize;
    match error {
        FrameError::TornTail { .. } => FrameError::TornTail { offset },
        FrameError::Corrupt { reason, .. } => {
            let reason = match reason {
                CorruptReason::LengthPastEnd { len, next_valid } => {
                    // `next_valid` was buffer-relative too; it is only
                    // reported, so keep it as a distance from the block.
                    CorruptReason::LengthPastEnd {
                        len,
                        next_valid: offset + next_valid,
                    }
                }
                other => other,
            };
            FrameError::Corrupt { offset, reason }
        }
    }
}

/// Reads `path` from `offset` to its end (the rare path after damage).
pub fn read_rest(storage: &dyn Storage, path: &Path, offset: u64) -> Result<Vec<u8>, StorageError> {
    let file = storage.open_read(path)?;
    let size = file.size()?;
    let mut rest = vec![0u8; size.saturating_sub(offset) as usize];
    let got = file.read_at(offset, &mut rest)?;
    rest.truncate(got);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{blocks as blocks_of, encode_block};
    use crate::sim::SimStorage;
    use proptest::prelude::*;

    const MAGIC: u32 = u32::from_le_bytes(*b"tEST");

    fn file_of(blocks: &[Vec<u8>], tail: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        for payload in blocks {
            encode_block(&mut data, MAGIC, 1, 1, payload);
        }
        data.extend_from_slice(tail);
        data
    }

    /// Scans `data` through the page cache and past it (on the simulated
    /// disk, which checks a direct read's alignment and refuses a
    /// misaligned one), checking that both read the same.
    fn scan(data: &[u8], stop_at: Option<usize>) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let buffered = scan_with(data, stop_at, &mut ScanBuffers::default(), false);
        let direct = scan_with(data, stop_at, &mut ScanBuffers::default(), true);
        assert_eq!(buffered.0, direct.0, "the blocks each way");
        assert_eq!(format!("{:?}", buffered.1), format!("{:?}", direct.1));
        direct
    }

    fn scan_with(
        data: &[u8],
        stop_at: Option<usize>,
        buffer: &mut ScanBuffers,
        direct: bool,
    ) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let storage = SimStorage::new(1);
        let path = Path::new("/f");
        let mut file = storage.create(path).unwrap();
        file.append(data).unwrap();
        scan_file(&storage, path, data.len(), stop_at, buffer, direct)
    }

    fn scan_file(
        storage: &dyn Storage,
        path: &Path,
        len: usize,
        stop_at: Option<usize>,
        buffer: &mut ScanBuffers,
        direct: bool,
    ) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let chunk = SCAN_CHUNK_BYTES;
        scan_chunked(storage, path, len, stop_at, buffer, (direct, chunk))
    }

    /// The blocks (offset, payload) a scan in chunks of `chunk` bytes visits
    /// before `stop_at`, and how it ended; the length it reports must be
    /// `len`.
    fn scan_chunked(
        storage: &dyn Storage,
        path: &Path,
        len: usize,
        stop_at: Option<usize>,
        buffer: &mut ScanBuffers,
        (direct, chunk): (bool, usize),
    ) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let mut seen = Vec::new();
        let (end, size) = scan_in_chunks::<StorageError>(
            storage,
            path,
            MAGIC,
            buffer,
            (direct, chunk),
            |o, b| {
                if stop_at == Some(seen.len()) {
                    return Ok(ControlFlow::Break(()));
                }
                seen.push((o, b.payload.to_vec()));
                Ok(ControlFlow::Continue(()))
            },
        )
        .unwrap();
        assert_eq!(size, len as u64);
        (seen, end)
    }

    /// On the real disk (`O_DIRECT` where the file system has it): blocks
    /// straddling chunks, a file end that is not block-aligned, and a torn
    /// tail read the same past the cache as through it.
    #[test]
    fn a_real_file_reads_the_same_past_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let storage = crate::RealStorage::new();
        let path = dir.path().join("blocks");
        let blocks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1_700_001 + i as usize]).collect();
        let mut data = file_of(&blocks, &[]);
        data.extend_from_slice(&file_of(&[vec![9; 50]], &[])[..40]);
        let mut file = storage.create(&path).unwrap();
        file.append(&data).unwrap();
        file.sync().unwrap();
        let mut buffer = ScanBuffers::default();
        let buffered = scan_file(&storage, &path, data.len(), None, &mut buffer, false);
        let direct = scan_file(&storage, &path, data.len(), None, &mut buffer, true);
        assert_eq!(buffered.0, direct.0);
        assert_eq!(direct.0.len(), blocks.len());
        for ((_, payload), expected) in direct.0.iter().zip(&blocks) {
            assert_eq!(payload, expected);
        }
        let torn_at = (data.len() - 40) as u64;
        for end in [buffered.1, direct.1] {
            match end {
                ScanEnd::Damaged {
                    offset,
                    error: FrameError::TornTail { .. },
                } => assert_eq!(offset, torn_at),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn blocks_spanning_chunks_are_read_whole() {
        // Payloads sized so blocks straddle the 4 MiB chunk boundaries.
        let blocks: Vec<Vec<u8>> = (0..7u8).map(|i| vec![i; 1_500_000 + i as usize]).collect();
        let data = file_of(&blocks, &[]);
        let (seen, end) = scan(&data, None);
        assert!(matches!(end, ScanEnd::Clean));
        assert_eq!(seen.len(), blocks.len());
        for ((_, payload), expected) in seen.iter().zip(&blocks) {
            assert_eq!(payload, expected);
        }
    }

    #[test]
    fn a_torn_tail_and_a_corrupt_block_report_file_offsets() {
        let blocks: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 3_000_000]).collect();
        let clean = file_of(&blocks, &[]);
        let mut torn = clean.clone();
        torn.extend_from_slice(&clean[..100]);
        let (seen, end) = scan(&torn, None);
        assert_eq!(seen.len(), 3);
        assert_torn_at(end, clean.len());
        let mut flipped = clean.clone();
        flipped[3_000_016 + 16 + 10] ^= 1; // inside the second block's payload
        let (seen, end) = scan(&flipped, None);
        assert_eq!(seen.len(), 1);
        match end {
            ScanEnd::Damaged { offset, .. } => assert_eq!(offset, 3_000_016),
            other => panic!("{other:?}"),
        }
    }

    /// Zeros after the data (a preallocated file's unused space) end the
    /// scan as a torn tail at the data's end however many chunks they
    /// fill; anything but zeros after them is a bad magic there.
    #[test]
    fn zeros_after_the_data_are_a_torn_tail_and_anything_after_them_is_not() {
        let blocks: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 1000]).collect();
        let clean = file_of(&blocks, &[]);
        let zeros = 3 * SCAN_CHUNK_BYTES + 123;
        let mut padded = clean.clone();
        padded.resize(clean.len() + zeros, 0);
        let mut dirty = padded.clone();
        *dirty.last_mut().unwrap() = 7;
        for direct in [false, true] {
            let (seen, end) = scan_chunked_data(&padded, direct);
            assert_eq!(seen, 3);
            assert_torn_at(end, clean.len());
            let (seen, end) = scan_chunked_data(&dirty, direct);
            assert_eq!(seen, 3);
            match end {
                ScanEnd::Damaged {
                    offset,
                    error:
                        FrameError::Corrupt {
                            reason: CorruptReason::BadMagic { found: 0, .. },
                            ..
                        },
                } => assert_eq!(offset, clean.len() as u64),
                other => panic!("{other:?}"),
            }
        }
    }

    /// `end` is a torn tail at byte `at` of the file.
    fn assert_torn_at(end: ScanEnd, at: usize) {
        match end {
            ScanEnd::Damaged {
                offset,
                error: FrameError::TornTail { offset: inner },
            } => {
                assert_eq!(offset, at as u64);
                assert_eq!(inner, at);
            }
            other => panic!("{other:?}"),
        }
    }

    fn scan_chunked_data(data: &[u8], direct: bool) -> (usize, ScanEnd) {
        let storage = SimStorage::new(1);
        let path = Path::new("/f");
        let mut file = storage.create(path).unwrap();
        file.append(data).unwrap();
        let mut buffer = ScanBuffers::default();
        let (seen, end) = scan_file(&storage, path, data.len(), None, &mut buffer, direct);
        (seen.len(), end)
    }

    /// The buffers are kept between scans: bytes a file before left in them
    /// must never be decoded, and a block bigger than a chunk is gathered
    /// whole.
    #[test]
    fn a_reused_buffer_shows_no_stale_bytes() {
        for direct in [false, true] {
            let mut buffer = ScanBuffers::default();
            let big: Vec<Vec<u8>> = vec![vec![7; 3_000_000], vec![8; 5 << 20], vec![9; 100]];
            let (seen, end) = scan_with(&file_of(&big, &[]), None, &mut buffer, direct);
            assert!(matches!(end, ScanEnd::Clean));
            assert_eq!(seen.len(), 3);
            assert_eq!(seen[1].1, big[1], "a block larger than a chunk");
            assert!(buffer.spill.capacity() > SCAN_CHUNK_BYTES);
            // A small file after it, torn: the old blocks still in the buffer
            // behind its bytes must not show up.
            let torn_tail = &file_of(&[vec![2; 10]], &[])[..5];
            let small = file_of(&[vec![1; 10]], torn_tail);
            let (seen, end) = scan_with(&small, None, &mut buffer, direct);
            assert_eq!(seen, vec![(0, vec![1; 10])]);
            match end {
                ScanEnd::Damaged {
                    offset,
                    error: FrameError::TornTail { .. },
                } => assert_eq!(offset, 26),
                other => panic!("{other:?}"),
            }
            // And an empty file.
            let (seen, end) = scan_with(&[], None, &mut buffer, direct);
            assert!(seen.is_empty());
            assert!(matches!(end, ScanEnd::Clean));
        }
    }

    /// What a damage does to a well-formed file (proptest input).
    #[derive(Debug, Clone)]
    enum Damage {
        None,
        CutAt(usize),
        FlipAt(usize),
        Zeros(usize),
        Garbage(Vec<u8>),
    }

    fn damage() -> impl Strategy<Value = Damage> {
        prop_oneof![
            Just(Damage::None),
            any::<usize>().prop_map(Damage::CutAt),
            any::<usize>().prop_map(Damage::FlipAt),
            (1..20_000usize).prop_map(Damage::Zeros),
            proptest::collection::vec(any::<u8>(), 1..300).prop_map(Damage::Garbage),
        ]
    }

    /// An error's offset and kind, for comparing two decoders (`next_valid`
    /// is only reported, and relative to different buffers).
    fn error_kind(error: &FrameError) -> (usize, String) {
        match error {
            FrameError::TornTail { offset } => (*offset, "torn".into()),
            FrameError::Corrupt { offset, reason } => {
                let kind = format!("{reason:?}");
                (
                    *offset,
                    kind[..kind.find([' ', '{']).unwrap_or(kind.len())].into(),
                )
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        /// Scanned in small chunks — blocks straddling one or several chunk
        /// boundaries, through the cache, past it (the simulated disk checks
        /// alignment) and with the reader thread — a damaged or whole file
        /// gives exactly what decoding it in one buffer gives.
        #[test]
        fn chunked_scans_decode_as_one_buffer_does(
            sizes in proptest::collection::vec(
                prop_oneof![0..40usize, 0..3_000usize, 0..20_000usize],
                0..24,
            ),
            damage in damage(),
            chunk_blocks in 1..4usize,
        ) {
            let blocks: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let mut data = file_of(&blocks, &[]);
            match damage {
                Damage::None => {}
                Damage::CutAt(at) => data.truncate(at % (data.len() + 1)),
                Damage::FlipAt(at) if !data.is_empty() => {
                    let at = at % data.len();
                    data[at] ^= 0x40;
                }
                Damage::FlipAt(_) => {}
                Damage::Zeros(n) => data.resize(data.len() + n, 0),
                Damage::Garbage(bytes) => data.extend_from_slice(&bytes),
            }
            let mut expected_blocks = Vec::new();
            let mut expected_end = None;
            for item in blocks_of(&data, MAGIC) {
                match item {
                    Ok((offset, block)) => {
                        expected_blocks.push((offset as u64, block.payload.to_vec()))
                    }
                    Err(error) => expected_end = Some(error_kind(&error)),
                }
            }
            let storage = SimStorage::new(1);
            let path = Path::new("/f");
            storage.create(path).unwrap().append(&data).unwrap();
            let chunk = chunk_blocks * crate::DIRECT_ALIGN;
            for direct in [false, true] {
                let mut buffers = ScanBuffers::default();
                let (seen, end) =
                    scan_chunked(&storage, path, data.len(), None, &mut buffers, (direct, chunk));
                prop_assert_eq!(&seen, &expected_blocks, "direct {}", direct);
                match (end, &expected_end) {
                    (ScanEnd::Clean, None) => {}
                    (ScanEnd::Damaged { offset, error }, Some(expected)) => {
                        prop_assert_eq!(offset as usize, expected.0);
                        prop_assert_eq!(&error_kind(&error), expected, "direct {}", direct);
                    }
                    (end, expected) => {
                        prop_assert!(false, "direct {direct}: {end:?}, expected {expected:?}")
                    }
                }
            }
        }
    }

    /// A storage whose files claim `extra` bytes more than they hold, as a
    /// file that shrank between its size and its reads.
    #[derive(Debug)]
    struct Shrinking {
        inner: SimStorage,
        extra: u64,
    }

    #[derive(Debug)]
    struct ShrinkingFile {
        inner: Box<dyn StorageFile>,
        extra: u64,
    }

    impl StorageFile for ShrinkingFile {
        fn path(&self) -> &Path {
            self.inner.path()
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> crate::Result<()> {
            self.inner.write_at(offset, data)
        }
        fn append(&mut self, data: &[u8]) -> crate::Result<u64> {
            self.inner.append(data)
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> crate::Result<usize> {
            self.inner.read_at(offset, buf)
        }
        fn size(&self) -> crate::Result<u64> {
            Ok(self.inner.size()? + self.extra)
        }
        fn truncate(&mut self, len: u64) -> crate::Result<()> {
            self.inner.truncate(len)
        }
        fn sync(&self) -> crate::Result<()> {
            self.inner.sync()
        }
    }

    impl Storage for Shrinking {
        fn create(&self, path: &Path) -> crate::Result<Box<dyn StorageFile>> {
            self.inner.create(path)
        }
        fn open(&self, path: &Path) -> crate::Result<Box<dyn StorageFile>> {
            let inner = self.inner.open(path)?;
            Ok(Box::new(ShrinkingFile {
                inner,
                extra: self.extra,
            }))
        }
        fn read(&self, path: &Path) -> crate::Result<Vec<u8>> {
            self.inner.read(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> crate::Result<()> {
            self.inner.rename(from, to)
        }
        fn remove(&self, path: &Path) -> crate::Result<()> {
            self.inner.remove(path)
        }
        fn list(&self, dir: &Path) -> crate::Result<Vec<String>> {
            self.inner.list(dir)
        }
        fn len(&self, path: &Path) -> crate::Result<u64> {
            self.inner.len(path)
        }
        fn exists(&self, path: &Path) -> crate::Result<bool> {
            self.inner.exists(path)
        }
        fn create_dir_all(&self, dir: &Path) -> crate::Result<()> {
            self.inner.create_dir_all(dir)
        }
        fn sync_dir(&self, dir: &Path) -> crate::Result<()> {
            self.inner.sync_dir(dir)
        }
    }

    /// A file that ends before the size it reported (it shrank under the
    /// scan) ends as a torn tail where its bytes run out, on every read
    /// path and whether it ends on a chunk boundary or not; the scan must
    /// not wait for chunks that never come.
    #[test]
    fn a_file_shorter_than_its_size_ends_as_a_torn_tail() {
        let chunk = 2 * crate::DIRECT_ALIGN;
        for blocks in [vec![vec![1u8; 3 * chunk]], vec![vec![2u8; chunk - 16]; 4]] {
            let data = file_of(&blocks, &[]);
            let storage = Shrinking {
                inner: SimStorage::new(1),
                extra: 5 * chunk as u64,
            };
            let path = Path::new("/f");
            storage.create(path).unwrap().append(&data).unwrap();
            for direct in [false, true] {
                let mut buffers = ScanBuffers::default();
                let (seen, end) = scan_chunked(
                    &storage,
                    path,
                    data.len(),
                    None,
                    &mut buffers,
                    (direct, chunk),
                );
                assert_eq!(seen.len(), blocks.len(), "direct {direct}");
                match end {
                    ScanEnd::Damaged {
                        offset,
                        error: FrameError::TornTail { .. },
                    } => assert_eq!(offset, data.len() as u64),
                    other => panic!("direct {direct}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_visitor_can_stop_at_a_block() {
        let blocks: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 10]).collect();
        let data = file_of(&blocks, &[]);
        let (seen, end) = scan(&data, Some(2));
        assert_eq!(seen.len(), 2);
        match end {
            ScanEnd::Stopped { offset } => assert_eq!(offset, 2 * (16 + 10)),
            other => panic!("{other:?}"),
        }
    }
}
