//! Checkpoint recovery for frequently-consistent applications — Cao et
//! al., "Fast Checkpoint Recovery Algorithms for Frequently Consistent
//! Applications", SIGMOD 2011 (`shared/papers/fc-checkpoint-sigmod11.md`).
//!
//! An FC application (a game server ticking ten times a second, a
//! single-threaded OLTP engine) reaches a point of consistency often. This
//! crate makes its in-memory state durable with the paper's framework
//! (§2.2): periodic consistent checkpoints of the whole state, written by a
//! background writer thread into two alternating files, plus a logical log
//! of the application's actions, group-committed at every point of
//! consistency. Recovery loads the newest complete checkpoint and replays
//! the actions logged after it.
//!
//! The checkpointing algorithm is chosen per [`Config`]: Naive-Snapshot,
//! Copy-on-Update (bit-array packed), Wait-Free Zigzag (naive and
//! bit-array packed) and Wait-Free Ping-Pong (naive and interleaved, each
//! with the Copy or the Merge writer). See [`Algorithm`].
//!
//! ```
//! use epochdb_fcc::{recover, Algorithm, Config, Fcc, SimStorage, Storage};
//! use std::sync::Arc;
//!
//! let disk = SimStorage::new();
//! let storage: Arc<dyn Storage> = Arc::new(disk.clone());
//! let config = Config::new(Algorithm::ZigzagPacked);
//! let mut app = Fcc::create(storage, vec![0; 1000], config).unwrap();
//! // One action: "add 5 to word 7", logged logically, applied physically.
//! app.log_action(&[7, 5]);
//! let v = app.handle_read(7);
//! app.handle_write(7, v + 5);
//! app.point_of_consistency().unwrap();
//! drop(app);
//!
//! let replay = |state: &mut [u64], rec: &[u8]| state[rec[0] as usize] += u64::from(rec[1]);
//! let recovered = recover(&disk, replay).unwrap();
//! assert_eq!(recovered.words[7], 5);
//! assert_eq!(recovered.tick, 1);
//! ```
//!
//! # Invariants
//!
//! * Within a checkpoint period the wait-free algorithms (Zigzag,
//!   Ping-Pong) share no lock between mutator and writer; the only contact is
//!   two atomic counters read and written at points of consistency
//!   (`engine.rs`). Copy-on-Update locks a block on its first update in a
//!   period, as the paper describes it.
//! * A checkpoint started at tick `t` is requested only after tick `t`'s log
//!   block is durable, so nothing on disk is ahead of the released state —
//!   except with [`Config::overlap_log_sync`], where disk may be one tick
//!   ahead (the in-flight tick, through its log block or a checkpoint of
//!   it), never more: a block is submitted only after its predecessor is
//!   durable.
//! * [`Released::tick`] is always durable; an error from
//!   `point_of_consistency` is final (fail-stop) and means no further tick
//!   was released.
//! * Checkpoint `k` is written into slot `k % 2`; slot `(k - 1) % 2` is not
//!   touched until `k` is synced. Log segments are removed only when no
//!   checkpoint still on disk needs them.
//!
//! # Departures from the paper
//!
//! * `PointOfConsistency` starts a checkpoint when the writer is done *and*
//!   [`Config::checkpoint_period_ticks`] points of consistency have passed
//!   (the paper fixes the checkpoint interval externally, §5.1).
//! * The initial state is checkpoint 1, written by the writer's first pass
//!   from each algorithm's initial configuration (Figures 1(a), 2(a));
//!   [`Fcc::create`] waits for it so recovery always has a checkpoint.
//! * The logical logger is a thread. By default the mutator waits for each
//!   tick's sync inside `point_of_consistency`; [`Config::overlap_log_sync`]
//!   lets the next tick run during the sync, as §5.5's TPC-C setup did
//!   (measured: no gain on this machine's disk).
//! * The I/O seam ([`Storage`]) is fcc's own small, name-based trait;
//!   [`SharedStorage`] runs it on the project's shared storage crate (real
//!   files or its simulated disk), and the crash tests run on both
//!   simulated disks. [`FsStorage`] and fcc's [`SimStorage`] remain.
//! * Words are 8 bytes (the paper's Zipf objects are 2,000 four-byte words;
//!   ours are 1,024 eight-byte words, the same 8 KB).
//! * Every algorithm's big arrays live in their own anonymous mappings
//!   (`epochdb-memory`'s regions; this crate has no `unsafe` code of its
//!   own), faulted in when built;
//!   [`Config::huge_pages`] asks for transparent huge pages with
//!   `madvise` (§5.6) or forbids them.
//!
//! # How recovery is tested
//!
//! For every algorithm, seeded random applications are crashed and
//! recovered against a model: on fcc's simulated disk (`crash_recovery.rs`,
//! `crash_mid_checkpoint.rs`, `checkpoint_fallback.rs`), on the shared
//! storage crate's simulated disk with EIO and ENOSPC faults
//! (`shared_storage_crash.rs`), with the overlapped log sync
//! (`overlap_log_sync.rs`), on real files (`fs_round_trip.rs`), and by
//! killing a real child process with SIGKILL, often while it writes a
//! checkpoint (`process_kill.rs`; `kill_during_checkpoints_long` is the
//! long, ignored version).
//!
//! # The benchmarks (§5)
//!
//! [`run_bench`] replays a trace of the Zipf or the MMO workload
//! ([`Workload`]) through each algorithm's mutator and through a raw mutator
//! without checkpoints. As in §5.1 the logger and, by default, the writer
//! are off ([`BenchWriter`]): the mutator calls `PrepareForNextCheckpoint`
//! itself every period. With the writer on it runs between intervals, off
//! the clock (the clock of the interval that starts a checkpoint stops
//! after `PrepareForNextCheckpoint`, before the writer is woken). Every run
//! first applies ten intervals of the trace untimed (a warm-up). The MMO model's
//! transition probabilities are ours (the paper gives only its rate,
//! 531,530 updates per second, and that about 80% of the attributes change
//! only on player actions). [`run_mmo_recovery`] measures §5.4's recovery
//! time on real files with logical logging on.
#![forbid(unsafe_code)]

mod algo;
mod algorithm;
mod bench;
mod bench_recovery;
mod clock;
mod engine;
mod error;
mod fcc;
mod format;
pub mod inspect;
mod io;
mod logger;
mod memory;
mod mmo;
mod recovery;
mod scheme;
mod shared;

pub use algorithm::{Algorithm, Config, PingPongWriter};
pub use bench::{run_bench, BenchConfig, BenchReport, BenchRun, BenchWriter, Workload};
pub use bench_recovery::{run_mmo_recovery, RecoveryConfig, RecoveryReport};
pub use error::Error;
pub use fcc::{Fcc, Released, STATE_WORDS_MAX};
pub use io::{FsStorage, NullStorage, SimStorage, Storage, StorageFile};
pub use memory::{anon_huge_page_bytes, evict_page_cache, HugePages};
pub use recovery::{recover, Recovered};
pub use shared::SharedStorage;
