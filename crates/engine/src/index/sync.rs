//! Where the indexes' atomics come from (the B+-tree's and the point
//! index's): shuttle's, whose scheduler the schedule tests drive, under
//! `cfg(engine_shuttle)`; the standard library's otherwise.

#[cfg(engine_shuttle)]
pub(super) use shuttle::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(not(engine_shuttle))]
pub(super) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

/// Waits a moment for another thread holding a bucket or a node (under
/// shuttle, a yield point).
#[inline]
pub(super) fn spin_wait() {
    #[cfg(engine_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(engine_shuttle))]
    std::hint::spin_loop();
}
