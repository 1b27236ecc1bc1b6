//! Deferred destruction: an object removed from a shared structure, freed
//! once no thread can still hold a reference to it.

/// A type-erased object to destroy, tagged with the epoch it was retired in.
pub(crate) struct Deferred {
    pub(crate) epoch: u64,
    pointer: *mut (),
    destroy: unsafe fn(*mut ()),
}

// SAFETY: `retire` requires the object to be `Send`-safe to destroy from
// another thread; the pointer is owned exclusively by this record.
unsafe impl Send for Deferred {}

impl Deferred {
    /// # Safety
    /// `destroy(pointer)` must be sound to call exactly once, from any thread,
    /// once no thread can reach `pointer` any more.
    pub(crate) unsafe fn new(epoch: u64, pointer: *mut (), destroy: unsafe fn(*mut ())) -> Self {
        Self {
            epoch,
            pointer,
            destroy,
        }
    }

    /// # Safety
    /// No thread may still reach the object.
    pub(crate) unsafe fn run(self) {
        // SAFETY: forwarded from the caller and from `new`'s contract.
        unsafe { (self.destroy)(self.pointer) }
    }
}

/// Destroys a `Box<T>` given as a raw pointer.
///
/// # Safety
/// `pointer` must come from `Box::<T>::into_raw` and be destroyed only once.
pub(crate) unsafe fn destroy_box<T>(pointer: *mut ()) {
    // SAFETY: forwarded from the caller.
    drop(unsafe { Box::from_raw(pointer.cast::<T>()) });
}
