//! Writes past the page cache: the alignment rule, an aligned buffer, and
//! an appender that keeps a file's last partial block so that appends of
//! any length become aligned direct writes.

use std::path::Path;

use crate::error::Result;
use crate::seam::StorageFile;

/// What [`StorageFile::write_direct_at`] aligns to: the offset, the length
/// and the buffer's address. 4 KiB: the logical block size of the disks
/// and file systems we run on (and a multiple of the 512-byte sector).
pub const DIRECT_ALIGN: usize = 4096;

/// `InvalidInput` unless `offset`, `data.len()` and `data`'s address are
/// multiples of [`DIRECT_ALIGN`].
pub(crate) fn check_direct(path: &Path, offset: u64, data: &[u8]) -> Result<()> {
    let align = DIRECT_ALIGN as u64;
    let address = data.as_ptr() as usize as u64;
    if offset.is_multiple_of(align)
        && (data.len() as u64).is_multiple_of(align)
        && address.is_multiple_of(align)
    {
        return Ok(());
    }
    Err(crate::StorageError::from_io(
        crate::Op::Write,
        path,
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "a direct write needs offset {offset}, length {} and address {address:#x} \
                 aligned to {align}",
                data.len()
            ),
        ),
    ))
}

/// A byte buffer whose contents start at a [`DIRECT_ALIGN`]-aligned
/// address, for [`StorageFile::write_direct_at`]. Safe code: it keeps a
/// `Vec` one alignment larger than asked and uses the aligned window.
#[derive(Debug, Default)]
pub struct DirectBuffer {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl DirectBuffer {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        let bytes = vec![0u8; len + DIRECT_ALIGN];
        let start = bytes.as_ptr().align_offset(DIRECT_ALIGN);
        DirectBuffer { bytes, start, len }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes (aligned).
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }

    /// The bytes (aligned), to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// Appends to a file with [`StorageFile::write_direct_at`]: each append is
/// written from the start of the block holding the file's end, with the
/// bytes of that partial block kept here (so they are written again, the
/// same) and zeros after the data up to a block boundary. So between
/// appends the file is the data and then under [`DIRECT_ALIGN`] zero bytes
/// of padding, which [`DirectAppender::trim`] cuts off; a reader that
/// stops at the first block that does not decode sees them as a torn
/// tail. One writer per file.
#[derive(Debug)]
pub struct DirectAppender {
    stage: DirectBuffer,
    /// Bytes of the file's last partial block, at the start of `stage`.
    carry: usize,
    /// The file offset of `stage[0]` (aligned).
    block_start: u64,
}

impl DirectAppender {
    /// An appender for `file`, whose data is its first `len` bytes (read
    /// back from it: the partial last block); each direct write carries up
    /// to `capacity` bytes (rounded up to whole blocks, at least one).
    pub fn new(file: &dyn StorageFile, len: u64, capacity: usize) -> Result<Self> {
        let align = DIRECT_ALIGN as u64;
        let capacity = capacity.next_multiple_of(DIRECT_ALIGN).max(DIRECT_ALIGN);
        let block_start = len / align * align;
        let carry = (len - block_start) as usize;
        let mut stage = DirectBuffer::zeroed(capacity);
        let got = file.read_at(block_start, &mut stage.as_mut_slice()[..carry])?;
        if got < carry {
            return Err(crate::StorageError::from_io(
                crate::Op::Read,
                file.path(),
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the file is shorter than the {len} bytes it should hold"),
                ),
            ));
        }
        Ok(DirectAppender {
            stage,
            carry,
            block_start,
        })
    }

    /// The length of the data appended so far (without the padding).
    pub fn len(&self) -> u64 {
        self.block_start + self.carry as u64
    }

    /// Whether no data is there at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `data`; returns the offset it starts at. Not durable until
    /// [`StorageFile::sync`].
    pub fn append(&mut self, file: &dyn StorageFile, mut data: &[u8]) -> Result<u64> {
        let at = self.len();
        let capacity = self.stage.len();
        while !data.is_empty() {
            let take = (capacity - self.carry).min(data.len());
            let filled = self.carry + take;
            let padded = filled.next_multiple_of(DIRECT_ALIGN);
            let stage = self.stage.as_mut_slice();
            stage[self.carry..filled].copy_from_slice(&data[..take]);
            stage[filled..padded].fill(0);
            file.write_direct_at(self.block_start, &stage[..padded])?;
            data = &data[take..];
            // Keep the new partial block (if any) for the next write.
            let whole = filled / DIRECT_ALIGN * DIRECT_ALIGN;
            stage.copy_within(whole..filled, 0);
            self.carry = filled - whole;
            self.block_start += whole as u64;
        }
        Ok(at)
    }

    /// Cuts the padding off the file (before it is closed for good or
    /// renamed: a reader then finds exactly the data). Not durable until
    /// [`StorageFile::sync`].
    pub fn trim(&self, file: &mut dyn StorageFile) -> Result<()> {
        file.truncate(self.len())
    }
}
