//! A file written by a second thread in large chunks, so that the disk
//! writes chunk k while the caller fills chunk k+1 (snapshot files and
//! index checkpoints: copying and checksumming overlap writing). The writer
//! syncs every [`SYNC_BYTES`], so the final sync, after the last chunk,
//! has little left to do; a single sync at the end would leave the disk
//! idle until then.

use crossbeam_channel::{Receiver, Sender};
use epochdb_storage::StorageFile;

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
    pub(crate) fn start(file: Box<dyn StorageFile>, at: u64, name: &str, capacity: usize) -> Self {
        let (to_writer, from_caller) = crossbeam_channel::bounded::<Vec<u8>>(1);
        let (to_spare, spare) = crossbeam_channel::bounded::<Vec<u8>>(2);
        let writer = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || -> Result<Box<dyn StorageFile>> {
                let mut at = at;
                let mut unsynced = 0u64;
                for mut chunk in from_caller {
                    file.write_at(at, &chunk)?;
                    at += chunk.len() as u64;
                    unsynced += chunk.len() as u64;
                    if unsynced >= SYNC_BYTES {
                        file.sync()?;
                        unsynced = 0;
                    }
                    chunk.clear();
                    let _ = to_spare.try_send(chunk);
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
