//! The two traits every durable byte goes through.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::direct::{check_direct, check_direct_read, check_direct_words};
use crate::error::Result;
use crate::DirectBuffer;

/// A file system as epochdb sees it: a namespace of directories and files.
///
/// Object safe, so a durability mode holds an `Arc<dyn Storage>` and tests
/// swap in [`SimStorage`](crate::SimStorage) for
/// [`RealStorage`](crate::RealStorage).
///
/// Durability contract (the same for every implementation):
/// * file bytes are durable only after [`StorageFile::sync`] of that file;
/// * a create, rename or remove is durable only after [`Storage::sync_dir`]
///   of the directory holding the name (both directories for a rename), and
///   a new directory only after `sync_dir` of its parent;
/// * after any failed write or sync every call returns
///   [`StorageError::PreviousIo`](crate::StorageError::PreviousIo): a failed
///   sync is never retried.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `path` exclusively (fails with `AlreadyExists` if the name is
    /// taken) and opens it for reading and writing, appending from offset 0.
    fn create(&self, path: &Path) -> Result<Box<dyn StorageFile>>;

    /// Opens the existing file `path` for reading and writing; appends go to
    /// its current end.
    fn open(&self, path: &Path) -> Result<Box<dyn StorageFile>>;

    /// Opens the existing file `path` for reading only: what recovery's
    /// scans and `epochdb inspect` need, so that a file the process may not
    /// write (a copy kept read-only, another user's) can still be read.
    /// Writing through the handle fails. By default, [`Storage::open`].
    fn open_read(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        self.open(path)
    }

    /// Reads the whole file.
    fn read(&self, path: &Path) -> Result<Vec<u8>>;

    /// Renames the file `from` to `to`, replacing `to` if it exists. Durable
    /// only once the caller syncs the directories of both names.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;

    /// Removes the file `path`. Durable only once the caller syncs its
    /// directory.
    fn remove(&self, path: &Path) -> Result<()>;

    /// The names (not paths) of the entries of directory `dir`, files and
    /// directories alike, sorted.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;

    /// The length of the file `path` in bytes.
    fn len(&self, path: &Path) -> Result<u64>;

    /// Whether `path` names a file or directory.
    fn exists(&self, path: &Path) -> Result<bool>;

    /// Creates `dir` and every missing parent. Durable only once the caller
    /// syncs the parent of each directory created.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;

    /// Makes the entries of directory `dir` (creates, renames, removes)
    /// durable: fsync of the directory.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
}

/// An open file. One handle writes a given file at a time: the append cursor
/// lives in the handle.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// The path the file was opened under.
    fn path(&self) -> &Path;

    /// Writes all of `data` at `offset`, extending the file (with zeros over
    /// any gap) if needed. Not durable until [`StorageFile::sync`].
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;

    /// Writes `data` at `offset` past the page cache where the file system
    /// allows it (`O_DIRECT` on Linux); elsewhere, and on a file system that
    /// refuses it (tmpfs), and on the simulated disk, as
    /// [`StorageFile::write_at`]. `offset`, `data.len()` and `data`'s
    /// address must be multiples of [`DIRECT_ALIGN`](crate::DIRECT_ALIGN) (see
    /// [`DirectBuffer`](crate::DirectBuffer)),
    /// on every implementation, or the call fails with `InvalidInput` and
    /// writes nothing. Not durable until [`StorageFile::sync`].
    fn write_direct_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_direct(self.path(), offset, data)?;
        self.write_at(offset, data)
    }

    /// [`StorageFile::write_direct_at`] of the bytes of `words` (each
    /// word's native bytes, in order), where the real file writes them
    /// straight from `words`' memory, with no copy (a log flushing its
    /// in-memory pages). The same alignment rules apply to `offset`, the
    /// byte length and `words`' address. Words stored to during the call
    /// may reach the file torn: the caller keeps them unchanged. The
    /// default copies them with atomic loads first.
    fn write_words_direct_at(&self, offset: u64, words: &[AtomicU64]) -> Result<()> {
        check_direct_words(self.path(), offset, words)?;
        let mut bytes = DirectBuffer::zeroed(std::mem::size_of_val(words));
        for (to, word) in bytes.as_mut_slice().chunks_exact_mut(8).zip(words) {
            to.copy_from_slice(&word.load(Relaxed).to_ne_bytes());
        }
        self.write_direct_at(offset, bytes.as_slice())
    }

    /// Writes all of `data` at this handle's append cursor and advances it;
    /// returns the offset the data was written at.
    fn append(&mut self, data: &[u8]) -> Result<u64>;

    /// Reads from `offset` until `buf` is full or the file ends; returns how
    /// many bytes were read (fewer than `buf.len()` only at the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;

    /// [`StorageFile::read_at`] past the page cache where the file system
    /// allows it (`O_DIRECT` on Linux): the disk's data goes straight into
    /// `buf`, with no copy out of the cache and no cache pages to allocate
    /// (a recovery reading a large log once). Elsewhere, and on a file
    /// system that refuses it, and on the simulated disk, as
    /// [`StorageFile::read_at`]. `offset`, `buf.len()` and `buf`'s address
    /// must be multiples of [`DIRECT_ALIGN`](crate::DIRECT_ALIGN), or the
    /// call fails with `InvalidInput` and reads nothing. Returns how many
    /// bytes were read: fewer than `buf.len()` only at the end of the file
    /// (which need not be aligned).
    fn read_direct_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_direct_read(self.path(), offset, buf)?;
        self.read_at(offset, buf)
    }

    /// The file's current length in bytes.
    fn size(&self) -> Result<u64>;

    /// Sets the file's length, cutting or zero-extending it, and moves the
    /// append cursor to the new end. Not durable until [`StorageFile::sync`].
    fn truncate(&mut self, len: u64) -> Result<()>;

    /// Reserves the file's blocks up to `len` bytes and sets its length to
    /// at least `len` (`fallocate` without `KEEP_SIZE`), so that later
    /// direct writes below `len` overwrite allocated blocks instead of
    /// extending the file. ext4 serialises extending direct writes under
    /// the inode lock but runs overwrites side by side, which is what lets
    /// [`write_direct_all`](crate::write_direct_all) keep several writes
    /// in flight. The reserved bytes read as zeros; the append cursor does
    /// not move. Not durable until [`StorageFile::sync`]. Where the file
    /// system cannot preallocate, and on every implementation that does
    /// not model it (the simulated disk among them), it does nothing.
    fn preallocate(&self, len: u64) -> Result<()> {
        let _ = len;
        Ok(())
    }

    /// Makes every byte written to this file durable (fdatasync). If it
    /// fails, the storage latches: see
    /// [`StorageError::PreviousIo`](crate::StorageError::PreviousIo).
    fn sync(&self) -> Result<()>;
}
