//! The epoch framework's observable protocol through its public API.
//!
//! Why this file exists: the engine trusts the framework for two things it
//! cannot check itself — that the safe epoch never overtakes a protected
//! thread (or records and index nodes would be freed under a reader), and
//! that the fixed-size thread table is managed correctly as workers come and
//! go (slots reused, `TooManyThreads` when full, garbage of a departed
//! worker still freed). The loom models in `loom_epoch.rs` check the memory
//! orderings; these tests check the bookkeeping, deterministically where
//! possible, plus one multi-threaded stress run.
//!
//! All of it runs under miri (`cargo +nightly miri test -p epochdb-epoch`)
//! except the tests that depend on wall-clock time or many iterations.
#![cfg(not(loom))]

use epochdb_epoch::{EpochManager, EpochTicker, TooManyThreads, FIRST_EPOCH};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts how many [`Tracked`] objects have been dropped.
#[derive(Default)]
struct DropCounter(AtomicUsize);

impl DropCounter {
    fn dropped(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// An object whose destruction is counted.
struct Tracked(Arc<DropCounter>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0 .0.fetch_add(1, SeqCst);
    }
}

/// Retires a fresh [`Tracked`] through `handle`.
fn retire_tracked(handle: &mut epochdb_epoch::EpochHandle, counter: &Arc<DropCounter>) {
    let pointer = Box::into_raw(Box::new(Tracked(counter.clone())));
    // SAFETY: freshly boxed, never shared, retired once.
    unsafe { handle.retire_box(pointer) };
}

#[test]
fn safe_epoch_stays_below_a_protected_local_epoch() {
    let epochs = EpochManager::new(4);
    let mut pinned = epochs.register().unwrap();
    let mut other = epochs.register().unwrap();
    let local = pinned.protect();
    assert_eq!(local, FIRST_EPOCH);
    for _ in 0..10 {
        epochs.bump();
        other.refresh();
        let safe = epochs.compute_safe();
        assert!(safe < local, "safe {safe} passed protected local {local}");
        assert_eq!(epochs.min_protected(), Some(local));
    }
    // Refreshing releases the old epoch: safe catches up to one below it.
    let local = pinned.refresh();
    assert_eq!(local, epochs.current());
    assert_eq!(epochs.compute_safe(), local - 1);
    // With nobody protected, safe is `E - 1`.
    pinned.unprotect();
    other.unprotect();
    assert_eq!(epochs.min_protected(), None);
    assert_eq!(epochs.compute_safe(), epochs.current() - 1);
}

#[test]
fn safe_epoch_only_grows() {
    let epochs = EpochManager::new(2);
    let mut late = epochs.register().unwrap();
    epochs.bump();
    epochs.bump();
    let before = epochs.compute_safe();
    // A thread protecting now enters the current epoch, never an older one,
    // so safe cannot move backwards.
    late.protect();
    assert!(epochs.compute_safe() >= before);
}

/// Threads stay protected and refresh while another thread bumps the epoch
/// and recomputes the safe epoch; after each refresh the safe epoch must be
/// below the thread's local epoch.
///
/// Every thread protects before the bumper starts: a `protect` from the
/// unprotected state that races with a bump can leave `safe == local` (see
/// `protect_racing_a_bump_stays_above_safe` in `loom_epoch.rs`). While a
/// thread stays protected its slot only moves from one epoch to a larger
/// one, so any computation reads a value at most its current local epoch.
///
/// Under miri the rounds shrink so its scheduler and weak-memory emulation
/// still get to interleave the real protocol in reasonable time.
#[test]
fn safe_epoch_never_passes_a_protected_thread_under_contention() {
    const THREADS: usize = 3;
    const ROUNDS: usize = if cfg!(miri) { 200 } else { 20_000 };
    let epochs = EpochManager::new(THREADS + 1);
    let mut handles: Vec<_> = (0..THREADS).map(|_| epochs.register().unwrap()).collect();
    for handle in &mut handles {
        handle.protect();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let bumper = std::thread::spawn({
        let (epochs, stop) = (epochs.clone(), stop.clone());
        move || {
            while !stop.load(SeqCst) {
                epochs.bump_with(|| ());
                epochs.compute_safe();
                std::thread::yield_now();
            }
        }
    });
    let workers: Vec<_> = handles
        .into_iter()
        .map(|mut handle| {
            let epochs = epochs.clone();
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let local = handle.refresh();
                    let safe = epochs.compute_safe();
                    assert!(safe < local, "round {round}: safe {safe} ≥ local {local}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    stop.store(true, SeqCst);
    bumper.join().unwrap();
}

#[test]
fn garbage_is_freed_only_after_the_reader_leaves() {
    let epochs = EpochManager::new(2);
    let counter = Arc::new(DropCounter::default());
    let mut reader = epochs.register().unwrap();
    let mut writer = epochs.register().unwrap();
    reader.protect();
    writer.protect();
    retire_tracked(&mut writer, &counter);
    for _ in 0..3 {
        epochs.bump();
        writer.refresh();
        writer.collect();
    }
    assert_eq!(counter.dropped(), 0, "freed while the reader was protected");
    assert_eq!(writer.pending_garbage(), 1);
    reader.refresh();
    epochs.compute_safe();
    writer.collect();
    assert_eq!(counter.dropped(), 1);
    assert_eq!(writer.pending_garbage(), 0);
}

#[test]
fn orphaned_garbage_of_a_dropped_handle_is_freed_later() {
    let epochs = EpochManager::new(2);
    let counter = Arc::new(DropCounter::default());
    let mut reader = epochs.register().unwrap();
    reader.protect();
    {
        let mut leaving = epochs.register().unwrap();
        for _ in 0..5 {
            retire_tracked(&mut leaving, &counter);
        }
        // Dropped while `reader` still pins the retire epoch: the garbage
        // must outlive the handle.
    }
    assert_eq!(
        counter.dropped(),
        0,
        "orphans freed under a protected reader"
    );
    epochs.bump();
    epochs.try_drain();
    assert_eq!(
        counter.dropped(),
        0,
        "orphans freed under a protected reader"
    );

    reader.unprotect();
    epochs.compute_safe();
    // `bump` and `try_drain` both collect orphans that became safe.
    epochs.try_drain();
    assert_eq!(counter.dropped(), 5, "orphans never freed");
}

#[test]
fn orphans_left_at_shutdown_are_freed_with_the_manager() {
    let counter = Arc::new(DropCounter::default());
    {
        let epochs = EpochManager::new(2);
        let mut reader = epochs.register().unwrap();
        reader.protect();
        let mut leaving = epochs.register().unwrap();
        retire_tracked(&mut leaving, &counter);
        drop(leaving);
        assert_eq!(counter.dropped(), 0);
        // `reader` and `epochs` go out of scope here, in reverse order.
    }
    assert_eq!(counter.dropped(), 1, "garbage leaked at shutdown");
}

#[test]
fn pending_actions_run_when_the_manager_is_dropped() {
    let ran = Arc::new(AtomicBool::new(false));
    {
        let epochs = EpochManager::new(1);
        let mut pinned = epochs.register().unwrap();
        pinned.protect();
        let flag = ran.clone();
        epochs.bump_with(move || flag.store(true, SeqCst));
        assert!(!ran.load(SeqCst));
    }
    assert!(ran.load(SeqCst), "a registered action was lost at shutdown");
}

#[test]
fn slot_is_reused_after_its_handle_is_dropped() {
    let epochs = EpochManager::new(2);
    let first = epochs.register().unwrap();
    let second = epochs.register().unwrap();
    assert_ne!(first.slot(), second.slot());
    let freed = first.slot();
    drop(first);
    let mut again = epochs.register().unwrap();
    assert_eq!(again.slot(), freed, "the freed slot was not reused");
    // The new owner starts unprotected, so the old owner's epoch is gone.
    assert!(!again.is_protected());
    assert_eq!(epochs.min_protected(), None);
    again.protect();
    assert_eq!(epochs.min_protected(), Some(epochs.current()));
}

#[test]
fn a_dropped_protected_handle_stops_holding_back_the_safe_epoch() {
    let epochs = EpochManager::new(1);
    let mut pinned = epochs.register().unwrap();
    pinned.protect();
    epochs.bump();
    epochs.bump();
    assert_eq!(epochs.compute_safe(), FIRST_EPOCH - 1);
    drop(pinned);
    assert_eq!(epochs.compute_safe(), epochs.current() - 1);
}

#[test]
fn registering_past_the_table_size_fails() {
    let epochs = EpochManager::new(3);
    let handles: Vec<_> = (0..3).map(|_| epochs.register().unwrap()).collect();
    let error = epochs.register().unwrap_err();
    assert_eq!(error, TooManyThreads { max_threads: 3 });
    assert_eq!(error.max_threads, epochs.max_threads());
    assert!(error.to_string().contains("at most 3"), "{error}");
    drop(handles);
    assert!(epochs.register().is_ok(), "slots not released on drop");
}

#[test]
fn bump_with_runs_once_after_every_old_thread_refreshes() {
    let epochs = EpochManager::new(3);
    let mut a = epochs.register().unwrap();
    let mut b = epochs.register().unwrap();
    a.protect();
    b.protect();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let new = epochs.bump_with(move || {
        counter.fetch_add(1, SeqCst);
    });
    assert_eq!(new, FIRST_EPOCH + 1);
    a.refresh();
    assert_eq!(runs.load(SeqCst), 0, "ran while b was in the old epoch");
    // A thread entering after the bump does not hold the action back.
    let mut late = epochs.register().unwrap();
    late.protect();
    b.refresh();
    assert_eq!(runs.load(SeqCst), 1);
    a.refresh();
    b.refresh();
    epochs.try_drain();
    assert_eq!(runs.load(SeqCst), 1, "ran twice");
}

#[test]
#[cfg_attr(miri, ignore = "depends on wall-clock time and sleeps")]
fn ticker_advances_the_epoch() {
    let epochs = EpochManager::new(1);
    let start = epochs.current();
    let ticker = EpochTicker::start(epochs.clone(), Duration::from_millis(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while epochs.current() < start + 3 {
        assert!(
            Instant::now() < deadline,
            "ticker did not advance the epoch"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(ticker);
    // Stopped: the epoch no longer moves.
    let stopped = epochs.current();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(epochs.current(), stopped, "ticker kept running after drop");
}

#[test]
#[cfg_attr(miri, ignore = "depends on wall-clock time and sleeps")]
fn ticker_runs_pending_actions_for_idle_threads() {
    let epochs = EpochManager::new(1);
    let mut idle = epochs.register().unwrap();
    idle.protect();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    epochs.bump_with(move || flag.store(true, SeqCst));
    // The worker leaves without refreshing; only the ticker is left to
    // notice that the action has become safe.
    idle.unprotect();
    let _ticker = EpochTicker::start(epochs.clone(), Duration::from_millis(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ran.load(SeqCst) {
        assert!(Instant::now() < deadline, "action never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn oldest_operation_counts_operations_not_protected_threads() {
    let manager = EpochManager::new(4);
    let mut busy = manager.register().unwrap();
    let mut idle = manager.register().unwrap();
    // Nothing running: the current epoch.
    assert_eq!(manager.oldest_operation(), manager.current());
    let started = busy.protect();
    busy.enter_operation();
    idle.protect(); // protected, but between operations
    manager.bump();
    manager.bump();
    assert_eq!(manager.oldest_operation(), started);
    // The idle thread holds back the safe epoch, not operations.
    assert!(manager.compute_safe() < started);
    busy.leave_operation();
    assert_eq!(manager.oldest_operation(), manager.current());
    // A new operation counts from the epoch it refreshed to.
    let now = busy.refresh();
    busy.enter_operation();
    assert_eq!(manager.oldest_operation(), now);
    // Unprotecting, or dropping the handle, ends it.
    busy.unprotect();
    assert_eq!(manager.oldest_operation(), manager.current());
    busy.protect();
    busy.enter_operation();
    drop(busy);
    assert_eq!(manager.oldest_operation(), manager.current());
    drop(idle);
}
