//! `--prefault-mb`: faulting memory in before a run, so that the engine's
//! growth (TPC-C inserts about 1.5 KB per New-Order) reuses pages the
//! process already touched instead of faulting fresh ones on the worker
//! threads.
//!
//! Why: on this project's virtual machines the first touch of a page is
//! slow (about 0.4 GB/s, the host backing guest memory on demand), and a
//! 1-thread New-Order-only TPC-C run spent 29% of its samples in the
//! kernel's `clear_page_erms` (BENCHMARKS.md, engine section). Silo offers
//! the same (`--numa-memory` pre-faults its pools at start-up).
//!
//! How: the chunks are allocated, written and freed through the global
//! allocator, and mimalloc is told to keep freed memory rather than return
//! it to the OS (`purge_delay = -1`), so later allocations are carved from
//! the faulted pages. The process's memory then never shrinks below its
//! peak — the usual trade of a database that owns its machine.

use std::time::Instant;

/// Bytes faulted in per allocation.
const CHUNK: usize = 4 << 20;

/// Faults in `mb` MiB through the global allocator and keeps it for reuse.
/// Prints a progress line. Without the mimalloc build the memory would go
/// back to the OS on free, so it only warns.
pub(crate) fn warm_allocator(mb: usize) {
    if mb == 0 {
        return;
    }
    if !retain_freed_memory() {
        eprintln!("[prefault] skipped: needs the mimalloc build (mimalloc 3.x)");
        return;
    }
    let start = Instant::now();
    let mut chunks: Vec<Vec<u8>> = Vec::with_capacity(mb * (1 << 20) / CHUNK + 1);
    for _ in 0..(mb * (1 << 20)).div_ceil(CHUNK) {
        // Written, not zero-allocated: a zeroed allocation may be fresh
        // OS memory the allocator never touches.
        chunks.push(vec![1u8; CHUNK]);
    }
    let faulted = (chunks.len() * CHUNK) >> 20;
    drop(chunks);
    eprintln!(
        "[prefault] {faulted} MiB faulted in and kept by the allocator in {:.2} s",
        start.elapsed().as_secs_f64()
    );
}

/// Tells the allocator to keep freed memory; whether it could.
#[cfg(feature = "mimalloc")]
fn retain_freed_memory() -> bool {
    use libmimalloc_sys::{mi_option_get, mi_option_set, mi_version};
    // `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (mimalloc.h);
    // the Rust bindings do not name it. -1: never purge.
    const MI_OPTION_PURGE_DELAY: i32 = 15;
    // SAFETY: a plain query with no arguments.
    let version = unsafe { mi_version() };
    // Major, then two digits each of minor and patch: 3.x.y is 30000..40000.
    if !(30_000..40_000).contains(&version) {
        return false;
    }
    // SAFETY: setting and reading a valid option index of this version.
    unsafe {
        mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        mi_option_get(MI_OPTION_PURGE_DELAY) == -1
    }
}

/// Without mimalloc the system allocator returns large freed blocks to the
/// OS at once.
#[cfg(not(feature = "mimalloc"))]
fn retain_freed_memory() -> bool {
    false
}
