//! Loom model of the epoch-driven address shifts (cpr-sigmod19 §5.1;
//! `Log::shift_read_only` and `Log::shift_head_to_lag`): a bound (read-only or
//! head) moves past a record, and an epoch action, run once every thread
//! has refreshed past the bump, then takes the record for itself (the
//! flush reads it; eviction reuses its frame). A session, protected for
//! its whole operation, uses the record (updates it in place, or reads
//! it) only if it lies at or above the bound as read during the
//! operation. The epoch framework is the real one (`epochdb-epoch` built
//! over loom's atomics); the log's two addresses and the record are
//! re-stated here over loom types with the orderings of `log.rs`, the
//! action reading the record itself (in the store it sets
//! `safe_read_only` and the flush thread reads once it sees it, one more
//! Acquire load), and the record as a `loom::cell::UnsafeCell`
//! so that loom reports any access of it not ordered against the
//! action's. Checked: no such race in any interleaving, and what the
//! action saw is the record's final value (no in-place update after the
//! flush read it). The model fails when the bound is moved after the bump
//! instead of before (`shift_published_after_the_bump_races`). Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/work/target-hybridlog-loom
//! cargo test -j 1 --release -p epochdb-hybridlog --test
//! loom_address_shift` (without `--cfg loom` the file is empty). It lives
//! here, not in the crate, because loom's `UnsafeCell` needs `unsafe`,
//! which the crate forbids.
#![cfg(loom)]

use epochdb_epoch::EpochManager;
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::atomic::Ordering::{AcqRel, Acquire, SeqCst};
use loom::sync::Arc;

/// The record's address.
const RECORD: u64 = 10;
/// Where the bound moves: just past the record.
const SHIFTED: u64 = RECORD + 1;

/// The log's state in the model: the bound every thread checks, the
/// "safe" bound the action sets, the record, and what the action saw.
struct Log {
    bound: AtomicU64,
    safe_bound: AtomicU64,
    record: UnsafeCell<u64>,
    taken: AtomicU64,
}

// SAFETY (model only): loom's `UnsafeCell` checks every access; `Sync` is
// what lets the threads share it so that loom can.
unsafe impl Sync for Log {}

/// The order the shifter publishes the new bound in.
#[derive(Clone, Copy, PartialEq)]
enum Order {
    /// As the store does: the bound first, then the epoch bump whose
    /// action takes the record.
    BoundThenBump,
    /// The mutation: the bump (and its action) first, the bound after.
    BumpThenBound,
}

fn model(order: Order) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let epochs = std::sync::Arc::new(EpochManager::new(2));
        let log = Arc::new(Log {
            bound: AtomicU64::new(RECORD),
            safe_bound: AtomicU64::new(RECORD),
            record: UnsafeCell::new(0),
            taken: AtomicU64::new(u64::MAX),
        });
        // The session: two operations on the record, one refresh between
        // them, as `Session` refreshes between operations.
        let session = {
            let (epochs, log) = (epochs.clone(), log.clone());
            loom::thread::spawn(move || {
                let mut handle = epochs.register().unwrap();
                handle.protect();
                for _ in 0..2 {
                    // `Log::read_only` / `Log::head`: an Acquire load.
                    if RECORD >= log.bound.load(Acquire) {
                        // In place (or a read of it, for head: the same
                        // access as far as the race is concerned).
                        // SAFETY (model): loom checks this access.
                        log.record.with_mut(|v| unsafe { *v += 1 });
                    }
                    handle.refresh();
                }
                handle.unprotect();
            })
        };
        let take = {
            let log = log.clone();
            move || {
                log.safe_bound.fetch_max(SHIFTED, AcqRel);
                // SAFETY (model): loom checks this access.
                let seen = log.record.with(|v| unsafe { *v });
                log.taken.store(seen, SeqCst);
            }
        };
        match order {
            // The orderings of `Log::shift_read_only`.
            Order::BoundThenBump => {
                log.bound.fetch_max(SHIFTED, AcqRel);
                epochs.bump_with(take);
            }
            Order::BumpThenBound => {
                epochs.bump_with(take);
                log.bound.fetch_max(SHIFTED, AcqRel);
            }
        }
        epochs.try_drain();
        session.join().unwrap();
        // Nobody is protected now: the action has run or runs here.
        epochs.try_drain();
        assert_eq!(log.safe_bound.load(SeqCst), SHIFTED, "the action never ran");
        // SAFETY (model): every thread has joined.
        let last = log.record.with(|v| unsafe { *v });
        assert_eq!(
            log.taken.load(SeqCst),
            last,
            "the record changed after the action took it"
        );
    });
}

#[test]
fn a_shifted_record_is_never_used_after_the_action_takes_it() {
    model(Order::BoundThenBump);
}

#[test]
#[should_panic]
fn shift_published_after_the_bump_races() {
    model(Order::BumpThenBound);
}
