//! The index against a BTreeMap model (single-threaded, random operations
//! and key shapes), and under concurrent inserts, removes and scans.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use super::Tree;

/// Frees removed key copies at the end (no concurrent readers in tests).
fn free_all(copies: Vec<*mut ()>) {
    for copy in copies {
        // SAFETY: removed from the tree; nothing else reads them.
        unsafe { crate::blob::free_blob(copy) };
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key_strategy(), 1u64..1000).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => key_strategy().prop_map(Op::Remove),
        1 => key_strategy().prop_map(Op::Get),
        1 => (key_strategy(), key_strategy()).prop_map(|(a, b)| Op::Scan(a.clone().min(b.clone()), a.max(b))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn tree_matches_btreemap(ops in prop::collection::vec(op(), 1..1500)) {
        let tree = Tree::new();
        let mut model = BTreeMap::new();
        let mut copies = Vec::new();
        for op in &ops {
            match op {
                Op::Insert(k, v) => {
                    let fresh = !model.contains_key(k);
                    if fresh { model.insert(k.clone(), *v); }
                    prop_assert_eq!(tree.insert(k, *v).is_some(), fresh);
                }
                Op::Remove(k) => {
                    let (removed, copy) = tree.remove_if(k, |_| true);
                    copies.extend(copy);
                    prop_assert_eq!(removed, model.remove(k).is_some());
                }
                Op::Get(k) => prop_assert_eq!(tree.get(k).ok(), model.get(k).copied()),
                Op::Scan(lo, hi) => {
                    let mut seen = Vec::new();
                    tree.scan(Bound::Included(lo), Bound::Excluded(hi), |k, v| { seen.push((k.to_vec(), v)); true }, |_| ());
                    let want: Vec<_> = model.range::<Vec<u8>, _>((Bound::Included(lo), Bound::Excluded(hi))).map(|(k, v)| (k.clone(), *v)).collect();
                    prop_assert_eq!(seen, want);
                }
            }
        }
        let mut all = Vec::new();
        tree.scan(Bound::Unbounded, Bound::Unbounded, |k, v| { all.push((k.to_vec(), v)); true }, |_| ());
        prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        free_all(copies);
    }
}

#[test]
fn remove_if_checks_the_value() {
    let tree = Tree::new();
    assert!(tree.insert(b"k", 7).is_some());
    assert!(!tree.remove_if(b"k", |v| v == 8).0);
    assert_eq!(tree.get(b"k").ok(), Some(7));
    assert!(tree.remove_if(b"k", |v| v == 7).0);
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
                let mut copies = Vec::new();
                let mut x = seed + 1;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let n = (x % STABLE) * 2 + 1;
                    if tree.insert(&long(n), n).is_none() {
                        copies.extend(tree.remove_if(&long(n), |_| true).1.map(|p| p as usize));
                    }
                }
                copies
            })
        })
        .collect();
    let mut scans = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(1500) {
        let mut expected = 0u64;
        let mut last: Option<Vec<u8>> = None;
        tree.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            |key, value| {
                if let Some(last) = &last {
                    assert!(key > last.as_slice(), "scan out of order");
                }
                last = Some(key.to_vec());
                if value % 2 == 0 {
                    assert_eq!(value, expected, "a stable key was skipped or repeated");
                    expected += 2;
                }
                true
            },
            |_| (),
        );
        assert_eq!(expected, STABLE * 2, "scan missed stable keys at the end");
        let probe = (scans as u64 * 7919) % STABLE * 2;
        assert_eq!(tree.get(&long(probe)).ok(), Some(probe));
        scans += 1;
    }
    stop.store(true, Ordering::Relaxed);
    // Removed copies may still be read by a concurrent scan in real use;
    // here every thread has stopped, so freeing them now is safe.
    let copies: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .map(|p| p as *mut ())
        .collect();
    free_all(copies);
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
    let mut missing = tree.get(&100u64.to_be_bytes()).unwrap_err();
    assert!(seen.iter().all(|leaf| leaf.unchanged()) && missing.unchanged());
    // Our own insert: patching keeps the recorded versions valid.
    let ours = tree.insert(&50u64.to_be_bytes(), 50).unwrap();
    assert!(!missing.unchanged());
    ours.patch(&mut missing);
    for leaf in &mut seen {
        ours.patch(leaf);
    }
    assert!(missing.unchanged() && seen.iter().all(|leaf| leaf.unchanged()));
    // Someone else's change is not patched away.
    let (removed, copy) = tree.remove_if(&3u64.to_be_bytes(), |_| true);
    assert!(removed && copy.is_none());
    assert!(!missing.unchanged());
}
