//! The file seam: every durable byte of epochdb goes through this crate.
//!
//! * [`Storage`] and [`StorageFile`]: a small object-safe interface (create,
//!   open, write/append, read, sync, sync_dir, rename, remove, list, length,
//!   create_dir_all, truncate).
//! * [`RealStorage`]: real files through `std::fs`.
//! * [`SimStorage`]: a simulated disk that keeps what was synced apart from
//!   what was only written, and can crash, tear the last write, fail a write
//!   or sync with EIO or ENOSPC, and flip bits. Deterministic from a seed.
//! * [`StorageFile::write_direct_at`], [`DirectBuffer`], [`DirectAppender`]:
//!   writes past the page cache (`O_DIRECT` where the file system allows
//!   it), 4 KiB-aligned on every implementation.
//! * [`encode_block`] / [`decode_block`]: the block framing every on-disk
//!   format uses (magic, version, kind, length, CRC32C), whose decoder tells
//!   a torn tail from corruption.
//!
//! # Invariants
//!
//! * Only this crate calls fsync. Everything else asks a [`Storage`].
//! * A failed write or sync is never retried: the storage latches, and every
//!   later call returns [`StorageError::PreviousIo`]. Whoever holds it stops
//!   acknowledging and reports (fail-stop); recovery starts from a reopen.
//! * Bytes are durable only after [`StorageFile::sync`]; names (create,
//!   rename, remove, mkdir) only after [`Storage::sync_dir`] of the directory
//!   holding them. [`SimStorage`] enforces exactly this and no more, so a
//!   format that passes its crash tests relies on nothing else.
//!
//! ```
//! use epochdb_storage::{decode_block, encode_block, CrashMode, SimStorage, Storage};
//! use std::path::Path;
//!
//! const MAGIC: u32 = 0x4c4f_4721;
//! let disk = SimStorage::new(7);
//! let dir = Path::new("/db");
//! disk.create_dir_all(dir)?;
//! disk.sync_dir(Path::new("/"))?;
//! let path = dir.join("data.log");
//! let mut file = disk.create(&path)?;
//! disk.sync_dir(dir)?;
//! let mut block = Vec::new();
//! encode_block(&mut block, MAGIC, 1, 0, b"synced");
//! file.append(&block)?;
//! file.sync()?;
//! file.append(b"never synced")?;
//!
//! let disk = disk.crash(CrashMode::DropUnsynced);
//! let data = disk.read(&path)?;
//! let (block, next) = decode_block(&data, 0, MAGIC).unwrap().unwrap();
//! assert_eq!(block.payload, b"synced");
//! assert_eq!(next, data.len());
//! # Ok::<(), epochdb_storage::StorageError>(())
//! ```
#![forbid(unsafe_code)]

mod direct;
mod error;
mod frame;
mod latch;
mod real;
mod remove;
mod replace;
mod scan;
mod seam;
mod sim;

pub use direct::{
    read_appending, write_direct_all, DirectAppender, DirectBuffer, DirectVec, DIRECT_ALIGN,
    HUGE_BUFFER_MIN,
};
pub use error::{Op, Result, StorageError};
pub use frame::{
    blocks, decode_block, encode_block, seal_block, Block, Blocks, CorruptReason, FrameError,
    BLOCK_HEADER_BYTES, BLOCK_PAYLOAD_MAX_BYTES,
};
pub use real::RealStorage;
pub use remove::{remove_in_pieces, REMOVE_PIECE_BYTES};
pub use replace::{replace_atomically, TMP_SUFFIX};
pub use scan::{read_rest, scan_blocks, ScanBuffers, ScanEnd, SCAN_CHUNK_BYTES};
pub use seam::{Storage, StorageFile};
pub use sim::{CrashMode, FaultKind, FaultOp, SimStorage};
