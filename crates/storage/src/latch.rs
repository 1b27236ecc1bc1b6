//! The I/O failure latch: once set, the storage refuses every call.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, StorageError};

/// Set by the first failed write or sync; never cleared. Shared by a storage
/// and all files opened from it.
#[derive(Debug, Default)]
pub(crate) struct Latch {
    failed: AtomicBool,
}

impl Latch {
    /// `Err(PreviousIo)` once any mutating call has failed.
    pub(crate) fn check(&self) -> Result<()> {
        // Relaxed is enough: the latch orders nothing but itself; a call that
        // races with the failing one may still run, as it would have a moment
        // earlier.
        if self.failed.load(Ordering::Relaxed) {
            return Err(StorageError::PreviousIo);
        }
        Ok(())
    }

    /// Passes `result` through, latching if it is a failure that leaves the
    /// media in an unknown state.
    pub(crate) fn record<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            if e.latches() {
                self.failed.store(true, Ordering::Relaxed);
            }
        }
        result
    }
}
