//! The algorithmic framework of §2.2 (Interface 1) as two traits, one per
//! thread: [`MutatorScheme`] holds `HandleRead`, `HandleWrite` and
//! `PrepareForNextCheckpoint` (the mutator's `PointOfConsistency` is shared
//! code in `engine.rs`), and [`ImageWriter`] is the body of
//! `AsynchronousWriter::WriteToStableStorage`'s loop.
//!
//! Each algorithm (one module under `algo/`) builds one of each from the
//! initial state. The pair shares memory; the algorithm's argument for why
//! the two threads never touch the same word in conflicting ways within a
//! checkpoint period is written down in its module.

use crate::error::Error;
use crate::format::{CkptHeader, CKPT_END_MAGIC, CKPT_HEADER_BYTES, CKPT_TRAILER_BYTES};
use crate::io::{Storage, StorageFile};

/// Bytes the writer gathers before one append (and one CRC update).
pub(crate) const WRITE_CHUNK_BYTES: usize = 64 * 1024;
const _: () =
    assert!(WRITE_CHUNK_BYTES.is_multiple_of(8) && WRITE_CHUNK_BYTES >= CKPT_HEADER_BYTES);

/// The mutator's half of Interface 1. Called only from the mutator thread.
///
/// Every scheme starts in the configuration the paper draws "at the
/// beginning of time" (Figures 1(a), 2(a)), which already stands for a
/// checkpoint of the initial state being written: the engine notifies the
/// writer for it without calling `prepare_for_next_checkpoint` first.
pub(crate) trait MutatorScheme: Send {
    /// `Mutator::HandleRead(index)`.
    fn handle_read(&self, index: usize) -> u64;
    /// `Mutator::HandleWrite(index, newValue)`.
    fn handle_write(&mut self, index: usize, value: u64);
    /// `Mutator::PrepareForNextCheckpoint()`: called at a point of
    /// consistency, only once the writer has finished the previous
    /// checkpoint, right before the writer is notified of the next one.
    fn prepare_for_next_checkpoint(&mut self);
    /// Size of the application state in words.
    fn words(&self) -> usize;
}

/// The asynchronous writer's half of Interface 1.
pub(crate) trait ImageWriter: Send + 'static {
    /// Whether `write_image` reads the previous checkpoint (Ping-Pong
    /// Merge); only then does the engine open it.
    fn reads_previous(&self) -> bool {
        false
    }
    /// Streams the consistent image of the checkpoint the mutator just
    /// requested into `out`, word 0 first. `prev` is the previous complete
    /// checkpoint, for Ping-Pong's Merge variant; it is `None` on this
    /// writer's first pass, which always writes the whole initial state.
    fn write_image(
        &mut self,
        prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error>;
}

impl ImageWriter for Box<dyn ImageWriter> {
    fn reads_previous(&self) -> bool {
        (**self).reads_previous()
    }
    fn write_image(
        &mut self,
        prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        (**self).write_image(prev, out)
    }
}

/// Where the writer streams checkpoint words: a buffer that goes to the
/// file in [`WRITE_CHUNK_BYTES`] appends, with a running CRC32C.
pub(crate) struct WordSink<'a> {
    file: &'a mut dyn StorageFile,
    buf: Vec<u8>,
    crc: u32,
    words: u64,
}

impl<'a> WordSink<'a> {
    /// Starts a checkpoint file with its header.
    pub(crate) fn new(file: &'a mut dyn StorageFile, header: &CkptHeader) -> Self {
        let mut buf = Vec::with_capacity(WRITE_CHUNK_BYTES + CKPT_TRAILER_BYTES);
        buf.extend_from_slice(&header.encode());
        Self {
            file,
            buf,
            crc: 0,
            words: 0,
        }
    }

    /// Appends one word of the image.
    #[inline]
    pub(crate) fn push(&mut self, word: u64) -> Result<(), Error> {
        self.buf.extend_from_slice(&word.to_le_bytes());
        self.words += 1;
        if self.buf.len() >= WRITE_CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.file.append(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the trailer; returns how many words were pushed. The caller
    /// syncs the file.
    pub(crate) fn finish(mut self) -> Result<u64, Error> {
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.buf.extend_from_slice(&self.crc.to_le_bytes());
        self.buf.extend_from_slice(&CKPT_END_MAGIC);
        self.file.append(&self.buf)?;
        self.buf.clear();
        Ok(self.words)
    }
}

/// The previous complete checkpoint, read back sequentially in chunks
/// (Ping-Pong Merge, §3.3: "reads the most recent checkpoint from disk and
/// applies the new updates before streaming the new checkpoint to disk").
/// Its CRC32C is verified by [`PrevImage::finish`], before the new
/// checkpoint is completed, so a damaged previous image can never produce a
/// new checkpoint that looks valid.
pub(crate) struct PrevImage<'a> {
    storage: &'a dyn Storage,
    name: String,
    expect: CkptHeader,
    /// File offset of `buf[0]`.
    offset: u64,
    buf: Vec<u8>,
    pos: usize,
    crc: u32,
    words_read: u64,
}

impl<'a> PrevImage<'a> {
    /// Opens checkpoint `expect.id`, which must have `expect.words` words.
    pub(crate) fn open(storage: &'a dyn Storage, expect: CkptHeader) -> Result<Self, Error> {
        let name = crate::format::ckpt_slot_name(expect.id);
        let mut header = [0u8; CKPT_HEADER_BYTES];
        let n = storage.read_at(&name, 0, &mut header)?;
        let found = CkptHeader::decode(&name, &header[..n])?;
        if found != expect {
            return Err(Error::Corrupted {
                file: name,
                offset: 0,
                what: "previous checkpoint header (id, tick or size)",
            });
        }
        Ok(Self {
            storage,
            name,
            expect,
            offset: CKPT_HEADER_BYTES as u64,
            buf: Vec::new(),
            pos: 0,
            crc: crc32c::crc32c(&header),
            words_read: 0,
        })
    }

    /// The next word of the previous image.
    #[inline]
    pub(crate) fn next_word(&mut self) -> Result<u64, Error> {
        if self.pos == self.buf.len() {
            self.refill()?;
        }
        let word = u64::from_le_bytes(self.buf[self.pos..self.pos + 8].try_into().expect("8"));
        self.pos += 8;
        self.words_read += 1;
        Ok(word)
    }

    fn refill(&mut self) -> Result<(), Error> {
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.offset += self.buf.len() as u64;
        let left_words = self.expect.words - self.words_read;
        let want = (left_words * 8).min(WRITE_CHUNK_BYTES as u64) as usize;
        self.buf.resize(want, 0);
        self.pos = 0;
        let got = self
            .storage
            .read_at(&self.name, self.offset, &mut self.buf)?;
        if got < want || want == 0 {
            return Err(Error::Torn {
                file: self.name.clone(),
                offset: self.offset + got as u64,
            });
        }
        Ok(())
    }

    /// Checks that every word was read and the CRC32C matches.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        assert_eq!(self.words_read, self.expect.words, "merge read every word");
        self.crc = crc32c::crc32c_append(self.crc, &self.buf[..self.pos]);
        let at = self.offset + self.pos as u64;
        let mut trailer = [0u8; CKPT_TRAILER_BYTES];
        let n = self.storage.read_at(&self.name, at, &mut trailer)?;
        if n < CKPT_TRAILER_BYTES {
            return Err(Error::Torn {
                file: self.name,
                offset: at + n as u64,
            });
        }
        let expected = u32::from_le_bytes(trailer[..4].try_into().expect("4"));
        if expected != self.crc {
            return Err(Error::ChecksumMismatch {
                file: self.name,
                offset: at,
                got: self.crc,
                expected,
            });
        }
        Ok(())
    }
}
