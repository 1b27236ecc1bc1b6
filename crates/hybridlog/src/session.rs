//! Sessions and the operations (cpr-sigmod19 §5.2, §6.2, Algorithms 3–4).
//!
//! A session is one thread's sequence of requests, each with a serial
//! number. Its requests are Read, Upsert, RMW and Delete; each either
//! finishes at once or goes *pending* (fuzzy region, a latch it cannot take,
//! or a record on disk) and finishes in a later
//! [`Session::complete_pending`].
//!
//! How an update is executed depends on the session's phase and the
//! version of the record found (Algorithm 3 for PREPARE, Algorithm 4 for
//! the others), with FASTER's regions (§5.1):
//!
//! | record at `l`                       | REST, or record of the request's version | older record, IN_PROGRESS | … WAIT_PENDING        | … WAIT_FLUSH |
//! |-------------------------------------|------------------------------------------|---------------------------|-----------------------|--------------|
//! | `l ≥ read_only`                     | in place                                 | exclusive latch → copy, else pending | no shared latch → copy, else pending | copy |
//! | `safe_read_only ≤ l < read_only`    | pending (fuzzy)                          | (same)                    | (same)                | copy         |
//! | `head ≤ l < safe_read_only`         | copy to the tail                         | (same)                    | (same)                | copy         |
//! | `l < head`                          | read from disk, pending                  | (same)                    | (same)                | (same)       |
//!
//! A record in the mutable region whose RMW updater declined is *sealed*
//! and copied (`Session::seal_and_settle`, `windows.rs`): from then on
//! nobody updates it in place; a blind update appends, an RMW seals it too
//! and copies it once no session's in-place window is still open on it.
//!
//! In PREPARE (and for a request issued before the session's CPR point,
//! whenever it is retried) the request holds a shared latch on its bucket
//! while it runs or is pending, and a record of version v+1 means the CPR
//! shift has begun: the session refreshes into IN_PROGRESS and re-executes
//! the request as version v+1.
//!
//! `read`, `upsert` and `rmw` first try a fast path for the common case,
//! the entry's first record in memory and holding the key
//! (`Session::first_record`): a read in any phase, and an in-place update
//! wherever the table says "in place" for a request of the session's own
//! version (`Session::update_in_place`: REST; PREPARE on a record not of
//! v+1, under the shared bucket latch with the fine shift; IN_PROGRESS,
//! WAIT_PENDING and WAIT_FLUSH on a record already of v+1), and the copy
//! of a record below safe read-only to the tail in REST and WAIT_FLUSH,
//! the phases where no latch guards it (`Session::copy_source`). Every
//! other case (copies under a latch, latches to wait for, the fuzzy
//! region, disk, shifts) goes to `execute`.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use epochdb_epoch::EpochHandle;

use crate::address::{FIRST_ADDRESS, INVALID_ADDRESS};
use crate::error::{Error, Result};
use crate::functions::{write_words, Functions, Value};
use crate::index::Entry;
use crate::io::{IoDone, IoMessage, IoRequest};
use crate::log::Log;
use crate::record::{hash_key, key_words, record_version, words, Header, Layout, SEALED_BIT};
use crate::state::{Phase, SystemState};
use crate::store::{Inner, OlderInPlace, ShiftMode};

/// Operations between two automatic epoch refreshes.
const REFRESH_EVERY_OPS: u32 = 64;

/// The largest value an RMW's copy without `execute` (`Session::copy_source`)
/// builds on the stack; larger ones go through `execute`.
const SMALL_VALUE: usize = 64;

/// The immediate outcome of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done: found and read, or written.
    Ok,
    /// Done: the key is absent (Read, Delete).
    NotFound,
    /// Not done yet: it finishes in a later [`Session::complete_pending`],
    /// which reports it under its serial number.
    Pending,
}

/// Which operation a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// [`Session::read`].
    Read,
    /// [`Session::upsert`].
    Upsert,
    /// [`Session::rmw`].
    Rmw,
    /// [`Session::delete`].
    Delete,
}

/// A pending operation that has finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The operation's serial number.
    pub serial: u64,
    /// What it was.
    pub kind: OpKind,
    /// [`Status::Ok`] or [`Status::NotFound`].
    pub status: Status,
    /// A read's value.
    pub value: Option<Vec<u8>>,
}

/// An operation. `V` is the upsert's value: borrowed from the caller while
/// the operation runs (no copy on the hot path), owned (`Vec<u8>`) only once
/// it goes pending.
#[derive(Clone, Copy)]
enum Op<V, I> {
    Read,
    Upsert(V),
    Rmw(I),
    Delete,
}

impl<V: AsRef<[u8]>, I> Op<V, I> {
    /// The operation as [`Session::attempt`] takes it.
    fn borrow(&self) -> Op<&[u8], &I> {
        match self {
            Op::Read => Op::Read,
            Op::Upsert(value) => Op::Upsert(value.as_ref()),
            Op::Rmw(input) => Op::Rmw(input),
            Op::Delete => Op::Delete,
        }
    }

    /// The operation with its own copy of the value (a pending request).
    fn into_owned(self) -> Op<Vec<u8>, I> {
        match self {
            Op::Read => Op::Read,
            Op::Upsert(value) => Op::Upsert(value.as_ref().to_vec()),
            Op::Rmw(input) => Op::Rmw(input),
            Op::Delete => Op::Delete,
        }
    }
}

impl<V, I> Op<V, I> {
    fn kind(&self) -> OpKind {
        match self {
            Op::Read => OpKind::Read,
            Op::Upsert(_) => OpKind::Upsert,
            Op::Rmw(_) => OpKind::Rmw,
            Op::Delete => OpKind::Delete,
        }
    }

    fn modifies(&self) -> bool {
        !matches!(self, Op::Read)
    }
}

/// Where a pending request's disk read stands.
///
/// A disk walk starts at the first address of the chain below head and
/// follows previous addresses on disk until the key matches (FASTER
/// continues the walk in the I/O completion). Records below head never
/// change, so when a retry's chain reaches the same start address, the
/// walk's result still holds.
enum IoState {
    None,
    /// Reading; the walk started at this address.
    Waiting(u64),
    /// The walk from this address found this record (empty: the key is not
    /// on disk).
    Done(u64, Vec<u8>),
}

/// A request that went pending.
struct Pending<I> {
    token: u64,
    serial: u64,
    op: Op<Vec<u8>, I>,
    key: Vec<u8>,
    hash: u64,
    /// The version the request belongs to (its records get this version).
    version: u32,
    /// Holds a shared latch on its bucket (§6.2.1).
    latched: bool,
    io: IoState,
}

/// What one attempt at a request came to.
enum Outcome {
    Done(Status),
    /// Retry later; `Some(address)`: after reading that record from disk.
    Pending(Option<u64>),
    /// CPR shift detected (§6.2.1): refresh into IN_PROGRESS and re-execute.
    Shift,
    /// A CAS was lost or the tail page is not open yet: refresh and retry.
    Retry,
    /// The chain in memory is malformed (a damaged log or index loaded by
    /// recovery): the session fail-stops with this reason.
    Failed(String),
}

/// Where the chain walk ended.
enum Found<'d> {
    Memory(u64),
    Disk(&'d [u8]),
    NeedIo(u64),
    Absent,
    /// A record in memory that cannot be a record: it runs past its page
    /// or points forward. Only damaged data loaded at recovery does this.
    Corrupt(String),
}

/// What [`Session::first_record`] found.
enum First<'a> {
    /// No index entry for the hash: the key is absent.
    NoEntry,
    /// The entry's first record, in memory at or above the bound, valid,
    /// holding the key (maybe a tombstone).
    Record {
        entry: Entry<'a>,
        address: u64,
        frame: usize,
        header: Header,
        value: Value<'a>,
    },
    /// Anything else: for `execute`.
    Other,
}

/// What [`Session::update_in_place`] came to.
enum InPlace {
    /// Updated in place.
    Done,
    /// The record at this address may be updated in place, but the updater
    /// declined.
    Declined(u64),
    /// Not the fast path's case: for `execute`.
    No,
}

/// One thread's session: serial numbers, a CPR point, pending requests.
///
/// A session stays epoch-protected from start to stop, so it must keep
/// calling operations, [`Session::refresh`] or
/// [`Session::complete_pending`]: an idle session holds back checkpoints
/// and log maintenance (cpr-sigmod19 §3).
pub struct Session<F: Functions> {
    inner: Arc<Inner<F>>,
    epoch: EpochHandle,
    slot: usize,
    id: u64,
    serial: u64,
    local: SystemState,
    /// `local` is a REST that every session had adopted when this session
    /// last refreshed (`Inner::rest_settled`); read at refresh, before any
    /// index entry the session reads until the next one.
    rest_settled: bool,
    cpr_point: u64,
    in_op: bool,
    pending: Vec<Pending<F::Input>>,
    next_token: u64,
    io_tx: Sender<IoDone>,
    io_rx: Receiver<IoDone>,
    ops_since_refresh: u32,
    callback: Option<Box<dyn FnMut(u64) + Send>>,
    completed: Vec<Completed>,
    key_buf: Vec<u64>,
    key_len_bytes: usize,
    /// The log's largest record (constant), kept here so that each
    /// operation's size check reads no shared line.
    record_bytes_max: usize,
    /// The store's record layout (constant), kept here for the same reason.
    layout: Layout,
    scratch: Scratch,
    failed: Option<String>,
}

/// Buffers an update reuses: the new value and a copy of the old one.
#[derive(Default)]
struct Scratch {
    value: Vec<u8>,
    old: Vec<u8>,
    /// The record whose in-place updater already declined this RMW in
    /// [`Session::rmw`]'s fast path ([`INVALID_ADDRESS`]: none), so that
    /// `apply` copies it without calling the updater a second time.
    declined: u64,
}

impl<F: Functions> std::fmt::Debug for Session<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("serial", &self.serial)
            .field("state", &self.local)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<F: Functions> Session<F> {
    pub(crate) fn start(inner: Arc<Inner<F>>, id: u64, serial: u64) -> Result<Self> {
        let slot = inner
            .slots
            .iter()
            .position(|s| {
                s.taken
                    .compare_exchange(false, true, SeqCst, Relaxed)
                    .is_ok()
            })
            .ok_or(Error::TooManySessions(inner.slots.len()))?;
        let mut epoch = match inner.epochs.register() {
            Ok(epoch) => epoch,
            Err(_) => {
                inner.slots[slot].taken.store(false, SeqCst);
                return Err(Error::TooManySessions(inner.slots.len()));
            }
        };
        epoch.protect();
        let entry = &inner.slots[slot];
        entry.id.store(id, SeqCst);
        entry.cpr_point.store(serial, SeqCst);
        entry.old_pending.store(0, SeqCst);
        // Join: publish the state we adopt, become active, and re-read the
        // global state; a transition that checked us before we were active
        // is caught up with by refreshing before the first operation.
        let local = inner.system_state();
        entry.state.store(local.pack(), SeqCst);
        entry.active.store(true, SeqCst);
        let (io_tx, io_rx) = crossbeam_channel::unbounded();
        let record_bytes_max = inner.log.record_bytes_max();
        let layout = inner.layout;
        let mut session = Session {
            inner,
            epoch,
            slot,
            id,
            serial,
            local,
            rest_settled: false,
            cpr_point: serial,
            in_op: false,
            pending: Vec::new(),
            next_token: 0,
            io_tx,
            io_rx,
            ops_since_refresh: 0,
            callback: None,
            completed: Vec::new(),
            key_buf: Vec::new(),
            key_len_bytes: 0,
            record_bytes_max,
            layout,
            scratch: Scratch::default(),
            failed: None,
        };
        session.refresh();
        Ok(session)
    }

    /// The session's id, for [`Store::continue_session`](crate::Store::continue_session).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The serial number of the last operation issued.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The session's view of the checkpoint state machine.
    pub fn state(&self) -> SystemState {
        self.local
    }

    /// Whether the session took its REST for settled at its last refresh.
    #[cfg(test)]
    pub(crate) fn rest_settled_seen(&self) -> bool {
        self.rest_settled
    }

    /// Requests still pending.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Registers the commit callback (FASTER's `RegisterCallback`): called
    /// on this session's thread with the serial number up to which the
    /// session's operations are durable, each time a checkpoint commits.
    pub fn on_commit(&mut self, callback: impl FnMut(u64) + Send + 'static) {
        self.callback = Some(Box::new(callback));
    }

    /// Refresh (cpr-sigmod19 §3): moves the epoch forward, runs ready epoch
    /// actions, and adopts the global checkpoint state one step at a time.
    pub fn refresh(&mut self) {
        self.ops_since_refresh = 0;
        self.epoch.refresh();
        let inner = self.inner.clone();
        let global = inner.system_state();
        while self.local != global {
            let next = self.local.next();
            match next.phase {
                Phase::Prepare => {
                    // §6.2.1: pending updates take their shared latches.
                    for request in &mut self.pending {
                        if request.op.modifies() && !request.latched {
                            let bucket = inner.index.bucket(request.hash);
                            // No exclusive latch exists before every session
                            // is in PREPARE, which we are not yet.
                            while !bucket.try_shared() {
                                std::hint::spin_loop();
                            }
                            request.latched = true;
                        }
                    }
                }
                Phase::InProgress => {
                    // The CPR point (§6.2.2): everything issued so far,
                    // except an operation being re-executed as v+1.
                    self.cpr_point = if self.in_op {
                        self.serial - 1
                    } else {
                        self.serial
                    };
                    inner.slots[self.slot]
                        .cpr_point
                        .store(self.cpr_point, SeqCst);
                }
                Phase::Rest => {
                    if let Some(callback) = &mut self.callback {
                        callback(self.cpr_point);
                    }
                }
                Phase::WaitPending | Phase::WaitFlush => {}
            }
            self.local = next;
        }
        self.publish();
        self.rest_settled = inner.rest_settled(self.local);
    }

    /// What an in-place update of an older version's record needs first,
    /// in `phase` (the session's own, or PREPARE for an old request).
    #[inline(always)]
    fn older_in_place(&self, phase: Phase) -> OlderInPlace {
        if phase == Phase::Prepare || phase == Phase::Rest && self.rest_settled {
            OlderInPlace::AsIs
        } else {
            OlderInPlace::LatchAndRecheck
        }
    }

    fn publish(&self) {
        let slot = &self.inner.slots[self.slot];
        let old = self
            .pending
            .iter()
            .filter(|r| r.op.modifies() && r.version != self.local.version)
            .count();
        slot.old_pending.store(old as u64, SeqCst);
        slot.state.store(self.local.pack(), SeqCst);
        self.inner.kick();
        self.inner.note_rest(self.local);
    }

    /// Stops the session (FASTER's `StopSession`): completes its pending
    /// requests, takes part in any running checkpoint until it ends, and
    /// leaves the session table. Its serial number is remembered, so a later
    /// checkpoint commits it and [`Store::continue_session`] can resume it.
    ///
    /// [`Store::continue_session`]: crate::Store::continue_session
    pub fn stop(self) {
        drop(self);
    }

    fn leave(&mut self) {
        loop {
            let _ = self.complete_pending(false);
            self.refresh();
            let done = self.pending.is_empty() && self.local.phase == Phase::Rest;
            if done || self.failed.is_some() || self.inner.log.has_failed() {
                break;
            }
            std::thread::yield_now();
        }
        for request in self.pending.drain(..) {
            if request.latched {
                self.inner.index.bucket(request.hash).release_shared();
            }
        }
        self.inner.dormant.lock().insert(self.id, self.serial);
        // Closed even if an updater of ours panicked inside it.
        self.close_window();
        let slot = &self.inner.slots[self.slot];
        slot.active.store(false, SeqCst);
        slot.taken.store(false, SeqCst);
        // We may have been the last session short of the current REST.
        self.inner.note_rest(self.inner.system_state());
        self.epoch.unprotect();
        // Our leaving may be what an epoch action waits for.
        self.inner.epochs.try_drain();
        self.inner.kick();
    }

    #[inline(always)]
    fn begin_op(&mut self, key: &[u8], value_len: usize) -> Result<u64> {
        if key.is_empty() {
            return Err(Error::EmptyKey);
        }
        self.layout.check_key(key.len())?;
        if let Some(e) = &self.failed {
            return Err(Error::Failed(e.clone()));
        }
        let bytes = self.layout.record_bytes(key.len(), value_len);
        if bytes > self.record_bytes_max {
            return Err(Error::RecordTooLarge(bytes));
        }
        self.ops_since_refresh += 1;
        if self.ops_since_refresh >= REFRESH_EVERY_OPS {
            self.refresh();
        }
        self.serial += 1;
        Ok(hash_key(key))
    }

    /// Asks the CPU for the index bucket of `key` ahead of an operation on
    /// it (a hint: changes nothing, never fails). A caller that knows its
    /// next keys (a batch) can overlap their index misses with the
    /// operations before them.
    #[inline]
    pub fn prefetch_bucket(&self, key: &[u8]) {
        epochdb_memory::prefetch(self.inner.index.bucket(hash_key(key)));
    }

    /// The second prefetch stage, once the bucket has arrived (after
    /// [`Session::prefetch_bucket`]): asks for the first record of `key`'s index
    /// entry, if it is in memory. A hint like the first stage.
    #[inline]
    pub fn prefetch_record(&self, key: &[u8]) {
        let inner = &*self.inner;
        if let Some(entry) = inner.index.find(hash_key(key)) {
            let address = entry.address();
            let log = &inner.log;
            if address >= log.head() {
                epochdb_memory::prefetch(&log.record(address)[0]);
            }
        }
    }

    /// Reads `key` into `out`.
    pub fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Status> {
        let hash = self.begin_op(key, 0)?;
        if let Some(status) = self.read_in_memory(key, hash, out) {
            return Ok(status);
        }
        self.execute(Op::Read, key, hash, Some(out))
    }

    /// Sets `key` to `value` (a blind update).
    pub fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<Status> {
        self.layout.check_value(value.len())?;
        let hash = self.begin_op(key, value.len())?;
        let done = self.update_in_place(key, hash, |old| {
            if old.len() != value.len() {
                return false;
            }
            if let Ok(word) = <[u8; 8]>::try_from(value) {
                // The fixed 8-byte-value fast path: one store.
                old.word(0).store(u64::from_le_bytes(word), Relaxed);
            } else {
                old.write(value);
            }
            true
        });
        match done {
            InPlace::Done => return Ok(Status::Ok),
            InPlace::No => {
                if let Some((mut entry, _)) = self.copy_source(key, hash) {
                    if self.append_copy(key, &mut entry, value) {
                        return Ok(Status::Ok);
                    }
                }
            }
            InPlace::Declined(_) => {}
        }
        self.execute(Op::Upsert(value), key, hash, None)
    }

    /// Read-modify-write of `key` with the store's [`Functions`].
    pub fn rmw(&mut self, key: &[u8], input: F::Input) -> Result<Status> {
        let hash = self.begin_op(key, 0)?;
        let functions = &self.inner.functions;
        match self.update_in_place(key, hash, |old| functions.in_place(old, &input)) {
            InPlace::Done => return Ok(Status::Ok),
            // The updater declined: `execute` copies the record to the tail
            // without asking it again.
            InPlace::Declined(address) => self.scratch.declined = address,
            InPlace::No => match self.copy_source(key, hash) {
                // A small value is copied on the stack; a larger one, or a
                // copy that grows past it, goes to `execute`.
                Some((mut entry, old)) if old.len() <= SMALL_VALUE => {
                    let mut old_bytes = [0u8; SMALL_VALUE];
                    let old_bytes = &mut old_bytes[..old.len()];
                    old.read_to_slice(old_bytes);
                    let len = functions.copy_len(old_bytes, &input);
                    if len <= SMALL_VALUE {
                        let mut new = [0u8; SMALL_VALUE];
                        functions.copy(old_bytes, &input, &mut new[..len]);
                        if self.append_copy(key, &mut entry, &new[..len]) {
                            return Ok(Status::Ok);
                        }
                    }
                }
                _ => {}
            },
        }
        self.execute(Op::Rmw(input), key, hash, None)
    }

    /// The common case both fast paths start from (FASTER's
    /// `InternalRead`/`InternalUpsert`/`InternalRmw` hot path): the index
    /// entry of `hash`, and its first record if that is at or above
    /// `lowest(log)` (read after the entry), not invalid, and holds `key`.
    /// [`First::Other`]: anything else (an empty entry, a longer chain, a
    /// record below `lowest`), which only `execute` decides.
    #[inline(always)]
    fn first_record(&self, key: &[u8], hash: u64, lowest: impl FnOnce(&Log) -> u64) -> First<'_> {
        let inner = &*self.inner;
        let Some(entry) = inner.index.find(hash) else {
            return First::NoEntry;
        };
        let log = &inner.log;
        let address = entry.address();
        // `lowest` is at least head ≥ FIRST_ADDRESS, so this also leaves an
        // empty entry to `execute`.
        if address < lowest(log) {
            return First::Other;
        }
        let frame = log.frame_of(address);
        let record = log.record_in(frame, address);
        let header = Header(record[0].load(Acquire));
        let layout = self.layout;
        let lengths = layout.lengths(record);
        if header.invalid() || !key_matches_record(record, layout, lengths.0, key) {
            return First::Other;
        }
        First::Record {
            entry,
            address,
            frame,
            header,
            value: layout.value_of(record, lengths),
        }
    }

    /// A read's common case, done without `execute`'s general machinery:
    /// the entry's first record is in memory and holds the key. Reads do
    /// not depend on the CPR phase. `None`: anything else, for `execute`.
    #[inline(always)]
    fn read_in_memory(&self, key: &[u8], hash: u64, out: &mut Vec<u8>) -> Option<Status> {
        match self.first_record(key, hash, |log| log.head()) {
            First::NoEntry => Some(Status::NotFound),
            First::Other => None,
            First::Record { header, .. } if header.tombstone() => Some(Status::NotFound),
            First::Record { value, .. } => {
                value.read_into(out);
                Some(Status::Ok)
            }
        }
    }

    /// An update's common case: the entry's first record is live, holds
    /// the key, is in the mutable region (at or above read-only), and the
    /// session's phase lets this request update it in place
    /// (cpr-sigmod19 Algorithms 3 and 4, the table at the top of this file):
    ///
    /// * REST: any version;
    /// * PREPARE (the request is of version v): a record of version ≤ v,
    ///   i.e. not v+1, which would mean the CPR shift has begun (that is
    ///   `execute`'s `Shift`). With the fine shift the request holds a
    ///   shared latch on its bucket while it looks and updates, as in
    ///   `execute`, so that no IN_PROGRESS thread copies the record to
    ///   v+1 meanwhile (a latch it cannot take: `execute`);
    /// * IN_PROGRESS, WAIT_PENDING, WAIT_FLUSH (the session is past its CPR
    ///   point, the request is of version v+1): only a record already of
    ///   version v+1. A version-v record must stay as it is for the
    ///   checkpoint, so it is copied to the tail by `execute`.
    ///
    /// Then `update` is called on the value; `true`: it updated it (the
    /// frame is marked dirty). Read-only is read once, after the entry and
    /// before the record, as FASTER's `InternalUpsert` does: the session
    /// is protected for the whole operation, so safe-read-only cannot pass
    /// the value read.
    #[inline(always)]
    fn update_in_place(
        &self,
        key: &[u8],
        hash: u64,
        update: impl FnOnce(&Value<'_>) -> bool,
    ) -> InPlace {
        let inner = &*self.inner;
        let phase = self.local.phase;
        let mut latch = if phase == Phase::Prepare && inner.shift_mode == ShiftMode::Fine {
            let bucket = inner.index.bucket(hash);
            if !bucket.try_shared() {
                return InPlace::No;
            }
            Some(bucket)
        } else {
            None
        };
        self.open_window();
        let outcome = match self.first_record(key, hash, |log| log.read_only()) {
            First::Record {
                address,
                frame,
                header,
                value,
                ..
            } if !header.tombstone() && !header.sealed() => {
                let allowed = match phase {
                    Phase::Rest => true,
                    Phase::Prepare => header.version() != record_version(self.local.version + 1),
                    Phase::InProgress | Phase::WaitPending => {
                        header.version() == record_version(self.local.version)
                    }
                    // A version-v record may be updated in place once a
                    // snapshot checkpoint has copied it (Appendix C copies
                    // v while v+1 runs; what it has copied no longer needs
                    // keeping in memory). Acquire: the copy's reads are done.
                    Phase::WaitFlush => {
                        header.version() == record_version(self.local.version)
                            || address < inner.snapshot_captured.load(Acquire)
                    }
                };
                let older = header.version() != record_version(self.local.version);
                if !allowed
                    || older && latch.is_none() && {
                        // An older version's record in the mutable region may
                        // be being copied to the tail by a session still in a
                        // CPR phase; the copy would drop an update made here
                        // meanwhile. Check that no copy of this chain was
                        // installed since the entry was read, under the
                        // shared latch unless REST has settled.
                        match self.older_in_place(phase) {
                            OlderInPlace::AsIs => false,
                            OlderInPlace::LatchAndRecheck => {
                                let bucket = inner.index.bucket(hash);
                                if bucket.try_shared() {
                                    latch = Some(bucket);
                                    inner.index.find(hash).map(|e| e.address()) != Some(address)
                                } else {
                                    true
                                }
                            }
                        }
                    }
                {
                    InPlace::No
                } else if update(&value) {
                    inner.log.mark_frame_dirty(frame);
                    InPlace::Done
                } else {
                    InPlace::Declined(address)
                }
            }
            _ => InPlace::No,
        };
        self.close_window();
        if let Some(bucket) = latch {
            bucket.release_shared();
        }
        outcome
    }

    /// Opens this session's in-place window (`windows.rs`): from here
    /// until [`Session::close_window`] it may update a record in place,
    /// having read its header unsealed after this point.
    #[inline(always)]
    fn open_window(&self) {
        self.inner.windows.open(self.slot);
    }

    /// Closes this session's in-place window.
    #[inline(always)]
    fn close_window(&self) {
        self.inner.windows.close(self.slot);
    }

    /// Seals the record at `address`, in the mutable region, which this RMW
    /// must copy (its in-place updater declined, or another RMW sealed it
    /// first), and waits until no session can still be updating it in
    /// place (see `windows.rs` for why and how). Every copier seals (the
    /// bit may be set already). `false`: the windows are not in use yet
    /// (the store's first such copy waits for every session to refresh,
    /// `InPlaceWindows::ready`); retry after a refresh.
    #[must_use]
    fn seal_and_settle(&self, address: u64) -> bool {
        if !self.inner.windows.ready(&self.inner.epochs) {
            return false;
        }
        self.inner.log.record(address)[0].fetch_or(SEALED_BIT, SeqCst);
        // This session updates nothing in place from here on in this
        // attempt; two copiers must not wait for each other.
        self.close_window();
        self.inner.windows.settle(self.slot);
        true
    }

    /// The source of an update's copy without `execute` (FASTER's
    /// read-copy-update, §5.1), when `update_in_place` found no in-place
    /// case: the entry's first record is live, in memory, holds the key and
    /// lies below safe read-only (not in the fuzzy region), and the session
    /// is in REST or WAIT_FLUSH. In both phases `update_attempt` plans the
    /// same latch-free append for such a record whatever its version: in
    /// REST any record below safe read-only is copied; in WAIT_FLUSH every
    /// session is past its CPR point, so no request of version v runs
    /// outside `execute` (old requests retry there), and a record below
    /// safe read-only is copied as version v+1 whether the checkpoint has
    /// captured it or not (Algorithm 4). The copies of a fold-over's
    /// WAIT_FLUSH, where every version-v record has just become read-only,
    /// are most of a checkpoint's updates. IN_PROGRESS and WAIT_PENDING
    /// copy under the bucket's exclusive latch, in `execute`. The bucket
    /// and the record are in cache by now, so looking again costs little;
    /// the in-place path stays as it was. Returns the entry read and the
    /// old value.
    #[inline(always)]
    fn copy_source(&self, key: &[u8], hash: u64) -> Option<(Entry<'_>, Value<'_>)> {
        if !matches!(self.local.phase, Phase::Rest | Phase::WaitFlush) {
            return None;
        }
        match self.first_record(key, hash, |log| log.head()) {
            First::Record {
                entry,
                address,
                header,
                value,
                ..
            } if !header.tombstone() && address < self.inner.log.safe_read_only() => {
                Some((entry, value))
            }
            _ => None,
        }
    }

    /// An update's copy found by [`Session::copy_source`]: appends `key`
    /// with `value` as the session's version, without `execute`'s general
    /// machinery. `false`: too large for a page, no room on the tail page,
    /// or another record entered the chain first; `execute` takes over.
    #[inline(always)]
    fn append_copy(&self, key: &[u8], entry: &mut Entry<'_>, value: &[u8]) -> bool {
        self.layout.record_bytes(key.len(), value.len()) <= self.record_bytes_max
            && self.append(key, entry, record_version(self.local.version), false, value)
                == Some(true)
    }

    /// Appends a record of `key` (version `version`, a record version)
    /// with `value` at the tail and swings `entry` to it by CAS, the only
    /// way a record enters a chain. `None`: no room on the tail page (a
    /// new one is being opened); `Some(false)`: another record entered
    /// the chain first, and the new one is marked invalid.
    #[inline(always)]
    fn append(
        &self,
        key: &[u8],
        entry: &mut Entry<'_>,
        version: u32,
        tombstone: bool,
        value: &[u8],
    ) -> Option<bool> {
        let log = &self.inner.log;
        let layout = self.layout;
        if let Some((_, value_len)) = layout.fixed() {
            // Upserts were checked; an RMW's value comes from `Functions`.
            assert!(
                value.len() == value_len || tombstone,
                "the store's Functions made a value of {} bytes for a fixed layout of {value_len}-byte values",
                value.len()
            );
        }
        let bytes = layout.record_bytes(key.len(), value.len());
        let address = log.allocate(bytes)?;
        let record = log.words(address, bytes / 8);
        let header = Header::new(entry.address(), version, tombstone);
        record[0].store(header.0, Relaxed);
        layout.write_lengths(record, key.len(), value.len());
        let key_at = layout.key_at();
        let value_at = key_at + words(key.len());
        write_words(&record[key_at..value_at], key);
        // A fixed layout's tombstone leaves its value words as the frame
        // was opened: zero.
        write_words(&record[value_at..], value);
        // The CAS publishes the record (Release in `try_update`).
        if entry.try_update(address) {
            Some(true)
        } else {
            record[0].store(header.with_invalid().0, Relaxed);
            Some(false)
        }
    }

    /// Deletes `key` (appends a tombstone).
    pub fn delete(&mut self, key: &[u8]) -> Result<Status> {
        let hash = self.begin_op(key, 0)?;
        self.execute(Op::Delete, key, hash, None)
    }

    fn execute(
        &mut self,
        op: Op<&[u8], F::Input>,
        key: &[u8],
        hash: u64,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<Status> {
        self.in_op = true;
        self.load_key(key);
        let mut latched = false;
        let status = loop {
            let version = self.local.version;
            let mut scratch = std::mem::take(&mut self.scratch);
            let outcome = self.attempt(
                op.borrow(),
                key,
                hash,
                version,
                false,
                &mut latched,
                None,
                out.as_deref_mut(),
                &mut scratch,
            );
            self.scratch = scratch;
            match outcome {
                Outcome::Done(status) => break status,
                Outcome::Failed(reason) => {
                    self.failed = Some(reason.clone());
                    self.scratch.declined = INVALID_ADDRESS;
                    self.in_op = false;
                    return Err(Error::Failed(reason));
                }
                Outcome::Pending(io) => {
                    let token = self.next_token;
                    self.next_token += 1;
                    let mut request = Pending {
                        token,
                        serial: self.serial,
                        op: op.into_owned(),
                        key: key.to_vec(),
                        hash,
                        version,
                        latched,
                        io: IoState::None,
                    };
                    if let Some(address) = io {
                        self.issue_io(&mut request, address, address);
                    }
                    self.pending.push(request);
                    if version != self.local.version {
                        self.publish();
                    }
                    break Status::Pending;
                }
                Outcome::Shift | Outcome::Retry => {
                    if self.inner.log.has_failed() {
                        // The log cannot flush, so head (and the tail) may
                        // never move again: fail-stop.
                        if latched {
                            self.inner.index.bucket(hash).release_shared();
                        }
                        self.scratch.declined = INVALID_ADDRESS;
                        self.in_op = false;
                        return Err(Error::Failed("the log stopped flushing".into()));
                    }
                    self.refresh();
                    std::thread::yield_now();
                }
            }
        };
        self.scratch.declined = INVALID_ADDRESS;
        self.in_op = false;
        Ok(status)
    }

    fn issue_io(&self, request: &mut Pending<F::Input>, start: u64, address: u64) {
        request.io = IoState::Waiting(start);
        let message = IoMessage::Read(IoRequest {
            token: request.token,
            address,
            reply: self.io_tx.clone(),
        });
        if self.inner.io.send(message).is_err() {
            // The store is closing; the request stays pending.
            request.io = IoState::None;
        }
    }

    /// Completes pending requests (FASTER's `CompletePending`): retries
    /// those whose region moved and finishes those whose disk read came
    /// back. With `wait`, returns only when none is left. Returns the
    /// requests that finished.
    pub fn complete_pending(&mut self, wait: bool) -> Result<Vec<Completed>> {
        loop {
            self.refresh();
            while let Ok(done) = self.io_rx.try_recv() {
                self.absorb(done)?;
            }
            let requests = std::mem::take(&mut self.pending);
            let mut retried = false;
            for mut request in requests {
                if matches!(request.io, IoState::Waiting(_)) || self.failed.is_some() {
                    self.pending.push(request);
                    continue;
                }
                let disk = match std::mem::replace(&mut request.io, IoState::None) {
                    IoState::Done(address, bytes) => Some((address, bytes)),
                    _ => None,
                };
                let mut value = Vec::new();
                let read_out = matches!(request.op, Op::Read).then_some(&mut value);
                self.load_key(&request.key);
                let mut scratch = std::mem::take(&mut self.scratch);
                let outcome = self.attempt(
                    request.op.borrow(),
                    &request.key,
                    request.hash,
                    request.version,
                    true,
                    &mut request.latched,
                    disk.as_ref().map(|(a, b)| (*a, b.as_slice())),
                    read_out,
                    &mut scratch,
                );
                self.scratch = scratch;
                match outcome {
                    Outcome::Failed(reason) => {
                        // Its latch is released; the rest stay pending.
                        self.failed = Some(reason);
                        self.pending.push(request);
                    }
                    Outcome::Done(status) => {
                        self.completed.push(Completed {
                            serial: request.serial,
                            kind: request.op.kind(),
                            status,
                            value: (matches!(request.op, Op::Read) && status == Status::Ok)
                                .then_some(value),
                        });
                    }
                    Outcome::Pending(io) => {
                        if let Some(address) = io {
                            self.issue_io(&mut request, address, address);
                        } else if let Some((address, bytes)) = disk {
                            // Keep the record read for the next try.
                            request.io = IoState::Done(address, bytes);
                        }
                        self.pending.push(request);
                    }
                    Outcome::Shift | Outcome::Retry => {
                        // A request from before the CPR point holds its
                        // bucket's shared latch, so no v+1 record of its key
                        // can appear: shifting it would repeat for ever
                        // (WAIT_PENDING would never end).
                        debug_assert!(
                            !(matches!(outcome, Outcome::Shift)
                                && request.version != self.local.version
                                && request.op.modifies()),
                            "a version-{} request shifted in version {}",
                            request.version,
                            self.local.version
                        );
                        if let Some((address, bytes)) = disk {
                            request.io = IoState::Done(address, bytes);
                        }
                        self.pending.push(request);
                        retried = true;
                    }
                }
            }
            if retried {
                // Only now, with every request back in `self.pending`: a
                // refresh into PREPARE latches the pending requests it
                // finds there, and one still in `requests` would cross the
                // CPR point unlatched.
                self.refresh();
            }
            self.publish();
            if let Some(reason) = &self.failed {
                return Err(Error::Failed(reason.clone()));
            }
            if !wait || self.pending.is_empty() {
                break;
            }
            if self
                .pending
                .iter()
                .all(|r| matches!(r.io, IoState::Waiting(_)))
            {
                // Only disk reads outstanding: block on them unprotected, so
                // this session holds nothing back while it waits.
                self.epoch.unprotect();
                self.inner.epochs.try_drain();
                let done = self.io_rx.recv();
                self.epoch.protect();
                match done {
                    Ok(done) => self.absorb(done)?,
                    Err(_) => return Err(Error::Failed("the store is closing".into())),
                }
            } else if self.inner.log.has_failed() {
                // A request that must copy to the tail (or wait for its
                // region to move) cannot finish: the log no longer flushes,
                // so head, and with it the tail, stays where it is. Fail-stop
                // as the synchronous path does (`execute`).
                return Err(Error::Failed("the log stopped flushing".into()));
            } else {
                std::thread::yield_now();
            }
        }
        Ok(std::mem::take(&mut self.completed))
    }

    fn absorb(&mut self, done: IoDone) -> Result<()> {
        let bytes = match done.bytes {
            Ok(bytes) => bytes,
            Err(e) => {
                self.failed = Some(e.clone());
                return Err(Error::Failed(e));
            }
        };
        let Some(index) = self.pending.iter().position(|r| r.token == done.token) else {
            return Ok(());
        };
        let mut request = self.pending.swap_remove(index);
        let IoState::Waiting(start) = request.io else {
            self.pending.push(request);
            return Ok(());
        };
        if bytes.is_empty() {
            // Below begin: the log was truncated; the key is not there.
            request.io = IoState::Done(start, Vec::new());
            self.pending.push(request);
            return Ok(());
        }
        let header = Header(u64::from_le_bytes(bytes[..8].try_into().expect("8")));
        if !header.invalid() && self.layout.key_in(&bytes) == request.key.as_slice() {
            request.io = IoState::Done(start, bytes);
        } else if header.previous() >= done.address {
            let e = format!(
                "log record at {} points forward to {}",
                done.address,
                header.previous()
            );
            self.failed = Some(e.clone());
            return Err(Error::Failed(e));
        } else if header.previous() < FIRST_ADDRESS.max(self.inner.log.begin.load(Relaxed)) {
            request.io = IoState::Done(start, Vec::new());
        } else {
            // Not this key: go on down the chain on disk.
            self.issue_io(&mut request, start, header.previous());
        }
        self.pending.push(request);
        Ok(())
    }

    /// Walks the hash chain from `address` for the key in `key_buf`.
    fn trace<'d>(&self, mut address: u64, head: u64, disk: Option<(u64, &'d [u8])>) -> Found<'d> {
        let log = &self.inner.log;
        loop {
            if address == INVALID_ADDRESS || address < FIRST_ADDRESS {
                return Found::Absent;
            }
            if address >= head {
                let record = log.record(address);
                let header = Header(record[0].load(Acquire));
                // Our own records always fit their page and point back;
                // one that does not came from a damaged file.
                let layout = self.layout;
                let fits = record.len() >= layout.key_at() && {
                    let (key_len, value_len) = layout.lengths(record);
                    layout.record_bytes(key_len, value_len) <= record.len() * 8
                };
                if !fits || header.previous() >= address {
                    return Found::Corrupt(format!(
                        "log record at {address} in memory is malformed (points to {})",
                        header.previous()
                    ));
                }
                if !header.invalid() && self.key_matches_memory(record) {
                    return Found::Memory(address);
                }
                address = header.previous();
                continue;
            }
            if address < log.begin.load(Relaxed) {
                return Found::Absent;
            }
            return match disk {
                Some((start, bytes)) if start == address => {
                    if bytes.is_empty() {
                        Found::Absent
                    } else {
                        Found::Disk(bytes)
                    }
                }
                _ => Found::NeedIo(address),
            };
        }
    }

    /// Whether the in-memory `record` (from [`Log::record`]) holds the key
    /// in `key_buf`.
    ///
    /// [`Log::record`]: crate::log::Log::record
    #[inline]
    fn key_matches_memory(&self, record: &[AtomicU64]) -> bool {
        let key = &self.key_buf;
        let (key_len, _) = self.layout.lengths(record);
        if key_len != self.key_len() {
            return false;
        }
        let at = self.layout.key_at();
        if let [word] = key.as_slice() {
            // The fixed 8-byte-key fast path: one word.
            return record[at].load(Relaxed) == *word;
        }
        record[at..at + key.len()]
            .iter()
            .zip(key)
            .all(|(w, k)| w.load(Relaxed) == *k)
    }

    fn key_len(&self) -> usize {
        self.key_len_bytes
    }

    fn load_key(&mut self, key: &[u8]) {
        key_words(key, &mut self.key_buf);
        self.key_len_bytes = key.len();
    }
}

/// Whether the in-memory `record` (from [`Log::record`]), of `layout` and
/// whose key is `key_len` bytes, holds `key`.
///
/// [`Log::record`]: crate::log::Log::record
#[inline(always)]
fn key_matches_record(record: &[AtomicU64], layout: Layout, key_len: usize, key: &[u8]) -> bool {
    if key_len != key.len() {
        return false;
    }
    let at = layout.key_at();
    if let Ok(word) = <[u8; 8]>::try_from(key) {
        // The fixed 8-byte-key fast path: one word.
        return record[at].load(Relaxed) == u64::from_le_bytes(word);
    }
    record[at..at + words(key_len)]
        .iter()
        .zip(key.chunks(8))
        .all(|(w, chunk)| {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            w.load(Relaxed) == u64::from_le_bytes(buf)
        })
}

impl<F: Functions> Drop for Session<F> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// What an update does with the record it found.
enum Plan {
    /// Update the record at this address in place.
    InPlace(u64),
    /// Append a new record built from the old value (if any).
    Append(Old),
}

/// The value an appended record is built from.
#[derive(Clone, Copy)]
enum Old {
    None,
    Memory(u64),
    /// The record read from disk (`disk` in `apply`).
    Disk,
}

impl<F: Functions> Session<F> {
    /// One attempt at a request of `version` (the session's version, or the
    /// version before it for a request issued before the CPR point).
    /// `pending`: the request went pending before (`complete_pending`), as
    /// opposed to its first execution (`execute`).
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        op: Op<&[u8], &F::Input>,
        key: &[u8],
        hash: u64,
        version: u32,
        pending: bool,
        latched: &mut bool,
        disk: Option<(u64, &[u8])>,
        out: Option<&mut Vec<u8>>,
        scratch: &mut Scratch,
    ) -> Outcome {
        let inner = &*self.inner;
        if let Op::Read = op {
            return self.read_attempt(hash, disk, out);
        }
        // A request from before the session's CPR point runs as version v
        // under its bucket's shared latch until it is done (§6.2.1). That
        // is a request of the version before the session's, and also a
        // pending request while the session is in PREPARE: the CPR point
        // will count it in v whether it finishes before the point or after,
        // so it may neither give its latch up on a retry (the session may
        // cross its CPR point before the next try, leaving an unlatched
        // version-v request that a version-(v+1) copy can overtake for
        // ever) nor shift to v+1.
        let old_request =
            version != self.local.version || pending && self.local.phase == Phase::Prepare;
        let mode = if old_request {
            Phase::Prepare
        } else {
            self.local.phase
        };
        let bucket = inner.index.bucket(hash);
        let coarse = inner.shift_mode == ShiftMode::Coarse;
        if mode == Phase::Prepare && !*latched && (old_request || !coarse) {
            // Algorithm 3: a bucket we cannot share-latch is being shifted.
            if !bucket.try_shared() {
                return Outcome::Shift;
            }
            *latched = true;
        }
        let mut outcome = self.in_window(|| {
            self.update_attempt(op, key, hash, version, mode, old_request, disk, scratch)
        });
        if mode == Phase::Prepare && !*latched && matches!(outcome, Outcome::Pending(_)) {
            // The coarse shift (Appendix B): a PREPARE request latches its
            // bucket only when it goes pending. Run it again holding the
            // latch, so that a version-(v+1) copy made between the first
            // attempt and the latch is seen (it shifts the request).
            if !bucket.try_shared() {
                return Outcome::Shift;
            }
            *latched = true;
            outcome = self.in_window(|| {
                self.update_attempt(op, key, hash, version, mode, old_request, disk, scratch)
            });
        }
        let release = match outcome {
            Outcome::Done(_) | Outcome::Shift | Outcome::Failed(_) => true,
            Outcome::Retry => !old_request,
            Outcome::Pending(_) => false,
        };
        if release && *latched {
            bucket.release_shared();
            *latched = false;
        }
        outcome
    }

    fn read_attempt(
        &self,
        hash: u64,
        disk: Option<(u64, &[u8])>,
        out: Option<&mut Vec<u8>>,
    ) -> Outcome {
        let log = &self.inner.log;
        let Some(entry) = self.inner.index.find(hash) else {
            return Outcome::Done(Status::NotFound);
        };
        match self.trace(entry.address(), log.head(), disk) {
            Found::Corrupt(reason) => Outcome::Failed(reason),
            Found::Absent => Outcome::Done(Status::NotFound),
            Found::NeedIo(address) => Outcome::Pending(Some(address)),
            Found::Memory(address) => {
                let record = log.record(address);
                if Header(record[0].load(Acquire)).tombstone() {
                    return Outcome::Done(Status::NotFound);
                }
                if let Some(out) = out {
                    self.layout.value(record).read_into(out);
                }
                Outcome::Done(Status::Ok)
            }
            Found::Disk(bytes) => {
                if Header(u64::from_le_bytes(bytes[..8].try_into().expect("8"))).tombstone() {
                    return Outcome::Done(Status::NotFound);
                }
                if let Some(out) = out {
                    out.clear();
                    out.extend_from_slice(self.layout.value_in(bytes));
                }
                Outcome::Done(Status::Ok)
            }
        }
    }

    /// Runs `attempt` inside the session's in-place window (`windows.rs`).
    #[inline(always)]
    fn in_window<R>(&self, attempt: impl FnOnce() -> R) -> R {
        self.open_window();
        let outcome = attempt();
        self.close_window();
        outcome
    }

    /// Algorithm 3 (mode PREPARE) and Algorithm 4 (the other modes) for
    /// Upsert, RMW and Delete. Runs inside the session's in-place window.
    #[allow(clippy::too_many_arguments)]
    fn update_attempt(
        &self,
        op: Op<&[u8], &F::Input>,
        key: &[u8],
        hash: u64,
        version: u32,
        mode: Phase,
        old_request: bool,
        disk: Option<(u64, &[u8])>,
        scratch: &mut Scratch,
    ) -> Outcome {
        let inner = &*self.inner;
        let log = &inner.log;
        let bucket = inner.index.bucket(hash);
        let mut entry = if matches!(op, Op::Delete) {
            match inner.index.find(hash) {
                Some(entry) => entry,
                None => return Outcome::Done(Status::NotFound),
            }
        } else {
            inner.index.find_or_create(hash)
        };
        let mine = record_version(version);
        let next = record_version(version + 1);
        let mut exclusive = false;
        // The version rules shared by records in memory and on disk:
        // `Ok(true)` may update in place (region permitting), `Ok(false)`
        // must append, `Err` is the outcome now.
        let coarse = inner.shift_mode == ShiftMode::Coarse;
        // `immutable`: the record is below safe read-only (or on disk), so
        // no thread updates it in place. `captured`: a snapshot checkpoint
        // has copied it already (`Inner::snapshot_captured`).
        let mut rules = |record_version: Option<u32>,
                         immutable: bool,
                         captured: bool|
         -> Result<bool, Outcome> {
            match mode {
                Phase::Prepare => match record_version {
                    Some(rv) if rv == next => Err(Outcome::Shift),
                    Some(_) => Ok(true),
                    // Unknown version (a blind update over a record on disk):
                    // no v+1 record exists before the global version moves;
                    // an old request's latch keeps them out of its bucket.
                    None if !old_request && inner.system_state().version != version => {
                        Err(Outcome::Shift)
                    }
                    None => Ok(false),
                },
                Phase::Rest => Ok(true),
                _ if record_version == Some(mine) => Ok(true),
                Phase::InProgress => {
                    if coarse && !immutable {
                        // Appendix B, coarse: a PREPARE thread may be
                        // updating it in place without a latch; only the
                        // safe read-only region may be shifted now.
                        Err(Outcome::Pending(None))
                    } else if bucket.try_exclusive() {
                        exclusive = true;
                        Ok(false)
                    } else {
                        Err(Outcome::Pending(None))
                    }
                }
                // No old request may hold the bucket (it would be updating
                // the record as version v): the exclusive latch, held until
                // the copy is in the index, also keeps in-place updates of
                // the record out meanwhile (see `update_in_place`).
                // In WAIT_FLUSH a version-v record is updated in place once
                // the snapshot holds it; otherwise copied, under the
                // exclusive latch if it is mutable (a snapshot leaves it so).
                Phase::WaitFlush if captured || immutable => Ok(captured),
                Phase::WaitPending | Phase::WaitFlush => {
                    if bucket.try_exclusive() {
                        exclusive = true;
                        Ok(false)
                    } else {
                        Err(Outcome::Pending(None))
                    }
                }
            }
        };
        let is_delete = matches!(op, Op::Delete);
        // Set when the plan updates an older version's record in place.
        let mut in_place_older = false;
        let plan = match self.trace(entry.address(), log.head(), disk) {
            Found::Corrupt(reason) => return Outcome::Failed(reason),
            // Nothing live to delete.
            Found::Absent if is_delete => return Outcome::Done(Status::NotFound),
            // No record of the key: the version rules still apply, with no
            // version to go by (FASTER's `InternalRmw` takes the latch for
            // it too). A key sharing its entry with others may have an
            // older request pending on it (waiting for a disk read of the
            // chain); without the IN_PROGRESS latch a v+1 record appended
            // now would make that version-v request shift for ever.
            Found::Absent => match rules(None, true, false) {
                Ok(_) => Plan::Append(Old::None),
                Err(outcome) => return outcome,
            },
            Found::NeedIo(address) => match op {
                Op::Rmw(_) => return Outcome::Pending(Some(address)),
                _ => match rules(None, true, false) {
                    Ok(_) => Plan::Append(Old::None),
                    Err(outcome) => return outcome,
                },
            },
            Found::Memory(address) => {
                let header = Header(log.record(address)[0].load(Acquire));
                if is_delete && header.tombstone() {
                    return Outcome::Done(Status::NotFound);
                }
                let captured = address < inner.snapshot_captured.load(Acquire);
                match rules(
                    Some(header.version()),
                    address < log.safe_read_only(),
                    captured,
                ) {
                    Err(outcome) => return outcome,
                    Ok(may_in_place) => {
                        let old = if header.tombstone() {
                            Old::None
                        } else {
                            Old::Memory(address)
                        };
                        if !may_in_place {
                            Plan::Append(old)
                        } else if address >= log.read_only() {
                            if header.tombstone() {
                                Plan::Append(Old::None)
                            } else if header.sealed() {
                                // An RMW is copying it (`seal_and_settle`):
                                // no update in place any more. A blind
                                // update appends at once; an RMW copies it
                                // too, once nobody can be adding to it.
                                if let Op::Rmw(_) = op {
                                    if !self.seal_and_settle(address) {
                                        return Outcome::Retry;
                                    }
                                }
                                Plan::Append(old)
                            } else {
                                in_place_older = header.version() != mine;
                                Plan::InPlace(address)
                            }
                        } else if address >= log.safe_read_only() {
                            // The fuzzy region (§5.1): another thread may
                            // still update it in place.
                            return Outcome::Pending(None);
                        } else {
                            Plan::Append(old)
                        }
                    }
                }
            }
            Found::Disk(bytes) => {
                let header = Header(u64::from_le_bytes(bytes[..8].try_into().expect("8")));
                if is_delete && header.tombstone() {
                    return Outcome::Done(Status::NotFound);
                }
                if let Err(outcome) = rules(Some(header.version()), true, false) {
                    return outcome;
                }
                if header.tombstone() {
                    Plan::Append(Old::None)
                } else {
                    Plan::Append(Old::Disk)
                }
            }
        };
        // An in-place update of an older version's record outside PREPARE
        // (REST not yet adopted by every session, or WAIT_FLUSH once the
        // snapshot holds it) takes the shared latch, as `update_in_place`
        // does, so that no session still in a CPR phase copies the record
        // to the tail meanwhile; a copy installed since the entry was read
        // makes it try again.
        let shared = in_place_older && self.older_in_place(mode) == OlderInPlace::LatchAndRecheck;
        if shared {
            if !bucket.try_shared() {
                return Outcome::Retry;
            }
            if !entry.is_current() {
                bucket.release_shared();
                return Outcome::Retry;
            }
        }
        let outcome = self.apply(op, key, &mut entry, mine, plan, disk, scratch);
        if exclusive {
            bucket.release_exclusive();
        }
        if shared {
            bucket.release_shared();
        }
        outcome
    }

    /// Carries out a plan: an in-place update, or a new record at the tail
    /// swung into the index by CAS.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        op: Op<&[u8], &F::Input>,
        key: &[u8],
        entry: &mut Entry<'_>,
        version: u32,
        plan: Plan,
        disk: Option<(u64, &[u8])>,
        scratch: &mut Scratch,
    ) -> Outcome {
        let log = &self.inner.log;
        let functions = &self.inner.functions;
        let old = match plan {
            Plan::InPlace(address) => {
                let record = log.record(address);
                let value = self.layout.value(record);
                let value_len = value.len();
                match op {
                    Op::Rmw(input)
                        if address != scratch.declined && functions.in_place(&value, input) =>
                    {
                        log.mark_dirty(address);
                        return Outcome::Done(Status::Ok);
                    }
                    // Declined: copied below, once nobody can be updating
                    // it in place any more.
                    Op::Rmw(_) => {
                        let sealed = self.seal_and_settle(address);
                        if !sealed {
                            return Outcome::Retry;
                        }
                    }
                    Op::Upsert(new) if new.len() == value_len => {
                        if value_len == 8 {
                            // The fixed 8-byte-value fast path: one store.
                            value.word(0).store(
                                u64::from_le_bytes(new[..8].try_into().expect("8")),
                                Relaxed,
                            );
                        } else {
                            value.write(new);
                        }
                        log.mark_dirty(address);
                        return Outcome::Done(Status::Ok);
                    }
                    _ => {}
                }
                Old::Memory(address)
            }
            Plan::Append(old) => old,
        };
        // The old value's bytes, for an RMW's copy updater.
        let old_bytes: Option<&[u8]> = match (op, old) {
            (Op::Rmw(_), Old::Memory(address)) => {
                self.layout
                    .value(log.record(address))
                    .read_into(&mut scratch.old);
                Some(&scratch.old)
            }
            (Op::Rmw(_), Old::Disk) => {
                let bytes = disk.expect("a disk plan has the record").1;
                Some(self.layout.value_in(bytes))
            }
            _ => None,
        };
        let (value, tombstone): (&[u8], bool) = match op {
            Op::Upsert(new) => (new, false),
            Op::Delete => (&[], true),
            Op::Rmw(input) => {
                scratch.value.clear();
                match old_bytes {
                    Some(old) => {
                        scratch.value.resize(functions.copy_len(old, input), 0);
                        functions.copy(old, input, &mut scratch.value);
                    }
                    None => {
                        scratch.value.resize(functions.initial_len(input), 0);
                        functions.initial(input, &mut scratch.value);
                    }
                }
                (&scratch.value, false)
            }
            Op::Read => unreachable!("reads do not update"),
        };
        let bytes = self.layout.record_bytes(key.len(), value.len());
        assert!(
            bytes <= log.record_bytes_max(),
            "an RMW grew a value past the page size ({bytes} bytes)"
        );
        match self.append(key, entry, version, tombstone, value) {
            Some(true) => Outcome::Done(Status::Ok),
            Some(false) | None => Outcome::Retry,
        }
    }
}
