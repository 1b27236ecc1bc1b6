//! On-disk formats of CPR checkpoints (cpr-sigmod19 §6.2–6.3, Appendix C):
//! the checkpoint metadata, the fuzzy index checkpoint and the snapshot
//! files. All are sequences of blocks framed by
//! `epochdb_storage::encode_block` (magic, format version, kind, length,
//! CRC32C per block), written to a temporary name, synced, renamed and the
//! directory synced — metadata last, so a checkpoint is whole or absent.
//!
//! ```text
//! cpr-<version:08x>.meta   one block, kind 1, format version 2, payload (all u64 LE):
//!   version | l_s | l_e | begin | index_id | l_h | l_i | page_bits
//!   | next_session_id | sessions n | n × (session id, serial number)
//!   | kind (0 fold-over, 1 snapshot, 2 incremental snapshot)
//!   | log segment bits (0: one file log.dat) | snapshot start | pieces m
//!   | m × (address, bytes, snapshot file version, offset of its block)
//!   (format version 1, written before snapshots existed, ends after the
//!   sessions and is read as a fold-over checkpoint)
//! index-<id:016x>.dat      block kind 2: buckets | overflow buckets
//!                          blocks kind 3: bucket words, ≤ 128 Ki words each
//! snap-<version:08x>.dat   magic "HLSN"; block kind 4: version | page_bits
//!                          | start | end; then blocks kind 5, one per piece:
//!                          address | the log's bytes [address, address+bytes)
//! log.dat                  raw pages, file offset = logical address
//! ```
//!
//! A snapshot checkpoint's metadata maps every piece of the log range
//! `[snapshot start, l_e)` (pieces are page-aligned, at most
//! [`PIECE_BYTES_MAX`] bytes) to the snapshot file and offset that holds
//! it. A full snapshot's pieces are all in its own file; an incremental
//! snapshot writes only the pages changed since the previous snapshot and
//! maps the others to the older files that hold them (the chain), so
//! recovery composes the chain by reading each piece where the map says.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use epochdb_storage::{blocks, encode_block, FrameError, Storage, StorageFile};

use crate::address::{PAGE_BITS_MAX, PAGE_BITS_MIN};
use crate::chunk_writer::{BufferPool, ChunkWriter, WRITE_CHUNK_BYTES};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::record::{Layout, RecordLayout};
use epochdb_storage::DirectVec;

/// Magic of checkpoint metadata ("HLCM").
const META_MAGIC: u32 = 0x4d43_4c48;
/// Magic of index checkpoint files ("HLIX").
pub(crate) const INDEX_MAGIC: u32 = 0x5849_4c48;
/// Magic of snapshot files ("HLSN").
pub(crate) const SNAP_MAGIC: u32 = 0x4e53_4c48;
/// Format version of index and snapshot files, and of metadata written
/// before snapshots existed.
pub(crate) const FORMAT_VERSION: u16 = 1;
/// Format version of metadata that names a checkpoint kind and a snapshot
/// map.
const META_VERSION_SNAPSHOTS: u16 = 2;
/// Format version of metadata whose log has checksums (`log.sums`); the
/// payload is laid out as in version 2.
const META_VERSION_SUMS: u16 = 3;
/// Format version of metadata that names the record layout: version 3's
/// payload and two more words, the fixed key and value lengths (both zero:
/// the variable layout). Logs of versions 1–3 are of the variable layout.
const META_VERSION: u16 = 4;
const KIND_META: u16 = 1;
pub(crate) const KIND_SNAP_HEADER: u16 = 4;
pub(crate) const KIND_SNAP_PIECE: u16 = 5;
/// Largest piece of a snapshot (one framed block): a page, or 8 MiB of a
/// larger page.
pub(crate) const PIECE_BYTES_MAX: u64 = 8 << 20;

/// How a checkpoint captures version v of the log (cpr-sigmod19
/// Appendix C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointKind {
    /// Fold-over: shift read-only to the checkpoint's end, so the log's own
    /// flush writes version v to the log file (§6.2.4). Incremental by
    /// nature, but afterwards every update of a version-v record is a
    /// read-copy-update to the tail.
    #[default]
    FoldOver,
    /// Snapshot: write the in-memory part of the log up to the
    /// checkpoint's end to a separate file, leaving the HybridLog as it is,
    /// so in-place updates resume as soon as the file is written
    /// (Appendix C).
    Snapshot,
    /// A snapshot that writes only the pages changed (updated in place or
    /// appended to) since the previous snapshot, and refers to the older
    /// snapshot files for the rest (beyond the paper). Without a previous
    /// snapshot since the store opened (or after a fold-over checkpoint),
    /// it is a full snapshot.
    IncrementalSnapshot,
}

impl CheckpointKind {
    fn code(self) -> u64 {
        match self {
            CheckpointKind::FoldOver => 0,
            CheckpointKind::Snapshot => 1,
            CheckpointKind::IncrementalSnapshot => 2,
        }
    }

    fn from_code(code: u64) -> Option<Self> {
        match code {
            0 => Some(CheckpointKind::FoldOver),
            1 => Some(CheckpointKind::Snapshot),
            2 => Some(CheckpointKind::IncrementalSnapshot),
            _ => None,
        }
    }

    /// Whether the checkpoint writes a snapshot file.
    pub(crate) fn is_snapshot(self) -> bool {
        self != CheckpointKind::FoldOver
    }
}

/// Where one piece of a snapshot's log range is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    /// First log address of the piece (page-aligned, or a multiple of
    /// [`PIECE_BYTES_MAX`] inside a larger page).
    pub(crate) address: u64,
    /// Bytes of log it holds.
    pub(crate) bytes: u64,
    /// Version of the snapshot file that holds it.
    pub(crate) file: u32,
    /// Offset of its block in that file.
    pub(crate) offset: u64,
}

/// A snapshot checkpoint's map of `[start, l_e)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SnapshotMap {
    /// First address the snapshot covers (page-aligned); below it, the log
    /// file holds the checkpoint.
    pub(crate) start: u64,
    /// The pieces, in address order, covering `[start, l_e)` exactly.
    pub(crate) pieces: Vec<Piece>,
}
pub(crate) const KIND_INDEX_HEADER: u16 = 2;
pub(crate) const KIND_INDEX_WORDS: u16 = 3;
/// Words per index block (1 MiB).
const INDEX_BLOCK_WORDS: usize = 128 * 1024;

/// What a checkpoint commits: the log prefix `[begin, l_e)` as of version
/// `version`, the index checkpoint to start recovery from, and every
/// session's CPR point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Metadata {
    /// The checkpoint's version v: records of version v+1 in `[l_s, l_e)`
    /// are not part of it (§6.4).
    pub(crate) version: u32,
    /// Tail when the checkpoint began (PREPARE).
    pub(crate) l_s: u64,
    /// Tail when version v was complete (WAIT_FLUSH): the log is durable up
    /// to here.
    pub(crate) l_e: u64,
    /// Lowest address of the log still on disk.
    pub(crate) begin: u64,
    /// The index checkpoint recovery loads.
    pub(crate) index_id: u64,
    /// Tail before the index checkpoint started.
    pub(crate) l_h: u64,
    /// Tail after the index checkpoint finished.
    pub(crate) l_i: u64,
    /// The log's page size (log2).
    pub(crate) page_bits: u32,
    /// The next session id to hand out.
    pub(crate) next_session_id: u64,
    /// `(session id, serial number)`: everything a session issued up to and
    /// including its serial number is in the checkpoint, and nothing after.
    pub(crate) sessions: Vec<(u64, u64)>,
    /// How version v was captured.
    pub(crate) kind: CheckpointKind,
    /// Snapshot checkpoints: where `[start, l_e)` is stored.
    pub(crate) snapshot: Option<SnapshotMap>,
    /// log2 of the log's segment size (0: the log is one file, `log.dat`).
    pub(crate) segment_bits: u32,
    /// `log.sums` holds a checksum for every log byte the checkpoint needs
    /// (metadata version 3); older stores' logs have none.
    pub(crate) log_sums: bool,
    /// How the log's records hold their lengths.
    pub(crate) layout: RecordLayout,
}

pub(crate) fn meta_name(version: u32) -> String {
    format!("cpr-{version:08x}.meta")
}

pub(crate) fn snap_name(version: u32) -> String {
    format!("snap-{version:08x}.dat")
}

/// The version a snapshot file name stands for.
pub(crate) fn parse_snap_name(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("snap-")?.strip_suffix(".dat")?;
    u32::from_str_radix(hex, 16).ok()
}

pub(crate) fn index_name(id: u64) -> String {
    format!("index-{id:016x}.dat")
}

/// The id an index checkpoint file name stands for.
pub(crate) fn parse_index_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("index-")?.strip_suffix(".dat")?;
    u64::from_str_radix(hex, 16).ok()
}

/// The version a metadata file name stands for.
pub(crate) fn parse_meta_name(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("cpr-")?.strip_suffix(".meta")?;
    u32::from_str_radix(hex, 16).ok()
}

impl Metadata {
    fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        let mut put = |x: u64| payload.extend_from_slice(&x.to_le_bytes());
        put(u64::from(self.version));
        put(self.l_s);
        put(self.l_e);
        put(self.begin);
        put(self.index_id);
        put(self.l_h);
        put(self.l_i);
        put(u64::from(self.page_bits));
        put(self.next_session_id);
        put(self.sessions.len() as u64);
        for &(id, serial) in &self.sessions {
            put(id);
            put(serial);
        }
        put(self.kind.code());
        put(u64::from(self.segment_bits));
        let map = self.snapshot.clone().unwrap_or_default();
        put(map.start);
        put(map.pieces.len() as u64);
        for piece in &map.pieces {
            put(piece.address);
            put(piece.bytes);
            put(u64::from(piece.file));
            put(piece.offset);
        }
        let version = if self.log_sums {
            let (key, value) = match self.layout {
                RecordLayout::Variable => (0, 0),
                RecordLayout::Fixed {
                    key_bytes,
                    value_bytes,
                } => (key_bytes, value_bytes),
            };
            put(u64::from(key));
            put(u64::from(value));
            META_VERSION
        } else {
            // A store recovered from a checkpoint older than checksums
            // keeps writing its format (the variable layout).
            debug_assert_eq!(self.layout, RecordLayout::Variable);
            META_VERSION_SNAPSHOTS
        };
        let mut out = Vec::new();
        encode_block(&mut out, META_MAGIC, version, KIND_META, &payload);
        out
    }

    pub(crate) fn decode(path: &Path, data: &[u8]) -> Result<Self> {
        let corrupt = |offset: u64, reason: String| Error::Corrupted {
            file: path.to_path_buf(),
            offset,
            reason,
        };
        let mut iter = blocks(data, META_MAGIC);
        let block = match iter.next() {
            Some(Ok((_, block))) => block,
            Some(Err(e)) => return Err(frame_error(path, e)),
            None => return Err(corrupt(0, "empty metadata file".into())),
        };
        if block.kind != KIND_META || !(FORMAT_VERSION..=META_VERSION).contains(&block.version) {
            return Err(corrupt(
                0,
                format!("kind {} version {}", block.kind, block.version),
            ));
        }
        let words: Vec<u64> = block
            .payload
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let wrong_length = || corrupt(16, "metadata payload has the wrong length".into());
        if words.len() < 10 || block.payload.len() % 8 != 0 {
            return Err(wrong_length());
        }
        let sessions_end = 10usize
            .checked_add(
                usize::try_from(words[9])
                    .ok()
                    .and_then(|n| n.checked_mul(2))
                    .ok_or_else(wrong_length)?,
            )
            .ok_or_else(wrong_length)?;
        let page_bits = u32::try_from(words[7])
            .ok()
            .filter(|b| (PAGE_BITS_MIN..=PAGE_BITS_MAX).contains(b))
            .ok_or_else(|| corrupt(16, format!("page bits {}", words[7])))?;
        let mut words = &words[..];
        let layout = if block.version >= META_VERSION {
            let [rest @ .., key, value] = words else {
                return Err(wrong_length());
            };
            words = rest;
            match (*key, *value) {
                (0, 0) => RecordLayout::Variable,
                (key, value) => u32::try_from(key)
                    .ok()
                    .zip(u32::try_from(value).ok())
                    .map(|(key_bytes, value_bytes)| RecordLayout::Fixed {
                        key_bytes,
                        value_bytes,
                    })
                    .filter(|&layout| Layout::new(layout).unusable(page_bits).is_none())
                    .ok_or_else(|| corrupt(16, format!("record layout {key}, {value}")))?,
            }
        } else {
            RecordLayout::Variable
        };
        if words.len() < sessions_end {
            return Err(wrong_length());
        }
        let (kind, snapshot, segment_bits) = if block.version == FORMAT_VERSION {
            if words.len() != sessions_end {
                return Err(wrong_length());
            }
            (CheckpointKind::FoldOver, None, 0)
        } else {
            let tail = words.get(sessions_end..).ok_or_else(wrong_length)?;
            if tail.len() < 4 || (tail.len() - 4) as u64 != tail[3].saturating_mul(4) {
                return Err(wrong_length());
            }
            let kind = CheckpointKind::from_code(tail[0])
                .ok_or_else(|| corrupt(16, format!("checkpoint kind {}", tail[0])))?;
            let mut pieces = Vec::with_capacity(tail[3] as usize);
            for p in tail[4..].chunks_exact(4) {
                let file = u32::try_from(p[2]).map_err(|_| corrupt(16, "snapshot file".into()))?;
                pieces.push(Piece {
                    address: p[0],
                    bytes: p[1],
                    file,
                    offset: p[3],
                });
            }
            let snapshot = kind.is_snapshot().then_some(SnapshotMap {
                start: tail[2],
                pieces,
            });
            let segment_bits = u32::try_from(tail[1])
                .ok()
                .filter(|&b| b == 0 || (page_bits..64).contains(&b))
                .ok_or_else(|| corrupt(16, format!("segment bits {}", tail[1])))?;
            (kind, snapshot, segment_bits)
        };
        let version = u32::try_from(words[0]).map_err(|_| corrupt(16, "version".into()))?;
        let meta = Metadata {
            version,
            l_s: words[1],
            l_e: words[2],
            begin: words[3],
            index_id: words[4],
            l_h: words[5],
            l_i: words[6],
            page_bits,
            next_session_id: words[8],
            sessions: words[10..sessions_end]
                .chunks_exact(2)
                .map(|p| (p[0], p[1]))
                .collect(),
            kind,
            snapshot,
            segment_bits,
            log_sums: block.version >= META_VERSION_SUMS,
            layout,
        };
        // Begin may pass l_h: the log was truncated after the index
        // checkpoint (recovery replays from the higher of the two).
        if !(meta.begin <= meta.l_s
            && meta.l_h <= meta.l_i
            && meta.l_i <= meta.l_s
            && meta.l_s <= meta.l_e)
        {
            return Err(corrupt(16, format!("addresses out of order: {meta:?}")));
        }
        if let Some(map) = &meta.snapshot {
            // The pieces must tile [start, l_e) exactly.
            let mut at = map.start;
            for piece in &map.pieces {
                let next = at.checked_add(piece.bytes);
                if piece.address != at
                    || piece.bytes == 0
                    || piece.bytes > PIECE_BYTES_MAX
                    || next.is_none()
                {
                    return Err(corrupt(16, format!("snapshot map broken at {at}")));
                }
                at = next.expect("checked");
            }
            if at != meta.l_e || map.start > meta.l_e {
                return Err(corrupt(16, "snapshot map does not end at l_e".into()));
            }
        }
        Ok(meta)
    }
}

/// A frame error of `path` as `Error::Corrupted` (offset in the buffer
/// decoded).
pub(crate) fn frame_error(path: &Path, e: FrameError) -> Error {
    let offset = match &e {
        FrameError::TornTail { offset } | FrameError::Corrupt { offset, .. } => *offset as u64,
        _ => 0,
    };
    Error::Corrupted {
        file: path.to_path_buf(),
        offset,
        reason: e.to_string(),
    }
}

/// Writes `bytes` as `dir/name` durably (the storage crate's atomic
/// replacement: a temporary file, synced, renamed, the directory synced).
pub(crate) fn write_durably(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<()> {
    Ok(epochdb_storage::replace_atomically(
        storage,
        &dir.join(name),
        bytes,
    )?)
}

/// Writes checkpoint metadata, last of a checkpoint's files.
pub(crate) fn write_metadata(storage: &dyn Storage, dir: &Path, meta: &Metadata) -> Result<()> {
    write_durably(storage, dir, &meta_name(meta.version), &meta.encode())
}

/// Reads and verifies checkpoint metadata.
pub(crate) fn read_metadata(storage: &dyn Storage, path: &Path) -> Result<Metadata> {
    let data = storage.read(path)?;
    Metadata::decode(path, &data)
}

/// Bytes of index checkpoint handed to the writer at once: one block.
/// Small, so that the few buffers circulating between the copying thread
/// and the writer are all the fresh memory there is to fault in (on this
/// VM faulting a new page costs more than copying it), yet large enough
/// for writes at the disk's speed.
const INDEX_WRITE_CHUNK_BYTES: usize = 1 << 20;

/// Bytes of an index file's first block (kind 2: buckets, overflow).
const INDEX_HEADER_BLOCK_BYTES: usize = epochdb_storage::BLOCK_HEADER_BYTES + 16;

/// The index file's first block.
fn index_header_block(buckets: usize, overflow: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(16);
    header.extend_from_slice(&(buckets as u64).to_le_bytes());
    header.extend_from_slice(&overflow.to_le_bytes());
    let mut out = Vec::with_capacity(INDEX_HEADER_BLOCK_BYTES);
    encode_block(
        &mut out,
        INDEX_MAGIC,
        FORMAT_VERSION,
        KIND_INDEX_HEADER,
        &header,
    );
    assert_eq!(out.len(), INDEX_HEADER_BLOCK_BYTES);
    out
}

/// Writes a fuzzy index checkpoint (§6.3) of `index` to a temporary name
/// and returns the bytes of bucket words written and the file, written but
/// not yet durable: [`UnsyncedIndex::make_durable`] syncs it, renames it to
/// `index-<id>.dat` and syncs the directory. The caller may run that while
/// the log checkpoint goes on, as long as the metadata waits for it.
///
/// The copy is streamed: buckets are read ([`Index::fuzzy_copy`]) straight
/// into 1 MiB blocks that a [`ChunkWriter`] writes while the next block is
/// copied and checksummed. The number of overflow
/// buckets is known only at the end of the copy, so the first block
/// (fixed size) is written last, before the final sync. The bytes are those
/// of the format above, whatever the chunking.
pub(crate) fn write_index(
    storage: &dyn Storage,
    dir: &Path,
    id: u64,
    index: &Index,
    buffers: &CheckpointBuffers,
    direct: bool,
) -> Result<(u64, UnsyncedIndex)> {
    let path = dir.join(index_name(id));
    let tmp = dir.join(format!("{}{}", index_name(id), epochdb_storage::TMP_SUFFIX));
    let (file, over_spare) = create_or_reuse(storage, dir, SPARE_INDEX_NAME, &tmp)?;
    let mut out = ChunkWriter::start(
        file,
        INDEX_HEADER_BLOCK_BYTES as u64,
        "hybridlog-index",
        buffers.index.clone(),
        direct,
    );
    let mut buf = out.buffer();
    // Where the block being filled starts in `buf`, and its words so far.
    let mut block_start = 0;
    let mut block_words = 0;
    let mut words = 0u64;
    let mut failed = None;
    let seal = |buf: &mut DirectVec, start: usize| {
        epochdb_storage::seal_block(
            &mut buf[start..],
            INDEX_MAGIC,
            FORMAT_VERSION,
            KIND_INDEX_WORDS,
        );
    };
    let overflow = index.fuzzy_copy(|bucket| {
        if failed.is_some() {
            return;
        }
        if block_words == 0 {
            block_start = buf.len();
            buf.resize(block_start + epochdb_storage::BLOCK_HEADER_BYTES, 0);
        }
        let mut bytes = [0u8; 64];
        for (to, word) in bytes.chunks_exact_mut(8).zip(bucket) {
            to.copy_from_slice(&word.to_le_bytes());
        }
        buf.extend_from_slice(&bytes);
        block_words += bucket.len();
        words += bucket.len() as u64;
        // Whole buckets per block: INDEX_BLOCK_WORDS is a multiple of 8.
        if block_words == INDEX_BLOCK_WORDS {
            seal(&mut buf, block_start);
            block_words = 0;
            if buf.len() >= INDEX_WRITE_CHUNK_BYTES {
                if let Err(e) = out.send(&mut buf) {
                    failed = Some(e);
                }
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if block_words > 0 {
        seal(&mut buf, block_start);
    }
    let (mut file, end) = out.finish(buf)?;
    truncate_spare_tail(&mut file, end)?;
    file.write_at(0, &index_header_block(index.len(), overflow))?;
    let unsynced = UnsyncedIndex {
        file,
        tmp,
        path,
        dir: dir.to_path_buf(),
        over_spare,
    };
    Ok((words * 8, unsynced))
}

/// Name of a retired index file kept for the next index checkpoint to
/// write over (see [`create_or_reuse`]). Not an index checkpoint: recovery
/// ignores it, and it does not end in `.dat`.
pub(crate) const SPARE_INDEX_NAME: &str = "index.spare";

/// Name of a retired snapshot file kept for the next snapshot to write
/// over, as [`SPARE_INDEX_NAME`] for index files.
pub(crate) const SPARE_SNAPSHOT_NAME: &str = "snap.spare";

/// Opens `tmp` to write a checkpoint file into: the spare `spare_name`
/// renamed to it if there is one (the caller writes over it and truncates
/// what it did not write), else a new file; a leftover `tmp` of an
/// abandoned attempt is replaced either way.
///
/// Writing over blocks a file already has costs the file system no
/// allocation and no unwritten-extent conversion at the sync: on this
/// project's VM disk (ext4) 34 MiB of direct 1 MiB writes and a sync took
/// 75–102 ms over an old file against 110–137 ms into a new one
/// (BENCHMARKS.md, "Index checkpoints written over a spare file").
fn create_or_reuse(
    storage: &dyn Storage,
    dir: &Path,
    spare_name: &str,
    tmp: &Path,
) -> Result<(Box<dyn StorageFile>, bool)> {
    let spare = dir.join(spare_name);
    if storage.exists(&spare)? {
        // Replaces a leftover `tmp`.
        storage.rename(&spare, tmp)?;
        return Ok((storage.open(tmp)?, true));
    }
    if storage.exists(tmp)? {
        storage.remove(tmp)?;
    }
    Ok((storage.create(tmp)?, false))
}

/// Cuts what a spare written over holds past `end`: an older file's tail.
fn truncate_spare_tail(file: &mut Box<dyn StorageFile>, end: u64) -> Result<()> {
    if file.size()? > end {
        file.truncate(end)?;
    }
    Ok(())
}

/// [`UnsyncedIndex::make_durable`] on a thread of its own, so that the
/// index file's sync (tens of milliseconds on this project's VM disk, where
/// it is when the host writes the file out) overlaps the log checkpoint's
/// phases and writes instead of preceding them. The metadata, written last,
/// waits for it ([`IndexSync::wait`]); dropping it waits too.
#[derive(Debug)]
pub(crate) struct IndexSync {
    thread: Option<JoinHandle<Result<()>>>,
}

impl IndexSync {
    /// Starts making `index` durable.
    pub(crate) fn start(index: UnsyncedIndex, storage: Arc<dyn Storage>) -> Self {
        let thread = std::thread::Builder::new()
            .name("hybridlog-index-sync".into())
            .spawn(move || index.make_durable(storage.as_ref()))
            .expect("spawn the index sync thread");
        Self {
            thread: Some(thread),
        }
    }

    /// Waits until the index checkpoint is durable (or failed to become so).
    pub(crate) fn wait(mut self) -> Result<()> {
        Self::join(self.thread.take().expect("joined only here or in drop"))
    }

    fn join(thread: JoinHandle<Result<()>>) -> Result<()> {
        thread
            .join()
            .unwrap_or_else(|_| Err(Error::Failed("the index sync thread panicked".into())))
    }
}

impl Drop for IndexSync {
    fn drop(&mut self) {
        // A checkpoint that failed before its metadata: nothing relies on
        // the index file, but the thread must not outlive the checkpoint.
        if let Some(thread) = self.thread.take() {
            let _ = Self::join(thread);
        }
    }
}

/// An index checkpoint file whose bytes are all written, under its
/// temporary name, not yet synced.
#[derive(Debug)]
pub(crate) struct UnsyncedIndex {
    file: Box<dyn StorageFile>,
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    over_spare: bool,
}

impl UnsyncedIndex {
    /// Whether the file was written over a spare (see [`create_or_reuse`])
    /// rather than created.
    pub(crate) fn over_spare(&self) -> bool {
        self.over_spare
    }

    /// Syncs the file, renames it to its final name and syncs the
    /// directory: after this the index checkpoint survives a crash.
    pub(crate) fn make_durable(self, storage: &dyn Storage) -> Result<()> {
        self.file.sync()?;
        drop(self.file);
        storage.rename(&self.tmp, &self.path)?;
        storage.sync_dir(&self.dir)?;
        Ok(())
    }
}

const _: () = assert!(INDEX_BLOCK_WORDS.is_multiple_of(8));

/// Writes a snapshot file as it is produced, piece by piece:
/// `snap-<version>.dat.tmp`, then [`SnapshotWriter::finish`] syncs it,
/// renames it into place and syncs the directory. Its metadata (written
/// after) is what makes it part of a checkpoint.
///
/// The caller copies pieces into 8 MiB buffers that a [`ChunkWriter`]
/// writes while the next pieces are copied and checksummed. Any error of
/// the writer thread is returned by the next [`SnapshotWriter::piece`] or
/// by `finish`.
pub(crate) struct SnapshotWriter<'s> {
    storage: &'s dyn Storage,
    dir: std::path::PathBuf,
    version: u32,
    tmp: std::path::PathBuf,
    out: ChunkWriter,
    buf: DirectVec,
    /// Bytes of the file so far (including `buf`).
    pub(crate) written: u64,
}

/// Capacity of a snapshot writer's buffers: a chunk and one more piece.
const SNAP_BUFFER_BYTES: usize = WRITE_CHUNK_BYTES + (PIECE_BYTES_MAX as usize) + 64;

/// Capacity of an index writer's buffers: a chunk and one more block.
const INDEX_BUFFER_BYTES: usize =
    INDEX_WRITE_CHUNK_BYTES + epochdb_storage::BLOCK_HEADER_BYTES + INDEX_BLOCK_WORDS * 8;

/// The buffers index checkpoints and snapshots are written from, kept by
/// the store from one checkpoint to the next (see `chunk_writer`).
#[derive(Debug)]
pub(crate) struct CheckpointBuffers {
    index: Arc<BufferPool>,
    snapshot: Arc<BufferPool>,
}

impl Default for CheckpointBuffers {
    fn default() -> Self {
        CheckpointBuffers {
            index: Arc::new(BufferPool::new(INDEX_BUFFER_BYTES)),
            snapshot: Arc::new(BufferPool::new(SNAP_BUFFER_BYTES)),
        }
    }
}

impl CheckpointBuffers {
    /// The pools for a store with `log_memory_bytes` of frames and an index
    /// of `index_bytes`: made ready at once (see [`BufferPool::warm`]) when
    /// they are at most the store's own memory, so that its first
    /// checkpoint writes as fast as its later ones. The pools keep their
    /// buffers after the first checkpoint anyway, so warming costs a store
    /// that checkpoints no memory, only its open the first touch; a small
    /// store (tests open hundreds) makes them on demand instead of holding
    /// ~90 MiB from the start. The rule was "at most half the frames"
    /// until session 63 found the bench's 1 M-key store (92 MiB of frames,
    /// 32 MiB of index) under it: its first checkpoint wrote at 0.17–0.20
    /// of the disk's speed and its second at 0.39–0.48, against 0.51–0.72
    /// and 0.74–0.87 warmed (BENCHMARKS.md).
    pub(crate) fn for_store(log_memory_bytes: u64, index_bytes: u64) -> Self {
        let buffers = CheckpointBuffers::default();
        if buffers.kept_bytes() <= log_memory_bytes + index_bytes {
            buffers.index.warm();
            buffers.snapshot.warm();
        }
        buffers
    }

    /// Bytes of the buffers both pools keep at most.
    fn kept_bytes(&self) -> u64 {
        (self.index.kept_bytes() + self.snapshot.kept_bytes()) as u64
    }
}

impl<'s> SnapshotWriter<'s> {
    /// Starts `snap-<version>.dat.tmp` (replacing a leftover) with its
    /// header block, for the log addresses `addresses`, written from
    /// buffers of `buffers`.
    pub(crate) fn create(
        storage: &'s dyn Storage,
        dir: &Path,
        version: u32,
        page_bits: u32,
        addresses: std::ops::Range<u64>,
        buffers: &CheckpointBuffers,
        direct: bool,
    ) -> Result<Self> {
        let tmp = dir.join(format!(
            "{}{}",
            snap_name(version),
            epochdb_storage::TMP_SUFFIX
        ));
        let (file, _) = create_or_reuse(storage, dir, SPARE_SNAPSHOT_NAME, &tmp)?;
        let mut header = Vec::with_capacity(32);
        for x in [
            u64::from(version),
            u64::from(page_bits),
            addresses.start,
            addresses.end,
        ] {
            header.extend_from_slice(&x.to_le_bytes());
        }
        let mut header_block = Vec::with_capacity(64);
        encode_block(
            &mut header_block,
            SNAP_MAGIC,
            FORMAT_VERSION,
            KIND_SNAP_HEADER,
            &header,
        );
        let out = ChunkWriter::start(
            file,
            0,
            "hybridlog-snapshot",
            buffers.snapshot.clone(),
            direct,
        );
        let mut buf = out.buffer();
        buf.extend_from_slice(&header_block);
        let written = buf.len() as u64;
        Ok(SnapshotWriter {
            storage,
            dir: dir.to_path_buf(),
            version,
            tmp,
            out,
            buf,
            written,
        })
    }

    /// Appends a piece of log at `address`, `bytes` long (at most
    /// [`PIECE_BYTES_MAX`]), whose bytes `fill` appends to the vector it is
    /// given; returns the offset of the piece's block.
    pub(crate) fn piece(
        &mut self,
        address: u64,
        bytes: u64,
        fill: impl FnOnce(&mut DirectVec) -> Result<()>,
    ) -> Result<u64> {
        debug_assert!(bytes <= PIECE_BYTES_MAX);
        let offset = self.written;
        let start = self.buf.len();
        self.buf
            .resize(start + epochdb_storage::BLOCK_HEADER_BYTES, 0);
        self.buf.extend_from_slice(&address.to_le_bytes());
        fill(&mut self.buf)?;
        assert_eq!(
            (self.buf.len() - start) as u64,
            epochdb_storage::BLOCK_HEADER_BYTES as u64 + 8 + bytes,
            "a snapshot piece got the wrong number of bytes"
        );
        epochdb_storage::seal_block(
            &mut self.buf[start..],
            SNAP_MAGIC,
            FORMAT_VERSION,
            KIND_SNAP_PIECE,
        );
        self.written += (self.buf.len() - start) as u64;
        if self.buf.len() >= WRITE_CHUNK_BYTES {
            self.hand_over()?;
        }
        Ok(offset)
    }

    /// Sends the gathered bytes to the writer threads.
    fn hand_over(&mut self) -> Result<()> {
        self.out.send(&mut self.buf)
    }

    /// Writes what is left, syncs the file, renames it to its final name
    /// and syncs the directory. Returns the file's size.
    pub(crate) fn finish(self) -> Result<u64> {
        let (mut file, end) = self.out.finish(self.buf)?;
        truncate_spare_tail(&mut file, end)?;
        file.sync()?;
        drop(file);
        self.storage
            .rename(&self.tmp, &self.dir.join(snap_name(self.version)))?;
        self.storage.sync_dir(&self.dir)?;
        Ok(self.written)
    }
}

/// Reads one piece of a snapshot: the block at `piece.offset` of
/// `snap-<piece.file>.dat`, checked (CRC32C, kind, address, length).
pub(crate) fn read_piece(
    file: &dyn epochdb_storage::StorageFile,
    piece: &Piece,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let total = epochdb_storage::BLOCK_HEADER_BYTES + 8 + piece.bytes as usize;
    buf.resize(total, 0);
    let n = file.read_at(piece.offset, buf)?;
    let corrupt = |reason: String| Error::Corrupted {
        file: file.path().to_path_buf(),
        offset: piece.offset,
        reason,
    };
    if n < total {
        return Err(corrupt(format!(
            "snapshot file ends inside the piece at {}",
            piece.address
        )));
    }
    match epochdb_storage::decode_block(buf, 0, SNAP_MAGIC) {
        Ok(Some((block, _))) => {
            if block.kind != KIND_SNAP_PIECE
                || block.version != FORMAT_VERSION
                || block.payload.len() != 8 + piece.bytes as usize
                || block.payload[..8] != piece.address.to_le_bytes()
            {
                return Err(corrupt(format!(
                    "not the piece of log address {} (kind {})",
                    piece.address, block.kind
                )));
            }
        }
        Ok(None) => return Err(corrupt("empty".into())),
        Err(e) => {
            let mut error = frame_error(file.path(), e);
            if let Error::Corrupted { offset, .. } = &mut error {
                *offset += piece.offset;
            }
            return Err(error);
        }
    }
    // The log's bytes, in place of the frame.
    buf.drain(..epochdb_storage::BLOCK_HEADER_BYTES + 8);
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::address::FIRST_ADDRESS;
    use epochdb_storage::SimStorage;

    /// A store at least as large as the pools gets them ready at open; a
    /// smaller one (tests open hundreds) makes them on demand.
    #[test]
    #[cfg_attr(miri, ignore = "touches ~90 MiB")]
    fn checkpoint_buffers_are_warmed_for_a_store_at_least_their_size() {
        let kept = CheckpointBuffers::default().kept_bytes();
        let small = CheckpointBuffers::for_store(kept / 2, kept / 4);
        assert_eq!((small.index.ready(), small.snapshot.ready()), (0, 0));
        let large = CheckpointBuffers::for_store(kept - kept / 4, kept / 4);
        assert!(large.index.ready() > 0 && large.snapshot.ready() > 0);
    }

    /// The index file as it was written before streaming: the whole copy
    /// in memory, encoded in one buffer.
    fn index_file_in_one_piece(buckets: usize, overflow: u64, words: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut header = Vec::new();
        header.extend_from_slice(&(buckets as u64).to_le_bytes());
        header.extend_from_slice(&overflow.to_le_bytes());
        encode_block(
            &mut out,
            INDEX_MAGIC,
            FORMAT_VERSION,
            KIND_INDEX_HEADER,
            &header,
        );
        for chunk in words.chunks(INDEX_BLOCK_WORDS) {
            let payload: Vec<u8> = chunk.iter().flat_map(|w| w.to_le_bytes()).collect();
            encode_block(
                &mut out,
                INDEX_MAGIC,
                FORMAT_VERSION,
                KIND_INDEX_WORDS,
                &payload,
            );
        }
        out
    }

    #[test]
    fn streamed_index_file_is_the_format_byte_for_byte() {
        // 16 MiB of primary buckets plus overflow chains: several chunks,
        // and a last block that is not full.
        let index = Index::new(1 << 18);
        for i in 0..(1u64 << 18) {
            let bucket = i;
            // Most buckets get one entry, 64 of them a long chain.
            let tags = if bucket < 64 { 20 } else { 1 };
            for tag in 1..=tags {
                let mut entry = index.find_or_create((tag << 48) | bucket);
                assert!(entry.try_update(64 + i * 8 + tag));
            }
        }
        let disk = SimStorage::new(3);
        let dir = Path::new("/ix");
        disk.create_dir_all(dir).unwrap();
        let (bytes, unsynced) =
            write_index(&disk, dir, 7, &index, &CheckpointBuffers::default(), true).unwrap();
        let path = dir.join(index_name(7));
        assert!(
            !disk.exists(&path).unwrap(),
            "the index file has its final name before it is synced"
        );
        unsynced.make_durable(&disk).unwrap();
        let (words, overflow) = index.fuzzy_words();
        assert!(overflow > 0);
        assert_eq!(bytes, words.len() as u64 * 8);
        let file = disk.read(&path).unwrap();
        let want = index_file_in_one_piece(index.len(), overflow, &words);
        assert!(file.len() > 8 * INDEX_WRITE_CHUNK_BYTES);
        assert!(file == want, "the streamed file differs from the format");
        assert!(!disk
            .exists(&dir.join(format!("{}.tmp", index_name(7))))
            .unwrap());
        for threads in [1, 3] {
            let (read, loaded) =
                crate::index_load::read_index(&disk, &path, threads, true, true).unwrap();
            assert_eq!(loaded, bytes);
            assert_eq!(read.fuzzy_words(), (words.clone(), overflow));
        }
    }

    /// An index with `buckets` primary buckets, one entry in each and a
    /// chain of overflow buckets in the first `chains`.
    fn filled_index(buckets: u64, chains: u64) -> Index {
        let index = Index::new(buckets as usize);
        for bucket in 0..buckets {
            let tags = if bucket < chains { 20 } else { 1 };
            for tag in 1..=tags {
                let mut entry = index.find_or_create((tag << 48) | bucket);
                assert!(entry.try_update(64 + bucket * 8 + tag));
            }
        }
        index
    }

    /// `write_index` of `index` as id `id` in `dir`, not yet durable.
    fn write_unsynced(disk: &SimStorage, dir: &Path, id: u64, index: &Index) -> UnsyncedIndex {
        write_index(disk, dir, id, index, &CheckpointBuffers::default(), true)
            .unwrap()
            .1
    }

    #[test]
    fn an_index_written_over_the_spare_is_the_file_written_fresh() {
        let disk = SimStorage::new(5);
        let (fresh_dir, reused_dir) = (Path::new("/fresh"), Path::new("/reused"));
        let index = filled_index(1 << 14, 16);
        disk.create_dir_all(fresh_dir).unwrap();
        write_unsynced(&disk, fresh_dir, 2, &index)
            .make_durable(&disk)
            .unwrap();
        let want = disk.read(&fresh_dir.join(index_name(2))).unwrap();
        // Spares longer and shorter than the new file, holding another
        // index's valid blocks.
        for spare_buckets in [1u64 << 15, 1 << 12] {
            disk.create_dir_all(reused_dir).unwrap();
            write_unsynced(&disk, reused_dir, 1, &filled_index(spare_buckets, 64))
                .make_durable(&disk)
                .unwrap();
            let old_len = disk.len(&reused_dir.join(index_name(1))).unwrap();
            assert_ne!(old_len, want.len() as u64);
            disk.rename(
                &reused_dir.join(index_name(1)),
                &reused_dir.join(SPARE_INDEX_NAME),
            )
            .unwrap();
            let unsynced = write_unsynced(&disk, reused_dir, 2, &index);
            assert!(
                !disk.exists(&reused_dir.join(SPARE_INDEX_NAME)).unwrap(),
                "the spare was not taken"
            );
            unsynced.make_durable(&disk).unwrap();
            let got = disk.read(&reused_dir.join(index_name(2))).unwrap();
            assert_eq!(got.len(), want.len(), "spare of {spare_buckets} buckets");
            assert!(got == want, "spare of {spare_buckets} buckets");
        }
    }

    /// A word a decoder meets: mostly small (so that decoding gets past the
    /// length and order checks), sometimes anything.
    fn meta_word() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![
            0u64..4,
            0u64..80,
            0u64..(1 << 16),
            any::<u64>(),
            Just(u64::MAX)
        ]
    }

    /// Metadata with fields a bug could write: addresses in order or
    /// not, any page and segment bits, a snapshot map whose pieces may or
    /// may not tile `[start, l_e)` (its start near the top of the address
    /// space sometimes).
    fn arbitrary_metadata() -> impl proptest::strategy::Strategy<Value = Metadata> {
        use proptest::prelude::*;
        let addresses = proptest::collection::vec(meta_word(), 4).prop_map(|mut a| {
            a.sort_unstable();
            a
        });
        let pieces = proptest::collection::vec(
            (
                prop_oneof![Just(0u64), 1u64..4096, Just(PIECE_BYTES_MAX), meta_word()],
                0u32..4,
            ),
            0..4,
        );
        (
            addresses,
            any::<bool>(),
            prop_oneof![0u32..40, any::<u32>()],
            prop_oneof![0u32..70, any::<u32>()],
            0u8..3,
            pieces,
            prop_oneof![
                Just(None),
                Just(Some(u64::MAX - 100)),
                meta_word().prop_map(Some)
            ],
            prop_oneof![
                Just(RecordLayout::Variable),
                (0u32..20, 0u32..200).prop_map(|(key_bytes, value_bytes)| {
                    RecordLayout::Fixed {
                        key_bytes,
                        value_bytes,
                    }
                }),
                (any::<u32>(), any::<u32>()).prop_map(|(key_bytes, value_bytes)| {
                    RecordLayout::Fixed {
                        key_bytes,
                        value_bytes,
                    }
                }),
            ],
        )
            .prop_map(
                |(a, ordered, page_bits, segment_bits, kind, pieces, start, layout)| {
                    let kind = CheckpointKind::from_code(u64::from(kind)).expect("0..3");
                    let (l_h, l_i, l_s, l_e) = if ordered {
                        (a[0], a[1], a[2], a[3])
                    } else {
                        (a[3], a[0], a[2], a[1])
                    };
                    let total = pieces.iter().fold(0u64, |t, p| t.wrapping_add(p.0));
                    let start = start.unwrap_or(l_e.wrapping_sub(total));
                    let mut address = start;
                    let pieces = pieces
                        .into_iter()
                        .map(|(bytes, file)| {
                            let piece = Piece {
                                address,
                                bytes,
                                file,
                                offset: 48,
                            };
                            address = address.wrapping_add(bytes);
                            piece
                        })
                        .collect();
                    Metadata {
                        version: 1,
                        l_s,
                        l_e,
                        begin: l_h,
                        index_id: 1,
                        l_h,
                        l_i,
                        page_bits,
                        next_session_id: 1,
                        sessions: vec![(1, 2)],
                        kind,
                        snapshot: kind.is_snapshot().then_some(SnapshotMap { start, pieces }),
                        segment_bits,
                        log_sums: true,
                        layout,
                    }
                },
            )
    }

    /// What recovery relies on in metadata that decoded.
    fn usable(meta: &Metadata) -> std::result::Result<(), proptest::test_runner::TestCaseError> {
        proptest::prop_assert!((PAGE_BITS_MIN..=PAGE_BITS_MAX).contains(&meta.page_bits));
        proptest::prop_assert!(
            meta.segment_bits == 0 || (meta.page_bits..64).contains(&meta.segment_bits)
        );
        if let RecordLayout::Fixed { key_bytes, .. } = meta.layout {
            proptest::prop_assert!(key_bytes > 0);
            proptest::prop_assert!(
                Layout::new(meta.layout).record_bytes(0, 0)
                    <= (1usize << meta.page_bits) - FIRST_ADDRESS as usize
            );
        }
        if let Some(map) = &meta.snapshot {
            let total: u128 = map.pieces.iter().map(|p| u128::from(p.bytes)).sum();
            proptest::prop_assert_eq!(u128::from(map.start) + total, u128::from(meta.l_e));
        }
        Ok(())
    }

    proptest::proptest! {
        /// Metadata encoded from any fields (what a bug could write with a
        /// valid CRC) decodes to an error or to metadata recovery can use.
        #[test]
        fn metadata_of_any_fields_decodes_safely(meta in arbitrary_metadata()) {
            if let Ok(back) = Metadata::decode(Path::new("m"), &meta.encode()) {
                usable(&back)?;
            }
        }

        /// Metadata whose frame checks out (a bug's output, not a torn
        /// write: the CRC stops those) decodes to an error or to metadata
        /// recovery can use: a page size it supports, a segment size of at
        /// least a page, a snapshot map that tiles its range. No panic,
        /// no overflow.
        #[test]
        fn framed_metadata_of_any_words_decodes_safely(
            words in proptest::collection::vec(meta_word(), 0..40),
            cut in 0usize..8,
        ) {
            let mut payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            payload.truncate(payload.len().saturating_sub(cut));
            for version in [FORMAT_VERSION, META_VERSION_SNAPSHOTS, META_VERSION_SUMS, META_VERSION] {
                let mut out = Vec::new();
                encode_block(&mut out, META_MAGIC, version, KIND_META, &payload);
                if let Ok(meta) = Metadata::decode(Path::new("m"), &out) {
                    usable(&meta)?;
                }
            }
        }
    }

    #[test]
    fn metadata_round_trip() {
        let meta = Metadata {
            version: 3,
            l_s: 4096,
            l_e: 8384,
            begin: 64,
            index_id: 2,
            l_h: 64,
            l_i: 1024,
            page_bits: 12,
            next_session_id: 9,
            sessions: vec![(1, 100), (2, 7)],
            kind: CheckpointKind::IncrementalSnapshot,
            segment_bits: 14,
            log_sums: true,
            layout: RecordLayout::Variable,
            snapshot: Some(SnapshotMap {
                start: 4096,
                pieces: vec![
                    Piece {
                        address: 4096,
                        bytes: 4096,
                        file: 2,
                        offset: 48,
                    },
                    Piece {
                        address: 8192,
                        bytes: 192,
                        file: 3,
                        offset: 48,
                    },
                ],
            }),
        };
        let bytes = meta.encode();
        assert_eq!(Metadata::decode(Path::new("m"), &bytes).unwrap(), meta);
        let fixed = Metadata {
            layout: RecordLayout::Fixed {
                key_bytes: 8,
                value_bytes: 100,
            },
            ..meta.clone()
        };
        assert_eq!(
            Metadata::decode(Path::new("m"), &fixed.encode()).unwrap(),
            fixed
        );
        let too_large = Metadata {
            layout: RecordLayout::Fixed {
                key_bytes: 8,
                value_bytes: 4096,
            },
            ..meta.clone()
        };
        assert!(
            Metadata::decode(Path::new("m"), &too_large.encode()).is_err(),
            "a fixed record larger than a page is refused"
        );
        let older = Metadata {
            log_sums: false,
            ..meta.clone()
        };
        assert_eq!(
            Metadata::decode(Path::new("m"), &older.encode()).unwrap(),
            older
        );
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        assert!(matches!(
            Metadata::decode(Path::new("m"), &bad),
            Err(Error::Corrupted { .. })
        ));
    }
}
