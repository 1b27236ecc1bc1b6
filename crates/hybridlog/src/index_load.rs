//! Loading a fuzzy index checkpoint at recovery (cpr-sigmod19 §6.3–6.4),
//! on several threads while the file is read ahead.
//!
//! The calling thread reads the file in large chunks and walks its block
//! headers; each words block (1 MiB, CRC32C-checked) is handed to a worker
//! that verifies it and stores its buckets, whose position is known from
//! the lengths of the blocks before it. Anything a header alone does not
//! vouch for — the first block, an unexpected kind or length, a block cut
//! short by the end of the file — is decoded on the calling thread exactly
//! as a one-block-at-a-time reader would, and the lowest-offset error is
//! the one reported, so errors (file, offset, reason) are those of that
//! reader whatever the thread count.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use epochdb_storage::{
    decode_block, read_appending, Block, DirectVec, Storage, StorageFile, BLOCK_HEADER_BYTES,
    BLOCK_PAYLOAD_MAX_BYTES, DIRECT_ALIGN,
};

use crate::checkpoint::{
    frame_error, FORMAT_VERSION, INDEX_MAGIC, KIND_INDEX_HEADER, KIND_INDEX_WORDS,
};
use crate::error::{Error, Result};
use crate::index::Index;

/// Bytes read at once (more when a block is larger). Buffers are reused
/// once no worker holds them, so what is faulted in is a few chunks, not
/// the file (on this VM faulting a new page costs more than copying it).
const READ_CHUNK_BYTES: usize = 2 << 20;

/// Reads an index file ahead in large chunks and cuts it into blocks as a
/// one-block-at-a-time reader would. The chunks are read past the page
/// cache (`read_direct_at`) when `direct`: the file is read once, and the
/// cache's copy and page bookkeeping would run on the cores that load the
/// blocks.
struct BlockReader<'a> {
    file: Box<dyn StorageFile + 'a>,
    direct: bool,
    /// The file's bytes from `data_offset` on (shared with workers). Its
    /// end, `data_offset + data.len()`, is block-aligned until the file's
    /// last read.
    data: Arc<DirectVec>,
    data_offset: u64,
    /// Where the next block starts in `data`.
    at: usize,
    /// The last read came back short: there is no more.
    eof: bool,
    /// Buffers read before, to reuse once no worker holds them.
    retired: Vec<Arc<DirectVec>>,
}

impl BlockReader<'_> {
    /// File offset of the next block.
    fn offset(&self) -> u64 {
        self.data_offset + self.at as u64
    }

    /// Makes `data[at..]` hold at least `need` bytes, or all that is left.
    fn fill(&mut self, need: usize) -> Result<()> {
        let kept = self.data.len() - self.at;
        if kept >= need || self.eof {
            return Ok(());
        }
        let want = (need - kept)
            .max(READ_CHUNK_BYTES)
            .next_multiple_of(DIRECT_ALIGN);
        // The kept bytes go just below a block boundary of the new buffer,
        // so that the read lands on one.
        let pad = kept.next_multiple_of(DIRECT_ALIGN) - kept;
        let mut next = self.spare();
        next.reserve(pad + kept + want);
        next.resize(pad, 0);
        next.extend_from_slice(&self.data[self.at..]);
        let from = self.data_offset + self.data.len() as u64;
        let n = read_appending(&*self.file, from, want, &mut next, self.direct)?;
        self.eof = n < want;
        // `from` is aligned and holds the kept bytes below it: no underflow.
        self.data_offset = from - (pad + kept) as u64;
        self.at = pad;
        let old = std::mem::replace(&mut self.data, Arc::new(next));
        self.retired.push(old);
        Ok(())
    }

    /// An empty buffer: a retired one no worker holds any more, or a new
    /// one.
    fn spare(&mut self) -> DirectVec {
        let free = self.retired.iter().position(|b| Arc::strong_count(b) == 1);
        let mut buf = free
            .and_then(|i| Arc::try_unwrap(self.retired.swap_remove(i)).ok())
            .unwrap_or_default();
        buf.clear();
        buf
    }

    /// The next block's bytes in `data` — its header's length of them, or
    /// what the file has left — or `None` at the end of the file.
    fn next_block(&mut self) -> Result<Option<Range<usize>>> {
        self.fill(BLOCK_HEADER_BYTES)?;
        let left = self.data.len() - self.at;
        if left == 0 {
            return Ok(None);
        }
        let len = if left >= BLOCK_HEADER_BYTES {
            let at = self.at + 8;
            u32::from_le_bytes(self.data[at..at + 4].try_into().expect("4")) as usize
        } else {
            0
        };
        let total = BLOCK_HEADER_BYTES + len.min(BLOCK_PAYLOAD_MAX_BYTES);
        self.fill(total)?;
        let left = self.data.len() - self.at;
        Ok(Some(self.at..self.at + total.min(left)))
    }
}

/// A words block for a worker: `data[range]` is the block at file offset
/// `offset`, whose words belong at bucket `first_bucket`.
struct Job {
    data: Arc<DirectVec>,
    range: Range<usize>,
    offset: u64,
    first_bucket: usize,
}

/// Errors found so far, by file offset; the lowest is the answer.
struct Errors {
    lowest: AtomicU64,
    found: Mutex<Vec<(u64, Error)>>,
}

impl Errors {
    fn add(&self, offset: u64, error: Error) {
        self.lowest.fetch_min(offset, Relaxed);
        self.found
            .lock()
            .expect("not poisoned")
            .push((offset, error));
    }

    fn into_lowest(self) -> Option<Error> {
        let found = self.found.into_inner().expect("not poisoned");
        found.into_iter().min_by_key(|(at, _)| *at).map(|(_, e)| e)
    }
}

/// Decodes the block `bytes`, found at file offset `offset` (a frame
/// error is reported at its offset in the file).
fn decode_at<'a>(path: &Path, bytes: &'a [u8], offset: u64) -> Result<Option<Block<'a>>> {
    match decode_block(bytes, 0, INDEX_MAGIC) {
        // A checksummed block of a format this build does not read (or
        // damage behind the checksum): refused, as inspect flags it.
        Ok(Some((block, _))) if block.version != FORMAT_VERSION => Err(Error::Corrupted {
            file: path.to_path_buf(),
            offset,
            reason: format!("index block of format version {}", block.version),
        }),
        Ok(found) => Ok(found.map(|(block, _)| block)),
        Err(e) => {
            let mut error = frame_error(path, e);
            if let Error::Corrupted { offset: at, .. } = &mut error {
                *at += offset;
            }
            Err(error)
        }
    }
}

/// Stores a words block's payload at `first_bucket` (errors: see
/// [`Index::load_words`]).
fn load(
    index: &Index,
    first_bucket: usize,
    payload: &[u8],
    words: &mut Vec<u64>,
) -> std::result::Result<(), String> {
    words.clear();
    words.extend(
        payload
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8"))),
    );
    index.load_words(first_bucket, words)
}

/// Reads a fuzzy index checkpoint into a new index with `threads` workers
/// (at least one) besides the reading thread, past the page cache if
/// `direct`: returns the index and the bytes of bucket words loaded.
pub(crate) fn read_index(
    storage: &dyn Storage,
    path: &Path,
    threads: usize,
    huge_pages: bool,
    direct: bool,
) -> Result<(Index, u64)> {
    let corrupt = |offset: u64, reason: String| Error::Corrupted {
        file: path.to_path_buf(),
        offset,
        reason,
    };
    let mut reader = BlockReader {
        file: storage.open(path)?,
        direct,
        data: Arc::new(DirectVec::default()),
        data_offset: 0,
        at: 0,
        eof: false,
        retired: Vec::new(),
    };
    // The first block names the index's size.
    let no_header = || corrupt(0, "no index header".into());
    let first = reader.next_block()?.ok_or_else(no_header)?;
    let block = decode_at(path, &reader.data[first.clone()], 0)?.ok_or_else(no_header)?;
    if block.kind != KIND_INDEX_HEADER || block.payload.len() != 16 {
        return Err(corrupt(0, format!("unexpected block kind {}", block.kind)));
    }
    let b = u64::from_le_bytes(block.payload[..8].try_into().expect("8"));
    let o = u64::from_le_bytes(block.payload[8..].try_into().expect("8"));
    if !b.is_power_of_two() || b > 1 << 40 || o > 1 << 40 {
        return Err(corrupt(0, format!("index of {b} buckets, {o} overflow")));
    }
    check_room(storage, path, b, o)?;
    let total_words = (b + o) as usize * 8;
    let index = Index::with_overflow(b as usize, o, huge_pages);
    reader.at = first.end;

    let errors = Errors {
        lowest: AtomicU64::new(u64::MAX),
        found: Mutex::new(Vec::new()),
    };
    let mut loaded_words = 0usize;
    let threads = threads.max(1);
    let (to_workers, work) = crossbeam_channel::bounded::<Job>(2 * threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let work = work.clone();
                let (index, errors) = (&index, &errors);
                scope.spawn(move || {
                    let mut words = Vec::new();
                    for job in work {
                        if job.offset >= errors.lowest.load(Relaxed) {
                            continue;
                        }
                        match decode_at(path, &job.data[job.range.clone()], job.offset) {
                            Ok(Some(block)) => {
                                if let Err(reason) =
                                    load(index, job.first_bucket, block.payload, &mut words)
                                {
                                    errors.add(job.offset, corrupt(job.offset, reason));
                                }
                            }
                            Ok(None) => unreachable!("a block is never empty"),
                            Err(e) => errors.add(job.offset, e),
                        }
                    }
                })
            })
            .collect();
        drop(work);
        let mut words = Vec::new();
        while reader.offset() < errors.lowest.load(Relaxed) {
            let offset = reader.offset();
            let range = match reader.next_block() {
                Ok(Some(range)) => range,
                Ok(None) => break,
                Err(e) => {
                    errors.add(offset, e);
                    break;
                }
            };
            let bytes = &reader.data[range.clone()];
            let payload = range.len() - BLOCK_HEADER_BYTES.min(range.len());
            let whole = bytes.len() >= BLOCK_HEADER_BYTES
                && u32::from_le_bytes(bytes[8..12].try_into().expect("4")) as usize == payload;
            let kind = whole.then(|| u16::from_le_bytes(bytes[6..8].try_into().expect("2")));
            let fits = |len: usize| len.is_multiple_of(64) && loaded_words + len / 8 <= total_words;
            if kind == Some(KIND_INDEX_WORDS) && fits(payload) {
                // The worker's checksum covers the header read here.
                let job = Job {
                    data: reader.data.clone(),
                    range: range.clone(),
                    offset,
                    first_bucket: loaded_words / 8,
                };
                loaded_words += payload / 8;
                if to_workers.send(job).is_err() {
                    break;
                }
            } else {
                // Off the happy path: decode here, as one block at a time.
                match decode_at(path, bytes, offset) {
                    Ok(Some(block))
                        if block.kind == KIND_INDEX_WORDS && fits(block.payload.len()) =>
                    {
                        if let Err(reason) =
                            load(&index, loaded_words / 8, block.payload, &mut words)
                        {
                            errors.add(offset, corrupt(offset, reason));
                            break;
                        }
                        loaded_words += block.payload.len() / 8;
                    }
                    Ok(Some(block)) => {
                        let reason = format!("unexpected block kind {}", block.kind);
                        errors.add(offset, corrupt(offset, reason));
                        break;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        errors.add(offset, e);
                        break;
                    }
                }
            }
            reader.at = range.end;
        }
        drop(to_workers);
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    if let Some(error) = errors.into_lowest() {
        return Err(error);
    }
    if loaded_words != total_words {
        return Err(corrupt(
            reader.offset(),
            format!("index has {loaded_words} of its {total_words} words"),
        ));
    }
    Ok((index, loaded_words as u64 * 8))
}

/// Refuses an index header that names more buckets than the file could
/// hold (a bug's header behind a valid checksum, or a cut file), before the
/// index's memory is mapped for them.
fn check_room(storage: &dyn Storage, path: &Path, buckets: u64, overflow: u64) -> Result<()> {
    let needs = (buckets + overflow) * 64;
    let has = storage.len(path)?;
    if needs > has {
        return Err(Error::Corrupted {
            file: path.to_path_buf(),
            offset: 0,
            reason: format!(
                "index of {buckets} buckets and {overflow} overflow needs {needs} bytes; the file has {has}"
            ),
        });
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The loader against the one-block-at-a-time reader it replaces (kept
    //! here as the reference): the same index, or the same error, for
    //! files damaged in many ways, with one and several threads.
    use super::*;
    use crate::checkpoint::{index_name, write_index};
    use epochdb_storage::{replace_atomically, SimStorage};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// The reader recovery used before loading in parallel.
    fn one_block_at_a_time(storage: &dyn Storage, path: &Path) -> Result<(Index, u64)> {
        let file = storage.open(path)?;
        let corrupt = |offset: u64, reason: String| Error::Corrupted {
            file: path.to_path_buf(),
            offset,
            reason,
        };
        let mut offset = 0u64;
        let mut buf = Vec::new();
        let mut index: Option<(Index, usize, u64)> = None;
        let mut loaded_words = 0usize;
        loop {
            let mut header = [0u8; epochdb_storage::BLOCK_HEADER_BYTES];
            let n = file.read_at(offset, &mut header)?;
            if n == 0 {
                break;
            }
            let len = if n == header.len() {
                u32::from_le_bytes(header[8..12].try_into().expect("4")) as usize
            } else {
                0
            };
            let total = epochdb_storage::BLOCK_HEADER_BYTES
                + len.min(epochdb_storage::BLOCK_PAYLOAD_MAX_BYTES);
            buf.resize(total, 0);
            let n = file.read_at(offset, &mut buf)?;
            buf.truncate(n);
            let block = match epochdb_storage::decode_block(&buf, 0, INDEX_MAGIC) {
                Ok(Some((block, _))) => block,
                Ok(None) => break,
                Err(e) => {
                    let mut error = frame_error(path, e);
                    if let Error::Corrupted { offset: at, .. } = &mut error {
                        *at += offset;
                    }
                    return Err(error);
                }
            };
            match (block.kind, &index) {
                (KIND_INDEX_HEADER, None) if block.payload.len() == 16 => {
                    let b = u64::from_le_bytes(block.payload[..8].try_into().expect("8"));
                    let o = u64::from_le_bytes(block.payload[8..].try_into().expect("8"));
                    if !b.is_power_of_two() || b > 1 << 40 || o > 1 << 40 {
                        return Err(corrupt(
                            offset,
                            format!("index of {b} buckets, {o} overflow"),
                        ));
                    }
                    check_room(storage, path, b, o)?;
                    let total_words = (b + o) as usize * 8;
                    index = Some((Index::with_overflow(b as usize, o, true), total_words, o));
                }
                (KIND_INDEX_WORDS, Some((idx, total_words, _)))
                    if block.payload.len().is_multiple_of(64)
                        && loaded_words + block.payload.len() / 8 <= *total_words =>
                {
                    let words: Vec<u64> = block
                        .payload
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
                        .collect();
                    idx.load_words(loaded_words / 8, &words)
                        .map_err(|reason| corrupt(offset, reason))?;
                    loaded_words += words.len();
                }
                (kind, _) => {
                    return Err(corrupt(offset, format!("unexpected block kind {kind}")));
                }
            }
            offset += buf.len() as u64;
        }
        let Some((index, total_words, _)) = index else {
            return Err(corrupt(0, "no index header".into()));
        };
        if loaded_words != total_words {
            return Err(corrupt(
                offset,
                format!("index has {loaded_words} of its {total_words} words"),
            ));
        }
        Ok((index, loaded_words as u64 * 8))
    }

    fn outcome(result: Result<(Index, u64)>) -> String {
        match result {
            Ok((index, bytes)) => format!("Ok {bytes} {:?}", index.fuzzy_words()),
            Err(e) => format!("Err {e:?}"),
        }
    }

    /// A header (with a valid checksum) naming far more buckets than the
    /// file holds is reported, by both readers, instead of mapping memory
    /// for them (2^40 buckets would be 64 TiB).
    #[test]
    fn a_header_naming_more_buckets_than_the_file_holds_is_refused() {
        let disk = SimStorage::new(3);
        let dir = Path::new("/ix");
        disk.create_dir_all(dir).unwrap();
        let path = dir.join("lying.dat");
        for (buckets, overflow) in [(1u64 << 40, 0u64), (1 << 10, 1 << 40), (1 << 4, 1)] {
            let mut payload = buckets.to_le_bytes().to_vec();
            payload.extend_from_slice(&overflow.to_le_bytes());
            let mut bytes = Vec::new();
            epochdb_storage::encode_block(
                &mut bytes,
                INDEX_MAGIC,
                crate::checkpoint::FORMAT_VERSION,
                KIND_INDEX_HEADER,
                &payload,
            );
            replace_atomically(&disk, &path, &bytes).unwrap();
            for result in [
                read_index(&disk, &path, 2, true, true),
                one_block_at_a_time(&disk, &path),
            ] {
                let error = outcome(result);
                assert!(
                    error.contains("Corrupted") && error.contains("the file has"),
                    "{buckets} buckets, {overflow} overflow: {error}"
                );
            }
        }
    }

    #[test]
    fn damaged_index_files_give_the_reference_readers_answer() {
        // Over 8 MiB (more than one read chunk), with overflow buckets.
        let index = Index::new(1 << 17);
        for i in 0..(1u64 << 17) {
            let tags = if i < 32 { 12 } else { 1 };
            for tag in 1..=tags {
                let mut entry = index.find_or_create((tag << 48) | i);
                assert!(entry.try_update(64 + i * 8 + tag));
            }
        }
        let disk = SimStorage::new(9);
        let dir = Path::new("/ix");
        disk.create_dir_all(dir).unwrap();
        write_index(
            &disk,
            dir,
            1,
            &index,
            &crate::checkpoint::CheckpointBuffers::default(),
            true,
        )
        .unwrap()
        .1
        .make_durable(&disk)
        .unwrap();
        let good = disk.read(&dir.join(index_name(1))).unwrap();
        let block = BLOCK_HEADER_BYTES + (1 << 20);
        let first = BLOCK_HEADER_BYTES + 16;
        let mut rng = SmallRng::seed_from_u64(17);
        let path = dir.join("damaged.dat");
        for case in 0..48 {
            let mut bytes = good.clone();
            match case % 6 {
                // A bit anywhere.
                0 => {
                    let bit = rng.gen_range(0..bytes.len() * 8);
                    bytes[bit / 8] ^= 1 << (bit % 8);
                }
                // A bit in a block header (kind, length, checksum …).
                1 | 2 => {
                    let k = rng.gen_range(0..good.len().div_ceil(block) - 1);
                    let at = first + k * block + rng.gen_range(0..BLOCK_HEADER_BYTES);
                    bytes[at] ^= 1 << rng.gen_range(0..8);
                }
                // Cut anywhere, or at a block boundary.
                3 => bytes.truncate(rng.gen_range(0..bytes.len())),
                4 => {
                    let k = rng.gen_range(0..good.len() / block);
                    bytes.truncate(first + k * block);
                }
                // Two payload bits in blocks far apart: the lower is named.
                _ => {
                    for k in [6, 1] {
                        let at = first + k * block + BLOCK_HEADER_BYTES + rng.gen_range(0..1 << 20);
                        bytes[at] ^= 0x10;
                    }
                }
            }
            replace_atomically(&disk, &path, &bytes).unwrap();
            let want = outcome(one_block_at_a_time(&disk, &path));
            for threads in [1, 4] {
                let got = outcome(read_index(&disk, &path, threads, true, threads % 2 == 0));
                assert!(
                    got == want,
                    "case {case}, {threads} threads: {got:.300} != {want:.300}"
                );
            }
        }
        let want = outcome(one_block_at_a_time(&disk, &dir.join(index_name(1))));
        assert!(want.starts_with("Ok"));
        assert!(outcome(read_index(&disk, &dir.join(index_name(1)), 3, true, false)) == want);
    }
}
