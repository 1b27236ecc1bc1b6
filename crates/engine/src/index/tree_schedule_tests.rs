//! The B+-tree's optimistic lock coupling under shuttle's randomized
//! schedulers (PCT and uniform random, thousands of schedules each):
//! lookups, scans and phantom checks racing leaf splits, inner-node and
//! root splits, and the unlinking of an emptied leaf.
//!
//! ```text
//! RUSTFLAGS="--cfg engine_shuttle" cargo test -p epochdb-engine --release --lib schedule_
//! ```
//!
//! Under `engine_shuttle` a node holds four entries (`tree::CAPACITY`), so
//! a few keys split leaves, inner nodes and the root. Every atomic access
//! of the tree is a shuttle scheduling point. Shuttle explores
//! interleavings under sequential consistency; the orderings themselves
//! are the standard seqlock's (`Header::validate`).
//!
//! Keys are one byte (no out-of-line copies to free); a key's value is
//! the key itself, so any value read under a validated version can be
//! checked.

use std::ops::Bound;

use shuttle::sync::Arc;

use super::shuttle_check::check;
use super::tree::{free_leaf, LeafVersion, Tree};

fn key(k: u8) -> [u8; 1] {
    [k]
}

/// A tree holding `keys`, each mapped to itself.
fn tree_of(keys: &[u8]) -> Arc<Tree> {
    let tree = Arc::new(Tree::new());
    for &k in keys {
        assert!(tree.insert(&key(k), u64::from(k)).is_some());
    }
    tree
}

/// Runs `there` on a spawned thread while `here` runs on this one.
fn race(tree: &Arc<Tree>, there: impl FnOnce(&Tree) + Send + 'static, here: impl FnOnce(&Tree)) {
    let spawned = {
        let tree = tree.clone();
        shuttle::thread::spawn(move || there(&tree))
    };
    here(tree);
    spawned.join().unwrap();
}

/// Every key of the whole tree, in scan order, checking each value is its
/// key.
fn scan_all(tree: &Tree) -> Vec<u8> {
    let mut keys = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        |k, v| {
            assert_eq!(k.len(), 1, "a key of another shape");
            assert_eq!(v, u64::from(k[0]), "key {} read another key's value", k[0]);
            keys.push(k[0]);
            true
        },
        |_| (),
    );
    keys
}

/// Two leaves, [10 20 30 35] and [50], under an inner root. (Ascending
/// inserts split as appends, moving only the last key: 10…50 leave
/// [10 20 30] [40 50]; 40 then goes and 35 fills the left leaf.)
fn full_leaf_and_lone_leaf() -> Arc<Tree> {
    let tree = tree_of(&[10, 20, 30, 40, 50]);
    assert!(tree.remove_if(&key(40), |_| true).removed);
    assert!(tree.insert(&key(35), 35).is_some());
    assert_eq!(tree.leaf_count(), 2);
    tree
}

/// Scans `[51, ∞)`: the leaves it read (with their versions) and whether
/// it saw key 55.
fn scan_from_51(tree: &Tree) -> (Vec<LeafVersion>, bool) {
    let (mut leaves, mut saw_55) = (Vec::new(), false);
    tree.scan(
        Bound::Included(&key(51)[..]),
        Bound::Unbounded,
        |k, _| {
            saw_55 |= k == [55];
            true
        },
        |leaf| leaves.push(leaf),
    );
    (leaves, saw_55)
}

/// Once 55 has been inserted: a scan of its range that did not see it must
/// have read a leaf that no longer validates (its phantom check fails).
fn noticed_55((leaves, saw_55): (Vec<LeafVersion>, bool)) {
    if !saw_55 {
        assert!(
            !leaves.iter().all(LeafVersion::unchanged),
            "a scan's leaves missed the insert of 55 into its range"
        );
    }
}

/// Frees the leaf a removal unlinked, once every thread has stopped.
fn free_unlinked(unlinked: Option<usize>) {
    if let Some(leaf) = unlinked {
        // SAFETY: the test's threads have stopped; the leaf left the tree.
        unsafe { free_leaf(leaf as *mut ()) };
    }
}

/// After the race: exactly `expected` (sorted), by scan and by lookup.
fn holds_exactly(tree: &Tree, expected: &[u8]) {
    assert_eq!(scan_all(tree), expected, "the tree's keys");
    for &k in expected {
        assert_eq!(tree.get(&key(k)).ok(), Some(u64::from(k)), "key {k}");
    }
    assert_eq!(tree.len(), expected.len());
}

/// A full leaf splits while another thread looks up each key: every
/// lookup finds its key. The leaf is the root (the split grows an inner
/// root) or under an inner root (a lookup may have read the parent before
/// the split and the leaf after it).
#[test]
fn schedule_tree_lookups_racing_a_leaf_split_find_every_key() {
    // The second shape is [10 20 30] [40 50] (see `full_leaf_and_lone_leaf`).
    for keys in [&[10u8, 20, 30, 40][..], &[10, 20, 30, 40, 50][..]] {
        check(move || {
            let tree = tree_of(keys);
            race(
                &tree,
                |t| {
                    t.insert(&key(25), 25).unwrap();
                    t.insert(&key(35), 35).unwrap();
                },
                |t| {
                    for &k in keys {
                        assert_eq!(t.get(&key(k)).ok(), Some(u64::from(k)), "lost {k}");
                    }
                },
            );
            let mut expected = keys.to_vec();
            expected.extend([25, 35]);
            expected.sort_unstable();
            holds_exactly(&tree, &expected);
        });
    }
}

/// Two threads insert into two key ranges at once, splitting leaves, then
/// the root (inner nodes split eagerly on the way down): every key ends up
/// in the tree, in order, once.
#[test]
fn schedule_tree_racing_inserts_split_leaves_and_inner_nodes() {
    check(|| {
        let tree = tree_of(&[10, 20, 30, 40, 50]);
        race(
            &tree,
            |t| {
                for k in [11, 12, 13, 14, 15] {
                    t.insert(&key(k), u64::from(k)).unwrap();
                }
            },
            |t| {
                for k in [41, 42, 43, 44, 45] {
                    t.insert(&key(k), u64::from(k)).unwrap();
                }
            },
        );
        holds_exactly(
            &tree,
            &[10, 11, 12, 13, 14, 15, 20, 30, 40, 41, 42, 43, 44, 45, 50],
        );
    });
}

/// A scan walks the leaf chain while inserts split the leaves under it:
/// it sees keys in order and every key present throughout exactly once.
#[test]
fn schedule_tree_a_scan_racing_splits_sees_every_stable_key_once() {
    check(|| {
        let stable = [2, 4, 6, 8, 10, 12];
        let tree = tree_of(&stable);
        race(
            &tree,
            |t| {
                for k in [3, 5, 7, 9, 11] {
                    t.insert(&key(k), u64::from(k)).unwrap();
                }
            },
            |t| {
                let seen = scan_all(t);
                assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
                let kept: Vec<u8> = seen.into_iter().filter(|k| k % 2 == 0).collect();
                assert_eq!(kept, stable, "a stable key missed or repeated");
            },
        );
        holds_exactly(&tree, &[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    });
}

/// A missing key's leaf version (the proof of its absence) no longer
/// validates once another thread has inserted the key, with or without a
/// split of that leaf: Silo §4.6's phantom protection.
#[test]
fn schedule_tree_an_absence_recorded_before_an_insert_fails_validation() {
    for keys in [&[10u8, 20, 30][..], &[10, 20, 30, 40][..]] {
        check(move || {
            let tree = tree_of(keys);
            let mut proof: Option<LeafVersion> = None;
            race(
                &tree,
                |t| {
                    t.insert(&key(25), 25).unwrap();
                },
                |t| {
                    if let Err(absent) = t.get(&key(25)) {
                        proof = Some(absent);
                    }
                },
            );
            if let Some(proof) = proof {
                assert!(!proof.unchanged(), "a phantom insert went unnoticed");
            }
        });
    }
}

/// The unlinking of an emptied leaf (its range joins its left sibling's)
/// races inserts into both leaves' ranges (the left one full, so it
/// splits), lookups of the left sibling's keys and a scan: the inserts
/// land, the stable keys stay visible, and an absence recorded before the
/// key's insert no longer validates, whichever leaf recorded it (the
/// unlinked one is marked obsolete).
#[test]
fn schedule_tree_unlinking_an_emptied_leaf_races_inserts_and_readers() {
    check(|| {
        let tree = full_leaf_and_lone_leaf();
        let mut proof: Option<LeafVersion> = None;
        let mut scan_above_50 = None;
        let remover = {
            let tree = tree.clone();
            shuttle::thread::spawn(move || {
                let removed = tree.remove_if(&key(50), |_| true);
                assert!(removed.removed);
                removed.unlinked.map(|u| u.leaf as usize)
            })
        };
        race(
            &tree,
            |t| {
                t.insert(&key(45), 45).unwrap();
                t.insert(&key(55), 55).unwrap();
            },
            |t| {
                if let Err(absent) = t.get(&key(55)) {
                    proof = Some(absent);
                }
                for k in [10, 20, 30, 35] {
                    assert_eq!(t.get(&key(k)).ok(), Some(u64::from(k)), "lost {k}");
                }
                let seen = scan_all(t);
                assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
                let kept: Vec<u8> = seen.into_iter().filter(|&k| k <= 35).collect();
                assert_eq!(kept, [10, 20, 30, 35], "a stable key missed or repeated");
                // A scan of [51, ∞) may stand on the leaf as it is unlinked.
                scan_above_50 = Some(scan_from_51(t));
            },
        );
        let unlinked = remover.join().unwrap();
        if let Some(proof) = proof {
            assert!(!proof.unchanged(), "a phantom insert went unnoticed");
        }
        noticed_55(scan_above_50.expect("the scan ran"));
        holds_exactly(&tree, &[10, 20, 30, 35, 45, 55]);
        free_unlinked(unlinked);
    });
}

/// A scan that has found the leaf of its start key may snapshot it just
/// after it was emptied and unlinked; a key then inserted into that range
/// goes to the left sibling, which the scan never read. The unlinked
/// leaf's version must therefore never validate again (it is marked
/// obsolete), or the scan's phantom check would miss the insert.
#[test]
fn schedule_tree_a_scan_standing_on_an_unlinked_leaf_sees_the_phantom() {
    check(|| {
        let tree = full_leaf_and_lone_leaf();
        let changer = {
            let tree = tree.clone();
            shuttle::thread::spawn(move || {
                let removed = tree.remove_if(&key(50), |_| true);
                assert!(removed.unlinked.is_some(), "the emptied leaf stayed");
                tree.insert(&key(55), 55).unwrap();
                removed.unlinked.map(|u| u.leaf as usize)
            })
        };
        let scan = scan_from_51(&tree);
        let unlinked = changer.join().unwrap();
        noticed_55(scan);
        holds_exactly(&tree, &[10, 20, 30, 35, 55]);
        free_unlinked(unlinked);
    });
}
