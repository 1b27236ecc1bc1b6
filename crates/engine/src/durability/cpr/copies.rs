//! Stable copies: the values a version-(v+1) commit replaced while a
//! checkpoint of version v was being captured (cpr-sigmod19 §4's "copy
//! record.live to record.stable"), kept per session in one flat buffer so
//! a commit appends without allocating. In memory only: the checkpoint
//! writes them out as ordinary checkpoint records.
//!
//! Each copy: table `u32`, TID `u64`, key length `u32`, value length
//! `u32`, then the key and value bytes (native byte order: the buffer
//! never leaves the process).

/// One stable copy, borrowed from a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StableCopy<'a> {
    pub(crate) table: u32,
    pub(crate) tid: u64,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

const HEADER: usize = 4 + 8 + 4 + 4;

/// Appends a copy to `buffer`.
pub(crate) fn push(buffer: &mut Vec<u8>, table: u32, tid: u64, key: &[u8], value: &[u8]) {
    let key_len = u32::try_from(key.len()).expect("key larger than 4 GiB");
    let value_len = u32::try_from(value.len()).expect("value larger than 4 GiB");
    buffer.reserve(HEADER + key.len() + value.len());
    buffer.extend_from_slice(&table.to_ne_bytes());
    buffer.extend_from_slice(&tid.to_ne_bytes());
    buffer.extend_from_slice(&key_len.to_ne_bytes());
    buffer.extend_from_slice(&value_len.to_ne_bytes());
    buffer.extend_from_slice(key);
    buffer.extend_from_slice(value);
}

/// The copies in `buffer`, in the order they were pushed.
pub(crate) fn iter(buffer: &[u8]) -> impl Iterator<Item = StableCopy<'_>> + '_ {
    let mut rest = buffer;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let field = |at: usize, len: usize| &rest[at..at + len];
        let table = u32::from_ne_bytes(field(0, 4).try_into().expect("4 bytes"));
        let tid = u64::from_ne_bytes(field(4, 8).try_into().expect("8 bytes"));
        let key_len = u32::from_ne_bytes(field(12, 4).try_into().expect("4 bytes")) as usize;
        let value_len = u32::from_ne_bytes(field(16, 4).try_into().expect("4 bytes")) as usize;
        let key = &rest[HEADER..HEADER + key_len];
        let value = &rest[HEADER + key_len..HEADER + key_len + value_len];
        rest = &rest[HEADER + key_len + value_len..];
        Some(StableCopy {
            table,
            tid,
            key,
            value,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_come_back_in_order() {
        let mut buffer = Vec::new();
        push(&mut buffer, 1, 0x10, b"key", b"value");
        push(&mut buffer, 0, 0x20, b"", b"");
        push(&mut buffer, 7, u64::MAX >> 8, b"k2", &[9; 300]);
        let copies: Vec<_> = iter(&buffer).collect();
        assert_eq!(copies.len(), 3);
        assert_eq!(
            copies[0],
            StableCopy {
                table: 1,
                tid: 0x10,
                key: b"key",
                value: b"value"
            }
        );
        assert_eq!(
            (copies[1].table, copies[1].key, copies[1].value),
            (0, &b""[..], &b""[..])
        );
        assert_eq!((copies[2].table, copies[2].value.len()), (7, 300));
        assert_eq!(iter(&[]).count(), 0);
    }
}
