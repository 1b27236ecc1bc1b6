//! The checkpointing algorithms of §2.3 and §3, one module each, in the
//! cache-aware layouts of §4.
//!
//! Shared arrays are arrays of atomics accessed with `Relaxed` ordering: on
//! the targets we run on, a relaxed load or store of an aligned `u64` is an
//! ordinary `mov`, so this costs nothing over plain memory while keeping the
//! crate free of `unsafe`. Ordering between the two threads comes only from
//! the handshake at points of consistency (`engine.rs`); within a checkpoint
//! period each module argues why mutator and writer never conflict.

pub(crate) mod copy_on_update;
pub(crate) mod naive_snapshot;
pub(crate) mod pingpong;
pub(crate) mod pingpong_interleaved;
pub(crate) mod pingpong_naive;
pub(crate) mod zigzag_naive;
pub(crate) mod zigzag_packed;

use crate::memory::{HugePages, Region};
use std::sync::atomic::{AtomicU64, AtomicU8};

/// A shared array of words initialised from `init`.
pub(crate) fn atomic_words(init: &[u64], huge: HugePages) -> Region<AtomicU64> {
    Region::new(init.len(), huge, |i| AtomicU64::new(init[i]))
}

/// A shared array of byte-sized flags, all `value`.
pub(crate) fn atomic_bytes(len: usize, value: u8, huge: HugePages) -> Region<AtomicU8> {
    Region::new(len, huge, |_| AtomicU8::new(value))
}
