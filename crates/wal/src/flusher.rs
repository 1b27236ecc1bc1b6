//! The ELEDA flusher (eleda §4.3): writes `[SDL, SBL)` to the active log
//! file in I/O units, syncs, persists SDL, and only then publishes it.
//! With direct writes the units go from the ring to the file in place
//! (`ActiveFile::append_in_place`); otherwise, and where that cannot be
//! done, they are copied out of the ring first.
//!
//! **SDL is persisted before it is published** (the paper stores SDL after
//! advancing it). Publishing first would let a callback acknowledge an
//! entry that lies above the SDL on disk; a bit flip there would look to
//! recovery like a torn tail and be cut off silently. Persisting first
//! costs a second sync per flush and makes the on-disk SDL an upper bound
//! of everything ever acknowledged, so recovery can call any damage below
//! it corruption.
//!
//! A failed write or sync latches the log (fail-stop): SDL never moves
//! again, the storage itself refuses further I/O, and every waiting
//! callback receives the error.

use std::path::PathBuf;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

use epochdb_storage::Storage;

use crate::core::{Core, CLOSING, FAILED, RUNNING};
use crate::error::WalError;
use crate::segments::{create_log_file, ActiveFile, FileList, SdlFile, WriteMode};
use crate::sync::Backoff;

/// The flusher thread's state.
pub(crate) struct Flusher {
    pub(crate) core: Arc<Core>,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) dir: PathBuf,
    pub(crate) active: ActiveFile,
    pub(crate) sdl_file: SdlFile,
    pub(crate) files: FileList,
    pub(crate) mode: WriteMode,
}

impl Flusher {
    /// The thread body: flush while SBL is ahead; stop once closing and
    /// drained, or on failure.
    pub(crate) fn run(mut self) {
        let mut sdl = self.core.sdl.load(Relaxed);
        let mut backoff = Backoff::new();
        loop {
            // Acquire: the ring bytes below SBL are visible (Spec3: the
            // flusher consumes only what the worker produced).
            let sbl = self.core.sbl.load(Acquire);
            if sbl > sdl {
                self.core.begin_flush();
                if let Err(e) = self.flush(sdl, sbl) {
                    self.core.fail(e);
                    return;
                }
                sdl = sbl;
                backoff.reset();
                // What was buffered during the flush, for the next one
                // (the worker may have rested through it).
                self.core.flusher_pass();
                continue;
            }
            match self.core.state() {
                FAILED => return,
                CLOSING if sdl == self.core.next_lsn.load(Acquire) => {
                    // Leave the last file without direct writes' padding.
                    if let Err(e) = self.active.seal() {
                        self.core.fail(e);
                        return;
                    }
                    self.core.mark_stopped();
                    return;
                }
                _ => {
                    let core = &*self.core;
                    core.end_flushing();
                    backoff.idle(&core.flusher_bell, || {
                        core.sbl.load(Acquire) > sdl || core.state() != RUNNING
                    });
                }
            }
        }
    }

    /// Writes `[from, to)`, syncs, persists `to` as SDL, publishes it, and
    /// rotates the file if it is full.
    fn flush(&mut self, from: u64, to: u64) -> Result<(), WalError> {
        let io_unit = self.core.options.io_unit_bytes as u64;
        let mut at = from;
        if self.core.options.writes_in_place() {
            // SAFETY: `[from, to)` lies in `[SDL, SBL)` (SBL loaded with
            // Acquire), `from` is the file's end, and `Core::has_space`
            // keeps SDL's block from writers until SDL moves on.
            if let Some(result) = unsafe { self.active.append_in_place(&self.core.ring, from, to) }
            {
                result?;
                at = to;
            }
        }
        if at < to && to - from > io_unit {
            // Several units: each write (one unit and the block carried from
            // the last, cut at file blocks) runs on a thread of its own while
            // the next one's bytes are copied out of the ring. Copying first
            // and writing after left the disk idle for the copy: GRASSHOPPER's
            // flusher wrote 4 KiB records at 0.83 GB/s, 1.11 with the overlap
            // (BENCHMARKS.md, session 45).
            let core = &self.core;
            let overlapped = self
                .active
                .append_overlapped((to - from) as usize, |offset, out| {
                    let mut put = 0;
                    // SAFETY: as for the writes below: `[from, to)` lies in
                    // `[SDL, SBL)`, published and not reused before SDL passes it.
                    unsafe {
                        core.ring.read(from + offset as u64, out.len(), |bytes| {
                            out[put..put + bytes.len()].copy_from_slice(bytes);
                            put += bytes.len();
                        });
                    }
                });
            if let Some(result) = overlapped {
                result?;
                at = to;
            }
        }
        while at < to {
            // A write never crosses an I/O unit boundary of the LSN space
            // (nor, the ring being a multiple of the unit, the ring's end).
            let end = to.min((at / io_unit + 1) * io_unit);
            let mut result = Ok(());
            // SAFETY: `[at, end)` lies in `[SDL, SBL)`: written and published
            // (SBL loaded with Acquire), and no writer reuses it before we
            // publish an SDL past it.
            unsafe {
                self.core.ring.read(at, (end - at) as usize, |bytes| {
                    if result.is_ok() {
                        result = self.active.append(bytes);
                    }
                });
            }
            result?;
            at = end;
        }
        self.active.file.sync()?;
        self.sdl_file.persist(to)?;
        self.active.len += to - from;
        self.core.publish_sdl(to);
        self.core.counters.flushes.fetch_add(1, Relaxed);
        self.core
            .counters
            .flushed_bytes
            .fetch_add(to - from, Relaxed);
        if self.active.len >= self.core.options.file_max_bytes {
            // `to` is an entry end (SBL always is), so no entry spans files.
            // The full file loses its padding (and that is synced) before
            // the next file exists: only the last file may have a tail
            // that does not decode.
            self.active.seal()?;
            self.active = create_log_file(&*self.storage, &self.dir, to, self.mode)?;
            self.files
                .lock()
                .push((to, self.dir.join(crate::format::log_file_name(to))));
        }
        Ok(())
    }
}
