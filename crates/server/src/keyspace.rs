//! The keyspace's layout, which makes FLUSHDB one transaction.
//!
//! A client's key is stored in [`KEYSPACE_TABLE`] behind an 8-byte
//! big-endian *generation*; the current generation is the one row of
//! [`KEYSPACE_META_TABLE`]. Every command reads that row inside its
//! transaction ([`GenKeys::begin`]), so FLUSHDB, a transaction that bumps
//! it, is atomic under OCC like any other write: a command serializes
//! either wholly before it (and sees the old keys) or wholly after (and sees
//! none); one that straddles the bump fails validation and retries. Redis's
//! FLUSHDB is atomic because Redis is single-threaded; this is how a
//! multicore engine gets the same guarantee without one huge write set.
//!
//! The keys of older generations are invisible at once and deleted
//! afterwards in bounded transactions ([`purge_chunk`]): before FLUSHDB
//! replies, in the background for FLUSHDB ASYNC, and at start-up for a
//! purge that a crash cut short.

use std::ops::Bound;

use bytes::Bytes;
use epochdb_engine::{Abort, Database, OpenError, TableId, Tid, Transaction};

/// The table that holds the keys (behind their generation).
pub const KEYSPACE_TABLE: &str = "redis:0:keys";
/// The table whose one row is the current generation.
pub const KEYSPACE_META_TABLE: &str = "redis:0:meta";
/// Where keys lived before generations (no prefix); moved at start-up.
const LEGACY_TABLE: &str = "redis:0";
/// The meta row's key.
const GENERATION_KEY: &[u8] = b"generation";
/// Keys deleted or moved per transaction by a purge or the migration.
pub(crate) const CHUNK_KEYS: usize = 1024;
/// Bytes of generation in front of every stored key.
const PREFIX_BYTES: usize = 8;

/// The two tables of the keyspace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keyspace {
    /// Generation-prefixed keys.
    pub(crate) keys: TableId,
    /// The current generation.
    pub(crate) meta: TableId,
}

impl Keyspace {
    /// Opens (creating if needed) the keyspace of `db`, moving the keys of
    /// a database written before generations into the current one.
    pub(crate) fn open(db: &Database) -> Result<Self, OpenError> {
        let keys = match db.table(KEYSPACE_TABLE) {
            Some(table) => table,
            None => db.create_table(KEYSPACE_TABLE)?,
        };
        let meta = match db.table(KEYSPACE_META_TABLE) {
            Some(table) => table,
            None => db.create_table(KEYSPACE_META_TABLE)?,
        };
        let keyspace = Self { keys, meta };
        if let Some(legacy) = db.table(LEGACY_TABLE) {
            keyspace.migrate(db, legacy)?;
        }
        Ok(keyspace)
    }

    /// Moves every key of `legacy` into the current generation, a chunk per
    /// transaction (each chunk moves atomically, so a crash midway leaves
    /// the rest to the next start).
    fn migrate(&self, db: &Database, legacy: TableId) -> Result<(), OpenError> {
        let mut worker = db.worker()?;
        let mut moved = 0usize;
        loop {
            let (n, ticket) = worker
                .run(|tx| {
                    let mut keys = GenKeys::begin(tx, *self)?;
                    let mut rows = Vec::new();
                    tx.scan(
                        legacy,
                        Bound::Unbounded,
                        Bound::Unbounded,
                        CHUNK_KEYS,
                        |key, value| {
                            rows.push((key.to_vec(), value));
                            true
                        },
                    )?;
                    for (key, value) in &rows {
                        keys.put(tx, key, value)?;
                        tx.delete(legacy, key)?;
                    }
                    Ok(rows.len())
                })
                .map_err(|e| OpenError::Durability(tx_failure(&e)))?;
            ticket.wait().map_err(OpenError::Durability)?;
            if n == 0 {
                break;
            }
            moved += n;
        }
        if moved > 0 {
            eprintln!(
                "epochdb: moved {moved} keys from table {LEGACY_TABLE} into {KEYSPACE_TABLE}"
            );
        }
        Ok(())
    }

    /// The current generation, read in `tx` (so it joins the read set).
    pub(crate) fn generation(&self, tx: &mut Transaction<'_>) -> Result<u64, Abort> {
        Ok(tx
            .get(self.meta, GENERATION_KEY)?
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// FLUSHDB's transaction: every key becomes invisible. Returns the new
    /// generation; the old ones are left to [`purge_chunk`].
    pub(crate) fn flush(&self, tx: &mut Transaction<'_>) -> Result<u64, Abort> {
        let next = self.generation(tx)? + 1;
        tx.put(self.meta, GENERATION_KEY, &next.to_be_bytes())?;
        Ok(next)
    }
}

fn tx_failure(error: &epochdb_engine::TxError) -> epochdb_engine::DurabilityError {
    match error {
        epochdb_engine::TxError::Durability(d) => d.clone(),
        other => epochdb_engine::DurabilityError::Io(format!("moving the keyspace: {other}")),
    }
}

/// Deletes up to [`CHUNK_KEYS`] keys of generations before the current one;
/// returns how many (0: none are left).
pub(crate) fn purge_chunk(tx: &mut Transaction<'_>, keyspace: Keyspace) -> Result<usize, Abort> {
    let current = keyspace.generation(tx)?;
    let below = current.to_be_bytes();
    let mut old = Vec::new();
    tx.scan(
        keyspace.keys,
        Bound::Unbounded,
        Bound::Excluded(&below),
        CHUNK_KEYS,
        |key, _| {
            old.push(key.to_vec());
            true
        },
    )?;
    for key in &old {
        tx.delete(keyspace.keys, key)?;
    }
    Ok(old.len())
}

/// One transaction's view of the keyspace: the generation it read, and the
/// key translation into and out of it.
#[derive(Debug)]
pub(crate) struct GenKeys {
    keyspace: Keyspace,
    prefix: [u8; PREFIX_BYTES],
    /// The stored form of the key being accessed.
    stored: Vec<u8>,
}

impl GenKeys {
    /// Reads the current generation in `tx`.
    pub(crate) fn begin(tx: &mut Transaction<'_>, keyspace: Keyspace) -> Result<Self, Abort> {
        let generation = keyspace.generation(tx)?;
        Ok(Self {
            keyspace,
            prefix: generation.to_be_bytes(),
            stored: Vec::with_capacity(64),
        })
    }

    /// The stored form of `key`.
    fn stored(&mut self, key: &[u8]) -> &[u8] {
        self.stored.clear();
        self.stored.extend_from_slice(&self.prefix);
        self.stored.extend_from_slice(key);
        &self.stored
    }

    /// The stored form of `key`, kept by WATCH.
    pub(crate) fn stored_key(&mut self, key: &[u8]) -> Bytes {
        Bytes::copy_from_slice(self.stored(key))
    }

    /// Whether a key WATCH stored belongs to this transaction's generation
    /// (a FLUSHDB since then touched every watched key, as in Redis).
    pub(crate) fn is_current(&self, stored: &[u8]) -> bool {
        stored.starts_with(&self.prefix)
    }

    /// `key`'s value.
    pub(crate) fn get<'t>(
        &mut self,
        tx: &mut Transaction<'t>,
        key: &[u8],
    ) -> Result<Option<&'t [u8]>, Abort> {
        let table = self.keyspace.keys;
        tx.get(table, self.stored(key))
    }

    /// Writes `key`.
    pub(crate) fn put(
        &mut self,
        tx: &mut Transaction<'_>,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), Abort> {
        let table = self.keyspace.keys;
        tx.put(table, self.stored(key), value)
    }

    /// Deletes `key`; whether it existed.
    pub(crate) fn delete(&mut self, tx: &mut Transaction<'_>, key: &[u8]) -> Result<bool, Abort> {
        let table = self.keyspace.keys;
        tx.delete(table, self.stored(key))
    }

    /// The version of a stored key (WATCH, EXEC).
    pub(crate) fn version(
        &self,
        tx: &mut Transaction<'_>,
        stored: &[u8],
    ) -> Result<Option<Tid>, Abort> {
        tx.version(self.keyspace.keys, stored)
    }

    /// Visits keys of this generation in order from `from` to `to` (client
    /// keys), at most `limit`; `visit` gets the client's key.
    pub(crate) fn scan<'t>(
        &mut self,
        tx: &mut Transaction<'t>,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        limit: usize,
        mut visit: impl FnMut(&[u8], &'t [u8]) -> bool,
    ) -> Result<(), Abort> {
        let with_prefix = |key: &[u8]| [&self.prefix[..], key].concat();
        let lo = match from {
            Bound::Unbounded => Bound::Included(self.prefix.to_vec()),
            Bound::Included(k) => Bound::Included(with_prefix(k)),
            Bound::Excluded(k) => Bound::Excluded(with_prefix(k)),
        };
        let hi = match to {
            Bound::Included(k) => Bound::Included(with_prefix(k)),
            Bound::Excluded(k) => Bound::Excluded(with_prefix(k)),
            // The next generation's first key: u64::MAX is never reached
            // (a FLUSHDB per nanosecond would take 584 years).
            Bound::Unbounded => {
                Bound::Excluded((u64::from_be_bytes(self.prefix) + 1).to_be_bytes().to_vec())
            }
        };
        tx.scan(
            self.keyspace.keys,
            as_ref(&lo),
            as_ref(&hi),
            limit,
            |key, value| visit(&key[PREFIX_BYTES..], value),
        )
    }
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use epochdb_engine::Config;

    fn db() -> Database {
        Database::open(Config::default()).unwrap()
    }

    fn put(db: &Database, ks: Keyspace, key: &[u8]) {
        let mut w = db.worker().unwrap();
        let ((), _ticket) = w
            .run(|tx| GenKeys::begin(tx, ks)?.put(tx, key, b"v"))
            .unwrap();
    }

    fn keys(db: &Database, ks: Keyspace) -> Vec<Vec<u8>> {
        let mut w = db.worker().unwrap();
        let (keys, _) = w
            .run(|tx| {
                let mut out = Vec::new();
                GenKeys::begin(tx, ks)?.scan(
                    tx,
                    Bound::Unbounded,
                    Bound::Unbounded,
                    usize::MAX,
                    |k, _| {
                        out.push(k.to_vec());
                        true
                    },
                )?;
                Ok(out)
            })
            .unwrap();
        keys
    }

    #[test]
    fn a_flush_hides_every_key_at_once_and_a_purge_removes_them() {
        let db = db();
        let ks = Keyspace::open(&db).unwrap();
        for k in [&b"a"[..], b"b", b"\xff\xff"] {
            put(&db, ks, k);
        }
        assert_eq!(keys(&db, ks).len(), 3);
        let mut w = db.worker().unwrap();
        let (generation, _) = w.run(|tx| ks.flush(tx)).unwrap();
        assert_eq!(generation, 1);
        assert!(keys(&db, ks).is_empty());
        put(&db, ks, b"c");
        assert_eq!(keys(&db, ks), vec![b"c".to_vec()]);
        assert_eq!(db.approximate_len(ks.keys), 4);
        let (purged, _) = w.run(|tx| purge_chunk(tx, ks)).unwrap();
        assert_eq!(purged, 3);
        let (purged, _) = w.run(|tx| purge_chunk(tx, ks)).unwrap();
        assert_eq!(purged, 0);
        assert_eq!(keys(&db, ks), vec![b"c".to_vec()]);
    }

    #[test]
    fn keys_of_a_legacy_table_move_into_the_current_generation() {
        let db = db();
        let legacy = db.create_table(LEGACY_TABLE).unwrap();
        let mut w = db.worker().unwrap();
        let ((), _ticket) = w
            .run(|tx| {
                for n in 0..(CHUNK_KEYS as u32 * 2 + 5) {
                    tx.put(legacy, &n.to_be_bytes(), b"old")?;
                }
                Ok(())
            })
            .unwrap();
        let ks = Keyspace::open(&db).unwrap();
        assert_eq!(keys(&db, ks).len(), CHUNK_KEYS * 2 + 5);
        let (left, _) = w
            .run(|tx| {
                let mut n = 0;
                tx.scan(legacy, Bound::Unbounded, Bound::Unbounded, 10, |_, _| {
                    n += 1;
                    true
                })?;
                Ok(n)
            })
            .unwrap();
        assert_eq!(left, 0);
    }
}
