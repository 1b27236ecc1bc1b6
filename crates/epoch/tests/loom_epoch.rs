//! Loom models of the epoch protocol's two safety promises.
//!
//! Why this file exists: the framework's correctness rests on a handful of
//! SeqCst stores, loads and fences (`protect` against `compute_safe`,
//! `retire` against `protect`). Ordinary tests only sample the interleavings
//! a scheduler happens to produce; loom enumerates them (up to a preemption
//! bound) with the crate's `sync` shim switched to loom's types.
//!
//! * `bump_with_action_waits_for_every_old_epoch_thread`: an action passed to
//!   `bump_with` runs exactly once, and only after every thread protected in
//!   the old epoch has refreshed or unprotected.
//! * `retired_object_outlives_protected_reader`: an object unlinked from an
//!   `AtomicPtr` and handed to `retire_box` is not freed while a reader that
//!   may have loaded it is still protected.
//! * `an_operation_below_the_bump_is_waited_for`: after a bump to `t`, a
//!   waiter that finds `oldest_operation() ≥ t` sees everything an
//!   operation that read an epoch below `t` (after a SeqCst fence) wrote
//!   before leaving; an operation it did not wait for read `t` or later.
//!
//! Run (not part of CI; a few seconds each in release mode):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -j 1 -p epochdb-epoch --release --test loom_epoch -- --nocapture
//! ```
//!
//! Without `LOOM_MAX_PREEMPTIONS` the models use a bound of 3.
#![cfg(loom)]

use epochdb_epoch::EpochManager;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};

/// The test's own atomics come from loom too, so loom sees every shared
/// access in the model (the crate's private shim is not reachable here).
mod sync {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};
    pub(crate) use loom::sync::Arc;
}

use sync::{Arc, AtomicBool, AtomicPtr, AtomicUsize, UnsafeCell};

/// Default preemption bound when `LOOM_MAX_PREEMPTIONS` is unset; loom's own
/// default (unbounded) takes far too long for a three-thread model.
const PREEMPTION_BOUND_DEFAULT: usize = 3;

/// Runs `model` under loom and prints how many executions it explored.
fn check(name: &str, model: impl Fn() + Sync + Send + 'static) {
    // A plain std counter: it lives outside the model and survives resets.
    static EXECUTIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTION_BOUND_DEFAULT);
    }
    let bound = builder.preemption_bound;
    let start = std::time::Instant::now();
    let before = EXECUTIONS.load(SeqCst);
    builder.check(move || {
        EXECUTIONS.fetch_add(1, Relaxed);
        model();
    });
    eprintln!(
        "{name}: {} executions, preemption bound {:?}, {:.1?}",
        EXECUTIONS.load(SeqCst) - before,
        bound,
        start.elapsed()
    );
}

/// (a) Two threads are protected in epoch 1; a third bumps with an action.
/// The action must see both threads' "left" marks (each set before the
/// thread refreshes or unprotects), and must run exactly once.
#[test]
fn bump_with_action_waits_for_every_old_epoch_thread() {
    check("bump_with", || {
        let epochs = EpochManager::new(2);
        let mut refresher = epochs.register().expect("slot 0");
        let mut leaver = epochs.register().expect("slot 1");
        let old = refresher.protect();
        assert_eq!(leaver.protect(), old);

        let refreshed = Arc::new(AtomicBool::new(false));
        let unprotected = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(AtomicUsize::new(0));

        let t1 = loom::thread::spawn({
            let refreshed = refreshed.clone();
            move || {
                // Marked before the slot store inside `refresh`, whose
                // SeqCst store/load pair with the scan in `compute_safe`.
                refreshed.store(true, SeqCst);
                refresher.refresh();
                drop(refresher);
            }
        });
        let t2 = loom::thread::spawn({
            let unprotected = unprotected.clone();
            move || {
                unprotected.store(true, SeqCst);
                leaver.unprotect();
                drop(leaver);
            }
        });

        let new = epochs.bump_with({
            let (refreshed, unprotected, runs) =
                (refreshed.clone(), unprotected.clone(), runs.clone());
            move || {
                assert!(refreshed.load(SeqCst), "ran before slot 0 refreshed");
                assert!(unprotected.load(SeqCst), "ran before slot 1 unprotected");
                assert_eq!(runs.fetch_add(1, SeqCst), 0, "action ran twice");
            }
        });
        assert_eq!(new, old + 1);

        t1.join().unwrap();
        t2.join().unwrap();
        // Every thread has left epoch `old`: the action runs now at the
        // latest (if a refresh did not already run it).
        epochs.try_drain();
        assert_eq!(runs.load(SeqCst), 1, "action did not run exactly once");
        epochs.try_drain();
        assert_eq!(runs.load(SeqCst), 1, "a second drain ran it again");
    });
}

/// A shared object whose destruction is visible to the model twice over: a
/// `freed` flag, and a loom `UnsafeCell` written by `Drop`, so loom reports
/// a data race if the free is not ordered after the reader's access.
struct Node {
    value: UnsafeCell<u64>,
    freed: Arc<AtomicBool>,
}

impl Node {
    fn boxed(value: u64, freed: &Arc<AtomicBool>) -> *mut Node {
        Box::into_raw(Box::new(Node {
            value: UnsafeCell::new(value),
            freed: freed.clone(),
        }))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other reference to the cell exists.
        self.value.with_mut(|v| unsafe { *v = u64::MAX });
        self.freed.store(true, SeqCst);
    }
}

/// (b) A reader protects and loads the published pointer; a writer swaps in
/// a new object, retires the old one and pushes the epoch forward trying to
/// free it. The reader must never see its object freed before it
/// unprotects.
#[test]
fn retired_object_outlives_protected_reader() {
    check("reclamation", || {
        let epochs = EpochManager::new(2);
        let mut reader = epochs.register().expect("slot 0");
        let mut writer = epochs.register().expect("slot 1");

        let old_freed = Arc::new(AtomicBool::new(false));
        let new_freed = Arc::new(AtomicBool::new(false));
        let old = Node::boxed(1, &old_freed);
        let new = Node::boxed(2, &new_freed);
        // Addresses only, to tell the two objects apart without touching them.
        let (old_address, new_address) = (old as usize, new as usize);
        let published = Arc::new(AtomicPtr::new(old));

        let reading = loom::thread::spawn({
            let (published, old_freed, new_freed) =
                (published.clone(), old_freed.clone(), new_freed.clone());
            move || {
                reader.protect();
                let node = published.load(Acquire);
                let (freed, expected) = if node as usize == old_address {
                    (&old_freed, 1)
                } else {
                    assert_eq!(node as usize, new_address);
                    (&new_freed, 2)
                };
                assert!(!freed.load(SeqCst), "loaded an object already freed");
                // SAFETY: protected before the load, so the object is not
                // freed until `unprotect` (the property under test; loom
                // flags the cell access if the free can race with it).
                let value = unsafe { (*node).value.with(|v| *v) };
                assert_eq!(value, expected);
                assert!(!freed.load(SeqCst), "object freed while protected");
                reader.unprotect();
                drop(reader);
            }
        });

        let writing = loom::thread::spawn({
            let (published, epochs) = (published.clone(), epochs.clone());
            move || {
                let unlinked = published.swap(new, SeqCst);
                // SAFETY: `unlinked` came from `Box::into_raw`, was just
                // unlinked by this swap, and is retired once.
                unsafe { writer.retire_box(unlinked) };
                // Try as hard as the API allows to free it early.
                epochs.bump();
                epochs.compute_safe();
                writer.collect();
                drop(writer);
            }
        });

        reading.join().unwrap();
        writing.join().unwrap();
        // Nothing is protected any more: the retired object is freed by the
        // time the last handle and the manager are gone (loom also reports
        // the `Arc` inside it as leaked otherwise).
        epochs.compute_safe();
        epochs.try_drain();
        drop(epochs);
        assert!(old_freed.load(SeqCst), "retired object never freed");
        assert!(!new_freed.load(SeqCst), "published object freed");
        // SAFETY: `new` is still published, every other thread is joined.
        drop(unsafe { Box::from_raw(published.load(Acquire)) });
        assert!(new_freed.load(SeqCst));
    });
}

/// A thread that protects while another thread bumps: the slot store of
/// `protect` can land after a `compute_safe` that already read the new `E`
/// and an empty slot, so the thread ends up protected in epoch `L` with
/// `safe == L` — the `bump_with` action for `L` may already have run.
/// (Reclamation stays safe: such a thread's later loads see every unlink
/// retired in `L`.) `protect` re-reads `E` after its fence and retries on a
/// change, which closes the window; this model failed before that fix.
#[test]
fn protect_racing_a_bump_stays_above_safe() {
    check("protect_vs_bump", || {
        let epochs = EpochManager::new(1);
        let mut handle = epochs.register().expect("slot 0");
        let bumping = loom::thread::spawn({
            let epochs = epochs.clone();
            move || {
                epochs.bump_with(|| ());
            }
        });
        let local = handle.protect();
        bumping.join().unwrap();
        let safe = epochs.safe();
        assert!(safe < local, "protected in {local} but safe is {safe}");
    });
}

#[test]
fn an_operation_below_the_bump_is_waited_for() {
    check("an_operation_below_the_bump_is_waited_for", || {
        let manager = EpochManager::new(2);
        let installed = Arc::new(AtomicUsize::new(0));
        let worker = {
            let (manager, installed) = (manager.clone(), installed.clone());
            loom::thread::spawn(move || {
                let mut handle = manager.register().unwrap();
                handle.protect();
                handle.enter_operation();
                // The engine's commit: a SeqCst fence, then read E.
                loom::sync::atomic::fence(SeqCst);
                let epoch = manager.current();
                installed.store(1, Relaxed); // the commit's writes
                handle.leave_operation();
                epoch
            })
        };
        let t = manager.current() + 1;
        manager.bump();
        while manager.oldest_operation() < t {
            loom::thread::yield_now();
        }
        let seen = installed.load(Relaxed);
        let epoch = worker.join().unwrap();
        assert!(
            epoch >= t || seen == 1,
            "an operation at epoch {epoch} < {t} was still writing when the waiter went on"
        );
    });
}
