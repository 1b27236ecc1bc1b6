//! The silor files' block reader: the storage crate's chunked scan
//! ([`epochdb_storage::scan_blocks`]) plus the check that every block is of
//! the format version this build reads.

use std::ops::ControlFlow;
use std::path::Path;

use epochdb_storage::{Block, ScanBuffers, Storage, StorageError};

use super::format::{BlockError, FORMAT_VERSION};

pub(crate) use epochdb_storage::read_rest;

/// How a scan ended.
#[derive(Debug)]
pub(crate) enum ScanEnd {
    /// Every byte was a valid block.
    Clean,
    /// The block at `offset` (in the file) could not be used.
    Damaged { offset: u64, error: BlockError },
}

/// Calls `visit(offset, block)` for each block of `path` (format `magic`)
/// in order, read through `buffers`, past the page cache if `direct`; stops
/// at the first damaged block, a block of another format
/// version, or an error from `visit`. Returns how the scan ended and the
/// file's length.
pub(crate) fn scan_blocks<E: From<StorageError>>(
    storage: &dyn Storage,
    path: &Path,
    magic: u32,
    (buffers, direct): (&mut ScanBuffers, bool),
    mut visit: impl FnMut(u64, Block<'_>) -> Result<(), E>,
) -> Result<(ScanEnd, u64), E> {
    let mut other_version = None;
    let (end, size) = epochdb_storage::scan_blocks::<E>(
        storage,
        path,
        magic,
        buffers,
        direct,
        |offset, block| {
            if block.version != FORMAT_VERSION {
                other_version = Some(block.version);
                return Ok(ControlFlow::Break(()));
            }
            visit(offset, block)?;
            Ok(ControlFlow::Continue(()))
        },
    )?;
    let end = match end {
        epochdb_storage::ScanEnd::Clean => ScanEnd::Clean,
        epochdb_storage::ScanEnd::Damaged { offset, error } => ScanEnd::Damaged {
            offset,
            error: BlockError::Frame(error),
        },
        epochdb_storage::ScanEnd::Stopped { offset } => ScanEnd::Damaged {
            offset,
            error: BlockError::Version {
                offset: offset as usize,
                found: other_version.expect("the scan stops only on another version"),
            },
        },
    };
    Ok((end, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use epochdb_storage::{encode_block, SimStorage};

    const MAGIC: u32 = u32::from_le_bytes(*b"tEST");

    #[test]
    fn a_block_of_another_version_ends_the_scan_as_damage() {
        let mut data = Vec::new();
        encode_block(&mut data, MAGIC, FORMAT_VERSION, 1, b"first");
        let second = data.len() as u64;
        encode_block(&mut data, MAGIC, FORMAT_VERSION + 1, 1, b"second");
        let storage = SimStorage::new(1);
        let path = Path::new("/f");
        storage.create(path).unwrap().append(&data).unwrap();
        let mut seen = 0;
        let (end, _) = scan_blocks::<StorageError>(
            &storage,
            path,
            MAGIC,
            (&mut ScanBuffers::default(), true),
            |_, _| {
                seen += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, 1);
        match end {
            ScanEnd::Damaged {
                offset,
                error: BlockError::Version { found, .. },
            } => {
                assert_eq!(offset, second);
                assert_eq!(found, FORMAT_VERSION + 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
