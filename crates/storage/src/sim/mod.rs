//! [`SimStorage`]: an in-memory disk that can lose power.

mod disk;
mod fault;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::error::{Op, Result, StorageError};
use crate::seam::{Storage, StorageFile};
use disk::{Disk, InodeId};
pub use fault::{FaultKind, FaultOp};

/// What survives a [`SimStorage::crash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Exactly what was synced: every file reverts to its durable image and
    /// every directory to its last `sync_dir`. Deterministic.
    DropUnsynced,
    /// What was synced, plus, per file, a random prefix of its unsynced
    /// writes, the last one possibly torn at a random byte; and a random
    /// prefix, in call order, of the unsynced directory changes, each whole
    /// (a rename is atomic, as journaling file systems make it). Any outcome
    /// is one a real disk may produce; the draw is a function of the seed.
    TearUnsynced,
}

/// A simulated disk for tests. Keeps, per file, the *live* bytes (what a
/// reader sees) apart from the *durable* bytes (what survives power loss),
/// and the directory entries likewise: a create, rename or remove is durable
/// only after `sync_dir` of its directory, a new directory only after
/// `sync_dir` of its parent. Paths are taken literally; `/` and the empty
/// path are roots that always exist.
///
/// A `SimStorage` is a view of the disk held by one "process". Clones share
/// the view. [`crash`](SimStorage::crash) cuts power: the disk keeps only
/// what survives, every view and file opened before it is dead (each call
/// fails with an I/O error, so a still-running engine cannot write into the
/// next life), and the returned view is the restarted process's.
///
/// Faults: [`fail_nth`](SimStorage::fail_nth) makes a chosen write or sync
/// call fail with EIO or ENOSPC; like a real disk after a failed call, the
/// view then latches and answers every call with
/// [`StorageError::PreviousIo`] until a crash (a restart) clears it.
/// [`flip_bit`](SimStorage::flip_bit) damages durable bytes.
///
/// Everything random comes from one RNG seeded at [`new`](SimStorage::new),
/// so a failing test replays from its seed (given the same calls in the same
/// order). Bytes of removed files are reclaimed only at a crash.
#[derive(Clone)]
pub struct SimStorage {
    disk: Arc<Mutex<Disk>>,
    generation: u64,
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimStorage")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

const STALE: &str = "simulated power loss: this handle belongs to a process from before the crash";

/// Locks the disk for a call of `op` on `path` by a handle of `generation`,
/// refusing stale handles and, after a failed write or sync, everything.
fn enter<'a>(
    disk: &'a Mutex<Disk>,
    generation: u64,
    op: Op,
    path: &Path,
) -> Result<MutexGuard<'a, Disk>> {
    let guard = disk.lock();
    if guard.generation != generation {
        return Err(StorageError::Io {
            path: path.to_path_buf(),
            op,
            source: io::Error::other(STALE),
        });
    }
    if guard.latched {
        return Err(StorageError::PreviousIo);
    }
    Ok(guard)
}

impl SimStorage {
    /// An empty disk whose random choices all derive from `seed`.
    pub fn new(seed: u64) -> Self {
        SimStorage {
            disk: Arc::new(Mutex::new(Disk::new(seed))),
            generation: 0,
        }
    }

    /// Cuts power and restarts: returns the view of the process that comes
    /// up next. Every view and file handle from before is dead afterwards.
    /// Planned faults and call counts carry over; the failure latch does not.
    pub fn crash(&self, mode: CrashMode) -> SimStorage {
        let mut disk = self.disk.lock();
        disk.crash(mode);
        SimStorage {
            disk: Arc::clone(&self.disk),
            generation: disk.generation,
        }
    }

    /// Makes the `nth` call of `op` from now (1 = the next one) fail with
    /// `kind`. A failed write may leave a random prefix of its bytes in the
    /// file; a failed sync may have made a random prefix of the unsynced
    /// writes durable.
    ///
    /// # Panics
    ///
    /// If `nth` is zero.
    pub fn fail_nth(&self, op: FaultOp, nth: u64, kind: FaultKind) {
        self.disk.lock().faults.plan(op, nth, kind);
    }

    /// Cancels every planned fault that has not fired.
    pub fn clear_faults(&self) {
        self.disk.lock().faults.clear();
    }

    /// How many calls of `op` the disk has seen, over all its lives: lets a
    /// test run a workload once and then fail each call in turn.
    pub fn calls(&self, op: FaultOp) -> u64 {
        self.disk.lock().faults.calls(op)
    }

    /// Flips bit `bit` (counted from the first byte's least significant bit)
    /// of the durable image of the file durably named `path`. Readers see it
    /// at once unless the file has unsynced writes, and after any crash.
    pub fn flip_bit(&self, path: &Path, bit: u64) -> Result<()> {
        self.disk.lock().flip_bit(path, Some(bit)).map(drop)
    }

    /// Flips a bit chosen by the disk's RNG in the durable image of `path`,
    /// as [`flip_bit`](SimStorage::flip_bit); returns which bit.
    pub fn flip_random_bit(&self, path: &Path) -> Result<u64> {
        self.disk.lock().flip_bit(path, None)
    }

    fn enter(&self, op: Op, path: &Path) -> Result<MutexGuard<'_, Disk>> {
        enter(&self.disk, self.generation, op, path)
    }

    fn file(&self, id: InodeId, path: &Path, cursor: u64) -> Box<dyn StorageFile> {
        Box::new(SimFile {
            disk: Arc::clone(&self.disk),
            generation: self.generation,
            id,
            path: path.to_path_buf(),
            cursor,
        })
    }
}

impl Storage for SimStorage {
    fn create(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        let id = self.enter(Op::Create, path)?.create(path)?;
        Ok(self.file(id, path, 0))
    }

    fn open(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        let disk = self.enter(Op::Open, path)?;
        let id = disk.lookup(Op::Open, path)?;
        let end = disk.live_bytes(id).len() as u64;
        Ok(self.file(id, path, end))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let disk = self.enter(Op::Read, path)?;
        let id = disk.lookup(Op::Read, path)?;
        Ok(disk.live_bytes(id).to_vec())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.enter(Op::Rename, from)?.rename(from, to)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.enter(Op::Remove, path)?.remove(path)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.enter(Op::List, dir)?.list(dir)
    }

    fn len(&self, path: &Path) -> Result<u64> {
        let disk = self.enter(Op::Stat, path)?;
        let id = disk.lookup(Op::Stat, path)?;
        Ok(disk.live_bytes(id).len() as u64)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.enter(Op::Stat, path)?.exists(path))
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.enter(Op::CreateDir, dir)?.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.enter(Op::SyncDir, dir)?.sync_dir(dir)
    }
}

/// A file opened on a [`SimStorage`].
struct SimFile {
    disk: Arc<Mutex<Disk>>,
    generation: u64,
    id: InodeId,
    path: PathBuf,
    cursor: u64,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("generation", &self.generation)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl SimFile {
    fn enter(&self, op: Op) -> Result<MutexGuard<'_, Disk>> {
        enter(&self.disk, self.generation, op, &self.path)
    }
}

impl StorageFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.enter(Op::Write)?
            .write(self.id, &self.path, offset, data)
    }

    fn append(&mut self, data: &[u8]) -> Result<u64> {
        let offset = self.cursor;
        self.write_at(offset, data)?;
        self.cursor = offset + data.len() as u64;
        Ok(offset)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let disk = self.enter(Op::Read)?;
        let bytes = disk.live_bytes(self.id);
        let start = usize::try_from(offset).map_or(bytes.len(), |o| o.min(bytes.len()));
        let n = buf.len().min(bytes.len() - start);
        buf[..n].copy_from_slice(&bytes[start..start + n]);
        Ok(n)
    }

    fn size(&self) -> Result<u64> {
        Ok(self.enter(Op::Stat)?.live_bytes(self.id).len() as u64)
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.enter(Op::Truncate)?
            .truncate(self.id, &self.path, len)?;
        self.cursor = len;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.enter(Op::Sync)?.sync(self.id, &self.path)
    }
}
