//! The epoch framework epochdb is built on.
//!
//! * A global epoch `E`, advanced by a designated thread ([`EpochTicker`],
//!   every 40 ms in Silo) or on demand ([`EpochManager::bump`]).
//! * Per-thread local epochs ([`EpochHandle`]): a protected thread announces
//!   the epoch it observed; `refresh` moves it forward.
//! * The safe epoch: every thread has left all epochs ≤ it.
//! * Trigger actions (cpr-sigmod19 §3): [`EpochManager::bump_with`] runs an
//!   action once every thread has left the epoch it was registered in — the
//!   building block of CPR's phase transitions.
//! * Epoch-based reclamation: [`EpochHandle::retire`] frees an unlinked
//!   object once the safe epoch passes the epoch it was retired in.
//!
//! ```
//! use epochdb_epoch::EpochManager;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//!
//! let epochs = EpochManager::new(8);
//! let mut worker = epochs.register().unwrap();
//! worker.protect();
//! let ran = Arc::new(AtomicBool::new(false));
//! let flag = ran.clone();
//! epochs.bump_with(move || flag.store(true, Ordering::SeqCst));
//! assert!(!ran.load(Ordering::SeqCst), "worker still in the old epoch");
//! worker.refresh(); // leaves the old epoch; the action runs
//! assert!(ran.load(Ordering::SeqCst));
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod framework;
mod garbage;
mod manager;
mod sync;
#[cfg(not(loom))]
mod ticker;

pub use framework::FIRST_EPOCH;
pub use manager::{EpochHandle, EpochManager, TooManyThreads};
#[cfg(not(loom))]
pub use ticker::{EpochKick, EpochTicker};
