//! The index against a BTreeMap model (single-threaded, random operations
//! and key shapes), and under concurrent inserts, removes and scans.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use super::Tree;

/// What removals took out of a tree, freed at the end of a test (no
/// concurrent readers then; in the engine this goes through epochs).
#[derive(Default)]
struct Garbage {
    blobs: Vec<usize>,
    leaves: Vec<usize>,
}

impl Garbage {
    /// Keeps what `removed` took out; returns whether it removed the key.
    fn keep(&mut self, removed: super::tree::Removed) -> bool {
        self.blobs.extend(removed.key_copy.map(|p| p as usize));
        if let Some(unlinked) = removed.unlinked {
            self.leaves.push(unlinked.leaf as usize);
            self.blobs
                .extend(unlinked.separator_copy.map(|p| p as usize));
        }
        removed.removed
    }

    fn absorb(&mut self, other: Garbage) {
        self.blobs.extend(other.blobs);
        self.leaves.extend(other.leaves);
    }

    fn free(self) {
        for blob in self.blobs {
            // SAFETY: removed from the tree; nothing else reads them.
            unsafe { crate::blob::free_blob(blob as *mut ()) };
        }
        for leaf in self.leaves {
            // SAFETY: as above.
            unsafe { super::free_leaf(leaf as *mut ()) };
        }
    }
}

fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u64..400).prop_map(|n| n.to_be_bytes().to_vec()),
        prop::collection::vec(0u8..4, 0..12),
        (0u64..50, prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(n, tail)| {
            let mut key = n.to_be_bytes().to_vec();
            key.extend(tail);
            key
        }),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u8>, u64),
    Remove(Vec<u8>),
    Get(Vec<u8>),
    Scan(Vec<u8>, Vec<u8>),
    Prefetch(Vec<Vec<u8>>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key_strategy(), 1u64..1000).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => key_strategy().prop_map(Op::Remove),
        1 => key_strategy().prop_map(Op::Get),
        1 => (key_strategy(), key_strategy()).prop_map(|(a, b)| Op::Scan(a.clone().min(b.clone()), a.max(b))),
        1 => prop::collection::vec(key_strategy(), 0..20).prop_map(Op::Prefetch),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn tree_matches_btreemap(ops in prop::collection::vec(op(), 1..1500)) {
        let tree = Tree::new();
        let mut model = BTreeMap::new();
        let mut garbage = Garbage::default();
        for op in &ops {
            match op {
                Op::Insert(k, v) => {
                    let fresh = !model.contains_key(k);
                    if fresh { model.insert(k.clone(), *v); }
                    prop_assert_eq!(tree.insert(k, *v).is_some(), fresh);
                }
                Op::Remove(k) => {
                    let removed = garbage.keep(tree.remove_if(k, |_| true));
                    prop_assert_eq!(removed, model.remove(k).is_some());
                }
                Op::Get(k) => prop_assert_eq!(tree.get(k).ok(), model.get(k).copied()),
                Op::Scan(lo, hi) => {
                    let mut seen = Vec::new();
                    tree.scan(Bound::Included(lo), Bound::Excluded(hi), |k, v| { seen.push((k.to_vec(), v)); true }, |_| ());
                    let want: Vec<_> = model.range::<Vec<u8>, _>((Bound::Included(lo), Bound::Excluded(hi))).map(|(k, v)| (k.clone(), *v)).collect();
                    prop_assert_eq!(seen, want);
                }
                Op::Prefetch(keys) => {
                    // Alone, no walk meets a change: every present key is
                    // reported once with its value, and no other.
                    let mut found = Vec::new();
                    Tree::prefetch_paths(keys, |k| (&tree, &k[..]), |i, v| found.push((i, v)));
                    let want: Vec<_> = keys.iter().take(super::PREFETCH_WALKS).enumerate()
                        .filter_map(|(i, k)| model.get(k).map(|v| (i, *v))).collect();
                    prop_assert_eq!(found, want);
                }
            }
        }
        let mut all = Vec::new();
        tree.scan(Bound::Unbounded, Bound::Unbounded, |k, v| { all.push((k.to_vec(), v)); true }, |_| ());
        prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        garbage.free();
    }
}

#[test]
fn remove_if_checks_the_value() {
    let tree = Tree::new();
    assert!(tree.insert(b"k", 7).is_some());
    assert!(!tree.remove_if(b"k", |v| v == 8).removed);
    assert_eq!(tree.get(b"k").ok(), Some(7));
    assert!(tree.remove_if(b"k", |v| v == 7).removed);
    assert!(tree.get(b"k").is_err());
}

#[test]
fn many_sequential_and_reverse_inserts_split_correctly() {
    let tree = Tree::new();
    for n in (0..20_000u64).rev() {
        assert!(tree.insert(&(n * 2).to_be_bytes(), n).is_some());
    }
    for n in 0..20_000u64 {
        assert_eq!(tree.get(&(n * 2).to_be_bytes()).ok(), Some(n));
        assert!(tree.get(&(n * 2 + 1).to_be_bytes()).is_err());
    }
    assert_eq!(tree.len(), 20_000);
}

/// Ascending runs in the middle of the key space — ten "districts", each
/// growing at its end, just before the next one's keys, as TPC-C's order
/// lines do — leave nearly full leaves, as appends do; random inserts
/// still split in half.
#[test]
fn ascending_runs_in_the_middle_leave_full_leaves() {
    fn key(district: u8, n: u32) -> [u8; 5] {
        let mut key = [0u8; 5];
        key[0] = district;
        key[1..].copy_from_slice(&n.to_be_bytes());
        key
    }
    let (districts, loaded, grown) = (10u8, 3_000u32, 3_000u32);
    let tree = Tree::new();
    for d in 0..districts {
        for n in 0..loaded {
            assert!(tree.insert(&key(d, n), 1).is_some());
        }
    }
    let after_load = tree.leaf_count();
    for n in loaded..loaded + grown {
        for d in 0..districts {
            assert!(tree.insert(&key(d, n), 1).is_some());
        }
    }
    let added = tree.leaf_count() - after_load;
    let entries = usize::from(districts) * grown as usize;
    let per_leaf = entries as f64 / added as f64;
    // Full leaves hold 32; splitting these runs in half would give 16.
    assert!(per_leaf > 28.0, "{per_leaf:.1} new entries per new leaf");
    assert_eq!(
        tree.len(),
        usize::from(districts) * (loaded + grown) as usize
    );
    for d in 0..districts {
        for n in 0..loaded + grown {
            assert_eq!(tree.get(&key(d, n)).ok(), Some(1));
        }
    }

    // Random inserts keep splitting in half: about 69% full on average.
    let random = Tree::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..60_000 {
        xorshift(&mut x);
        random.insert(&x.to_be_bytes(), 1);
    }
    let fill = random.len() as f64 / (32 * random.leaf_count()) as f64;
    assert!(
        (0.55..0.85).contains(&fill),
        "random inserts: leaves {fill:.2} full"
    );
}

/// Advances a test's xorshift generator.
fn xorshift(x: &mut u64) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
}

/// Scans the whole tree, checking that keys come in order and that the
/// stable values (the multiples of `step`) come as 0, step, 2·step, …, each
/// exactly once; returns how many it saw.
fn scan_stable(tree: &Tree, step: u64) -> u64 {
    let mut seen = 0u64;
    let mut last: Option<Vec<u8>> = None;
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        |key, value| {
            if let Some(last) = &last {
                assert!(key > last.as_slice(), "scan out of order");
            }
            last = Some(key.to_vec());
            if value % step == 0 {
                assert_eq!(value, seen * step, "a stable key was skipped or repeated");
                seen += 1;
            }
            true
        },
        |_| (),
    );
    seen
}

/// Permanent keys (even) stay put while writers churn odd keys: every scan
/// must see every permanent key exactly once, in order; every lookup of a
/// permanent key must find it.
#[test]
fn concurrent_churn_never_hides_stable_keys() {
    let tree = Arc::new(Tree::new());
    const STABLE: u64 = 3_000;
    let long = |n: u64| {
        let mut key = b"prefix-longer-than-eight/".to_vec();
        key.extend_from_slice(&n.to_be_bytes());
        key
    };
    for n in 0..STABLE {
        assert!(tree.insert(&long(n * 2), n * 2).is_some());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (tree, stop) = (tree.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut garbage = Garbage::default();
                let mut x = seed + 1;
                while !stop.load(Ordering::Relaxed) {
                    xorshift(&mut x);
                    let n = (x % STABLE) * 2 + 1;
                    if tree.insert(&long(n), n).is_none() {
                        garbage.keep(tree.remove_if(&long(n), |_| true));
                    }
                }
                garbage
            })
        })
        .collect();
    let mut scans = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(1500) {
        assert_eq!(
            scan_stable(&tree, 2),
            STABLE,
            "scan missed stable keys at the end"
        );
        let probe = (scans as u64 * 7919) % STABLE * 2;
        assert_eq!(tree.get(&long(probe)).ok(), Some(probe));
        // Prefetch walks racing the writers: a walk may stop at a change,
        // but whatever it reports is the key's own value (n for `long(n)`).
        let keys: Vec<Vec<u8>> = (0..16)
            .map(|i| long((probe + i * 131) % (2 * STABLE)))
            .collect();
        Tree::prefetch_paths(
            &keys,
            |k| (&*tree, &k[..]),
            |i, v| {
                assert_eq!(
                    v,
                    (probe + i as u64 * 131) % (2 * STABLE),
                    "walk {i} reported another key's value"
                );
            },
        );
        scans += 1;
    }
    stop.store(true, Ordering::Relaxed);
    // Removed copies may still be read by a concurrent scan in real use;
    // here every thread has stopped, so freeing them now is safe.
    let mut garbage = Garbage::default();
    for writer in writers {
        garbage.absorb(writer.join().unwrap());
    }
    garbage.free();
    assert!(scans > 5);
}

#[test]
fn leaf_versions_see_every_change_and_patch_our_own() {
    let tree = Tree::new();
    for n in 0..10u64 {
        tree.insert(&n.to_be_bytes(), n);
    }
    let mut seen = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        |_, _| true,
        |leaf| seen.push(leaf),
    );
    let missing = tree.get(&100u64.to_be_bytes()).unwrap_err();
    assert!(seen.iter().all(|leaf| leaf.unchanged()) && missing.unchanged());
    // Our own insert: patching keeps the recorded versions valid.
    let ours = tree.insert(&50u64.to_be_bytes(), 50).unwrap();
    assert!(!missing.unchanged());
    let mut recorded = vec![missing];
    recorded.extend(&seen);
    ours.patch(&mut recorded);
    assert!(recorded.iter().all(|leaf| leaf.unchanged()));
    // Someone else's change is not patched away.
    let removed = tree.remove_if(&3u64.to_be_bytes(), |_| true);
    assert!(removed.removed && removed.key_copy.is_none() && removed.unlinked.is_none());
    assert!(!recorded[0].unchanged());
}

/// Our own insert that splits a recorded leaf is patched too: the leaf's
/// entry moves past the split and the new right sibling joins the set, so
/// the transaction still validates — and someone else's insert into either
/// half afterwards is still seen.
#[test]
fn our_own_splits_are_patched_and_both_halves_stay_watched() {
    for others_insert_right in [false, true] {
        let tree = Tree::new();
        let mut n = 0u64;
        // Fill the only leaf, recording it through a miss before each
        // insert, until an insert splits it.
        let mut recorded = Vec::new();
        loop {
            let leaves = tree.leaf_count();
            let missing = tree.get(&(n * 10).to_be_bytes()).unwrap_err();
            recorded.push(missing);
            let ours = tree.insert(&(n * 10).to_be_bytes(), n).unwrap();
            ours.patch(&mut recorded);
            n += 1;
            assert!(
                recorded.iter().all(|leaf| leaf.unchanged()),
                "after {n} inserts"
            );
            if tree.leaf_count() > leaves {
                break;
            }
        }
        assert!(n > 2, "the first leaf holds more than two keys");
        // Someone else inserts into the lower or the upper half.
        let key = if others_insert_right { n * 10 + 5 } else { 5 };
        assert!(tree.insert(&key.to_be_bytes(), 0).is_some());
        assert!(
            !recorded.iter().all(|leaf| leaf.unchanged()),
            "an insert of {key} after {n} of ours went unseen"
        );
    }
}

/// Emptied leaves leave the chain (so scans stop walking them and their
/// memory can go), and the key ranges they covered still work: lookups,
/// scans and new inserts land in the left neighbour.
#[test]
fn emptied_leaves_are_unlinked_and_their_ranges_still_work() {
    let tree = Tree::new();
    let mut model = BTreeMap::new();
    let mut garbage = Garbage::default();
    for n in 0..20_000u64 {
        assert!(tree.insert(&n.to_be_bytes(), n).is_some());
        model.insert(n.to_be_bytes().to_vec(), n);
    }
    let full = tree.leaf_count();
    // A queue: delete from the front, keep every 1,000th key.
    for n in 0..20_000u64 {
        if n % 1_000 != 0 {
            assert!(garbage.keep(tree.remove_if(&n.to_be_bytes(), |_| true)));
            model.remove(n.to_be_bytes().as_slice());
        }
    }
    let left = tree.leaf_count();
    assert!(
        left * 10 < full,
        "{full} leaves before, {left} after removing 95% of the keys"
    );
    assert!(!garbage.leaves.is_empty());
    // New keys into the emptied ranges, then everything against the model.
    for n in (5..20_000u64).step_by(997) {
        assert!(tree.insert(&n.to_be_bytes(), n + 1).is_some());
        model.insert(n.to_be_bytes().to_vec(), n + 1);
    }
    for n in 0..20_000u64 {
        assert_eq!(
            tree.get(&n.to_be_bytes()).ok(),
            model.get(n.to_be_bytes().as_slice()).copied()
        );
    }
    let mut all = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        |k, v| {
            all.push((k.to_vec(), v));
            true
        },
        |_| (),
    );
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    assert_eq!(tree.len(), all.len());
    garbage.free();
}

/// A transaction that recorded a leaf (a scan over it, or a miss in it)
/// fails validation once the leaf is unlinked: its range now belongs to
/// the left neighbour, where an insert would go unseen otherwise.
#[test]
fn a_recorded_leaf_that_is_unlinked_no_longer_validates() {
    let tree = Tree::new();
    let mut garbage = Garbage::default();
    for n in 0..200u64 {
        tree.insert(&n.to_be_bytes(), n);
    }
    // Empty the last leaf but one key, and record it through a miss.
    let last = 199u64;
    let missing = tree.get(&1_000u64.to_be_bytes()).unwrap_err();
    assert!(missing.unchanged());
    for n in (0..=last).rev() {
        let removed = tree.remove_if(&n.to_be_bytes(), |_| true);
        let unlinked = removed.unlinked.is_some();
        garbage.keep(removed);
        if unlinked {
            break;
        }
    }
    assert!(!garbage.leaves.is_empty(), "emptying a leaf unlinks it");
    assert!(!missing.unchanged());
    // A scan that stood on the leaf as it was unlinked records its final
    // version, which never changes again: that must not validate either.
    let late = super::LeafVersion::read_now(garbage.leaves[0] as *mut ());
    assert!(!late.unchanged());
    // The recorded version cannot be patched back either.
    let ours = tree.insert(&1_000u64.to_be_bytes(), 1).unwrap();
    let mut recorded = vec![missing];
    ours.patch(&mut recorded);
    assert!(!recorded[0].unchanged());
    garbage.free();
}

/// Sparse stable keys with dense churn between them, so leaves empty and
/// are unlinked while scans and lookups run: every scan still sees every
/// stable key exactly once, in order.
#[test]
fn concurrent_unlinking_never_hides_stable_keys() {
    let tree = Arc::new(Tree::new());
    const STABLE: u64 = 40;
    const GAP: u64 = 256;
    let key = |n: u64| n.to_be_bytes();
    for s in 0..STABLE {
        assert!(tree.insert(&key(s * GAP), s * GAP).is_some());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (tree, stop) = (tree.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut garbage = Garbage::default();
                let mut x = seed + 7;
                let mut unlinked = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    xorshift(&mut x);
                    // Fill one gap between stable keys, then empty it.
                    let base = (x % STABLE) * GAP;
                    for i in 1..GAP {
                        tree.insert(&key(base + i), base + i);
                    }
                    for i in 1..GAP {
                        let before = garbage.leaves.len();
                        garbage.keep(tree.remove_if(&key(base + i), |_| true));
                        unlinked += garbage.leaves.len() - before;
                    }
                }
                (garbage, unlinked)
            })
        })
        .collect();
    let mut scans = 0u64;
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(1500) {
        assert_eq!(
            scan_stable(&tree, GAP),
            STABLE,
            "scan missed stable keys at the end"
        );
        let probe = (scans * 7) % STABLE * GAP;
        assert_eq!(tree.get(&key(probe)).ok(), Some(probe));
        scans += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut garbage = Garbage::default();
    let mut unlinked = 0;
    for writer in writers {
        let (g, n) = writer.join().unwrap();
        garbage.absorb(g);
        unlinked += n;
    }
    // Every thread has stopped: nothing reads the unlinked leaves now.
    garbage.free();
    assert!(scans > 5);
    assert!(unlinked > 0, "the churn must have unlinked leaves");
}

#[test]
fn inserting_a_present_key_leaves_the_leaf_version_alone() {
    let tree = Tree::new();
    assert!(tree.insert(b"a", 1).is_some());
    // The proof that "b" is absent: the leaf and its version.
    let recorded = tree.get(b"b").expect_err("b is absent");
    assert!(tree.insert(b"a", 2).is_none(), "a is present");
    assert!(
        recorded.unchanged(),
        "a failed insert must not invalidate the leaf's readers"
    );
    assert!(tree.insert(b"c", 3).is_some());
    assert!(!recorded.unchanged(), "a real insert does");
}

#[test]
fn a_removal_that_misses_leaves_the_leaf_version_alone() {
    let tree = Tree::new();
    assert!(tree.insert(b"a", 1).is_some());
    let recorded = tree.get(b"b").expect_err("b is absent");
    assert!(!tree.remove_if(b"b", |_| true).removed, "b is absent");
    assert!(!tree.remove_if(b"a", |v| v == 2).removed, "a holds 1");
    assert!(
        recorded.unchanged(),
        "a removal that takes nothing must not invalidate the leaf's readers"
    );
    assert!(tree.remove_if(b"a", |v| v == 1).removed);
    assert!(!recorded.unchanged(), "a real removal does");
}
