//! The per-thread grasshopper list (eleda §4.1, Figure 4): a crawling list
//! (c-list) of pending LSN nodes `⟨start_lsn, end_lsn, callback⟩` and a
//! hopping list (h-list) pointing into it, shared by one database thread
//! and the ELEDA worker under the single-writer rules of Table 2:
//!
//! | field        | database thread | worker |
//! |--------------|-----------------|--------|
//! | c/h `tail`   | W               | R      |
//! | `gc`         | W               | –      |
//! | c/h `head`   | –               | W      |
//!
//! Both lists keep their consumed end as a *dummy* node (as in a
//! Michael–Scott queue): `head` points at the last node the worker has
//! consumed or at the first pending node. It moves forward only: along
//! `next` pointers the owner published (crawling, a node without a `next`
//! stays), or, when SBL-hopping, to a node the h-list names or to the
//! tail. Spec1 (the head never passes the tail) therefore needs the owner
//! to publish a node as the tail *before* linking it after its
//! predecessor: then every node the worker can reach along `next` is at
//! or before any tail it loads afterwards. The other order (link, then
//! tail) let a database thread preempted between its two stores leave the
//! tail one node behind a node the worker had already crawled; a hop then
//! put the head back on that old tail, the worker enqueued the crawled
//! node again below SBL, and crawling stopped for ever (the stall of
//! session 26, caught by tracing the worker in session 27); the old tail
//! could even have been freed by then.
//!
//! `gc` points at the last node whose callback has run; the owner moves
//! it to `gc.next` only once `gc.next.end ≤ SDL` (Spec2), and
//! frees the node it leaves. That node is one the worker no longer
//! touches: `gc.next.end ≤ SDL ≤ SBL` means the worker consumed `gc.next`,
//! i.e. moved its head to `gc.next` or past it, before publishing the SBL
//! the flusher turned into that SDL (Release/Acquire all the way).
//!
//! An h-list node for range `R` points at the thread's first c-node whose
//! bytes reach range `R` (its `end - 1` lies in `R`), registered only when
//! no earlier node of the thread reached `R`. Hence the first h-node with
//! `range_hi ≥ r` points at the thread's first node ending past the start
//! of range `r`: exactly the node SBL-hopping must place the c-list head
//! at, straddling or not (§4.2.1).

use std::ptr;

use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::hindex::{HIndex, ThreadCounts};
#[cfg(not(loom))]
use super::hslab::HNodeSlab;
#[cfg(not(loom))]
use super::slab::NodeSlab;
use crate::error::WalError;
use crate::lsn::LsnRange;
use crate::sync::{AtomicBool, AtomicPtr, UnsafeCell};

/// What a committing transaction hands the log: called with the entry's
/// LSNs once they are durable, or with the error that stopped the log.
pub type Callback = Box<dyn FnOnce(Result<LsnRange, WalError>) + Send>;

/// A pending LSN node, on a cache line of its own (see `slab.rs`).
#[repr(align(64))]
pub(crate) struct CNode {
    /// Immutable once published.
    pub(crate) start: u64,
    /// Immutable once published.
    pub(crate) end: u64,
    /// Written once by the owner (Release), read by the worker and owner.
    pub(crate) next: AtomicPtr<CNode>,
    /// Touched only by the owning database thread.
    callback: UnsafeCell<Option<Callback>>,
    /// Under loom, "freeing" a node writes this instead, so that a worker
    /// access racing with (or following) the free is caught.
    #[cfg(loom)]
    freed: UnsafeCell<bool>,
}

impl CNode {
    #[inline(always)]
    pub(crate) fn new(start: u64, end: u64, callback: Option<Callback>) -> CNode {
        CNode {
            start,
            end,
            next: AtomicPtr::new(ptr::null_mut()),
            callback: UnsafeCell::new(callback),
            #[cfg(loom)]
            freed: UnsafeCell::new(false),
        }
    }

    /// Asserts (under loom) that the node has not been freed.
    #[inline]
    pub(crate) fn check_alive(&self) {
        #[cfg(loom)]
        // SAFETY: loom checks this read against the owner's free.
        self.freed
            .with(|f| assert!(!unsafe { *f }, "worker touched a freed node"));
    }
}

/// A hopping list node.
pub(crate) struct HNode {
    /// The highest range the pointed-to c-node reaches.
    pub(crate) range_hi: u64,
    /// The thread's first c-node reaching `range_hi`.
    pub(crate) cnode: *mut CNode,
    /// Written once by the owner (Release).
    pub(crate) next: AtomicPtr<HNode>,
}

impl HNode {
    /// An unlinked h-node for `cnode`, the first of its thread to reach
    /// range `range_hi`.
    pub(crate) fn new(range_hi: u64, cnode: *mut CNode) -> Self {
        HNode {
            range_hi,
            cnode,
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

/// One database thread's grasshopper list.
pub(crate) struct GList {
    /// c-list tail (Table 2: database thread W, worker R).
    tail: AtomicPtr<CNode>,
    /// Owner only: the last node whose callback ran.
    gc: UnsafeCell<*mut CNode>,
    /// Owner only: h-list tail.
    h_tail: UnsafeCell<*mut HNode>,
    /// Owner only: the lowest range no node of this thread has reached.
    h_next_range: UnsafeCell<u64>,
    /// Worker only: c-list head. On a cache line of its own, as is
    /// `h_head`: the worker writes them as it consumes nodes, and sharing a
    /// line with the owner's fields made every push miss on it (false
    /// sharing, measured: a third of `push`'s cycles at 1 thread).
    head: CachePadded<UnsafeCell<*mut CNode>>,
    /// Worker only: h-list head (a consumed dummy).
    h_head: CachePadded<UnsafeCell<*mut HNode>>,
    /// Set by the owner when its handle is dropped and everything it
    /// appended is durable; the worker then forgets the list.
    pub(crate) retired: AtomicBool,
    /// This thread's hopping-index counts (step 3 of §4.1.2; see
    /// `hindex.rs` for why per thread).
    counts: ThreadCounts,
    /// Owner only: where c-nodes are allocated (loom models allocate each
    /// on the heap, so that a freed node's memory is never reused).
    #[cfg(not(loom))]
    slab: NodeSlab,
    /// Where h-nodes are allocated (by the owner) and freed (by the
    /// worker); loom models allocate each on the heap.
    #[cfg(not(loom))]
    h_slab: HNodeSlab,
    /// Under loom, nodes "freed" by gc, really freed with the list.
    #[cfg(loom)]
    graveyard: UnsafeCell<Vec<*mut CNode>>,
}

// SAFETY: the raw pointers are owned by the list and accessed under the
// single-writer rules above; the callbacks are `Send`.
unsafe impl Send for GList {}
// SAFETY: as above: every field is either atomic or touched by one thread
// only, which the unsafe methods' contracts pin down.
unsafe impl Sync for GList {}

impl GList {
    /// An empty list whose dummy node ends at `start`, counting its bytes
    /// in `hindex`'s ranges.
    pub(crate) fn new(start: u64, hindex: &HIndex) -> Self {
        #[cfg(not(loom))]
        let slab = NodeSlab::new();
        #[cfg(not(loom))]
        let c = slab.alloc(CNode::new(start, start, None));
        #[cfg(loom)]
        let c = Box::into_raw(Box::new(CNode::new(start, start, None)));
        #[cfg(not(loom))]
        let h_slab = HNodeSlab::new();
        let dummy = HNode::new(0, c);
        // SAFETY: the list is not shared yet: this thread is its owner.
        #[cfg(not(loom))]
        let h = unsafe { h_slab.alloc(dummy) };
        #[cfg(loom)]
        let h = Box::into_raw(Box::new(dummy));
        GList {
            tail: AtomicPtr::new(c),
            gc: UnsafeCell::new(c),
            h_tail: UnsafeCell::new(h),
            h_next_range: UnsafeCell::new(0),
            head: CachePadded::new(UnsafeCell::new(c)),
            h_head: CachePadded::new(UnsafeCell::new(h)),
            retired: AtomicBool::new(false),
            counts: ThreadCounts::new(hindex),
            #[cfg(not(loom))]
            slab,
            #[cfg(not(loom))]
            h_slab,
            #[cfg(loom)]
            graveyard: UnsafeCell::new(Vec::new()),
        }
    }

    /// A new h-node (owner only): from the h-slab, or under loom the heap.
    fn alloc_hnode(&self, range_hi: u64, cnode: *mut CNode) -> *mut HNode {
        let node = HNode::new(range_hi, cnode);
        #[cfg(not(loom))]
        // SAFETY: owner only, as every caller of this method.
        return unsafe { self.h_slab.alloc(node) };
        #[cfg(loom)]
        return Box::into_raw(Box::new(node));
    }

    /// Frees an h-node.
    ///
    /// # Safety
    ///
    /// The worker (or `Drop`) only; nobody touches `node` afterwards, and
    /// h-nodes are freed in the order they were allocated (from the
    /// h-list's head).
    unsafe fn free_hnode(&self, node: *mut HNode) {
        #[cfg(not(loom))]
        // SAFETY: forwarded.
        unsafe {
            self.h_slab.free(node)
        };
        #[cfg(loom)]
        // SAFETY: a heap node nobody touches any more (the contract).
        drop(unsafe { Box::from_raw(node) });
    }

    /// A new c-node (owner only): from the slab, or under loom the heap.
    #[inline(always)]
    fn alloc_cnode(&self, start: u64, end: u64, callback: Option<Callback>) -> *mut CNode {
        let node = CNode::new(start, end, callback);
        #[cfg(not(loom))]
        return self.slab.alloc(node);
        #[cfg(loom)]
        return Box::into_raw(Box::new(node));
    }

    // ---- the owning database thread -------------------------------------

    /// Enqueues the node for the entry just copied to `[start, end)`, in the
    /// order §4.1.2 prescribes: c-list (1), h-list (2), hopping index (3).
    ///
    /// # Safety
    ///
    /// Only the list's owner calls this, never concurrently with its other
    /// owner methods; `start ≥` the previous node's `end`; the entry's bytes
    /// are in the ring.
    pub(crate) unsafe fn push(
        &self,
        start: u64,
        end: u64,
        callback: Option<Callback>,
        hindex: &HIndex,
    ) {
        // SAFETY: forwarded.
        unsafe { self.push_pausing(start, end, callback, hindex, || ()) }
    }

    /// [`GList::push`], calling `pause` between the two stores of step 1:
    /// where an owner preempted mid-push leaves the list (tests run the
    /// worker there).
    ///
    /// # Safety
    ///
    /// As [`GList::push`]; `pause` touches no owner method of this list.
    #[inline(always)]
    pub(crate) unsafe fn push_pausing(
        &self,
        start: u64,
        end: u64,
        callback: Option<Callback>,
        hindex: &HIndex,
        pause: impl FnOnce(),
    ) {
        debug_assert!(start < end);
        let node = self.alloc_cnode(start, end, callback);
        // Step 1: the tail first, then the link (see the module docs: the
        // tail must never lag a node the worker can reach along `next`).
        // Release publishes the node's fields and the ring bytes.
        let prev = self.tail.load(Relaxed);
        self.tail.store(node, Release);
        pause();
        // SAFETY: `prev` is alive: gc frees only a node whose `next` is
        // set, and only this thread sets it.
        unsafe { (*prev).next.store(node, Release) };
        // Step 2.
        let reach = hindex.range_of(end - 1);
        // SAFETY: owner-only fields.
        unsafe {
            self.h_next_range.with_mut(|next_range| {
                if reach >= *next_range {
                    *next_range = reach + 1;
                    let h = self.alloc_hnode(reach, node);
                    self.h_tail.with_mut(|h_tail| {
                        (**h_tail).next.store(h, Release);
                        *h_tail = h;
                    });
                }
            });
        }
        // Step 3.
        self.counts.add(hindex, start, end - start);
    }

    /// §4.4: moves `gc` over every node durable at `sdl`, running its
    /// callback, and frees the nodes left behind. Returns how many
    /// callbacks ran.
    ///
    /// # Safety
    ///
    /// Owner only; `sdl` was loaded from SDL with Acquire.
    pub(crate) unsafe fn collect(&self, sdl: u64) -> usize {
        let mut ran = 0;
        loop {
            // SAFETY: owner-only field; the gc node is alive (only this
            // method frees, and never the node it leaves gc at).
            let gc = self.gc.with(|p| unsafe { *p });
            // SAFETY: as above.
            let next = unsafe { (*gc).next.load(Acquire) };
            // Spec2: gc stays while its successor is not durable.
            // SAFETY: a published node is alive until gc passes it.
            if next.is_null() || unsafe { (*next).end } > sdl {
                return ran;
            }
            // SAFETY: owner-only field of a live node.
            let (range, callback) = unsafe {
                let range = LsnRange {
                    start: (*next).start,
                    end: (*next).end,
                };
                (range, (*next).callback.with_mut(|c| (*c).take()))
            };
            self.gc.with_mut(|p| {
                // SAFETY: owner-only field.
                unsafe { *p = next }
            });
            // SAFETY: the worker no longer touches `gc` (module docs).
            unsafe { self.free_cnode(gc) };
            if let Some(callback) = callback {
                callback(Ok(range));
                ran += 1;
            }
        }
    }

    /// After the log failed or stopped: runs every callback not yet run
    /// with `error`. Frees nothing (the worker may still hold nodes).
    ///
    /// # Safety
    ///
    /// Owner only.
    pub(crate) unsafe fn fail_pending(&self, error: &WalError) -> usize {
        let mut ran = 0;
        // SAFETY: owner-only field.
        let mut node = self.gc.with(|p| unsafe { *p });
        loop {
            // SAFETY: nodes after gc are alive (only gc frees).
            node = unsafe { (*node).next.load(Acquire) };
            if node.is_null() {
                return ran;
            }
            // SAFETY: owner-only field of a live node.
            let callback = unsafe { (*node).callback.with_mut(|c| (*c).take()) };
            if let Some(callback) = callback {
                callback(Err(error.clone()));
                ran += 1;
            }
        }
    }

    /// # Safety
    ///
    /// `node` is unreachable for every other thread.
    unsafe fn free_cnode(&self, node: *mut CNode) {
        #[cfg(not(loom))]
        // SAFETY: forwarded; the list frees its nodes in push order (gc
        // walks the c-list).
        unsafe {
            self.slab.free(node)
        };
        #[cfg(loom)]
        // SAFETY: forwarded; the graveyard is owner-only.
        unsafe {
            (*node).freed.with_mut(|f| *f = true);
            self.graveyard.with_mut(|g| (*g).push(node));
        }
    }

    // ---- the ELEDA worker -------------------------------------------------

    /// The list's hopping-index counts (the worker reads them; the owner
    /// adds through `push`).
    pub(crate) fn counts(&self) -> &ThreadCounts {
        &self.counts
    }

    /// The c-list tail (Table 2: worker R). Acquire: the node's fields and
    /// the h-list nodes its owner registered before it are visible.
    pub(crate) fn tail(&self) -> *mut CNode {
        self.tail.load(Acquire)
    }

    /// The worker's c-list head.
    ///
    /// # Safety
    ///
    /// Worker only.
    pub(crate) unsafe fn head(&self) -> *mut CNode {
        // SAFETY: worker-only field.
        self.head.with(|p| unsafe { *p })
    }

    /// Moves the worker's c-list head.
    ///
    /// # Safety
    ///
    /// Worker only; `node` is this list's, at or after the current head.
    pub(crate) unsafe fn set_head(&self, node: *mut CNode) {
        // SAFETY: worker-only field.
        self.head.with_mut(|p| unsafe { *p = node });
    }

    /// Frees the h-nodes that cannot matter any more (their c-nodes end
    /// before range `r`) and returns the c-node of the first one reaching
    /// range `r` or beyond, if registered: the thread's first node ending
    /// past `range_start(r)`.
    ///
    /// # Safety
    ///
    /// Worker only; SBL ≥ `range_start(r)` or the worker is about to hop
    /// there (so the nodes skipped end at or below it).
    pub(crate) unsafe fn trim_h_list(&self, r: u64) -> Option<*mut CNode> {
        self.h_head.with_mut(|h_head| {
            // SAFETY: the h-list from h_head on is alive; only the worker
            // frees h-nodes, and never the tail (which has no `next`).
            unsafe {
                loop {
                    let next = (**h_head).next.load(Acquire);
                    if next.is_null() {
                        return None;
                    }
                    if (*next).range_hi >= r {
                        return Some((*next).cnode);
                    }
                    self.free_hnode(*h_head);
                    *h_head = next;
                }
            }
        })
    }
}

impl Drop for GList {
    fn drop(&mut self) {
        // Exclusive access: free both chains from their oldest live node.
        // SAFETY: `&mut self`; every node from gc (resp. h_head) on is
        // alive and owned by the list.
        unsafe {
            let mut c = self.gc.with(|p| *p);
            while !c.is_null() {
                let next = (*c).next.load(Relaxed);
                // In push order, from gc on; under loom into the graveyard
                // freed below.
                self.free_cnode(c);
                c = next;
            }
            let mut h = self.h_head.with(|p| *p);
            while !h.is_null() {
                let next = (*h).next.load(Relaxed);
                // In allocation order, from the oldest live one.
                self.free_hnode(h);
                h = next;
            }
            #[cfg(loom)]
            self.graveyard.with_mut(|g| {
                for node in (*g).drain(..) {
                    drop(Box::from_raw(node));
                }
            });
        }
    }
}
