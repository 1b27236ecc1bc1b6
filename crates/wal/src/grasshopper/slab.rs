//! Where a grasshopper list's c-nodes live: a ring of cache-line slots
//! handed out in order, with the heap as the overflow.
//!
//! Why not one heap allocation per node (the first version): every node is
//! written by its database thread and read by the ELEDA worker on another
//! core, so each costs a cache-line transfer to the worker and, when the
//! memory is reused, one back. The allocator reused a freed node's memory
//! almost at once, while the worker still held the line, and packed 48-byte
//! nodes across line boundaries, so the append that rewrote it stalled on
//! the worker's copy (a profile of one database thread on the null device
//! put 69% of `push` on the first locked instruction after the node's
//! stores, and half of `collect` on reading a node back). Here each node
//! has a line of its own, consecutive nodes are consecutive lines (the
//! worker's crawl reads them in order), a slot is reused only after the
//! whole ring has gone round, and the owner asks for the lines it will
//! write next ahead of time (`prefetchw`), so the ownership transfer
//! overlaps the appends before it.
//!
//! The list frees nodes in the order it pushed them (its gc point walks
//! the c-list), and the slots are handed out in that order too, so the
//! free slots are always one contiguous stretch of the ring and two
//! counters describe the slab. While every slot is in use (more pending
//! entries than slots, e.g. behind a slow sync), new nodes come from the
//! heap, as before; a node knows where it came from by its address.

use std::cell::Cell;

use super::list::CNode;
use super::slots::SlotRing;

/// Slots per list: 2,048 lines, 128 KiB. At one database thread on the
/// null device about a thousand entries are pending at a time.
pub(crate) const SLAB_SLOTS: usize = 2048;

/// Slots ahead of the next allocation whose lines `alloc` prefetches for
/// writing: about two transactions of three appends and a commit.
const PREFETCH_AHEAD: usize = 8;

/// The owner's ring of node slots. Not `Sync` by itself: `GList` touches it
/// only from its owner's methods (and its `Drop`).
pub(crate) struct NodeSlab {
    /// `SLAB_SLOTS` slots.
    slots: SlotRing<CNode>,
    /// Slots handed out so far (slot `allocated % SLAB_SLOTS` is next).
    allocated: Cell<u64>,
    /// Slots returned so far; `allocated - freed` are in use.
    freed: Cell<u64>,
}

impl NodeSlab {
    pub(crate) fn new() -> Self {
        Self {
            slots: SlotRing::new(SLAB_SLOTS),
            allocated: Cell::new(0),
            freed: Cell::new(0),
        }
    }

    fn slot(&self, index: u64) -> *mut CNode {
        self.slots.slot(index)
    }

    /// Places `node` in the next free slot, or on the heap if none is free.
    ///
    /// Inlined so that the node is built in its slot: passed by reference
    /// to an outlined call, it went through a stack copy whose 16-byte
    /// loads could not take the 8-byte stores that built it, and waited
    /// for the store buffer to drain (behind the entry's copy into the
    /// ring): 60% of this function's samples at one thread, by perf.
    #[inline(always)]
    pub(crate) fn alloc(&self, node: CNode) -> *mut CNode {
        let allocated = self.allocated.get();
        if allocated - self.freed.get() == SLAB_SLOTS as u64 {
            return Box::into_raw(Box::new(node));
        }
        let slot = self.slot(allocated);
        // SAFETY: the slot is free (fewer than SLAB_SLOTS in use, and the
        // free ones are the stretch from `allocated` on), so nobody else
        // references it; it is sized and aligned for a `CNode`.
        unsafe { slot.write(node) };
        self.allocated.set(allocated + 1);
        epochdb_memory::prefetch_lines_for_write(self.slot(allocated + PREFETCH_AHEAD as u64), 1);
        slot
    }

    /// Drops `node` and returns its memory.
    ///
    /// # Safety
    ///
    /// `node` came from this slab's `alloc`, is unreachable for every
    /// other thread, and every slab node allocated before it has been
    /// freed already (the list frees in push order).
    pub(crate) unsafe fn free(&self, node: *mut CNode) {
        if !self.contains(node) {
            // SAFETY: a heap node from `alloc`, unreachable (the contract).
            drop(unsafe { Box::from_raw(node) });
            return;
        }
        let freed = self.freed.get();
        debug_assert_eq!(node, self.slot(freed), "slab nodes freed out of order");
        // SAFETY: the slot holds a live node nobody else references.
        unsafe { node.drop_in_place() };
        self.freed.set(freed + 1);
    }

    fn contains(&self, node: *mut CNode) -> bool {
        self.slots.contains(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grasshopper::hindex::HIndex;
    use crate::grasshopper::list::{Callback, GList};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;

    #[test]
    fn slots_go_round_in_order_and_the_heap_takes_the_overflow() {
        let slab = NodeSlab::new();
        let nodes: Vec<*mut CNode> = (0..SLAB_SLOTS as u64 + 3)
            .map(|i| slab.alloc(CNode::new(i, i + 1, None)))
            .collect();
        assert!(nodes[..SLAB_SLOTS].iter().all(|&n| slab.contains(n)));
        assert!(
            nodes[SLAB_SLOTS..].iter().all(|&n| !slab.contains(n)),
            "a full slab must hand out heap nodes"
        );
        for (i, &node) in nodes.iter().enumerate() {
            // SAFETY: live nodes from this slab, freed in allocation order.
            unsafe {
                assert_eq!((*node).start, i as u64, "a slot was handed out twice");
                slab.free(node);
            }
        }
        // Everything returned: the next node takes the slot after the last
        // slab node, wrapping round the ring.
        let again = slab.alloc(CNode::new(0, 1, None));
        assert!(slab.contains(again));
        assert_eq!(again, nodes[0], "the ring did not go round");
        // SAFETY: as above.
        unsafe { slab.free(again) };
    }

    /// The list's view: more pending entries than slots, then all of them
    /// durable at once; every callback runs, in order, once; and callbacks
    /// of entries never made durable are dropped with the list.
    #[test]
    fn a_list_with_more_pending_entries_than_slots_runs_every_callback_once() {
        let hindex = HIndex::new(0, 12, 1 << 16);
        let list = GList::new(0, &hindex);
        let ran = Arc::new(AtomicUsize::new(0));
        let entries = 2 * SLAB_SLOTS as u64 + 5;
        for i in 0..entries {
            let ran = ran.clone();
            let callback: Callback = Box::new(move |result| {
                let range = result.expect("no error");
                assert_eq!(range.start, 10 * i, "callbacks out of order");
                assert_eq!(ran.fetch_add(1, Relaxed) as u64, i);
            });
            // SAFETY: this test is the only owner; entries are contiguous.
            unsafe { list.push(10 * i, 10 * i + 10, Some(callback), &hindex) };
        }
        // SAFETY: owner; nothing else runs.
        assert_eq!(unsafe { list.collect(10 * entries) }, entries as usize);
        assert_eq!(ran.load(Relaxed) as u64, entries);

        let dropped = Arc::new(());
        for i in entries..entries + 3 {
            let held = dropped.clone();
            let callback: Callback = Box::new(move |_| drop(held));
            // SAFETY: as above.
            unsafe { list.push(10 * i, 10 * i + 10, Some(callback), &hindex) };
        }
        drop(list);
        assert_eq!(Arc::strong_count(&dropped), 1, "pending callbacks leaked");
    }
}
