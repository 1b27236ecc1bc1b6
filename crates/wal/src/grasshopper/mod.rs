//! GRASSHOPPER (eleda §4): the concurrent structures that let database
//! threads buffer concurrently while one worker tracks LSN holes and
//! advances SBL.
//!
//! * [`hindex`]: the hopping index.
//! * [`list`]: the per-thread grasshopper list (c-list + h-list) and the
//!   database thread's side of it (enqueue §4.1.2, gc §4.4).
//! * [`worker`]: the worker's side: the LSN-heap, SBL-hopping and
//!   SBL-crawling (Algorithm 1).

pub(crate) mod hindex;
#[cfg(not(loom))]
mod hslab;
pub(crate) mod list;
#[cfg(not(loom))]
mod slab;
#[cfg(not(loom))]
mod slots;
pub(crate) mod worker;

use std::sync::atomic::Ordering::Release;

use crate::sync::{Arc, AtomicU64, Mutex};
use hindex::HIndex;
use list::GList;

/// The GRASSHOPPER state shared by database threads and the worker.
pub(crate) struct GhShared {
    pub(crate) hindex: HIndex,
    /// Every live grasshopper list; the worker copies it when
    /// `generation` changes.
    pub(crate) registry: Mutex<Vec<Arc<GList>>>,
    pub(crate) generation: AtomicU64,
    /// The worker publishes SBL at least this often (bytes), so the flusher
    /// can start on a unit while a long surge is still being tracked.
    pub(crate) hindex_publish_bytes: u64,
}

impl GhShared {
    /// Structures for a log whose next LSN is `start`.
    pub(crate) fn new(start: u64, hop_shift: u32, ring_bytes: u64, publish_bytes: u64) -> Self {
        Self {
            hindex: HIndex::new(start, hop_shift, ring_bytes),
            registry: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            hindex_publish_bytes: publish_bytes.max(1),
        }
    }

    /// Creates and registers the grasshopper list of a new database thread.
    /// Registration happens-before any byte the thread counts in the
    /// hopping index, so a worker that hops over those bytes knows the list.
    pub(crate) fn register(&self) -> Arc<GList> {
        let list = Arc::new(GList::new(0, &self.hindex));
        self.registry.lock().push(Arc::clone(&list));
        self.generation.fetch_add(1, Release);
        list
    }

    /// Marks `list` retired: its owner is gone and all it appended is
    /// durable; the worker forgets it.
    pub(crate) fn retire(&self, list: &GList) {
        list.retired.store(true, Release);
        self.generation.fetch_add(1, Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Loom models of GRASSHOPPER against the invariants of eleda §4.5,
    //! with a miniature pipeline around it: database threads reserve by
    //! fetch-add, wait for ring space, copy, enqueue and garbage-collect;
    //! the worker runs Algorithm 1; the model's main thread is the
    //! flusher, checking what it "writes".
    //!
    //! * Spec1 (head never overruns tail): a worker that consumed a node
    //!   before its owner published it would read ring bytes or node fields
    //!   without happens-before: loom reports the race.
    //! * Spec2 (gc never passes SDL, never frees what the worker uses):
    //!   freeing writes a loom cell the worker's every node access reads,
    //!   so a free racing with or preceding a worker access fails.
    //! * Spec3 (flusher never passes SBL): every byte the flusher reads is
    //!   checked (by loom) to have been written with happens-before, and
    //!   each flush must end on an entry boundary (the straddling rule).
    //!   Each callback runs once, after SDL passed its entry.
    //!
    //! Run (not part of CI):
    //!
    //! ```text
    //! RUSTFLAGS="--cfg loom" \
    //!     cargo test -j 1 -p epochdb-wal --release --lib loom -- --nocapture
    //! ```
    use super::*;
    use crate::ring::Ring;
    use crate::sync::Bell;
    use loom::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};

    /// The flusher's step: copy `[flushed, SBL)` out of the ring, check
    /// that it is whole entries, publish SDL. Returns whether it moved.
    fn flush_step(ring: &Ring, sbl: &AtomicU64, sdl: &AtomicU64, flushed: &mut Vec<u8>) -> bool {
        let upto = sbl.load(Acquire);
        let from = flushed.len() as u64;
        assert!(upto >= from, "SBL went backwards");
        if upto == from {
            return false;
        }
        // SAFETY: below an SBL loaded with Acquire; loom checks.
        unsafe {
            ring.read(from, (upto - from) as usize, |s| {
                flushed.extend_from_slice(s)
            })
        };
        // The flushed prefix is whole entries (straddling rule).
        let mut at = 0usize;
        while at < flushed.len() {
            let len = flushed[at] as usize;
            assert!(len > 0, "flushed an unwritten byte at {at}");
            let tag = flushed.get(at + 1).copied();
            assert!(at + len <= flushed.len(), "flush split the entry at {at}");
            for b in &flushed[at + 1..at + len] {
                assert_eq!(Some(*b), tag, "entry at {at} mixed with another");
            }
            at += len;
        }
        sdl.store(upto, SeqCst);
        true
    }

    /// A writer's `j`-th entry (of thread `i`) at `[lsn, lsn + len)`: its
    /// length, then its owner's tag, copied into the ring, then its node
    /// pushed onto `list` with a callback that checks it runs once SDL has
    /// passed the entry and counts itself in `ran`.
    ///
    /// # Safety
    ///
    /// The caller owns `list` and reserved the bytes, whose ring space
    /// holds nothing unflushed.
    #[allow(clippy::too_many_arguments)]
    unsafe fn put_entry(
        ring: &Ring,
        list: &GList,
        gh: &GhShared,
        sdl: &Arc<AtomicU64>,
        ran: &Arc<AtomicUsize>,
        (i, j): (usize, usize),
        lsn: u64,
        len: u64,
    ) {
        let mut bytes = vec![(i * 16 + j + 1) as u8; len as usize];
        bytes[0] = len as u8;
        // SAFETY: per the contract.
        unsafe { ring.write(lsn, &bytes) };
        let (sdl, ran) = (sdl.clone(), ran.clone());
        let callback: list::Callback = Box::new(move |r| {
            let r = r.unwrap();
            assert!(r.end <= sdl.load(SeqCst), "callback before durable");
            ran.fetch_add(1, Relaxed);
        });
        // SAFETY: the caller owns `list`.
        unsafe { list.push(lsn, lsn + len, Some(callback), &gh.hindex) };
    }

    /// One model: `threads[i]` lists the entry sizes thread `i` appends.
    ///
    /// Polling loops make loom's state space explode (every empty poll is a
    /// new branch), so the worker and the flusher run a bounded number of
    /// rounds *concurrently* with the writers (`worker_rounds`,
    /// `flusher_rounds`, each round one Algorithm 1 pass or one flush,
    /// without waiting), and the pipeline is drained single-threaded after
    /// the joins. Every interleaving of those rounds with the writers'
    /// enqueues and garbage collection is explored. The ring is large
    /// enough that writers never wait for space (`ring_bytes ≥ total`);
    /// [`model_wrapping`] models a ring that wraps. `catch_up`: the worker
    /// also catches up with the lists' tails (`WalOptions::sbl_catch_up`);
    /// threads from index `late_from` on register their lists themselves,
    /// concurrently with the worker, instead of before the model starts.
    /// `help`: every writer, after each entry, runs a pass of the worker
    /// itself if the worker's state is free, as a database thread does
    /// for a late worker (`Core::help_worker`): the state is then behind a
    /// lock that the worker thread takes for each round.
    #[allow(clippy::too_many_arguments)]
    fn model(
        ring_bytes: u64,
        hop_shift: u32,
        bound: usize,
        worker_rounds: usize,
        flusher_rounds: usize,
        catch_up: bool,
        late_from: usize,
        threads: &'static [&'static [u64]],
        help: bool,
    ) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(bound);
        }
        builder.max_branches = 100_000;
        builder.check(move || {
            let total: u64 = threads.iter().flat_map(|t| t.iter()).sum();
            assert!(ring_bytes >= total, "a ring that wraps: `model_wrapping`");
            let ring = Arc::new(Ring::new(ring_bytes as usize));
            let next_lsn = Arc::new(AtomicU64::new(0));
            let sbl = Arc::new(AtomicU64::new(0));
            let sdl = Arc::new(AtomicU64::new(0));
            let gh = Arc::new(GhShared::new(0, hop_shift, ring_bytes, 1));
            let ran = Arc::new(AtomicUsize::new(0));
            // With `help`, the worker's state behind a lock shared with the
            // writers; without, the worker thread owns it (no lock: the
            // paper's models keep their state space).
            let state = Arc::new(Mutex::new(None));
            let shared_state = help.then(|| {
                *state.lock() = Some(worker::GhWorker::new(&gh, 0, catch_up));
                state.clone()
            });
            let mut joins = Vec::new();
            for (i, sizes) in threads.iter().enumerate() {
                let early = (i < late_from).then(|| gh.register());
                let (ring, next_lsn, sbl, sdl, gh, ran, state) = (
                    ring.clone(),
                    next_lsn.clone(),
                    sbl.clone(),
                    sdl.clone(),
                    gh.clone(),
                    ran.clone(),
                    shared_state.clone(),
                );
                joins.push(loom::thread::spawn(move || {
                    let list = early.unwrap_or_else(|| gh.register());
                    let mut last_end = 0u64;
                    for (j, &len) in sizes.iter().enumerate() {
                        let lsn = next_lsn.fetch_add(len, Relaxed);
                        // SAFETY: reserved; the ring holds the whole log.
                        unsafe { put_entry(&ring, &list, &gh, &sdl, &ran, (i, j), lsn, len) };
                        last_end = lsn + len;
                        if let Some(mut w) = state.as_ref().and_then(|s| s.try_lock()) {
                            let w = w.as_mut().expect("the state is in place");
                            w.advance(&gh, &sbl);
                        }
                        // SAFETY: owner.
                        unsafe { list.collect(sdl.load(Acquire)) };
                    }
                    (list, last_end)
                }));
            }
            let worker = {
                let (gh, sbl, shared) = (gh.clone(), sbl.clone(), shared_state.clone());
                loom::thread::spawn(move || match shared {
                    Some(state) => {
                        for _ in 0..worker_rounds {
                            let mut w = state.lock();
                            w.as_mut().expect("in place").advance(&gh, &sbl);
                        }
                        None
                    }
                    None => {
                        let mut w = worker::GhWorker::new(&gh, 0, catch_up);
                        for _ in 0..worker_rounds {
                            w.advance(&gh, &sbl);
                        }
                        Some(w)
                    }
                })
            };
            let mut flushed: Vec<u8> = Vec::new();
            for _ in 0..flusher_rounds {
                flush_step(&ring, &sbl, &sdl, &mut flushed);
            }
            // The owners are done (join: happens-before).
            let mut owners = Vec::new();
            for j in joins {
                owners.push(j.join().unwrap());
            }
            // Drain what the bounded rounds left, single-threaded.
            if let Some(w) = worker.join().unwrap() {
                *state.lock() = Some(w);
            }
            let mut guard = state.lock();
            let w = guard.as_mut().expect("the worker's state");
            while w.sbl() < total {
                assert!(
                    w.advance(&gh, &sbl),
                    "worker stuck below {total} once all enqueued"
                );
            }
            while (flushed.len() as u64) < total {
                assert!(flush_step(&ring, &sbl, &sdl, &mut flushed));
            }
            for (list, last_end) in owners {
                assert!(last_end <= sdl.load(SeqCst));
                // SAFETY: the owner thread has ended.
                unsafe { list.collect(sdl.load(Acquire)) };
            }
            let entries: usize = threads.iter().map(|t| t.len()).sum();
            assert_eq!(ran.load(Relaxed), entries, "every callback runs once");
        });
    }

    /// The smallest model: two writers, one entry each, the second
    /// straddling a 4-byte range boundary. Preemption bound 2 (153 s in
    /// session 36).
    #[test]
    fn loom_two_threads_one_entry_each() {
        model(16, 2, 2, 2, 2, true, 2, &[&[3], &[5]], false);
    }

    /// Two threads, entries straddling 4-byte ranges: hopping, the
    /// straddling rule and crawling all happen. Preemption bound 1 (bound
    /// 2 ran past 25 minutes without finishing).
    #[test]
    fn loom_two_threads_straddling() {
        model(16, 2, 1, 2, 2, true, 2, &[&[3, 5], &[6]], false);
    }

    /// The paper's Algorithm 1 alone (no catch-up), as above.
    #[test]
    fn loom_two_threads_straddling_without_catch_up() {
        model(16, 2, 1, 2, 2, false, 2, &[&[3, 5], &[6]], false);
    }

    /// One list registered while the worker runs: a catch-up that read
    /// the registry before it must not pass its bytes with its head left
    /// behind (the generation check: without it this fails in 48 s, the
    /// worker meeting a consumed node after the stale head). Preemption
    /// bound 1: 69 s; bound 2 ran past 14 minutes.
    #[test]
    fn loom_catch_up_with_a_list_registered_late() {
        model(16, 3, 1, 2, 1, true, 1, &[&[3], &[2, 2]], false);
    }

    /// A ring smaller than the log: writers wait for the flusher, and the
    /// hopping index's slots are reused across laps.
    #[test]
    fn loom_two_threads_ring_wraps() {
        model_wrapping(8, 2, 1, 0, &[&[3, 4], &[5, 2]]);
    }

    /// A thread retires (its handle dropped once its entry is durable)
    /// while the other goes on through a 4-byte ring of 2-byte ranges, so
    /// its later entries reach lap 1 of the slots the retired thread
    /// counted in: the worker must fold the retired counts exactly once
    /// (twice, or not at all, and a range is never seen full, or seen full
    /// with a byte missing).
    #[test]
    fn loom_ring_wraps_while_a_thread_retires() {
        model_wrapping(4, 1, 1, 1, &[&[3], &[2, 3, 2]]);
    }

    /// A model whose ring is smaller than the log, so writers wait for ring
    /// space and the hopping index's slots are reused lap after lap (the
    /// "laps instead of resets" argument of `hindex.rs`).
    ///
    /// Writers cannot finish until the flusher frees space, so the worker
    /// and the flusher must run until everything is flushed; polling for
    /// that made loom's state space unbounded (every empty poll a branch).
    /// Here every wait *blocks* on a [`Bell`] whose `ready` test is exact:
    /// a writer sleeps until SDL frees its space, the worker until a list
    /// push it has not seen yet, the flusher until SBL passes what it
    /// flushed; each producer rings after publishing. Loom then explores
    /// only wake-ups that follow progress, and a lost wake-up shows as a
    /// deadlock (every thread blocked), which loom reports. Threads below
    /// index `retiring` retire their lists once their entries are durable,
    /// as a dropped `ThreadHandle` does.
    fn model_wrapping(
        ring_bytes: u64,
        hop_shift: u32,
        bound: usize,
        retiring: usize,
        threads: &'static [&'static [u64]],
    ) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(bound);
        }
        builder.max_branches = 1_000_000;
        builder.check(move || {
            let total: u64 = threads.iter().flat_map(|t| t.iter()).sum();
            assert!(ring_bytes < total, "this model is for a ring that wraps");
            let ring = Arc::new(Ring::new(ring_bytes as usize));
            let next_lsn = Arc::new(AtomicU64::new(0));
            let sbl = Arc::new(AtomicU64::new(0));
            let sdl = Arc::new(AtomicU64::new(0));
            let gh = Arc::new(GhShared::new(0, hop_shift, ring_bytes, 1));
            // Nodes pushed so far: the worker's wake-up condition.
            let pushes = Arc::new(AtomicU64::new(0));
            let space_bell = Arc::new(Bell::new());
            let push_bell = Arc::new(Bell::new());
            let sbl_bell = Arc::new(Bell::new());
            let ran = Arc::new(AtomicUsize::new(0));
            let mut joins = Vec::new();
            for (i, sizes) in threads.iter().enumerate() {
                let list = gh.register();
                let (ring, next_lsn, sdl, gh, ran) = (
                    ring.clone(),
                    next_lsn.clone(),
                    sdl.clone(),
                    gh.clone(),
                    ran.clone(),
                );
                let (pushes, space_bell, push_bell) =
                    (pushes.clone(), space_bell.clone(), push_bell.clone());
                joins.push(loom::thread::spawn(move || {
                    let mut last_end = 0;
                    for (j, &len) in sizes.iter().enumerate() {
                        let lsn = next_lsn.fetch_add(len, Relaxed);
                        let has_space = || sdl.load(Acquire) + ring_bytes >= lsn + len;
                        while !has_space() {
                            space_bell.wait_unless(has_space);
                        }
                        // SAFETY: reserved above; SDL showed the space free.
                        unsafe { put_entry(&ring, &list, &gh, &sdl, &ran, (i, j), lsn, len) };
                        pushes.fetch_add(1, Release);
                        push_bell.ring();
                        // SAFETY: owner.
                        unsafe { list.collect(sdl.load(Acquire)) };
                        last_end = lsn + len;
                    }
                    if i < retiring {
                        // As `ThreadHandle`'s drop: durable, then retired.
                        let durable = || sdl.load(Acquire) >= last_end;
                        while !durable() {
                            space_bell.wait_unless(durable);
                        }
                        gh.retire(&list);
                    }
                    list
                }));
            }
            let worker = {
                let (gh, sbl, pushes) = (gh.clone(), sbl.clone(), pushes.clone());
                let (push_bell, sbl_bell) = (push_bell.clone(), sbl_bell.clone());
                loom::thread::spawn(move || {
                    let mut w = worker::GhWorker::new(&gh, 0, true);
                    while w.sbl() < total {
                        // Read before the pass: a push after it wakes us.
                        let seen = pushes.load(Acquire);
                        if w.advance(&gh, &sbl) {
                            sbl_bell.ring();
                        } else {
                            push_bell.wait_unless(|| pushes.load(Acquire) != seen);
                        }
                    }
                })
            };
            let mut flushed: Vec<u8> = Vec::new();
            while (flushed.len() as u64) < total {
                if flush_step(&ring, &sbl, &sdl, &mut flushed) {
                    space_bell.ring();
                } else {
                    let done = flushed.len() as u64;
                    sbl_bell.wait_unless(|| sbl.load(Acquire) > done);
                }
            }
            worker.join().unwrap();
            for j in joins {
                let list = j.join().unwrap();
                // SAFETY: the owner thread has ended.
                unsafe { list.collect(sdl.load(Acquire)) };
            }
            let entries: usize = threads.iter().map(|t| t.len()).sum();
            assert_eq!(ran.load(Relaxed), entries, "every callback runs once");
        });
    }

    /// Session 26's stall in miniature: `a` is preempted between the two
    /// stores of its second push while `b`'s entries fill range 1, and the
    /// worker crawls and then hops with no node of `a` past the boundary.
    /// With the link stored before the tail, the worker crawled onto `a`'s
    /// second node through `next`, the hop put `a`'s head back on the
    /// lagging tail, and `refill` met the crawled node again below SBL
    /// (its assertion; without it the node went back into the heap and
    /// crawling never resumed, and `b`'s last entry, past the hop, was
    /// never reached). That order fails here in 0.3 s; this one passes in
    /// about 70 s (preemption bound 1, two worker rounds).
    #[test]
    fn loom_hop_while_an_owner_is_mid_push() {
        model(16, 2, 1, 2, 0, true, 2, &[&[1, 1], &[2, 4, 1]], false);
    }

    /// Writers that run the worker's pass themselves when its state is
    /// free (`Core::help_worker`), beside the worker thread: the state
    /// changes hands between threads under its lock, and a writer that is
    /// both a list's producer and, for a pass, its consumer must still
    /// keep Spec1–Spec3. Preemption bound 1: 2 s; bound 2
    /// (`LOOM_MAX_PREEMPTIONS=2`): 201 s. With each writer running a
    /// second worker of its own instead of taking the lock, it fails at
    /// once (loom sees the two consumers race).
    #[test]
    fn loom_writers_help_the_worker() {
        model(16, 2, 1, 1, 1, true, 2, &[&[3, 5], &[6]], true);
    }

    /// Three threads with one entry each: the LSN-heap orders three heads.
    /// Five loom threads in all: preemption bound 1 (bound 2 ran past 40
    /// minutes without finishing).
    #[test]
    fn loom_three_threads_one_entry_each() {
        model(16, 2, 1, 1, 1, true, 3, &[&[3], &[4], &[5]], false);
    }
}
