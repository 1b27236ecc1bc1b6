//! Why this exists: `Transaction::version` is what a server's optimistic
//! `WATCH` compares across transactions. It must change on every write of a
//! key (even one that writes the same bytes, or deletes), stay put
//! otherwise, and make the reading transaction abort if the key is written
//! before it commits.

use epochdb_engine::{Abort, Config, Database};

#[test]
fn version_changes_exactly_when_the_key_is_written() {
    let db = Database::open(Config::default()).unwrap();
    let t = db.create_table("t").unwrap();
    let mut w = db.worker().unwrap();
    let read = |w: &mut epochdb_engine::Worker| w.run(|tx| tx.version(t, b"k")).unwrap().0;

    assert_eq!(read(&mut w), None, "a key never written has no record");
    let _ = w.run(|tx| tx.put(t, b"k", b"v")).unwrap();
    let v1 = read(&mut w).expect("a written key has a version");
    assert_eq!(read(&mut w), Some(v1), "reads do not change the version");
    let _ = w.run(|tx| tx.get(t, b"k").map(|_| ())).unwrap();
    assert_eq!(read(&mut w), Some(v1));

    let _ = w.run(|tx| tx.put(t, b"k", b"v")).unwrap();
    let v2 = read(&mut w).unwrap();
    assert!(v2 > v1, "rewriting the same bytes is a new version");

    let _ = w.run(|tx| tx.delete(t, b"k").map(|_| ())).unwrap();
    let v3 = read(&mut w);
    assert_ne!(v3, Some(v2), "a delete is a new version");
}

#[test]
fn a_write_between_version_and_commit_aborts_the_reader() {
    let db = Database::open(Config::default()).unwrap();
    let t = db.create_table("t").unwrap();
    let mut reader = db.worker().unwrap();
    let mut writer = db.worker().unwrap();
    let _ = writer.run(|tx| tx.put(t, b"k", b"0")).unwrap();
    let mut attempts = 0;
    let outcome = reader.run(|tx| {
        attempts += 1;
        tx.version(t, b"k")?;
        if attempts == 1 {
            let _ = writer.run(|tx| tx.put(t, b"k", b"1")).unwrap();
        }
        tx.put(t, b"other", b"x")?;
        Ok::<_, Abort>(())
    });
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(attempts, 2, "the first attempt must fail validation");
}
