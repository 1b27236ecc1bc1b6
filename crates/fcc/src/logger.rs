//! The logical logger (§2.2): the application logs its actions as opaque
//! records; at each point of consistency the tick's records go to the
//! logger thread as one block (group commit per tick), which appends and
//! syncs it. The point of consistency is released only after that sync.
//!
//! The log is split into segments, `log.<t>` holding the ticks after tick
//! `t`; a new segment starts whenever a checkpoint starts (at its tick), so
//! whole segments can be removed once no checkpoint recovery could fall
//! back to needs them.
//!
//! Fail-stop: after a failed append or sync the logger acknowledges
//! nothing more (every later tick gets [`Error::PreviousIo`]).

use crate::error::Error;
use crate::format::{encode_log_block, log_segment_name, parse_log_segment_name};
use crate::io::{Storage, StorageFile};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

enum Msg {
    /// Append and sync the block of `tick`; the payload comes back for reuse.
    Batch {
        tick: u64,
        records: u32,
        payload: Vec<u8>,
    },
    /// Start segment `log.<start>` and remove segments named below
    /// `remove_below`.
    Rotate { start: u64, remove_below: u64 },
}

/// Handle held by the mutator.
pub(crate) struct Logger {
    tx: Option<Sender<Msg>>,
    acks: Receiver<Result<Vec<u8>, Error>>,
    thread: Option<JoinHandle<()>>,
}

impl Logger {
    /// Starts the logger thread writing segment `log.<start>`, after
    /// removing every segment named below `remove_below`.
    pub(crate) fn start(
        storage: Arc<dyn Storage>,
        start: u64,
        remove_below: u64,
    ) -> Result<Self, Error> {
        let file = storage.create(&log_segment_name(start))?;
        remove_segments_below(&*storage, remove_below)?;
        storage.sync_dir()?;
        let (tx, rx) = channel();
        let (ack_tx, acks) = channel();
        let thread = thread::Builder::new()
            .name("fcc-logger".into())
            .spawn(move || logger_loop(storage, file, rx, ack_tx))?;
        Ok(Self {
            tx: Some(tx),
            acks,
            thread: Some(thread),
        })
    }

    /// Group-commits tick `tick` and waits until it is durable. Returns the
    /// (cleared) payload buffer for reuse.
    pub(crate) fn commit(
        &mut self,
        tick: u64,
        records: u32,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        self.submit(tick, records, payload)?;
        self.wait()
    }

    /// Hands tick `tick`'s block to the logger thread without waiting;
    /// [`Logger::wait`] returns once it is durable. Blocks are acknowledged
    /// in the order submitted.
    pub(crate) fn submit(
        &mut self,
        tick: u64,
        records: u32,
        payload: Vec<u8>,
    ) -> Result<(), Error> {
        self.send(Msg::Batch {
            tick,
            records,
            payload,
        })
    }

    /// Waits for the oldest submitted block to be durable; returns its
    /// (cleared) payload buffer.
    pub(crate) fn wait(&mut self) -> Result<Vec<u8>, Error> {
        self.acks.recv().map_err(|_| Error::PreviousIo)?
    }

    /// Starts a new segment at checkpoint tick `start`, removing segments
    /// named below `remove_below`. Ordered with the batches around it.
    pub(crate) fn rotate(&mut self, start: u64, remove_below: u64) -> Result<(), Error> {
        self.send(Msg::Rotate {
            start,
            remove_below,
        })
    }

    fn send(&mut self, msg: Msg) -> Result<(), Error> {
        self.tx
            .as_ref()
            .ok_or(Error::PreviousIo)?
            .send(msg)
            .map_err(|_| Error::PreviousIo)
    }
}

impl Drop for Logger {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn remove_segments_below(storage: &dyn Storage, below: u64) -> Result<(), Error> {
    for name in storage.list()? {
        if parse_log_segment_name(&name).is_some_and(|t| t < below) {
            storage.remove(&name)?;
        }
    }
    Ok(())
}

fn logger_loop(
    storage: Arc<dyn Storage>,
    mut file: Box<dyn StorageFile>,
    rx: Receiver<Msg>,
    acks: Sender<Result<Vec<u8>, Error>>,
) {
    let mut block = Vec::new();
    let mut failed = false;
    for msg in rx {
        match msg {
            Msg::Batch {
                tick,
                records,
                mut payload,
            } => {
                let result = if failed {
                    Err(Error::PreviousIo)
                } else {
                    block.clear();
                    encode_log_block(&mut block, tick, records, &payload);
                    file.append(&block)
                        .and_then(|()| file.sync())
                        .map_err(Error::from)
                };
                failed |= result.is_err();
                payload.clear();
                if acks.send(result.map(|()| payload)).is_err() {
                    return;
                }
            }
            Msg::Rotate {
                start,
                remove_below,
            } => {
                if failed {
                    continue;
                }
                let rotated = storage
                    .create(&log_segment_name(start))
                    .map_err(Error::from)
                    .and_then(|f| {
                        file = f;
                        remove_segments_below(&*storage, remove_below)?;
                        storage.sync_dir().map_err(Error::from)
                    });
                // The error surfaces on the next batch.
                failed |= rotated.is_err();
            }
        }
    }
}
