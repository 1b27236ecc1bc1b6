//! `bench wal --device null`: a storage that keeps no data (only names
//! and lengths) and whose writes cost nothing, so the log's in-memory
//! pipeline — reservation, copying, SBL advancement — is what a run
//! measures, as on the paper's devices that outran its log buffer (eleda
//! §6.1). A sync takes a fixed time, sleeping (the paper's NVMe: "50 µs
//! delay for the sequential writes of 16 KiB", §6.1): with free syncs the
//! flusher of the mutex log flushed after nearly every record (1.3 M
//! flushes in 0.7 s), and the line holding SDL, which every append reads,
//! moved between the cores for each (BENCHMARKS.md, session 26).
//! Benchmarks only: every read fails.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use epochdb_storage::{Op, Result, Storage, StorageError, StorageFile};

/// A file's length, shared by its name and its open handles, so that a
/// write updates it without looking the path up (the flusher writes for
/// every I/O unit; path comparisons showed in its profile).
type Len = Arc<AtomicU64>;

/// File lengths by path; directories as `None`.
type Names = Arc<Mutex<BTreeMap<PathBuf, Option<Len>>>>;

/// Storage that keeps file names and lengths but no data; syncs sleep.
#[derive(Debug)]
pub(crate) struct NullDevice {
    names: Names,
    sync_latency: Duration,
}

#[derive(Debug)]
struct NullFile {
    path: PathBuf,
    len: Len,
    sync_latency: Duration,
}

fn not_found(path: &Path, op: Op) -> StorageError {
    StorageError::NotFound {
        path: path.to_path_buf(),
        op,
    }
}

fn no_data(path: &Path) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        op: Op::Read,
        source: io::Error::other("the null device keeps no data"),
    }
}

impl NullDevice {
    /// A device whose every sync (of a file or a directory) sleeps for
    /// `sync_latency`.
    pub(crate) fn new(sync_latency: Duration) -> Self {
        Self {
            names: Names::default(),
            sync_latency,
        }
    }

    fn file(&self, path: &Path, len: Len) -> Box<dyn StorageFile> {
        Box::new(NullFile {
            path: path.to_path_buf(),
            len,
            sync_latency: self.sync_latency,
        })
    }
}

/// Spends `latency` as a device would: asleep, not on a core.
fn wait_for_device(latency: Duration) {
    if !latency.is_zero() {
        std::thread::sleep(latency);
    }
}

impl Storage for NullDevice {
    fn create(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        let len = Len::default();
        self.names
            .lock()
            .expect("not poisoned")
            .insert(path.to_path_buf(), Some(len.clone()));
        Ok(self.file(path, len))
    }

    fn open(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        match self.names.lock().expect("not poisoned").get(path) {
            Some(Some(len)) => Ok(self.file(path, len.clone())),
            _ => Err(not_found(path, Op::Open)),
        }
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        Err(no_data(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut names = self.names.lock().expect("not poisoned");
        let entry = names
            .remove(from)
            .ok_or_else(|| not_found(from, Op::Rename))?;
        names.insert(to.to_path_buf(), entry);
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut names = self.names.lock().expect("not poisoned");
        names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path, Op::Remove))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let names = self.names.lock().expect("not poisoned");
        Ok(names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn len(&self, path: &Path) -> Result<u64> {
        match self.names.lock().expect("not poisoned").get(path) {
            Some(Some(len)) => Ok(len.load(Relaxed)),
            _ => Err(not_found(path, Op::Stat)),
        }
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.names.lock().expect("not poisoned").contains_key(path))
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let mut names = self.names.lock().expect("not poisoned");
        for ancestor in dir.ancestors() {
            names.entry(ancestor.to_path_buf()).or_insert(None);
        }
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        wait_for_device(self.sync_latency);
        Ok(())
    }
}

impl StorageFile for NullFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.len.fetch_max(offset + data.len() as u64, Relaxed);
        Ok(())
    }

    fn append(&mut self, data: &[u8]) -> Result<u64> {
        Ok(self.len.fetch_add(data.len() as u64, Relaxed))
    }

    fn read_at(&self, _offset: u64, _buf: &mut [u8]) -> Result<usize> {
        Err(no_data(&self.path))
    }

    fn size(&self) -> Result<u64> {
        Ok(self.len.load(Relaxed))
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.len.store(len, Relaxed);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        wait_for_device(self.sync_latency);
        Ok(())
    }
}
