//! The ELEDA worker's half of GRASSHOPPER: SBL-hopping and SBL-crawling
//! (eleda §4.2, Algorithm 1) over the LSN-heap it owns alone.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::{Acquire, Release};

use super::hindex::Tally;
use super::list::{CNode, GList};
use super::GhShared;
use crate::sync::{Arc, AtomicU64};

/// Most nodes one crawl pops before SBL is published, so the flusher is
/// not starved while a long run of contiguous nodes is crawled.
const CRAWL_BATCH_MAX: usize = 4096;

/// How many crawled nodes apart the worker rechecks whether the range it
/// crawls in has filled (see `crawl`).
const FULL_CHECK_EVERY: usize = 64;

/// How many times in a row `catch_up` looks before the worker crawls: a
/// node pushed between its reading the count and the tails fails a look,
/// and another look costs a few lines where a crawl reads every node (at
/// one pinned database thread of 128 B entries, three looks caught up
/// over 99% of the bytes; a first version with one look, comparing the
/// count with the sequencer, 86%: BENCHMARKS.md, session 35). Loom
/// models one look per pass (each look is the same code; three tripled
/// the interleavings to explore).
#[cfg(not(loom))]
const CATCH_UP_TRIES: usize = 3;
#[cfg(loom)]
const CATCH_UP_TRIES: usize = 1;

/// The worker's private state: SBL as it knows it, the lists it tracks and
/// the LSN-heap (§4.1: "exclusively owned by a dedicated ELEDA worker").
pub(crate) struct GhWorker {
    sbl: u64,
    lists: Vec<Arc<GList>>,
    /// Whether list `k`'s head is in the heap.
    in_heap: Vec<bool>,
    /// `(start_lsn, list index)` of each list's first pending node.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// The hopping index's counts as the worker sums them: over `lists`,
    /// plus the folded counts of lists it forgot.
    tally: Tally,
    /// The registry generation `lists` was copied at.
    generation: u64,
    /// Some list in `lists` is retired but was not yet consumed to its end.
    retire_pending: bool,
    /// Ranges below this had their h-lists trimmed.
    trimmed_range: u64,
    /// Bytes SBL advanced by hopping (Figure 20's breakdown).
    pub(crate) hop_bytes: u64,
    /// Bytes SBL advanced by crawling.
    pub(crate) crawl_bytes: u64,
    /// Bytes SBL advanced by catching up with the lists' tails (`catch_up`).
    pub(crate) catch_up_bytes: u64,
    /// Whether `catch_up` runs (`WalOptions::sbl_catch_up`).
    catch_up_enabled: bool,
    /// Scratch: each list's tail as `catch_up` read it.
    tails: Vec<*mut CNode>,
}

// SAFETY: the worker state moves to the worker thread once; the lists it
// holds are `Sync` and the raw pointers it reads through them follow the
// worker's side of the list contract.
unsafe impl Send for GhWorker {}

impl GhWorker {
    /// A worker for `shared`'s log, whose SBL starts at `sbl`; `catch_up`:
    /// whether it may hop inside a range to the lists' tails
    /// (`WalOptions::sbl_catch_up`).
    pub(crate) fn new(shared: &GhShared, sbl: u64, catch_up: bool) -> Self {
        Self {
            sbl,
            lists: Vec::new(),
            in_heap: Vec::new(),
            heap: BinaryHeap::new(),
            tally: Tally::new(&shared.hindex),
            generation: u64::MAX,
            retire_pending: false,
            trimmed_range: 0,
            hop_bytes: 0,
            crawl_bytes: 0,
            catch_up_bytes: 0,
            catch_up_enabled: catch_up,
            tails: Vec::new(),
        }
    }

    /// SBL as the worker knows it.
    pub(crate) fn sbl(&self) -> u64 {
        self.sbl
    }

    /// One round of Algorithm 1: hop while the range SBL is in is full,
    /// otherwise catch up with the lists' tails if every byte below them is
    /// buffered, otherwise crawl; publishes SBL (Release) and returns
    /// whether it moved.
    pub(crate) fn advance(&mut self, shared: &GhShared, sbl_out: &AtomicU64) -> bool {
        let before = self.sbl;
        loop {
            let hopped = self.hop(shared);
            let caught_up = self.catch_up_enabled && self.catch_up(shared);
            let crawled = self.crawl(shared);
            if !hopped && !caught_up && !crawled {
                break;
            }
            if self.sbl - before >= shared.hindex_publish_bytes {
                break;
            }
        }
        let r = shared.hindex.range_of(self.sbl);
        if r > self.trimmed_range {
            self.trimmed_range = r;
            for list in &self.lists {
                // SAFETY: worker; SBL ≥ range_start(r).
                unsafe { list.trim_h_list(r) };
            }
        }
        if self.sbl == before {
            return false;
        }
        // Spec3's producer side: SBL only grows, and only over bytes whose
        // nodes were consumed above. Release: the flusher's Acquire load
        // sees the ring bytes the owners published to us.
        sbl_out.store(self.sbl, Release);
        true
    }

    /// SBL-hopping (Algorithm 1 lines 1–13).
    fn hop(&mut self, shared: &GhShared) -> bool {
        let hindex = &shared.hindex;
        // Only the lists in `lists` are summed: pick up the new ones first.
        self.refresh(shared);
        let mut high = hindex.range_of(self.sbl);
        if !self.tally.is_full(hindex, &self.lists, high) {
            return false;
        }
        while self.tally.is_full(hindex, &self.lists, high) {
            high += 1;
        }
        let boundary = hindex.range_start(high);
        // Every list with bytes in the full ranges is in `lists` (only
        // their counts were summed) or folded (all its bytes below SBL).
        // A list registered since the refresh has none there nor below
        // SBL: `refill` moves its head once a later refresh adds it.
        let mut sbl = boundary;
        for list in &self.lists {
            // Read the tail before the h-list: every node before the tail
            // had its h-node registered before the tail was published. The
            // tail is at or after the head (Spec1, list docs), and alive.
            let tail = list.tail();
            // SAFETY: worker; SBL is about to reach `boundary`.
            let first = unsafe { list.trim_h_list(high) };
            // SAFETY: the tail and every node ending past SBL are alive.
            let first = first.or_else(|| (unsafe { (*tail).end } > boundary).then_some(tail));
            let head = first.unwrap_or(tail);
            // SAFETY: worker; `head` is at or after the old head.
            unsafe { list.set_head(head) };
            if let Some(node) = first {
                // SAFETY: alive (ends past SBL).
                let node = unsafe { &*node };
                node.check_alive();
                if node.start < boundary {
                    // The straddling log of §4.2.1: never flushed in part.
                    debug_assert_eq!(sbl, boundary, "two nodes straddle one boundary");
                    sbl = node.end;
                }
            }
        }
        debug_assert!(sbl > self.sbl);
        self.hop_bytes += sbl - self.sbl;
        self.sbl = sbl;
        // Line 13: rebuild the LSN-heap from the new heads.
        self.heap.clear();
        self.in_heap.iter_mut().for_each(|b| *b = false);
        true
    }

    /// SBL-catching-up, beyond the paper: hops inside the range SBL is in
    /// to the end of the newest node, when every byte below it is buffered.
    ///
    /// Algorithm 1 hops only over full ranges and crawls the range the
    /// newest entry is in node by node. With the paper's 4 MiB hops a
    /// range takes milliseconds to fill at one database thread while the
    /// worker passes every few tens of microseconds, so it crawls nearly
    /// every byte, reading every node, and each node line read costs its
    /// owner a transfer back when it links the next node or runs the
    /// callback (BENCHMARKS.md, session 33: the one-thread gap to the
    /// mutex log). Here the worker reads the range's count `c` (Acquire),
    /// then every list's tail, and `m`, the highest end among them. Each
    /// counted byte's node was published as its list's tail before it was
    /// counted (§4.1.2's steps 1 and 3), so every counted byte lies below
    /// `m`; if `range_start + c == m`, the counted bytes fill `[range_start,
    /// m)`, i.e. every byte there is buffered (bytes below the range were
    /// passed already). SBL then moves to `m`, the end of an entry, and each
    /// list's head to the tail read: a node pushed after that read was not
    /// counted, so it starts at or past `m`. Entries reserved and still
    /// being copied above every tail (at one thread, the one in flight) do
    /// not stop it; one below some tail leaves a hole and the check fails.
    /// Lines read per pass: two per list (its tail pointer and node)
    /// instead of every node.
    ///
    /// A list registered after `refresh` must not hold bytes below `m`, or
    /// its head would not be moved (and gc would then free nodes under the
    /// worker's stale head). Its bytes are not in the count (only the
    /// lists in `lists` are summed, `hindex.rs`), so a count that fills
    /// `[range_start, m)` leaves no room for them. With one shared count
    /// (sessions up to 58) they were in it, and the generation check
    /// below was what abandoned the catch-up (the loom model
    /// `loom_catch_up_with_a_list_registered_late` failed without it); it
    /// stays as a second guard.
    fn catch_up(&mut self, shared: &GhShared) -> bool {
        (0..CATCH_UP_TRIES).any(|_| self.try_catch_up(shared))
    }

    /// One look of [`GhWorker::catch_up`].
    fn try_catch_up(&mut self, shared: &GhShared) -> bool {
        let hindex = &shared.hindex;
        let range = hindex.range_of(self.sbl);
        self.refresh(shared);
        let counted = self.tally.buffered(hindex, &self.lists, range);
        if shared.generation.load(Acquire) != self.generation {
            return false;
        }
        self.tails.clear();
        let mut newest_end = self.sbl;
        for list in &self.lists {
            // Acquire (in `tail`): the node's fields are visible.
            let tail = list.tail();
            // SAFETY: the tail was read after every head move of this
            // worker, so it is at or after the head (Spec1), and alive: gc
            // frees a node only once its successor ends at or below SDL,
            // which is at most the SBL published, and every node after the
            // head ends past that, as does the head's successor.
            let node = unsafe { &*tail };
            node.check_alive();
            newest_end = newest_end.max(node.end);
            self.tails.push(tail);
        }
        if newest_end == self.sbl || hindex.range_start(range) + counted != newest_end {
            return false;
        }
        for (list, &tail) in self.lists.iter().zip(&self.tails) {
            // SAFETY: worker; the tail is at or after the head, every node
            // up to it ends at or below the new SBL, and every node after it
            // starts at or past it (see above).
            unsafe { list.set_head(tail) };
        }
        self.catch_up_bytes += newest_end - self.sbl;
        self.sbl = newest_end;
        // As after a hop (line 13): the heap is rebuilt from the new heads.
        self.heap.clear();
        self.in_heap.iter_mut().for_each(|b| *b = false);
        true
    }

    /// SBL-crawling (Algorithm 1 lines 14–23).
    fn crawl(&mut self, shared: &GhShared) -> bool {
        self.refresh(shared);
        self.refill();
        let hindex = &shared.hindex;
        let start = self.sbl;
        let mut checked: Option<u64> = None;
        for step in 0..CRAWL_BATCH_MAX {
            // Line 16: crawl while the top is contiguous and the range is
            // not full (a full range is hopped over instead). The range's
            // counts are read when the crawl enters a range and then every
            // `FULL_CHECK_EVERY` nodes, not before every node: the owners
            // add to their counts for every entry (a shared `lock add`
            // until session 59), and a worker reading them per node
            // bounced their cache lines once per entry
            // (at 1 thread, 38% of `push`'s cycles). Crawling on through a
            // range that filled meanwhile yields the same SBL, only by
            // smaller steps until the next check.
            let range = hindex.range_of(self.sbl);
            if checked != Some(range) || step % FULL_CHECK_EVERY == 0 {
                if self.tally.is_full(hindex, &self.lists, range) {
                    break;
                }
                checked = Some(range);
            }
            let Some(&Reverse((top_start, k))) = self.heap.peek() else {
                break;
            };
            if top_start != self.sbl {
                break;
            }
            self.heap.pop();
            let list = &self.lists[k];
            // SAFETY: worker; the head in the heap is a pending node, alive.
            let node: &CNode = unsafe { &*list.head() };
            node.check_alive();
            // Checked in release builds too, as are `refill`'s checks: a
            // broken invariant fails the log (`Core::run_guarded`) rather
            // than stalling it silently or passing unbuffered bytes (one
            // compare per node; session 27's stall was such a break).
            assert_eq!(node.start, top_start, "a heap entry is not its list's head");
            self.sbl = node.end;
            let next = node.next.load(Acquire);
            if next.is_null() {
                // Nothing linked after it yet: the head stays.
                self.in_heap[k] = false;
            } else {
                // SAFETY: worker; `next` follows the head.
                unsafe { list.set_head(next) };
                // SAFETY: published by the owner, pending, alive.
                let next = unsafe { &*next };
                next.check_alive();
                self.heap.push(Reverse((next.start, k)));
            }
        }
        self.crawl_bytes += self.sbl - start;
        self.sbl > start
    }

    /// Line 23: puts the first pending node of every list not in the heap
    /// into it.
    fn refill(&mut self) {
        for (k, list) in self.lists.iter().enumerate() {
            if self.in_heap[k] {
                continue;
            }
            // SAFETY: worker; the head is alive (see list docs).
            let mut node = unsafe { &*list.head() };
            node.check_alive();
            if node.end <= self.sbl {
                let next = node.next.load(Acquire);
                if next.is_null() {
                    continue;
                }
                // SAFETY: worker; `next` follows the head.
                unsafe { list.set_head(next) };
                // SAFETY: published by the owner; alive because not consumed.
                node = unsafe { &*next };
                node.check_alive();
                assert!(node.end > self.sbl, "a consumed node after the head");
            }
            // §4.2.1: SBL only ever lands on an entry's end, so no pending
            // entry straddles it (one that did could never be crawled).
            assert!(node.start >= self.sbl, "SBL inside a pending entry");
            self.heap.push(Reverse((node.start, k)));
            self.in_heap[k] = true;
        }
    }

    /// Picks up lists registered since the last look and forgets retired
    /// ones whose every node is consumed.
    fn refresh(&mut self, shared: &GhShared) {
        if shared.generation.load(Acquire) == self.generation && !self.retire_pending {
            return;
        }
        let mut registry = shared.registry.lock();
        self.generation = shared.generation.load(Acquire);
        let sbl = self.sbl;
        let tally = &mut self.tally;
        registry.retain(|list| {
            // Acquire: the owner's every count is visible (it retires after
            // its last push).
            if !list.retired.load(Acquire) {
                return true;
            }
            // SAFETY: worker; the head is alive.
            let head = unsafe { &*list.head() };
            let next = head.next.load(Acquire);
            let done = head.end <= sbl && next.is_null();
            if done {
                // Its final counts, folded as `lists` stops holding it
                // (below): summed once, never twice (hindex.rs).
                tally.fold(list.counts());
            }
            !done
        });
        self.retire_pending = registry.iter().any(|l| l.retired.load(Acquire));
        self.lists = registry.clone();
        drop(registry);
        self.in_heap = vec![false; self.lists.len()];
        self.heap.clear();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Pushes `[start, end)` on `list` as its owner would (ring bytes are
    /// irrelevant to SBL tracking).
    fn push(shared: &GhShared, list: &GList, start: u64, end: u64) {
        // SAFETY: the test thread owns every list.
        unsafe { list.push(start, end, None, &shared.hindex) };
    }

    /// A log with 1 KiB hops over a 16 KiB ring, two registered lists, the
    /// published SBL and a worker (`catch_up` as given), all at LSN 0.
    fn lists_with(catch_up: bool) -> (GhShared, Arc<GList>, Arc<GList>, AtomicU64, GhWorker) {
        let shared = GhShared::new(0, 10, 16 << 10, u64::MAX);
        let a = shared.register();
        let b = shared.register();
        let worker = GhWorker::new(&shared, 0, catch_up);
        (shared, a, b, AtomicU64::new(0), worker)
    }

    /// Both workers: Algorithm 1 alone, and with the catch-up.
    const MODES: [bool; 2] = [false, true];

    #[test]
    fn hops_over_full_ranges_and_honours_the_straddler() {
        for catch_up in MODES {
            let (shared, a, b, sbl, mut w) = lists_with(catch_up);
            // Ranges 0 and 1 full; `b`'s node straddles 2048 up to 2100.
            push(&shared, &a, 0, 600);
            push(&shared, &b, 600, 1500);
            push(&shared, &a, 1500, 2000);
            push(&shared, &b, 2000, 2100);
            push(&shared, &a, 2100, 2200);
            assert!(w.advance(&shared, &sbl));
            assert_eq!(sbl.load(Acquire), 2200);
            assert_eq!(w.hop_bytes, 2100, "hopped to the straddler's end");
            // The rest: every reserved byte buffered, so caught up with.
            let rest = if catch_up { (0, 100) } else { (100, 0) };
            assert_eq!((w.crawl_bytes, w.catch_up_bytes), rest);
        }
    }

    #[test]
    fn crawling_stops_at_a_hole_and_resumes() {
        for catch_up in MODES {
            let (shared, a, b, sbl, mut w) = lists_with(catch_up);
            push(&shared, &a, 0, 100);
            push(&shared, &a, 200, 300); // [100, 200) reserved by `b`, not copied
            assert!(w.advance(&shared, &sbl));
            assert_eq!(sbl.load(Acquire), 100);
            assert!(!w.advance(&shared, &sbl), "a hole stops SBL");
            push(&shared, &b, 100, 200);
            assert!(w.advance(&shared, &sbl));
            assert_eq!(sbl.load(Acquire), 300);
            assert_eq!(w.hop_bytes, 0);
            let (crawl, caught) = if catch_up { (100, 200) } else { (300, 0) };
            assert_eq!((w.crawl_bytes, w.catch_up_bytes), (crawl, caught));
        }
    }

    /// The catch-up moves each head to its list's last node without
    /// reading the others, and SBL to the sequencer; gc then frees every
    /// node but the head under it (miri checks the accesses), and crawling
    /// and hopping go on from there.
    #[test]
    fn catching_up_moves_heads_to_the_tails() {
        let (shared, a, b, sbl, mut w) = lists_with(true);
        let mut at = 0;
        for i in 0..20 {
            let list = if i % 3 == 0 { &b } else { &a };
            push(&shared, list, at, at + 30);
            at += 30;
        }
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 600);
        assert_eq!((w.catch_up_bytes, w.crawl_bytes, w.hop_bytes), (600, 0, 0));
        for list in [&a, &b] {
            // SAFETY: the test thread is the worker and both owners.
            unsafe {
                assert_eq!(list.head(), list.tail(), "the head is the last node");
                list.collect(600);
            }
        }
        // A hole: crawling up to it, then catching up once it is filled.
        push(&shared, &a, 600, 650);
        push(&shared, &a, 700, 1500); // fills range 0, into 1
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 650);
        push(&shared, &b, 650, 700);
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 1500);
        assert_eq!(w.crawl_bytes, 50);
        for list in [&a, &b] {
            // SAFETY: as above.
            unsafe { list.collect(1500) };
        }
        // Later pushes are crawled or caught up with from the moved heads.
        push(&shared, &b, 1500, 2500);
        push(&shared, &a, 2500, 2600);
        while w.advance(&shared, &sbl) {}
        assert_eq!(sbl.load(Acquire), 2600);
    }

    /// An entry reserved below a tail but not yet buffered stops the
    /// catch-up: SBL stops at the hole it leaves, as in Algorithm 1. One
    /// reserved above every tail does not.
    #[test]
    fn catching_up_stops_below_a_hole_not_above_it() {
        let (shared, a, b, sbl, mut w) = lists_with(true);
        push(&shared, &a, 0, 100);
        push(&shared, &a, 150, 200); // `b` reserved [100, 150)
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 100);
        assert_eq!((w.crawl_bytes, w.catch_up_bytes), (100, 0));
        assert!(!w.advance(&shared, &sbl));
        push(&shared, &b, 100, 150);
        // [200, 250) reserved by `b`, in flight above every tail.
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 200);
        assert_eq!((w.crawl_bytes, w.catch_up_bytes), (100, 100));
        push(&shared, &b, 200, 250);
        assert!(w.advance(&shared, &sbl));
        assert_eq!((w.crawl_bytes, w.catch_up_bytes), (100, 150));
    }

    /// A list registered after the worker last looked, whose bytes the
    /// catch-up passes: its head still moves (the catch-up refreshes).
    #[test]
    fn catching_up_over_a_list_registered_late() {
        let (shared, a, _b, sbl, mut w) = lists_with(true);
        push(&shared, &a, 0, 100);
        assert!(w.advance(&shared, &sbl));
        let c = shared.register();
        push(&shared, &c, 100, 200);
        push(&shared, &c, 200, 300);
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 300);
        // SAFETY: the test thread is the worker and the owners.
        unsafe {
            assert_eq!(c.head(), c.tail());
            c.collect(300);
        }
        push(&shared, &c, 300, 400);
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 400);
    }

    /// The stall of session 26: `a` is preempted in the middle of pushing
    /// `[100, 200)` while `b` fills range 1 and SBL-hopping runs. The
    /// worker must neither crawl onto a node the hop then steps back from
    /// nor leave a consumed node in its heap: SBL reaches the end once
    /// everything is pushed. (With the tail stored after the link, the
    /// worker crawled onto `a`'s new node through `next`, the hop put `a`'s
    /// head back on the lagging tail, and the node was enqueued again
    /// below SBL; SBL then never moved again.)
    #[test]
    fn an_owner_preempted_mid_push_does_not_stall_the_worker() {
        for catch_up in MODES {
            preempted_mid_push(catch_up);
        }
    }

    fn preempted_mid_push(catch_up: bool) {
        let (shared, a, b, sbl, mut w) = lists_with(catch_up);
        push(&shared, &a, 0, 100);
        assert!(w.advance(&shared, &sbl));
        assert_eq!(w.sbl(), 100);
        // SAFETY: the test thread owns both lists; the pause touches `b`
        // and the worker only.
        unsafe {
            a.push_pausing(100, 200, None, &shared.hindex, || {
                push(&shared, &b, 200, 1024);
                push(&shared, &b, 1024, 2100); // range 1 full, a straddler
                w.advance(&shared, &sbl);
                assert!(
                    w.sbl() <= 100,
                    "SBL passed [100, 200) before its node was pushed: {}",
                    w.sbl()
                );
            })
        };
        push(&shared, &b, 2100, 2200);
        while w.advance(&shared, &sbl) {}
        assert_eq!(sbl.load(Acquire), 2200, "the worker stalled");
    }

    #[test]
    fn hop_with_a_thread_that_reached_no_new_range() {
        for catch_up in MODES {
            reached_no_new_range(catch_up);
        }
    }

    fn reached_no_new_range(catch_up: bool) {
        let (shared, a, b, sbl, mut w) = lists_with(catch_up);
        push(&shared, &b, 0, 24); // b's only node, far below the boundary
        push(&shared, &a, 24, 3000); // a node over three ranges
        push(&shared, &a, 3072, 3100); // after a hole at [3000, 3072)
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 3000);
        push(&shared, &b, 3000, 3072);
        assert!(w.advance(&shared, &sbl));
        assert_eq!(sbl.load(Acquire), 3100);
    }
}
