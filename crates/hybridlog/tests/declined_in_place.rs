//! Why this file exists: an RMW whose in-place updater declines (say, the
//! new value would not fit) copies a record that is still in the mutable
//! region, where other sessions go on updating it in place. Unless those
//! in-place updates are stopped before the copy reads the value, one that
//! lands between the copy's read and its index CAS is lost: it went to a
//! record the index no longer points to. FASTER C++ leaves this to the
//! user's functions (its variable-length samples lock the value); FASTER C#
//! seals the record. Here the store seals it: the record's sealed bit stops
//! in-place updates, and the copy waits (pending) until every session has
//! refreshed its epoch since the seal, so that no update that saw the
//! record unsealed is still running.
//!
//! Three sessions add to a few hot keys; the updater declines one call in
//! `DECLINE_EVERY`, so copies of mutable records race in-place additions
//! all the time. No checkpoint, no crash: the counters must add up to
//! exactly the increments issued.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, Functions, SimStorage, Status, Store, Value,
};

const KEYS: u64 = 16;
const THREADS: u64 = 3;
const DECLINE_EVERY: u64 = 4;

/// [`AddU64`], except that the in-place updater declines
/// one call in [`DECLINE_EVERY`] (counted over all threads).
#[derive(Default)]
struct SometimesDeclines {
    calls: AtomicU64,
}

impl Functions for SometimesDeclines {
    type Input = u64;

    fn initial_len(&self, input: &u64) -> usize {
        AddU64.initial_len(input)
    }

    fn initial(&self, input: &u64, value: &mut [u8]) {
        AddU64.initial(input, value);
    }

    fn in_place(&self, value: &Value<'_>, input: &u64) -> bool {
        if self
            .calls
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(DECLINE_EVERY)
        {
            return false;
        }
        AddU64.in_place(value, input)
    }

    fn copy_len(&self, old: &[u8], input: &u64) -> usize {
        AddU64.copy_len(old, input)
    }

    fn copy(&self, old: &[u8], input: &u64, value: &mut [u8]) {
        AddU64.copy(old, input, value);
    }
}

fn config() -> Config {
    Config {
        index_buckets: 1 << 10,
        page_bits: 16,
        memory_bytes: 256 << 20,
        mutable_fraction: 0.9,
        max_sessions: 8,
        ..Config::default()
    }
}

#[test]
fn declined_in_place_updates_lose_no_concurrent_increment() {
    hot_keys_with_declines(None);
}

/// The same while checkpoints of every kind run back to back: a sealed
/// record meets the CPR phases' own copies (cpr-sigmod19 Algorithm 4) and
/// fold-overs that make it read-only while its RMW waits.
#[test]
fn declined_in_place_updates_lose_no_increment_across_checkpoints() {
    hot_keys_with_declines(Some(&[
        CheckpointKind::FoldOver,
        CheckpointKind::Snapshot,
        CheckpointKind::IncrementalSnapshot,
    ]));
}

fn seconds() -> u64 {
    std::env::var("HYBRIDLOG_DECLINE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

fn open(disk: SimStorage) -> Arc<Store<SometimesDeclines>> {
    Arc::new(
        Store::open(
            Arc::new(disk),
            Path::new("/declined"),
            config(),
            SometimesDeclines::default(),
        )
        .unwrap(),
    )
}

fn hot_keys_with_declines(checkpoints: Option<&[CheckpointKind]>) {
    let store = open(SimStorage::new(5));
    let (issued, pending, taken) = run(&store, seconds(), checkpoints);
    let total = total(&store);
    assert_eq!(
        total, issued,
        "the counters hold {total} of {issued} increments ({pending} went pending, {taken} checkpoints)"
    );
    assert!(
        checkpoints.is_none() || taken >= 3,
        "only {taken} checkpoints in {} s",
        seconds()
    );
}

/// Sealed records reach the disk (the superseded copies' headers carry the
/// bit): recovery replays them, and the recovered store copies and seals
/// again without losing an increment.
#[test]
fn a_store_with_sealed_records_recovers_and_goes_on() {
    let disk = SimStorage::new(9);
    let store = open(disk.clone());
    let (first, _, _) = run(&store, 1, None);
    store
        .checkpoint_with(true, CheckpointKind::FoldOver)
        .unwrap();
    drop(store);
    let store = open(disk.crash(CrashMode::DropUnsynced));
    assert_eq!(total(&store), first, "the checkpoint holds every increment");
    let (second, _, _) = run(&store, 1, None);
    assert_eq!(total(&store), first + second);
}

/// Three sessions add 1 to hot keys for `seconds`, with checkpoints of
/// `checkpoints`' kinds back to back if given: (increments issued, how
/// many went pending, checkpoints taken).
fn run(
    store: &Arc<Store<SometimesDeclines>>,
    seconds: u64,
    checkpoints: Option<&[CheckpointKind]>,
) -> (u64, u64, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                common::increment_until(&store, &stop, |issued| (issued / 8 + thread) % KEYS)
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut taken = 0usize;
    while Instant::now() < deadline {
        match checkpoints {
            Some(kinds) => {
                let kind = kinds[taken % kinds.len()];
                store
                    .checkpoint_with(taken.is_multiple_of(4), kind)
                    .unwrap();
                taken += 1;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (mut issued, mut pending) = (0, 0);
    for worker in workers {
        let (i, p) = worker.join().unwrap();
        issued += i;
        pending += p;
    }
    eprintln!("{issued} increments issued, {pending} went pending, {taken} checkpoints");
    (issued, pending, taken)
}

/// The sum of every hot key's counter.
fn total(store: &Store<SometimesDeclines>) -> u64 {
    let mut session = store.start_session().unwrap();
    let mut total = 0u64;
    let mut value = Vec::new();
    for key in 0..KEYS {
        let status = match session.read(&key.to_le_bytes(), &mut value).unwrap() {
            Status::Pending => {
                let done = session.complete_pending(true).unwrap();
                value = done[0].value.clone().unwrap();
                done[0].status
            }
            status => status,
        };
        assert_eq!(status, Status::Ok, "key {key} was incremented");
        total += u64::from_le_bytes(value[..8].try_into().unwrap());
    }
    total
}
