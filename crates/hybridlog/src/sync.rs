//! The one place atomics come from, so that `cfg(loom)` builds swap in
//! loom's model-checked versions (crossbeam-epoch's pattern).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64};

/// A retry loop's pause: a spin hint, or under loom a yield, so the model
/// checker knows the thread waits for another one to make progress.
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
