//! A loom model of SiloR's persistent-epoch handshake (silor §3.5 steps
//! 1–4) as `silor/worker_log.rs` and `silor/logger.rs` implement it:
//!
//! * a worker takes its slot's lock *before* it reads `E` for its commit's
//!   TID and holds it until its record is in its buffer; when its epoch
//!   changes it hands the old buffer over (a channel to the logger) and
//!   only then raises `e_w` (`fetch_max`);
//! * the logger reads `E` first (the cap), then for each worker: if the
//!   slot's lock is free it takes a stale buffer (epoch < `E` read under the
//!   lock) and writes it, and raises that worker's `e_w` to that `E`; `e_l`
//!   is the minimum of the cap and every `e_w`; it writes what the channel
//!   holds, and publishes `e_l`.
//!
//! Checked over every interleaving (bounded): whenever `e_l` is published,
//! every record of an epoch below it is already written — including
//! records committed after the publication (a worker that read a stale
//! `E` would break it). Also: the buffer is never touched by two threads
//! without happens-before (loom's cell checks), and `e_l` never decreases.
//!
//! The models can fail: reading `E` before taking the slot's lock, or
//! raising `e_w` before handing the old buffer over, each make them report
//! an `e_l` published before a record below it was written (checked
//! 2026-11-23).
//!
//! This is a model of the protocol (same steps, same orderings, loom's
//! atomics), not the engine's code run under loom: the engine's slot, log
//! buffer and logger sit on file I/O and channels loom cannot run, and the
//! engine does not build under `cfg(loom)`. It lives here, beside the
//! epoch framework's own models, because this crate builds under loom.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -j 1 -p epochdb-epoch --release --test loom_persistent_epoch
//! ```
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU64};
use loom::sync::{Arc, Mutex};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// A record: (worker, sequence number, epoch).
type Record = (usize, u64, u64);

/// A worker's buffer: its epoch and records.
#[derive(Default)]
struct Buffer {
    epoch: u64,
    records: Vec<Record>,
}

/// `WorkerSlot`: a spin lock, the buffer it guards, and `e_w`.
struct Slot {
    busy: AtomicBool,
    buffer: UnsafeCell<Buffer>,
    e_w: AtomicU64,
}

impl Slot {
    fn lock(&self) {
        while self
            .busy
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            loom::thread::yield_now();
        }
    }

    fn try_lock(&self) -> bool {
        self.busy
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_ok()
    }

    fn unlock(&self) {
        self.busy.store(false, Release);
    }
}

struct Shared {
    epoch: AtomicU64,
    slots: Vec<Slot>,
    /// Buffers handed to the logger (`LoggerShared::full`).
    channel: Mutex<Vec<Buffer>>,
}

/// `SilorWorkerLog::begin_commit` + `log_commit` for one commit.
fn commit(shared: &Shared, worker: usize, seq: u64) -> Record {
    let slot = &shared.slots[worker];
    slot.lock();
    // The serialization point: E read with the slot held.
    let epoch = shared.epoch.load(SeqCst);
    let record = (worker, seq, epoch);
    let (handed, changed) = slot.buffer.with_mut(|b| {
        // SAFETY: the slot's lock is held.
        let buffer = unsafe { &mut *b };
        let changed = buffer.epoch != epoch;
        let handed = (changed && !buffer.records.is_empty()).then(|| std::mem::take(buffer));
        if changed {
            buffer.epoch = epoch;
        }
        buffer.records.push(record);
        (handed, changed)
    });
    // The old buffer goes to the logger before `e_w` moves past its epoch.
    if let Some(old) = handed {
        shared.channel.lock().unwrap().push(old);
    }
    if changed {
        slot.e_w.fetch_max(epoch, SeqCst);
    }
    slot.unlock();
    record
}

/// What the logger published: `e_l` and the records written before it.
struct Publication {
    e_l: u64,
    written: Vec<Record>,
}

/// One `Logger::cycle`: `compute_e_l`, drain the channel, publish.
fn logger_round(shared: &Shared, written: &mut Vec<Record>, published: &mut Vec<Publication>) {
    let cap = shared.epoch.load(SeqCst);
    let mut e_l = cap;
    for slot in &shared.slots {
        if slot.try_lock() {
            let now = shared.epoch.load(SeqCst);
            let stale = slot.buffer.with_mut(|b| {
                // SAFETY: the slot's lock is held.
                let buffer = unsafe { &mut *b };
                (!buffer.records.is_empty() && buffer.epoch < now).then(|| std::mem::take(buffer))
            });
            slot.unlock();
            if let Some(buffer) = stale {
                written.extend(buffer.records);
            }
            slot.e_w.fetch_max(now, SeqCst);
        }
        e_l = e_l.min(slot.e_w.load(SeqCst));
    }
    for buffer in shared.channel.lock().unwrap().drain(..) {
        written.extend(buffer.records);
    }
    if published.last().is_none_or(|p| e_l > p.e_l) {
        published.push(Publication {
            e_l,
            written: written.clone(),
        });
    }
}

fn model(workers: usize, commits: u64, bumps: u64, rounds: usize) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(move || {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(1),
            slots: (0..workers)
                .map(|_| Slot {
                    busy: AtomicBool::new(false),
                    buffer: UnsafeCell::new(Buffer::default()),
                    // A worker registers at the current epoch.
                    e_w: AtomicU64::new(1),
                })
                .collect(),
            channel: Mutex::new(Vec::new()),
        });
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let shared = shared.clone();
                loom::thread::spawn(move || {
                    (0..commits)
                        .map(|n| commit(&shared, w, n))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let ticker = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                for _ in 0..bumps {
                    shared.epoch.fetch_add(1, SeqCst);
                }
            })
        };
        let mut written = Vec::new();
        let mut published = Vec::new();
        for _ in 0..rounds {
            logger_round(&shared, &mut written, &mut published);
        }
        ticker.join().unwrap();
        let records: Vec<Record> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        for publication in &published {
            for record in &records {
                if record.2 < publication.e_l {
                    assert!(
                        publication.written.contains(record),
                        "e_l {} published before record {record:?} was written",
                        publication.e_l
                    );
                }
            }
        }
    });
}

/// One worker, two commits, the epoch bumped twice, three logger rounds.
#[test]
fn one_worker_two_commits_two_bumps() {
    model(1, 2, 2, 3);
}

/// Two workers, one commit each, one bump, two logger rounds.
#[test]
fn two_workers_one_commit_each() {
    model(2, 1, 1, 2);
}

/// Two workers, two commits each, two bumps, two logger rounds.
#[test]
fn two_workers_two_commits_two_bumps() {
    model(2, 2, 2, 2);
}
