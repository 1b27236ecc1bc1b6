//! Recovery's log replay (cpr-sigmod19 §6.4), parallel and overlapped with
//! reading: the calling thread reads `[max(l_h, begin), l_e)` in large
//! page-aligned chunks into a small pool of recycled buffers, while
//! `threads` workers decode the chunks already read and set the index.
//!
//! With `Config::direct_io` the chunks are read past the page cache
//! (`read_direct_at`), as the log was written: the log is read once, so
//! the cache would only cost the reading thread a copy of every byte and
//! its page bookkeeping, on the cores the replay needs.
//!
//! Why order between workers does not matter: a key's newest record in
//! the checkpoint is its highest address (the log is append-only), so a
//! worker raises an entry only to a *higher* address
//! ([`Index::set_max`], a CAS loop). The fuzzy index's own value for an
//! entry is either below the replayed range or is itself a replayed record
//! (it points below `l_i ≤ l_e`), so the maximum equals what a replay in
//! address order leaves. A new tag goes into the first empty slot of its
//! chain by one CAS (`set_max`'s replay-only insert: nothing else changes
//! the index during recovery), so two workers never create one tag twice.
//!
//! Errors are reported as the sequential replay did: the lowest-addressed
//! one wins. A worker stops its chunk at its first malformed record; a
//! short read ends reading, and the page it ends in is not decoded (the
//! sequential replay read a page before decoding it). An I/O error is
//! placed at the start of the chunk whose read failed.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use epochdb_storage::{read_appending, DirectVec, StorageFile};

use crate::checkpoint::Metadata;
use crate::error::{Error, Result};
use crate::index::Index;
use crate::record::{hash_key, record_version, Header, Layout};
use crate::recovery::piece_mismatch;
use crate::sums::Check;

/// Bytes read at once (at least a page): sequential reads this large run
/// at the disk's speed, and a chunk is a worker's unit of work.
pub(crate) const READ_CHUNK_BYTES: u64 = 8 << 20;
/// Memory for chunks in flight (read, waiting or being decoded); at least
/// two chunks are always allowed, so reading overlaps decoding.
const IN_FLIGHT_BYTES_MAX: u64 = 256 << 20;

/// The replay threads to use for `requested` (0: one per available core).
pub(crate) fn replay_threads(requested: usize) -> usize {
    if requested != 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bytes per chunk: [`READ_CHUNK_BYTES`], or less for a short log so that
/// every thread gets several chunks; never less than a page. A power of
/// two at least a page: a chunk is whole pages.
fn chunk_bytes(range: u64, page_bits: u32, threads: usize) -> u64 {
    let page_bytes = 1u64 << page_bits;
    (range / (4 * threads as u64))
        .max(1)
        .next_power_of_two()
        .clamp(page_bytes, READ_CHUNK_BYTES.max(page_bytes))
}

/// A read piece of the log: `buf` holds `[start, start + buf.len())`,
/// whole pages from a page boundary (the last may end at `l_e`). Pages
/// are at least [`epochdb_storage::DIRECT_ALIGN`], so `start` is aligned for
/// a direct read.
struct Chunk {
    start: u64,
    buf: DirectVec,
}

/// What replay hands back: the version-(v+1) records at or above `l_s`
/// (sorted), which are not part of the checkpoint.
pub(crate) fn replay(
    file: &dyn StorageFile,
    path: &Path,
    index: &Index,
    meta: &Metadata,
    threads: usize,
    direct: bool,
    checks: &[Check],
) -> Result<Vec<u64>> {
    let threads = threads.max(1);
    // Below begin the log was truncated: records there are gone (§ log
    // truncation in the README).
    let first = meta.l_h.max(meta.begin);
    if first >= meta.l_e {
        return Ok(Vec::new());
    }
    let chunk_bytes = chunk_bytes(meta.l_e - first, meta.page_bits, threads);
    let buffers = (IN_FLIGHT_BYTES_MAX / chunk_bytes).clamp(2, threads as u64 + 2) as usize;
    // The lowest address of an error found so far: nothing above it needs
    // reading or decoding.
    let lowest_error = AtomicU64::new(u64::MAX);
    let errors: Mutex<Vec<(u64, Error)>> = Mutex::new(Vec::new());
    let found = |at: u64, error: Error| {
        lowest_error.fetch_min(at, Relaxed);
        errors.lock().expect("not poisoned").push((at, error));
    };
    let (to_workers, work) = crossbeam_channel::bounded::<Chunk>(buffers);
    let (to_reader, spare) = crossbeam_channel::bounded::<DirectVec>(buffers);
    let mut invalid = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let work = work.clone();
                let to_reader = to_reader.clone();
                let found = &found;
                let lowest_error = &lowest_error;
                scope.spawn(move || {
                    let mut invalid = Vec::new();
                    for chunk in work {
                        if chunk.start < lowest_error.load(Relaxed) {
                            let from = first.max(chunk.start);
                            if let Err((at, error)) =
                                verify_chunk(&chunk, path, checks).and_then(|()| {
                                    replay_chunk(&chunk, from, path, index, meta, &mut invalid)
                                })
                            {
                                found(at, error);
                            }
                        }
                        // The reader may have stopped: then nobody wants it.
                        let _ = to_reader.try_send(chunk.buf);
                    }
                    invalid
                })
            })
            .collect();
        drop((work, to_reader));
        let mut allocated = 0;
        let mut start = (first >> meta.page_bits) << meta.page_bits;
        while start < meta.l_e && start < lowest_error.load(Relaxed) {
            let end = (start + chunk_bytes).min(meta.l_e);
            let mut buf = match spare.try_recv() {
                Ok(buf) => buf,
                Err(_) if allocated < buffers => {
                    allocated += 1;
                    DirectVec::default()
                }
                Err(_) => match spare.recv() {
                    Ok(buf) => buf,
                    // Every worker is gone (one panicked: the scope says so).
                    Err(_) => break,
                },
            };
            // The last chunk ends at l_e, not at a block boundary.
            let want = (end - start) as usize;
            buf.clear();
            let n = match read_appending(file, start, want, &mut buf, direct) {
                Ok(n) => n,
                Err(e) => {
                    found(start, e.into());
                    break;
                }
            };
            let short = n < want;
            if short {
                // Decode the whole pages read; the page the log ends in was
                // never decoded by a page-at-a-time replay either.
                buf.truncate(((n as u64 >> meta.page_bits) << meta.page_bits) as usize);
                found(
                    start + n as u64,
                    Error::Corrupted {
                        file: path.to_path_buf(),
                        offset: start + n as u64,
                        reason: format!("log ends before the checkpoint's end {}", meta.l_e),
                    },
                );
            }
            if !buf.is_empty() && to_workers.send(Chunk { start, buf }).is_err() {
                break;
            }
            if short {
                break;
            }
            start = end;
        }
        drop(to_workers);
        let mut invalid = Vec::new();
        for worker in workers {
            match worker.join() {
                Ok(mut some) => invalid.append(&mut some),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        invalid
    });
    let errors = errors.into_inner().expect("not poisoned");
    if let Some((_, error)) = errors.into_iter().min_by_key(|(at, _)| *at) {
        return Err(error);
    }
    invalid.sort_unstable();
    Ok(invalid)
}

/// Checks the bytes of every piece that lies in `chunk` against its
/// checksum (`sums.rs`); the first that fails is the error.
fn verify_chunk(
    chunk: &Chunk,
    path: &Path,
    checks: &[Check],
) -> std::result::Result<(), (u64, Error)> {
    let end = chunk.start + chunk.buf.len() as u64;
    let first = checks.partition_point(|c| c.piece.from < chunk.start);
    for check in &checks[first..] {
        if check.piece.to > end {
            break;
        }
        let from = (check.piece.from - chunk.start) as usize;
        let to = (check.piece.to - chunk.start) as usize;
        if !check.matches(&chunk.buf[from..to]) {
            return Err((check.piece.from, piece_mismatch(path, &check.piece)));
        }
    }
    Ok(())
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Replays the records of one chunk from address `from` (in its first
/// page), page by page; stops at the first malformed record and returns
/// it with its address.
fn replay_chunk(
    chunk: &Chunk,
    from: u64,
    path: &Path,
    index: &Index,
    meta: &Metadata,
    invalid: &mut Vec<u64>,
) -> std::result::Result<(), (u64, Error)> {
    let page_bytes = 1usize << meta.page_bits;
    let excluded = record_version(meta.version + 1);
    let layout = Layout::new(meta.layout);
    let mut batch = Batch::default();
    for (i, page) in chunk.buf.chunks(page_bytes).enumerate() {
        let page_start = chunk.start + (i * page_bytes) as u64;
        let mut offset = from.saturating_sub(page_start) as usize;
        while !layout.page_end(page, offset) {
            let (key_len, value_len) = layout.lengths_in(&page[offset..]);
            let size = layout.record_bytes(key_len, value_len);
            let record = page_start + offset as u64;
            let malformed = |reason: String| {
                let file = path.to_path_buf();
                let error = Error::Corrupted {
                    file,
                    offset: record,
                    reason,
                };
                Err((record, error))
            };
            if key_len == 0 || offset + size > page.len() {
                return malformed(format!(
                    "malformed record (key {key_len} bytes, value {value_len} bytes)"
                ));
            }
            let header = Header(u64_at(page, offset));
            if header.previous() >= record {
                // A chain always points back: the header is damaged.
                let previous = header.previous();
                return malformed(format!(
                    "record's previous address {previous} is not below it"
                ));
            }
            if !header.invalid() {
                if record >= meta.l_s && header.version() == excluded {
                    invalid.push(record);
                } else {
                    let key_at = offset + layout.header_bytes();
                    let key = &page[key_at..key_at + key_len];
                    batch.push(index, hash_key(key), record);
                }
            }
            offset += size;
        }
    }
    batch.apply(index);
    Ok(())
}

/// Updates in flight per [`Batch`] (8 measured slower, 32 no faster).
const BATCH_RECORDS: usize = 16;

/// Index updates in flight: each update's bucket is prefetched when it is
/// pushed and the update applied `BATCH_RECORDS` pushes later, so that
/// replay, bound by one index cache miss per record, keeps that many misses
/// in flight where one `set_max` after another would wait for each in turn.
#[derive(Default)]
struct Batch {
    updates: [(u64, u64); BATCH_RECORDS],
    pushed: usize,
}

impl Batch {
    /// Adds the update of `hash`'s entry to `address`, prefetching its
    /// bucket now, and applies the oldest update in flight.
    fn push(&mut self, index: &Index, hash: u64, address: u64) {
        index.touch(hash);
        let slot = &mut self.updates[self.pushed % BATCH_RECORDS];
        if self.pushed >= BATCH_RECORDS {
            index.set_max(slot.0, slot.1);
        }
        *slot = (hash, address);
        self.pushed += 1;
    }

    /// Applies the updates still in flight (in any order: `set_max`).
    fn apply(&mut self, index: &Index) {
        let in_flight = self.pushed.min(BATCH_RECORDS);
        for &(hash, address) in &self.updates[..in_flight] {
            index.set_max(hash, address);
        }
        self.pushed = 0;
    }
}
