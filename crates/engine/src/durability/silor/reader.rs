//! Reading a file's blocks in chunks through one reused buffer. Recovery
//! reads gigabytes: a fresh buffer per file made the kernel zero every page
//! it faulted in (perf: three quarters of a recovery's time went to
//! `clear_page_erms`), and a whole-file read held the file in memory.

use std::path::Path;

use epochdb_storage::{decode_block, Block, CorruptReason, FrameError, Storage, StorageError};

use super::format::{BlockError, FORMAT_VERSION};

/// Bytes read per chunk.
const CHUNK_BYTES: usize = 4 << 20;

/// How a scan ended.
#[derive(Debug)]
pub(crate) enum ScanEnd {
    /// Every byte was a valid block.
    Clean,
    /// The block at `offset` (in the file) could not be used.
    Damaged { offset: u64, error: BlockError },
}

/// Calls `visit(offset, block)` for each block of `path` (format `magic`)
/// in order; stops at the first damaged block or an error from `visit`.
/// Returns how the scan ended and the file's length.
pub(crate) fn scan_blocks<E: From<StorageError>>(
    storage: &dyn Storage,
    path: &Path,
    magic: u32,
    buffer: &mut Vec<u8>,
    mut visit: impl FnMut(u64, Block<'_>) -> Result<(), E>,
) -> Result<(ScanEnd, u64), E> {
    let file = storage.open(path)?;
    let size = file.size()?;
    buffer.clear();
    let mut base = 0u64; // file offset of buffer[0]
    let mut pos = 0usize;
    let mut read_to = 0u64; // file offset up to which `buffer` is filled
    loop {
        let at_end = read_to >= size;
        match decode_block(buffer, pos, magic) {
            Ok(Some((block, next))) => {
                let offset = base + pos as u64;
                if block.version != FORMAT_VERSION {
                    let error = BlockError::Version {
                        offset: offset as usize,
                        found: block.version,
                    };
                    return Ok((ScanEnd::Damaged { offset, error }, size));
                }
                visit(offset, block)?;
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
                let error = BlockError::Frame(rebase(error, offset));
                return Ok((ScanEnd::Damaged { offset, error }, size));
            }
        }
        // Keep the unfinished block, read the next chunk behind it.
        buffer.drain(..pos);
        base += pos as u64;
        pos = 0;
        let filled = buffer.len();
        let want = CHUNK_BYTES.min((size - read_to) as usize);
        buffer.resize(filled + want, 0);
        let got = file.read_at(read_to, &mut buffer[filled..])?;
        buffer.truncate(filled + got);
        read_to += got as u64;
        if got == 0 {
            // The file shrank under us: treat what is left as its end.
            return Ok((
                ScanEnd::Damaged {
                    offset: base,
                    error: BlockError::Frame(FrameError::TornTail {
                        offset: base as usize,
                    }),
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
        other => other,
    }
}

/// Reads `path` from `offset` to its end (the rare path after damage).
pub(crate) fn read_rest(
    storage: &dyn Storage,
    path: &Path,
    offset: u64,
) -> Result<Vec<u8>, StorageError> {
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
    use epochdb_storage::{encode_block, SimStorage};

    const MAGIC: u32 = u32::from_le_bytes(*b"tEST");

    fn file_of(blocks: &[Vec<u8>], tail: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        for payload in blocks {
            encode_block(&mut data, MAGIC, FORMAT_VERSION, 1, payload);
        }
        data.extend_from_slice(tail);
        data
    }

    fn scan(data: &[u8]) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let storage = SimStorage::new(1);
        let path = Path::new("/f");
        let mut file = storage.create(path).unwrap();
        file.append(data).unwrap();
        let mut seen = Vec::new();
        let mut buffer = Vec::new();
        let (end, size) =
            scan_blocks::<StorageError>(&storage, path, MAGIC, &mut buffer, |o, b| {
                seen.push((o, b.payload.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(size, data.len() as u64);
        (seen, end)
    }

    #[test]
    fn blocks_spanning_chunks_are_read_whole() {
        // Payloads sized so blocks straddle the 4 MiB chunk boundaries.
        let blocks: Vec<Vec<u8>> = (0..7u8).map(|i| vec![i; 1_500_000 + i as usize]).collect();
        let data = file_of(&blocks, &[]);
        let (seen, end) = scan(&data);
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
        let (seen, end) = scan(&torn);
        assert_eq!(seen.len(), 3);
        match end {
            ScanEnd::Damaged {
                offset,
                error: BlockError::Frame(FrameError::TornTail { offset: inner }),
            } => {
                assert_eq!(offset, clean.len() as u64);
                assert_eq!(inner, clean.len());
            }
            other => panic!("{other:?}"),
        }
        let mut flipped = clean.clone();
        flipped[3_000_016 + 16 + 10] ^= 1; // inside the second block's payload
        let (seen, end) = scan(&flipped);
        assert_eq!(seen.len(), 1);
        match end {
            ScanEnd::Damaged { offset, .. } => assert_eq!(offset, 3_000_016),
            other => panic!("{other:?}"),
        }
    }
}
