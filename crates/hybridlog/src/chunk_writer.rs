//! A file written by background threads in large chunks, so that the disk
//! writes chunk k while the caller fills chunk k+1 (snapshot files and
//! index checkpoints: copying and checksumming overlap writing).
//!
//! **Direct writes without a staging copy.** The caller fills
//! [`DirectVec`]s, whose bytes start at an aligned address. On each
//! [`ChunkWriter::send`] the whole [`DIRECT_ALIGN`] blocks of the chunk go
//! to a writer thread as they are, and the bytes of its last partial block
//! (under 4 KiB) are moved to the front of the caller's next buffer, so the
//! next chunk starts at an aligned file offset too. Only the bytes before
//! the first aligned offset of the file and after the last one go through
//! the page cache. Two writer threads keep two writes in flight: the disk
//! here wrote 10–20% faster so than one write at a time (BENCHMARKS.md,
//! "Checkpoint writes without a copy").
//!
//! Written through the page cache instead, one writer syncs every
//! [`SYNC_BYTES`], so that the final sync has little left to do.
//!
//! **Buffers outlive the file.** A [`BufferPool`] keeps a few buffers from
//! one checkpoint to the next: fresh memory costs its first touch (the
//! kernel zeroes each page; about 0.4 GB/s on the machine of
//! BENCHMARKS.md), which made page clearing a quarter of the checkpoint
//! thread's time when every checkpoint allocated its buffers anew.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use epochdb_storage::{DirectVec, StorageError, StorageFile, DIRECT_ALIGN};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Bytes gathered before one write (sequential writes of this size run at
/// the disk's speed).
pub(crate) const WRITE_CHUNK_BYTES: usize = 8 << 20;
/// Bytes written between two syncs of a file written through the page cache.
pub(crate) const SYNC_BYTES: u64 = 32 << 20;
/// Writer threads, hence writes in flight, for direct writes.
const DIRECT_WRITERS: usize = 2;

/// Buffers of one size kept between the files a [`ChunkWriter`] writes
/// (at most [`BufferPool::KEEP`] of them: the most one writer has out at
/// once).
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<DirectVec>>,
    capacity: usize,
}

impl BufferPool {
    /// A pool of buffers of `capacity` bytes (made on demand).
    pub(crate) fn new(capacity: usize) -> Self {
        BufferPool {
            free: Mutex::new(Vec::new()),
            capacity,
        }
    }

    /// Fills the pool with all the buffers it keeps, each written once so
    /// that its pages are mapped: the first checkpoint then finds them
    /// ready. Allocating them during that checkpoint (the kernel mapping
    /// and zeroing tens of MiB) held its snapshot's log write to 1.0–1.1
    /// GB/s against 1.8–2.0 GB/s later (BENCHMARKS.md, session 22).
    pub(crate) fn warm(&self) {
        let mut free = self.free.lock();
        while free.len() < Self::KEEP {
            let mut buf = DirectVec::with_capacity(self.capacity);
            buf.resize(self.capacity, 0);
            buf.clear();
            free.push(buf);
        }
    }

    /// Buffers ready in the pool now.
    #[cfg(test)]
    pub(crate) fn ready(&self) -> usize {
        self.free.lock().len()
    }

    /// Bytes of the buffers the pool keeps at most.
    pub(crate) fn kept_bytes(&self) -> usize {
        Self::KEEP * self.capacity
    }

    /// The most buffers kept: as many as a writer with [`DIRECT_WRITERS`]
    /// threads has out at once (one filling, one queued and one being
    /// written per thread).
    const KEEP: usize = 2 * DIRECT_WRITERS + 1;

    fn take(&self) -> DirectVec {
        self.free
            .lock()
            .pop()
            .unwrap_or_else(|| DirectVec::with_capacity(self.capacity))
    }

    fn give(&self, mut buf: DirectVec) {
        let mut free = self.free.lock();
        if free.len() < Self::KEEP && buf.capacity() >= self.capacity {
            buf.clear();
            free.push(buf);
        }
    }
}

/// One write for a writer thread.
struct Job {
    at: u64,
    bytes: DirectVec,
    /// Aligned at both ends: written past the page cache.
    direct: bool,
}

/// The writer threads and the buffers going to and coming back from them.
/// Any error of a writer is returned by the next [`ChunkWriter::send`] or
/// by [`ChunkWriter::finish`]. Dropped unfinished, the writers write what
/// they were sent and end.
pub(crate) struct ChunkWriter {
    to_writers: Option<Sender<Job>>,
    spare: Receiver<DirectVec>,
    writers: Vec<std::thread::JoinHandle<()>>,
    /// Until [`ChunkWriter::finish`] hands it back.
    file: Option<Arc<Box<dyn StorageFile>>>,
    /// The first error of any writer.
    error: Arc<Mutex<Option<StorageError>>>,
    /// The file offset of the next byte sent.
    at: u64,
    direct: bool,
    pool: Arc<BufferPool>,
}

impl ChunkWriter {
    /// Starts threads named `name` that write the chunks they are sent to
    /// `file`, one after the other from offset `at`, in buffers taken from
    /// `pool` (and given back to it at the end). With `direct`, whole blocks
    /// go past the page cache ([`StorageFile::write_direct_at`]); the
    /// file's bytes are the same either way.
    pub(crate) fn start(
        file: Box<dyn StorageFile>,
        at: u64,
        name: &str,
        pool: Arc<BufferPool>,
        direct: bool,
    ) -> Self {
        let writers = if direct { DIRECT_WRITERS } else { 1 };
        let (to_writers, jobs) = crossbeam_channel::bounded::<Job>(writers);
        let (to_spare, spare) = crossbeam_channel::bounded::<DirectVec>(2 * writers + 1);
        let file = Arc::new(file);
        let error = Arc::new(Mutex::new(None));
        let writers = (0..writers)
            .map(|_| {
                let (jobs, to_spare, file, error) =
                    (jobs.clone(), to_spare.clone(), file.clone(), error.clone());
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || write_jobs(&jobs, &to_spare, file.as_ref().as_ref(), &error))
                    .expect("spawn a chunk writer")
            })
            .collect();
        ChunkWriter {
            to_writers: Some(to_writers),
            spare,
            writers,
            file: Some(file),
            error,
            at,
            direct,
            pool,
        }
    }

    /// An empty buffer: one a writer is done with, or one from the pool.
    pub(crate) fn buffer(&self) -> DirectVec {
        self.spare.try_recv().unwrap_or_else(|_| self.pool.take())
    }

    /// Hands what `buf` holds to the writers (waiting while every writer is
    /// busy and one chunk per writer waits) and leaves in `buf` the buffer
    /// to fill next: empty, or, for direct writes, starting with the bytes
    /// of the chunk's last partial block, which are written with the next
    /// chunk.
    pub(crate) fn send(&mut self, buf: &mut DirectVec) -> Result<()> {
        let next = self.buffer();
        let mut chunk = std::mem::replace(buf, next);
        if !self.direct {
            return self.submit(chunk, false);
        }
        let align = DIRECT_ALIGN as u64;
        if !self.at.is_multiple_of(align) {
            // The file's first bytes, up to its first aligned offset.
            let head = ((self.at.next_multiple_of(align) - self.at) as usize).min(chunk.len());
            let mut first = self.buffer();
            first.clear();
            first.extend_from_slice(&chunk[..head]);
            self.submit(first, false)?;
            chunk.copy_within(head.., 0);
            chunk.truncate(chunk.len() - head);
        }
        let whole = chunk.len() / DIRECT_ALIGN * DIRECT_ALIGN;
        buf.extend_from_slice(&chunk[whole..]);
        chunk.truncate(whole);
        self.submit(chunk, true)
    }

    fn submit(&mut self, bytes: DirectVec, direct: bool) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(e) = self.error.lock().take() {
            // Reported once; the file's latch fails every later call.
            return Err(e.into());
        }
        let at = self.at;
        self.at += bytes.len() as u64;
        let sent = self
            .to_writers
            .as_ref()
            .expect("the writers run until finish")
            .send(Job { at, bytes, direct });
        if sent.is_err() {
            // Every writer stopped: one failed. Its error is the answer.
            self.join()?;
            return Err(Error::Failed("the chunk writers stopped".into()));
        }
        Ok(())
    }

    /// Writes what `last` holds (its bytes past the last whole block
    /// through the page cache), ends the writers and returns the file once
    /// everything sent is written (not synced, unless by the writers along
    /// the way), with the offset just past the last byte written.
    pub(crate) fn finish(mut self, mut last: DirectVec) -> Result<(Box<dyn StorageFile>, u64)> {
        self.send(&mut last)?;
        self.submit(last, false)?;
        self.join()?;
        let file = self.file.take().expect("finished once");
        let file = Arc::try_unwrap(file).expect("the writers have ended");
        Ok((file, self.at))
    }

    fn join(&mut self) -> Result<()> {
        self.to_writers = None;
        for writer in self.writers.drain(..) {
            if writer.join().is_err() {
                return Err(Error::Failed("a chunk writer panicked".into()));
            }
        }
        while let Ok(buf) = self.spare.try_recv() {
            self.pool.give(buf);
        }
        match self.error.lock().take() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

impl Drop for ChunkWriter {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// A writer thread: writes each job, returns its buffer; stops at the first
/// error (recorded for the caller) or once the caller hung up.
fn write_jobs(
    jobs: &Receiver<Job>,
    spare: &Sender<DirectVec>,
    file: &dyn StorageFile,
    error: &Mutex<Option<StorageError>>,
) {
    let mut unsynced = 0u64;
    for mut job in jobs {
        let written = if job.direct {
            file.write_direct_at(job.at, &job.bytes)
        } else {
            file.write_at(job.at, &job.bytes).and_then(|()| {
                unsynced += job.bytes.len() as u64;
                if unsynced < SYNC_BYTES {
                    return Ok(());
                }
                unsynced = 0;
                file.sync()
            })
        };
        if let Err(e) = written {
            error.lock().get_or_insert(e);
            return;
        }
        job.bytes.clear();
        let _ = spare.try_send(job.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use epochdb_storage::{SimStorage, Storage};
    use std::path::Path;

    /// Whatever the start offset and chunking, direct or not, the file holds
    /// exactly the bytes sent (the simulated disk refuses a misaligned
    /// direct write, so the carried partial blocks are checked too).
    #[test]
    fn chunk_writer_writes_exactly_the_stream() {
        let disk = SimStorage::new(3);
        let cases = [
            (0u64, vec![10usize, 4086, 4096, 1]),
            (100, vec![5000, 3 << 20, 7, 9 << 20]),
            (4096, vec![WRITE_CHUNK_BYTES, WRITE_CHUNK_BYTES + 3]),
            (4095, vec![1, 1, 1]),
            (32, vec![]),
        ];
        let pool = Arc::new(BufferPool::new(1 << 20));
        for direct in [true, false] {
            for (i, (at, sizes)) in cases.iter().enumerate() {
                let path = Path::new("/").join(format!("f{i}-{direct}"));
                let file = disk.create(&path).unwrap();
                let mut out = ChunkWriter::start(file, *at, "test-writer", pool.clone(), direct);
                let mut buf = out.buffer();
                let mut expected = vec![0u8; *at as usize];
                for (j, &size) in sizes.iter().enumerate() {
                    let chunk: Vec<u8> = (0..size).map(|b| (b * 7 + j) as u8).collect();
                    buf.extend_from_slice(&chunk);
                    expected.extend_from_slice(&chunk);
                    out.send(&mut buf).unwrap();
                }
                buf.extend_from_slice(b"the end");
                expected.extend_from_slice(b"the end");
                let (file, _) = out.finish(buf).unwrap();
                file.sync().unwrap();
                assert_eq!(
                    disk.read(&path).unwrap(),
                    expected,
                    "case {i}, direct {direct}"
                );
            }
        }
    }
}
