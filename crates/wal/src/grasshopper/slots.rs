//! The memory under a slab: a fixed ring of cache-line-aligned slots, each
//! able to hold one `T`, addressed by an index taken modulo the ring's
//! length (a power of two, so the modulo is a mask rather than a division
//! on every append). What lives in a slot, and when, is its user's
//! business: `slab.rs` (c-nodes, freed by their owner) and `hslab.rs`
//! (h-nodes, freed by the worker).

use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

/// Room for one `T` on a cache line of its own (or more lines, for a
/// larger `T`). `repr(C)`: the value sits at the slot's address.
#[repr(C, align(64))]
struct Slot<T> {
    _value: MaybeUninit<T>,
}

/// `len` slots, allocated at once and returned in `Drop`.
pub(crate) struct SlotRing<T> {
    /// From `Box::into_raw`. A raw pointer rather than a `Box`: the values
    /// handed out point into it while the ring moves (with its list), and
    /// moving a `Box` asserts unique access to all of it (Stacked Borrows;
    /// miri caught it).
    slots: NonNull<Slot<T>>,
    len: usize,
}

impl<T> SlotRing<T> {
    /// A ring of `len` slots; `len` must be a power of two.
    pub(crate) fn new(len: usize) -> Self {
        assert!(
            len.is_power_of_two(),
            "a slot ring's length must be a power of two"
        );
        let slots: Box<[Slot<T>]> = (0..len)
            .map(|_| Slot {
                _value: MaybeUninit::uninit(),
            })
            .collect();
        Self {
            slots: NonNull::new(Box::into_raw(slots).cast()).expect("Box is non-null"),
            len,
        }
    }

    /// Slot `index % len`: memory sized and aligned for a `T`.
    pub(crate) fn slot(&self, index: u64) -> *mut T {
        // SAFETY: in bounds of the `len` slots.
        unsafe {
            self.slots
                .as_ptr()
                .add(index as usize & (self.len - 1))
                .cast()
        }
    }

    /// Whether `value` lies in one of the slots.
    pub(crate) fn contains(&self, value: *mut T) -> bool {
        let start = self.slots.as_ptr() as usize;
        let end = start + self.len * std::mem::size_of::<Slot<T>>();
        (start..end).contains(&(value as usize))
    }
}

impl<T> Drop for SlotRing<T> {
    fn drop(&mut self) {
        // The slots are `MaybeUninit`: this returns only the memory; whoever
        // put a value in a slot dropped it (or it needs no dropping).
        // SAFETY: `slots` came from `Box::into_raw` of `len` slots.
        drop(unsafe {
            Box::from_raw(ptr::slice_from_raw_parts_mut(self.slots.as_ptr(), self.len))
        });
    }
}
