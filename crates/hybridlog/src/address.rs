//! Logical addresses of the HybridLog and the limits the store is built on
//! (cpr-sigmod19 §5: a 48-bit logical address space spanning memory and
//! disk; FASTER §5 "HybridLog").
//!
//! An address is a byte offset into one infinite log. Address 0 is
//! [`INVALID_ADDRESS`] (the end of every hash chain), so the log begins at
//! [`FIRST_ADDRESS`]. On disk a record lives at file offset = its address.

/// Bits of a logical address.
pub(crate) const ADDRESS_BITS: u32 = 48;
/// Mask of the 48 address bits.
pub(crate) const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;
/// "No record": the end of a hash chain, an empty index entry.
pub(crate) const INVALID_ADDRESS: u64 = 0;
/// The first address ever allocated: one cache line, so that no record has
/// address 0 (FASTER's `Address::kInvalidAddress` convention).
pub(crate) const FIRST_ADDRESS: u64 = 64;

/// Smallest page: 4 KiB (a record must fit on one page).
pub(crate) const PAGE_BITS_MIN: u32 = 12;
/// Largest page: 1 GiB; the in-page offset lives in 32 bits of the tail word.
pub(crate) const PAGE_BITS_MAX: u32 = 30;
/// In-memory page frames the buffer needs at least: the tail page, a page
/// being flushed and one free frame to open the next page into.
pub(crate) const FRAMES_MIN: usize = 4;

const _: () = assert!(FIRST_ADDRESS < (1 << PAGE_BITS_MIN));

/// Largest record a log of `2^page_bits`-byte pages takes: records never
/// straddle pages, and the first page starts at [`FIRST_ADDRESS`].
pub(crate) fn record_bytes_max(page_bits: u32) -> usize {
    ((1u64 << page_bits) - FIRST_ADDRESS) as usize
}
const _: () = assert!(PAGE_BITS_MAX < 32);
const _: () = assert!(FIRST_ADDRESS.is_multiple_of(8));
