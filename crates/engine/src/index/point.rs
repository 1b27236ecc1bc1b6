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
//! what lets the table below stay simple: a reader that meets a writer
//! just misses. Readers and writers that meet a chain a growth has copied
//! follow it to the table being built (writers write there), so reads keep
//! hitting during a growth, no insert is lost to one, and no removed key
//! survives in the copy.
//!
//! Growth doubles the table on a thread of its own, so the inserting
//! transaction, which holds record locks, does not wait while a table of
//! hundreds of megabytes is allocated, faulted in and filled.
//!
//! The table is our own (`buckets`): one cache line per bucket with the keys
//! inline, so a probe costs one miss, where scc's `HashIndex` (its first
//! form) cost two. Readers hold no reference count on the table they
//! probe; a replaced table is freed through the database's epochs (every
//! probe runs inside an epoch-protected transaction) once every thread
//! has left the epoch in which it was replaced, or with the index where no
//! epochs are attached (the unit tests).

mod buckets;

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, OnceLock};

use epochdb_epoch::EpochManager;
use parking_lot::Mutex;

use super::sync::{AtomicBool, AtomicPtr};
use buckets::{Inserted, KeyWords, Probe, Table};

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
    /// What the thread that doubles the table shares with every caller.
    shared: Arc<Shared>,
    /// Whether growth runs on a thread of its own (the default) or in the
    /// inserting thread (unit tests that count entries after a load).
    background: bool,
    /// Growth threads started and not yet joined. Finished ones are let
    /// go when the next starts, so that start never waits for a thread
    /// that has cleared `growing` but not yet exited; the rest are joined
    /// when the index drops.
    growers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// The index's state, shared with a growth thread.
struct Shared {
    /// The table in use. Never null; a replaced table goes to an epoch
    /// action (or to `replaced`, without epochs).
    current: AtomicPtr<Table>,
    /// Whether a growth is under way or about to start: at most one at a
    /// time, and the inserts that see the table full meanwhile go on.
    growing: AtomicBool,
    /// Tables replaced by growth while no epochs were attached, freed with
    /// the index. Raw pointers, not boxes: readers may still hold
    /// references to them, which a `Box`'s claim of unique ownership would
    /// contradict.
    replaced: Mutex<Vec<*mut Table>>,
    /// The database's epochs, through which replaced tables are freed.
    epochs: OnceLock<EpochManager>,
}

// SAFETY: the raw pointers are to `Table`s owned by the index, which are
// shared only through atomics (see `buckets`).
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl PointIndex {
    pub(crate) fn new() -> Self {
        Self::with_buckets(FIRST_BUCKETS, true)
    }

    fn with_buckets(buckets: usize, background: bool) -> Self {
        Self {
            shared: Arc::new(Shared {
                current: AtomicPtr::new(Box::into_raw(Box::new(Table::new(buckets)))),
                growing: AtomicBool::new(false),
                replaced: Mutex::new(Vec::new()),
                epochs: OnceLock::new(),
            }),
            background,
            growers: Mutex::new(Vec::new()),
        }
    }

    /// Frees tables replaced from now on through `epochs`, whose protection
    /// every caller of this index holds.
    pub(crate) fn attach_epochs(&self, epochs: &EpochManager) {
        let _ = self.shared.epochs.set(epochs.clone());
    }

    /// The word for `key`, if the map holds it (and no writer was in its
    /// bucket at the time).
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<u64> {
        let key = ShortKey::new(key)?;
        let hash = hash(key.0);
        let mut table = self.shared.table();
        loop {
            match table.get(hash, key.0) {
                Probe::Hit(word) => return Some(word),
                Probe::Miss => return None,
                // Copied by a growth: the copy has it (or is being written,
                // and then misses).
                Probe::Moved => table = table.successor(),
            }
        }
    }

    /// Starts loading the bucket `key` hashes to, for a `get` soon after.
    #[inline]
    pub(crate) fn prefetch(&self, key: &[u8]) {
        if let Some(key) = ShortKey::new(key) {
            self.shared.table().prefetch(hash(key.0));
        }
    }

    /// Whether `key` is short enough for the map.
    #[inline]
    pub(crate) fn covers(key: &[u8]) -> bool {
        key.len() <= MAX_KEY
    }

    /// Adds `key → word` unless the key is there (a no-op for a long key).
    /// The caller holds the record's lock, and the record is in the tree
    /// under `key` — just inserted, or found there and not unlinked — so an
    /// entry already there can only be this same word, put by a concurrent
    /// fill. A chain already copied by a growth sends it on to the table
    /// being built.
    #[inline]
    pub(crate) fn insert(&self, key: &[u8], word: u64) {
        let Some(key) = ShortKey::new(key) else {
            return;
        };
        let hash = hash(key.0);
        let mut table = self.shared.table();
        loop {
            match table.insert(hash, key.0, word) {
                Inserted::Done => return,
                Inserted::Grow => return self.start_growth(table),
                Inserted::Moved => table = table.successor(),
            }
        }
    }

    /// Removes `key` if it maps to `word`. The caller holds that record's
    /// lock and removes it from the tree next. A chain already copied by a
    /// growth sends it on to the table being built, so the removed entry
    /// cannot survive in the copy.
    #[inline]
    pub(crate) fn remove_if_is(&self, key: &[u8], word: u64) {
        let Some(key) = ShortKey::new(key) else {
            return;
        };
        let hash = hash(key.0);
        let mut table = self.shared.table();
        while table.remove_if_is(hash, key.0, word).is_err() {
            table = table.successor();
        }
    }

    /// Doubles the table, unless a growth is already under way: on a
    /// thread of its own (2.9 s at 6.8 M entries in the inserting thread;
    /// BENCHMARKS.md, "growth pauses"). Inserts and reads meanwhile use the
    /// old table, whose chains just grow longer, until the copy freezes
    /// them.
    #[cold]
    fn start_growth(&self, full: &Table) {
        if self
            .shared
            .growing
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            return;
        }
        if !std::ptr::eq(self.shared.table(), full) {
            // A late signal from a table already replaced.
            self.shared.growing.store(false, Release);
            return;
        }
        if !self.background {
            self.shared.grow();
            return;
        }
        let mut growers = self.growers.lock();
        growers.retain(|grower| !grower.is_finished());
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("epochdb-index-grow".into())
            .spawn(move || shared.grow());
        match spawned {
            Ok(handle) => growers.push(handle),
            // No thread to be had: grow here rather than not at all.
            Err(_) => self.shared.grow(),
        }
    }

    /// Grows the current table in this thread, unless a growth is under
    /// way (the schedule tests).
    #[cfg(all(test, engine_shuttle))]
    fn grow_now(&self) {
        if self
            .shared
            .growing
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_ok()
        {
            self.shared.grow();
        }
    }

    /// Waits for a growth under way to finish (tests).
    #[cfg(test)]
    fn wait_for_growth(&self) {
        for grower in self.growers.lock().drain(..) {
            grower.join().expect("the growth thread");
        }
    }

    /// Entries held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shared.table().count()
    }

    /// The table in use (tests).
    #[cfg(test)]
    fn table(&self) -> &Table {
        self.shared.table()
    }
}

impl Shared {
    #[inline]
    fn table(&self) -> &Table {
        // SAFETY: `current` always points to a live table. A replaced one is
        // freed only after every epoch-protected caller that could have
        // loaded it has left its epoch (see `double`), or with the index;
        // the grower, which is not protected, is the only thread that
        // replaces it.
        unsafe { &*self.current.load(Acquire) }
    }

    /// Replaces the current table by one twice its size, and again while
    /// the new table is itself past its growth threshold (inserts went on
    /// during the copy, and the signals they gave meanwhile were not
    /// taken); then clears `growing`. The caller set `growing`, so no other
    /// thread replaces the current table meanwhile.
    fn grow(&self) {
        loop {
            self.double();
            if !self.table().past_threshold() {
                break;
            }
        }
        self.growing.store(false, Release);
    }

    /// One doubling of the current table.
    fn double(&self) {
        let full = self.table();
        // Allocated and faulted in before any chain is frozen: until the
        // copy starts, the old table serves everyone as before.
        let bigger = Box::into_raw(Box::new(Table::new(full.len() * 2)));
        // SAFETY: just made; freed only as a replaced table, later.
        full.move_into(unsafe { &*bigger }, hash);
        let old = self.current.swap(bigger, Release);
        // Readers may still hold `old`: free it once every thread has left
        // the current epoch (BumpEpoch with an action, cpr-sigmod19 §3),
        // or keep it until the index drops.
        match self.epochs.get() {
            Some(epochs) => {
                let old = ReplacedTable(old);
                epochs.bump_with(move || drop(old));
            }
            None => self.replaced.lock().push(old),
        }
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
        for grower in self.growers.get_mut().drain(..) {
            let _ = grower.join();
        }
    }
}

impl Drop for Shared {
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
    /// inserts 10 M keys on one thread, growing in that thread and then on
    /// a growth thread, and prints every insert that took over a
    /// millisecond, the total time and the entries the map kept.
    /// `cargo test --release -p epochdb-engine --lib growth_pauses --
    /// --ignored --nocapture`
    #[test]
    #[ignore = "a measurement; prints, asserts nothing about time"]
    fn growth_pauses() {
        const KEYS: u64 = 10_000_000;
        for background in [false, true] {
            let index = PointIndex::with_buckets(FIRST_BUCKETS, background);
            let started = std::time::Instant::now();
            let mut pauses = Vec::new();
            for k in 0..KEYS {
                let insert = std::time::Instant::now();
                index.insert(&k.to_be_bytes(), k + 1);
                let took = insert.elapsed();
                if took > std::time::Duration::from_millis(1) {
                    pauses.push((k, index.table().len(), took));
                }
            }
            let inserted = started.elapsed();
            index.wait_for_growth();
            let mode = if background {
                "growth thread"
            } else {
                "inserting thread"
            };
            eprintln!(
                "{mode}: {KEYS} inserts in {inserted:?} (growth done after {:?}), {} entries kept",
                started.elapsed(),
                index.len()
            );
            for (entries, buckets, took) in pauses {
                eprintln!("  at {entries} entries ({buckets} buckets): {took:?}");
            }
        }
    }

    #[test]
    fn growth_keeps_every_entry() {
        const KEYS: u64 = if cfg!(miri) { 500 } else { 5_000 };
        let index = PointIndex::with_buckets(2, false);
        for k in 1..=KEYS {
            index.insert(&k.to_be_bytes(), k);
        }
        assert!(index.table().len() >= KEYS as usize / 3, "the table grew");
        assert!(index.shared.replaced.lock().len() >= 5);
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

    /// With growth on its own thread, inserts and removals that meet a
    /// copied chain go on in the table being built: after the growths,
    /// every key inserted and not removed is there with its word, and no
    /// removed key is.
    #[test]
    fn background_growth_loses_no_write() {
        // A multiple of three: key `k - 1` is removed after key `k`.
        const KEYS: u64 = if cfg!(miri) { 300 } else { 60_000 };
        let index = PointIndex::with_buckets(2, true);
        for k in 1..=KEYS {
            index.insert(&k.to_be_bytes(), k);
            if k % 3 == 0 {
                index.remove_if_is(&(k - 1).to_be_bytes(), k - 1);
            }
        }
        index.wait_for_growth();
        assert!(index.table().len() >= KEYS as usize / 4, "the table grew");
        for k in 1..=KEYS {
            let expected = (k % 3 != 2).then_some(k);
            assert_eq!(index.get(&k.to_be_bytes()), expected, "key {k}");
        }
        assert_eq!(index.len(), (1..=KEYS).filter(|k| k % 3 != 2).count());
    }

    /// A table replaced while a reader is protected stays readable until
    /// the reader leaves its epoch, then is freed (miri checks both: a use
    /// after free, and a leak).
    #[test]
    fn replaced_tables_are_freed_through_epochs() {
        let epochs = EpochManager::new(4);
        let mut reader = epochs.register().expect("a slot");
        reader.protect();
        let index = PointIndex::with_buckets(2, false);
        index.attach_epochs(&epochs);
        index.insert(b"first", 1);
        let first: &Table = index.table();
        for k in 0..200u64 {
            index.insert(&k.to_be_bytes(), k + 10);
        }
        assert!(!std::ptr::eq(index.table(), first), "the table grew");
        assert!(
            index.shared.replaced.lock().is_empty(),
            "handed to the epochs"
        );
        epochs.try_drain();
        // Still protected in the epoch it was replaced in: still there.
        let moved = first.get(
            hash(ShortKey::new(b"first").unwrap().0),
            ShortKey::new(b"first").unwrap().0,
        );
        assert_eq!(moved, Probe::Moved, "a moved table sends readers on");
        reader.unprotect();
        epochs.try_drain();
        assert_eq!(index.get(b"first"), Some(1));
    }

    /// Writers insert and remove their own keys (growing the table from
    /// two buckets as they go, on a growth thread) while readers probe everyone's: a reader
    /// may miss a key, but never sees a word that key did not hold, and a
    /// writer sees its own removals at once.
    #[test]
    fn readers_see_only_words_their_keys_held() {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        const WRITERS: u64 = 2;
        // Miri runs a small version (it interprets every access).
        const KEYS: u64 = if cfg!(miri) { 100 } else { 20_000 };
        let index = PointIndex::with_buckets(2, true);
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
        index.wait_for_growth();
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
    use crate::index::shuttle_check::check;
    use shuttle::sync::atomic::AtomicBool;
    use shuttle::sync::Arc;
    use std::sync::atomic::Ordering::{Acquire, Release};

    fn key(k: u64) -> [u8; 8] {
        k.to_be_bytes()
    }

    /// A one-bucket index holding `entries` (key, word), with `there` run
    /// on a spawned thread while `here` runs on this one; the index once
    /// both are done.
    fn race(
        entries: &[(u64, u64)],
        there: impl FnOnce(&PointIndex) + Send + 'static,
        here: impl FnOnce(&PointIndex),
    ) -> Arc<PointIndex> {
        let index = Arc::new(PointIndex::with_buckets(1, false));
        for &(k, word) in entries {
            index.insert(&key(k), word);
        }
        let spawned = {
            let index = index.clone();
            shuttle::thread::spawn(move || there(&index))
        };
        here(&index);
        spawned.join().unwrap();
        index
    }

    /// A reader racing an insert into a full chain (so the insert adds an
    /// overflow bucket) sees the word or nothing, and the inserter's own
    /// read afterwards sees it.
    #[test]
    fn schedule_a_read_racing_an_insert_sees_the_word_or_nothing() {
        check(|| {
            let writer = |index: &PointIndex| {
                index.insert(&key(3), 13);
                assert_eq!(index.get(&key(3)), Some(13));
            };
            race(&[(1, 11), (2, 12)], writer, |index| {
                let seen = index.get(&key(3));
                assert!(seen.is_none() || seen == Some(13), "{seen:?}");
                assert!(matches!(index.get(&key(1)), None | Some(11)));
            });
        });
    }

    /// Once a removal has finished (here: its flag is seen), no reader
    /// finds the entry, even while another thread moves the table — the
    /// map stays a subset of the tree.
    #[test]
    fn schedule_a_finished_removal_is_never_undone_by_growth() {
        check(|| {
            let index = Arc::new(PointIndex::with_buckets(1, false));
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
                shuttle::thread::spawn(move || index.grow_now())
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

    /// An insert racing growth is kept whichever side of the copy it
    /// lands on, and the keys already present all survive.
    #[test]
    fn schedule_an_insert_racing_growth_is_kept() {
        check(|| {
            let inserter = |index: &PointIndex| index.insert(&key(2), 12);
            let index = race(&[(1, 11)], inserter, PointIndex::grow_now);
            assert_eq!(index.get(&key(2)), Some(12));
            assert_eq!(index.get(&key(1)), Some(11));
        });
    }

    /// A reader racing a growth finds the keys present all along (in the
    /// old table, in the copy, or a miss while a chain is locked), never a
    /// wrong word; once the growth is done it finds them all.
    #[test]
    fn schedule_a_read_during_growth_sees_the_word_or_nothing() {
        check(|| {
            let index = race(&[(1, 11), (2, 12)], PointIndex::grow_now, |index| {
                for (k, word) in [(1, 11), (2, 12)] {
                    let seen = index.get(&key(k));
                    assert!(seen.is_none() || seen == Some(word), "{seen:?}");
                }
            });
            assert_eq!(index.get(&key(1)), Some(11));
            assert_eq!(index.get(&key(2)), Some(12));
        });
    }

    /// A key inserted and removed again while the table grows is gone
    /// afterwards, wherever each of the two writes landed.
    #[test]
    fn schedule_an_insert_and_removal_racing_growth_leave_nothing() {
        check(|| {
            let writer = |index: &PointIndex| {
                index.insert(&key(2), 12);
                index.remove_if_is(&key(2), 12);
            };
            let index = race(&[(1, 11)], writer, PointIndex::grow_now);
            assert_eq!(index.get(&key(2)), None);
            assert_eq!(index.get(&key(1)), Some(11));
            assert_eq!(index.table().len(), 2);
        });
    }

    /// A slot emptied and reused for another key while a reader probes it:
    /// the version check keeps the reader from pairing the old key with the
    /// new word.
    #[test]
    fn schedule_a_reused_slot_never_pairs_a_key_with_another_word() {
        check(|| {
            let writer = |index: &PointIndex| {
                index.remove_if_is(&key(1), 11);
                index.insert(&key(3), 13);
            };
            race(&[(1, 11)], writer, |index| {
                let old = index.get(&key(1));
                assert!(old.is_none() || old == Some(11), "{old:?}");
                let new = index.get(&key(3));
                assert!(new.is_none() || new == Some(13), "{new:?}");
            });
        });
    }
}
