//! The log's one error type.

use std::path::PathBuf;
use std::sync::Arc;

use epochdb_storage::StorageError;

/// Everything that can go wrong in the log. Cheap to clone (a callback of
/// every commit that was not made durable receives a copy).
#[non_exhaustive]
#[derive(Debug, Clone, thiserror::Error)]
pub enum WalError {
    /// A storage call failed. If it was a write or sync of the log or of the
    /// SDL file the log is dead (fail-stop): SDL never advances past a
    /// failed sync, and every later call returns this error again.
    #[error("log storage failed: {0}")]
    Storage(Arc<StorageError>),
    /// Data below the persisted SDL (so once acknowledged) is damaged.
    #[error("log corrupted in {} at offset {offset}: {reason}", file.display())]
    Corrupted {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damage within the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The log was shut down.
    #[error("the log is shut down")]
    Closed,
    /// An entry larger than the log buffer.
    #[error("entry of {len} bytes exceeds the maximum of {max}")]
    EntryTooLarge {
        /// The entry's size, header included.
        len: usize,
        /// The largest entry the options allow.
        max: usize,
    },
    /// The options are inconsistent.
    #[error("bad log options: {0}")]
    BadOptions(String),
    /// A pipeline thread (the ELEDA worker or the flusher) panicked, e.g.
    /// on a broken internal invariant. The log is dead (fail-stop), as
    /// after a failed sync: nothing more is acknowledged, and every waiter
    /// gets this error instead of waiting for ever.
    #[error("the log's {thread} thread failed: {message}")]
    Internal {
        /// Which pipeline thread.
        thread: &'static str,
        /// Its panic message.
        message: String,
    },
}

impl From<StorageError> for WalError {
    fn from(e: StorageError) -> Self {
        WalError::Storage(Arc::new(e))
    }
}
