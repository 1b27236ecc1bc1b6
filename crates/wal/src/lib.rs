//! ELEDA's central write-ahead log with GRASSHOPPER (Jung, Han, Kang:
//! "Scalable Database Logging for Multicores", PVLDB 11(2), 2017), cited as
//! eleda §N.
//!
//! The three-stage pipeline of §3.1:
//!
//! 1. **Database threads** ([`ThreadHandle`]) reserve log space by a
//!    fetch-add on the LSN sequencer, copy their entry into the central
//!    ring buffer concurrently, and enqueue a pending LSN node on their own
//!    grasshopper list. A writer whose ring space still holds unflushed
//!    bytes waits (backpressure).
//! 2. **The ELEDA worker** tracks LSN holes and advances SBL (sequentially
//!    buffered LSN) by SBL-hopping over full ranges of the hopping index and
//!    SBL-crawling over the LSN-heap of per-thread first pending nodes
//!    (Algorithm 1).
//! 3. **The ELEDA flusher** writes `[SDL, SBL)` in I/O units, syncs,
//!    persists SDL (storage durable LSN) and publishes it; each database
//!    thread then runs the callbacks of its entries up to SDL and frees
//!    their nodes (§4.4).
//!
//! Baselines behind the same API ([`LogKind`]): one global mutex
//! ("vanilla"), and the bitmap scan of §6.5.1.
//!
//! Recovery ([`Wal::open`], [`read_log`]) returns every entry up to the
//! durable end ([`Wal::open_streaming`] hands them to a visitor as it reads
//! instead), cuts a torn tail and reports corruption below the
//! persisted SDL with file and offset. Files rotate at
//! [`WalOptions::file_max_bytes`] and go with [`Wal::truncate_before`].
//! The formats are drawn in `format.rs`, and [`inspect`] decodes the files
//! block by block for tools; the crate's README lists what is
//! simplified relative to the paper.
#![deny(unsafe_op_in_unsafe_fn)]

mod baseline;
mod bench;
mod core;
mod error;
mod flusher;
mod format;
mod grasshopper;
pub mod inspect;
mod lsn;
mod options;
mod recovery;
mod ring;
mod segments;
mod sync;
mod wal;

pub use bench::{run_microbench, MicrobenchConfig, MicrobenchStats};
pub use error::WalError;
pub use format::EntryRecords;
pub use format::{entry_bytes, ENTRY_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES};
pub use grasshopper::list::Callback;
pub use lsn::{Lsn, LsnRange};
pub use options::{LogKind, WalOptions};
pub use recovery::{read_log, DiscardedTail, EntryRef, RecoveredEntry, RecoveredLog};
pub use wal::{DurableWatch, ThreadHandle, Wal, WalStats};
