//! On-disk formats of CPR checkpoints (cpr-sigmod19 §6.2–6.3): the
//! checkpoint metadata and the fuzzy index checkpoint. Both are sequences of
//! blocks framed by `epochdb_storage::encode_block` (magic, format version,
//! kind, length, CRC32C), written to a temporary name, synced, renamed and
//! the directory synced — metadata last, so a checkpoint is whole or absent.
//!
//! ```text
//! cpr-<version:08x>.meta   one block, kind 1, payload (all u64 LE):
//!   version | l_s | l_e | begin | index_id | l_h | l_i | page_bits
//!   | next_session_id | sessions n | n × (session id, serial number)
//! index-<id:016x>.dat      block kind 2: buckets | overflow buckets
//!                          blocks kind 3: bucket words, ≤ 128 Ki words each
//! log.dat                  raw pages, file offset = logical address
//! ```

use std::path::Path;

use epochdb_storage::{blocks, encode_block, FrameError, Storage};

use crate::error::{Error, Result};

/// Magic of checkpoint metadata ("HLCM").
const META_MAGIC: u32 = 0x4d43_4c48;
/// Magic of index checkpoint files ("HLIX").
const INDEX_MAGIC: u32 = 0x5849_4c48;
/// Format version of both files.
const FORMAT_VERSION: u16 = 1;
const KIND_META: u16 = 1;
const KIND_INDEX_HEADER: u16 = 2;
const KIND_INDEX_WORDS: u16 = 3;
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
}

pub(crate) fn meta_name(version: u32) -> String {
    format!("cpr-{version:08x}.meta")
}

pub(crate) fn index_name(id: u64) -> String {
    format!("index-{id:016x}.dat")
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
        let mut out = Vec::new();
        encode_block(&mut out, META_MAGIC, FORMAT_VERSION, KIND_META, &payload);
        out
    }

    fn decode(path: &Path, data: &[u8]) -> Result<Self> {
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
        if block.kind != KIND_META || block.version != FORMAT_VERSION {
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
        if words.len() < 10 || words.len() != 10 + 2 * words[9] as usize {
            return Err(corrupt(16, "metadata payload has the wrong length".into()));
        }
        let version = u32::try_from(words[0]).map_err(|_| corrupt(16, "version".into()))?;
        let page_bits = u32::try_from(words[7]).map_err(|_| corrupt(72, "page bits".into()))?;
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
            sessions: words[10..].chunks_exact(2).map(|p| (p[0], p[1])).collect(),
        };
        if !(meta.begin <= meta.l_h
            && meta.l_h <= meta.l_i
            && meta.l_i <= meta.l_s
            && meta.l_s <= meta.l_e)
        {
            return Err(corrupt(16, format!("addresses out of order: {meta:?}")));
        }
        Ok(meta)
    }
}

fn frame_error(path: &Path, e: FrameError) -> Error {
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

/// Writes a fuzzy index checkpoint (§6.3).
pub(crate) fn write_index(
    storage: &dyn Storage,
    dir: &Path,
    id: u64,
    buckets: usize,
    overflow: u64,
    words: &[u64],
) -> Result<()> {
    let mut out = Vec::with_capacity(words.len() * 8 + 1024);
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
    let mut payload = Vec::with_capacity(INDEX_BLOCK_WORDS * 8);
    for chunk in words.chunks(INDEX_BLOCK_WORDS) {
        payload.clear();
        for word in chunk {
            payload.extend_from_slice(&word.to_le_bytes());
        }
        encode_block(
            &mut out,
            INDEX_MAGIC,
            FORMAT_VERSION,
            KIND_INDEX_WORDS,
            &payload,
        );
    }
    write_durably(storage, dir, &index_name(id), &out)
}

/// Reads a fuzzy index checkpoint: `(buckets, overflow buckets, words)`.
pub(crate) fn read_index(storage: &dyn Storage, path: &Path) -> Result<(usize, u64, Vec<u64>)> {
    let data = storage.read(path)?;
    let mut header = None;
    let mut words = Vec::new();
    let mut offset = 0u64;
    for block in blocks(&data, INDEX_MAGIC) {
        let (at, block) = block.map_err(|e| frame_error(path, e))?;
        offset = at as u64;
        match block.kind {
            KIND_INDEX_HEADER if header.is_none() && block.payload.len() == 16 => {
                let b = u64::from_le_bytes(block.payload[..8].try_into().expect("8"));
                let o = u64::from_le_bytes(block.payload[8..].try_into().expect("8"));
                header = Some((b as usize, o));
            }
            KIND_INDEX_WORDS if header.is_some() => {
                words.extend(
                    block
                        .payload
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().expect("8"))),
                );
            }
            kind => {
                return Err(Error::Corrupted {
                    file: path.to_path_buf(),
                    offset,
                    reason: format!("unexpected block kind {kind}"),
                })
            }
        }
    }
    let (buckets, overflow) = header.ok_or_else(|| Error::Corrupted {
        file: path.to_path_buf(),
        offset: 0,
        reason: "no index header".into(),
    })?;
    if !buckets.is_power_of_two() || words.len() != (buckets + overflow as usize) * 8 {
        return Err(Error::Corrupted {
            file: path.to_path_buf(),
            offset,
            reason: format!(
                "index of {buckets} buckets and {overflow} overflow buckets has {} words",
                words.len()
            ),
        });
    }
    Ok((buckets, overflow, words))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trip() {
        let meta = Metadata {
            version: 3,
            l_s: 4096,
            l_e: 8192,
            begin: 64,
            index_id: 2,
            l_h: 64,
            l_i: 1024,
            page_bits: 12,
            next_session_id: 9,
            sessions: vec![(1, 100), (2, 7)],
        };
        let bytes = meta.encode();
        assert_eq!(Metadata::decode(Path::new("m"), &bytes).unwrap(), meta);
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        assert!(matches!(
            Metadata::decode(Path::new("m"), &bad),
            Err(Error::Corrupted { .. })
        ));
    }
}
