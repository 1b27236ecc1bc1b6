//! `Transaction::get_prefix`: a read of a value's first bytes, validated
//! like a whole read.

use std::cell::Cell;

use epochdb_engine::{Config, Database};

#[test]
fn a_prefix_is_the_front_of_the_value() {
    let db = Database::open(Config::default()).unwrap();
    let t = db.create_table("t").unwrap();
    let mut worker = db.worker().unwrap();
    let _ticket = worker.run(|tx| tx.put(t, b"k", b"abcdefghijkl")).unwrap();
    let ((short, exact, long, empty, missing), _) = worker
        .run(|tx| {
            Ok((
                tx.get_prefix(t, b"k", 3)?.map(<[u8]>::to_vec),
                tx.get_prefix(t, b"k", 12)?.map(<[u8]>::to_vec),
                tx.get_prefix(t, b"k", 100)?.map(<[u8]>::to_vec),
                tx.get_prefix(t, b"k", 0)?.map(<[u8]>::to_vec),
                tx.get_prefix(t, b"nope", 3)?.map(<[u8]>::to_vec),
            ))
        })
        .unwrap();
    assert_eq!(short.as_deref(), Some(&b"abc"[..]));
    assert_eq!(exact.as_deref(), Some(&b"abcdefghijkl"[..]));
    assert_eq!(long.as_deref(), Some(&b"abcdefghijkl"[..]));
    assert_eq!(empty.as_deref(), Some(&b""[..]));
    assert_eq!(missing, None);

    // A transaction reads the front of its own pending write.
    let (own, _) = worker
        .run(|tx| {
            tx.put(t, b"k", b"xyz0123456789")?;
            Ok(tx.get_prefix(t, b"k", 4)?.map(<[u8]>::to_vec))
        })
        .unwrap();
    assert_eq!(own.as_deref(), Some(&b"xyz0"[..]));
}

/// A write that changes only bytes past the prefix still invalidates the
/// read: the prefix is checked against the record's version, not its bytes.
#[test]
fn a_change_past_the_prefix_fails_validation() {
    let db = Database::open(Config::default()).unwrap();
    let t = db.create_table("t").unwrap();
    let mut reader = db.worker().unwrap();
    let mut writer = db.worker().unwrap();
    let _ticket = writer.run(|tx| tx.put(t, b"k", b"AB-tail-one")).unwrap();
    let attempts = Cell::new(0);
    let (seen, _) = reader
        .run(|tx| {
            attempts.set(attempts.get() + 1);
            let prefix = tx.get_prefix(t, b"k", 2)?.map(<[u8]>::to_vec);
            // Another worker commits a new tail (same first two bytes)
            // while this transaction is open, once.
            if attempts.get() == 1 {
                let _ticket = writer.run(|w| w.put(t, b"k", b"AB-tail-two")).unwrap();
            }
            // Write something so the transaction validates its reads.
            tx.put(t, b"other", b"x")?;
            Ok(prefix)
        })
        .unwrap();
    assert_eq!(seen.as_deref(), Some(&b"AB"[..]));
    assert_eq!(
        attempts.get(),
        2,
        "the concurrent change past the prefix must abort the first attempt"
    );
}

/// `Transaction::prefetch` (and `prefetch_index`) is only a hint: it leaves
/// the read set alone, so
/// a key changed after it was prefetched (and never read) does not abort
/// the transaction, while the same change after a read does.
#[test]
fn a_prefetch_is_not_a_read() {
    let db = Database::open(Config::default()).unwrap();
    let t = db.create_table("t").unwrap();
    let mut reader = db.worker().unwrap();
    let mut writer = db.worker().unwrap();
    let _ticket = writer.run(|tx| tx.put(t, b"k", b"one")).unwrap();
    for read_it in [false, true] {
        let attempts = Cell::new(0);
        let (seen, _) = reader
            .run(|tx| {
                attempts.set(attempts.get() + 1);
                tx.prefetch_index(t, b"k");
                tx.prefetch_index(t, b"missing");
                tx.prefetch(t, b"k");
                tx.prefetch(t, b"missing");
                let seen = if read_it {
                    tx.get(t, b"k")?.map(<[u8]>::to_vec)
                } else {
                    None
                };
                if attempts.get() == 1 {
                    let _ticket = writer.run(|w| w.put(t, b"k", b"two")).unwrap();
                }
                tx.put(t, b"other", b"x")?;
                Ok(seen)
            })
            .unwrap();
        if read_it {
            assert_eq!(attempts.get(), 2, "a read key changed under us aborts");
            assert_eq!(seen.as_deref(), Some(&b"two"[..]));
        } else {
            assert_eq!(attempts.get(), 1, "a prefetched key is not in the read set");
        }
    }
    // A prefetched key reads as usual afterwards.
    let (value, _) = reader
        .run(|tx| {
            tx.prefetch_index(t, b"k");
            tx.prefetch(t, b"k");
            Ok(tx.get(t, b"k")?.map(<[u8]>::to_vec))
        })
        .unwrap();
    assert_eq!(value.as_deref(), Some(&b"two"[..]));
}
