//! Configuration of a [`Wal`](crate::Wal) and the limits derived from it.

use crate::error::WalError;
use crate::format::ENTRY_OVERHEAD_BYTES;

/// How the log tracks LSN holes (the pipeline's second stage). All three
/// share the ring buffer, the flusher, the file format and recovery, so they
/// can be run side by side (eleda §6.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogKind {
    /// ELEDA: LSNs by fetch-add, concurrent copies, GRASSHOPPER (hopping
    /// index, per-thread grasshopper lists, LSN-heap) advancing SBL in a
    /// dedicated worker thread (§3–§4).
    #[default]
    Grasshopper,
    /// The "vanilla" centralized log of §2.2.1: reserve, copy and publish
    /// under one global mutex; SBL is simply the end of the last copy.
    Vanilla,
    /// The linear scanning baseline of §6.5.1 / Figure 21: one bit per byte
    /// of the log buffer, set by database threads after their copy; the
    /// worker scans the bitmap to advance SBL.
    BitmapScan,
}

/// Options of [`Wal::open`](crate::Wal::open). Units are last in each name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// How SBL is advanced.
    pub kind: LogKind,
    /// The flusher writes the log in chunks that never cross a multiple of
    /// this size (eleda §4.3; 64 KiB in §6.1). A power of two.
    pub io_unit_bytes: usize,
    /// Size of the central ring log buffer (32 MiB in §6.1). A power of two
    /// and a multiple of `io_unit_bytes`; bounds the size of one entry.
    pub buffer_bytes: usize,
    /// `H`: the hopping distance is `2^H` bytes (4 MiB, `H = 22`, in §6.1).
    /// The worker hops a range only once it is full and crawls the one the
    /// newest entry is in, reading each entry's node (a line its database
    /// thread then has to take back), unless `sbl_catch_up` spares it that.
    /// Without the catch-up, a distance far above the bytes that arrive
    /// between two worker passes leaves it crawling nearly everything: at one database thread of 128 B records, 8–16 KiB hops
    /// took the node-per-entry path from 0.83–0.85 to 0.95–1.02 of the
    /// mutex log; 4 KiB records lost 3–12% to the h-node each range and
    /// thread costs until those came from a ring of their own
    /// (`grasshopper/hslab.rs`); BENCHMARKS.md, session 33.
    pub hop_shift: u32,
    /// Beyond the paper: inside a range that is not full, the worker first
    /// checks whether every byte below the lists' newest node is buffered
    /// (the range's count against the highest tail end) and then moves SBL
    /// there and each list's head to its tail, without crawling the nodes
    /// in between (`GhWorker::catch_up`). `false`: the paper's Algorithm 1
    /// alone.
    pub sbl_catch_up: bool,
    /// A log file is closed and a new one started at the first flush
    /// boundary after it reaches this size.
    pub file_max_bytes: u64,
    /// After a pass that advanced SBL by less than an I/O unit, the ELEDA
    /// worker sleeps this many microseconds before the next, so that
    /// entries accumulate and it reads them in batches rather than one
    /// cache miss at a time, and leaves its core to the flusher. It adds
    /// at most this to the time an entry waits for SBL (on Linux the
    /// worker tightens its timer slack to match). 0: the worker polls continuously (spinning, then yielding,
    /// then sleeping on a bell while nothing is reserved).
    pub worker_pace_us: u64,
    /// Beyond the paper: a database thread that finds no pass of the
    /// worker's Algorithm 1 has run for this many microseconds while
    /// entries wait beyond SBL runs one itself, if the worker is not in one
    /// (the worker's state is behind a lock that only this hand-over
    /// contends); a thread waiting in [`ThreadHandle::wait_durable`] does
    /// so at once. It cannot shorten a wait behind a hole: an owner
    /// preempted between its reservation and its enqueue (more database
    /// threads than cores) holds SBL until it runs again.
    /// The paper gives the worker a core of its own; where the database
    /// threads hold every core, the worker waits for the scheduler after
    /// each nap, and commits waited with it: on two cores, two pinned
    /// database threads had a commit p50 of 2.1 ms without help and 0.44 ms
    /// with it, the mutex log's 0.42 ms, for 5–8% of GRASSHOPPER's
    /// throughput (BENCHMARKS.md, session 60). 0: never help, the paper's
    /// pipeline.
    ///
    /// [`ThreadHandle::wait_durable`]: crate::ThreadHandle::wait_durable
    pub worker_help_after_us: u64,
    /// Beyond the paper (GRASSHOPPER only): a database thread that finds
    /// more than this many bytes reserved but not yet durable (LSN
    /// sequencer − SDL) yields its core once, looking every few appends
    /// as for [`WalOptions::worker_help_after_us`]. Whatever the backlog
    /// waits for — the flusher, the worker, or the owner of a hole that
    /// was preempted between its reservation and its enqueue — then gets a
    /// core sooner. It matters with more database threads than cores:
    /// GRASSHOPPER's threads never wait for one another, so there they
    /// filled the 32 MiB ring before the flusher ran again, and a commit
    /// waited for the ring to drain, while the mutex log's threads sleep on
    /// its lock and leave their cores. On two vCPUs, 128 B entries on the
    /// null device, 8 and 32 threads: commit p50 23 and 42 ms without,
    /// 3.4 and 5.8 ms with 4 MiB (the default), 0.7 and 1.2 ms with 1 MiB
    /// (the mutex log's 0.46 and 0.58 ms). 4 MiB cost no throughput there
    /// (1.00× and 1.06× of without), nor to the engine's `wal` mode at two
    /// pinned YCSB workers (0.99×, where it rarely fires), and 0.95× at
    /// eight (90% interval 0.91–1.02; p99 to durability 95–200 → 62–64
    /// ms). 1 MiB cost 0.95× of the log's throughput at 8 threads and the
    /// engine 0.96× at two workers and 0.88× at eight: a smaller bound
    /// trades group-commit size for latency (BENCHMARKS.md, session 63).
    /// Where each thread has a core the yield returns at once. 0: never
    /// yield, the paper's pipeline.
    pub yield_backlog_bytes: u64,
    /// Beyond the paper (GRASSHOPPER only): the flusher runs a pass of the
    /// worker's Algorithm 1 itself right after each flush, and a worker
    /// that finds a flush running for 500 µs sleeps until the flusher goes
    /// idle. SBL
    /// matters only to the flusher, which reads it once per flush, so a
    /// pass during a flush only readies bytes for the next one. On the
    /// disk a flush takes milliseconds, and the worker's naps through it
    /// (~50,000 timer wake-ups a second on the flusher's core) slowed the
    /// flush's own writes: a program doing nothing but such naps beside the
    /// mutex log cost it 2–18%. One pinned database thread, 4 KiB records
    /// on the disk: GRASSHOPPER over the mutex log 1.00 with this against
    /// 0.95 without (8 alternated rounds, every one faster with it); two
    /// pinned threads on the null device 1.15× the throughput; one thread
    /// there level (BENCHMARKS.md, session 61). `false`: the paper's
    /// pipeline, the worker alone moves SBL.
    pub flusher_passes: bool,
    /// The flusher writes past the page cache (`O_DIRECT` where the file
    /// system allows it), each write padded to whole 4 KiB blocks and the
    /// padding cut off when a file is closed. No copy into the page cache
    /// and no writeback at the sync; the cost is that a write waits for
    /// the device. Opening the log reads it past the page cache too.
    pub direct_io: bool,
    /// Beyond the paper: how many of a flush's I/O units the flusher keeps
    /// in flight at once when it writes the ring in place
    /// ([`WalOptions::writes_in_place`]). Above 1 the active log file is
    /// preallocated to `file_max_bytes`, since ext4 runs direct writes side
    /// by side only where they overwrite allocated blocks. SDL still moves
    /// only after every unit of the flush is written and synced, so the
    /// log stays a hole-free prefix at every SDL (eleda §6.5.3 leaves
    /// "multiple flushers" open for the sake of that order). 64 KiB units
    /// one at a time wrote 4 KiB records at a third of the disk's speed
    /// (BENCHMARKS.md, session 57). 1: one write at a time, as the paper.
    /// A small flush is written by fewer threads: see
    /// [`WalOptions::io_depth_min_bytes`].
    pub io_depth: usize,
    /// A flush is split among threads only where each gets at least this
    /// many bytes: a helper thread's spawn and join cost more than the
    /// overlap gains on a small flush. With a helper for every flush that
    /// spanned two 64 KiB units, the engine's `wal` mode ran 4.5% slower
    /// at one worker on two cores than with one write at a time
    /// (BENCHMARKS.md, session 58). 0 or 1: every flush of several units
    /// is split.
    pub io_depth_min_bytes: usize,
    /// Beyond the paper: when the flusher writes the ring in place
    /// ([`WalOptions::writes_in_place`]) and a flush spans several I/O
    /// units, adjacent units go out in one request of up to this many
    /// bytes (a power of two; capped at the ring's size), cut where a
    /// multiple of it falls. The I/O unit keeps its role for a small flush
    /// (a unit or less is written as soon as it is buffered, for latency),
    /// but a backlog is written in requests the device runs at full speed:
    /// eleda §6.5.3 found 64 KiB units reach about half the device's
    /// bandwidth and 512 KiB units all of it, and chose between latency and
    /// bandwidth with the unit; here GRASSHOPPER's 4 KiB records with
    /// 64 KiB units went from 0.62 of the disk to 0.82 (medians of four
    /// alternated rounds, 1.33× the transactions; BENCHMARKS.md, session
    /// 60). 0, or no more than `io_unit_bytes`: one request per unit, as
    /// the paper.
    pub write_coalesce_bytes: usize,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            kind: LogKind::Grasshopper,
            io_unit_bytes: 64 << 10,
            buffer_bytes: 32 << 20,
            hop_shift: 22,
            sbl_catch_up: true,
            file_max_bytes: 256 << 20,
            worker_pace_us: 20,
            worker_help_after_us: 100,
            yield_backlog_bytes: 4 << 20,
            flusher_passes: true,
            direct_io: true,
            io_depth: 8,
            io_depth_min_bytes: 256 << 10,
            write_coalesce_bytes: 512 << 10,
        }
    }
}

/// The most I/O units one flush keeps in flight (each on a thread).
const IO_DEPTH_MAX: usize = 64;

/// The largest `hop_shift` accepted (1 TiB hops: far beyond any buffer).
const HOP_SHIFT_MAX: u32 = 40;

impl WalOptions {
    /// Checks the options' relations; every limit the log relies on is
    /// asserted here once.
    pub fn validate(&self) -> Result<(), WalError> {
        let bad = |why: String| Err(WalError::BadOptions(why));
        if !self.io_unit_bytes.is_power_of_two() {
            return bad(format!(
                "io_unit_bytes {} is not a power of two",
                self.io_unit_bytes
            ));
        }
        if !self.buffer_bytes.is_power_of_two() || self.buffer_bytes < self.io_unit_bytes {
            return bad(format!(
                "buffer_bytes {} must be a power of two and at least io_unit_bytes {}",
                self.buffer_bytes, self.io_unit_bytes
            ));
        }
        if self.buffer_bytes < 2 * ENTRY_OVERHEAD_BYTES {
            return bad(format!("buffer_bytes {} is too small", self.buffer_bytes));
        }
        if self.hop_shift > HOP_SHIFT_MAX {
            return bad(format!(
                "hop_shift {} exceeds {HOP_SHIFT_MAX}",
                self.hop_shift
            ));
        }
        if !(1..=IO_DEPTH_MAX).contains(&self.io_depth) {
            return bad(format!(
                "io_depth {} must be between 1 and {IO_DEPTH_MAX}",
                self.io_depth
            ));
        }
        if self.write_coalesce_bytes != 0 && !self.write_coalesce_bytes.is_power_of_two() {
            return bad(format!(
                "write_coalesce_bytes {} is neither 0 nor a power of two",
                self.write_coalesce_bytes
            ));
        }
        if self.file_max_bytes == 0 {
            return bad("file_max_bytes must be positive".to_string());
        }
        Ok(())
    }

    /// The largest entry (header included) one append may write: it must
    /// fit the ring, or its writer could never find room (§4.1.1's
    /// "consumer never overruns the producer" read the other way round).
    ///
    /// When the flusher writes the ring in place ([`WalOptions::writes_in_place`]),
    /// the ring's last flushed block stays reserved (the next flush writes
    /// it again), so one block less.
    pub fn entry_max_bytes(&self) -> usize {
        (self.buffer_bytes - self.in_place_guard() as usize)
            .min(epochdb_storage::BLOCK_PAYLOAD_MAX_BYTES + epochdb_storage::BLOCK_HEADER_BYTES)
    }

    /// Whether the flusher writes the ring's blocks to the file as they
    /// are, without copying them: with direct writes, I/O units of whole
    /// 4 KiB blocks, and a ring of at least two units (so the block it
    /// keeps reserved leaves room for entries).
    pub fn writes_in_place(&self) -> bool {
        self.direct_io
            && self.io_unit_bytes >= epochdb_storage::DIRECT_ALIGN
            && self.buffer_bytes >= 2 * self.io_unit_bytes
    }

    /// The most bytes one in-place write covers: the I/O unit, or adjacent
    /// units up to `write_coalesce_bytes` (within the ring, whose end is a
    /// multiple of it, both being powers of two).
    pub(crate) fn in_place_write_bytes(&self) -> u64 {
        let coalesce = self.write_coalesce_bytes.min(self.buffer_bytes);
        self.io_unit_bytes.max(coalesce) as u64
    }

    /// The granule below which SDL's block stays reserved in the ring:
    /// 4096 when the flusher writes in place (it rewrites the block SDL
    /// lies in, from the ring), else 0 (nothing kept).
    pub(crate) fn in_place_guard(&self) -> u64 {
        if self.writes_in_place() {
            epochdb_storage::DIRECT_ALIGN as u64
        } else {
            0
        }
    }
}
