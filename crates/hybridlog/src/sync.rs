//! The one place atomics come from, so that `cfg(loom)` builds swap in
//! loom's model-checked versions (crossbeam-epoch's pattern).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;
