//! In-place windows: how a copy of a sealed record knows that no session
//! is still updating it in place.
//!
//! An RMW whose in-place updater declines (the value would grow, say) must
//! copy a record that other sessions may be updating in place at that
//! moment; an update that lands between the copy's read of the value and
//! its index CAS would go to a record the index no longer reaches, and be
//! lost. FASTER C++ leaves this to the user's functions (its
//! variable-length values carry a lock); FASTER C# seals the record under
//! a record lock. Here the copier seals the record (header bit 63, see
//! `record.rs`) and then waits for the *in-place windows* of the other
//! sessions: each session has a padded counter, odd from before it reads a
//! record's header until after its in-place update. It is Dekker's
//! pattern with two SeqCst fences, the updater's between its window store
//! and its header load, the copier's between its seal and its window
//! loads: of the two fences, whichever comes second in the single order of
//! SeqCst operations makes its side see the other's store, so either the
//! updater reads the seal and keeps out, or the copier sees the window
//! open and waits for it to close.
//!
//! The updater's fence would run on every update that may go in place
//! (about 2 ns in a loop of in-place `fetch_add`s here, 3–5% of the
//! benchmark's in-memory RMW rate; BENCHMARKS.md, session 41), although
//! most stores never copy a mutable record (their updaters never decline).
//! So the windows are off until a store's first such copy: that copier
//! turns them on and bumps the epoch, and the seal protocol starts only
//! once every session has refreshed past the bump (`ready`), since from
//! then on every in-place update opens its window; an update made with
//! them off finished before its session's refresh. The first copy of a
//! store's life waits for that grace period; later ones do not. An
//! asymmetric pair (a compiler fence for the updater, `membarrier(2)` for
//! the copier) was measured too and not kept: each copy then cost about
//! 8 µs on this VM, a cliff for workloads whose values grow.

use crate::sync::{fence, AtomicU64};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;
use epochdb_epoch::EpochManager;

/// `enabled_epoch` before the first copier has bumped the epoch.
const NOT_YET: u64 = u64::MAX;

/// Every session's in-place window, by session slot.
#[derive(Debug)]
pub(crate) struct InPlaceWindows {
    windows: Box<[CachePadded<AtomicU64>]>,
    /// 1 once a copier has turned the windows on (for the store's life).
    enabled: CachePadded<AtomicU64>,
    /// The global epoch before the bump that followed `enabled`.
    enabled_epoch: AtomicU64,
    /// 1 once every session has refreshed past that bump.
    ready: AtomicU64,
}

impl InPlaceWindows {
    /// Windows for `sessions` session slots, all closed, not in use.
    pub(crate) fn new(sessions: usize) -> Self {
        InPlaceWindows {
            windows: (0..sessions)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            enabled: CachePadded::new(AtomicU64::new(0)),
            enabled_epoch: AtomicU64::new(NOT_YET),
            ready: AtomicU64::new(0),
        }
    }

    /// Whether the seal protocol may run: turns the windows on at the
    /// first call (bumping the epoch), and is `true` once every protected
    /// session has refreshed past that bump. A session's refresh reads the
    /// bumped epoch after `enabled` was set, so its later updates see it
    /// and open their windows; an update that did not finished first.
    pub(crate) fn ready(&self, epochs: &EpochManager) -> bool {
        if self.ready.load(Acquire) == 1 {
            return true;
        }
        if self.enabled.swap(1, SeqCst) == 0 {
            let epoch = epochs.bump() - 1;
            self.enabled_epoch.store(epoch, SeqCst);
        }
        let epoch = self.enabled_epoch.load(Acquire);
        if epoch != NOT_YET && epochs.compute_safe() >= epoch {
            self.ready.store(1, Release);
            return true;
        }
        false
    }

    /// Opens `slot`'s window: from here until [`InPlaceWindows::close`]
    /// its session may update in place a record whose header it reads
    /// after this call.
    #[inline(always)]
    pub(crate) fn open(&self, slot: usize) {
        // Relaxed: a session that refreshed past the enabling bump sees it
        // (the bump's epoch read synchronizes with it).
        if self.enabled.load(Relaxed) == 0 {
            return;
        }
        let window = &self.windows[slot];
        let at = window.load(Relaxed);
        if !is_open(at) {
            window.store(at + 1, Relaxed);
            fence(SeqCst);
        }
    }

    /// Closes `slot`'s window (if open). Release: a copier that sees it
    /// closed sees the updates made in it.
    #[inline(always)]
    pub(crate) fn close(&self, slot: usize) {
        let window = &self.windows[slot];
        let at = window.load(Relaxed);
        if is_open(at) {
            window.store(at + 1, Release);
        }
    }

    /// Called by a copier after [`InPlaceWindows::ready`] and its seal of a
    /// record, with its own window (`slot`) closed: returns once every
    /// window open at its fence has closed. A window opened later reads
    /// the header after the seal and stays out of the record.
    pub(crate) fn settle(&self, slot: usize) {
        debug_assert!(!is_open(self.windows[slot].load(Relaxed)));
        fence(SeqCst);
        for (other, window) in self.windows.iter().enumerate() {
            if other == slot {
                continue;
            }
            // Acquire: the updates of a window seen closed are visible.
            let at = window.load(Acquire);
            if !is_open(at) {
                continue;
            }
            let mut spins = 0u32;
            while window.load(Acquire) == at {
                if spins < 64 {
                    crate::sync::spin();
                    spins += 1;
                } else {
                    // Its session may be descheduled mid-update.
                    yield_now();
                }
            }
        }
    }
}

/// A window's count is odd while it is open.
#[inline(always)]
fn is_open(count: u64) -> bool {
    count & 1 == 1
}

#[cfg(not(loom))]
use std::thread::yield_now;

#[cfg(loom)]
use loom::thread::yield_now;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn windows_are_off_until_ready() {
        let epochs = EpochManager::new(2);
        let mut session = epochs.register().unwrap();
        session.protect();
        let windows = InPlaceWindows::new(2);
        windows.open(0);
        assert_eq!(windows.windows[0].load(Relaxed), 0, "off: nothing opens");
        assert!(!windows.ready(&epochs), "the session has not refreshed");
        assert_eq!(windows.enabled.load(Relaxed), 1);
        windows.open(0);
        assert_eq!(windows.windows[0].load(Relaxed), 1, "on: it opens");
        windows.close(0);
        assert!(!windows.ready(&epochs));
        session.refresh();
        assert!(windows.ready(&epochs), "every session refreshed");
        session.unprotect();
    }

    #[test]
    fn windows_open_and_close_idempotently() {
        let windows = InPlaceWindows::new(2);
        windows.enabled.store(1, Relaxed);
        windows.open(0);
        windows.open(0);
        assert_eq!(windows.windows[0].load(Relaxed), 1);
        windows.close(0);
        windows.close(0);
        assert_eq!(windows.windows[0].load(Relaxed), 2);
        // Nothing open but our own: returns at once.
        windows.open(1);
        windows.close(1);
        windows.settle(0);
    }

    #[test]
    fn settle_waits_for_an_open_window() {
        let windows = Arc::new(InPlaceWindows::new(2));
        windows.enabled.store(1, Relaxed);
        windows.open(1);
        let closed = Arc::new(AtomicBool::new(false));
        let (w, c) = (windows.clone(), closed.clone());
        let closer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            c.store(true, SeqCst);
            w.close(1);
        });
        windows.settle(0);
        assert!(
            closed.load(SeqCst),
            "settle returned before the window closed"
        );
        closer.join().unwrap();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Loom model of the seal and the windows: the real `InPlaceWindows`
    //! (over loom's atomics), one updater that opens its window, reads the
    //! header and adds to the value unless it is sealed, and one copier
    //! that seals the header (`fetch_or`, as `Session::seal_and_settle`),
    //! settles and reads the value for its copy. Checked: the copy holds
    //! the update whenever the updater made it. The mutation (the
    //! updater's window opened without its fence) is found.
    //! `RUSTFLAGS="--cfg loom" cargo test --release -p epochdb-hybridlog
    //! --lib loom_tests::` (with the crate's other loom models).
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    const SEALED: u64 = 1 << 63;

    fn model(open: fn(&InPlaceWindows, usize)) {
        loom::model(move || {
            let windows = Arc::new(InPlaceWindows::new(2));
            // On and ready (what `ready` waits for is the epoch's part).
            windows.enabled.store(1, Relaxed);
            let header = Arc::new(AtomicU64::new(0));
            let value = Arc::new(AtomicU64::new(0));
            let (w, h, v) = (windows.clone(), header.clone(), value.clone());
            let updater = thread::spawn(move || {
                open(&w, 1);
                let applied = h.load(Acquire) & SEALED == 0;
                if applied {
                    v.fetch_add(1, Relaxed);
                }
                w.close(1);
                applied
            });
            header.fetch_or(SEALED, SeqCst);
            windows.settle(0);
            let copied = value.load(Relaxed);
            let applied = updater.join().unwrap();
            assert_eq!(
                copied,
                u64::from(applied),
                "the copy missed an in-place update"
            );
        });
    }

    #[test]
    fn a_copy_never_misses_an_in_place_update() {
        model(InPlaceWindows::open);
    }

    #[test]
    #[should_panic(expected = "the copy missed an in-place update")]
    fn a_window_opened_without_its_fence_lets_an_update_be_missed() {
        model(|windows, slot| {
            let window = &windows.windows[slot];
            let at = window.load(Relaxed);
            window.store(at + 1, Relaxed);
        });
    }
}
