//! The mutator/writer pair and their one point of contact: the handshake
//! at points of consistency (§2.2; Algorithm 1 and 2, `PointOfConsistency`
//! and `WaitForMutatorNotification`).
//!
//! Protocol (two counters, each written by one thread):
//!
//! * `requested` — written by the mutator: the id of the newest checkpoint
//!   it asked for. Stored with `Release` *after* `PrepareForNextCheckpoint`,
//!   so the writer, loading it with `Acquire`, sees every word the mutator
//!   wrote up to that point of consistency.
//! * `completed` — written by the writer: the id of the newest checkpoint
//!   that is durable. Stored with `Release` after the writer's last read of
//!   the shared state for that checkpoint, so the mutator, loading it with
//!   `Acquire`, may hand those words back to itself.
//!
//! "Asynchronous Writer done" is `completed == requested`. The mutator never
//! waits for the writer inside `PointOfConsistency`: if the writer is still
//! busy, the next checkpoint simply starts at a later point of consistency.
//! That is what keeps the wait-free algorithms wait-free within a period
//! (§3.1). The writer parks while idle; the mutator unparks it (a wake-up,
//! not a lock).

use crate::error::Error;
use crate::format::{ckpt_slot_name, CkptHeader};
use crate::io::Storage;
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// State shared by the mutator and the writer thread.
#[derive(Debug, Default)]
struct Handshake {
    requested: CachePadded<AtomicU64>,
    completed: CachePadded<AtomicU64>,
    /// The tick of checkpoint `requested`; written before `requested`.
    requested_tick: AtomicU64,
    /// Set once the writer has failed; it writes nothing more.
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    shutdown: AtomicBool,
}

/// What a point of consistency did about checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Started {
    pub(crate) id: u64,
    pub(crate) tick: u64,
}

/// A mutator scheme plus its asynchronous writer thread.
pub(crate) struct Engine<M: MutatorScheme> {
    pub(crate) mutator: M,
    hs: Arc<Handshake>,
    writer: Option<JoinHandle<()>>,
    /// Mutator's copy of `requested`.
    requested: u64,
    /// Tick at which the newest checkpoint was started.
    last_start_tick: u64,
    period_ticks: u64,
}

impl<M: MutatorScheme> Engine<M> {
    /// Starts the writer thread and notifies it of checkpoint `first_id`:
    /// the scheme's initial configuration, i.e. the state at `tick`.
    pub(crate) fn start<W: ImageWriter>(
        mutator: M,
        writer: W,
        storage: Arc<dyn Storage>,
        first_id: u64,
        tick: u64,
        period_ticks: u64,
    ) -> Result<Self, Error> {
        assert!(first_id >= 1, "checkpoint ids start at 1");
        let hs = Arc::new(Handshake::default());
        hs.completed.store(first_id - 1, Ordering::Relaxed);
        hs.requested.store(first_id - 1, Ordering::Relaxed);
        let words = mutator.words() as u64;
        let thread_hs = hs.clone();
        let handle = thread::Builder::new()
            .name("fcc-writer".into())
            .spawn(move || writer_loop(writer, &thread_hs, &*storage, words))?;
        let mut engine = Self {
            mutator,
            hs,
            writer: Some(handle),
            requested: first_id - 1,
            last_start_tick: tick,
            period_ticks: period_ticks.max(1),
        };
        engine.notify(tick);
        Ok(engine)
    }

    fn notify(&mut self, tick: u64) {
        self.requested += 1;
        self.last_start_tick = tick;
        self.hs.requested_tick.store(tick, Ordering::Relaxed);
        // Release: publishes the mutator's writes up to this point of
        // consistency (and `requested_tick`) to the writer.
        self.hs.requested.store(self.requested, Ordering::Release);
        if let Some(w) = &self.writer {
            w.thread().unpark();
        }
    }

    /// Whether the writer has finished every requested checkpoint.
    #[inline]
    pub(crate) fn writer_done(&self) -> bool {
        // Acquire: pairs with the writer's Release of `completed`, after its
        // last read of the shared state for that checkpoint.
        self.hs.completed.load(Ordering::Acquire) == self.requested
    }

    /// Fails if the writer has failed (fail-stop: its error once, then
    /// [`Error::PreviousIo`]).
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.hs.failed.load(Ordering::Acquire) {
            return Err(self.take_error());
        }
        Ok(())
    }

    /// `Mutator::PointOfConsistency()` at `tick`: if the writer is done and
    /// the checkpoint period has elapsed, prepares and starts the next
    /// checkpoint. A failed writer is never done, so after a failure no
    /// checkpoint starts; [`Engine::check`] reports it.
    pub(crate) fn point_of_consistency(&mut self, tick: u64) -> Option<Started> {
        self.point_of_consistency_then(tick, || {})
    }

    /// [`Engine::point_of_consistency`], calling `before_notify` after
    /// `PrepareForNextCheckpoint` and before the writer is woken (the
    /// benchmark stops its clock there: in §5.1 the writer is off, and
    /// waking it can hand the mutator's core to it for a scheduler slice).
    pub(crate) fn point_of_consistency_then(
        &mut self,
        tick: u64,
        before_notify: impl FnOnce(),
    ) -> Option<Started> {
        if tick - self.last_start_tick >= self.period_ticks && self.writer_done() {
            self.mutator.prepare_for_next_checkpoint();
            before_notify();
            self.notify(tick);
            return Some(Started {
                id: self.requested,
                tick,
            });
        }
        None
    }

    fn take_error(&self) -> Error {
        self.hs
            .error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(Error::PreviousIo)
    }

    /// Id of the newest durable checkpoint.
    pub(crate) fn completed(&self) -> u64 {
        self.hs.completed.load(Ordering::Acquire)
    }

    /// Blocks until every requested checkpoint is durable (setup, tests and
    /// shutdown only — never on the point-of-consistency path).
    pub(crate) fn wait_idle(&self) -> Result<(), Error> {
        loop {
            if self.writer_done() {
                return Ok(());
            }
            if self.hs.failed.load(Ordering::Acquire) {
                return Err(self.take_error());
            }
            thread::sleep(Duration::from_micros(200));
        }
    }
}

impl<M: MutatorScheme> Drop for Engine<M> {
    fn drop(&mut self) {
        self.hs.shutdown.store(true, Ordering::Release);
        if let Some(w) = self.writer.take() {
            w.thread().unpark();
            // A writer panic is a bug; it has already been reported.
            let _ = w.join();
        }
    }
}

/// `AsynchronousWriter::WriteToStableStorage()`.
fn writer_loop<W: ImageWriter>(mut writer: W, hs: &Handshake, storage: &dyn Storage, words: u64) {
    let mut done = hs.completed.load(Ordering::Acquire);
    let mut first_pass = true;
    let mut prev_tick = 0;
    loop {
        // WaitForMutatorNotification().
        let id = loop {
            let requested = hs.requested.load(Ordering::Acquire);
            if requested > done {
                break requested;
            }
            if hs.shutdown.load(Ordering::Acquire) {
                return;
            }
            thread::park();
        };
        assert_eq!(
            id,
            done + 1,
            "the mutator requests one checkpoint at a time"
        );
        let tick = hs.requested_tick.load(Ordering::Relaxed);
        let prev = (!first_pass).then_some(CkptHeader {
            id: done,
            tick: prev_tick,
            words,
        });
        let header = CkptHeader { id, tick, words };
        match write_checkpoint(&mut writer, storage, header, prev) {
            Ok(()) => {
                done = id;
                first_pass = false;
                prev_tick = tick;
                // Release: the mutator may reuse what this pass read.
                hs.completed.store(id, Ordering::Release);
            }
            Err(e) => {
                *hs.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                hs.failed.store(true, Ordering::Release);
                return;
            }
        }
    }
}

/// Writes checkpoint `header.id` into its slot of the double backup. The
/// other slot holds checkpoint `id - 1`, which stays untouched until this
/// one is synced (§2.2, "double-backup organization").
fn write_checkpoint<W: ImageWriter>(
    writer: &mut W,
    storage: &dyn Storage,
    header: CkptHeader,
    prev: Option<CkptHeader>,
) -> Result<(), Error> {
    let name = ckpt_slot_name(header.id);
    let mut file = storage.create(&name)?;
    let mut prev_image = match prev {
        Some(p) if writer.reads_previous() => Some(PrevImage::open(storage, p)?),
        _ => None,
    };
    let mut sink = WordSink::new(&mut *file, &header);
    writer.write_image(prev_image.as_mut(), &mut sink)?;
    // Verify the previous image before the trailer makes the new one valid.
    if let Some(p) = prev_image {
        p.finish()?;
    }
    let written = sink.finish()?;
    assert_eq!(
        written, header.words,
        "the image has every word exactly once"
    );
    file.sync()?;
    storage.sync_dir()?;
    Ok(())
}
