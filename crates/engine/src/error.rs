//! The engine's error types. A transaction abort is not an I/O error: the
//! two are kept apart (CONVENTIONS.md, practice 3).

use thiserror::Error;

/// Why a transaction body stopped early. Returned by transaction operations
/// and propagated with `?` out of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Abort {
    /// A conflict with a concurrent transaction; the worker retries.
    #[error("conflict with a concurrent transaction")]
    Conflict,
    /// The body asked to roll back; not retried.
    #[error("rolled back by the transaction")]
    User,
}

/// A durability mode's failure. Once a mode fails it stops acknowledging
/// commits (fail-stop); the database must be reopened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DurabilityError {
    /// An I/O operation failed; the text names the file and the operation.
    #[error("durability I/O failed: {0}")]
    Io(String),
    /// The disk is full.
    #[error("disk full: {0}")]
    NoSpace(String),
    /// The mode was shut down before this commit became durable.
    #[error("durability stopped: {0}")]
    Stopped(String),
    /// Recovery found damage inside data that had been made durable; the
    /// text names the file and offset. Refused rather than guessed around.
    #[error("corrupt durable data: {0}")]
    Corrupt(String),
    /// The directory was written by an incompatible format version.
    #[error("incompatible on-disk format: {0}")]
    Incompatible(String),
    /// Another process has the database open.
    #[error("database in use: {0}")]
    InUse(String),
}

impl From<epochdb_storage::StorageError> for DurabilityError {
    fn from(error: epochdb_storage::StorageError) -> Self {
        Self::from_storage(&error)
    }
}

impl DurabilityError {
    /// The error a failed storage call becomes: a full disk is told apart.
    pub fn from_storage(error: &epochdb_storage::StorageError) -> Self {
        match error {
            epochdb_storage::StorageError::NoSpace { .. } => Self::NoSpace(error.to_string()),
            _ => Self::Io(error.to_string()),
        }
    }
}

/// Why [`crate::Worker::run`] returned without committing.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TxError {
    /// The transaction body returned [`Abort::User`].
    #[error("transaction rolled back by its body")]
    UserAbort,
    /// The transaction conflicted on every one of its allowed attempts.
    #[error("transaction aborted after {attempts} conflicting attempts")]
    TooManyConflicts {
        /// How many times it was tried.
        attempts: u32,
    },
    /// The durability mode has failed; nothing more will be acknowledged.
    #[error(transparent)]
    Durability(#[from] DurabilityError),
    /// The named table does not exist.
    #[error("no table with id {0}")]
    NoSuchTable(u32),
}

/// Errors opening or configuring a database.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The configuration is invalid; the text says which setting.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Too many workers registered at once.
    #[error(transparent)]
    TooManyWorkers(#[from] epochdb_epoch::TooManyThreads),
    /// A thread could not be started.
    #[error("could not start a thread: {0}")]
    Thread(#[from] std::io::Error),
    /// The durability mode could not open or recover its files.
    #[error(transparent)]
    Durability(#[from] DurabilityError),
}
