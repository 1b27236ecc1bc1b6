//! The big arrays of every algorithm (states, copies, bit arrays, records),
//! mapped straight from the kernel so that they can ask for transparent huge
//! pages (§5.6: "Using large pages resulted in a considerable performance
//! improvement"), and so that an array's pages go back to the kernel when it
//! is dropped (back-to-back benchmark runs do not inherit each other's page
//! sizes through the allocator).
//!
//! This is the crate's only `unsafe` code. [`Region`] holds `len` values of
//! a [`Zeroable`] type in an anonymous private mapping: such a mapping reads
//! as zeros, which is a valid value of every `Zeroable` type, so the region
//! is initialised from the moment it exists.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

/// Whether the algorithms' arrays ask for transparent huge pages (§5.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HugePages {
    /// Leave it to the system setting
    /// (`/sys/kernel/mm/transparent_hugepage/enabled`).
    #[default]
    Default,
    /// `madvise(MADV_HUGEPAGE)` on every array before its first touch.
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

/// Types for which all-zero bytes are a valid value and that own nothing.
///
/// # Safety
///
/// An implementor must be valid when every byte is zero and must not need
/// dropping.
pub(crate) unsafe trait Zeroable: Sized {}
// SAFETY: integers and atomics of integers are valid as zero and own nothing.
unsafe impl Zeroable for u64 {}
// SAFETY: as above.
unsafe impl Zeroable for u8 {}
// SAFETY: as above.
unsafe impl Zeroable for AtomicU64 {}
// SAFETY: as above.
unsafe impl Zeroable for AtomicU32 {}
// SAFETY: as above.
unsafe impl Zeroable for AtomicU8 {}
// SAFETY: as above, element-wise.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] {}

/// `len` values of `T` in their own anonymous mapping.
pub(crate) struct Region<T: Zeroable> {
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
    pub(crate) fn new(len: usize, huge: HugePages, mut f: impl FnMut(usize) -> T) -> Self {
        let mut region = Self::zeroed(len, huge);
        for (i, slot) in region.iter_mut().enumerate() {
            *slot = f(i);
        }
        region
    }

    /// A copy of `init`.
    pub(crate) fn copy_of(init: &[T], huge: HugePages) -> Self
    where
        T: Copy,
    {
        let mut region = Self::zeroed(init.len(), huge);
        region.copy_from_slice(init);
        region
    }

    /// `len` zeroed values, every page faulted in.
    pub(crate) fn zeroed(len: usize, huge: HugePages) -> Self {
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
        // SAFETY: an anonymous private mapping of `bytes` bytes at an
        // address of the kernel's choosing touches no existing memory.
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
            // SAFETY: the range is exactly the mapping just made; this
            // advice changes only the page size backing it, never its
            // contents. Failure (a kernel without THP) only loses the hint.
            let _ = unsafe { libc::madvise(addr, bytes, advice) };
        }
        // Fault every page in now, in the page size just chosen, so that no
        // run pays first-touch faults inside its measured intervals.
        // SAFETY: as above; populating writes nothing visible (the pages
        // read as zeros either way).
        let populated = unsafe { libc::madvise(addr, bytes, libc::MADV_POPULATE_WRITE) } == 0;
        if !populated {
            // Kernels before 5.14: touch every byte instead.
            // SAFETY: `addr` is a fresh writable mapping of `bytes` bytes.
            unsafe { std::ptr::write_bytes(addr.cast::<u8>(), 0, bytes) };
        }
        Self {
            ptr: NonNull::new(addr.cast::<T>()).expect("mmap returned null"),
            len,
            mapped: bytes,
            _owns: PhantomData,
        }
    }
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
        if self.mapped > 0 {
            // SAFETY: unmaps exactly the mapping made in `zeroed`; no
            // reference into it outlives `self`. `T` needs no drop.
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
            }
        }
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

/// Anonymous memory this process has in transparent huge pages, in bytes
/// (`AnonHugePages` in `/proc/self/smaps_rollup`; 0 where unreadable).
pub fn anon_huge_page_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn regions_start_as_asked_and_hold_values() {
        for huge in [HugePages::Default, HugePages::On, HugePages::Off] {
            let r = Region::new(10_000, huge, |i| AtomicU64::new(i as u64 * 3));
            assert_eq!(r.len(), 10_000);
            assert_eq!(r[9_999].load(Relaxed), 29_997);
            let z: Region<u8> = Region::zeroed(5000, huge);
            assert!(z.iter().all(|&b| b == 0));
            let c = Region::copy_of(&[1u64, 2, 3], huge);
            assert_eq!(&c[..], &[1, 2, 3]);
        }
        let empty: Region<u64> = Region::zeroed(0, HugePages::On);
        assert!(empty.is_empty());
    }
}
