//! Why this exists: a transaction's own inserts must not make it fail.
//! Reading a missing key records the leaf that proves it missing (Silo's
//! node set, §4.6); inserting the key changes that leaf, and when the
//! insert splits the leaf, the split changes it too. Had the split gone
//! unrecorded, the transaction would abort — and its retry, after the
//! abort removed its placeholders, would meet the same full leaf and abort
//! again, until it gave up (a Redis MULTI of ten SETs did, in `serve`).

use epochdb_engine::{Config, Database};

#[test]
fn reading_then_inserting_new_keys_commits_at_the_first_attempt() {
    // Few attempts, so that a regression fails fast instead of retrying.
    let db = Database::open(Config {
        max_attempts: 100,
        ..Config::default()
    })
    .unwrap();
    let t = db.create_table("t").unwrap();
    let mut worker = db.worker().unwrap();
    let value = [7u8; 300];
    for block in 0..60 {
        let mut attempts = 0;
        let (_, _ticket) = worker
            .run(|tx| {
                attempts += 1;
                for i in 0..10 {
                    let key = format!("b{block}k{i}");
                    assert!(tx.get(t, key.as_bytes())?.is_none());
                    tx.put(t, key.as_bytes(), &value)?;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(attempts, 1, "block {block} took {attempts} attempts");
    }
    let count = worker
        .run(|tx| {
            Ok(tx
                .scan_collect(
                    t,
                    std::ops::Bound::Unbounded,
                    std::ops::Bound::Unbounded,
                    usize::MAX,
                )?
                .len())
        })
        .unwrap()
        .0;
    assert_eq!(count, 600);
}
