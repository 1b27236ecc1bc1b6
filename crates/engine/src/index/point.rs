//! A hash index beside the B+-tree for point reads of short keys.
//!
//! Why: a point read through the tree pays one dependent cache miss per
//! level below the cached top (BENCHMARKS.md, "The engine against Silo":
//! the descent was 55% of a 10 M-key YCSB run); a hash probe pays about
//! one. The tree stays the index of record — scans, phantom protection
//! (leaf versions for missing keys) and longer keys all go through it —
//! and this map holds, for every key of at most [`MAX_KEY`] bytes, the
//! same record word the tree holds.
//!
//! The invariant that makes a hit as good as a tree lookup: at every
//! instant the map is a subset of the tree. [`crate::table::Table`] puts an
//! entry here only while holding the record's lock and knowing the record
//! is in the tree (just inserted — a fresh placeholder is born locked — or
//! found there by a read that missed here, and not marked unlinked), and
//! removes it before the tree removal, also under the lock (every unlink
//! locks the record first), so a fill and a removal of the same record
//! cannot interleave. A miss falls back to the tree, which also yields the
//! leaf version for a missing key.
//!
//! Filled two ways: by inserts, and by reads that missed here but found
//! the key in the tree (records loaded by recovery, which skips the map so
//! that it runs at the speed of the tree). Being a cache of the tree is
//! what lets the table below stay simple: a reader that meets a writer or a
//! table being replaced just misses, and an insert that meets a table being
//! replaced is dropped (a later read fills it). Removals alone must reach
//! the table that will stay: one that meets a copied chain is handed to
//! the thread building the new table, which applies it before publishing.
//!
//! The table is our own (`buckets`): one cache line per bucket with the keys
//! inline, so a probe costs one miss, where scc's `HashIndex` (its first
//! form) cost two. Readers hold no reference count on the table they
//! probe; a replaced table is freed through the database's epochs (every
//! probe runs inside an epoch-protected transaction) once every thread
//! has left the epoch in which it was replaced, or with the index where no
//! epochs are attached (the unit tests).

mod buckets;
mod sync;

use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::OnceLock;

use epochdb_epoch::EpochManager;
use parking_lot::Mutex;

use buckets::{Inserted, KeyWords, Table};
use sync::AtomicPtr;

/// Longest key the map holds; longer keys are read through the tree only.
pub(crate) const MAX_KEY: usize = 15;

/// Home buckets of a new index (4 KiB).
const FIRST_BUCKETS: usize = 64;

/// A key of at most [`MAX_KEY`] bytes, zero-padded, its length in the last
/// byte, so equal keys are equal words and different lengths differ.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ShortKey(KeyWords);

impl ShortKey {
    #[inline]
    fn new(key: &[u8]) -> Option<Self> {
        if key.len() > MAX_KEY {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..key.len()].copy_from_slice(key);
        bytes[15] = key.len() as u8;
        let (lo, hi) = bytes.split_at(8);
        Some(Self([
            u64::from_le_bytes(lo.try_into().expect("8 bytes")),
            u64::from_le_bytes(hi.try_into().expect("8 bytes")),
        ]))
    }
}

/// Hashes a key's two words: a multiply folds the second into the first,
/// then MurmurHash3's 64-bit finalizer carries every input bit to the low
/// bits the table indexes by.
#[inline]
fn hash(key: KeyWords) -> u64 {
    let mut h = key[0] ^ key[1].rotate_left(32).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Short key → record word, kept a subset of the tree by the caller (see
/// the module comment).
pub(crate) struct PointIndex {
    /// The table in use. Never null; a replaced table goes to an epoch
    /// action (or to `replaced`, without epochs).
    current: AtomicPtr<Table>,
    /// Tables replaced by growth while no epochs were attached, freed with
    /// the index; its lock also makes one thread at a time the one that
    /// grows the table. Raw pointers, not boxes: readers may still hold
    /// references to them, which a `Box`'s claim of unique ownership would
    /// contradict.
    replaced: Mutex<Vec<*mut Table>>,
    /// The database's epochs, through which replaced tables are freed.
    epochs: OnceLock<EpochManager>,
    /// Removals that met a chain already copied into the table being
    /// built: the grower applies them to it before publishing it, under
    /// this lock, so a removal never waits for a growth.
    deferred: sync::Mutex<Vec<(KeyWords, u64)>>,
}

// SAFETY: the raw pointers are to `Table`s owned by the index, which are
// shared only through atomics (see `buckets`).
unsafe impl Send for PointIndex {}
// SAFETY: as above.
unsafe impl Sync for PointIndex {}

impl PointIndex {
    pub(crate) fn new() -> Self {
        Self::with_buckets(FIRST_BUCKETS)
    }

    fn with_buckets(buckets: usize) -> Self {
        Self {
            current: AtomicPtr::new(Box::into_raw(Box::new(Table::new(buckets)))),
            replaced: Mutex::new(Vec::new()),
            epochs: OnceLock::new(),
            deferred: sync::Mutex::new(Vec::new()),
        }
    }

    /// Frees tables replaced from now on through `epochs`, whose protection
    /// every caller of this index holds.
    pub(crate) fn attach_epochs(&self, epochs: &EpochManager) {
        let _ = self.epochs.set(epochs.clone());
    }

    #[inline]
    fn table(&self) -> &Table {
        // SAFETY: `current` always points to a live table. A replaced one is
        // freed only after every epoch-protected caller that could have
        // loaded it has left its epoch (see `grow`), or with the index.
        unsafe { &*self.current.load(Acquire) }
    }

    /// The word for `key`, if the map holds it (and no writer was in its
    /// bucket at the time).
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<u64> {
        let key = ShortKey::new(key)?;
        self.table().get(hash(key.0), key.0)
    }

    /// Starts loading the bucket `key` hashes to, for a `get` soon after.
    #[inline]
    pub(crate) fn prefetch(&self, key: &[u8]) {
        if let Some(key) = ShortKey::new(key) {
            self.table().prefetch(hash(key.0));
        }
    }

    /// Whether `key` is short enough for the map.
    #[inline]
    pub(crate) fn covers(key: &[u8]) -> bool {
        key.len() <= MAX_KEY
    }

    /// Adds `key → word` unless the key is there (a no-op for a long key,
    /// and dropped while the table is being replaced). The caller holds
    /// the record's lock, and the record is in the tree under `key` — just
    /// inserted, or found there and not unlinked — so an entry already
    /// there can only be this same word, put by a concurrent fill.
    #[inline]
    pub(crate) fn insert(&self, key: &[u8], word: u64) {
        let Some(key) = ShortKey::new(key) else {
            return;
        };
        let table = self.table();
        if table.insert(hash(key.0), key.0, word) == Inserted::Grow {
            self.grow(table);
        }
    }

    /// Removes `key` if it maps to `word`. The caller holds that record's
    /// lock and removes it from the tree next. If the key's chain was
    /// already copied into a table being built, the removal is handed to
    /// the grower, which applies it before anyone can read that table.
    #[inline]
    pub(crate) fn remove_if_is(&self, key: &[u8], word: u64) {
        let Some(key) = ShortKey::new(key) else {
            return;
        };
        loop {
            let table = self.table();
            if table.remove_if_is(hash(key.0), key.0, word).is_ok() {
                return;
            }
            let mut deferred = self.deferred.lock();
            // The grower publishes under this lock: if `table` is still
            // current, the new table is unpublished and will get this.
            if std::ptr::eq(self.table(), table) {
                deferred.push((key.0, word));
                return;
            }
        }
    }

    /// Replaces `full` by a table twice its size, unless another thread is
    /// doing so or already did.
    #[cold]
    fn grow(&self, full: &Table) {
        let Some(mut replaced) = self.replaced.try_lock() else {
            return;
        };
        if !std::ptr::eq(self.table(), full) {
            return;
        }
        let bigger = Box::new(Table::new(full.len() * 2));
        full.move_into(&bigger, hash);
        let mut deferred = self.deferred.lock();
        for (key, word) in deferred.drain(..) {
            let unpublished = bigger.remove_if_is(hash(key), key, word);
            debug_assert!(unpublished.is_ok(), "nothing moves an unpublished table");
        }
        let old = self.current.swap(Box::into_raw(bigger), Release);
        drop(deferred);
        // Readers may still hold `old`: free it once every thread has left
        // the current epoch (BumpEpoch with an action, cpr-sigmod19 §3),
        // or keep it until the index drops.
        match self.epochs.get() {
            Some(epochs) => {
                let old = ReplacedTable(old);
                epochs.bump_with(move || drop(old));
            }
            None => replaced.push(old),
        }
    }

    /// Entries held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table().count()
    }
}

/// A replaced table on its way to being freed by an epoch action.
struct ReplacedTable(*mut Table);

// SAFETY: the table is shared only through atomics, and the action that
// owns this is its only owner once it runs.
unsafe impl Send for ReplacedTable {}

impl Drop for ReplacedTable {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::into_raw` and left `current`
        // once; the epoch action runs (or is dropped, at teardown) only
        // after every thread that could have read it has left its epoch.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

impl Drop for PointIndex {
    fn drop(&mut self) {
        let current = self.current.load(Acquire);
        for table in self.replaced.get_mut().drain(..).chain([current]) {
            // SAFETY: every table came from `Box::into_raw`, is held once,
            // either as `current` or in `replaced`, and no reader remains.
            drop(unsafe { Box::from_raw(table) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_distinct_by_content_and_length() {
        assert!(ShortKey::new(&[0u8; 16]).is_none());
        assert!(ShortKey::new(&[7u8; 15]).is_some());
        assert!(ShortKey::new(b"") != ShortKey::new(&[0]));
        assert!(ShortKey::new(&[0]) != ShortKey::new(&[0, 0]));
        assert!(ShortKey::new(b"abc") == ShortKey::new(b"abc"));
        assert!(ShortKey::new(b"abcdefgh1") != ShortKey::new(b"abcdefgh2"));
    }

    #[test]
    fn holds_short_keys_only_and_removes_by_word() {
        let index = PointIndex::new();
        index.insert(b"k1", 10);
        index.insert(&[1u8; 16], 11);
        assert_eq!(index.get(b"k1"), Some(10));
        assert_eq!(index.get(&[1u8; 16]), None, "long keys stay in the tree");
        assert_eq!(index.len(), 1);
        index.remove_if_is(b"k1", 99);
        assert_eq!(index.get(b"k1"), Some(10), "another record's word keeps it");
        index.remove_if_is(b"k1", 10);
        assert_eq!(index.get(b"k1"), None);
    }

    /// Not a test but a measurement (BENCHMARKS.md, "growth pauses"):
    /// inserts 10 M keys on one thread and prints every insert that took
    /// over a millisecond — the ones that doubled the table.
    /// `cargo test --release -p epochdb-engine --lib growth_pauses --
    /// --ignored --nocapture`
    #[test]
    #[ignore = "a measurement; prints, asserts nothing about time"]
    fn growth_pauses() {
        let index = PointIndex::new();
        let started = std::time::Instant::now();
        let mut pauses = Vec::new();
        for k in 0..10_000_000u64 {
            let insert = std::time::Instant::now();
            index.insert(&k.to_be_bytes(), k + 1);
            let took = insert.elapsed();
            if took > std::time::Duration::from_millis(1) {
                pauses.push((k, index.table().len(), took));
            }
        }
        eprintln!("10 M inserts in {:?}", started.elapsed());
        for (entries, buckets, took) in pauses {
            eprintln!("at {entries} entries, grew to {buckets} buckets: {took:?}");
        }
    }

    #[test]
    fn growth_keeps_every_entry() {
        const KEYS: u64 = if cfg!(miri) { 500 } else { 5_000 };
        let index = PointIndex::with_buckets(2);
        for k in 1..=KEYS {
            index.insert(&k.to_be_bytes(), k);
        }
        assert!(index.table().len() >= KEYS as usize / 3, "the table grew");
        assert!(index.replaced.lock().len() >= 5);
        assert_eq!(index.len(), KEYS as usize);
        for k in 1..=KEYS {
            assert_eq!(index.get(&k.to_be_bytes()), Some(k));
        }
        for k in (1..=KEYS).step_by(2) {
            index.remove_if_is(&k.to_be_bytes(), k);
        }
        for k in 1..=KEYS {
            let expected = (k % 2 == 0).then_some(k);
            assert_eq!(index.get(&k.to_be_bytes()), expected);
        }
    }

    /// A table replaced while a reader is protected stays readable until
    /// the reader leaves its epoch, then is freed (miri checks both: a use
    /// after free, and a leak).
    #[test]
    fn replaced_tables_are_freed_through_epochs() {
        let epochs = EpochManager::new(4);
        let mut reader = epochs.register().expect("a slot");
        reader.protect();
        let index = PointIndex::with_buckets(2);
        index.attach_epochs(&epochs);
        index.insert(b"first", 1);
        let first: &Table = index.table();
        for k in 0..200u64 {
            index.insert(&k.to_be_bytes(), k + 10);
        }
        assert!(!std::ptr::eq(index.table(), first), "the table grew");
        assert!(index.replaced.lock().is_empty(), "handed to the epochs");
        epochs.try_drain();
        // Still protected in the epoch it was replaced in: still there.
        let moved = first.get(
            hash(ShortKey::new(b"first").unwrap().0),
            ShortKey::new(b"first").unwrap().0,
        );
        assert_eq!(moved, None, "a moved table answers nothing");
        reader.unprotect();
        epochs.try_drain();
        assert_eq!(index.get(b"first"), Some(1));
    }

    /// Writers insert and remove their own keys (growing the table from
    /// two buckets as they go) while readers probe everyone's: a reader
    /// may miss a key, but never sees a word that key did not hold, and a
    /// writer sees its own removals at once.
    #[test]
    fn readers_see_only_words_their_keys_held() {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        const WRITERS: u64 = 2;
        // Miri runs a small version (it interprets every access).
        const KEYS: u64 = if cfg!(miri) { 100 } else { 20_000 };
        let index = PointIndex::with_buckets(2);
        let stop = AtomicBool::new(false);
        // Key `k` of writer `w` only ever holds the word `word(w, k, round)`.
        let word = |w: u64, k: u64, round: u64| (round << 32) | (w << 20) | (k + 1);
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let index = &index;
                    scope.spawn(move || {
                        for round in 1..=3u64 {
                            for k in 0..KEYS {
                                let key = (w * KEYS + k).to_be_bytes();
                                index.insert(&key, word(w, k, round));
                            }
                            for k in (0..KEYS).step_by(3) {
                                let key = (w * KEYS + k).to_be_bytes();
                                index.remove_if_is(&key, word(w, k, round));
                                assert_eq!(index.get(&key), None, "own removal seen");
                            }
                            for k in 0..KEYS {
                                let key = (w * KEYS + k).to_be_bytes();
                                index.remove_if_is(&key, word(w, k, round));
                            }
                        }
                    })
                })
                .collect();
            for _ in 0..2 {
                let (index, stop) = (&index, &stop);
                scope.spawn(move || {
                    while !stop.load(Relaxed) {
                        for key in 0..WRITERS * KEYS {
                            if let Some(found) = index.get(&key.to_be_bytes()) {
                                let (w, k) = (key / KEYS, key % KEYS);
                                assert_eq!(found, word(w, k, found >> 32), "key {key}");
                            }
                        }
                    }
                });
            }
            for writer in writers {
                writer.join().expect("writer");
            }
            stop.store(true, Relaxed);
        });
        assert_eq!(index.len(), 0);
    }
}

#[cfg(all(test, engine_shuttle))]
mod schedule_tests {
    //! The seqlock and the move under shuttle's randomized schedulers (PCT
    //! and uniform random, many thousand schedules each) over a table of one
    //! or two buckets: `RUSTFLAGS="--cfg engine_shuttle" cargo test -p
    //! epochdb-engine --release --lib schedule_`. Shuttle explores
    //! interleavings under sequential consistency; the fences' weaker
    //! orderings are the standard seqlock's (see `buckets`).

    use super::*;
    use shuttle::sync::atomic::AtomicBool;
    use shuttle::sync::Arc;
    use std::sync::atomic::Ordering::{Acquire, Release};

    /// Runs `body` under many schedules of both of shuttle's schedulers.
    fn check(body: impl Fn() + Send + Sync + 'static) {
        let body = std::sync::Arc::new(body);
        let pct = body.clone();
        shuttle::check_pct(move || pct(), 20_000, 3);
        shuttle::check_random(move || body(), 20_000);
    }

    fn key(k: u64) -> [u8; 8] {
        k.to_be_bytes()
    }

    /// A reader racing an insert into a full chain (so the insert adds an
    /// overflow bucket) sees the word or nothing, and the inserter's own
    /// read afterwards sees it.
    #[test]
    fn schedule_a_read_racing_an_insert_sees_the_word_or_nothing() {
        check(|| {
            let index = Arc::new(PointIndex::with_buckets(1));
            index.insert(&key(1), 11);
            index.insert(&key(2), 12);
            let writer = {
                let index = index.clone();
                shuttle::thread::spawn(move || {
                    index.insert(&key(3), 13);
                    assert_eq!(index.get(&key(3)), Some(13));
                })
            };
            let seen = index.get(&key(3));
            assert!(seen.is_none() || seen == Some(13), "{seen:?}");
            assert!(matches!(index.get(&key(1)), None | Some(11)));
            writer.join().unwrap();
        });
    }

    /// Once a removal has finished (here: its flag is seen), no reader
    /// finds the entry, even while another thread moves the table — the
    /// map stays a subset of the tree.
    #[test]
    fn schedule_a_finished_removal_is_never_undone_by_growth() {
        check(|| {
            let index = Arc::new(PointIndex::with_buckets(1));
            index.insert(&key(1), 11);
            index.insert(&key(2), 12);
            let removed = Arc::new(AtomicBool::new(false));
            let remover = {
                let (index, removed) = (index.clone(), removed.clone());
                shuttle::thread::spawn(move || {
                    index.remove_if_is(&key(1), 11);
                    removed.store(true, Release);
                })
            };
            let grower = {
                let index = index.clone();
                shuttle::thread::spawn(move || index.grow(index.table()))
            };
            if removed.load(Acquire) {
                assert_eq!(index.get(&key(1)), None);
            }
            remover.join().unwrap();
            grower.join().unwrap();
            assert_eq!(index.get(&key(1)), None);
            assert_eq!(index.get(&key(2)), Some(12));
            assert_eq!(index.table().len(), 2);
        });
    }

    /// An insert racing growth is either copied or dropped, never half
    /// there: afterwards the key maps to its word or is missing, and the
    /// keys already present all survive.
    #[test]
    fn schedule_an_insert_racing_growth_is_kept_or_dropped_whole() {
        check(|| {
            let index = Arc::new(PointIndex::with_buckets(1));
            index.insert(&key(1), 11);
            let inserter = {
                let index = index.clone();
                shuttle::thread::spawn(move || index.insert(&key(2), 12))
            };
            index.grow(index.table());
            inserter.join().unwrap();
            assert!(matches!(index.get(&key(2)), None | Some(12)));
            assert_eq!(index.get(&key(1)), Some(11));
        });
    }

    /// A slot emptied and reused for another key while a reader probes it:
    /// the version check keeps the reader from pairing the old key with the
    /// new word.
    #[test]
    fn schedule_a_reused_slot_never_pairs_a_key_with_another_word() {
        check(|| {
            let index = Arc::new(PointIndex::with_buckets(1));
            index.insert(&key(1), 11);
            let writer = {
                let index = index.clone();
                shuttle::thread::spawn(move || {
                    index.remove_if_is(&key(1), 11);
                    index.insert(&key(3), 13);
                })
            };
            let old = index.get(&key(1));
            assert!(old.is_none() || old == Some(11), "{old:?}");
            let new = index.get(&key(3));
            assert!(new.is_none() || new == Some(13), "{new:?}");
            writer.join().unwrap();
        });
    }
}
