//! On-disk formats: checkpoint files and logical-log blocks. Integers are
//! little-endian; every unit carries a magic, a format version and a CRC32C.
//!
//! Checkpoint file (`ckpt.0` / `ckpt.1`, the double backup of §2.2):
//!
//! ```text
//! offset  size  field
//! 0       8     magic  "FCCCKPT1"
//! 8       4     format version (1)
//! 12      4     reserved (0)
//! 16      8     checkpoint id (1, 2, …; id k lives in ckpt.(k % 2))
//! 24      8     tick: the point of consistency the image belongs to
//! 32      8     word count n
//! 40      8·n   the words
//! 40+8n   4     CRC32C of bytes [0, 40+8n)
//! 44+8n   4     end magic "FCKE"
//! ```
//!
//! Log segment (`log.<tick, 16 hex digits>`, holding the ticks after that
//! tick) is a sequence of blocks, one per point of consistency:
//!
//! ```text
//! 0       4     magic "FCLG"
//! 4       4     format version (1)
//! 8       8     tick
//! 16      4     record count
//! 20      4     payload length p
//! 24      p     records, each: u32 length, bytes
//! 24+p    4     CRC32C of bytes [0, 24+p)
//! ```

use crate::error::Error;

/// Magic at the start of a checkpoint file.
pub(crate) const CKPT_MAGIC: [u8; 8] = *b"FCCCKPT1";
/// Magic at the end of a checkpoint file.
pub(crate) const CKPT_END_MAGIC: [u8; 4] = *b"FCKE";
/// Checkpoint and log format version.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Bytes before the first word of a checkpoint.
pub(crate) const CKPT_HEADER_BYTES: usize = 40;
/// Bytes after the last word of a checkpoint.
pub(crate) const CKPT_TRAILER_BYTES: usize = 8;
/// Magic at the start of a log block.
pub(crate) const LOG_MAGIC: [u8; 4] = *b"FCLG";
/// Bytes before a log block's payload.
pub(crate) const LOG_HEADER_BYTES: usize = 24;
/// Largest log block payload accepted when reading (a bound, not a target).
pub(crate) const LOG_PAYLOAD_BYTES_MAX: usize = 1 << 30;

/// The name of the checkpoint slot that holds checkpoint `id`.
pub(crate) fn ckpt_slot_name(id: u64) -> String {
    format!("ckpt.{}", id % 2)
}

/// The name of the log segment holding the ticks after `tick`.
pub(crate) fn log_segment_name(tick: u64) -> String {
    format!("log.{tick:016x}")
}

/// Parses a log segment name back into its tick.
pub(crate) fn parse_log_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("log.")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A checkpoint header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CkptHeader {
    pub(crate) id: u64,
    pub(crate) tick: u64,
    pub(crate) words: u64,
}

impl CkptHeader {
    pub(crate) fn encode(&self) -> [u8; CKPT_HEADER_BYTES] {
        let mut out = [0u8; CKPT_HEADER_BYTES];
        out[0..8].copy_from_slice(&CKPT_MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.id.to_le_bytes());
        out[24..32].copy_from_slice(&self.tick.to_le_bytes());
        out[32..40].copy_from_slice(&self.words.to_le_bytes());
        out
    }

    /// Decodes and checks the fixed fields (not the CRC).
    pub(crate) fn decode(file: &str, bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() < CKPT_HEADER_BYTES {
            return Err(Error::Torn {
                file: file.to_owned(),
                offset: bytes.len() as u64,
            });
        }
        if bytes[0..8] != CKPT_MAGIC {
            return Err(Error::Corrupted {
                file: file.to_owned(),
                offset: 0,
                what: "checkpoint magic",
            });
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                file: file.to_owned(),
                version,
            });
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(Self {
            id: u64_at(16),
            tick: u64_at(24),
            words: u64_at(32),
        })
    }
}

/// A checkpoint read back and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub(crate) header: CkptHeader,
    pub(crate) words: Vec<u64>,
}

/// Verifies a whole checkpoint file (length, magics, version, CRC32C) and
/// decodes it.
pub(crate) fn decode_checkpoint(file: &str, bytes: &[u8]) -> Result<Checkpoint, Error> {
    let header = CkptHeader::decode(file, bytes)?;
    // The count is not yet covered by the CRC (which it locates): any
    // value must give an error, not an overflow.
    let body_bytes = usize::try_from(header.words)
        .ok()
        .and_then(|w| w.checked_mul(8))
        .filter(|b| {
            b.checked_add(CKPT_HEADER_BYTES + CKPT_TRAILER_BYTES)
                .is_some()
        })
        .ok_or(Error::Corrupted {
            file: file.to_owned(),
            offset: 32,
            what: "checkpoint word count",
        })?;
    let total = CKPT_HEADER_BYTES + body_bytes + CKPT_TRAILER_BYTES;
    if bytes.len() < total {
        return Err(Error::Torn {
            file: file.to_owned(),
            offset: bytes.len() as u64,
        });
    }
    if bytes.len() > total {
        return Err(Error::Corrupted {
            file: file.to_owned(),
            offset: total as u64,
            what: "bytes after the checkpoint trailer",
        });
    }
    let crc_at = CKPT_HEADER_BYTES + body_bytes;
    let expected = u32::from_le_bytes(bytes[crc_at..crc_at + 4].try_into().expect("4 bytes"));
    let got = crc32c::crc32c(&bytes[..crc_at]);
    if got != expected {
        return Err(Error::ChecksumMismatch {
            file: file.to_owned(),
            offset: crc_at as u64,
            got,
            expected,
        });
    }
    if bytes[crc_at + 4..total] != CKPT_END_MAGIC {
        return Err(Error::Corrupted {
            file: file.to_owned(),
            offset: (crc_at + 4) as u64,
            what: "checkpoint end magic",
        });
    }
    let words = bytes[CKPT_HEADER_BYTES..crc_at]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Ok(Checkpoint { header, words })
}

/// Encodes one log block (a tick's group commit) onto `out`.
pub(crate) fn encode_log_block(out: &mut Vec<u8>, tick: u64, records: u32, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&LOG_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&tick.to_le_bytes());
    out.extend_from_slice(&records.to_le_bytes());
    let len = u32::try_from(payload.len()).expect("log payload below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// A decoded log block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogBlock<'a> {
    pub(crate) tick: u64,
    pub(crate) records: u32,
    pub(crate) payload: &'a [u8],
}

impl<'a> LogBlock<'a> {
    /// Iterates over the block's records.
    pub(crate) fn records(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.payload;
        std::iter::from_fn(move || {
            if rest.len() < 4 {
                return None;
            }
            let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            let record = rest.get(4..4 + len)?;
            rest = &rest[4 + len..];
            Some(record)
        })
    }
}

/// Decodes the log block at the start of `bytes`, returning it and its
/// length in bytes, or `None` when the bytes do not hold a whole, valid block
/// (a torn tail after a crash).
pub(crate) fn decode_log_block(bytes: &[u8]) -> Option<(LogBlock<'_>, usize)> {
    if bytes.len() < LOG_HEADER_BYTES || bytes[0..4] != LOG_MAGIC {
        return None;
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    if version != FORMAT_VERSION {
        return None;
    }
    let tick = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let records = u32::from_le_bytes(bytes[16..20].try_into().ok()?);
    let len = u32::from_le_bytes(bytes[20..24].try_into().ok()?) as usize;
    if len > LOG_PAYLOAD_BYTES_MAX {
        return None;
    }
    let end = LOG_HEADER_BYTES + len;
    let crc_bytes = bytes.get(end..end + 4)?;
    let expected = u32::from_le_bytes(crc_bytes.try_into().ok()?);
    if crc32c::crc32c(&bytes[..end]) != expected {
        return None;
    }
    let block = LogBlock {
        tick,
        records,
        payload: &bytes[LOG_HEADER_BYTES..end],
    };
    // The record framing must account for exactly `records` records.
    if block.records().count() != records as usize {
        return None;
    }
    Some((block, end + 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_block_round_trips_and_rejects_torn() {
        let mut payload = Vec::new();
        for r in [&b"ab"[..], b"", b"xyz"] {
            payload.extend_from_slice(&(r.len() as u32).to_le_bytes());
            payload.extend_from_slice(r);
        }
        let mut out = Vec::new();
        encode_log_block(&mut out, 7, 3, &payload);
        let (block, used) = decode_log_block(&out).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(block.tick, 7);
        let recs: Vec<&[u8]> = block.records().collect();
        assert_eq!(recs, vec![&b"ab"[..], b"", b"xyz"]);
        for cut in 0..out.len() {
            assert!(decode_log_block(&out[..cut]).is_none());
        }
        out[LOG_HEADER_BYTES] ^= 1;
        assert!(decode_log_block(&out).is_none());
    }

    proptest::proptest! {
        /// Any bytes decode to a checkpoint or an error, never a panic.
        #[test]
        fn checkpoint_decoder_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = decode_checkpoint("c", &bytes);
        }

        /// A header that checks out with any word count (one bit flip
        /// away from a real one; the CRC is checked only after the count
        /// is used to find it) is an error, not an overflow.
        #[test]
        fn any_word_count_in_a_valid_header_is_safe(
            words in proptest::prop_oneof![
                0u64..64,
                proptest::prelude::any::<u64>(),
                (u64::MAX / 8 - 16)..=(u64::MAX / 8),
            ],
            body in 0usize..64,
        ) {
            let mut bytes = CkptHeader { id: 1, tick: 2, words }.encode().to_vec();
            bytes.resize(bytes.len() + body, 7);
            let _ = decode_checkpoint("c", &bytes);
        }

        /// Any bytes decode to a log block or to nothing, never a panic.
        #[test]
        fn log_block_decoder_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Some((block, used)) = decode_log_block(&bytes) {
                proptest::prop_assert!(used <= bytes.len());
                proptest::prop_assert_eq!(block.records().count(), block.records as usize);
            }
        }
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(
            parse_log_segment_name(&log_segment_name(0x1234)),
            Some(0x1234)
        );
        assert_eq!(parse_log_segment_name("ckpt.0"), None);
    }
}
