//! The one error type of this crate.

use std::io;

/// What can go wrong while checkpointing, logging or recovering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// An earlier write or sync failed; nothing is acknowledged after that
    /// (fail-stop, never retry an fsync): drop this instance and recover.
    #[error("a previous I/O error stopped checkpointing or logging; recover to continue")]
    PreviousIo,
    /// A file ends before a unit it holds (expected after a crash).
    #[error("{file} is torn at byte {offset}")]
    Torn {
        /// File name.
        file: String,
        /// Where the data ends.
        offset: u64,
    },
    /// A field does not hold what the format requires.
    #[error("{file} is corrupted at byte {offset}: bad {what}")]
    Corrupted {
        /// File name.
        file: String,
        /// Offset of the bad field.
        offset: u64,
        /// Which field.
        what: &'static str,
    },
    /// A CRC32C does not match.
    #[error(
        "{file}: CRC32C mismatch at byte {offset}: got {got:#010x}, expected {expected:#010x}"
    )]
    ChecksumMismatch {
        /// File name.
        file: String,
        /// Offset of the stored checksum.
        offset: u64,
        /// Checksum of the bytes read.
        got: u32,
        /// Checksum stored in the file.
        expected: u32,
    },
    /// A file of a format version this build does not read.
    #[error("{file}: unsupported format version {version}")]
    UnsupportedVersion {
        /// File name.
        file: String,
        /// The version found.
        version: u32,
    },
    /// Recovery found no complete checkpoint.
    #[error("no complete checkpoint found")]
    NoCheckpoint,
    /// The configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}
