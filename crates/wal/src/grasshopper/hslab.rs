//! Where a grasshopper list's h-nodes live: a ring of cache-line slots the
//! owning database thread fills in order and the ELEDA worker empties in
//! the same order, with the heap as the overflow.
//!
//! Why not one heap allocation per h-node (the first version): the owner
//! allocates an h-node for each hopping range its entries reach, and the
//! worker frees it once SBL-hopping has passed that range
//! (`GList::trim_h_list`), so every range and thread cost an allocation
//! on one thread and a free on the other (the allocator's cross-thread
//! free list). With the paper's 4 MiB hops that is rare; with 8 KiB hops
//! and 4 KiB records it was about one h-node per two entries and ~4% of a
//! transaction (BENCHMARKS.md, session 33). Here the owner writes slots in
//! order; the worker frees h-nodes in the order they were allocated (it
//! trims the h-list from its head, and the owner appends at its tail), so
//! it only counts the slots it gives back. The owner reloads that count
//! only when its last view of it says every slot is taken, so the count's
//! line crosses cores about once per lap, not once per h-node.

use std::cell::Cell;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crossbeam_utils::CachePadded;

use super::list::HNode;
use super::slots::SlotRing;

/// Slots per list: 256 lines, 16 KiB. A slot is pending from the range its
/// owner reaches until SBL-hopping passes it, a few ranges at most.
pub(crate) const H_SLAB_SLOTS: usize = 256;

/// The ring of h-node slots of one list. Not `Sync` by itself: `GList`
/// allocates from it only in its owner's methods and frees into it only in
/// the worker's (or in its `Drop`).
pub(crate) struct HNodeSlab {
    /// `H_SLAB_SLOTS` slots, each h-node on a cache line of its own: the
    /// owner writes the next slot while the worker may be reading the one
    /// before it.
    slots: SlotRing<HNode>,
    /// Owner only: slots handed out so far (slot `allocated % H_SLAB_SLOTS`
    /// is next).
    allocated: Cell<u64>,
    /// Owner only: `freed` as the owner last loaded it.
    freed_seen: Cell<u64>,
    /// Slots the worker has given back (written by the worker only,
    /// Release: its reads of a slot happen before the owner reuses it).
    freed: CachePadded<AtomicU64>,
}

impl HNodeSlab {
    pub(crate) fn new() -> Self {
        Self {
            slots: SlotRing::new(H_SLAB_SLOTS),
            allocated: Cell::new(0),
            freed_seen: Cell::new(0),
            freed: CachePadded::new(AtomicU64::new(0)),
        }
    }

    fn slot(&self, index: u64) -> *mut HNode {
        self.slots.slot(index)
    }

    /// Places `node` in the next free slot, or on the heap if none is free.
    ///
    /// # Safety
    ///
    /// Owner only (never concurrently with another `alloc`).
    pub(crate) unsafe fn alloc(&self, node: HNode) -> *mut HNode {
        let allocated = self.allocated.get();
        if allocated - self.freed_seen.get() == H_SLAB_SLOTS as u64 {
            // Acquire: the worker is done with every slot it counted.
            self.freed_seen.set(self.freed.load(Acquire));
            if allocated - self.freed_seen.get() == H_SLAB_SLOTS as u64 {
                return Box::into_raw(Box::new(node));
            }
        }
        let slot = self.slot(allocated);
        // SAFETY: the slot is free (fewer than H_SLAB_SLOTS in use by the
        // count above, and the free ones are the stretch from `allocated`
        // on), so nobody references it; it is sized and aligned for a node.
        unsafe { slot.write(node) };
        self.allocated.set(allocated + 1);
        slot
    }

    /// Gives `node`'s memory back.
    ///
    /// # Safety
    ///
    /// The worker only (never concurrently with another `free`); `node`
    /// came from this slab's `alloc`, the worker no longer touches it, and
    /// every slab node allocated before it has been freed already.
    pub(crate) unsafe fn free(&self, node: *mut HNode) {
        if !self.contains(node) {
            // SAFETY: a heap node from `alloc`, unreachable (the contract).
            drop(unsafe { Box::from_raw(node) });
            return;
        }
        // Only this thread writes `freed`.
        let freed = self.freed.load(Relaxed);
        debug_assert_eq!(node, self.slot(freed), "h-nodes freed out of order");
        // An `HNode` has no drop glue: counting the slot frees it.
        self.freed.store(freed + 1, Release);
    }

    /// Whether `node` lies in this slab (else it came from the heap).
    fn contains(&self, node: *mut HNode) -> bool {
        self.slots.contains(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    fn node(range_hi: u64) -> HNode {
        HNode::new(range_hi, ptr::null_mut())
    }

    #[test]
    fn slots_go_round_in_order_and_the_heap_takes_the_overflow() {
        let slab = HNodeSlab::new();
        // This test is owner and worker in turn; nodes are freed in
        // allocation order and not touched afterwards.
        let nodes: Vec<*mut HNode> = (0..H_SLAB_SLOTS as u64 + 3)
            // SAFETY: the owner, alone.
            .map(|i| unsafe { slab.alloc(node(i)) })
            .collect();
        assert!(nodes[..H_SLAB_SLOTS].iter().all(|&n| slab.contains(n)));
        assert!(
            nodes[H_SLAB_SLOTS..].iter().all(|&n| !slab.contains(n)),
            "a full slab must hand out heap nodes"
        );
        for (i, &n) in nodes.iter().enumerate() {
            // SAFETY: live nodes of this slab, freed in allocation order.
            unsafe {
                assert_eq!((*n).range_hi, i as u64, "a slot was handed out twice");
                slab.free(n);
            }
        }
        // Everything given back: the owner sees it once its view is full,
        // and the ring goes round to the first slot.
        let again: Vec<*mut HNode> = (0..H_SLAB_SLOTS as u64)
            // SAFETY: the owner, alone.
            .map(|i| unsafe { slab.alloc(node(i)) })
            .collect();
        assert!(again.iter().all(|&n| slab.contains(n)));
        assert_eq!(again[0], nodes[0], "the ring did not go round");
        for n in again {
            // SAFETY: as above.
            unsafe { slab.free(n) };
        }
    }

    /// The owner and the worker on two threads, the worker freeing as the
    /// owner allocates: every node reads back what was written into it.
    #[test]
    fn an_owner_and_a_worker_on_two_threads_never_share_a_slot() {
        use std::sync::mpsc;
        struct Ptr(*mut HNode);
        // SAFETY: the pointer is handed over once, to the freeing thread.
        unsafe impl Send for Ptr {}
        struct Shared(HNodeSlab);
        // SAFETY: one thread allocates, the other frees (the contract).
        unsafe impl Sync for Shared {}
        impl Shared {
            fn slab(&self) -> &HNodeSlab {
                &self.0
            }
        }
        let shared = Shared(HNodeSlab::new());
        // Room for the owner to run a lap and more ahead: the slab fills,
        // overflows to the heap and is reused while the worker frees.
        let (to_worker, from_owner) = mpsc::sync_channel::<Ptr>(4 * H_SLAB_SLOTS);
        std::thread::scope(|s| {
            let shared = &shared;
            s.spawn(move || {
                // Miri runs the same laps, fewer of them.
                let nodes = if cfg!(miri) { 2_000 } else { 100_000u64 };
                for i in 0..nodes {
                    // SAFETY: owner thread.
                    let n = unsafe { shared.slab().alloc(node(i)) };
                    to_worker.send(Ptr(n)).expect("worker alive");
                }
            });
            s.spawn(move || {
                for (i, Ptr(n)) in from_owner.into_iter().enumerate() {
                    // SAFETY: worker thread; freed in allocation order.
                    unsafe {
                        assert_eq!((*n).range_hi, i as u64, "a live slot was reused");
                        shared.slab().free(n);
                    }
                }
            });
        });
    }
}
