//! Helpers shared by the engine's integration tests.
//!
//! Each test file that says `mod common;` compiles its own copy, and a file
//! uses only some of these, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ops::Bound::Unbounded;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use epochdb_engine::Database;
use epochdb_storage::{CrashMode, SimStorage};
use rand::rngs::SmallRng;
use rand::Rng;

/// Row `n`'s key: big-endian, so that key order is numeric order.
pub(crate) fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Commits rows `from..to` of table `t` (created if missing), 40 bytes of
/// `tag` each, one transaction per row, then waits until the last is
/// durable. The worker is idle while it waits, so a mode must make an idle
/// worker's log durable on its own (silor: the logger takes its buffer).
pub(crate) fn write_batch(db: &Database, from: u64, to: u64, tag: u8) {
    let table = db.create_table("t").unwrap();
    let mut worker = db.worker().unwrap();
    let mut last = None;
    for n in from..to {
        let ((), ticket) = worker
            .run(|tx| {
                tx.put(table, &key(n), &[tag; 40])?;
                Ok(())
            })
            .unwrap();
        last = Some(ticket);
    }
    last.unwrap().wait().unwrap();
}

/// Every row of table `name`, in key order.
pub(crate) fn rows(db: &Database, name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let table = db.table(name).expect("table recovered");
    let mut worker = db.worker().unwrap();
    let (rows, _) = worker
        .run(|tx| {
            let rows = tx.scan_collect(table, Unbounded, Unbounded, usize::MAX)?;
            Ok(rows
                .into_iter()
                .map(|(k, v)| (k, v.to_vec()))
                .collect::<Vec<_>>())
        })
        .unwrap();
    rows
}

/// Table `t`'s rows in all, and how many of them hold `write_batch`'s
/// value for `tag`.
pub(crate) fn count_with_tag(db: &Database, tag: u8) -> (usize, usize) {
    let rows = rows(db, "t");
    let tagged = rows.iter().filter(|(_, v)| *v == [tag; 40]).count();
    (rows.len(), tagged)
}

/// Every row of table `name`, as a map.
pub(crate) fn row_map(db: &Database, name: &str) -> HashMap<Vec<u8>, Vec<u8>> {
    rows(db, name).into_iter().collect()
}

/// The check of the slot workload (`cpr.rs`, `wal_checkpoints.rs`): writer
/// `writer`'s n-th commit stores n in slot `n % slots` of its key range
/// (`writer * 1_000_000 + slot`), so after recovering `count` of its
/// commits, exactly a prefix, each slot holds the last n < count that maps
/// to it, and slots no such n reached are absent. `what` names the run in
/// a failure.
pub(crate) fn assert_slots_hold_prefix(
    recovered: &HashMap<Vec<u8>, Vec<u8>>,
    writer: u64,
    count: u64,
    slots: u64,
    what: &str,
) {
    for slot in 0..slots {
        let expected = (slot < count).then(|| count - 1 - (count - 1 + slots - slot) % slots);
        let got = recovered
            .get(&key(writer * 1_000_000 + slot)[..])
            .map(|v| u64::from_le_bytes(v[..].try_into().unwrap()));
        assert_eq!(got, expected, "{what} slot {slot} (count {count})");
    }
}

/// Waits a random time in `micros` (µs), then cuts the power (dropping or
/// tearing unsynced data, at random) and tells the writers to stop.
/// Returns the disk as the crash left it.
pub(crate) fn power_loss_after(
    storage: &SimStorage,
    rng: &mut SmallRng,
    micros: std::ops::Range<u64>,
    stop: &AtomicBool,
) -> SimStorage {
    std::thread::sleep(Duration::from_micros(rng.gen_range(micros)));
    let crashed = storage.crash(if rng.gen_bool(0.5) {
        CrashMode::DropUnsynced
    } else {
        CrashMode::TearUnsynced
    });
    stop.store(true, Ordering::Relaxed);
    crashed
}
