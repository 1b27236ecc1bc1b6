//! The record layout of the HybridLog (cpr-sigmod19 §6.2: "the 64-bit
//! per-record header … 48-bit previous address and status bits such as
//! invalid and tombstone … a 13-bit version number").
//!
//! ```text
//! word 0  header: bits 0..48 previous address, 48..61 version (13 bits),
//!                 bit 61 invalid, bit 62 tombstone, bit 63 sealed
//! word 1  key length in bytes (u32, low half) | value length (u32, high)
//! word 2… key bytes, zero-padded to whole words
//!         value bytes, zero-padded to whole words
//! ```
//!
//! With a fixed layout ([`RecordLayout::Fixed`], every key and every value
//! of one size, as FASTER's fixed-size records) word 1 is left out: the key
//! starts at word 1, and a record of 8-byte keys and values takes 24 bytes
//! instead of 32. A tombstone keeps its (zero) value words there, so every
//! record of such a store has the same size.
//!
//! Every record is 8-byte aligned and a whole number of words, so the page
//! frames are arrays of `AtomicU64` and every access to a record that other
//! threads may see is an atomic load or store: no data race is possible even
//! when threads update values in place concurrently (FASTER leaves that to
//! the user's functions; here a value is a run of atomic words).
//!
//! Keys are never empty, so word 1 of a variable-layout record is never
//! zero: a zero word 1 where a record would start means "nothing more on
//! this page" (the rest of a page the allocator skipped is left zero). In a
//! fixed layout every record has the same size, and the allocator leaves a
//! page's rest unused only when a record no longer fits there, so a page
//! holds records up to the last place one fits (`Layout::page_end`).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::address::{ADDRESS_BITS, ADDRESS_MASK};

/// Bits of the record version (cpr-sigmod19 §6.2).
pub(crate) const VERSION_BITS: u32 = 13;
/// Mask of a record version.
pub(crate) const VERSION_MASK: u64 = (1 << VERSION_BITS) - 1;
const INVALID_BIT: u64 = 1 << 61;
const TOMBSTONE_BIT: u64 = 1 << 62;
/// Set on a record in the mutable region that an RMW is about to copy
/// because its in-place updater declined (FASTER C#'s "sealed" record):
/// nobody updates it in place from then on. A new record never has it.
pub(crate) const SEALED_BIT: u64 = 1 << 63;
/// Bytes of the header and length words.
pub(crate) const RECORD_HEADER_BYTES: usize = 16;

const _: () = assert!(ADDRESS_BITS + VERSION_BITS == 61);

/// How a store lays out the lengths of its records' keys and values,
/// chosen when the store is created ([`crate::Config::record_layout`]) and
/// kept in every checkpoint: a recovered store keeps its checkpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordLayout {
    /// Keys and values of any length; each record carries a length word
    /// (16 bytes of header and lengths; 32 bytes for 8-byte keys and
    /// values).
    #[default]
    Variable,
    /// Every key is `key_bytes` long and every value `value_bytes`: the
    /// record is its header, key and value (FASTER's fixed-size records,
    /// 24 bytes for 8-byte keys and values). An operation with a key or
    /// value of another length fails with [`crate::Error::WrongLength`];
    /// an RMW's [`crate::Functions`] must produce values of `value_bytes`.
    Fixed {
        /// Bytes of every key (at least 1).
        key_bytes: u32,
        /// Bytes of every value (deletes keep zero bytes there).
        value_bytes: u32,
    },
}

/// [`RecordLayout`] as the hot paths use it: where the key starts, and the
/// lengths when they are fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `(key_len, value_len)` of every record, or `None` (variable).
    fixed: Option<(usize, usize)>,
}

impl Layout {
    /// The variable layout (with a length word).
    pub(crate) const VARIABLE: Layout = Layout { fixed: None };

    pub(crate) fn new(layout: RecordLayout) -> Self {
        match layout {
            RecordLayout::Variable => Layout::VARIABLE,
            RecordLayout::Fixed {
                key_bytes,
                value_bytes,
            } => Layout {
                fixed: Some((key_bytes as usize, value_bytes as usize)),
            },
        }
    }

    /// The public description.
    pub(crate) fn public(self) -> RecordLayout {
        match self.fixed {
            None => RecordLayout::Variable,
            Some((key, value)) => RecordLayout::Fixed {
                key_bytes: key as u32,
                value_bytes: value as u32,
            },
        }
    }

    /// `(key_len, value_len)` of a fixed layout.
    pub(crate) fn fixed(self) -> Option<(usize, usize)> {
        self.fixed
    }

    /// The one record size of a fixed layout.
    pub(crate) fn fixed_record_bytes(self) -> Option<usize> {
        self.fixed
            .map(|(key, value)| 8 * (1 + words(key) + words(value)))
    }

    /// The word of a record where its key starts.
    #[inline(always)]
    pub(crate) fn key_at(self) -> usize {
        if self.fixed.is_some() {
            1
        } else {
            2
        }
    }

    /// Bytes before the key.
    #[inline(always)]
    pub(crate) fn header_bytes(self) -> usize {
        8 * self.key_at()
    }

    /// `(key_len, value_len)` of the in-memory record starting at `record[0]`.
    #[inline(always)]
    pub(crate) fn lengths(self, record: &[AtomicU64]) -> (usize, usize) {
        match self.fixed {
            Some(lengths) => lengths,
            None => split_lengths(record[1].load(Relaxed)),
        }
    }

    /// `(key_len, value_len)` of the record whose bytes start `bytes`
    /// (at least [`Layout::header_bytes`] of them).
    #[inline]
    pub(crate) fn lengths_in(self, bytes: &[u8]) -> (usize, usize) {
        match self.fixed {
            Some(lengths) => lengths,
            None => split_lengths(u64::from_le_bytes(bytes[8..16].try_into().expect("8"))),
        }
    }

    /// The key of the record whose bytes start `bytes`.
    #[inline]
    pub(crate) fn key_in(self, bytes: &[u8]) -> &[u8] {
        let (key_len, _) = self.lengths_in(bytes);
        let at = self.header_bytes();
        &bytes[at..at + key_len]
    }

    /// The value of the record whose bytes start `bytes` (whole).
    #[inline]
    pub(crate) fn value_in(self, bytes: &[u8]) -> &[u8] {
        let (key_len, value_len) = self.lengths_in(bytes);
        let at = self.header_bytes() + 8 * words(key_len);
        &bytes[at..at + value_len]
    }

    /// The value words of the in-memory record starting at `record[0]`.
    #[inline(always)]
    pub(crate) fn value(self, record: &[AtomicU64]) -> crate::functions::Value<'_> {
        self.value_of(record, self.lengths(record))
    }

    /// [`Layout::value`] of a record whose lengths were read already.
    #[inline(always)]
    pub(crate) fn value_of(
        self,
        record: &[AtomicU64],
        (key_len, value_len): (usize, usize),
    ) -> crate::functions::Value<'_> {
        let at = self.key_at() + words(key_len);
        crate::functions::Value::new(&record[at..at + words(value_len)], value_len)
    }

    /// Bytes of a record with these lengths (a fixed layout: always its
    /// one size, a tombstone's too).
    #[inline(always)]
    pub(crate) fn record_bytes(self, key_len: usize, value_len: usize) -> usize {
        self.fixed_record_bytes()
            .unwrap_or_else(|| record_bytes(key_len, value_len))
    }

    /// Writes the lengths word of a new record (a variable layout only).
    #[inline(always)]
    pub(crate) fn write_lengths(self, record: &[AtomicU64], key_len: usize, value_len: usize) {
        if self.fixed.is_none() {
            record[1].store(lengths_word(key_len, value_len), Relaxed);
        }
    }

    /// Whether a key of `len` bytes fits the layout.
    #[inline(always)]
    pub(crate) fn check_key(self, len: usize) -> Result<(), crate::Error> {
        check_length("key", self.fixed.map(|(key, _)| key), len)
    }

    /// Whether a value of `len` bytes fits the layout.
    #[inline(always)]
    pub(crate) fn check_value(self, len: usize) -> Result<(), crate::Error> {
        check_length("value", self.fixed.map(|(_, value)| value), len)
    }

    /// Why a fixed layout cannot work with pages of `2^page_bits` bytes: no
    /// key bytes, or records larger than a page. `None`: it can (so can
    /// the variable layout).
    pub(crate) fn unusable(self, page_bits: u32) -> Option<crate::Error> {
        let (key, _) = self.fixed?;
        let bytes = self.fixed_record_bytes()?;
        if key == 0 {
            Some(crate::Error::InvalidConfig(
                "a fixed record layout needs keys of at least one byte".into(),
            ))
        } else if bytes > crate::address::record_bytes_max(page_bits) {
            Some(crate::Error::RecordTooLarge(bytes))
        } else {
            None
        }
    }

    /// Whether the records of `page` (or of a chunk's last, partial page)
    /// have ended at `offset`, where a scan would read the next one. A
    /// variable layout ends at a zero length word; a fixed one where a
    /// record no longer fits.
    #[inline]
    pub(crate) fn page_end(self, page: &[u8], offset: usize) -> bool {
        match self.fixed_record_bytes() {
            Some(bytes) => offset + bytes > page.len(),
            None => {
                offset + RECORD_HEADER_BYTES > page.len()
                    || page[offset + 8..offset + 16] == [0u8; 8]
            }
        }
    }
}

/// `WrongLength` for `what` of `got` bytes where a fixed layout holds
/// `fixed` (none: any length).
#[inline(always)]
fn check_length(what: &'static str, fixed: Option<usize>, got: usize) -> Result<(), crate::Error> {
    match fixed {
        Some(expected) if expected != got => Err(crate::Error::WrongLength {
            what,
            expected,
            got,
        }),
        _ => Ok(()),
    }
}

/// The decoded first word of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header(pub(crate) u64);

impl Header {
    /// A valid header.
    pub(crate) fn new(previous: u64, version: u32, tombstone: bool) -> Self {
        debug_assert!(previous <= ADDRESS_MASK);
        let mut word = previous | ((u64::from(version) & VERSION_MASK) << ADDRESS_BITS);
        if tombstone {
            word |= TOMBSTONE_BIT;
        }
        Header(word)
    }

    /// The previous record of the same hash chain.
    pub(crate) fn previous(self) -> u64 {
        self.0 & ADDRESS_MASK
    }

    /// The checkpoint version the record was written in, modulo 2^13.
    pub(crate) fn version(self) -> u32 {
        ((self.0 >> ADDRESS_BITS) & VERSION_MASK) as u32
    }

    /// The record is to be skipped (a lost index CAS, or a version-(v+1)
    /// record invalidated by recovery, §6.4); its previous address is still
    /// followed.
    pub(crate) fn invalid(self) -> bool {
        self.0 & INVALID_BIT != 0
    }

    /// The record marks its key deleted.
    pub(crate) fn tombstone(self) -> bool {
        self.0 & TOMBSTONE_BIT != 0
    }

    /// The record must not be updated in place any more: an RMW whose
    /// in-place updater declined is copying it (see `Session::seal`). Only
    /// meaningful in the mutable region; below read-only every record is
    /// immutable anyway.
    pub(crate) fn sealed(self) -> bool {
        self.0 & SEALED_BIT != 0
    }

    /// This header with the invalid bit set.
    pub(crate) fn with_invalid(self) -> Self {
        Header(self.0 | INVALID_BIT)
    }
}

/// Record versions are 13 bits and wrap; versions only ever compare for
/// equality with the current version (cpr-sigmod19 Algorithms 3 and 4 ask
/// "is this record of version v+1?", never an order over distant versions).
pub(crate) fn record_version(version: u32) -> u32 {
    (u64::from(version) & VERSION_MASK) as u32
}

/// Words needed for `bytes` bytes.
pub(crate) fn words(bytes: usize) -> usize {
    bytes.div_ceil(8)
}

/// Bytes of a record with these key and value lengths.
pub(crate) fn record_bytes(key_len: usize, value_len: usize) -> usize {
    RECORD_HEADER_BYTES + 8 * (words(key_len) + words(value_len))
}

/// Packs the length word.
pub(crate) fn lengths_word(key_len: usize, value_len: usize) -> u64 {
    debug_assert!(key_len > 0 && key_len <= u32::MAX as usize);
    debug_assert!(value_len <= u32::MAX as usize);
    key_len as u64 | ((value_len as u64) << 32)
}

/// Unpacks the length word: `(key_len, value_len)`.
pub(crate) fn split_lengths(word: u64) -> (usize, usize) {
    ((word & 0xffff_ffff) as usize, (word >> 32) as usize)
}

/// The 64-bit hash of a key (FASTER hashes keys with a mixing function; the
/// index takes its bucket from the low bits and its tag from the high bits).
/// Whole words are mixed at a time, so an 8-byte key costs one round.
#[inline]
pub(crate) fn hash_key(key: &[u8]) -> u64 {
    let mut hash = 0x9e37_79b9_7f4a_7c15u64 ^ (key.len() as u64);
    if let Ok(word) = <[u8; 8]>::try_from(key) {
        // The fixed 8-byte-key fast path: the loop below, unrolled.
        return mix(hash ^ u64::from_le_bytes(word));
    }
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        hash = mix(hash ^ word);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        hash = mix(hash ^ u64::from_le_bytes(buf));
    }
    hash
}

/// A 64-bit finalizer (murmur3's fmix64).
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// Key bytes as little-endian words, zero-padded.
pub(crate) fn key_words(key: &[u8], out: &mut Vec<u64>) {
    out.clear();
    for chunk in key.chunks(8) {
        let mut buf = [0u8; 8];
        buf[..chunk.len()].copy_from_slice(chunk);
        out.push(u64::from_le_bytes(buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header::new(0x1234_5678_9abc, 8191, true);
        assert_eq!(h.previous(), 0x1234_5678_9abc);
        assert_eq!(h.version(), 8191);
        assert!(h.tombstone());
        assert!(!h.invalid());
        assert!(!h.sealed(), "a new record is not sealed");
        let sealed = Header(h.0 | SEALED_BIT);
        assert!(sealed.sealed() && !sealed.invalid() && sealed.tombstone());
        assert_eq!(sealed.previous(), h.previous());
        assert_eq!(sealed.version(), h.version());
        let h = h.with_invalid();
        assert!(h.invalid());
        assert_eq!(h.version(), 8191);
        assert_eq!(Header::new(64, 8192, false).version(), 0, "versions wrap");
    }

    #[test]
    fn eight_byte_keys_hash_as_the_general_loop_does() {
        for k in [0u64, 1, 42, u64::MAX, 0x0123_4567_89ab_cdef] {
            let key = k.to_le_bytes();
            let general = mix(0x9e37_79b9_7f4a_7c15u64 ^ 8 ^ k);
            assert_eq!(hash_key(&key), general);
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(record_bytes(8, 8), 32);
        assert_eq!(record_bytes(1, 100), 16 + 8 + 104);
        assert_eq!(split_lengths(lengths_word(8, 100)), (8, 100));
    }
}
