//! [`Storage`] over the project's shared storage crate (`epochdb-storage`,
//! DESIGN.md "storage — the file seam"): fcc's flat, name-based seam mapped
//! onto one directory of any `epochdb_storage::Storage` — its real files,
//! or its simulated disk, which also loses directory entries that were not
//! synced, fails chosen writes and syncs with EIO or ENOSPC and latches
//! afterwards, and flips bits.

use crate::io::{Storage, StorageFile};
use epochdb_storage as shared;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// fcc's [`Storage`] on a directory of an `epochdb_storage::Storage`.
#[derive(Debug, Clone)]
pub struct SharedStorage {
    inner: Arc<dyn shared::Storage>,
    dir: PathBuf,
}

impl SharedStorage {
    /// Uses directory `dir` of `inner`, creating it (and making it durable)
    /// if needed.
    pub fn new(inner: Arc<dyn shared::Storage>, dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        if !inner.exists(&dir).map_err(to_io)? {
            inner.create_dir_all(&dir).map_err(to_io)?;
            let parent = dir.parent().map(PathBuf::from).unwrap_or_default();
            inner.sync_dir(&parent).map_err(to_io)?;
        }
        Ok(Self { inner, dir })
    }
}

/// Keeps "not found" recognisable (recovery skips missing slots); every
/// other error is opaque to fcc, which stops at the first one (fail-stop).
fn to_io(e: shared::StorageError) -> io::Error {
    match e {
        shared::StorageError::NotFound { .. } => io::Error::new(io::ErrorKind::NotFound, e),
        other => io::Error::other(other),
    }
}

struct SharedFile(Box<dyn shared::StorageFile>);

impl StorageFile for SharedFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.append(data).map(|_| ()).map_err(to_io)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync().map_err(to_io)
    }
}

impl Storage for SharedStorage {
    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = self.inner.create(&self.dir.join(name)).map_err(to_io)?;
        Ok(Box::new(SharedFile(file)))
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.inner.read(&self.dir.join(name)).map_err(to_io)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let file = self.inner.open(&self.dir.join(name)).map_err(to_io)?;
        file.read_at(offset, buf).map_err(to_io)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        match self.inner.remove(&self.dir.join(name)) {
            Err(shared::StorageError::NotFound { .. }) => Ok(()),
            other => other.map_err(to_io),
        }
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list(&self.dir).map_err(to_io)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir(&self.dir).map_err(to_io)
    }
}
