//! The one place atomics, cells and thread yields come from, so that
//! `cfg(loom)` builds swap in loom's model-checked versions
//! (crossbeam-epoch's pattern, as in `epochdb-epoch`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// A cell with loom's closure API under both builds: under loom every access
/// is checked for a data race (two accesses, one a write, not ordered by
/// happens-before).
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T> {
    #[cfg(not(loom))]
    inner: std::cell::UnsafeCell<T>,
    #[cfg(loom)]
    inner: loom::cell::UnsafeCell<T>,
}

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: std::cell::UnsafeCell::new(value),
            #[cfg(loom)]
            inner: loom::cell::UnsafeCell::new(value),
        }
    }

    /// Runs `f` with a shared pointer to the value.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.inner.get())
        }
        #[cfg(loom)]
        {
            self.inner.with(f)
        }
    }

    /// Runs `f` with an exclusive pointer to the value.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.inner.get())
        }
        #[cfg(loom)]
        {
            self.inner.with_mut(f)
        }
    }
}

/// A mutex with a poison-free `lock()` under both builds.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.inner.lock()
    }

    #[cfg(loom)]
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.inner.lock().expect("loom mutex poisoned")
    }

    /// The lock if it is free now.
    #[cfg(not(loom))]
    pub(crate) fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, T>> {
        self.inner.try_lock()
    }

    /// The lock if it is free now.
    #[cfg(loom)]
    pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
        self.inner.try_lock().ok()
    }
}

/// Waits a little before a consumer (§4.1.1) looks again: spins, then
/// yields, then sleeps, so idle pipeline threads do not burn a core the
/// database threads need. Under loom every call is a yield point.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    #[cfg(not(loom))]
    step: u32,
}

/// Spins before yielding.
#[cfg(not(loom))]
const SPIN_STEPS: u32 = 8;
/// Yields before sleeping.
#[cfg(not(loom))]
const YIELD_STEPS: u32 = 24;
/// The longest an idle pipeline thread sleeps before looking again; bounds
/// the latency the backoff adds to a commit.
#[cfg(not(loom))]
const IDLE_SLEEP: std::time::Duration = std::time::Duration::from_micros(50);

impl Backoff {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Forgets earlier idleness: work was found.
    pub(crate) fn reset(&mut self) {
        #[cfg(not(loom))]
        {
            self.step = 0;
        }
    }

    /// Waits once, longer the longer nothing happened.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        {
            if self.step < SPIN_STEPS {
                for _ in 0..(1 << self.step) {
                    std::hint::spin_loop();
                }
            } else if self.step < YIELD_STEPS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(IDLE_SLEEP);
            }
            self.step = self.step.saturating_add(1);
        }
    }
}

impl Backoff {
    /// Like [`Backoff::snooze`], but once spinning and yielding found
    /// nothing, sleeps on `bell` until a producer rings it, instead of
    /// waking every [`IDLE_SLEEP`] to look: an idle log costs no CPU. If
    /// `ready()` says progress may already be possible (say, a hole a
    /// writer is still filling: the producer rings only once it is done),
    /// it naps as `snooze` does.
    pub(crate) fn idle(&mut self, bell: &Bell, ready: impl Fn() -> bool) {
        #[cfg(loom)]
        if !bell.wait_unless(ready) {
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        {
            if self.step < YIELD_STEPS {
                self.snooze();
            } else if !bell.wait_unless(ready) {
                std::thread::sleep(IDLE_SLEEP);
            }
        }
    }
}

/// The longest a thread sleeps on a [`Bell`] before it looks again without
/// being rung. Every producer rings, so this is a safety net, not a poll.
#[cfg(not(loom))]
const BELL_NAP: std::time::Duration = std::time::Duration::from_millis(100);

/// Lets an idle pipeline thread sleep until a producer has published
/// progress, at the cost of one fence and one load per publication while
/// nobody sleeps, and of one wake-up per sleep while somebody does.
///
/// `state` counts the sleepers (low 32 bits) and, above them, the rings
/// that woke some. The protocol is Dekker's: the producer publishes,
/// fences, then reads the count; the sleeper counts itself in, fences,
/// then checks for progress. With both fences `SeqCst`, at least one side
/// sees the other: the producer rings, or the sleeper sees the progress and
/// does not sleep. A ring *takes* every sleeper counted so far — it sets
/// the count to zero and bumps the ring number, under the lock — and a
/// sleeper sleeps only while the ring number is the one it saw when it
/// counted itself in, checked under the same lock, so a ring between its
/// check and its sleep is not lost. A sleeper that was not taken (it did
/// not sleep, or its nap timed out) counts itself out again.
///
/// Why a ring takes the sleepers rather than each counting itself out
/// once awake (the first version): a woken sleeper takes microseconds to
/// be scheduled, and until it counted itself out every publication saw a
/// sleeper and rang again, each time taking the lock the waking sleeper
/// was about to take. At one database thread appending 128 B entries that
/// was ~66 rings per sleep of the ELEDA worker, and the database thread
/// spun and yielded on the lock (BENCHMARKS.md, session 53).
#[derive(Debug)]
pub(crate) struct Bell {
    /// `sleepers | rings << RING_SHIFT`.
    state: AtomicU64,
    #[cfg(not(loom))]
    lock: parking_lot::Mutex<()>,
    #[cfg(not(loom))]
    cond: parking_lot::Condvar,
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cond: loom::sync::Condvar,
}

/// Where [`Bell::state`]'s ring number starts; the sleepers are below it.
const RING_SHIFT: u32 = 32;
/// [`Bell::state`]'s sleeper count.
const SLEEPERS: u64 = (1 << RING_SHIFT) - 1;

impl Bell {
    /// A bell nobody sleeps on.
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            #[cfg(not(loom))]
            lock: parking_lot::Mutex::new(()),
            #[cfg(not(loom))]
            cond: parking_lot::Condvar::new(),
            #[cfg(loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            cond: loom::sync::Condvar::new(),
        }
    }

    /// Wakes every sleeper; call after publishing progress.
    #[inline]
    pub(crate) fn ring(&self) {
        fence_seq_cst();
        if self.state.load(std::sync::atomic::Ordering::Relaxed) & SLEEPERS != 0 {
            self.ring_slow();
        }
    }

    /// [`Bell::ring`] without its fence, for a producer whose progress —
    /// what the sleeper's `ready()` checks — was published by a `SeqCst`
    /// read-modify-write earlier on this thread (the LSN sequencer's
    /// fetch-add: the worker's `ready()` asks whether anything is reserved
    /// beyond SBL). The sleeper counts itself in, fences `SeqCst`, then loads
    /// the progress; the producer's RMW and its `SeqCst` load of the count
    /// are both in the single total order S. If the load precedes the
    /// sleeper's fence in S, so does the RMW (sequenced before it), and a
    /// load after a `SeqCst` fence sees every `SeqCst` modification before
    /// the fence in S: the sleeper sees the progress and does not sleep.
    /// Otherwise the fence precedes the load in S, and a `SeqCst` load
    /// after the fence in S sees what was written before the fence: the
    /// producer sees the count and rings. (Both are the fence rules of
    /// C++20 [atomics.order], which Rust's atomics follow.) On x86 this saves the
    /// `mfence`-class instruction every append paid (measured: a third of
    /// GRASSHOPPER's extra cost at one thread was the store buffer draining
    /// into it; BENCHMARKS.md).
    ///
    /// Loom treats `SeqCst` accesses as `AcqRel` (its documented
    /// limitation), so under loom this keeps the fence: the models check
    /// the fenced protocol, and the argument above carries it to this one.
    #[inline]
    pub(crate) fn ring_after_seq_cst_rmw(&self) {
        #[cfg(loom)]
        fence_seq_cst();
        if self.state.load(std::sync::atomic::Ordering::SeqCst) & SLEEPERS != 0 {
            self.ring_slow();
        }
    }

    #[cold]
    fn ring_slow(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        #[cfg(not(loom))]
        let _guard = self.lock.lock();
        #[cfg(loom)]
        let _guard = self.lock.lock().expect("loom mutex poisoned");
        // Take every sleeper counted so far (a CAS: more may count
        // themselves in meanwhile, outside the lock). None left: another
        // ring took them and woke them already.
        let mut state = self.state.load(Relaxed);
        while state & SLEEPERS != 0 {
            let taken = ((state >> RING_SHIFT) + 1) << RING_SHIFT;
            match self.state.compare_exchange(state, taken, Relaxed, Relaxed) {
                Ok(_) => {
                    self.cond.notify_all();
                    return;
                }
                Err(now) => state = now,
            }
        }
    }

    /// Sleeps until rung, unless `ready()` is already true; returns whether
    /// it slept.
    pub(crate) fn wait_unless(&self, ready: impl Fn() -> bool) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let ring = self.state.fetch_add(1, Relaxed) >> RING_SHIFT;
        fence_seq_cst();
        // A ring since this sleeper counted itself in shows as a new ring
        // number; such a ring took it (set the count back for it).
        let rung = || self.state.load(Relaxed) >> RING_SHIFT != ring;
        #[cfg(not(loom))]
        let slept = {
            let mut guard = self.lock.lock();
            let sleep = !rung() && !ready();
            if sleep {
                self.cond.wait_for(&mut guard, BELL_NAP);
            }
            sleep
        };
        #[cfg(loom)]
        let slept = {
            let guard = self.lock.lock().expect("loom mutex poisoned");
            let sleep = !rung() && !ready();
            if sleep {
                drop(self.cond.wait(guard).expect("loom mutex poisoned"));
            }
            sleep
        };
        // Not taken by a ring: count itself out (unless a ring takes it
        // first, which this CAS would then see).
        let mut state = self.state.load(Relaxed);
        while state >> RING_SHIFT == ring {
            match self
                .state
                .compare_exchange(state, state - 1, Relaxed, Relaxed)
            {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        slept
    }
}

#[inline]
fn fence_seq_cst() {
    #[cfg(not(loom))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(loom)]
    loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! A lost wake-up shows as a deadlock: the sleeper waits on the condvar
    //! with no timeout under loom, and loom fails a model in which every
    //! thread is blocked.

    use super::{Arc, AtomicU64, Bell};
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

    /// A model builder whose preemption bound is `bound` unless
    /// `LOOM_MAX_PREEMPTIONS` sets another.
    fn bounded(bound: usize) -> loom::model::Builder {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(bound);
        }
        builder
    }

    /// One producer publishes twice; the consumer idles until it has seen
    /// both.
    #[test]
    fn loom_bell_never_loses_a_ring() {
        loom::model(|| {
            let bell = Arc::new(Bell::new());
            let progress = Arc::new(AtomicU64::new(0));
            let producer = {
                let (bell, progress) = (bell.clone(), progress.clone());
                loom::thread::spawn(move || {
                    for v in 1..=2 {
                        progress.store(v, Release);
                        bell.ring();
                    }
                })
            };
            let mut backoff = super::Backoff::new();
            let mut seen = 0;
            while seen < 2 {
                let now = progress.load(Acquire);
                if now > seen {
                    seen = now;
                    continue;
                }
                backoff.idle(&bell, || progress.load(Acquire) > seen);
            }
            producer.join().unwrap();
        });
    }

    /// Two producers publish and ring at once; the consumer idles until it
    /// has seen both. The first ring takes the consumer counted in, so the
    /// second must see it counted in again (or it must see the progress)
    /// for every sleep that follows the first wake-up.
    #[test]
    fn loom_bell_two_producers_never_lose_a_ring() {
        bounded(3).check(|| {
            let bell = Arc::new(Bell::new());
            let progress = Arc::new(AtomicU64::new(0));
            let producers: Vec<_> = (0..2)
                .map(|_| {
                    let (bell, progress) = (bell.clone(), progress.clone());
                    loom::thread::spawn(move || {
                        progress.fetch_add(1, AcqRel);
                        bell.ring();
                    })
                })
                .collect();
            while progress.load(Acquire) < 2 {
                bell.wait_unless(|| progress.load(Acquire) >= 2);
            }
            for p in producers {
                p.join().unwrap();
            }
        });
    }

    /// Two sleepers on one bell, one ring. Bounded as the two-producer
    /// model is: unbounded, three threads around the bell's lock and
    /// condvar ran past 20 minutes without an answer (bounds of 5 and 7,
    /// `LOOM_MAX_PREEMPTIONS`, passed in 18 s and 4 minutes).
    #[test]
    fn loom_bell_wakes_every_sleeper() {
        bounded(3).check(|| {
            let bell = Arc::new(Bell::new());
            let progress = Arc::new(AtomicU64::new(0));
            let sleepers: Vec<_> = (0..2)
                .map(|_| {
                    let (bell, progress) = (bell.clone(), progress.clone());
                    loom::thread::spawn(move || {
                        while progress.load(Acquire) == 0 {
                            bell.wait_unless(|| progress.load(Acquire) > 0);
                        }
                    })
                })
                .collect();
            progress.store(1, Release);
            bell.ring();
            for s in sleepers {
                s.join().unwrap();
            }
        });
    }
}
