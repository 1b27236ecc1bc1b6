//! Where the point index's atomics come from: shuttle's, whose scheduler
//! the schedule tests drive, under `cfg(engine_shuttle)`.

#[cfg(engine_shuttle)]
pub(super) use shuttle::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize};
#[cfg(not(engine_shuttle))]
pub(super) use std::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize};

/// Waits a moment for another thread holding a bucket (under shuttle, a
/// yield point).
#[inline]
pub(super) fn spin_wait() {
    #[cfg(engine_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(engine_shuttle))]
    std::hint::spin_loop();
}

/// A mutex with a poison-free `lock()`: parking_lot's, or shuttle's under
/// the schedule tests (whose scheduler must see every blocking lock).
#[derive(Debug, Default)]
pub(super) struct Mutex<T> {
    #[cfg(not(engine_shuttle))]
    inner: parking_lot::Mutex<T>,
    #[cfg(engine_shuttle)]
    inner: shuttle::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(super) fn new(value: T) -> Self {
        Self {
            #[cfg(not(engine_shuttle))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(engine_shuttle)]
            inner: shuttle::sync::Mutex::new(value),
        }
    }

    #[cfg(not(engine_shuttle))]
    pub(super) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.inner.lock()
    }

    #[cfg(engine_shuttle)]
    pub(super) fn lock(&self) -> shuttle::sync::MutexGuard<'_, T> {
        self.inner.lock().expect("shuttle mutex poisoned")
    }
}
