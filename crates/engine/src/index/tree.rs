//! A concurrent B+-tree with optimistic lock coupling (Leis et al., "The ART
//! of Practical Synchronization", DaMoN 2016), over byte-string keys stored
//! as head + tail words (see `key`).
//!
//! * Every node has a version word: bit 1 is the write lock; unlocking adds
//!   2 more, so every modification changes the version.
//! * Readers never write: they read a node's version, read its fields with
//!   relaxed atomic loads, then re-check the version (seqlock); on a change
//!   they restart from the root. Writers lock only the nodes they change
//!   (a leaf; on a split also its parent), by upgrading a version they read.
//! * Full inner nodes are split on the way down, so a split leaf always
//!   finds room in its parent. Inner nodes are never merged or freed while
//!   the tree lives.
//! * A leaf that a removal empties is unlinked (`unlink_empty`) unless it is
//!   the first child of its parent: under the locks of the parent, its left
//!   sibling and itself, the left sibling's `next` skips it and the parent
//!   drops it with its separator, so its key range joins the left
//!   sibling's. The leaf is marked obsolete (a version bit that never
//!   clears) and keeps its `next`, so a scan standing on it walks on; any
//!   transaction that recorded it fails validation. The leaf and the
//!   separator's key copy are handed to the caller to free through the
//!   epoch framework, as are removed keys' copies, so callers must be
//!   epoch-protected: a pointer read under protection stays valid until
//!   the protection ends.
//! * Leaves are linked left to right for range scans. Keys only ever move
//!   right (splits), or into the left sibling from an empty, unlinked leaf
//!   (new keys only), so a scan that follows `next` from a consistent leaf
//!   snapshot never misses a key that stays present throughout.

use std::ops::Bound;
use std::ptr;
use std::sync::atomic::Ordering;

use super::sync::{fence, spin_wait, AtomicPtr, AtomicU32, AtomicU64, AtomicU8};

use super::key::{compare, compare_lazy, key_bytes, make_tail, tail_allocation, Probe};

/// Entries per leaf and keys per inner node.
#[cfg(not(engine_shuttle))]
const CAPACITY: usize = 32;
/// Four under the schedule tests, so that a handful of keys splits leaves
/// and inner nodes (`tree_schedule_tests`).
#[cfg(engine_shuttle)]
const CAPACITY: usize = 4;
const LOCKED: u64 = 0b10;
/// Set, for good, in the version of an unlinked leaf (bit 0 is otherwise
/// always clear: a lock and an unlock each add `LOCKED`).
const OBSOLETE: u64 = 0b01;

#[repr(C)]
struct Header {
    version: AtomicU64,
    count: AtomicU32,
    leaf: bool,
    /// Leaves only: the slot of the last insert, or [`NO_INSERT`]. A hint
    /// for where to split (see `split_leaf`), written under the lock; it
    /// may be stale after removals, which only costs a worse split.
    last_insert: AtomicU8,
}

/// `Header::last_insert` before any insert.
const NO_INSERT: u8 = u8::MAX;

/// Field order matters: a lookup needs the header, the heads and then one
/// value, so those come first and are prefetched together; tails (needed
/// only when heads tie) come last.
#[repr(C)]
struct Leaf {
    header: Header,
    heads: [AtomicU64; CAPACITY],
    values: [AtomicU64; CAPACITY],
    tails: [AtomicU64; CAPACITY],
    next: AtomicPtr<Leaf>,
}

/// As for leaves: header, heads and children first, tails last.
#[repr(C)]
struct Inner {
    header: Header,
    heads: [AtomicU64; CAPACITY],
    children: [AtomicPtr<Header>; CAPACITY + 1],
    tails: [AtomicU64; CAPACITY],
}

fn zeroed<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

/// Where a key is, or would go, in a leaf: read optimistically (the caller
/// validates the leaf's version, or holds its lock).
struct Found {
    count: usize,
    /// The first slot whose key is `>= probe`.
    slot: usize,
    /// Whether that slot holds the probe itself.
    present: bool,
}

impl Leaf {
    #[inline]
    fn find(&self, probe: &Probe<'_>) -> Found {
        let count = self.header.count();
        let slot = search(&self.heads, &self.tails, count, probe, false);
        let present = slot < count && {
            let head = self.heads[slot].load(Ordering::Relaxed);
            let tail = self.tails[slot].load(Ordering::Relaxed);
            // SAFETY: as in `search`.
            unsafe { compare(probe, head, tail) }.is_eq()
        };
        Found {
            count,
            slot,
            present,
        }
    }

    fn allocate() -> *mut Header {
        Box::into_raw(Box::new(Leaf {
            header: Header {
                version: AtomicU64::new(0),
                count: AtomicU32::new(0),
                leaf: true,
                last_insert: AtomicU8::new(NO_INSERT),
            },
            heads: zeroed(),
            tails: zeroed(),
            values: zeroed(),
            next: AtomicPtr::new(ptr::null_mut()),
        }))
        .cast()
    }
}

impl Inner {
    fn allocate() -> *mut Inner {
        Box::into_raw(Box::new(Inner {
            header: Header {
                version: AtomicU64::new(0),
                count: AtomicU32::new(0),
                leaf: false,
                last_insert: AtomicU8::new(NO_INSERT),
            },
            heads: zeroed(),
            tails: zeroed(),
            children: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }))
    }
}

/// Lines of a node to prefetch: the header, the heads and the values or
/// children (16 + 256 + 264 bytes).
const PREFETCH_LINES: usize = 9;

/// Asks the CPU to start loading `node`'s first lines (header, heads, and
/// values or children) before we need them, so the misses of one node
/// overlap instead of queueing one after another (as Masstree prefetches
/// whole nodes).
#[inline(always)]
fn prefetch(node: *const Header) {
    epochdb_memory::prefetch_lines(node, PREFETCH_LINES);
}

/// The most walks [`Tree::prefetch_paths`] interleaves: enough to keep
/// a core's outstanding misses busy (about a dozen line-fill buffers).
pub(crate) const PREFETCH_WALKS: usize = 16;

/// Why an optimistic step failed: start again from the root.
struct Restart;

type Step<T> = Result<T, Restart>;

impl Header {
    #[inline]
    fn read_lock(&self) -> Step<u64> {
        let version = self.version.load(Ordering::Acquire);
        if version & LOCKED != 0 {
            spin_wait();
            return Err(Restart);
        }
        Ok(version)
    }

    /// Checks that nothing changed since `version` was read.
    #[inline]
    fn validate(&self, version: u64) -> Step<()> {
        // Pairs with the writer's release fence after locking: if any load
        // above saw a write made under the lock, this load sees the lock.
        fence(Ordering::Acquire);
        if self.version.load(Ordering::Relaxed) == version {
            Ok(())
        } else {
            Err(Restart)
        }
    }

    #[inline]
    fn upgrade(&self, version: u64) -> Step<()> {
        if version & OBSOLETE != 0 {
            return Err(Restart);
        }
        match self.version.compare_exchange(
            version,
            version + LOCKED,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                fence(Ordering::Release);
                Ok(())
            }
            Err(_) => Err(Restart),
        }
    }

    #[inline]
    fn unlock(&self) {
        self.version.fetch_add(LOCKED, Ordering::Release);
    }

    /// Unlocks a node that has left the tree: no writer locks it again and
    /// no transaction that recorded it validates.
    fn unlock_obsolete(&self) {
        self.version.fetch_add(LOCKED + OBSOLETE, Ordering::Release);
    }

    #[inline]
    fn count(&self) -> usize {
        (self.count.load(Ordering::Relaxed) as usize).min(CAPACITY)
    }
}

/// First slot in `[0, count)` whose key is `>= probe` (or `> probe` when
/// `strict`). Reads are optimistic: the caller validates the version.
#[inline]
fn search(
    heads: &[AtomicU64],
    tails: &[AtomicU64],
    count: usize,
    probe: &Probe<'_>,
    strict: bool,
) -> usize {
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let head = heads[mid].load(Ordering::Relaxed);
        // SAFETY: long-key copies are retired through epochs and the caller
        // is epoch-protected, so even a stale tail points to live memory.
        let order = unsafe { compare_lazy(probe, head, || tails[mid].load(Ordering::Relaxed)) };
        let go_right = if strict { order.is_ge() } else { order.is_gt() };
        if go_right {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

impl Inner {
    /// The child to follow for `probe`: keys equal to a separator go right.
    #[inline]
    fn child_index(&self, probe: &Probe<'_>) -> usize {
        search(&self.heads, &self.tails, self.header.count(), probe, true)
    }
}

/// A leaf and the version it had when a transaction looked at it: the
/// unit of phantom protection (Silo §4.6 node sets). Any insert into or
/// removal from the leaf, and any split of it, changes its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeafVersion {
    leaf: *const Leaf,
    version: u64,
}

// SAFETY: a plain pointer to a node, freed only through the epoch
// framework once no protected thread can hold it.
unsafe impl Send for LeafVersion {}

impl LeafVersion {
    /// Whether the leaf is unchanged (and unlocked) since then, and still
    /// in the tree (an unlinked leaf's key range now belongs to its left
    /// sibling, which the recorder never saw).
    #[inline]
    pub(crate) fn unchanged(&self) -> bool {
        // SAFETY: a transaction records leaves while epoch-protected and
        // validates before its protection ends; unlinked leaves are freed
        // through the epoch framework.
        self.version & OBSOLETE == 0
            && unsafe { &*self.leaf }
                .header
                .version
                .load(Ordering::Acquire)
                == self.version
    }
}

#[cfg(test)]
impl LeafVersion {
    /// `leaf` as a reader standing on it would record it now (tests: a
    /// scan that reaches a leaf just after it was unlinked).
    pub(crate) fn read_now(leaf: *mut ()) -> LeafVersion {
        let leaf = leaf.cast::<Leaf>().cast_const();
        // SAFETY: tests pass a leaf they have not freed.
        let version = unsafe { &*leaf }.header.version.load(Ordering::Acquire);
        LeafVersion { leaf, version }
    }
}

/// What [`Tree::remove_if`] took out of the tree. Its allocations may
/// still be read by concurrent (epoch-protected) readers: the caller frees
/// them through the epoch framework.
#[must_use]
#[derive(Debug)]
pub(crate) struct Removed {
    /// Whether the key was there (and its value matched).
    pub(crate) removed: bool,
    /// The removed key's out-of-line copy (free with `free_blob`).
    pub(crate) key_copy: Option<*mut ()>,
    /// The leaf the removal emptied, if it was unlinked.
    pub(crate) unlinked: Option<UnlinkedLeaf>,
}

/// An empty leaf taken out of the tree.
#[derive(Debug)]
pub(crate) struct UnlinkedLeaf {
    /// The leaf (free with [`free_leaf`]).
    pub(crate) leaf: *mut (),
    /// Its separator's out-of-line copy in the parent (free with
    /// `free_blob`).
    pub(crate) separator_copy: Option<*mut ()>,
}

/// Frees an unlinked leaf.
///
/// # Safety
/// `leaf` comes from an [`UnlinkedLeaf`], is freed once, and no thread can
/// still read it (the epoch framework's guarantee).
pub(crate) unsafe fn free_leaf(leaf: *mut ()) {
    // SAFETY: per the contract; allocated by `Leaf::allocate`, and empty,
    // so it owns no key copies.
    drop(unsafe { Box::from_raw(leaf.cast::<Leaf>()) });
}

/// What an insert did to the leaves, so a transaction that had recorded
/// them can tell its own changes from someone else's.
#[derive(Debug)]
pub(crate) struct InsertedInto {
    /// The leaf the key went into, as it was just before the insert.
    before: LeafVersion,
    /// Its version just after.
    after: u64,
    /// Leaves the insert split on its way, oldest first (it restarts after
    /// each split); almost always none.
    splits: Vec<LeafSplit>,
}

/// A leaf split made by an insert.
#[derive(Clone, Copy, Debug)]
struct LeafSplit {
    /// The leaf as it was just before the split.
    before: LeafVersion,
    /// Its version just after (it keeps the lower part of its range).
    after: u64,
    /// The new right sibling, which took the upper part, as the split
    /// published it.
    right: LeafVersion,
}

impl InsertedInto {
    /// Moves the versions recorded in `nodes` past our own insert, where
    /// nothing else changed the leaf. An entry for a leaf the insert split
    /// is moved to the version the split left, and the new right sibling
    /// joins `nodes` as the split published it: the two leaves cover what
    /// the one covered, so someone else's insert into either part is still
    /// seen. (Without this, a transaction that read missing keys and then
    /// inserted them aborted whenever an insert split a leaf, and its retry
    /// met the same full leaf again once the abort took the placeholders
    /// out: `tests/own_inserts.rs`.)
    pub(crate) fn patch(&self, nodes: &mut Vec<LeafVersion>) {
        for split in &self.splits {
            let mut recorded = false;
            for node in nodes.iter_mut().filter(|node| **node == split.before) {
                node.version = split.after;
                recorded = true;
            }
            if recorded {
                nodes.push(split.right);
            }
        }
        for node in nodes.iter_mut().filter(|node| **node == self.before) {
            node.version = self.after;
        }
    }
}

/// The tree. Values are opaque 64-bit words.
pub(crate) struct Tree {
    root: AtomicPtr<Header>,
}

// SAFETY: all shared state is atomics; nodes are owned by the tree.
unsafe impl Send for Tree {}
// SAFETY: as above; concurrent access follows the OLC protocol.
unsafe impl Sync for Tree {}

/// An entry copied out of a leaf snapshot.
#[derive(Clone, Copy)]
struct Entry {
    head: u64,
    tail: u64,
    value: u64,
}

impl Tree {
    pub(crate) fn new() -> Self {
        Self {
            root: AtomicPtr::new(Leaf::allocate()),
        }
    }

    #[inline]
    fn node<'a>(pointer: *mut Header) -> &'a Header {
        // SAFETY: inner nodes are never freed while the tree lives; leaves
        // are freed through the epoch framework, and callers are
        // epoch-protected; every pointer we follow was published with a
        // release store.
        unsafe { &*pointer }
    }

    /// The leaf at `pointer`. Cast from the node's own pointer, never from
    /// a `&Header`: a reference to the header covers only the header's
    /// bytes (Stacked Borrows; miri checks it).
    #[inline]
    fn leaf<'a>(pointer: *mut Header) -> &'a Leaf {
        debug_assert!(Self::node(pointer).leaf);
        // SAFETY: as for `node`; `leaf` is immutable and set by
        // `Leaf::allocate`, and Leaf is repr(C) with the header first.
        unsafe { &*pointer.cast::<Leaf>() }
    }

    /// The inner node at `pointer` (see `leaf`).
    #[inline]
    fn inner<'a>(pointer: *mut Header) -> &'a Inner {
        debug_assert!(!Self::node(pointer).leaf);
        // SAFETY: as for `leaf`, for Inner.
        unsafe { &*pointer.cast::<Inner>() }
    }

    /// The leftmost leaf.
    fn first_leaf(&self) -> &Leaf {
        let mut pointer = self.root.load(Ordering::Acquire);
        while !Self::node(pointer).leaf {
            pointer = Self::inner(pointer).children[0].load(Ordering::Acquire);
        }
        Self::leaf(pointer)
    }

    /// Reads the root and its version, checking it is still the root.
    #[inline]
    fn enter(&self) -> Step<(*mut Header, u64)> {
        let root = self.root.load(Ordering::Acquire);
        let version = Self::node(root).read_lock()?;
        if self.root.load(Ordering::Acquire) != root {
            return Err(Restart);
        }
        Ok((root, version))
    }

    /// One step of an optimistic descent: the child of `inner` (read at
    /// `version`) that holds `probe`, with the child's version and index.
    #[inline]
    fn step_down(
        inner: &Inner,
        version: u64,
        probe: &Probe<'_>,
    ) -> Step<(*mut Header, u64, usize)> {
        let index = inner.child_index(probe);
        let child = inner.children[index].load(Ordering::Acquire);
        prefetch(child);
        inner.header.validate(version)?;
        if child.is_null() {
            return Err(Restart);
        }
        let child_version = Self::node(child).read_lock()?;
        inner.header.validate(version)?;
        Ok((child, child_version, index))
    }

    /// Descends to the leaf that holds `probe`; returns it with its version.
    #[inline]
    fn find_leaf(&self, probe: &Probe<'_>) -> Step<(&Leaf, u64)> {
        let (mut pointer, mut version) = self.enter()?;
        loop {
            let node = Self::node(pointer);
            if node.leaf {
                return Ok((Self::leaf(pointer), version));
            }
            (pointer, version, _) = Self::step_down(Self::inner(pointer), version, probe)?;
        }
    }

    /// Walks towards the leaves of several keys (in this tree or others) at
    /// once, one level of every walk per round, each node prefetched a round
    /// before it is read, so the cache misses of different keys overlap
    /// instead of queueing one after another — group prefetching (Chen,
    /// Ailamaki, Gibbons and Mowry, "Improving Hash Join Performance through
    /// Prefetching", ICDE 2004). For each key found present, `found` gets
    /// its position in `walks` and its value; `path` names each walk's tree
    /// and key. Only the first [`PREFETCH_WALKS`] walks are taken.
    ///
    /// A hint, for a caller about to look the same keys up: a walk that
    /// meets a locked or changed node simply stops, and only values read
    /// under a validated leaf version reach `found`. The caller must be
    /// epoch-protected, as for every read.
    pub(crate) fn prefetch_paths<'w, W>(
        walks: &'w [W],
        path: impl Fn(&'w W) -> (&'w Tree, &'w [u8]),
        mut found: impl FnMut(usize, u64),
    ) {
        let walks = &walks[..walks.len().min(PREFETCH_WALKS)];
        let mut probes: [Option<Probe<'w>>; PREFETCH_WALKS] = [None; PREFETCH_WALKS];
        let mut at = [ptr::null_mut::<Header>(); PREFETCH_WALKS];
        for (i, walk) in walks.iter().enumerate() {
            let (tree, key) = path(walk);
            probes[i] = Some(Probe::new(key));
            at[i] = tree.root.load(Ordering::Acquire);
        }
        let mut walking = true;
        while walking {
            walking = false;
            for (i, probe) in probes.iter().enumerate() {
                let (Some(probe), false) = (probe, at[i].is_null()) else {
                    continue;
                };
                let pointer = std::mem::replace(&mut at[i], ptr::null_mut());
                let Ok(version) = Self::node(pointer).read_lock() else {
                    continue;
                };
                if Self::node(pointer).leaf {
                    let leaf = Self::leaf(pointer);
                    let slot = leaf.find(probe);
                    let value = slot
                        .present
                        .then(|| leaf.values[slot.slot].load(Ordering::Relaxed));
                    if let (Some(value), Ok(())) = (value, leaf.header.validate(version)) {
                        found(i, value);
                    }
                    continue;
                }
                let inner = Self::inner(pointer);
                let child = inner.children[inner.child_index(probe)].load(Ordering::Acquire);
                if !child.is_null() && inner.header.validate(version).is_ok() {
                    prefetch(child);
                    at[i] = child;
                    walking = true;
                }
            }
        }
    }

    /// The value stored for `key`, or, when it is missing, the leaf (and
    /// version) where it would be — the proof of its absence.
    pub(crate) fn get(&self, key: &[u8]) -> Result<u64, LeafVersion> {
        let probe = Probe::new(key);
        loop {
            let Ok((leaf, version)) = self.find_leaf(&probe) else {
                continue;
            };
            let found = leaf.find(&probe);
            let value = found
                .present
                .then(|| leaf.values[found.slot].load(Ordering::Relaxed));
            if leaf.header.validate(version).is_ok() {
                return value.ok_or(LeafVersion { leaf, version });
            }
        }
    }

    /// Inserts `key → value` unless `key` is present; returns what it did
    /// to its leaf, or `None` if the key was there.
    pub(crate) fn insert(&self, key: &[u8], value: u64) -> Option<InsertedInto> {
        let probe = Probe::new(key);
        let mut splits = Vec::new();
        loop {
            if let Ok(inserted) = self.try_insert(&probe, value, &mut splits) {
                return inserted.map(|(before, after)| InsertedInto {
                    before,
                    after,
                    splits,
                });
            }
        }
    }

    /// One attempt at an insert: the leaf it went into and its version
    /// after, `None` if the key is there already; leaf splits made on the
    /// way go to `splits`.
    fn try_insert(
        &self,
        probe: &Probe<'_>,
        value: u64,
        splits: &mut Vec<LeafSplit>,
    ) -> Step<Option<(LeafVersion, u64)>> {
        let (mut pointer, mut version) = self.enter()?;
        let mut parent: Option<(&Inner, u64, usize)> = None;
        loop {
            let node = Self::node(pointer);
            if !node.leaf {
                let inner = Self::inner(pointer);
                if node.count() == CAPACITY {
                    // Split full inner nodes on the way down (eager split).
                    self.split(pointer, version, parent, probe, 0, splits)?;
                    return Err(Restart);
                }
                let (child, child_version, index) = Self::step_down(inner, version, probe)?;
                if let Some((p, pv, _)) = parent {
                    p.header.validate(pv)?;
                }
                parent = Some((inner, version, index));
                pointer = child;
                version = child_version;
                continue;
            }
            let leaf = Self::leaf(pointer);
            // Look before locking: when the key is there already the leaf
            // must stay untouched, since a lock and unlock would change its
            // version and fail every transaction that recorded the leaf
            // (a node set entry, Silo §4.6) for nothing.
            let Found {
                count,
                slot,
                present,
            } = leaf.find(probe);
            node.validate(version)?;
            if present {
                return Ok(None);
            }
            if count == CAPACITY {
                self.split(pointer, version, parent, probe, slot, splits)?;
                return Err(Restart);
            }
            // Unchanged since the search (or the upgrade fails), so `slot`
            // and `count` still hold.
            node.upgrade(version)?;
            for i in (slot..count).rev() {
                move_slot(&leaf.heads, &leaf.tails, i, i + 1);
                leaf.values[i + 1].store(leaf.values[i].load(Ordering::Relaxed), Ordering::Relaxed);
            }
            leaf.heads[slot].store(probe.head, Ordering::Relaxed);
            leaf.tails[slot].store(make_tail(probe.bytes), Ordering::Relaxed);
            leaf.values[slot].store(value, Ordering::Relaxed);
            node.count.store(count as u32 + 1, Ordering::Relaxed);
            node.last_insert.store(slot as u8, Ordering::Relaxed);
            node.unlock();
            // `upgrade` and `unlock` each add LOCKED to the version.
            return Ok(Some((LeafVersion { leaf, version }, version + 2 * LOCKED)));
        }
    }

    /// Splits the full node at `pointer` (read at `version`), inserting the
    /// separator into `parent` or growing a new root. `slot` is where the
    /// probe goes in a leaf. A leaf split is added to `splits`. Always ends
    /// in a restart of the caller's operation.
    fn split(
        &self,
        pointer: *mut Header,
        version: u64,
        parent: Option<(&Inner, u64, usize)>,
        probe: &Probe<'_>,
        slot: usize,
        splits: &mut Vec<LeafSplit>,
    ) -> Step<()> {
        let node = Self::node(pointer);
        match parent {
            Some((p, pv, _)) => {
                p.header.upgrade(pv)?;
                if node.upgrade(version).is_err() {
                    p.header.unlock();
                    return Err(Restart);
                }
            }
            None => {
                node.upgrade(version)?;
                if self.root.load(Ordering::Acquire) != pointer {
                    node.unlock();
                    return Err(Restart);
                }
            }
        }
        let (separator_head, separator_tail, right) = if node.leaf {
            split_leaf(Self::leaf(pointer), probe, slot)
        } else {
            split_inner(Self::inner(pointer))
        };
        if node.leaf {
            // The lock and the unlock below each add `LOCKED`; the new
            // leaf is published unlocked at version 0.
            splits.push(LeafSplit {
                before: LeafVersion {
                    leaf: Self::leaf(pointer),
                    version,
                },
                after: version + 2 * LOCKED,
                right: LeafVersion {
                    leaf: Self::leaf(right),
                    version: 0,
                },
            });
        }
        match parent {
            Some((p, _, index)) => {
                let count = p.header.count();
                debug_assert!(count < CAPACITY, "eager splits keep parents non-full");
                for i in (index..count).rev() {
                    move_slot(&p.heads, &p.tails, i, i + 1);
                    p.children[i + 2]
                        .store(p.children[i + 1].load(Ordering::Relaxed), Ordering::Release);
                }
                p.heads[index].store(separator_head, Ordering::Relaxed);
                p.tails[index].store(separator_tail, Ordering::Relaxed);
                p.children[index + 1].store(right, Ordering::Release);
                p.header.count.store(count as u32 + 1, Ordering::Relaxed);
                node.unlock();
                p.header.unlock();
            }
            None => {
                let root = Inner::allocate();
                // SAFETY: freshly allocated, not yet shared.
                let r = unsafe { &*root };
                r.heads[0].store(separator_head, Ordering::Relaxed);
                r.tails[0].store(separator_tail, Ordering::Relaxed);
                r.children[0].store(pointer, Ordering::Relaxed);
                r.children[1].store(right, Ordering::Relaxed);
                r.header.count.store(1, Ordering::Relaxed);
                self.root.store(root.cast(), Ordering::Release);
                node.unlock();
            }
        }
        Err(Restart)
    }

    /// Removes `key` if `matches(value)` holds for its value, and unlinks
    /// its leaf if that emptied it. What it took out must be retired
    /// through the epoch framework (readers may still hold it).
    pub(crate) fn remove_if(&self, key: &[u8], matches: impl Fn(u64) -> bool) -> Removed {
        let probe = Probe::new(key);
        let (removed, key_copy, emptied) = self.remove_entry(&probe, matches);
        let unlinked = if emptied {
            self.unlink_empty(&probe)
        } else {
            None
        };
        Removed {
            removed,
            key_copy,
            unlinked,
        }
    }

    /// Removes the entry; returns whether it did, the key's copy, and
    /// whether the leaf is now empty.
    fn remove_entry(
        &self,
        probe: &Probe<'_>,
        matches: impl Fn(u64) -> bool,
    ) -> (bool, Option<*mut ()>, bool) {
        loop {
            let Ok((leaf, version)) = self.find_leaf(probe) else {
                continue;
            };
            // Look before locking, as `try_insert` does: a miss leaves
            // the leaf (and its version) untouched.
            let Found {
                count,
                slot,
                present,
            } = leaf.find(probe);
            let hit = present && matches(leaf.values[slot].load(Ordering::Relaxed));
            if leaf.header.validate(version).is_err() {
                continue;
            }
            if !hit {
                return (false, None, false);
            }
            // Unchanged since the search (or the upgrade fails).
            if leaf.header.upgrade(version).is_err() {
                continue;
            }
            let tail = leaf.tails[slot].load(Ordering::Relaxed);
            for i in slot..count - 1 {
                move_slot(&leaf.heads, &leaf.tails, i + 1, i);
                leaf.values[i].store(
                    leaf.values[i + 1].load(Ordering::Relaxed),
                    Ordering::Relaxed,
                );
            }
            leaf.header.count.store(count as u32 - 1, Ordering::Relaxed);
            leaf.header.unlock();
            return (true, tail_allocation(tail), count == 1);
        }
    }

    /// Unlinks the leaf that holds `probe` if it is empty and not its
    /// parent's first child (its left sibling is then at hand, under the
    /// same parent). Returns what it unlinked.
    fn unlink_empty(&self, probe: &Probe<'_>) -> Option<UnlinkedLeaf> {
        loop {
            if let Ok(unlinked) = self.try_unlink_empty(probe) {
                return unlinked;
            }
        }
    }

    fn try_unlink_empty(&self, probe: &Probe<'_>) -> Step<Option<UnlinkedLeaf>> {
        let (mut pointer, mut version) = self.enter()?;
        let mut parent: Option<(&Inner, u64, usize)> = None;
        while !Self::node(pointer).leaf {
            let inner = Self::inner(pointer);
            let (child, child_version, index) = Self::step_down(inner, version, probe)?;
            parent = Some((inner, version, index));
            pointer = child;
            version = child_version;
        }
        let node = Self::node(pointer);
        let Some((p, pv, index)) = parent else {
            return Ok(None); // the root leaf stays
        };
        if index == 0 || node.count() != 0 {
            node.validate(version)?;
            return Ok(None);
        }
        let left_pointer = p.children[index - 1].load(Ordering::Acquire);
        p.header.validate(pv)?;
        let left = Self::node(left_pointer);
        let left_version = left.read_lock()?;
        p.header.validate(pv)?;
        // Lock order: parent, then children left to right (splits lock a
        // parent, then one child).
        p.header.upgrade(pv)?;
        if left.upgrade(left_version).is_err() {
            p.header.unlock();
            return Err(Restart);
        }
        if node.upgrade(version).is_err() {
            left.unlock();
            p.header.unlock();
            return Err(Restart);
        }
        // All three are locked and unchanged since read: the leaf is empty
        // and `left` is its left neighbour in the leaf chain.
        let leaf = Self::leaf(pointer);
        Self::leaf(left_pointer)
            .next
            .store(leaf.next.load(Ordering::Relaxed), Ordering::Release);
        let count = p.header.count();
        let separator = p.tails[index - 1].load(Ordering::Relaxed);
        for i in index - 1..count - 1 {
            move_slot(&p.heads, &p.tails, i + 1, i);
        }
        for i in index..count {
            p.children[i].store(p.children[i + 1].load(Ordering::Relaxed), Ordering::Release);
        }
        p.children[count].store(ptr::null_mut(), Ordering::Release);
        p.header.count.store(count as u32 - 1, Ordering::Relaxed);
        node.unlock_obsolete();
        left.unlock();
        p.header.unlock();
        Ok(Some(UnlinkedLeaf {
            leaf: pointer.cast(),
            separator_copy: tail_allocation(separator),
        }))
    }

    /// Copies a consistent snapshot of `leaf`'s entries from the first one
    /// `>= from` (all of them without `from`) into `out`. Returns how many
    /// it copied and the leaf's `next`.
    fn snapshot(
        leaf: &Leaf,
        out: &mut [Entry; CAPACITY],
        from: Option<&Probe<'_>>,
    ) -> Step<(usize, *mut Leaf, LeafVersion)> {
        let version = leaf.header.read_lock()?;
        let count = leaf.header.count();
        let start = from.map_or(0, |probe| {
            search(&leaf.heads, &leaf.tails, count, probe, false)
        });
        for (i, slot) in (start..count).enumerate() {
            out[i] = Entry {
                head: leaf.heads[slot].load(Ordering::Relaxed),
                tail: leaf.tails[slot].load(Ordering::Relaxed),
                value: leaf.values[slot].load(Ordering::Relaxed),
            };
        }
        let next = leaf.next.load(Ordering::Acquire);
        leaf.header.validate(version)?;
        Ok((count - start, next, LeafVersion { leaf, version }))
    }

    /// Visits `(key, value)` in key order over `(lo, hi)` until `visit`
    /// returns false, reporting each leaf it read (with the version of the
    /// read) to `on_leaf` before visiting its entries. Not atomic:
    /// concurrent changes may or may not be seen, but a key present
    /// throughout is always visited exactly once, and any change to the
    /// range visited changes one of the reported leaves.
    pub(crate) fn scan(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut visit: impl FnMut(&[u8], u64) -> bool,
        mut on_leaf: impl FnMut(LeafVersion),
    ) {
        let start = match lo {
            Bound::Included(key) | Bound::Excluded(key) => key,
            Bound::Unbounded => &[],
        };
        let probe = Probe::new(start);
        let mut leaf = loop {
            if let Ok((leaf, _)) = self.find_leaf(&probe) {
                break leaf;
            }
        };
        let mut entries = [Entry {
            head: 0,
            tail: 0,
            value: 0,
        }; CAPACITY];
        let mut first = true;
        loop {
            // Only the first leaf holds keys below `lo`: seek past them.
            let from = first.then_some(&probe);
            let (count, next, seen) = loop {
                if let Ok(snapshot) = Self::snapshot(leaf, &mut entries, from) {
                    break snapshot;
                }
            };
            on_leaf(seen);
            for entry in &entries[..count] {
                let mut buffer = [0u8; 8];
                // SAFETY: the snapshot was consistent, and long-key copies
                // outlive the caller's epoch protection.
                let key = unsafe { key_bytes(entry.head, entry.tail, &mut buffer) };
                if first && matches!(lo, Bound::Excluded(lo) if key <= lo) {
                    continue;
                }
                let before_hi = match hi {
                    Bound::Included(hi) => key <= hi,
                    Bound::Excluded(hi) => key < hi,
                    Bound::Unbounded => true,
                };
                if !before_hi || !visit(key, entry.value) {
                    return;
                }
            }
            if next.is_null() {
                return;
            }
            first = false;
            // SAFETY: leaves are freed through the epoch framework and the
            // caller is epoch-protected.
            leaf = unsafe { &*next };
        }
    }

    /// Leaves in the leaf chain (tests: unlinking shrinks it).
    #[cfg(test)]
    pub(crate) fn leaf_count(&self) -> usize {
        let mut leaf: *const Leaf = self.first_leaf();
        let mut leaves = 0;
        while !leaf.is_null() {
            leaves += 1;
            // SAFETY: single-threaded test use; leaves in the chain are live.
            leaf = unsafe { &*leaf }.next.load(Ordering::Acquire);
        }
        leaves
    }

    /// Number of entries, approximately under concurrent change (walks the
    /// leaves reading only their counts; the caller is epoch-protected).
    pub(crate) fn len(&self) -> usize {
        let mut leaf = self.first_leaf();
        let mut total = 0;
        loop {
            total += leaf.header.count();
            let next = leaf.next.load(Ordering::Acquire);
            if next.is_null() {
                return total;
            }
            // SAFETY: as in `scan`.
            leaf = unsafe { &*next };
        }
    }
}

/// Moves slot `from` to slot `to` within one node (under its lock).
#[inline]
fn move_slot(heads: &[AtomicU64], tails: &[AtomicU64], from: usize, to: usize) {
    heads[to].store(heads[from].load(Ordering::Relaxed), Ordering::Relaxed);
    tails[to].store(tails[from].load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Moves the upper part of a locked, full leaf to a new right sibling.
/// Returns the separator (a copy of the right leaf's first key) and the
/// new leaf. `slot` is where `probe` (the key that needs room) goes.
///
/// Usually splits in half. Two sequential patterns split elsewhere, so
/// that they leave full leaves behind instead of half-empty ones:
/// * an append (`probe` after every key, as in sequential loads) moves
///   only the last entry;
/// * an ascending run in the middle of the key space (`probe` goes right
///   after the leaf's last insert, as TPC-C's order lines do at the end of
///   each district's range, just before the next district's keys) splits
///   at `slot`, so the run continues at the end of the left leaf, which
///   is then an append (InnoDB splits sequential inserts the same way).
fn split_leaf(leaf: &Leaf, probe: &Probe<'_>, slot: usize) -> (u64, u64, *mut Header) {
    let right_pointer = Leaf::allocate();
    let right = Tree::leaf(right_pointer);
    let last = CAPACITY - 1;
    let head = leaf.heads[last].load(Ordering::Relaxed);
    // SAFETY: the leaf is locked; its key copies are live.
    let appending =
        unsafe { compare(probe, head, leaf.tails[last].load(Ordering::Relaxed)) }.is_gt();
    let previous = leaf.header.last_insert.load(Ordering::Relaxed);
    let ascending = previous != NO_INSERT && slot == usize::from(previous) + 1;
    let mid = if appending {
        last
    } else if ascending && (1..CAPACITY).contains(&slot) {
        slot
    } else {
        CAPACITY / 2
    };
    for i in mid..CAPACITY {
        right.heads[i - mid].store(leaf.heads[i].load(Ordering::Relaxed), Ordering::Relaxed);
        right.tails[i - mid].store(leaf.tails[i].load(Ordering::Relaxed), Ordering::Relaxed);
        right.values[i - mid].store(leaf.values[i].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    right
        .header
        .count
        .store((CAPACITY - mid) as u32, Ordering::Relaxed);
    right
        .next
        .store(leaf.next.load(Ordering::Relaxed), Ordering::Relaxed);
    leaf.next.store(right_pointer.cast(), Ordering::Release);
    leaf.header.count.store(mid as u32, Ordering::Relaxed);
    let head = right.heads[0].load(Ordering::Relaxed);
    let tail = right.tails[0].load(Ordering::Relaxed);
    let mut buffer = [0u8; 8];
    // SAFETY: the leaf is locked; its key copy is live.
    let separator = make_tail(unsafe { key_bytes(head, tail, &mut buffer) });
    (head, separator, right_pointer)
}

/// Moves the upper half of a locked, full inner node to a new sibling;
/// the middle key moves up. Returns it and the new node.
fn split_inner(inner: &Inner) -> (u64, u64, *mut Header) {
    let right_pointer = Inner::allocate();
    // SAFETY: freshly allocated, not yet shared.
    let right = unsafe { &*right_pointer };
    let mid = CAPACITY / 2;
    for i in mid + 1..CAPACITY {
        move_between(inner, right, i, i - mid - 1);
    }
    for i in mid + 1..=CAPACITY {
        right.children[i - mid - 1]
            .store(inner.children[i].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    right
        .header
        .count
        .store((CAPACITY - mid - 1) as u32, Ordering::Relaxed);
    inner.header.count.store(mid as u32, Ordering::Relaxed);
    (
        inner.heads[mid].load(Ordering::Relaxed),
        inner.tails[mid].load(Ordering::Relaxed),
        right_pointer.cast(),
    )
}

fn move_between(from: &Inner, to: &Inner, i: usize, j: usize) {
    to.heads[j].store(from.heads[i].load(Ordering::Relaxed), Ordering::Relaxed);
    to.tails[j].store(from.tails[i].load(Ordering::Relaxed), Ordering::Relaxed);
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Exclusive access: free every node and every key copy it owns.
        // Inner separators own their copies; leaves own their keys'.
        fn free(pointer: *mut Header) {
            let node = Tree::node(pointer);
            let count = node.count();
            if node.leaf {
                let leaf = Tree::leaf(pointer);
                for tail in &leaf.tails[..count] {
                    // SAFETY: exclusive access at drop; each copy owned once.
                    unsafe { super::key::free_tail(tail.load(Ordering::Relaxed)) };
                }
                // SAFETY: allocated by `Leaf::allocate`, freed once.
                drop(unsafe { Box::from_raw(pointer.cast::<Leaf>()) });
            } else {
                let inner = Tree::inner(pointer);
                for tail in &inner.tails[..count] {
                    // SAFETY: as above.
                    unsafe { super::key::free_tail(tail.load(Ordering::Relaxed)) };
                }
                for child in &inner.children[..=count] {
                    free(child.load(Ordering::Relaxed));
                }
                // SAFETY: allocated by `Inner::allocate`, freed once.
                drop(unsafe { Box::from_raw(pointer.cast::<Inner>()) });
            }
        }
        free(*self.root.get_mut());
    }
}
