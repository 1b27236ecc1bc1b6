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

fn parse_segment_name(name: &str) -> Option<u64> {
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
    /// Writes `data` at `offset` with `write`, split at segment boundaries.
    fn write_split(
        &self,
        mut offset: u64,
        mut data: &[u8],
        write: impl Fn(&dyn StorageFile, u64, &[u8]) -> SegResult<()>,
    ) -> SegResult<()> {
        while !data.is_empty() {
            let (n, first) = self.locate(offset);
            let take = (self.room(offset).min(data.len() as u64)) as usize;
            let file = self.segment(n, true)?.expect("created");
            write(file.as_ref(), offset - first, &data[..take])?;
            self.segments.lock().unsynced.insert(n);
            offset += take as u64;
            data = &data[take..];
        }
        Ok(())
    }
}

impl StorageFile for SegmentedFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> SegResult<()> {
        self.write_split(offset, data, |file, at, part| file.write_at(at, part))
    }

    /// Segments start at multiples of their size (at least a page, at
    /// least 4 KiB), so the split keeps every part aligned.
    fn write_direct_at(&self, offset: u64, data: &[u8]) -> SegResult<()> {
        self.write_split(offset, data, |file, at, part| {
            file.write_direct_at(at, part)
        })
    }

    fn append(&mut self, data: &[u8]) -> SegResult<u64> {
        let at = self.size()?;
        self.write_at(at, data)?;
        Ok(at)
    }

    fn read_at(&self, mut offset: u64, buf: &mut [u8]) -> SegResult<usize> {
        let mut done = 0;
        while done < buf.len() {
            let (n, first) = self.locate(offset);
            let take = (self.room(offset).min((buf.len() - done) as u64)) as usize;
            let Some(file) = self.segment(n, false)? else {
                break;
            };
            let got = file.read_at(offset - first, &mut buf[done..done + take])?;
            done += got;
            offset += got as u64;
            if got < take {
                break;
            }
        }
        Ok(done)
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
