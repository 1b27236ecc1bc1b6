//! The on-disk formats of the `log` and `silor` modes. Every file is a
//! sequence of blocks framed by `epochdb_storage` (magic, version, kind,
//! length, CRC32C; integers little-endian). Payloads:
//!
//! ```text
//! log header     (magic LOG, kind HEADER): file sequence u64 — the first
//!                  block of every `data.log`, synced when it is created
//! log block      (magic LOG):  epoch u64, then entries:
//!                  tid u64, writes u32, then per write:
//!                  table u32, key_len u32, value_len u32 (u32::MAX: tombstone), key, value
//! pepoch record  (magic PEPOCH): e_p u64, dirs u32, then per directory
//!                  the `data.log` it had synced: sequence u64, length u64
//! catalog        (magic CATALOG): kind HEADER: format version u32;
//!                  kind TABLE: id u32, name_len u32, name
//! checkpoint data (magic CKPT): table u32, then records:
//!                  key_len u32, value_len u32, tid u64, key, value
//! directory     (magic DIR): index u32, count u32 — which of the
//!                  database's directories this is
//! checkpoint meta (magic META): id u64, e_l u64, e_h u64, dirs u32,
//!                  tables u32 × (id u32, name_len u32, name),
//!                  files u32 × (dir u32, name_len u32, name, bytes u64)
//! ```
//!
//! Each log block holds one worker buffer, and a buffer holds commits of a
//! single epoch (silor §3.4: a buffer is flushed at every epoch change), so
//! recovery can skip whole blocks by epoch.

use std::fmt;

use epochdb_storage::{blocks, encode_block, seal_block, Block, FrameError, BLOCK_HEADER_BYTES};

use crate::tid::EPOCH_LIMIT;

/// The version of every format below. A directory written with another
/// version is refused at open.
/// Version 2: TIDs carry a 40-bit epoch (tid.rs); version 1 had 32 bits.
pub(crate) const FORMAT_VERSION: u16 = 2;

/// Magic of log files (`data.log`, `old_data.<e>`): "eLOG".
pub(crate) const LOG_MAGIC: u32 = u32::from_le_bytes(*b"eLOG");
/// Magic of the `pepoch` file: "ePEP".
pub(crate) const PEPOCH_MAGIC: u32 = u32::from_le_bytes(*b"ePEP");
/// Magic of the `catalog` file: "eCAT".
pub(crate) const CATALOG_MAGIC: u32 = u32::from_le_bytes(*b"eCAT");
/// Magic of checkpoint data files: "eCKP".
pub(crate) const CKPT_MAGIC: u32 = u32::from_le_bytes(*b"eCKP");
/// Magic of the checkpoint metadata file: "eMET".
pub(crate) const META_MAGIC: u32 = u32::from_le_bytes(*b"eMET");
/// Magic of a directory's identity file: "eDIR".
pub(crate) const DIR_MAGIC: u32 = u32::from_le_bytes(*b"eDIR");
/// Magic of the `cpr` marker file: "eCPR".
pub(crate) const CPR_MAGIC: u32 = u32::from_le_bytes(*b"eCPR");

/// Block kind of a log buffer.
pub(crate) const KIND_LOG: u16 = 1;
/// Block kind of a log file's header.
pub(crate) const KIND_LOG_HEADER: u16 = 2;
/// Block kind of a pepoch record.
pub(crate) const KIND_PEPOCH: u16 = 1;
/// Block kind of the catalog's header.
pub(crate) const KIND_CATALOG_HEADER: u16 = 1;
/// Block kind of a catalog table entry.
pub(crate) const KIND_CATALOG_TABLE: u16 = 2;
/// Block kind of a checkpoint data block.
pub(crate) const KIND_CKPT: u16 = 1;
/// Block kind of checkpoint metadata.
pub(crate) const KIND_META: u16 = 1;
/// Block kind of a directory identity.
pub(crate) const KIND_DIR: u16 = 1;
/// Block kind of the `cpr` marker.
pub(crate) const KIND_CPR: u16 = 1;

/// Value length that marks a tombstone (a delete).
pub(crate) const TOMBSTONE: u32 = u32::MAX;

/// Bytes a log block spends before its first entry: header and epoch.
pub(crate) const LOG_PREFIX_BYTES: usize = BLOCK_HEADER_BYTES + 8;

/// A payload that does not parse although its checksum matched: a bug in a
/// writer or a format mismatch, reported with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed payload: {}", self.0)
    }
}

/// A little-endian cursor over a payload that never panics.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, at: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    pub(crate) fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        let end = self.at.checked_add(len).ok_or(Malformed(what))?;
        let slice = self.data.get(self.at..end).ok_or(Malformed(what))?;
        self.at = end;
        Ok(slice)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, Malformed> {
        let b = self.bytes(8, what)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        Ok(u64::from_le_bytes(word))
    }

    pub(crate) fn string(&mut self, what: &'static str) -> Result<String, Malformed> {
        let len = self.u32(what)? as usize;
        let bytes = self.bytes(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed(what))
    }
}

/// One framed block of the current format version.
fn frame(magic: u32, kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK_HEADER_BYTES + payload.len());
    encode_block(&mut out, magic, FORMAT_VERSION, kind, payload);
    out
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    put_u32(out, text.len() as u32);
    out.extend_from_slice(text.as_bytes());
}

// ---------------------------------------------------------------- log blocks

/// Bytes one commit takes in a log block.
pub(crate) fn entry_bytes<'k>(writes: impl Iterator<Item = (usize, Option<usize>)> + 'k) -> usize {
    12 + writes
        .map(|(key, value)| 12 + key + value.unwrap_or(0))
        .sum::<usize>()
}

/// Starts a log block for `epoch` in `buffer` (cleared first).
pub(crate) fn start_log_block(buffer: &mut Vec<u8>, epoch: u64) {
    buffer.clear();
    buffer.resize(BLOCK_HEADER_BYTES, 0);
    put_u64(buffer, epoch);
}

/// Appends one commit's entry header: with `put_write`, the piecewise form
/// of `put_entry`, which tests use as its reference and to build malformed
/// entries.
#[cfg(test)]
pub(crate) fn put_entry_header(buffer: &mut Vec<u8>, tid: u64, writes: u32) {
    put_u64(buffer, tid);
    put_u32(buffer, writes);
}

/// Appends one write of an entry (see `put_entry_header`).
#[cfg(test)]
pub(crate) fn put_write(buffer: &mut Vec<u8>, table: u32, key: &[u8], value: Option<&[u8]>) {
    put_u32(buffer, table);
    put_u32(buffer, key.len() as u32);
    put_u32(buffer, value.map_or(TOMBSTONE, |v| v.len() as u32));
    buffer.extend_from_slice(key);
    if let Some(value) = value {
        buffer.extend_from_slice(value);
    }
}

/// Appends one whole commit entry — its header, then every write, exactly
/// as `put_entry_header` and `put_write` would — where `needed` is
/// `entry_bytes` of the same writes. One capacity check and one length
/// update for the entry instead of five `Vec` appends per write: the
/// appends' capacity checks were a third of `log_commit`'s instructions
/// (BENCHMARKS.md, "The commit entry written in one piece").
///
/// # Panics
///
/// If the writes do not take exactly `needed` bytes.
pub(crate) fn put_entry<'w>(
    buffer: &mut Vec<u8>,
    tid: u64,
    writes: impl ExactSizeIterator<Item = (u32, &'w [u8], Option<&'w [u8]>)>,
    needed: usize,
) {
    buffer.reserve(needed);
    let mut out = Cursor {
        spare: &mut buffer.spare_capacity_mut()[..needed],
        at: 0,
    };
    out.put(&tid.to_le_bytes());
    out.put(&(writes.len() as u32).to_le_bytes());
    for (table, key, value) in writes {
        let value_len = value.map_or(TOMBSTONE, |v| v.len() as u32);
        let mut header = [0u8; 12];
        header[..4].copy_from_slice(&table.to_le_bytes());
        header[4..8].copy_from_slice(&(key.len() as u32).to_le_bytes());
        header[8..].copy_from_slice(&value_len.to_le_bytes());
        out.put(&header);
        out.put(key);
        if let Some(value) = value {
            out.put(value);
        }
    }
    assert_eq!(
        out.at, needed,
        "a commit entry's size changed while written"
    );
    let len = buffer.len() + needed;
    // SAFETY: `reserve` made room for `needed` bytes past the length, and the
    // cursor initialised every one of them: it wrote contiguously from 0 and
    // stopped exactly at `needed` (asserted just above).
    unsafe { buffer.set_len(len) };
}

/// A write position in a buffer's spare capacity.
struct Cursor<'a> {
    spare: &'a mut [std::mem::MaybeUninit<u8>],
    at: usize,
}

impl Cursor<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        let to = &mut self.spare[self.at..end];
        // SAFETY: `to` is a bounds-checked slice of exactly `bytes.len()`
        // bytes in the buffer's spare capacity, which `bytes` (a shared
        // borrow) cannot overlap. `write_copy_of_slice` does this safely
        // from Rust 1.93, above our MSRV; a byte loop instead measured
        // slower than the appends this replaces (3,021 against 2,261
        // instructions per TPC-C `log_commit`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), to.as_mut_ptr().cast::<u8>(), bytes.len())
        };
        self.at = end;
    }
}

/// Seals a log block built in `buffer` (fills in its header).
pub(crate) fn seal_log_block(buffer: &mut [u8]) {
    seal_block(buffer, LOG_MAGIC, FORMAT_VERSION, KIND_LOG);
}

/// The epoch of a sealed or unsealed log block built by `start_log_block`.
pub(crate) fn log_block_epoch(buffer: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&buffer[BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + 8]);
    u64::from_le_bytes(word)
}

/// One write decoded from a log block or checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoggedWrite<'a> {
    pub(crate) table: u32,
    pub(crate) key: &'a [u8],
    pub(crate) value: Option<&'a [u8]>,
}

/// A decoded log block: its epoch and an iterator over its entries.
pub(crate) struct LogBlock<'a> {
    pub(crate) epoch: u64,
    body: Reader<'a>,
}

/// Epochs (and log sequence numbers, which follow them) from here on are
/// damage: recovery goes on from the largest it reads plus one, which must
/// still fit a TID.
const LAST_EPOCH: u64 = EPOCH_LIMIT - 1;

/// Parses a log block's payload.
pub(crate) fn parse_log_block(payload: &[u8]) -> Result<LogBlock<'_>, Malformed> {
    let mut body = Reader::new(payload);
    let epoch = body.u64("log block epoch")?;
    if epoch >= LAST_EPOCH {
        return Err(Malformed("log block epoch does not fit a TID"));
    }
    Ok(LogBlock { epoch, body })
}

impl<'a> LogBlock<'a> {
    /// The next entry: its TID and writes, appended to `writes` (cleared).
    pub(crate) fn next_entry(
        &mut self,
        writes: &mut Vec<LoggedWrite<'a>>,
    ) -> Result<Option<u64>, Malformed> {
        writes.clear();
        if self.body.is_empty() {
            return Ok(None);
        }
        let tid = self.body.u64("entry tid")?;
        let count = self.body.u32("entry write count")?;
        for _ in 0..count {
            let table = self.body.u32("write table")?;
            let key_len = self.body.u32("write key length")? as usize;
            let value_len = self.body.u32("write value length")?;
            let key = self.body.bytes(key_len, "write key")?;
            let value = if value_len == TOMBSTONE {
                None
            } else {
                Some(self.body.bytes(value_len as usize, "write value")?)
            };
            writes.push(LoggedWrite { table, key, value });
        }
        Ok(Some(tid))
    }
}

/// A log file's header block: its sequence number.
pub(crate) fn encode_log_header(seq: u64) -> Vec<u8> {
    frame(LOG_MAGIC, KIND_LOG_HEADER, &seq.to_le_bytes())
}

/// Parses a log header's payload.
pub(crate) fn parse_log_header(payload: &[u8]) -> Result<u64, Malformed> {
    let mut reader = Reader::new(payload);
    let seq = reader.u64("log header sequence")?;
    if !reader.is_empty() {
        return Err(Malformed("trailing bytes after a log header"));
    }
    if seq >= LAST_EPOCH {
        // The logger takes the epoch as the next sequence number, and
        // recovery the largest sequence as an epoch to go on from.
        return Err(Malformed("log header sequence does not fit an epoch"));
    }
    Ok(seq)
}

// ------------------------------------------------------------------- pepoch

/// What one directory's logger had made durable when `e_p` was written:
/// the sequence number of its `data.log` and the length synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SyncedLog {
    pub(crate) seq: u64,
    pub(crate) len: u64,
}

/// A decoded pepoch record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PepochRecord {
    pub(crate) e_p: u64,
    pub(crate) logs: Vec<SyncedLog>,
}

impl PepochRecord {
    /// The framed record.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(12 + 16 * self.logs.len());
        put_u64(&mut payload, self.e_p);
        put_u32(&mut payload, self.logs.len() as u32);
        for log in &self.logs {
            put_u64(&mut payload, log.seq);
            put_u64(&mut payload, log.len);
        }
        frame(PEPOCH_MAGIC, KIND_PEPOCH, &payload)
    }

    /// Parses a record's payload.
    pub(crate) fn parse(payload: &[u8]) -> Result<Self, Malformed> {
        let mut reader = Reader::new(payload);
        let e_p = reader.u64("pepoch e_p")?;
        if e_p >= LAST_EPOCH {
            return Err(Malformed("pepoch e_p does not fit a TID"));
        }
        let count = reader.u32("pepoch directory count")?;
        let mut logs = Vec::new();
        for _ in 0..count {
            let seq = reader.u64("pepoch log sequence")?;
            let len = reader.u64("pepoch log length")?;
            logs.push(SyncedLog { seq, len });
        }
        if !reader.is_empty() {
            return Err(Malformed("trailing bytes after a pepoch record"));
        }
        Ok(Self { e_p, logs })
    }
}

// ------------------------------------------------------------ directories

/// The `cpr` marker: the directory holds a database of the `cpr` mode
/// (checkpoints only, no log), which the log-based modes must not open.
pub(crate) fn encode_cpr_marker() -> Vec<u8> {
    frame(CPR_MAGIC, KIND_CPR, b"cpr")
}

/// A directory's identity: its place among the database's directories.
pub(crate) fn encode_dir_identity(index: u32, count: u32) -> Vec<u8> {
    let mut payload = Vec::with_capacity(8);
    put_u32(&mut payload, index);
    put_u32(&mut payload, count);
    frame(DIR_MAGIC, KIND_DIR, &payload)
}

/// Parses a directory identity's payload into `(index, count)`.
pub(crate) fn parse_dir_identity(payload: &[u8]) -> Result<(u32, u32), Malformed> {
    let mut reader = Reader::new(payload);
    let index = reader.u32("directory index")?;
    let count = reader.u32("directory count")?;
    if !reader.is_empty() {
        return Err(Malformed("trailing bytes after a directory identity"));
    }
    if index >= count {
        return Err(Malformed("a directory index past the directory count"));
    }
    Ok((index, count))
}

// ------------------------------------------------------------------ catalog

/// The catalog's first block: the format version of the directory.
pub(crate) fn encode_catalog_header() -> Vec<u8> {
    let mut payload = Vec::new();
    put_u32(&mut payload, u32::from(FORMAT_VERSION));
    frame(CATALOG_MAGIC, KIND_CATALOG_HEADER, &payload)
}

/// A catalog entry: table `id` is called `name`.
pub(crate) fn encode_catalog_table(id: u32, name: &str) -> Vec<u8> {
    let mut payload = Vec::new();
    put_u32(&mut payload, id);
    put_str(&mut payload, name);
    frame(CATALOG_MAGIC, KIND_CATALOG_TABLE, &payload)
}

/// Parses a catalog table entry.
pub(crate) fn parse_catalog_table(payload: &[u8]) -> Result<(u32, String), Malformed> {
    let mut reader = Reader::new(payload);
    let id = reader.u32("catalog table id")?;
    let name = reader.string("catalog table name")?;
    Ok((id, name))
}

// -------------------------------------------------------------- checkpoints

/// Starts a checkpoint data block for `table` in `buffer` (cleared first).
pub(crate) fn start_ckpt_block(buffer: &mut Vec<u8>, table: u32) {
    buffer.clear();
    buffer.resize(BLOCK_HEADER_BYTES, 0);
    put_u32(buffer, table);
}

/// Appends one record to a checkpoint data block.
pub(crate) fn put_ckpt_record(buffer: &mut Vec<u8>, key: &[u8], tid: u64, value: &[u8]) {
    put_u32(buffer, key.len() as u32);
    put_u32(buffer, value.len() as u32);
    put_u64(buffer, tid);
    buffer.extend_from_slice(key);
    buffer.extend_from_slice(value);
}

/// Seals a checkpoint data block.
pub(crate) fn seal_ckpt_block(buffer: &mut [u8]) {
    seal_block(buffer, CKPT_MAGIC, FORMAT_VERSION, KIND_CKPT);
}

/// One checkpointed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CkptRecord<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) tid: u64,
    pub(crate) value: &'a [u8],
}

/// A decoded checkpoint data block: its table and its records.
pub(crate) struct CkptBlock<'a> {
    pub(crate) table: u32,
    body: Reader<'a>,
}

/// Parses a checkpoint data block's payload.
pub(crate) fn parse_ckpt_block(payload: &[u8]) -> Result<CkptBlock<'_>, Malformed> {
    let mut body = Reader::new(payload);
    let table = body.u32("checkpoint table")?;
    Ok(CkptBlock { table, body })
}

impl<'a> CkptBlock<'a> {
    /// The next record, `None` at the end of the block.
    pub(crate) fn next_record(&mut self) -> Result<Option<CkptRecord<'a>>, Malformed> {
        if self.body.is_empty() {
            return Ok(None);
        }
        let key_len = self.body.u32("checkpoint key length")? as usize;
        let value_len = self.body.u32("checkpoint value length")? as usize;
        let tid = self.body.u64("checkpoint tid")?;
        let key = self.body.bytes(key_len, "checkpoint key")?;
        let value = self.body.bytes(value_len, "checkpoint value")?;
        Ok(Some(CkptRecord { key, tid, value }))
    }
}

/// An installed checkpoint's metadata (silor §4.2: "e_l and e_h, the names
/// of the database tables and the names of the checkpoint files").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CheckpointMeta {
    /// Sequence number; files live in `ckpt.<id>` in every directory.
    pub(crate) id: u64,
    /// Every checkpointer started during or after this epoch.
    pub(crate) e_l: u64,
    /// Every checkpointer finished during or before this epoch.
    pub(crate) e_h: u64,
    /// Directories the checkpoint spans.
    pub(crate) dirs: u32,
    /// Tables at checkpoint time.
    pub(crate) tables: Vec<(u32, String)>,
    /// Every data file: directory index, name within `ckpt.<id>`, length.
    pub(crate) files: Vec<(u32, String, u64)>,
    /// `cpr` mode: session id → serial number of its last transaction in
    /// the checkpoint (its CPR point). Empty in the other modes, and then
    /// not encoded (a trailing section, so older metadata still parses).
    pub(crate) sessions: Vec<(u64, u64)>,
}

impl CheckpointMeta {
    /// The framed metadata block.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        put_u64(&mut payload, self.id);
        put_u64(&mut payload, self.e_l);
        put_u64(&mut payload, self.e_h);
        put_u32(&mut payload, self.dirs);
        put_u32(&mut payload, self.tables.len() as u32);
        for (id, name) in &self.tables {
            put_u32(&mut payload, *id);
            put_str(&mut payload, name);
        }
        put_u32(&mut payload, self.files.len() as u32);
        for (dir, name, bytes) in &self.files {
            put_u32(&mut payload, *dir);
            put_str(&mut payload, name);
            put_u64(&mut payload, *bytes);
        }
        if !self.sessions.is_empty() {
            put_u32(&mut payload, self.sessions.len() as u32);
            for (session, serial) in &self.sessions {
                put_u64(&mut payload, *session);
                put_u64(&mut payload, *serial);
            }
        }
        frame(META_MAGIC, KIND_META, &payload)
    }

    /// Parses a metadata payload.
    pub(crate) fn parse(payload: &[u8]) -> Result<Self, Malformed> {
        let mut reader = Reader::new(payload);
        let id = reader.u64("meta id")?;
        let e_l = reader.u64("meta e_l")?;
        let e_h = reader.u64("meta e_h")?;
        let dirs = reader.u32("meta dirs")?;
        let table_count = reader.u32("meta table count")?;
        let mut tables = Vec::new();
        for position in 0..table_count {
            let id = reader.u32("meta table id")?;
            if id != position {
                return Err(Malformed("a checkpoint table out of its position"));
            }
            tables.push((id, reader.string("meta table name")?));
        }
        let file_count = reader.u32("meta file count")?;
        let mut files = Vec::new();
        for _ in 0..file_count {
            let dir = reader.u32("meta file dir")?;
            if dir >= dirs {
                return Err(Malformed("a checkpoint file in a directory past meta dirs"));
            }
            let name = reader.string("meta file name")?;
            match super::files::parse_ckpt_file_name(&name) {
                None => return Err(Malformed("a checkpoint file name that is not one")),
                // Recovery removes every checkpoint file of another id.
                Some((of, _, _)) if of != id => {
                    return Err(Malformed(
                        "a file of another checkpoint in checkpoint metadata",
                    ))
                }
                Some(_) => {}
            }
            files.push((dir, name, reader.u64("meta file bytes")?));
        }
        let mut sessions = Vec::new();
        if !reader.is_empty() {
            let count = reader.u32("meta session count")?;
            if count == 0 {
                return Err(Malformed("empty session section in checkpoint metadata"));
            }
            for _ in 0..count {
                let session = reader.u64("meta session id")?;
                sessions.push((session, reader.u64("meta session serial")?));
            }
        }
        if !reader.is_empty() {
            return Err(Malformed("trailing bytes after checkpoint metadata"));
        }
        Ok(Self {
            id,
            e_l,
            e_h,
            dirs,
            tables,
            files,
            sessions,
        })
    }
}

/// Iterates the blocks of a file of format `magic`, checking each block's
/// version: a block of another version is reported as `Err(Version)`.
pub(crate) fn versioned_blocks(
    data: &[u8],
    magic: u32,
) -> impl Iterator<Item = Result<(usize, Block<'_>), BlockError>> + '_ {
    blocks(data, magic).map(|item| match item {
        Ok((offset, block)) if block.version != FORMAT_VERSION => Err(BlockError::Version {
            offset,
            found: block.version,
        }),
        Ok(found) => Ok(found),
        Err(error) => Err(BlockError::Frame(error)),
    })
}

/// Why a block could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockError {
    /// Framing failed: a torn tail or corruption.
    Frame(FrameError),
    /// Written by a format version this build does not read.
    Version { offset: usize, found: u16 },
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockError::Frame(error) => error.fmt(f),
            BlockError::Version { offset, found } => write!(
                f,
                "block at offset {offset} has format version {found}; this build reads version {FORMAT_VERSION}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use epochdb_storage::decode_block;
    use proptest::prelude::*;

    #[test]
    fn log_block_round_trips() {
        let mut buffer = Vec::new();
        start_log_block(&mut buffer, 7);
        put_entry_header(&mut buffer, 0x7_0000_0010, 2);
        put_write(&mut buffer, 1, b"k1", Some(b"v1"));
        put_write(&mut buffer, 2, b"k2", None);
        seal_log_block(&mut buffer);
        let (block, end) = decode_block(&buffer, 0, LOG_MAGIC).unwrap().unwrap();
        assert_eq!(end, buffer.len());
        let mut parsed = parse_log_block(block.payload).unwrap();
        assert_eq!(parsed.epoch, 7);
        let mut writes = Vec::new();
        assert_eq!(parsed.next_entry(&mut writes).unwrap(), Some(0x7_0000_0010));
        assert_eq!(
            writes,
            vec![
                LoggedWrite {
                    table: 1,
                    key: b"k1",
                    value: Some(b"v1")
                },
                LoggedWrite {
                    table: 2,
                    key: b"k2",
                    value: None
                }
            ]
        );
        assert_eq!(parsed.next_entry(&mut writes).unwrap(), None);
    }

    #[test]
    fn meta_round_trips() {
        let meta = CheckpointMeta {
            id: 3,
            e_l: 10,
            e_h: 12,
            dirs: 2,
            tables: vec![(0, "a".into()), (1, "bb".into())],
            files: vec![(0, "ckpt.3.t0.0".into(), 100), (1, "ckpt.3.t1.0".into(), 5)],
            sessions: Vec::new(),
        };
        let bytes = meta.encode();
        // Damage behind the checksum that recovery and inspect both refuse:
        // a file in a directory past `dirs`, a name that is not a
        // checkpoint file's, a table out of its position.
        let bad = |meta: CheckpointMeta| {
            let bytes = meta.encode();
            let (block, _) = decode_block(&bytes, 0, META_MAGIC).unwrap().unwrap();
            CheckpointMeta::parse(block.payload).unwrap_err()
        };
        bad(CheckpointMeta {
            files: vec![(2, "ckpt.3.t0.0".into(), 100)],
            ..meta.clone()
        });
        bad(CheckpointMeta {
            files: vec![(0, "ckpt.3.x0.0".into(), 100)],
            ..meta.clone()
        });
        bad(CheckpointMeta {
            tables: vec![(1, "a".into())],
            ..meta.clone()
        });
        bad(CheckpointMeta {
            id: 4,
            ..meta.clone()
        });
        let (block, _) = decode_block(&bytes, 0, META_MAGIC).unwrap().unwrap();
        assert_eq!(CheckpointMeta::parse(block.payload).unwrap(), meta);
        // With the cpr mode's session section.
        let meta = CheckpointMeta {
            sessions: vec![(0, 17), (3, 0), (u64::MAX, u64::MAX)],
            ..meta
        };
        let bytes = meta.encode();
        let (block, _) = decode_block(&bytes, 0, META_MAGIC).unwrap().unwrap();
        assert_eq!(CheckpointMeta::parse(block.payload).unwrap(), meta);
        // A truncated session section is malformed, not ignored.
        let cut = &block.payload[..block.payload.len() - 4];
        assert!(CheckpointMeta::parse(cut).is_err());
    }

    type OwnedWrite = (u32, Vec<u8>, Option<Vec<u8>>);

    fn as_refs(
        writes: &[OwnedWrite],
    ) -> impl ExactSizeIterator<Item = (u32, &[u8], Option<&[u8]>)> {
        writes
            .iter()
            .map(|(table, key, value)| (*table, key.as_slice(), value.as_deref()))
    }

    fn needed_for(writes: &[OwnedWrite]) -> usize {
        entry_bytes(as_refs(writes).map(|(_, key, value)| (key.len(), value.map(<[u8]>::len))))
    }

    #[test]
    #[should_panic(expected = "size changed")]
    fn an_entry_shorter_than_announced_is_refused_before_the_length_grows() {
        let writes = vec![(1, b"key".to_vec(), Some(b"value".to_vec()))];
        let mut buffer = Vec::new();
        put_entry(&mut buffer, 9, as_refs(&writes), needed_for(&writes) + 1);
    }

    proptest! {
        /// `put_entry` writes exactly what the piecewise appends write, after
        /// whatever the buffer already held.
        #[test]
        fn an_entry_in_one_piece_equals_the_piecewise_entry(
            before in proptest::collection::vec(any::<u8>(), 0..64),
            tid in any::<u64>(),
            writes in proptest::collection::vec(
                (
                    any::<u32>(),
                    proptest::collection::vec(any::<u8>(), 0..40),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                ),
                0..12,
            ),
        ) {
            let mut piecewise = before.clone();
            put_entry_header(&mut piecewise, tid, writes.len() as u32);
            for (table, key, value) in as_refs(&writes) {
                put_write(&mut piecewise, table, key, value);
            }
            let needed = needed_for(&writes);
            prop_assert_eq!(piecewise.len() - before.len(), needed);
            let mut whole = before;
            put_entry(&mut whole, tid, as_refs(&writes), needed);
            prop_assert_eq!(whole, piecewise);
        }

        // Decoders never panic on arbitrary payloads.
        #[test]
        fn payload_parsers_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(mut block) = parse_log_block(&payload) {
                let mut writes = Vec::new();
                while let Ok(Some(_)) = block.next_entry(&mut writes) {}
            }
            if let Ok(mut block) = parse_ckpt_block(&payload) {
                while let Ok(Some(_)) = block.next_record() {}
            }
            let _ = CheckpointMeta::parse(&payload);
            let _ = PepochRecord::parse(&payload);
            let _ = parse_log_header(&payload);
            let _ = parse_dir_identity(&payload);
            let _ = parse_catalog_table(&payload);
        }
    }
}
