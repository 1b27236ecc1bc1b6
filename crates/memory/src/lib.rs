//! Large zero-initialised arrays mapped straight from the kernel, so that
//! they can ask for transparent huge pages and give their pages back when
//! dropped.
//!
//! Who uses it and why:
//!
//! * the frequently-consistent checkpoint algorithms (`epochdb-fcc`), whose
//!   paper measured large pages (fc-checkpoint-sigmod11 §5.6: "Using large
//!   pages resulted in a considerable performance improvement");
//! * the HybridLog's hash index and log frames (`epochdb-hybridlog`),
//!   probed at random across hundreds of megabytes: with 4 KiB pages nearly
//!   every probe also misses the TLB, and every new page costs a fault when
//!   the index is first written (BENCHMARKS.md, "Huge pages for the
//!   HybridLog", measures both).
//!
//! It also holds the software prefetch hints ([`prefetch`],
//! [`prefetch_lines`]) the engine and the HybridLog issue ahead of their
//! cache misses.
//!
//! A [`Region`] holds `len` values of a [`Zeroable`] type in an anonymous
//! private mapping. Such a mapping reads as zeros, which is a valid value of
//! every `Zeroable` type, so the region is initialised from the moment it
//! exists. This crate is the only place the mapping's `unsafe` lives; its
//! users need none (the HybridLog crate forbids `unsafe` and derives
//! `Zeroable` for its buckets).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Types for which all-zero bytes are a valid value (bytemuck's trait,
/// derivable without `unsafe`; atomics included).
pub use bytemuck::Zeroable;

/// Whether a region asks for transparent huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HugePages {
    /// Leave it to the system setting
    /// (`/sys/kernel/mm/transparent_hugepage/enabled`).
    #[default]
    Default,
    /// `madvise(MADV_HUGEPAGE)` before the first touch.
    On,
    /// `madvise(MADV_NOHUGEPAGE)`: 4 KiB pages even where the system
    /// default would use huge ones.
    Off,
}

impl std::str::FromStr for HugePages {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "default" => Ok(Self::Default),
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            other => Err(format!("huge pages: {other:?} is not on, off or default")),
        }
    }
}

impl std::fmt::Display for HugePages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Default => "default",
            Self::On => "on",
            Self::Off => "off",
        })
    }
}

/// `len` values of `T` in their own anonymous mapping, faulted in when the
/// region is made ([`Region::zeroed`]) or on first touch
/// ([`Region::zeroed_lazily`]).
pub struct Region<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped (0 when nothing is).
    mapped: usize,
    _owns: PhantomData<T>,
}

// SAFETY: a Region owns its values like a Box<[T]> does.
unsafe impl<T: Zeroable + Send> Send for Region<T> {}
// SAFETY: as above; shared access hands out only `&[T]`.
unsafe impl<T: Zeroable + Sync> Sync for Region<T> {}

impl<T: Zeroable> Region<T> {
    /// `len` zeroed values, advised as `huge` asks, then set to `f(i)`.
    pub fn new(len: usize, huge: HugePages, mut f: impl FnMut(usize) -> T) -> Self {
        let mut region = Self::zeroed(len, huge);
        for (i, slot) in region.iter_mut().enumerate() {
            *slot = f(i);
        }
        region
    }

    /// A copy of `init`.
    pub fn copy_of(init: &[T], huge: HugePages) -> Self
    where
        T: Copy,
    {
        let mut region = Self::zeroed(init.len(), huge);
        region.copy_from_slice(init);
        region
    }

    /// `len` zeroed values, every page faulted in now (so no later access
    /// pays a first-touch fault inside a measured interval).
    ///
    /// # Panics
    ///
    /// If the size overflows, `T` needs more than page alignment, or the
    /// kernel refuses the mapping (out of address space or memory).
    pub fn zeroed(len: usize, huge: HugePages) -> Self {
        Self::map(len, huge, true)
    }

    /// `len` zeroed values whose pages are faulted in on first touch, as
    /// the allocator's large zeroed allocations are: for memory a caller
    /// fills at once anyway, or may never touch all of (a log's frames).
    ///
    /// # Panics
    ///
    /// As [`Region::zeroed`].
    pub fn zeroed_lazily(len: usize, huge: HugePages) -> Self {
        Self::map(len, huge, false)
    }

    /// Faults in the pages under values `[from, from + len)` (clamped to
    /// the region) without touching their contents, so later first
    /// accesses there pay no fault: `madvise(MADV_POPULATE_WRITE)` on the
    /// whole pages the range covers. Safe while other threads read and
    /// write those values: the kernel maps the pages and changes no byte.
    /// Returns `false` where the kernel cannot (before Linux 5.14, or
    /// under miri, which has no `madvise`); nothing happened then.
    pub fn populate(&self, from: usize, len: usize) -> bool {
        let end = from.saturating_add(len).min(self.len);
        if from >= end || self.mapped == 0 {
            return true;
        }
        let size = std::mem::size_of::<T>();
        let start = (from * size) / PAGE_BYTES * PAGE_BYTES;
        let stop = (end * size).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        populate_bytes(self.ptr.cast::<u8>(), start, stop.min(self.mapped))
    }

    fn map(len: usize, huge: HugePages, populate: bool) -> Self {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("region size overflows");
        assert!(
            std::mem::align_of::<T>() <= 4096,
            "mappings are page aligned"
        );
        if bytes == 0 {
            return Self {
                ptr: NonNull::dangling(),
                len,
                mapped: 0,
                _owns: PhantomData,
            };
        }
        Self {
            ptr: map_zeroed(bytes, huge, populate).cast::<T>(),
            len,
            mapped: bytes,
            _owns: PhantomData,
        }
    }
}

/// Maps `bytes` (> 0) zeroed, page-aligned bytes, advised as `huge` asks,
/// every page faulted in if `populate`.
#[cfg(not(miri))]
fn map_zeroed(bytes: usize, huge: HugePages, populate: bool) -> NonNull<u8> {
    // SAFETY: an anonymous private mapping of `bytes` bytes at an address of
    // the kernel's choosing touches no existing memory.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        panic!(
            "mmap of {bytes} bytes failed: {}",
            std::io::Error::last_os_error()
        );
    }
    let advice = match huge {
        HugePages::Default => None,
        HugePages::On => Some(libc::MADV_HUGEPAGE),
        HugePages::Off => Some(libc::MADV_NOHUGEPAGE),
    };
    if let Some(advice) = advice {
        // SAFETY: the range is exactly the mapping just made; this advice
        // changes only the page size backing it, never its contents.
        // Failure (a kernel without THP) only loses the hint.
        let _ = unsafe { libc::madvise(addr, bytes, advice) };
    }
    if !populate {
        return NonNull::new(addr.cast::<u8>()).expect("mmap returned null");
    }
    // Fault every page in now, in the page size just chosen.
    // SAFETY: as above; populating writes nothing visible (the pages read
    // as zeros either way).
    let populated = unsafe { libc::madvise(addr, bytes, libc::MADV_POPULATE_WRITE) } == 0;
    if !populated {
        // Kernels before 5.14: touch every byte instead.
        // SAFETY: `addr` is a fresh writable mapping of `bytes` bytes.
        unsafe { std::ptr::write_bytes(addr.cast::<u8>(), 0, bytes) };
    }
    NonNull::new(addr.cast::<u8>()).expect("mmap returned null")
}

/// The page size `Region::populate` rounds to (the mapping's base pages;
/// the kernel populates a huge page whole where one backs the range).
const PAGE_BYTES: usize = 4096;

/// `madvise(MADV_POPULATE_WRITE)` on bytes `[start, stop)` of the mapping
/// at `base`; whether the kernel did it.
#[cfg(not(miri))]
fn populate_bytes(base: NonNull<u8>, start: usize, stop: usize) -> bool {
    // SAFETY: `[start, stop)` lies inside one live mapping made by
    // `map_zeroed` (the caller holds the region); populating faults pages
    // in and writes nothing visible.
    unsafe {
        libc::madvise(
            base.as_ptr().add(start).cast(),
            stop - start,
            libc::MADV_POPULATE_WRITE,
        ) == 0
    }
}

#[cfg(miri)]
fn populate_bytes(_base: NonNull<u8>, _start: usize, _stop: usize) -> bool {
    false
}

/// Unmaps what [`map_zeroed`] mapped.
///
/// # Safety
///
/// `ptr` and `bytes` must be one mapping made by `map_zeroed`, unmapped
/// once, with no reference into it left.
#[cfg(not(miri))]
unsafe fn unmap(ptr: NonNull<u8>, bytes: usize) {
    // SAFETY: per the contract.
    unsafe { libc::munmap(ptr.as_ptr().cast(), bytes) };
}

/// Miri has no `madvise`: the same contract from the global allocator.
#[cfg(miri)]
fn map_zeroed(bytes: usize, _huge: HugePages, _populate: bool) -> NonNull<u8> {
    let layout = miri_layout(bytes);
    // SAFETY: non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

#[cfg(miri)]
fn miri_layout(bytes: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(bytes, 4096).expect("region layout")
}

/// Frees what [`map_zeroed`] allocated under miri.
///
/// # Safety
///
/// As for the mapping version.
#[cfg(miri)]
unsafe fn unmap(ptr: NonNull<u8>, bytes: usize) {
    // SAFETY: per the contract, allocated with this layout.
    unsafe { std::alloc::dealloc(ptr.as_ptr(), miri_layout(bytes)) };
}

impl<T: Zeroable> Deref for Region<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised values (zero is valid
        // for `T`) that live as long as `self`, or is dangling with
        // `len * size_of::<T>() == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> DerefMut for Region<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Drop for Region<T> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            // SAFETY: the values are initialised and dropped only here.
            unsafe { std::ptr::drop_in_place(&mut **self as *mut [T]) };
        }
        if self.mapped > 0 {
            // SAFETY: exactly the mapping made in `zeroed`; no reference
            // into it outlives `self`.
            unsafe { unmap(self.ptr.cast::<u8>(), self.mapped) };
        }
    }
}

impl<T: Zeroable + std::fmt::Debug> std::fmt::Debug for Region<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.len)
            .field("bytes", &self.mapped)
            .finish_non_exhaustive()
    }
}

/// Drops `file`'s clean pages from the page cache (`posix_fadvise`
/// `POSIX_FADV_DONTNEED`), so the next read of it comes from the disk: for
/// measuring recovery from a cold cache without dropping every file's
/// cache on the machine.
pub fn evict_page_cache(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the duration of the call; the
    // advice only drops clean cached pages.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

/// Allocates `file`'s blocks up to `len` bytes and extends its length to
/// `len` if shorter (`fallocate` with no flags): the new bytes read as
/// zeros, and direct writes below `len` become overwrites of allocated
/// blocks, which ext4 lets run side by side.
pub fn preallocate(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: the descriptor is open for the duration of the call, which
    // only allocates blocks and may grow the file.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Writes the bytes of `words` (in memory order: each word's native bytes)
/// to `file` at `offset` with `pwrite`, straight from where they lie: no
/// copy into a byte buffer first. For a file opened with `O_DIRECT` the
/// device reads them from this memory, so a log's frames can be flushed
/// without staging (cpr-sigmod19 §5.1: FASTER writes its circular buffer's
/// pages as they are).
///
/// Words that another thread stores to during the call reach the file with
/// either value, or torn; the caller's invariant must keep the range
/// unchanged while it is written (the HybridLog writes only below its safe
/// read-only address). Nothing here reads the words as Rust values, so such
/// stores are not a data race in this process.
///
/// # Errors
///
/// The first `pwrite` error other than `EINTR`; a write of zero bytes is
/// `WriteZero`.
#[cfg(not(miri))]
pub fn write_words_at(
    file: &std::fs::File,
    words: &[std::sync::atomic::AtomicU64],
    offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let base = words.as_ptr().cast::<u8>();
    let len = std::mem::size_of_val(words);
    let mut done = 0usize;
    while done < len {
        let at = i64::try_from(offset + done as u64)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `base + done .. base + len` lies inside `words`, which
        // the borrow keeps alive and mapped for the whole call; the kernel
        // only reads it. No `&[u8]` to the atomics is made, so concurrent
        // atomic stores elsewhere stay defined behaviour (see above).
        let n = unsafe {
            libc::pwrite(
                file.as_raw_fd(),
                base.add(done).cast::<libc::c_void>(),
                len - done,
                at,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Miri has no `pwrite`: the same bytes, copied with atomic loads first.
#[cfg(miri)]
pub fn write_words_at(
    file: &std::fs::File,
    words: &[std::sync::atomic::AtomicU64],
    offset: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    file.write_all_at(&bytes, offset)
}

/// Anonymous memory this process has in transparent huge pages, in bytes
/// (`AnonHugePages` in `/proc/self/smaps_rollup`; 0 where unreadable).
pub fn anon_huge_page_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Bytes in a cache line.
const LINE: usize = 64;

/// Starts loading the cache line holding `value` into all cache levels
/// (a software prefetch), so that a miss on it overlaps other work. A
/// hint only: it never faults and changes nothing in memory. The CPU does
/// not order it against locked instructions, so it also runs ahead of a
/// compare-and-swap that would hold back an ordinary load.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    prefetch_lines(value, 1);
}

/// Starts loading the `lines` cache lines from `base` into all cache
/// levels, as [`prefetch`] does for one. `base` need not point into a
/// live object: a prefetch never faults, even past an object's end.
#[inline(always)]
pub fn prefetch_lines<T>(base: *const T, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines_with::<{ std::arch::x86_64::_MM_HINT_T0 }>(base.cast(), lines);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, lines);
}

/// Starts fetching the `lines` cache lines from `base` in a writable state
/// (x86's `prefetchw`), so that later stores to them do not wait for
/// another core to give them up or for memory. A hint only, as
/// [`prefetch_lines`]: it never faults and changes nothing in memory.
///
/// `_mm_prefetch` with `_MM_HINT_ET0` compiles to a plain `prefetcht0`
/// unless the whole build targets a CPU with `prefetchw` (LLVM's `prfchw`
/// feature; our builds target baseline x86-64), so this issues the
/// instruction itself where CPUID says the CPU has it, and falls back to
/// `prefetcht0` where it does not.
#[inline(always)]
pub fn prefetch_lines_for_write<T>(base: *const T, lines: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if has_prefetchw() {
        for line in 0..lines {
            let at = base.cast::<u8>().wrapping_add(line * LINE);
            // SAFETY: the CPU has PREFETCHW (CPUID checked); a prefetch is
            // a hint that never faults, reads nothing into a register and
            // writes no memory, even for addresses past the object.
            unsafe {
                std::arch::asm!(
                    "prefetchw byte ptr [{at}]",
                    at = in(reg) at,
                    options(nostack, preserves_flags, readonly)
                )
            };
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    prefetch_lines_with::<{ std::arch::x86_64::_MM_HINT_T0 }>(base.cast(), lines);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, lines);
}

/// Whether the CPU has `prefetchw` (CPUID leaf 0x8000_0001, ECX bit 8),
/// asked once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
fn has_prefetchw() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
    match STATE.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => {
            let yes = detect_prefetchw();
            STATE.store(if yes { YES } else { NO }, Ordering::Relaxed);
            yes
        }
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[cold]
fn detect_prefetchw() -> bool {
    use std::arch::x86_64::__cpuid;
    const PREFETCHW_BIT: u32 = 1 << 8;
    // The extended leaf is asked for only where the highest extended leaf
    // says it exists.
    __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & PREFETCHW_BIT != 0
}

/// `_mm_prefetch` with `HINT` for each of `lines` lines from `base`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_lines_with<const HINT: i32>(base: *const i8, lines: usize) {
    for line in 0..lines {
        // SAFETY: prefetching is a hint; it never faults, even for
        // addresses past the object.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(base.wrapping_add(line * LINE)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;

    #[test]
    fn prefetch_changes_nothing() {
        let region = Region::new(4096, HugePages::Off, |i| AtomicU64::new(i as u64));
        for word in region.iter().step_by(8) {
            prefetch(word);
            prefetch_lines_for_write(word, 2);
        }
        // The last word too: its cache line is the region's last.
        prefetch(&region[4095]);
        assert!(region
            .iter()
            .enumerate()
            .all(|(i, w)| w.load(Relaxed) == i as u64));
    }

    #[test]
    #[cfg_attr(miri, ignore = "files need -Zmiri-disable-isolation")]
    fn words_are_written_in_memory_order() {
        let dir = std::env::temp_dir().join(format!("epochdb-memory-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("words");
        let file = std::fs::File::create(&path).unwrap();
        let words = Region::new(1000, HugePages::Default, |i| {
            AtomicU64::new(0x0102_0304_0506_0708u64.wrapping_mul(i as u64 + 1))
        });
        write_words_at(&file, &words[10..], 24).unwrap();
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), 24 + 990 * 8);
        assert!(back[..24].iter().all(|&b| b == 0));
        for (i, chunk) in back[24..].chunks_exact(8).enumerate() {
            let want = 0x0102_0304_0506_0708u64.wrapping_mul(i as u64 + 11);
            assert_eq!(chunk, want.to_ne_bytes(), "word {i}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Which of the region's 4 KiB pages are resident (`mincore`).
    #[cfg(not(miri))]
    fn resident_pages<T: Zeroable>(region: &Region<T>) -> Vec<bool> {
        let pages = region.mapped.div_ceil(PAGE_BYTES);
        let mut vec = vec![0u8; pages];
        // SAFETY: the whole live mapping; `vec` has a byte per page.
        let rc = unsafe {
            libc::mincore(
                region.ptr.as_ptr().cast(),
                region.mapped,
                vec.as_mut_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        vec.iter().map(|b| b & 1 == 1).collect()
    }

    /// `populate` faults in exactly the pages under the range asked for
    /// and changes no value, while another thread writes beside it.
    #[test]
    #[cfg_attr(miri, ignore = "no madvise under miri")]
    fn populate_faults_pages_in_and_changes_no_value() {
        #[cfg(not(miri))]
        {
            const WORDS: usize = 64 * 512; // 64 pages of 4 KiB
            let region = Arc::new(Region::<AtomicU64>::zeroed_lazily(WORDS, HugePages::Off));
            let writer = {
                let region = Arc::clone(&region);
                std::thread::spawn(move || {
                    for i in (0..WORDS).step_by(97) {
                        region[i].store(i as u64 + 1, Relaxed);
                    }
                })
            };
            // Words 512.. 512 * 9: pages 1 to 8 (the last one partly).
            let done = region.populate(512, 512 * 8 - 3);
            writer.join().unwrap();
            for (i, word) in region.iter().enumerate() {
                let want = if i % 97 == 0 { i as u64 + 1 } else { 0 };
                assert_eq!(word.load(Relaxed), want, "word {i}");
            }
            if !done {
                eprintln!("MADV_POPULATE_WRITE unsupported here: residency not checked");
                return;
            }
            let fresh = Region::<AtomicU64>::zeroed_lazily(WORDS, HugePages::Off);
            assert!(fresh.populate(512, 512 * 8 - 3));
            let resident = resident_pages(&fresh);
            assert_eq!(
                resident.iter().filter(|&&r| r).count(),
                8,
                "pages 1..=8 only: {resident:?}"
            );
            assert!(resident[1..9].iter().all(|&r| r), "{resident:?}");
            assert!(fresh.iter().all(|w| w.load(Relaxed) == 0));
        }
    }

    #[test]
    fn regions_start_as_asked_and_hold_values() {
        for huge in [HugePages::Default, HugePages::On, HugePages::Off] {
            let r = Region::new(10_000, huge, |i| AtomicU64::new(i as u64 * 3));
            assert_eq!(r.len(), 10_000);
            assert_eq!(r[9_999].load(Relaxed), 29_997);
            let z: Region<u8> = Region::zeroed(5000, huge);
            assert!(z.iter().all(|&b| b == 0));
            let mut lazy: Region<u64> = Region::zeroed_lazily(1 << 14, huge);
            assert!(lazy.iter().all(|&w| w == 0));
            lazy[12_345] = 7;
            assert_eq!(lazy.iter().sum::<u64>(), 7);
            let c = Region::copy_of(&[1u64, 2, 3], huge);
            assert_eq!(&c[..], &[1, 2, 3]);
        }
        let empty: Region<u64> = Region::zeroed(0, HugePages::On);
        assert!(empty.is_empty());
    }

    #[test]
    fn values_that_own_something_are_dropped_with_the_region() {
        /// Counts its drops in the shared counter it holds, if any.
        struct Counted(Option<Arc<AtomicU64>>);
        impl Drop for Counted {
            fn drop(&mut self) {
                if let Some(drops) = &self.0 {
                    drops.fetch_add(1, Relaxed);
                }
            }
        }
        // SAFETY: all zeros is `Counted(None)`.
        unsafe impl Zeroable for Counted {}

        let drops = Arc::new(AtomicU64::new(0));
        {
            let mut r: Region<Counted> = Region::zeroed(3, HugePages::Default);
            assert!(r.iter().all(|c| c.0.is_none()));
            r[1] = Counted(Some(drops.clone()));
            r[2] = Counted(Some(drops.clone()));
        }
        assert_eq!(drops.load(Relaxed), 2, "the region dropped its values");
        assert_eq!(Arc::strong_count(&drops), 1);
    }

    #[test]
    fn derived_zeroable_structs_fit() {
        #[derive(Zeroable)]
        #[repr(C, align(64))]
        struct Line {
            words: [AtomicU64; 8],
        }
        let r: Region<Line> = Region::zeroed(1 << 10, HugePages::On);
        r[1023].words[7].store(5, Relaxed);
        assert_eq!(r[1023].words[7].load(Relaxed), 5);
        assert_eq!(r.as_ptr() as usize % 64, 0);
    }

    #[test]
    fn huge_pages_parse_and_print() {
        for h in [HugePages::Default, HugePages::On, HugePages::Off] {
            assert_eq!(h.to_string().parse::<HugePages>(), Ok(h));
        }
        assert!("maybe".parse::<HugePages>().is_err());
    }
}
