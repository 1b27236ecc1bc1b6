//! Why this file exists: a store opened with a fixed record layout
//! (`RecordLayout::Fixed`, FASTER's header-key-value records) must refuse
//! keys and values of other lengths without consuming a serial number,
//! refuse layouts it cannot hold, and really store 24-byte records for
//! 8-byte keys and values — the point of the layout. Its semantics across
//! evictions, checkpoints and recovery are checked against a `HashMap` in
//! `model_proptest.rs`.

use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{
    AddU64, Config, Error, Functions, RecordLayout, SimStorage, Status, Store, Value,
};

const EIGHT_BY_EIGHT: RecordLayout = RecordLayout::Fixed {
    key_bytes: 8,
    value_bytes: 8,
};

fn config(record_layout: RecordLayout) -> Config {
    Config {
        index_buckets: 1024,
        page_bits: 16,
        memory_bytes: 8 << 16,
        max_sessions: 2,
        log_segment_bits: 0,
        record_layout,
        ..Config::default()
    }
}

fn open<F: Functions>(record_layout: RecordLayout, functions: F) -> Result<Store<F>, Error> {
    let disk = SimStorage::new(7);
    Store::open(
        Arc::new(disk),
        Path::new("/fixed"),
        config(record_layout),
        functions,
    )
}

#[test]
fn keys_and_values_of_other_lengths_are_refused() {
    let store = open(EIGHT_BY_EIGHT, AddU64).unwrap();
    let mut session = store.start_session().unwrap();
    let mut out = Vec::new();
    assert!(matches!(
        session.upsert(b"short", &1u64.to_le_bytes()),
        Err(Error::WrongLength {
            what: "key",
            expected: 8,
            got: 5
        })
    ));
    assert!(matches!(
        session.upsert(&1u64.to_le_bytes(), b"a longer value"),
        Err(Error::WrongLength {
            what: "value",
            expected: 8,
            got: 14
        })
    ));
    assert!(matches!(
        session.read(b"nine byte", &mut out),
        Err(Error::WrongLength { what: "key", .. })
    ));
    assert!(matches!(
        session.rmw(b"k", 1),
        Err(Error::WrongLength { what: "key", .. })
    ));
    assert!(matches!(
        session.delete(b"k"),
        Err(Error::WrongLength { what: "key", .. })
    ));
    assert_eq!(session.serial(), 0, "a refused operation has no serial");
    assert_eq!(
        session
            .upsert(&1u64.to_le_bytes(), &2u64.to_le_bytes())
            .unwrap(),
        Status::Ok
    );
    assert_eq!(session.serial(), 1);
}

#[test]
fn layouts_that_cannot_work_are_refused() {
    let no_key = RecordLayout::Fixed {
        key_bytes: 0,
        value_bytes: 8,
    };
    assert!(matches!(open(no_key, AddU64), Err(Error::InvalidConfig(_))));
    let larger_than_a_page = RecordLayout::Fixed {
        key_bytes: 8,
        value_bytes: 1 << 16,
    };
    assert!(matches!(
        open(larger_than_a_page, AddU64),
        Err(Error::RecordTooLarge(_))
    ));
}

#[test]
fn eight_byte_records_take_24_bytes_and_32_in_the_variable_layout() {
    const KEYS: u64 = 1000;
    let mut grew = Vec::new();
    for layout in [EIGHT_BY_EIGHT, RecordLayout::Variable] {
        let store = open(layout, AddU64).unwrap();
        let mut session = store.start_session().unwrap();
        let before = store.addresses().tail;
        for key in 0..KEYS {
            session.rmw(&key.to_le_bytes(), key).unwrap();
        }
        // Deletes append tombstones, of the same size in a fixed layout.
        session.delete(&0u64.to_le_bytes()).unwrap();
        grew.push(store.addresses().tail - before);
        let mut out = Vec::new();
        assert_eq!(
            session.read(&0u64.to_le_bytes(), &mut out).unwrap(),
            Status::NotFound
        );
        assert_eq!(
            session.read(&7u64.to_le_bytes(), &mut out).unwrap(),
            Status::Ok
        );
        assert_eq!(out, 7u64.to_le_bytes());
    }
    // 1001 records on one 64 KiB page: no page-end skips.
    assert_eq!(grew, [(KEYS + 1) * 24, KEYS * 32 + 24]);
}

/// An RMW whose copy is longer than the layout's values.
struct Grows;

impl Functions for Grows {
    type Input = ();
    fn initial_len(&self, _: &()) -> usize {
        8
    }
    fn initial(&self, _: &(), _: &mut [u8]) {}
    fn in_place(&self, _: &Value<'_>, _: &()) -> bool {
        false
    }
    fn copy_len(&self, old: &[u8], _: &()) -> usize {
        old.len() + 8
    }
    fn copy(&self, _: &[u8], _: &(), _: &mut [u8]) {}
}

#[test]
#[should_panic(expected = "fixed layout")]
fn functions_that_break_the_layout_panic() {
    let store = open(EIGHT_BY_EIGHT, Grows).unwrap();
    let mut session = store.start_session().unwrap();
    session.rmw(&1u64.to_le_bytes(), ()).unwrap();
    session.rmw(&1u64.to_le_bytes(), ()).unwrap();
}
