//! The log on disk as a sequence of segment files, so that space below the
//! log's begin address can be given back by removing whole files (log
//! truncation; FASTER's `ShiftBeginAddress` and its segmented device).
//!
//! Segment `n` holds log addresses `[n << bits, (n + 1) << bits)` at file
//! offset `address - (n << bits)`, in `log-<n:08x>.seg`. With `bits == 0`
//! the log is the one file `log.dat` (the layout before segments), which is
//! never truncated. A page never straddles two segments (`bits ≥
//! page_bits`).
//!
//! The segments are one [`StorageFile`] to the rest of the crate: a write or
//! read that crosses a boundary is split, a read of a removed or missing
//! segment ends there (a short read), and [`StorageFile::sync`] syncs every
//! segment written since the last sync and then, if segments were created,
//! the directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use epochdb_storage::{Storage, StorageError, StorageFile};
use parking_lot::Mutex;

/// The log file's name when the log is not segmented.
pub(crate) const LOG_NAME: &str = "log.dat";

type SegResult<T> = std::result::Result<T, StorageError>;

/// The name of segment `n`.
pub(crate) fn segment_name(n: u64) -> String {
    format!("log-{n:08x}.seg")
}

pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    u64::from_str_radix(name.strip_prefix("log-")?.strip_suffix(".seg")?, 16).ok()
}

#[derive(Default)]
struct Segments {
    open: BTreeMap<u64, Arc<dyn StorageFile>>,
    /// Written since the last sync.
    unsynced: BTreeSet<u64>,
    /// Directory entries changed since the last sync.
    dir_changed: bool,
}

/// The log's segment files, seen as one file addressed by log address.
pub(crate) struct SegmentedFile {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// log2 of the segment size; 0: one file, `log.dat`.
    bits: u32,
    /// What `path()` reports (the first segment's or `log.dat`'s name).
    path: PathBuf,
    segments: Mutex<Segments>,
}

impl std::fmt::Debug for SegmentedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentedFile")
            .field("dir", &self.dir)
            .field("bits", &self.bits)
            .finish_non_exhaustive()
    }
}

impl SegmentedFile {
    /// Opens the log in `dir` with segments of `1 << bits` bytes (or
    /// `log.dat` for `bits == 0`), creating nothing yet.
    pub(crate) fn open(storage: Arc<dyn Storage>, dir: &Path, bits: u32) -> SegResult<Self> {
        let path = dir.join(if bits == 0 {
            LOG_NAME.to_string()
        } else {
            segment_name(0)
        });
        let file = SegmentedFile {
            storage,
            dir: dir.to_path_buf(),
            bits,
            path,
            segments: Mutex::new(Segments::default()),
        };
        Ok(file)
    }

    fn name(&self, n: u64) -> PathBuf {
        if self.bits == 0 {
            self.dir.join(LOG_NAME)
        } else {
            self.dir.join(segment_name(n))
        }
    }

    /// The first address of segment `n`.
    fn first(&self, n: u64) -> u64 {
        if self.bits == 0 {
            0
        } else {
            n << self.bits
        }
    }

    /// The segment holding `address` and its first address.
    fn locate(&self, address: u64) -> (u64, u64) {
        if self.bits == 0 {
            (0, 0)
        } else {
            let n = address >> self.bits;
            (n, n << self.bits)
        }
    }

    /// Bytes from `address` to the end of its segment.
    fn room(&self, address: u64) -> u64 {
        if self.bits == 0 {
            u64::MAX
        } else {
            (1u64 << self.bits) - (address & ((1u64 << self.bits) - 1))
        }
    }

    /// Segment `n`, opened (or created, if `create`) on first use.
    fn segment(&self, n: u64, create: bool) -> SegResult<Option<Arc<dyn StorageFile>>> {
        let mut segments = self.segments.lock();
        if let Some(file) = segments.open.get(&n) {
            return Ok(Some(file.clone()));
        }
        let path = self.name(n);
        let file: Arc<dyn StorageFile> = if self.storage.exists(&path)? {
            Arc::from(self.storage.open(&path)?)
        } else if create {
            segments.dir_changed = true;
            Arc::from(self.storage.create(&path)?)
        } else {
            return Ok(None);
        };
        segments.open.insert(n, file.clone());
        Ok(Some(file))
    }

    /// The segment numbers present in the directory.
    fn present(&self) -> SegResult<Vec<u64>> {
        let names = self.storage.list(&self.dir)?;
        Ok(if self.bits == 0 {
            if names.iter().any(|n| n == LOG_NAME) {
                vec![0]
            } else {
                Vec::new()
            }
        } else {
            let mut found: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
            found.sort_unstable();
            found
        })
    }

    /// Removes every segment that lies wholly below `begin` and syncs the
    /// directory; returns the bytes of the files removed. Call only once a
    /// durable checkpoint records a begin address ≥ `begin` (nothing needs
    /// them then). A log that is one file is never truncated.
    pub(crate) fn remove_below(&self, begin: u64) -> SegResult<u64> {
        if self.bits == 0 {
            return Ok(0);
        }
        let mut freed = 0;
        let mut removed = false;
        for n in self.present()? {
            if (n + 1) << self.bits > begin {
                break;
            }
            let path = self.name(n);
            freed += self.storage.len(&path)?;
            {
                let mut segments = self.segments.lock();
                segments.open.remove(&n);
                segments.unsynced.remove(&n);
            }
            self.storage.remove(&path)?;
            removed = true;
        }
        if removed {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(freed)
    }

    /// log2 of the segment size (0: one file).
    pub(crate) fn segment_bits(&self) -> u32 {
        self.bits
    }

    /// Bytes of all segment files present.
    pub(crate) fn disk_bytes(&self) -> SegResult<u64> {
        let mut total = 0;
        for n in self.present()? {
            total += self.storage.len(&self.name(n))?;
        }
        Ok(total)
    }
}

impl SegmentedFile {
    /// Writes `len` bytes at `offset`, split at segment boundaries:
    /// `write(file, file_offset, from, take)` writes bytes `from..from +
    /// take` of the caller's data at `file_offset` of one segment.
    /// Boundaries are multiples of the segment size (at least a page), so
    /// every part of an aligned write stays aligned.
    fn write_split(
        &self,
        mut offset: u64,
        len: usize,
        write: impl Fn(&dyn StorageFile, u64, usize, usize) -> SegResult<()>,
    ) -> SegResult<()> {
        let mut from = 0;
        while from < len {
            let (n, first) = self.locate(offset);
            let take = (self.room(offset).min((len - from) as u64)) as usize;
            let file = self.segment(n, true)?.expect("created");
            write(file.as_ref(), offset - first, from, take)?;
            self.segments.lock().unsynced.insert(n);
            offset += take as u64;
            from += take;
        }
        Ok(())
    }
}

impl SegmentedFile {
    /// Reads `buf` from `offset` segment by segment with `read` (given a
    /// segment's file, the offset in it and the part of `buf` it holds);
    /// stops at a missing segment or a short read.
    fn read_split(
        &self,
        mut offset: u64,
        buf: &mut [u8],
        read: impl Fn(&dyn StorageFile, u64, &mut [u8]) -> SegResult<usize>,
    ) -> SegResult<usize> {
        let mut done = 0;
        while done < buf.len() {
            let (n, first) = self.locate(offset);
            let take = (self.room(offset).min((buf.len() - done) as u64)) as usize;
            let Some(file) = self.segment(n, false)? else {
                break;
            };
            let got = read(&*file, offset - first, &mut buf[done..done + take])?;
            done += got;
            offset += got as u64;
            if got < take {
                break;
            }
        }
        Ok(done)
    }
}

impl StorageFile for SegmentedFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> SegResult<()> {
        self.write_split(offset, data.len(), |file, at, from, take| {
            file.write_at(at, &data[from..from + take])
        })
    }

    /// Segments start at multiples of their size (at least a page, at
    /// least 4 KiB), so the split keeps every part aligned.
    fn write_direct_at(&self, offset: u64, data: &[u8]) -> SegResult<()> {
        self.write_split(offset, data.len(), |file, at, from, take| {
            file.write_direct_at(at, &data[from..from + take])
        })
    }

    /// Passed on to each segment's file, so that the log's flush reaches
    /// the real file's copy-free write (the trait's default would copy the
    /// words into a fresh buffer first).
    fn write_words_direct_at(&self, offset: u64, words: &[AtomicU64]) -> SegResult<()> {
        self.write_split(
            offset,
            std::mem::size_of_val(words),
            |file, at, from, take| {
                file.write_words_direct_at(at, &words[from / 8..(from + take) / 8])
            },
        )
    }

    fn append(&mut self, data: &[u8]) -> SegResult<u64> {
        let at = self.size()?;
        self.write_at(at, data)?;
        Ok(at)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> SegResult<usize> {
        self.read_split(offset, buf, |file, at, part| file.read_at(at, part))
    }

    /// Each segment's part is read directly: segments are whole pages (at
    /// least 4 KiB), so the parts are aligned where the whole is, and a
    /// misaligned whole is refused by the first part's read.
    fn read_direct_at(&self, offset: u64, buf: &mut [u8]) -> SegResult<usize> {
        self.read_split(offset, buf, |file, at, part| file.read_direct_at(at, part))
    }

    fn size(&self) -> SegResult<u64> {
        match self.present()?.last() {
            None => Ok(0),
            Some(&n) => Ok(self.first(n) + self.storage.len(&self.name(n))?),
        }
    }

    fn truncate(&mut self, len: u64) -> SegResult<()> {
        for n in self.present()? {
            let first = self.first(n);
            let path = self.name(n);
            if self.bits != 0 && first >= len {
                {
                    let mut segments = self.segments.lock();
                    segments.open.remove(&n);
                    segments.unsynced.remove(&n);
                    segments.dir_changed = true;
                }
                self.storage.remove(&path)?;
            } else if first + self.storage.len(&path)? > len {
                let file = self.segment(n, false)?.expect("present");
                drop(file);
                let mut handle = self.storage.open(&path)?;
                handle.truncate(len - first)?;
                let mut segments = self.segments.lock();
                segments.open.insert(n, Arc::from(handle));
                segments.unsynced.insert(n);
            }
        }
        Ok(())
    }

    fn sync(&self) -> SegResult<()> {
        let (files, dir_changed) = {
            let mut segments = self.segments.lock();
            let unsynced = std::mem::take(&mut segments.unsynced);
            let files: Vec<Arc<dyn StorageFile>> = unsynced
                .iter()
                .filter_map(|n| segments.open.get(n).cloned())
                .collect();
            (files, std::mem::take(&mut segments.dir_changed))
        };
        for file in files {
            file.sync()?;
        }
        if dir_changed {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use epochdb_storage::SimStorage;

    use super::*;

    /// [`SimStorage`] whose files count the word writes they receive.
    #[derive(Debug)]
    struct CountingStorage {
        inner: SimStorage,
        word_writes: Arc<AtomicUsize>,
    }

    #[derive(Debug)]
    struct CountingFile {
        inner: Box<dyn StorageFile>,
        word_writes: Arc<AtomicUsize>,
    }

    impl CountingStorage {
        fn wrap(&self, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
            let word_writes = self.word_writes.clone();
            Box::new(CountingFile { inner, word_writes })
        }
    }

    impl Storage for CountingStorage {
        fn create(&self, path: &Path) -> SegResult<Box<dyn StorageFile>> {
            Ok(self.wrap(self.inner.create(path)?))
        }
        fn open(&self, path: &Path) -> SegResult<Box<dyn StorageFile>> {
            Ok(self.wrap(self.inner.open(path)?))
        }
        fn read(&self, path: &Path) -> SegResult<Vec<u8>> {
            self.inner.read(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> SegResult<()> {
            self.inner.rename(from, to)
        }
        fn remove(&self, path: &Path) -> SegResult<()> {
            self.inner.remove(path)
        }
        fn list(&self, dir: &Path) -> SegResult<Vec<String>> {
            self.inner.list(dir)
        }
        fn len(&self, path: &Path) -> SegResult<u64> {
            self.inner.len(path)
        }
        fn exists(&self, path: &Path) -> SegResult<bool> {
            self.inner.exists(path)
        }
        fn create_dir_all(&self, dir: &Path) -> SegResult<()> {
            self.inner.create_dir_all(dir)
        }
        fn sync_dir(&self, dir: &Path) -> SegResult<()> {
            self.inner.sync_dir(dir)
        }
    }

    impl StorageFile for CountingFile {
        fn path(&self) -> &Path {
            self.inner.path()
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> SegResult<()> {
            self.inner.write_at(offset, data)
        }
        fn write_words_direct_at(&self, offset: u64, words: &[AtomicU64]) -> SegResult<()> {
            self.word_writes.fetch_add(1, Relaxed);
            self.inner.write_words_direct_at(offset, words)
        }
        fn append(&mut self, data: &[u8]) -> SegResult<u64> {
            self.inner.append(data)
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> SegResult<usize> {
            self.inner.read_at(offset, buf)
        }
        fn size(&self) -> SegResult<u64> {
            self.inner.size()
        }
        fn truncate(&mut self, len: u64) -> SegResult<()> {
            self.inner.truncate(len)
        }
        fn sync(&self) -> SegResult<()> {
            self.inner.sync()
        }
    }

    /// The log's flush writes its frames as words; each segment's file must
    /// get them as words (its copy-free write), split at the boundary, and
    /// hold the same bytes as a byte write would have left.
    #[test]
    fn word_writes_reach_each_segment_as_word_writes() {
        let word_writes = Arc::new(AtomicUsize::new(0));
        let storage = Arc::new(CountingStorage {
            inner: SimStorage::new(7),
            word_writes: word_writes.clone(),
        });
        let dir = Path::new("/log");
        storage.create_dir_all(dir).unwrap();
        // 16 KiB segments; a 12 KiB write from 12 KiB spans two of them.
        let log = SegmentedFile::open(storage.clone(), dir, 14).unwrap();
        // Words at a 4 KiB-aligned address, as direct writes need.
        let count = (12 << 10) / 8;
        let backing: Vec<AtomicU64> = (0..count + 512).map(|_| AtomicU64::new(0)).collect();
        let skip = backing
            .iter()
            .position(|w| (w as *const AtomicU64 as usize).is_multiple_of(4096))
            .expect("an aligned word among 512");
        let aligned = &backing[skip..skip + count];
        for (i, word) in aligned.iter().enumerate() {
            word.store(i as u64 * 0x9e37_79b9, Relaxed);
        }
        let expected: Vec<u8> = aligned
            .iter()
            .flat_map(|w| w.load(Relaxed).to_ne_bytes())
            .collect();
        log.write_words_direct_at(12 << 10, aligned).unwrap();
        assert_eq!(word_writes.load(Relaxed), 2, "one word write per segment");
        let mut back = vec![0u8; 12 << 10];
        assert_eq!(log.read_at(12 << 10, &mut back).unwrap(), back.len());
        assert_eq!(back, expected);
        assert_eq!(storage.len(&dir.join(segment_name(0))).unwrap(), 16 << 10);
        assert_eq!(storage.len(&dir.join(segment_name(1))).unwrap(), 8 << 10);
    }
}
