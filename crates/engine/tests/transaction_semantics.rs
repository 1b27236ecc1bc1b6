//! Why this exists: single-threaded transactions must behave exactly like a
//! simple ordered map with all-or-nothing commits. Random operation
//! sequences run against the engine and a BTreeMap model side by side.

use std::collections::BTreeMap;
use std::ops::Bound;

use epochdb_engine::{Abort, Config, Database, TxError};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Get(u8),
    Put(u8, u8),
    Insert(u8, u8),
    Update(u8, u8),
    Delete(u8),
    Scan(u8, u8, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..24;
    prop_oneof![
        key.clone().prop_map(Op::Get),
        (key.clone(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        (key.clone(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        (key.clone(), any::<u8>()).prop_map(|(k, v)| Op::Update(k, v)),
        key.clone().prop_map(Op::Delete),
        (key.clone(), key, 0usize..6).prop_map(|(a, b, n)| Op::Scan(a.min(b), a.max(b), n)),
    ]
}

fn key_bytes(k: u8) -> Vec<u8> {
    // Variable-length keys exercise byte-string ordering.
    let mut key = b"k".to_vec();
    key.extend(std::iter::repeat_n(b'x', (k % 3) as usize));
    key.push(k);
    key
}

/// The scan bounds for keys `a` and `b`, ordered as bytes.
fn bounds(a: u8, b: u8) -> (Vec<u8>, Vec<u8>) {
    let (x, y) = (key_bytes(a), key_bytes(b));
    if x <= y {
        (x, y)
    } else {
        (y, x)
    }
}

fn value_bytes(v: u8, k: u8) -> Vec<u8> {
    // Sizes vary per write, so values grow past and shrink below a
    // record's inline capacity.
    vec![v; 1 + (k as usize % 7) * 13 + (v as usize % 5) * 11]
}

/// Applies `op` to the model, returning what the engine must observe.
fn apply_model(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, op: &Op) -> Vec<Vec<u8>> {
    match *op {
        Op::Get(k) => model.get(&key_bytes(k)).cloned().into_iter().collect(),
        Op::Put(k, v) => {
            model.insert(key_bytes(k), value_bytes(v, k));
            vec![]
        }
        Op::Insert(k, v) => {
            let key = key_bytes(k);
            let fresh = !model.contains_key(&key);
            if fresh {
                model.insert(key, value_bytes(v, k));
            }
            vec![vec![fresh as u8]]
        }
        Op::Update(k, v) => {
            let key = key_bytes(k);
            let present = model.contains_key(&key);
            if present {
                model.insert(key, value_bytes(v, k));
            }
            vec![vec![present as u8]]
        }
        Op::Delete(k) => vec![vec![model.remove(&key_bytes(k)).is_some() as u8]],
        Op::Scan(a, b, n) => model
            .range::<Vec<u8>, _>((
                Bound::Included(&bounds(a, b).0),
                Bound::Excluded(&bounds(a, b).1),
            ))
            .take(n)
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect(),
    }
}

fn apply_engine(
    tx: &mut epochdb_engine::Transaction<'_>,
    t: epochdb_engine::TableId,
    op: &Op,
) -> Result<Vec<Vec<u8>>, Abort> {
    Ok(match *op {
        Op::Get(k) => tx
            .get(t, &key_bytes(k))?
            .map(|v| v.to_vec())
            .into_iter()
            .collect(),
        Op::Put(k, v) => {
            tx.put(t, &key_bytes(k), &value_bytes(v, k))?;
            vec![]
        }
        Op::Insert(k, v) => vec![vec![tx.insert(t, &key_bytes(k), &value_bytes(v, k))? as u8]],
        Op::Update(k, v) => vec![vec![tx.update(t, &key_bytes(k), &value_bytes(v, k))? as u8]],
        Op::Delete(k) => vec![vec![tx.delete(t, &key_bytes(k))? as u8]],
        Op::Scan(a, b, n) => {
            let (lo, hi) = bounds(a, b);
            tx.scan_collect(t, Bound::Included(&lo), Bound::Excluded(&hi), n)?
                .into_iter()
                .flat_map(|(k, v)| [k, v.to_vec()])
                .collect()
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn engine_matches_model(
        txns in prop::collection::vec((prop::collection::vec(op(), 1..12), any::<bool>()), 1..25)
    ) {
        let db = Database::open(Config { max_attempts: 50, ..Config::default() }).unwrap();
        let t = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let mut model = BTreeMap::new();
        for (ops, roll_back) in &txns {
            let mut scratch = model.clone();
            let expected: Vec<_> = ops.iter().map(|op| apply_model(&mut scratch, op)).collect();
            let result = worker.run(|tx| {
                let mut seen = Vec::new();
                for op in ops {
                    seen.push(apply_engine(tx, t, op)?);
                }
                if *roll_back { tx.abort() } else { Ok(seen) }
            });
            match result {
                Ok((seen, _ticket)) => {
                    prop_assert_eq!(seen, expected);
                    model = scratch;
                }
                Err(TxError::UserAbort) => prop_assert!(*roll_back),
                Err(other) => prop_assert!(false, "unexpected error {other}"),
            }
        }
        // The committed state equals the model, seen through a full scan.
        let (all, _) = worker.run(|tx| {
            Ok(tx.scan_collect(t, Bound::Unbounded, Bound::Unbounded, usize::MAX)?
                .into_iter().map(|(k, v)| (k, v.to_vec())).collect::<Vec<_>>())
        }).unwrap();
        let want: Vec<_> = model.into_iter().collect();
        prop_assert_eq!(all, want);
    }
}
