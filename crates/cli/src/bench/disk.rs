//! The disk's sequential bandwidth, measured where a benchmark writes, so
//! its checkpoint and recovery speeds can be given as fractions of it.

use std::io::{Read, Write};
use std::path::Path;
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

/// The disk's sequential write and cold read bandwidth, in MB/s: `mib`
/// MiB written in 512 KiB writes and synced (past the page cache if
/// `direct`),
/// dropped from the page cache (`posix_fadvise`), then read back in 4 MiB
/// reads.
pub(crate) fn measure_write_read(
    root: &Path,
    mib: usize,
    direct: bool,
) -> Result<(f64, f64), String> {
    let path = root.join("disk-probe");
    let chunks = (mib << 20) / PROBE_CHUNK_BYTES;
    let written = if direct {
        write_probe_direct(&path, chunks)
    } else {
        write_probe(&path, chunks)
    };
    let result = written.and_then(|write| {
        let mut file =
            std::fs::File::open(&path).map_err(|e| format!("opening {}: {e}", path.display()))?;
        epochdb_fcc::evict_page_cache(&file)
            .map_err(|e| format!("evicting {} from the page cache: {e}", path.display()))?;
        let mut buffer = vec![0u8; 4 << 20];
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
        Ok((write, total as f64 / 1e6 / started.elapsed().as_secs_f64()))
    });
    let _ = std::fs::remove_file(&path);
    result
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
