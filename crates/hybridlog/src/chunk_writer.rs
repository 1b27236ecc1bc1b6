//! A file written by a second thread in large chunks, so that the disk
//! writes chunk k while the caller fills chunk k+1 (snapshot files and
//! index checkpoints: copying and checksumming overlap writing). The writer
//! syncs every [`SYNC_BYTES`], so the final sync, after the last chunk,
//! has little left to do; a single sync at the end would leave the disk
//! idle until then.

use crossbeam_channel::{Receiver, Sender};
use epochdb_storage::{DirectBuffer, StorageFile, DIRECT_ALIGN};

use crate::error::{Error, Result};

/// Bytes gathered before one write (sequential writes of this size run at
/// the disk's speed).
pub(crate) const WRITE_CHUNK_BYTES: usize = 8 << 20;
/// Bytes written between two syncs of a file being written.
pub(crate) const SYNC_BYTES: u64 = 32 << 20;

/// The writer thread and the buffers going to and coming back from it.
/// At most one chunk waits while one is written. Any error of the writer
/// is returned by the next [`ChunkWriter::send`] or by
/// [`ChunkWriter::finish`]. Dropped unfinished, the writer writes what it
/// was sent and ends.
pub(crate) struct ChunkWriter {
    to_writer: Option<Sender<Vec<u8>>>,
    spare: Receiver<Vec<u8>>,
    writer: Option<std::thread::JoinHandle<Result<Box<dyn StorageFile>>>>,
    capacity: usize,
}

impl ChunkWriter {
    /// Starts a thread named `name` that writes the chunks it is sent to
    /// `file`, one after the other from offset `at`. New buffers are made
    /// with `capacity` bytes.
    /// With `direct`, the writes go past the page cache
    /// ([`StorageFile::write_direct_at`]) through an aligned staging buffer
    /// (see [`DirectStage`]); the file's bytes are the same either way.
    pub(crate) fn start(
        file: Box<dyn StorageFile>,
        at: u64,
        name: &str,
        capacity: usize,
        direct: bool,
    ) -> Self {
        let (to_writer, from_caller) = crossbeam_channel::bounded::<Vec<u8>>(1);
        let (to_spare, spare) = crossbeam_channel::bounded::<Vec<u8>>(2);
        let writer = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || -> Result<Box<dyn StorageFile>> {
                let mut at = at;
                let mut unsynced = 0u64;
                let mut stage = direct.then(|| DirectStage::new(at));
                for mut chunk in from_caller {
                    match &mut stage {
                        Some(stage) => stage.write(file.as_ref(), &chunk)?,
                        None => file.write_at(at, &chunk)?,
                    }
                    at += chunk.len() as u64;
                    unsynced += chunk.len() as u64;
                    if unsynced >= SYNC_BYTES {
                        file.sync()?;
                        unsynced = 0;
                    }
                    chunk.clear();
                    let _ = to_spare.try_send(chunk);
                }
                if let Some(stage) = stage {
                    stage.finish(file.as_ref())?;
                }
                Ok(file)
            })
            .expect("spawn a chunk writer");
        ChunkWriter {
            to_writer: Some(to_writer),
            spare,
            writer: Some(writer),
            capacity,
        }
    }

    /// An empty buffer: one the writer is done with, or a new one.
    pub(crate) fn buffer(&self) -> Vec<u8> {
        self.spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.capacity))
    }

    /// Hands `chunk` to the writer (waiting while one chunk already waits).
    pub(crate) fn send(&mut self, chunk: Vec<u8>) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let sent = self
            .to_writer
            .as_ref()
            .expect("the writer runs until finish")
            .send(chunk);
        if sent.is_err() {
            // The writer stopped: it failed. Its error is the answer.
            self.join()?;
            return Err(Error::Failed("a chunk writer stopped".into()));
        }
        Ok(())
    }

    /// Ends the writer thread; returns the file once everything sent is
    /// written (not synced since the last [`SYNC_BYTES`]).
    pub(crate) fn finish(mut self) -> Result<Box<dyn StorageFile>> {
        self.join()
    }

    fn join(&mut self) -> Result<Box<dyn StorageFile>> {
        self.to_writer = None;
        match self.writer.take().expect("joined once").join() {
            Ok(result) => result,
            Err(_) => Err(Error::Failed("a chunk writer panicked".into())),
        }
    }
}

/// Bytes staged for one direct write.
const STAGE_BYTES: usize = 8 << 20;

/// Turns a stream of chunks of any length, written from any offset, into
/// [`DIRECT_ALIGN`]-aligned direct writes: the bytes before the first
/// aligned offset are written through the page cache, then whole aligned
/// blocks are staged in an aligned buffer and written directly, and the
/// unaligned rest (under one block) is written through the page cache at
/// the end. So the file holds exactly the bytes sent, no padding.
pub(crate) struct DirectStage {
    buffer: DirectBuffer,
    /// Bytes in `buffer`, which starts at file offset `at` (aligned) —
    /// before that, `head` bytes still go to an unaligned start.
    filled: usize,
    at: u64,
    /// Unaligned start: the file offset and how many bytes it still wants.
    head: (u64, usize),
}

impl DirectStage {
    pub(crate) fn new(at: u64) -> Self {
        let aligned = at.next_multiple_of(DIRECT_ALIGN as u64);
        DirectStage {
            buffer: DirectBuffer::zeroed(STAGE_BYTES),
            filled: 0,
            at: aligned,
            head: (at, (aligned - at) as usize),
        }
    }

    pub(crate) fn write(
        &mut self,
        file: &dyn StorageFile,
        mut data: &[u8],
    ) -> std::result::Result<(), epochdb_storage::StorageError> {
        if self.head.1 > 0 {
            let take = self.head.1.min(data.len());
            file.write_at(self.head.0, &data[..take])?;
            self.head = (self.head.0 + take as u64, self.head.1 - take);
            data = &data[take..];
        }
        while !data.is_empty() {
            let take = (STAGE_BYTES - self.filled).min(data.len());
            self.buffer.as_mut_slice()[self.filled..self.filled + take]
                .copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled == STAGE_BYTES {
                self.flush_whole_blocks(file)?;
            }
        }
        Ok(())
    }

    /// Writes the staged whole blocks directly and moves the rest to the
    /// buffer's start.
    fn flush_whole_blocks(
        &mut self,
        file: &dyn StorageFile,
    ) -> std::result::Result<(), epochdb_storage::StorageError> {
        let whole = self.filled / DIRECT_ALIGN * DIRECT_ALIGN;
        if whole > 0 {
            file.write_direct_at(self.at, &self.buffer.as_slice()[..whole])?;
            self.buffer
                .as_mut_slice()
                .copy_within(whole..self.filled, 0);
            self.filled -= whole;
            self.at += whole as u64;
        }
        Ok(())
    }

    /// Writes everything still staged: whole blocks directly, the rest
    /// through the page cache.
    pub(crate) fn finish(
        mut self,
        file: &dyn StorageFile,
    ) -> std::result::Result<(), epochdb_storage::StorageError> {
        self.flush_whole_blocks(file)?;
        if self.filled > 0 {
            file.write_at(self.at, &self.buffer.as_slice()[..self.filled])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use epochdb_storage::{SimStorage, Storage};
    use std::path::Path;

    /// Whatever the start offset and chunking, the file holds exactly the
    /// bytes sent (the simulated disk refuses a misaligned direct write).
    #[test]
    fn direct_stage_writes_exactly_the_stream() {
        let disk = SimStorage::new(3);
        for (i, (at, sizes)) in [
            (0u64, vec![10usize, 4086, 4096, 1]),
            (100, vec![5000, 3 << 20, 7, 9 << 20]),
            (4096, vec![STAGE_BYTES, STAGE_BYTES + 3]),
            (4095, vec![1, 1, 1]),
        ]
        .into_iter()
        .enumerate()
        {
            let path = Path::new("/").join(format!("f{i}"));
            let file = disk.create(&path).unwrap();
            let mut stage = DirectStage::new(at);
            let mut expected = vec![0u8; at as usize];
            for (j, size) in sizes.into_iter().enumerate() {
                let chunk: Vec<u8> = (0..size).map(|b| (b * 7 + j) as u8).collect();
                stage.write(file.as_ref(), &chunk).unwrap();
                expected.extend_from_slice(&chunk);
            }
            stage.finish(file.as_ref()).unwrap();
            assert_eq!(disk.read(&path).unwrap(), expected, "case {i}");
        }
    }
}
