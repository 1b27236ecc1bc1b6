//! Writes past the page cache: the alignment rule, an aligned buffer, and
//! an appender that keeps a file's last partial block so that appends of
//! any length become aligned direct writes.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use epochdb_memory::{HugePages, Region};

use crate::error::Result;
use crate::seam::StorageFile;

/// What [`StorageFile::write_direct_at`] aligns to: the offset, the length
/// and the buffer's address. 4 KiB: the logical block size of the disks
/// and file systems we run on (and a multiple of the 512-byte sector).
pub const DIRECT_ALIGN: usize = 4096;

/// `InvalidInput` unless `offset`, `data.len()` and `data`'s address are
/// multiples of [`DIRECT_ALIGN`].
pub(crate) fn check_direct(path: &Path, offset: u64, data: &[u8]) -> Result<()> {
    check_direct_parts(
        crate::Op::Write,
        path,
        offset,
        data.len(),
        data.as_ptr() as usize,
    )
}

/// [`check_direct`] for [`StorageFile::read_direct_at`]'s buffer.
///
/// [`StorageFile::read_direct_at`]: crate::StorageFile::read_direct_at
pub(crate) fn check_direct_read(path: &Path, offset: u64, buf: &[u8]) -> Result<()> {
    check_direct_parts(
        crate::Op::Read,
        path,
        offset,
        buf.len(),
        buf.as_ptr() as usize,
    )
}

/// [`check_direct`] for [`StorageFile::write_words_direct_at`]'s words.
///
/// [`StorageFile::write_words_direct_at`]: crate::StorageFile::write_words_direct_at
pub(crate) fn check_direct_words(path: &Path, offset: u64, words: &[AtomicU64]) -> Result<()> {
    check_direct_parts(
        crate::Op::Write,
        path,
        offset,
        std::mem::size_of_val(words),
        words.as_ptr() as usize,
    )
}

fn check_direct_parts(
    op: crate::Op,
    path: &Path,
    offset: u64,
    len: usize,
    address: usize,
) -> Result<()> {
    let align = DIRECT_ALIGN as u64;
    let address = address as u64;
    if offset.is_multiple_of(align)
        && (len as u64).is_multiple_of(align)
        && address.is_multiple_of(align)
    {
        return Ok(());
    }
    let what = if op == crate::Op::Read {
        "read"
    } else {
        "write"
    };
    Err(crate::StorageError::from_io(
        op,
        path,
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "a direct {what} needs offset {offset}, length {len} and address {address:#x} \
                 aligned to {align}"
            ),
        ),
    ))
}

/// From this size on, an aligned buffer is a mapping of its own on
/// transparent huge pages ([`AlignedBytes::Mapped`]).
///
/// Why: a direct transfer hands the device one segment per physically
/// contiguous run of the buffer, and a virtio disk takes at most a few
/// hundred segments per request (`max_segments` 254 on this project's
/// VMs). From 4 KiB pages a 4 MiB read becomes four ~1 MiB requests;
/// from 2 MiB pages it is one. Measured on the log of a HybridLog
/// checkpoint (BENCHMARKS.md, session 61): direct reads of 2–8 MiB into
/// 4 KiB pages ran at 0.9–1.4 GB/s, into huge pages at 1.5–1.9 GB/s.
pub const HUGE_BUFFER_MIN: usize = 2 << 20;

/// Zeroed bytes whose first byte lies on a [`DIRECT_ALIGN`] boundary.
enum AlignedBytes {
    /// Small: a heap `Vec` one alignment larger than needed, used from
    /// `start` (safe code, no mapping per buffer).
    Heap { bytes: Vec<u8>, start: usize },
    /// [`HUGE_BUFFER_MIN`] or more: an anonymous mapping (page-aligned)
    /// rounded up to whole huge pages and advised onto them, its pages
    /// faulted in on first touch as the allocator's were. Faulting them in
    /// when made zeroed every buffer up front on the thread that made it:
    /// a HybridLog checkpoint's per-file appenders and a growing chunk
    /// made 16 such mappings (~100 MiB) per five checkpoints, and the
    /// store came back more slowly after them (BENCHMARKS.md, session 61).
    Mapped(Region<u8>),
}

impl AlignedBytes {
    /// At least `len` zero bytes at an aligned address.
    fn zeroed(len: usize) -> Self {
        if len >= HUGE_BUFFER_MIN {
            let rounded = len.next_multiple_of(HUGE_BUFFER_MIN);
            AlignedBytes::Mapped(Region::zeroed_lazily(rounded, HugePages::On))
        } else {
            let bytes = vec![0u8; len + DIRECT_ALIGN];
            let start = bytes.as_ptr().align_offset(DIRECT_ALIGN);
            AlignedBytes::Heap { bytes, start }
        }
    }

    /// The aligned bytes (at least as many as asked for).
    fn as_slice(&self) -> &[u8] {
        match self {
            AlignedBytes::Heap { bytes, start } => &bytes[*start..],
            AlignedBytes::Mapped(region) => region,
        }
    }

    /// The aligned bytes, to fill.
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            AlignedBytes::Heap { bytes, start } => &mut bytes[*start..],
            AlignedBytes::Mapped(region) => region,
        }
    }
}

impl Default for AlignedBytes {
    fn default() -> Self {
        AlignedBytes::Heap {
            bytes: Vec::new(),
            start: 0,
        }
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            AlignedBytes::Heap { .. } => "heap",
            AlignedBytes::Mapped(_) => "huge pages",
        };
        write!(f, "{} bytes ({kind})", self.as_slice().len())
    }
}

/// A byte buffer whose contents start at a [`DIRECT_ALIGN`]-aligned
/// address, for [`StorageFile::write_direct_at`] and
/// [`StorageFile::read_direct_at`]. Small ones live on the heap; from
/// [`HUGE_BUFFER_MIN`] on, on huge pages of their own.
#[derive(Debug, Default)]
pub struct DirectBuffer {
    bytes: AlignedBytes,
    len: usize,
}

impl DirectBuffer {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        DirectBuffer {
            bytes: AlignedBytes::zeroed(len),
            len,
        }
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
        &self.bytes.as_slice()[..self.len]
    }

    /// The bytes (aligned), to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes.as_mut_slice()[..self.len]
    }
}

/// A growable byte vector whose contents start at a [`DIRECT_ALIGN`]-aligned
/// address, so that a producer can fill it with the bytes of a file and
/// hand it to [`StorageFile::write_direct_at`] without copying it into a
/// [`DirectBuffer`] first. Its memory is a `DirectBuffer`'s (huge pages
/// from [`HUGE_BUFFER_MIN`] on); growing past the capacity moves the bytes
/// to new, larger memory.
#[derive(Debug, Default)]
pub struct DirectVec {
    bytes: AlignedBytes,
    len: usize,
}

impl DirectVec {
    /// An empty vector with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        DirectVec {
            bytes: AlignedBytes::zeroed(capacity),
            len: 0,
        }
    }

    /// How many bytes it holds without growing.
    pub fn capacity(&self) -> usize {
        self.bytes.as_slice().len()
    }

    /// Makes room for `extra` more bytes.
    pub fn reserve(&mut self, extra: usize) {
        let need = self.len + extra;
        if need > self.capacity() {
            let mut grown = DirectVec::with_capacity(need.max(self.capacity() * 2));
            grown.extend_from_slice(self);
            *self = grown;
        }
    }

    /// Appends `data`.
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        self.extend_with(data.len(), |room| room.copy_from_slice(data));
    }

    /// Appends `len` bytes written by `fill`, which is given them holding
    /// whatever the buffer held there before: for a producer that writes
    /// every byte, no zeroing pass and no capacity check per piece.
    pub fn extend_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) {
        self.reserve(len);
        let at = self.len;
        fill(&mut self.bytes.as_mut_slice()[at..at + len]);
        self.len += len;
    }

    /// Sets the length to `len`, filling new bytes with `value`.
    pub fn resize(&mut self, len: usize, value: u8) {
        if len > self.len {
            let at = self.len;
            self.extend_with(len - at, |room| room.fill(value));
        }
        self.len = len;
    }

    /// Keeps the first `len` bytes (no effect if it holds fewer).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Removes every byte, keeping the capacity.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl std::ops::Deref for DirectVec {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes.as_slice()[..self.len]
    }
}

impl std::ops::DerefMut for DirectVec {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes.as_mut_slice()[..self.len]
    }
}

/// Appends to `buf` the bytes of `file` from `offset`: `len` of them, or
/// fewer where the file ends first; returns how many. With `direct` they
/// are read past the page cache ([`StorageFile::read_direct_at`]), so
/// `offset` and the end of `buf` must be block-aligned; the read is rounded
/// up to a whole block and what lies past `len` dropped. Without `direct`
/// they are read through the cache ([`StorageFile::read_at`]). Recovery
/// readers use this for a file read once, whose copy out of the page cache
/// would run on the cores that recover.
pub fn read_appending(
    file: &dyn StorageFile,
    offset: u64,
    len: usize,
    buf: &mut DirectVec,
    direct: bool,
) -> Result<usize> {
    let at = buf.len();
    let mut read = Ok(0);
    buf.extend_with(len.next_multiple_of(DIRECT_ALIGN), |bytes| {
        read = if direct {
            file.read_direct_at(offset, bytes)
        } else {
            file.read_at(offset, bytes)
        };
    });
    let read = read.map(|n| n.min(len));
    buf.truncate(at + *read.as_ref().unwrap_or(&0));
    read
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
    /// The two buffers of [`DirectAppender::append_overlapped`], made on
    /// its first use.
    lanes: Vec<DirectBuffer>,
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
            lanes: Vec::new(),
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

    /// Takes over after the caller wrote the file's whole blocks up to
    /// `len` rounded down itself (say, straight from memory laid out as
    /// the file is): `tail` is the data after them, under one block, which
    /// this writes zero-padded (if there is any) and carries for the next
    /// append. Not durable until [`StorageFile::sync`].
    ///
    /// # Panics
    ///
    /// If `len` is below [`DirectAppender::len`] or `tail` is not
    /// `len % DIRECT_ALIGN` bytes long.
    pub fn advance(&mut self, file: &dyn StorageFile, len: u64, tail: &[u8]) -> Result<()> {
        assert!(len >= self.len(), "an appender never moves back");
        let align = DIRECT_ALIGN as u64;
        assert_eq!(
            tail.len() as u64,
            len % align,
            "the tail is the last partial block"
        );
        self.block_start = len / align * align;
        self.carry = tail.len();
        if tail.is_empty() {
            return Ok(());
        }
        let block = &mut self.stage.as_mut_slice()[..DIRECT_ALIGN];
        block[..tail.len()].copy_from_slice(tail);
        block[tail.len()..].fill(0);
        file.write_direct_at(self.block_start, block)
    }

    /// Appends `len` bytes as [`DirectAppender::append`] does, but copies
    /// each write's bytes while a thread of its own writes the previous
    /// ones: `fill(offset, out)` puts the data's bytes from `offset` on into
    /// `out`. Writes stay one at a time and in order; only the last one
    /// carries zero padding (the others end at a block boundary and leave
    /// their partial block to the next). After an error the file's end is
    /// unknown: use the appender no more (the logs that use it fail-stop).
    pub fn append_overlapped(
        &mut self,
        file: &dyn StorageFile,
        len: usize,
        mut fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<u64> {
        let at = self.len();
        let capacity = self.stage.len();
        while self.lanes.len() < 2 {
            self.lanes.push(DirectBuffer::zeroed(capacity));
        }
        let (to_writer, jobs) = std::sync::mpsc::sync_channel::<(u64, DirectBuffer, usize)>(1);
        let (to_filler, free) = std::sync::mpsc::sync_channel::<DirectBuffer>(2);
        for buffer in self.lanes.drain(..) {
            to_filler.send(buffer).expect("room for both");
        }
        let mut failed = None;
        std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> Result<()> {
                let mut result = Ok(());
                for (at, buffer, bytes) in jobs {
                    if result.is_ok() {
                        result = file.write_direct_at(at, &buffer.as_slice()[..bytes]);
                    }
                    let _ = to_filler.send(buffer);
                }
                result
            });
            let mut done = 0;
            let mut carry_bytes = self.stage.as_slice()[..self.carry].to_vec();
            while done < len {
                let Ok(mut buffer) = free.recv() else { break };
                let out = buffer.as_mut_slice();
                out[..carry_bytes.len()].copy_from_slice(&carry_bytes);
                let take = (capacity - carry_bytes.len()).min(len - done);
                let filled = carry_bytes.len() + take;
                fill(done, &mut out[carry_bytes.len()..filled]);
                done += take;
                let whole = filled / DIRECT_ALIGN * DIRECT_ALIGN;
                carry_bytes.clear();
                carry_bytes.extend_from_slice(&out[whole..filled]);
                let write = if done < len {
                    whole
                } else {
                    let padded = filled.next_multiple_of(DIRECT_ALIGN);
                    out[filled..padded].fill(0);
                    padded
                };
                // Never empty: a write before the last fills the buffer, and
                // the last one holds at least one byte.
                let job_at = self.block_start;
                self.block_start += whole as u64;
                if to_writer.send((job_at, buffer, write)).is_err() {
                    break;
                }
            }
            drop(to_writer);
            if let Err(e) = writer.join().expect("the append writer panicked") {
                failed = Some(e);
            }
            self.stage.as_mut_slice()[..carry_bytes.len()].copy_from_slice(&carry_bytes);
            self.carry = carry_bytes.len();
        });
        self.lanes.extend(free.try_iter());
        if let Some(e) = failed {
            return Err(e);
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

/// How many threads `write_direct_all` writes `writes` with: at most
/// `depth`, one per write and one per `min_bytes_per_writer` bytes, and
/// at least one.
fn direct_writers(writes: &[(u64, &[u8])], depth: usize, min_bytes_per_writer: usize) -> usize {
    let bytes: usize = writes.iter().map(|(_, data)| data.len()).sum();
    depth
        .min(writes.len())
        .min(bytes / min_bytes_per_writer.max(1))
        .max(1)
}

/// Writes each `(offset, data)` of `writes` with
/// [`StorageFile::write_direct_at`], keeping up to `depth` of them in
/// flight at once (the caller's thread and scoped helpers taking the next
/// write in turn; fewer threads than `depth` where the batch holds under
/// `min_bytes_per_writer` bytes for each, since a helper's spawn and join
/// then cost more than the overlap gains). One write at a time leaves the
/// device idle between a write's completion and the next submission: here
/// 64 KiB direct writes ran at ~0.42 GB/s one at a time and ~0.98 GB/s
/// eight at a time into a preallocated file (BENCHMARKS.md, session 57).
/// The writes may land in any order, so nothing that depends on them may
/// count as written before this returns; after an error the others may or
/// may not have happened. Returns the first error seen.
pub fn write_direct_all(
    file: &dyn StorageFile,
    writes: &[(u64, &[u8])],
    depth: usize,
    min_bytes_per_writer: usize,
) -> Result<()> {
    let helpers = direct_writers(writes, depth, min_bytes_per_writer) - 1;
    if helpers == 0 {
        return writes
            .iter()
            .try_for_each(|&(offset, data)| file.write_direct_at(offset, data));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let work = || -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        while !failed.load(Relaxed) {
            let Some(&(offset, data)) = writes.get(next.fetch_add(1, Relaxed)) else {
                break;
            };
            if let Err(e) = file.write_direct_at(offset, data) {
                failed.store(true, Relaxed);
                return Err(e);
            }
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let spawned: Vec<_> = (0..helpers).map(|_| scope.spawn(work)).collect();
        let mut result = work();
        for helper in spawned {
            let helped = helper.join().expect("a direct writer panicked");
            if result.is_ok() {
                result = helped;
            }
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch gets a writer per write and per share of bytes, up to the
    /// depth, and always one.
    #[test]
    fn a_batch_gets_a_writer_per_write_per_share_of_bytes_up_to_the_depth() {
        let unit = vec![0u8; 64 << 10];
        let batch = |units: usize| vec![(0u64, unit.as_slice()); units];
        let min = 256 << 10;
        assert_eq!(direct_writers(&[], 8, min), 1, "nothing: still one");
        assert_eq!(direct_writers(&batch(2), 8, min), 1, "128 KiB: one");
        assert_eq!(direct_writers(&batch(8), 8, min), 2, "512 KiB: two");
        assert_eq!(direct_writers(&batch(256), 8, min), 8, "16 MiB: the depth");
        assert_eq!(direct_writers(&batch(256), 1, min), 1, "depth 1: one");
        assert_eq!(direct_writers(&batch(3), 8, 1), 3, "no minimum: per write");
        assert_eq!(direct_writers(&batch(3), 8, 0), 3, "0 reads as no minimum");
    }

    /// Contents stay as a `Vec` would hold them, at an aligned address,
    /// across growth.
    #[test]
    fn direct_vec_holds_what_a_vec_would_at_an_aligned_address() {
        let mut ours = DirectVec::with_capacity(10);
        let mut model: Vec<u8> = Vec::new();
        for round in 0..40u8 {
            let data: Vec<u8> = (0..u32::from(round) * 97)
                .map(|i| i as u8 ^ round)
                .collect();
            ours.extend_from_slice(&data);
            model.extend_from_slice(&data);
            if round % 3 == 0 {
                let len = model.len() / 2 + usize::from(round);
                ours.resize(len, round);
                model.resize(len, round);
            }
            if round % 5 == 0 {
                // Growth through `extend_with` too, past stale bytes.
                let more: Vec<u8> = (0..u32::from(round) * 31).map(|i| (i * 3) as u8).collect();
                ours.extend_with(more.len(), |to| to.copy_from_slice(&more));
                model.extend_from_slice(&more);
            }
            if round % 7 == 0 {
                ours.truncate(model.len() / 3);
                model.truncate(model.len() / 3);
            }
            assert_eq!(&ours[..], &model[..], "round {round}");
            assert_eq!(ours.as_ptr() as usize % DIRECT_ALIGN, 0);
            assert!(ours.capacity() >= ours.len());
        }
        ours.clear();
        assert!(ours.is_empty());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "megabytes byte by byte take miri minutes; `Region` has its own miri run"
    )]
    fn large_buffers_are_aligned_zeroed_and_keep_their_bytes_when_grown() {
        let big = DirectBuffer::zeroed(HUGE_BUFFER_MIN + 3 * DIRECT_ALIGN);
        assert_eq!(big.len(), HUGE_BUFFER_MIN + 3 * DIRECT_ALIGN);
        assert_eq!(big.as_slice().as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(big.as_slice().iter().all(|&b| b == 0));
        assert!(matches!(big.bytes, AlignedBytes::Mapped(_)), "{big:?}");
        let small = DirectBuffer::zeroed(HUGE_BUFFER_MIN - DIRECT_ALIGN);
        assert!(
            matches!(small.bytes, AlignedBytes::Heap { .. }),
            "{small:?}"
        );

        // A vector that starts on the heap and grows onto huge pages.
        let piece: Vec<u8> = (0..(HUGE_BUFFER_MIN / 3) as u32)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut ours = DirectVec::with_capacity(DIRECT_ALIGN);
        let mut model = Vec::new();
        for _ in 0..4 {
            ours.extend_from_slice(&piece);
            model.extend_from_slice(&piece);
            assert_eq!(&ours[..], &model[..]);
            assert_eq!(ours.as_ptr() as usize % DIRECT_ALIGN, 0);
        }
        assert!(matches!(ours.bytes, AlignedBytes::Mapped(_)), "{ours:?}");
        assert!(ours.capacity() >= ours.len());
    }
}
