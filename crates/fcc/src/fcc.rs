//! [`Fcc`]: the mutator's whole interface (§2.2, Interface 1) — the
//! application state, the chosen checkpointing algorithm with its writer
//! thread, and the logical logger.

use crate::algorithm::{build, AnyMutator, Config};
use crate::engine::Engine;
use crate::error::Error;
use crate::io::Storage;
use crate::logger::Logger;
use crate::recovery::Recovered;
use crate::scheme::MutatorScheme;
use std::sync::Arc;

/// Largest application state, in words (a bound, not a target).
pub const STATE_WORDS_MAX: usize = 1 << 34;

/// What a point of consistency did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The newest released tick: its actions (and every earlier tick's) are
    /// durable in the log. Without [`Config::overlap_log_sync`] it is the
    /// tick of this point of consistency; with it, the one before.
    pub tick: u64,
    /// The id of the checkpoint started at this point of consistency, if one
    /// was (it captures the state as of `tick`).
    pub checkpoint_started: Option<u64>,
}

/// Checkpoint recovery for a frequently-consistent application.
///
/// Owned by the one mutator thread. The application state is a flat array
/// of `u64` words; every access goes through [`Fcc::handle_read`] and
/// [`Fcc::handle_write`]. The application logs each action it performs with
/// [`Fcc::log_action`] and calls [`Fcc::point_of_consistency`] whenever its
/// state is consistent (for example at the end of a tick or a transaction);
/// that call group-commits the tick's actions, and at some of them starts a
/// checkpoint that the writer thread writes in the background.
///
/// Recovery ([`crate::recover`]) loads the newest complete checkpoint and
/// replays the logged actions after it, giving the state as of the last
/// released point of consistency (or one later, if its sync completed but
/// the crash came before the release).
pub struct Fcc {
    engine: Engine<AnyMutator>,
    logger: Logger,
    /// The newest point of consistency.
    tick: u64,
    /// The newest released (durable) tick: `tick`, or `tick - 1` while
    /// `tick`'s block is in flight (overlap only).
    released: u64,
    overlap: bool,
    payload: Vec<u8>,
    records: u32,
    /// Tick of the newest checkpoint started.
    last_checkpoint_tick: u64,
}

impl Fcc {
    /// Starts a fresh application with state `initial` at tick 0, writing
    /// checkpoint 1 of it before returning. `storage` should be empty.
    pub fn create(
        storage: Arc<dyn Storage>,
        initial: Vec<u64>,
        config: Config,
    ) -> Result<Self, Error> {
        Self::start(storage, initial, 0, 1, config)
    }

    /// Continues after [`crate::recover`]: checkpoints the recovered state as
    /// the next checkpoint id, then removes the log that recovery replayed.
    /// The algorithm may differ from the one that wrote the files.
    pub fn resume(
        storage: Arc<dyn Storage>,
        recovered: Recovered,
        config: Config,
    ) -> Result<Self, Error> {
        Self::start(
            storage,
            recovered.words,
            recovered.tick,
            recovered.checkpoint_id + 1,
            config,
        )
    }

    fn start(
        storage: Arc<dyn Storage>,
        initial: Vec<u64>,
        tick: u64,
        first_id: u64,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        if initial.is_empty() || initial.len() > STATE_WORDS_MAX {
            return Err(Error::Config("the state must have 1..=2^34 words"));
        }
        let (mutator, writer) = build(&initial, &config);
        drop(initial);
        let engine = Engine::start(
            mutator,
            writer,
            storage.clone(),
            first_id,
            tick,
            config.checkpoint_period_ticks,
        )?;
        // The first checkpoint must be durable before any action is logged
        // against it: recovery always starts from a checkpoint.
        engine.wait_idle()?;
        // Every older segment holds only ticks up to `tick`, now covered.
        let logger = Logger::start(storage, tick, tick)?;
        Ok(Self {
            engine,
            logger,
            tick,
            released: tick,
            overlap: config.overlap_log_sync,
            payload: Vec::new(),
            records: 0,
            last_checkpoint_tick: tick,
        })
    }

    /// `Mutator::HandleRead(index)`: the current value of word `index`.
    /// Panics if `index` is out of range.
    #[inline]
    pub fn handle_read(&self, index: usize) -> u64 {
        self.engine.mutator.handle_read(index)
    }

    /// `Mutator::HandleWrite(index, value)`. Panics if `index` is out of
    /// range.
    #[inline]
    pub fn handle_write(&mut self, index: usize, value: u64) {
        self.engine.mutator.handle_write(index, value)
    }

    /// Logs one application action for the current tick. On recovery the
    /// application's replay function gets exactly these bytes back, in
    /// order; replaying them must redo every write the action made.
    pub fn log_action(&mut self, record: &[u8]) {
        let len = u32::try_from(record.len()).expect("a log record is below 4 GiB");
        self.payload.extend_from_slice(&len.to_le_bytes());
        self.payload.extend_from_slice(record);
        self.records += 1;
    }

    /// `Mutator::PointOfConsistency()`: the state is consistent now.
    ///
    /// Group-commits the actions logged since the previous point of
    /// consistency and waits until they are durable; then, if the writer has
    /// finished the previous checkpoint and the checkpoint period has passed,
    /// calls `PrepareForNextCheckpoint` and notifies the writer (Algorithms
    /// 1 and 2). Never waits for the writer.
    ///
    /// `Ok` means the tick is durable; an error means it was not released
    /// (after a crash it may or may not have reached the disk). Errors are
    /// final: the writer or the logger failed, and every later call fails.
    pub fn point_of_consistency(&mut self) -> Result<Released, Error> {
        // Check the writer before committing, so that an error here never
        // follows a durable commit.
        self.engine.check()?;
        let tick = self.tick + 1;
        let payload = std::mem::take(&mut self.payload);
        if self.overlap {
            // Release the previous tick once its sync is done, then hand
            // this one over without waiting. Blocks stay in tick order, and
            // a block is submitted only after the one before is durable, so
            // the log never holds a tick whose predecessor is missing.
            if self.released < self.tick {
                let mut spare = self.logger.wait()?;
                self.released = self.tick;
                spare.clear();
                self.logger.submit(tick, self.records, payload)?;
                self.payload = spare;
            } else {
                self.logger.submit(tick, self.records, payload)?;
            }
        } else {
            self.payload = self.logger.commit(tick, self.records, payload)?;
            self.released = tick;
        }
        self.records = 0;
        self.tick = tick;
        // With overlap, a checkpoint of `tick` may start (and become
        // durable) before `tick`'s block is: recovery may then return
        // `tick`, one past the released tick — the same outcome as a crash
        // between a sync and its release.
        let started = self.engine.point_of_consistency(tick);
        if let Some(s) = started {
            // Checkpoint `s.id - 1` is durable and becomes the fallback;
            // ticks up to its tick are no longer needed. A failure to send
            // surfaces at the next commit.
            let _ = self.logger.rotate(tick, self.last_checkpoint_tick);
            self.last_checkpoint_tick = s.tick;
        }
        Ok(Released {
            tick: self.released,
            checkpoint_started: started.map(|s| s.id),
        })
    }

    /// Waits until every point of consistency so far is durable (with
    /// [`Config::overlap_log_sync`], the last one may still be in flight);
    /// returns the released tick.
    pub fn sync_log(&mut self) -> Result<u64, Error> {
        if self.released < self.tick {
            let mut spare = self.logger.wait()?;
            spare.clear();
            if self.payload.capacity() == 0 {
                self.payload = spare;
            }
            self.released = self.tick;
        }
        Ok(self.released)
    }

    /// The newest point of consistency. Its actions are durable unless
    /// [`Config::overlap_log_sync`] is on and its sync is still in flight
    /// (see [`Fcc::released_tick`]).
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// The newest tick known durable (released).
    pub fn released_tick(&self) -> u64 {
        self.released
    }

    /// Size of the application state in words.
    pub fn words(&self) -> usize {
        self.engine.mutator.words()
    }

    /// The id of the newest durable checkpoint.
    pub fn durable_checkpoint(&self) -> u64 {
        self.engine.completed()
    }

    /// Whether the writer is idle (every started checkpoint is durable).
    pub fn writer_done(&self) -> bool {
        self.engine.writer_done()
    }

    /// Blocks until every started checkpoint is durable. For tests and
    /// orderly shutdown; the mutator never needs it.
    pub fn wait_for_checkpoints(&self) -> Result<(), Error> {
        self.engine.wait_idle()
    }

    /// Copies the current state out (through `handle_read`).
    pub fn snapshot(&self) -> Vec<u64> {
        (0..self.words()).map(|i| self.handle_read(i)).collect()
    }
}
