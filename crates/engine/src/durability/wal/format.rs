//! The records the `wal` mode puts in the central log, byte by byte. The
//! log crate frames every entry (magic, version, LSN, CRC32C); inside an
//! entry the mode writes exactly one record, all integers little-endian:
//!
//! ```text
//! record   := version u8 (= 1) | kind u8 | body
//! kind 1   TABLE   table u32 | name_len u32 | name
//! kind 2   COMMIT  txn_tag u64 | tid u64 | count u32 | count × write
//! kind 3   PART    same body as COMMIT; more parts of the transaction follow
//! write    := table u32 | key_len u32 | key | value_len u32 | value
//!             (value_len = u32::MAX: a delete, no value bytes)
//! ```
//!
//! A transaction whose redo does not fit one entry is logged as PART
//! entries followed by a COMMIT entry, all reserved while its write set is
//! locked and all carrying the same `txn_tag` (worker index in the high 16
//! bits, a per-worker counter below) and TID; `(txn_tag, tid)` identifies
//! the transaction even across restarts, because TIDs after a recovery lie
//! in later epochs than any on disk. The log is durable in LSN prefixes,
//! so the COMMIT entry being durable implies every PART is; recovery
//! applies a transaction when it meets its COMMIT and drops parts whose
//! COMMIT never reached the disk.

use crate::table::TableId;

/// Version byte of every record.
pub(crate) const RECORD_VERSION: u8 = 1;
/// A table's creation.
pub(crate) const KIND_TABLE: u8 = 1;
/// A transaction's last (or only) entry.
pub(crate) const KIND_COMMIT: u8 = 2;
/// A transaction's entry with more to follow.
pub(crate) const KIND_PART: u8 = 3;
/// `value_len` of a delete.
const TOMBSTONE: u32 = u32::MAX;
/// Bytes of a COMMIT/PART header: version, kind, txn_tag, tid, count.
pub(crate) const COMMIT_HEADER_BYTES: usize = 2 + 8 + 8 + 4;

/// Encodes a TABLE record.
pub(crate) fn encode_table(out: &mut Vec<u8>, id: TableId, name: &str) {
    out.clear();
    out.push(RECORD_VERSION);
    out.push(KIND_TABLE);
    out.extend_from_slice(&id.0.to_le_bytes());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
}

/// Starts a COMMIT or PART record in `out` (count patched by
/// [`finish_commit`]).
pub(crate) fn begin_commit(out: &mut Vec<u8>, txn_tag: u64, tid: u64) {
    out.clear();
    out.push(RECORD_VERSION);
    out.push(KIND_COMMIT);
    out.extend_from_slice(&txn_tag.to_le_bytes());
    out.extend_from_slice(&tid.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// Bytes one write takes in a record.
pub(crate) fn write_bytes(key: &[u8], value: Option<&[u8]>) -> usize {
    12 + key.len() + value.map_or(0, <[u8]>::len)
}

/// Appends one write to the record in `out`. Keys and values must be
/// shorter than 4 GiB − 1 (the engine's values are far smaller).
pub(crate) fn push_write(out: &mut Vec<u8>, table: TableId, key: &[u8], value: Option<&[u8]>) {
    out.extend_from_slice(&table.0.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    match value {
        Some(value) => {
            debug_assert!(value.len() < TOMBSTONE as usize);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        None => out.extend_from_slice(&TOMBSTONE.to_le_bytes()),
    }
}

/// Sets the record's kind (COMMIT or PART) and its write count.
pub(crate) fn finish_commit(out: &mut [u8], last: bool, count: u32) {
    out[1] = if last { KIND_COMMIT } else { KIND_PART };
    out[18..22].copy_from_slice(&count.to_le_bytes());
}

/// One decoded write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Write<'a> {
    pub(crate) table: u32,
    pub(crate) key: &'a [u8],
    pub(crate) value: Option<&'a [u8]>,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Table {
        id: u32,
        name: String,
    },
    Commit {
        last: bool,
        txn_tag: u64,
        tid: u64,
        writes: Vec<Write<'a>>,
    },
}

/// Why a record did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Written by another format version.
    Version(u8),
    /// Malformed; the text says where.
    Malformed(String),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(DecodeError::Malformed(format!(
                "record of {} bytes ends inside a field at {}",
                self.bytes.len(),
                self.at
            )));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

/// Decodes one record.
pub(crate) fn decode(bytes: &[u8]) -> Result<Record<'_>, DecodeError> {
    let mut r = Reader { bytes, at: 0 };
    let head = r.take(2)?;
    if head[0] != RECORD_VERSION {
        return Err(DecodeError::Version(head[0]));
    }
    let record = match head[1] {
        KIND_TABLE => {
            let id = r.u32()?;
            let len = r.u32()? as usize;
            let name = String::from_utf8(r.take(len)?.to_vec())
                .map_err(|_| DecodeError::Malformed("table name is not UTF-8".into()))?;
            Record::Table { id, name }
        }
        kind @ (KIND_COMMIT | KIND_PART) => {
            let txn_tag = r.u64()?;
            let tid = r.u64()?;
            let count = r.u32()? as usize;
            // Each write takes at least 12 bytes: bound the allocation.
            if count > bytes.len() / 12 {
                return Err(DecodeError::Malformed(format!(
                    "{count} writes cannot fit {} bytes",
                    bytes.len()
                )));
            }
            let mut writes = Vec::with_capacity(count);
            for _ in 0..count {
                let table = r.u32()?;
                let key_len = r.u32()? as usize;
                let key = r.take(key_len)?;
                let value = match r.u32()? {
                    TOMBSTONE => None,
                    len => Some(r.take(len as usize)?),
                };
                writes.push(Write { table, key, value });
            }
            Record::Commit {
                last: kind == KIND_COMMIT,
                txn_tag,
                tid,
                writes,
            }
        }
        kind => {
            return Err(DecodeError::Malformed(format!(
                "unknown record kind {kind}"
            )))
        }
    };
    if r.at != bytes.len() {
        return Err(DecodeError::Malformed(format!(
            "{} trailing bytes",
            bytes.len() - r.at
        )));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any bytes, or a record's kind and version followed by any
        /// bytes, decode to a record or an error, never a panic; a record
        /// that decodes uses exactly its bytes.
        #[test]
        fn decoding_any_bytes_never_panics(
            kind in proptest::prop_oneof![
                proptest::prelude::Just(KIND_TABLE),
                proptest::prelude::Just(KIND_COMMIT),
                proptest::prelude::Just(KIND_PART),
                proptest::prelude::any::<u8>(),
            ],
            framed in proptest::prelude::any::<bool>(),
            rest in proptest::collection::vec(
                proptest::prop_oneof![0u8..4, proptest::prelude::any::<u8>()],
                0..120,
            ),
        ) {
            let mut bytes = if framed { vec![RECORD_VERSION, kind] } else { Vec::new() };
            bytes.extend_from_slice(&rest);
            let _ = decode(&bytes);
        }
    }

    #[test]
    fn records_round_trip_and_damage_is_reported() {
        let mut out = Vec::new();
        encode_table(&mut out, TableId(7), "accounts");
        assert_eq!(
            decode(&out).unwrap(),
            Record::Table {
                id: 7,
                name: "accounts".into()
            }
        );
        begin_commit(&mut out, 0x0001_0000_0000_0005, 99);
        push_write(&mut out, TableId(1), b"k1", Some(b"v1"));
        push_write(&mut out, TableId(2), b"k2", None);
        finish_commit(&mut out, false, 2);
        let expected_len =
            COMMIT_HEADER_BYTES + write_bytes(b"k1", Some(b"v1")) + write_bytes(b"k2", None);
        assert_eq!(out.len(), expected_len);
        match decode(&out).unwrap() {
            Record::Commit {
                last,
                txn_tag,
                tid,
                writes,
            } => {
                assert!(!last);
                assert_eq!((txn_tag, tid), (0x0001_0000_0000_0005, 99));
                assert_eq!(writes[0].value, Some(&b"v1"[..]));
                assert_eq!(writes[1].key, b"k2");
                assert_eq!(writes[1].value, None);
            }
            other => panic!("{other:?}"),
        }
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "cut at {cut}");
        }
        let mut future = out.clone();
        future[0] = 9;
        assert_eq!(decode(&future), Err(DecodeError::Version(9)));
        let mut extra = out.clone();
        extra.push(0);
        assert!(matches!(decode(&extra), Err(DecodeError::Malformed(_))));
    }
}
