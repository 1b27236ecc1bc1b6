//! Removing a large file without stalling the writers of other files.

use std::path::Path;

use crate::error::Result;
use crate::seam::Storage;

/// How much of a file [`remove_in_pieces`] frees per truncation.
pub const REMOVE_PIECE_BYTES: u64 = 8 << 20;

/// Removes the file at `path` by truncating it `piece` bytes at a time
/// from its end before unlinking it.
///
/// Why: freeing a 128–256 MiB file in one `unlink` took 73–189 ms on this
/// project's ext4 (mounted with online `discard`), and a log's `O_DIRECT`
/// append to another file stalled behind it for 44–62 ms (strace of a
/// SiloR YCSB run: the log's sync cadence broke from 40 to 163 ms at each
/// checkpoint's cleanup), which set the p99 latency to durability.
/// Smaller truncations free a little at a time, so such an append waits
/// for one piece at most (RocksDB deletes large files in chunks for the
/// same reason).
///
/// Not atomic: a crash part-way leaves the file shortened under its name.
/// Callers use it only for a file that recovery removes without reading
/// (a stray, or one renamed out of the way first).
pub fn remove_in_pieces(storage: &dyn Storage, path: &Path, piece: u64) -> Result<()> {
    let piece = piece.max(1);
    let mut file = storage.open(path)?;
    let mut len = file.size()?;
    while len > piece {
        len -= piece;
        file.truncate(len)?;
    }
    drop(file);
    storage.remove(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimStorage;

    #[test]
    fn removes_files_larger_and_smaller_than_a_piece() {
        let disk = SimStorage::new(1);
        disk.create_dir_all(Path::new("/d")).unwrap();
        for (name, len) in [("big", 10_000usize), ("small", 100), ("empty", 0)] {
            let path = Path::new("/d").join(name);
            let mut file = disk.create(&path).unwrap();
            file.append(&vec![7u8; len]).unwrap();
            file.sync().unwrap();
            drop(file);
            remove_in_pieces(&disk, &path, 1024).unwrap();
            assert!(!disk.exists(&path).unwrap(), "{name} still there");
        }
        assert!(disk.list(Path::new("/d")).unwrap().is_empty());
    }

    #[test]
    fn a_missing_file_is_an_error() {
        let disk = SimStorage::new(2);
        assert!(remove_in_pieces(&disk, Path::new("/nope"), 1024).is_err());
    }
}
