//! Reading a file's blocks in chunks through one reused buffer. Recovery
//! reads gigabytes: a fresh buffer per file made the kernel zero every page
//! it faulted in (perf: three quarters of a silor recovery's time went to
//! `clear_page_erms`), and a whole-file read held the file in memory. The
//! engine's checkpoints and logs and the central log all read through here.

use std::ops::ControlFlow;
use std::path::Path;

use crate::direct::{read_appending, DirectVec, DIRECT_ALIGN};
use crate::error::StorageError;
use crate::frame::{decode_block, Block, CorruptReason, FrameError};
use crate::seam::Storage;

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

/// Calls `visit(offset, block)` for each block of `path` (format `magic`)
/// in order, reading [`SCAN_CHUNK_BYTES`] at a time into `buffer` (kept
/// for the next call, so its pages are faulted in once). With `direct` the
/// chunks are read past the page cache ([`read_appending`]): the file is
/// read once, and the copy out of the cache would cost the recovering
/// thread a tenth of its time (BENCHMARKS.md, session 30). Stops at the
/// first damaged block, when `visit` breaks, or at an error from `visit`.
/// Returns how the scan ended and the file's length.
pub fn scan_blocks<E: From<StorageError>>(
    storage: &dyn Storage,
    path: &Path,
    magic: u32,
    buffer: &mut DirectVec,
    direct: bool,
    mut visit: impl FnMut(u64, Block<'_>) -> Result<ControlFlow<()>, E>,
) -> Result<(ScanEnd, u64), E> {
    let file = storage.open(path)?;
    let size = file.size()?;
    // `buffer` holds the file's bytes from offset `base` on; `base` stays a
    // multiple of DIRECT_ALIGN (only whole blocks below the next block are
    // dropped), so every read lands at an aligned offset and address until
    // the file's unaligned end. Its bytes are not zeroed before a read:
    // resizing a `Vec` per chunk zero-filled 4 MiB before every read (2–5%
    // of a recovery's time).
    buffer.clear();
    let mut base = 0u64;
    let mut pos = 0usize;
    loop {
        let read_to = base + buffer.len() as u64;
        let at_end = read_to >= size;
        match decode_block(buffer, pos, magic) {
            Ok(Some((block, next))) => {
                let offset = base + pos as u64;
                if visit(offset, block)?.is_break() {
                    return Ok((ScanEnd::Stopped { offset }, size));
                }
                pos = next;
                continue;
            }
            Ok(None) if at_end => return Ok((ScanEnd::Clean, size)),
            Ok(None) => {}
            // A block that runs past the buffer may simply continue in the
            // next chunk.
            Err(FrameError::TornTail { .. }) if !at_end => {}
            Err(FrameError::Corrupt {
                reason: CorruptReason::LengthPastEnd { .. },
                ..
            }) if !at_end => {}
            Err(error) => {
                let offset = base + pos as u64;
                let error = rebase(error, offset);
                return Ok((ScanEnd::Damaged { offset, error }, size));
            }
        }
        // Keep the unfinished block (from the block boundary below it),
        // read the next chunk behind it.
        let drop = pos / DIRECT_ALIGN * DIRECT_ALIGN;
        let valid = buffer.len();
        buffer.copy_within(drop..valid, 0);
        buffer.truncate(valid - drop);
        base += drop as u64;
        pos -= drop;
        let want = SCAN_CHUNK_BYTES.min((size - read_to) as usize);
        let got = read_appending(file.as_ref(), read_to, want, buffer, direct)?;
        if got == 0 {
            // The file shrank under us: treat what is left as its end.
            let error = FrameError::TornTail {
                offset: (base + pos as u64) as usize,
            };
            return Ok((
                ScanEnd::Damaged {
                    offset: base + pos as u64,
                    error,
                },
                read_to,
            ));
        }
    }
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
    let file = storage.open(path)?;
    let size = file.size()?;
    let mut rest = vec![0u8; size.saturating_sub(offset) as usize];
    let got = file.read_at(offset, &mut rest)?;
    rest.truncate(got);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode_block;
    use crate::sim::SimStorage;

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
        let buffered = scan_with(data, stop_at, &mut DirectVec::default(), false);
        let direct = scan_with(data, stop_at, &mut DirectVec::default(), true);
        assert_eq!(buffered.0, direct.0, "the blocks each way");
        assert_eq!(format!("{:?}", buffered.1), format!("{:?}", direct.1));
        direct
    }

    fn scan_with(
        data: &[u8],
        stop_at: Option<usize>,
        buffer: &mut DirectVec,
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
        buffer: &mut DirectVec,
        direct: bool,
    ) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let mut seen = Vec::new();
        let (end, size) =
            scan_blocks::<StorageError>(storage, path, MAGIC, buffer, direct, |o, b| {
                if stop_at == Some(seen.len()) {
                    return Ok(ControlFlow::Break(()));
                }
                seen.push((o, b.payload.to_vec()));
                Ok(ControlFlow::Continue(()))
            })
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
        let mut buffer = DirectVec::default();
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
        match end {
            ScanEnd::Damaged {
                offset,
                error: FrameError::TornTail { offset: inner },
            } => {
                assert_eq!(offset, clean.len() as u64);
                assert_eq!(inner, clean.len());
            }
            other => panic!("{other:?}"),
        }
        let mut flipped = clean.clone();
        flipped[3_000_016 + 16 + 10] ^= 1; // inside the second block's payload
        let (seen, end) = scan(&flipped, None);
        assert_eq!(seen.len(), 1);
        match end {
            ScanEnd::Damaged { offset, .. } => assert_eq!(offset, 3_000_016),
            other => panic!("{other:?}"),
        }
    }

    /// The buffer keeps the length it grew to between scans: bytes past
    /// what the current file filled must never be decoded, and a block
    /// bigger than a chunk grows it.
    #[test]
    fn a_reused_buffer_shows_no_stale_bytes() {
        for direct in [false, true] {
            let mut buffer = DirectVec::default();
            let big: Vec<Vec<u8>> = vec![vec![7; 3_000_000], vec![8; 5 << 20], vec![9; 100]];
            let (seen, end) = scan_with(&file_of(&big, &[]), None, &mut buffer, direct);
            assert!(matches!(end, ScanEnd::Clean));
            assert_eq!(seen.len(), 3);
            assert_eq!(seen[1].1, big[1], "a block larger than a chunk");
            assert!(buffer.capacity() > SCAN_CHUNK_BYTES);
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
