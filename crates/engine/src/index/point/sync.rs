//! Where the point index's atomics come from: shuttle's, whose scheduler
//! the schedule tests drive, under `cfg(engine_shuttle)`.

#[cfg(engine_shuttle)]
pub(super) use shuttle::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
#[cfg(not(engine_shuttle))]
pub(super) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

/// Waits a moment for another thread holding a bucket (under shuttle, a
/// yield point).
#[inline]
pub(super) fn spin_wait() {
    #[cfg(engine_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(engine_shuttle))]
    std::hint::spin_loop();
}
