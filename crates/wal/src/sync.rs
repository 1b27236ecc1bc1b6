//! The one place atomics, cells and thread yields come from, so that
//! `cfg(loom)` builds swap in loom's model-checked versions
//! (crossbeam-epoch's pattern, as in `epochdb-epoch`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// A cell with loom's closure API under both builds: under loom every access
/// is checked for a data race (two accesses, one a write, not ordered by
/// happens-before).
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T> {
    #[cfg(not(loom))]
    inner: std::cell::UnsafeCell<T>,
    #[cfg(loom)]
    inner: loom::cell::UnsafeCell<T>,
}

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: std::cell::UnsafeCell::new(value),
            #[cfg(loom)]
            inner: loom::cell::UnsafeCell::new(value),
        }
    }

    /// Runs `f` with a shared pointer to the value.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.inner.get())
        }
        #[cfg(loom)]
        {
            self.inner.with(f)
        }
    }

    /// Runs `f` with an exclusive pointer to the value.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.inner.get())
        }
        #[cfg(loom)]
        {
            self.inner.with_mut(f)
        }
    }
}

/// A mutex with a poison-free `lock()` under both builds.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.inner.lock()
    }

    #[cfg(loom)]
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.inner.lock().expect("loom mutex poisoned")
    }
}

/// Waits a little before a consumer (§4.1.1) looks again: spins, then
/// yields, then sleeps, so idle pipeline threads do not burn a core the
/// database threads need. Under loom every call is a yield point.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    #[cfg(not(loom))]
    step: u32,
}

/// Spins before yielding.
#[cfg(not(loom))]
const SPIN_STEPS: u32 = 8;
/// Yields before sleeping.
#[cfg(not(loom))]
const YIELD_STEPS: u32 = 24;
/// The longest an idle pipeline thread sleeps before looking again; bounds
/// the latency the backoff adds to a commit.
#[cfg(not(loom))]
const IDLE_SLEEP: std::time::Duration = std::time::Duration::from_micros(50);

impl Backoff {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Forgets earlier idleness: work was found.
    pub(crate) fn reset(&mut self) {
        #[cfg(not(loom))]
        {
            self.step = 0;
        }
    }

    /// Waits once, longer the longer nothing happened.
    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        {
            if self.step < SPIN_STEPS {
                for _ in 0..(1 << self.step) {
                    std::hint::spin_loop();
                }
            } else if self.step < YIELD_STEPS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(IDLE_SLEEP);
            }
            self.step = self.step.saturating_add(1);
        }
    }
}
