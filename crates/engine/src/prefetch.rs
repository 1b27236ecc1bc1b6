//! Software prefetch: asking the CPU to start loading cache lines before
//! they are needed, so that several misses overlap instead of queueing.

/// Bytes in a cache line.
const LINE: usize = 64;

/// Starts loading the `lines` cache lines from `base` into all cache
/// levels. A hint only: it never faults and has no effect on memory.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(base: *const T, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let base = base.cast::<i8>();
        for line in 0..lines {
            // SAFETY: prefetching is a hint; it never faults, even for
            // addresses past the object.
            unsafe { _mm_prefetch(base.wrapping_add(line * LINE), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, lines);
}
