//! [`RealStorage`]: the seam over `std::fs`. Unix only (positional I/O).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use crate::direct::{check_direct, check_direct_read, check_direct_words, DIRECT_ALIGN};
use crate::error::{Op, Result, StorageError};
use crate::latch::Latch;
use crate::seam::{Storage, StorageFile};

/// Real files through `std::fs`. Paths are used as given.
///
/// The only place in epochdb that calls fsync: [`StorageFile::sync`] is
/// `File::sync_data` (fdatasync) and [`Storage::sync_dir`] opens the
/// directory and fsyncs it. A failed write or sync latches this storage and
/// every file opened from it: all later calls return
/// [`StorageError::PreviousIo`].
#[derive(Debug, Default, Clone)]
pub struct RealStorage {
    latch: Arc<Latch>,
}

impl RealStorage {
    /// A fresh storage with its own failure latch.
    pub fn new() -> Self {
        Self::default()
    }

    fn open_with(
        &self,
        op: Op,
        path: &Path,
        options: &OpenOptions,
        writable: bool,
    ) -> Result<Box<dyn StorageFile>> {
        self.latch.check()?;
        let opened = options
            .open(path)
            .and_then(|file| Ok((file.metadata()?.len(), file)))
            .map_err(|e| StorageError::from_io(op, path, e));
        let (end, file) = opened?;
        Ok(Box::new(RealFile {
            file,
            writable,
            path: path.to_path_buf(),
            end,
            latch: Arc::clone(&self.latch),
            direct: OnceLock::new(),
        }))
    }

    /// Runs a call whose failure leaves durable state unknown (sync_dir):
    /// checks the latch first, latches on failure.
    fn durability<T>(&self, op: Op, path: &Path, f: impl FnOnce() -> io::Result<T>) -> Result<T> {
        self.latch.check()?;
        self.latch
            .record(f().map_err(|e| StorageError::from_io(op, path, e)))
    }

    /// Runs a namespace or reading call: checks the latch first; its failure
    /// is reported, and does not latch.
    fn call<T>(&self, op: Op, path: &Path, f: impl FnOnce() -> io::Result<T>) -> Result<T> {
        self.latch.check()?;
        f().map_err(|e| StorageError::from_io(op, path, e))
    }
}

impl Storage for RealStorage {
    fn create(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(true);
        self.open_with(Op::Create, path, &options, true)
    }

    fn open(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        self.open_with(Op::Open, path, &options, true)
    }

    fn open_read(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options.read(true);
        self.open_with(Op::Open, path, &options, false)
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        self.call(Op::Read, path, || fs::read(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.call(Op::Rename, from, || fs::rename(from, to))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.call(Op::Remove, path, || fs::remove_file(path))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.call(Op::List, dir, || {
            let mut names = Vec::new();
            for entry in fs::read_dir(dir)? {
                // epochdb names every file in ASCII: a name that is not
                // UTF-8 is not ours, so it is skipped rather than mangled.
                if let Ok(name) = entry?.file_name().into_string() {
                    names.push(name);
                }
            }
            names.sort();
            Ok(names)
        })
    }

    fn len(&self, path: &Path) -> Result<u64> {
        self.call(Op::Stat, path, || Ok(fs::metadata(path)?.len()))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.call(Op::Stat, path, || path.try_exists())
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.call(Op::CreateDir, dir, || fs::create_dir_all(dir))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        // `Path::new("name").parent()` is the empty path: the working
        // directory, which `open` would not find by that name.
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        self.durability(Op::SyncDir, dir, || File::open(dir)?.sync_all())
    }
}

/// A file opened by [`RealStorage`].
#[derive(Debug)]
struct RealFile {
    file: File,
    /// Opened for writing (not by [`Storage::open_read`]); the `O_DIRECT`
    /// handle is opened the same way.
    writable: bool,
    path: PathBuf,
    /// The append cursor: the end of the file as this (single) writer knows it.
    end: u64,
    latch: Arc<Latch>,
    /// A second handle opened with `O_DIRECT` on the first direct write or read;
    /// `None` where the file system refuses the flag.
    direct: OnceLock<Option<File>>,
}

impl RealFile {
    /// The `O_DIRECT` handle, opened on first use by path and checked to be
    /// the same file (device and inode) as this handle's.
    fn direct(&self) -> Result<Option<&File>> {
        if let Some(direct) = self.direct.get() {
            return Ok(direct.as_ref());
        }
        self.latch.check()?;
        let opened = OpenOptions::new()
            .read(true)
            .write(self.writable)
            .custom_flags(libc::O_DIRECT)
            .open(&self.path);
        let direct = match opened {
            Ok(file) => {
                let same = |f: &File| f.metadata().map(|m| (m.dev(), m.ino()));
                let ours =
                    same(&self.file).map_err(|e| StorageError::from_io(Op::Stat, &self.path, e))?;
                let theirs =
                    same(&file).map_err(|e| StorageError::from_io(Op::Stat, &self.path, e))?;
                if ours != theirs {
                    return Err(StorageError::from_io(
                        Op::Open,
                        &self.path,
                        io::Error::other(
                            "the file was replaced under its name since it was opened",
                        ),
                    ));
                }
                Some(file)
            }
            // tmpfs and some others refuse O_DIRECT: write through the cache.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => return Err(StorageError::from_io(Op::Open, &self.path, e)),
        };
        Ok(self.direct.get_or_init(|| direct).as_ref())
    }

    fn mutate<T>(&self, op: Op, f: impl FnOnce(&File) -> io::Result<T>) -> Result<T> {
        self.latch.check()?;
        self.latch
            .record(f(&self.file).map_err(|e| StorageError::from_io(op, &self.path, e)))
    }
}

impl StorageFile for RealFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.mutate(Op::Write, |file| file.write_all_at(data, offset))
    }

    fn write_direct_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_direct(&self.path, offset, data)?;
        match self.direct()? {
            Some(direct) => self.mutate(Op::Write, |_| direct.write_all_at(data, offset)),
            None => self.write_at(offset, data),
        }
    }

    fn write_words_direct_at(&self, offset: u64, words: &[AtomicU64]) -> Result<()> {
        check_direct_words(&self.path, offset, words)?;
        let file = match self.direct()? {
            Some(direct) => direct,
            None => &self.file,
        };
        self.mutate(Op::Write, |_| {
            epochdb_memory::write_words_at(file, words, offset)
        })
    }

    fn append(&mut self, data: &[u8]) -> Result<u64> {
        let offset = self.end;
        self.write_at(offset, data)?;
        self.end = offset + data.len() as u64;
        Ok(offset)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.latch.check()?;
        let mut filled = 0;
        while filled < buf.len() {
            match self
                .file
                .read_at(&mut buf[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::from_io(Op::Read, &self.path, e)),
            }
        }
        Ok(filled)
    }

    fn read_direct_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_direct_read(&self.path, offset, buf)?;
        let Some(direct) = self.direct()? else {
            return self.read_at(offset, buf);
        };
        self.latch.check()?;
        let mut filled = 0;
        while filled < buf.len() {
            match direct.read_at(&mut buf[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::from_io(Op::Read, &self.path, e)),
            }
            if !filled.is_multiple_of(DIRECT_ALIGN) {
                // A direct read stops short of a block only at the end of
                // the file; should one ever not, the rest (unaligned now)
                // comes through the cache.
                filled += self.read_at(offset + filled as u64, &mut buf[filled..])?;
                break;
            }
        }
        Ok(filled)
    }

    fn size(&self) -> Result<u64> {
        self.latch.check()?;
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| StorageError::from_io(Op::Stat, &self.path, e))
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.mutate(Op::Truncate, |file| file.set_len(len))?;
        self.end = len;
        Ok(())
    }

    fn preallocate(&self, len: u64) -> Result<()> {
        if self.size()? >= len {
            return Ok(());
        }
        // A failure (no support here, or no room: the writes will report
        // that) is not latched: preallocation only makes writes faster, and
        // whatever it left beyond the data reads as zeros, as a torn tail.
        let _ = epochdb_memory::preallocate(&self.file, len);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.mutate(Op::Sync, File::sync_data)
    }
}
