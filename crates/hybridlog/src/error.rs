//! The crate's one error type.

use std::path::PathBuf;

use epochdb_storage::StorageError;

/// Everything that can go wrong opening, checkpointing or recovering a store.
/// Operation outcomes that are not failures (not found, pending) are
/// [`Status`](crate::Status) values, not errors.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file seam reported an error.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A file that was written whole (its checksum matched when written) is
    /// damaged: refuse rather than guess.
    #[error("{}: corrupt at offset {offset}: {reason}", file.display())]
    Corrupted {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A write or sync of the log or a checkpoint failed earlier; nothing more
    /// is made durable (fail-stop). Reopen to recover.
    #[error("the store stopped making data durable: {0}")]
    Failed(String),
    /// Every session slot is taken.
    #[error("too many sessions: at most {0}")]
    TooManySessions(usize),
    /// `continue_session` named a session the store does not know.
    #[error("unknown session {0}")]
    UnknownSession(u64),
    /// A record would not fit on one page.
    #[error("record of {0} bytes does not fit a page; open the store with larger pages")]
    RecordTooLarge(usize),
    /// Keys must not be empty.
    #[error("empty key")]
    EmptyKey,
    /// A key or value whose length the store's fixed record layout does
    /// not hold ([`crate::RecordLayout::Fixed`]).
    #[error("{what} of {got} bytes in a store whose records hold {expected}-byte {what}s")]
    WrongLength {
        /// `"key"` or `"value"`.
        what: &'static str,
        /// The layout's length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The configuration cannot work; says why.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A checkpoint is already running.
    #[error("a checkpoint is already in progress")]
    CheckpointInProgress,
}

/// Result of the store's fallible calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
