//! The point index's table: one cache line per bucket, keys inline, a
//! sequence lock per bucket chain, growth by doubling.
//!
//! ```text
//! bucket (64 bytes): | version | slot 0: key (16), word (8) | slot 1 | next |
//! ```
//!
//! Why our own: scc's `HashIndex` keeps a bucket's metadata and its entries
//! in different cache lines, so a probe paid two dependent misses, and a
//! profile of YCSB (1 M keys, 1 thread) put 44% of all samples on those two
//! loads (BENCHMARKS.md, "A one-line hash index"). Here a probe of a key in
//! its home bucket touches that one line.
//!
//! Readers take no lock and write nothing: they read a bucket's version,
//! the chain's slots, then the version again, and retry when it moved (a
//! seqlock; Boehm, "Can seqlocks get along with programming language
//! memory models?", 2012). Every field is an atomic, so a racing write is a
//! stale read the version check rejects, never undefined behaviour.
//! Writers lock the head bucket's version for the whole chain.
//!
//! Overflow buckets hang off a full bucket's `next`; they are never
//! unlinked while the table lives, so a reader following a stale `next`
//! still reads valid memory. Removal empties a slot in place.
//!
//! Growth: once the overflow buckets number a quarter of the home buckets
//! (about 1.65 keys per bucket), a table twice the size is built (on a
//! thread of its own, see `point`). The builder locks each old chain in
//! turn, copies it, and marks it `MOVED` (frozen for good) before
//! publishing the new table.
//! Readers treat a locked bucket as a miss, which the caller answers from
//! the tree. Readers and writers that meet a moved chain follow the old
//! table's `successor` to the table being built; writers change the key's
//! chain there, under that chain's lock, which the copy also takes: so no
//! insert is lost to a growth, and a removed key cannot live on in the copy.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::index::sync::{fence, spin_wait, AtomicPtr, AtomicU64, AtomicUsize};

/// A writer holds the chain.
const LOCKED: u64 = 1;
/// The chain was copied into a newer table and will never change again.
const MOVED: u64 = 2;
/// One change of a chain's contents.
const STEP: u64 = 4;
/// Slots per bucket: 8 bytes of version, two 24-byte slots and 8 bytes of
/// `next` fill one cache line.
const SLOTS: usize = 2;
/// Overflow buckets per home bucket that trigger growth.
const GROW_AT_OVERFLOW_PER: usize = 4;

/// A key as the table stores it: two words (see `point::ShortKey`).
pub(super) type KeyWords = [u64; 2];

/// One entry; `word == 0` means empty (record words are non-null pointers).
#[derive(Default)]
struct Slot {
    key: [AtomicU64; 2],
    word: AtomicU64,
}

impl Slot {
    #[inline]
    fn key(&self) -> KeyWords {
        [self.key[0].load(Relaxed), self.key[1].load(Relaxed)]
    }

    /// Fills the slot (the caller holds its chain, or owns its table).
    #[inline]
    fn fill(&self, key: KeyWords, word: u64) {
        self.key[0].store(key[0], Relaxed);
        self.key[1].store(key[1], Relaxed);
        self.word.store(word, Relaxed);
    }
}

#[repr(C, align(64))]
#[derive(Default)]
struct Bucket {
    /// Sequence number of the chain it heads, with `LOCKED` and `MOVED`.
    /// Unused in overflow buckets.
    version: AtomicU64,
    slots: [Slot; SLOTS],
    next: AtomicPtr<Bucket>,
}

impl Bucket {
    /// This bucket and the overflow buckets chained after it.
    #[inline]
    fn chain(&self) -> impl Iterator<Item = &Bucket> {
        std::iter::successors(Some(self), |bucket| {
            // SAFETY: overflow buckets live as long as their table, and the
            // caller keeps the table alive (see `Table`).
            unsafe { bucket.next.load(Acquire).as_ref() }
        })
    }

    /// Every slot of the chain.
    #[inline]
    fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.chain().flat_map(|bucket| &bucket.slots)
    }

    /// The word stored for `key` in this chain, read without the lock.
    #[inline]
    fn find(&self, key: KeyWords) -> Option<u64> {
        self.slots().find_map(|slot| {
            let word = slot.word.load(Relaxed);
            (word != 0 && slot.key() == key).then_some(word)
        })
    }

    /// Takes the chain's lock; `Err` with the version if it was moved.
    #[inline]
    fn lock(&self) -> Result<u64, u64> {
        loop {
            let version = self.version.load(Relaxed);
            if version & MOVED != 0 {
                return Err(version);
            }
            if version & LOCKED == 0
                && self
                    .version
                    .compare_exchange_weak(version, version | LOCKED, Acquire, Relaxed)
                    .is_ok()
            {
                // Orders the lock before the slot writes that follow, for
                // readers' version check (the seqlock writer's fence).
                fence(Release);
                return Ok(version);
            }
            spin_wait();
        }
    }

    /// Releases the lock taken at `version`, counting a change if `changed`.
    #[inline]
    fn unlock(&self, version: u64, changed: bool) {
        let next = if changed { version + STEP } else { version };
        self.version.store(next, Release);
    }

    /// Visits every occupied slot of the chain (under its lock, or frozen).
    fn for_each(&self, mut visit: impl FnMut(KeyWords, u64)) {
        for slot in self.slots() {
            let word = slot.word.load(Relaxed);
            if word != 0 {
                visit(slot.key(), word);
            }
        }
    }
}

/// What a read found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// The key's word.
    Hit(u64),
    /// Not here, or a writer was in the way.
    Miss,
    /// The key's chain was moved to the successor table.
    Moved,
}

/// What an insert did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Inserted {
    /// The key was added, or was there already.
    Done,
    /// The key was added and the table has grown past its threshold.
    Grow,
    /// The bucket is moved: the table is being replaced.
    Moved,
}

/// One generation of the hash table: home buckets and their overflow.
pub(super) struct Table {
    buckets: Box<[Bucket]>,
    mask: usize,
    overflow: AtomicUsize,
    /// The table this one is being moved into; set before the first chain
    /// is marked `MOVED`, so a reader or writer that meets a moved chain
    /// finds the key's new home here. Not owned.
    successor: AtomicPtr<Table>,
}

impl Table {
    /// A table of `buckets` home buckets (a power of two).
    pub(super) fn new(buckets: usize) -> Self {
        assert!(
            buckets.is_power_of_two(),
            "bucket count must be a power of two"
        );
        Self {
            buckets: (0..buckets).map(|_| Bucket::default()).collect(),
            mask: buckets - 1,
            overflow: AtomicUsize::new(0),
            successor: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The number of home buckets.
    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }

    #[inline]
    fn home(&self, hash: u64) -> &Bucket {
        &self.buckets[hash as usize & self.mask]
    }

    /// Starts loading the home bucket of `hash` into cache.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        epochdb_memory::prefetch_lines(self.home(hash), 1);
    }

    /// The word for `key`: a miss if absent or if a writer was in the way
    /// (the caller then asks the tree); `Moved` if the key's chain was
    /// copied into [`Table::successor`], which the caller asks instead.
    #[inline]
    pub(super) fn get(&self, hash: u64, key: KeyWords) -> Probe {
        let home = self.home(hash);
        for _ in 0..4 {
            let version = home.version.load(Acquire);
            if version & MOVED != 0 {
                return Probe::Moved;
            }
            if version & LOCKED != 0 {
                return Probe::Miss;
            }
            let found = home.find(key);
            // The seqlock reader's fence: the slot loads above happen before
            // the version load below.
            fence(Acquire);
            if home.version.load(Relaxed) == version {
                return found.map_or(Probe::Miss, Probe::Hit);
            }
        }
        Probe::Miss
    }

    /// Adds `key → word` unless the key is present. `Moved` if the key's
    /// chain was moved: the caller goes on in [`Table::successor`].
    pub(super) fn insert(&self, hash: u64, key: KeyWords, word: u64) -> Inserted {
        let home = self.home(hash);
        let Ok(version) = home.lock() else {
            return Inserted::Moved;
        };
        if home.find(key).is_some() {
            home.unlock(version, false);
            return Inserted::Done;
        }
        let grew = self.put(home, key, word);
        home.unlock(version, true);
        if grew {
            Inserted::Grow
        } else {
            Inserted::Done
        }
    }

    /// Stores the entry in the chain's first empty slot, adding an overflow
    /// bucket if there is none; returns whether the table should grow. The
    /// caller holds the chain (or owns the unpublished table).
    fn put(&self, home: &Bucket, key: KeyWords, word: u64) -> bool {
        if let Some(empty) = home.slots().find(|slot| slot.word.load(Relaxed) == 0) {
            empty.fill(key, word);
            return false;
        }
        let extra = Box::new(Bucket::default());
        extra.slots[0].fill(key, word);
        let last = home.chain().last().expect("a chain has its home bucket");
        // Release: a reader that sees the pointer sees the bucket's contents.
        last.next.store(Box::into_raw(extra), Release);
        self.overflow.fetch_add(1, Relaxed);
        self.past_threshold()
    }

    /// Whether the overflow buckets have reached the growth threshold.
    pub(super) fn past_threshold(&self) -> bool {
        self.overflow.load(Relaxed) * GROW_AT_OVERFLOW_PER > self.buckets.len()
    }

    /// Removes `key` if it maps to `word`; `Err(())` if the bucket is moved
    /// (the caller goes on in [`Table::successor`]).
    pub(super) fn remove_if_is(&self, hash: u64, key: KeyWords, word: u64) -> Result<(), ()> {
        let home = self.home(hash);
        let version = home.lock().map_err(|_| ())?;
        let held = home
            .slots()
            .find(|slot| slot.word.load(Relaxed) == word && slot.key() == key);
        if let Some(slot) = held {
            slot.word.store(0, Relaxed);
        }
        home.unlock(version, held.is_some());
        Ok(())
    }

    /// Copies every entry into `into` (not yet published), freezing each
    /// chain as `MOVED` once copied. `hash_of` recomputes an entry's hash.
    ///
    /// Writers that meet a frozen chain meanwhile go on in `into` (see
    /// [`Table::successor`]), so its chains are written under their locks
    /// here too. A key a writer adds there cannot also be in the chain
    /// being copied: the writer came because that key's chain was frozen,
    /// that is, already copied.
    pub(super) fn move_into(&self, into: &Table, hash_of: impl Fn(KeyWords) -> u64) {
        // Release: whoever sees a `MOVED` below sees the successor.
        self.successor
            .store(std::ptr::from_ref(into).cast_mut(), Release);
        for home in self.buckets.iter() {
            let Ok(version) = home.lock() else {
                continue; // moved already: never happens with one mover
            };
            home.for_each(|key, word| {
                into.insert(hash_of(key), key, word);
            });
            home.version.store((version + STEP) | MOVED, Release);
        }
    }

    /// The table a moved chain's entries went to. Call only after `get`,
    /// `insert` or `remove_if_is` answered that the chain was moved.
    pub(super) fn successor(&self) -> &Table {
        // Pairs with the `Release` store of `MOVED` that the caller saw
        // (its version load was relaxed).
        fence(Acquire);
        let next = self.successor.load(Relaxed);
        assert!(!next.is_null(), "a moved chain's table has a successor");
        // SAFETY: the successor replaces this table, so it is freed only
        // after this one is (an epoch later), and the caller, which still
        // holds this table, is epoch-protected (see `point`).
        unsafe { &*next }
    }

    /// Entries held (tests; a racy count under concurrent writes).
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        let mut count = 0;
        for home in self.buckets.iter() {
            home.for_each(|_, _| count += 1);
        }
        count
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        for home in self.buckets.iter() {
            let mut next = home.next.load(Relaxed);
            while !next.is_null() {
                // SAFETY: every overflow bucket was made by `Box::into_raw`
                // in `put` and is linked from exactly one place; the table is
                // being dropped, so no reader or writer remains.
                let bucket = unsafe { Box::from_raw(next) };
                next = bucket.next.load(Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(key: KeyWords) -> u64 {
        key[0].wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    #[test]
    fn a_bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn chains_hold_more_than_a_bucket_and_signal_growth() {
        let table = Table::new(4);
        let mut grow = false;
        // Every key in bucket 0: a chain of overflow buckets.
        for k in 0..12u64 {
            let key = [k, 0];
            match table.insert(0, key, k + 100) {
                Inserted::Grow => grow = true,
                Inserted::Done => {}
                Inserted::Moved => panic!("nothing moved"),
            }
        }
        assert!(grow, "five overflow buckets on four homes asks to grow");
        for k in 0..12u64 {
            assert_eq!(table.get(0, [k, 0]), Probe::Hit(k + 100));
        }
        assert_eq!(table.get(0, [12, 0]), Probe::Miss);
        assert_eq!(table.count(), 12);
        table.remove_if_is(0, [5, 0], 999).unwrap();
        assert_eq!(
            table.get(0, [5, 0]),
            Probe::Hit(105),
            "another word keeps it"
        );
        table.remove_if_is(0, [5, 0], 105).unwrap();
        assert_eq!(table.get(0, [5, 0]), Probe::Miss);
        assert_eq!(
            table.insert(0, [13, 0], 113),
            Inserted::Done,
            "refills the hole"
        );
        assert_eq!(table.count(), 12);
    }

    #[test]
    fn a_moved_table_sends_every_key_to_its_copy() {
        let old = Table::new(2);
        for k in 1..=20u64 {
            old.insert(h([k, 7]), [k, 7], k);
        }
        let new = Table::new(8);
        old.move_into(&new, h);
        for k in 1..=20u64 {
            assert_eq!(old.get(h([k, 7]), [k, 7]), Probe::Moved);
            assert_eq!(new.get(h([k, 7]), [k, 7]), Probe::Hit(k));
        }
        assert_eq!(old.insert(h([1, 7]), [1, 7], 1), Inserted::Moved);
        assert_eq!(old.remove_if_is(h([1, 7]), [1, 7], 1), Err(()));
        assert_eq!(new.count(), 20);
    }
}
