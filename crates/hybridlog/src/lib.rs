//! A FASTER-style latch-free hash key-value store on a HybridLog, made
//! durable with CPR checkpoints and sessions (cpr-sigmod19 §5–6,
//! Appendices A–D; FASTER, SIGMOD 2018).
//!
//! * The hash index: 64-byte buckets of seven tagged entries and an
//!   overflow word, changed only by CAS, new tags inserted with FASTER's
//!   two-phase tentative protocol.
//! * The HybridLog: a 48-bit logical address space, a circular buffer of
//!   in-memory page frames, begin/head/read-only/tail with their safe
//!   twins moved by epoch actions, asynchronous flushing and eviction, a
//!   memory budget in bytes. Records are a header, key and value; a store
//!   of any key and value lengths adds a length word, one of fixed lengths
//!   ([`RecordLayout::Fixed`], FASTER's fixed-size records) does not.
//! * Sessions with serial numbers: Read, Upsert, RMW (user [`Functions`]),
//!   Delete; in-place, read-copy-update, pending, and asynchronous disk reads
//!   completed by [`Session::complete_pending`].
//! * CPR: the state machine REST → PREPARE → IN_PROGRESS → WAIT_PENDING →
//!   WAIT_FLUSH → REST with per-record versions, fold-over checkpoints,
//!   fuzzy index checkpoints, recovery and `continue_session`.
//!
//! ```
//! use epochdb_hybridlog::{AddU64, Config, SimStorage, Status, Store};
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! let disk = SimStorage::new(1);
//! let config = Config { index_buckets: 64, page_bits: 12, memory_bytes: 16 << 12, ..Config::default() };
//! let store = Store::open(Arc::new(disk.clone()), Path::new("/db"), config.clone(), AddU64)?;
//! let mut session = store.start_session()?;
//! session.rmw(b"counter", 5)?;
//! session.rmw(b"counter", 2)?;
//! let mut value = Vec::new();
//! assert_eq!(session.read(b"counter", &mut value)?, Status::Ok);
//! assert_eq!(value, 7u64.to_le_bytes());
//! let id = session.id();
//! drop(session);
//! store.checkpoint(true)?;
//! drop(store);
//!
//! let store = Store::open(Arc::new(disk.crash(epochdb_hybridlog::CrashMode::DropUnsynced)), Path::new("/db"), config, AddU64)?;
//! let (mut session, serial) = store.continue_session(id)?;
//! assert_eq!(serial, 3);
//! session.read(b"counter", &mut value)?;
//! assert_eq!(value, 7u64.to_le_bytes());
//! # Ok::<(), epochdb_hybridlog::Error>(())
//! ```
#![forbid(unsafe_code)]

mod address;
mod checkpoint;
mod chunk_writer;
mod error;
mod functions;
mod index;
mod index_load;
pub mod inspect;
mod io;
mod log;
mod record;
mod recovery;
mod replay;
mod segment;
mod session;
mod state;
mod store;
mod sums;
mod sync;
#[cfg(test)]
mod tests;
mod windows;

pub use checkpoint::CheckpointKind;
pub use epochdb_storage::{CrashMode, RealStorage, SimStorage, Storage};
pub use error::{Error, Result};
pub use functions::{AddU64, AddU64Declining, Functions, Value};
pub use record::RecordLayout;
pub use session::{Completed, OpKind, Session, Status};
pub use state::{Phase, SystemState};
pub use store::{
    CheckpointInfo, Config, DiskReads, LogAddresses, LogVerified, RecoveredInfo, SessionStates,
    SessionView, ShiftMode, Store, IO_THREADS_AUTO_MAX,
};
