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
#![forbid(unsafe_code)]

mod algo;
mod algorithm;
mod bench;
mod engine;
mod error;
mod fcc;
mod format;
mod io;
mod logger;
mod recovery;
mod scheme;

pub use algorithm::{Algorithm, Config, PingPongWriter};
pub use bench::{run_bench, BenchConfig, BenchReport, BenchRun};
pub use error::Error;
pub use fcc::{Fcc, Released, STATE_WORDS_MAX};
pub use io::{FsStorage, NullStorage, SimStorage, Storage, StorageFile};
pub use recovery::{recover, Recovered};
