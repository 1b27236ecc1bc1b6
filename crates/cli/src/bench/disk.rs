//! The disk's sequential bandwidth, measured where a benchmark writes, so
//! its checkpoint and recovery speeds can be given as fractions of it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use epochdb_storage::{DirectBuffer, RealStorage, Storage};

/// The probe is written in 512 KiB writes.
const PROBE_CHUNK_BYTES: usize = 512 << 10;

fn write_probe(path: &Path, chunks: usize) -> Result<f64, String> {
    let chunk = vec![0xa5u8; PROBE_CHUNK_BYTES];
    let started = Instant::now();
    let mut file =
        std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    for _ in 0..chunks {
        file.write_all(&chunk)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    file.sync_all()
        .map_err(|e| format!("syncing {}: {e}", path.display()))?;
    Ok((chunks * chunk.len()) as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// As [`write_probe`], but past the page cache: through the storage seam's
/// `write_direct_at` (`O_DIRECT` where the file system allows it), the way
/// a store with direct I/O writes, then fdatasync.
fn write_probe_direct(path: &Path, chunks: usize) -> Result<f64, String> {
    let mut chunk = DirectBuffer::zeroed(PROBE_CHUNK_BYTES);
    chunk.as_mut_slice().fill(0xa5);
    let started = Instant::now();
    let file = RealStorage::new().create(path).map_err(|e| e.to_string())?;
    for i in 0..chunks {
        file.write_direct_at((i * PROBE_CHUNK_BYTES) as u64, chunk.as_slice())
            .map_err(|e| e.to_string())?;
    }
    file.sync().map_err(|e| e.to_string())?;
    Ok((chunks * PROBE_CHUNK_BYTES) as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// What the disk probe measured, in MB/s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiskSpeeds {
    /// Sequential write with fsync (past the page cache if asked).
    pub(crate) write: f64,
    /// Cold sequential read through the page cache.
    pub(crate) read_buffered: f64,
    /// Sequential read past the page cache (`O_DIRECT`), where the file
    /// system allows it (elsewhere the same path as the buffered read).
    pub(crate) read_direct: f64,
}

impl DiskSpeeds {
    /// The disk's sequential read speed: the faster of the two ways to
    /// read it, so that a reader is never judged against the slower one.
    pub(crate) fn read(&self) -> f64 {
        self.read_buffered.max(self.read_direct)
    }
}

/// Bytes per read of the read probes.
const PROBE_READ_BYTES: usize = 4 << 20;

/// Reads `path` through the page cache (dropped from it first) in 4 MiB
/// reads: MB/s.
fn read_probe_buffered(path: &Path) -> Result<f64, String> {
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    epochdb_fcc::evict_page_cache(&file)
        .map_err(|e| format!("evicting {} from the page cache: {e}", path.display()))?;
    let mut buffer = vec![0u8; PROBE_READ_BYTES];
    let started = Instant::now();
    let mut total = 0usize;
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        total += n;
    }
    Ok(total as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// Reads `path` past the page cache (the storage seam's `read_direct_at`)
/// in 4 MiB reads: MB/s.
fn read_probe_direct(path: &Path) -> Result<f64, String> {
    let file = RealStorage::new().open(path).map_err(|e| e.to_string())?;
    let mut buffer = DirectBuffer::zeroed(PROBE_READ_BYTES);
    let started = Instant::now();
    let mut total = 0usize;
    loop {
        let n = file
            .read_direct_at(total as u64, buffer.as_mut_slice())
            .map_err(|e| e.to_string())?;
        total += n;
        if n < PROBE_READ_BYTES {
            break;
        }
    }
    Ok(total as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// Writes the probe file, `mib` MiB in 512 KiB writes, synced (past the
/// page cache if `direct`): its path and the MB/s.
fn write_probe_file(root: &Path, mib: usize, direct: bool) -> (PathBuf, Result<f64, String>) {
    let path = root.join("disk-probe");
    let chunks = (mib << 20) / PROBE_CHUNK_BYTES;
    let written = if direct {
        write_probe_direct(&path, chunks)
    } else {
        write_probe(&path, chunks)
    };
    (path, written)
}

/// The disk's sequential write bandwidth alone, as [`measure_write_read`]
/// writes it (no read-back): MB/s. The probe file is removed and its
/// removal settled.
pub(crate) fn measure_write(root: &Path, mib: usize, direct: bool) -> Result<f64, String> {
    let (path, written) = write_probe_file(root, mib, direct);
    let _ = std::fs::remove_file(&path);
    settle_removals(root)?;
    written
}

/// The disk's sequential write and read bandwidth: `mib` MiB written in
/// 512 KiB writes and synced (past the page cache if `direct`), then read
/// back cold in 4 MiB reads, once through the page cache (dropped from it
/// first with `posix_fadvise`) and once past it.
pub(crate) fn measure_write_read(
    root: &Path,
    mib: usize,
    direct: bool,
) -> Result<DiskSpeeds, String> {
    let (path, written) = write_probe_file(root, mib, direct);
    let result = written.and_then(|write| {
        Ok(DiskSpeeds {
            write,
            read_buffered: read_probe_buffered(&path)?,
            read_direct: read_probe_direct(&path)?,
        })
    });
    let _ = std::fs::remove_file(&path);
    settle_removals(root)?;
    result
}

/// Waits until the file system holding `dir` has committed everything done
/// to it, removals included. This project's ext4 is mounted with online
/// `discard`: the blocks of a removed file are discarded when the journal
/// commits, and writes made meanwhile run slower (a 1 GB `fio` write right
/// after removing a 3 GB file: 1,232–1,409 MB/s against 1,640 MB/s clean;
/// `sync` took ~0.5 s and left the next write at full speed; BENCHMARKS.md,
/// session 55). So a benchmark that removes a run's files (or its disk
/// probe) settles before the next run, or the next run pays for the last.
pub(crate) fn settle_removals(dir: &Path) -> Result<(), String> {
    let handle = std::fs::File::open(dir).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    rustix::fs::syncfs(&handle)
        .map_err(|e| format!("syncing the file system of {}: {e}", dir.display()))
}

/// Drops every file directly in `dir` from the page cache, so the next
/// read of it (a recovery) comes from the disk.
pub(crate) fn evict_dir(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            let file = std::fs::File::open(&path)
                .map_err(|e| format!("opening {}: {e}", path.display()))?;
            epochdb_fcc::evict_page_cache(&file)
                .map_err(|e| format!("evicting {}: {e}", path.display()))?;
        }
    }
    Ok(())
}
