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

use std::sync::atomic::{AtomicU64, AtomicU8};

/// A shared array of words initialised from `init`.
pub(crate) fn atomic_words(init: &[u64]) -> Box<[AtomicU64]> {
    init.iter().map(|&w| AtomicU64::new(w)).collect()
}

/// A shared array of byte-sized flags, all `value`.
pub(crate) fn atomic_bytes(len: usize, value: u8) -> Box<[AtomicU8]> {
    (0..len).map(|_| AtomicU8::new(value)).collect()
}
