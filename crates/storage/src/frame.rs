//! Block framing shared by every on-disk format.
//!
//! ```text
//! offset  size  field
//!      0     4  magic     (u32 LE, one per format)
//!      4     2  version   (u16 LE, the format's version)
//!      6     2  kind      (u16 LE, the format's block kind)
//!      8     4  len       (u32 LE, payload bytes, ≤ BLOCK_PAYLOAD_MAX_BYTES)
//!     12     4  crc32c    (u32 LE, over bytes 0..12 then the payload)
//!     16   len  payload
//! ```
//!
//! The decoder never panics and tells a torn tail (the unfinished last write
//! of a crashed process: discard it) from corruption inside data (report the
//! offset, refuse by default). A zero-filled tail (space the file system
//! allocated but the crash left unwritten) counts as torn. Rules, in the order they are applied at an
//! offset `o` with `r` bytes remaining:
//!
//! | condition                                                  | answer            |
//! |------------------------------------------------------------|-------------------|
//! | `o > data.len()`                                           | `Corrupt`         |
//! | `r == 0`                                                   | end (`Ok(None)`)  |
//! | magic (or its first `r` bytes) differs, all bytes zero     | `TornTail`        |
//! | magic (or its first `r` bytes) differs                     | `Corrupt`         |
//! | `r < 16`                                                   | `TornTail`        |
//! | `len > BLOCK_PAYLOAD_MAX_BYTES`                            | `Corrupt`         |
//! | block ends past the data, and no valid block starts later  | `TornTail`        |
//! | block ends past the data, but a valid block starts later   | `Corrupt`         |
//! | checksum differs                                           | `Corrupt`         |
//!
//! A torn write is a prefix, so nothing valid can follow it: a block that
//! claims to run past the end while a valid block follows must have had its
//! length flipped. A flipped length in the *last* block that points past the
//! end is indistinguishable from a torn tail; callers that know how far the
//! file was synced can tell the two apart.

use std::fmt;

/// Bytes of the block header.
pub const BLOCK_HEADER_BYTES: usize = 16;

/// Largest payload a block may carry. Larger lengths are corruption: this
/// bounds what a reader allocates and catches flips in the length's high bits.
pub const BLOCK_PAYLOAD_MAX_BYTES: usize = 64 << 20;

const _: () = assert!(BLOCK_PAYLOAD_MAX_BYTES <= u32::MAX as usize);

/// Offset of the checksum within the header; it covers everything before it.
const CRC_OFFSET: usize = 12;

/// One decoded block, borrowing its payload from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// The format version the block was written with.
    pub version: u16,
    /// The format's block kind.
    pub kind: u16,
    /// The payload, checksum verified.
    pub payload: &'a [u8],
}

/// Why a block could not be decoded.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The data ends inside a block: the unfinished last write of a crash.
    /// Everything before `offset` is intact.
    #[error("torn tail at offset {offset}")]
    TornTail {
        /// Where the incomplete block starts.
        offset: usize,
    },
    /// The block at `offset` is damaged.
    #[error("corrupt block at offset {offset}: {reason}")]
    Corrupt {
        /// Where the damaged block starts.
        offset: usize,
        /// What is wrong with it.
        reason: CorruptReason,
    },
}

/// What is wrong with a corrupt block.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorruptReason {
    /// The block does not start with the format's magic number.
    BadMagic {
        /// The magic the format uses.
        expected: u32,
        /// What was found (zero-padded if fewer than 4 bytes remain).
        found: u32,
    },
    /// The length field exceeds [`BLOCK_PAYLOAD_MAX_BYTES`].
    TooLong {
        /// The length found.
        len: u32,
    },
    /// The block claims to run past the end, yet a valid block follows it.
    LengthPastEnd {
        /// The length found.
        len: u32,
        /// Where the next valid block starts.
        next_valid: usize,
    },
    /// The offset asked for lies past the end of the data: a bad pointer.
    OffsetPastEnd {
        /// The length of the data.
        data_len: usize,
    },
    /// The checksum does not match header and payload.
    ChecksumMismatch {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
}

impl fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptReason::BadMagic { expected, found } => {
                write!(f, "bad magic {found:#010x}, expected {expected:#010x}")
            }
            CorruptReason::TooLong { len } => {
                write!(f, "length {len} exceeds {BLOCK_PAYLOAD_MAX_BYTES}")
            }
            CorruptReason::LengthPastEnd { len, next_valid } => write!(
                f,
                "length {len} runs past the end, but a valid block starts at {next_valid}"
            ),
            CorruptReason::OffsetPastEnd { data_len } => {
                write!(f, "offset past the end of {data_len} bytes")
            }
            CorruptReason::ChecksumMismatch { stored, computed } => {
                write!(
                    f,
                    "crc32c {computed:#010x} does not match stored {stored:#010x}"
                )
            }
        }
    }
}

/// Fills in the header of a block whose payload already sits at
/// `block[BLOCK_HEADER_BYTES..]`: lets a writer reserve the header, build the
/// payload in place, and seal it without copying.
///
/// # Panics
///
/// If `magic` is zero (indistinguishable from unwritten space), `block` is
/// shorter than the header, or the payload is longer than
/// [`BLOCK_PAYLOAD_MAX_BYTES`]: all are bugs in the writer.
pub fn seal_block(block: &mut [u8], magic: u32, version: u16, kind: u16) {
    assert_ne!(magic, 0, "a zero magic cannot be told from unwritten space");
    assert!(
        block.len() >= BLOCK_HEADER_BYTES,
        "block shorter than its header"
    );
    let len = block.len() - BLOCK_HEADER_BYTES;
    assert!(
        len <= BLOCK_PAYLOAD_MAX_BYTES,
        "block payload of {len} bytes exceeds the maximum"
    );
    block[0..4].copy_from_slice(&magic.to_le_bytes());
    block[4..6].copy_from_slice(&version.to_le_bytes());
    block[6..8].copy_from_slice(&kind.to_le_bytes());
    block[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = checksum(&block[..CRC_OFFSET], &block[BLOCK_HEADER_BYTES..]);
    block[CRC_OFFSET..BLOCK_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    debug_assert!(matches!(decode_block(block, 0, magic), Ok(Some((_, n))) if n == block.len()));
}

/// Appends a framed block carrying `payload` to `out`.
///
/// # Panics
///
/// As [`seal_block`].
pub fn encode_block(out: &mut Vec<u8>, magic: u32, version: u16, kind: u16, payload: &[u8]) {
    let start = out.len();
    out.resize(start + BLOCK_HEADER_BYTES, 0);
    out.extend_from_slice(payload);
    seal_block(&mut out[start..], magic, version, kind);
}

/// Decodes the block of format `magic` at `offset` in `data`.
///
/// Returns `Ok(Some((block, next_offset)))`, `Ok(None)` at the clean end of
/// the data (`offset == data.len()`), or a [`FrameError`] as the module's
/// table says. An `offset` past the end is reported as corrupt. Never panics.
pub fn decode_block(
    data: &[u8],
    offset: usize,
    magic: u32,
) -> Result<Option<(Block<'_>, usize)>, FrameError> {
    let Some(rest) = data.get(offset..) else {
        return Err(FrameError::Corrupt {
            offset,
            reason: CorruptReason::OffsetPastEnd {
                data_len: data.len(),
            },
        });
    };
    if rest.is_empty() {
        return Ok(None);
    }
    let torn = Err(FrameError::TornTail { offset });
    let magic_seen = rest.len().min(4);
    if rest[..magic_seen] != magic.to_le_bytes()[..magic_seen] {
        // Only reached off the happy path, so scanning the rest is fine.
        if rest.iter().all(|&b| b == 0) {
            return torn;
        }
        let mut found = [0u8; 4];
        found[..magic_seen].copy_from_slice(&rest[..magic_seen]);
        return Err(FrameError::Corrupt {
            offset,
            reason: CorruptReason::BadMagic {
                expected: magic,
                found: u32::from_le_bytes(found),
            },
        });
    }
    let Some(header) = rest.get(..BLOCK_HEADER_BYTES) else {
        return torn;
    };
    let field = |at: usize| [header[at], header[at + 1]];
    let version = u16::from_le_bytes(field(4));
    let kind = u16::from_le_bytes(field(6));
    let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    let stored = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
    if len as usize > BLOCK_PAYLOAD_MAX_BYTES {
        return Err(FrameError::Corrupt {
            offset,
            reason: CorruptReason::TooLong { len },
        });
    }
    let end = BLOCK_HEADER_BYTES + len as usize;
    let Some(payload) = rest.get(BLOCK_HEADER_BYTES..end) else {
        return match next_valid_block(data, offset + 1, magic) {
            Some(next_valid) => Err(FrameError::Corrupt {
                offset,
                reason: CorruptReason::LengthPastEnd { len, next_valid },
            }),
            None => torn,
        };
    };
    let computed = checksum(&header[..CRC_OFFSET], payload);
    if computed != stored {
        return Err(FrameError::Corrupt {
            offset,
            reason: CorruptReason::ChecksumMismatch { stored, computed },
        });
    }
    Ok(Some((
        Block {
            version,
            kind,
            payload,
        },
        offset + end,
    )))
}

/// Iterates over the blocks of `data`, yielding each with its offset; after
/// an error it yields that error once and then ends.
pub fn blocks(data: &[u8], magic: u32) -> Blocks<'_> {
    Blocks {
        data,
        magic,
        offset: Some(0),
    }
}

/// Iterator returned by [`blocks`].
#[derive(Debug, Clone)]
pub struct Blocks<'a> {
    data: &'a [u8],
    magic: u32,
    /// `None` once the end or an error was reached.
    offset: Option<usize>,
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Result<(usize, Block<'a>), FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        let offset = self.offset.take()?;
        match decode_block(self.data, offset, self.magic) {
            Ok(Some((block, next))) => {
                self.offset = Some(next);
                Some(Ok((offset, block)))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), payload)
}

/// The offset of the first complete, checksum-valid block at or after `from`.
/// Only called on the error path; cost is one checksum per magic match.
fn next_valid_block(data: &[u8], from: usize, magic: u32) -> Option<usize> {
    let magic_bytes = magic.to_le_bytes();
    let tail = data.get(from..)?;
    tail.windows(4)
        .enumerate()
        .filter(|(_, w)| *w == magic_bytes)
        .map(|(i, _)| from + i)
        .find(|&at| {
            // A candidate must be complete and valid; its own errors (and its
            // own search for a successor) do not matter here.
            let rest = &data[at..];
            let Some(header) = rest.get(..BLOCK_HEADER_BYTES) else {
                return false;
            };
            let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
            let stored = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
            len <= BLOCK_PAYLOAD_MAX_BYTES
                && rest
                    .get(BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + len)
                    .is_some_and(|payload| checksum(&header[..CRC_OFFSET], payload) == stored)
        })
}
