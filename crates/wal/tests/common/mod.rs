//! Helpers shared by the integration tests: a workload whose every record
//! names its thread and sequence number, and the checks that a recovered
//! log is a hole-free, in-order prefix holding every acknowledged commit.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use epochdb_wal::{LogKind, LsnRange, RecoveredLog, ThreadHandle, WalError, WalOptions};

/// Small sizes so tests wrap the ring, hop, straddle and rotate.
pub fn small_options(kind: LogKind) -> WalOptions {
    WalOptions {
        kind,
        io_unit_bytes: 4 << 10,
        buffer_bytes: 64 << 10,
        hop_shift: 10,
        file_max_bytes: 256 << 10,
        ..WalOptions::default()
    }
}

pub const KINDS: [LogKind; 3] = [LogKind::Grasshopper, LogKind::Vanilla, LogKind::BitmapScan];

/// The record for `(thread, seq)`: the pair, then filler whose length
/// varies with both (0 to ~2.3 KiB: some entries exceed the 1 KiB hop).
pub fn record(thread: u32, seq: u32) -> Vec<u8> {
    let filler = (seq as usize * 7919 + thread as usize * 104_729) % 2300;
    let mut r = Vec::with_capacity(8 + filler);
    r.extend_from_slice(&thread.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend((0..filler).map(|i| (i as u32 ^ seq ^ thread) as u8));
    r
}

/// What one thread's callbacks saw: `(seq, result)` in the order they ran.
pub type Acks = Arc<Mutex<Vec<(u32, Result<LsnRange, WalError>)>>>;

/// Commits `(thread, seq)` for `seq` in `0..count`, recording each
/// callback; stops at the first error. Returns how many commits returned Ok.
pub fn commit_all(handle: &mut ThreadHandle, thread: u32, count: u32, acks: &Acks) -> u32 {
    for seq in 0..count {
        let rec = record(thread, seq);
        let acks = acks.clone();
        let r = handle.commit(&[&rec], move |r| acks.lock().unwrap().push((seq, r)));
        if r.is_err() {
            return seq;
        }
    }
    count
}

/// Like [`commit_all`], but stages two of every three records
/// ([`ThreadHandle::stage`]) and commits the third with a callback, as a
/// transaction that buffers records before its commit does; `acks` sees
/// the commits only. Returns how many entries were logged.
pub fn stage_and_commit_all(
    handle: &mut ThreadHandle,
    thread: u32,
    count: u32,
    acks: &Acks,
) -> u32 {
    for seq in 0..count {
        let rec = record(thread, seq);
        let r = if seq % 3 == 2 || seq + 1 == count {
            let acks = acks.clone();
            handle.commit(&[&rec], move |r| acks.lock().unwrap().push((seq, r)))
        } else {
            handle.stage(&[&rec])
        };
        if r.is_err() {
            return seq;
        }
    }
    count
}

/// Checks that `log` is a hole-free prefix in LSN order whose per-thread
/// sequences are `0..k` prefixes with intact records; returns the set of
/// `(thread, seq)` recovered.
pub fn check_prefix(log: &RecoveredLog) -> BTreeSet<(u32, u32)> {
    let mut next = log.start_lsn;
    let mut next_seq = std::collections::HashMap::<u32, u32>::new();
    let mut seen = BTreeSet::new();
    for e in &log.entries {
        assert_eq!(e.lsn.start, next, "hole or overlap before {}", e.lsn);
        next = e.lsn.end;
        assert_eq!(e.records.len(), 1);
        let r = &e.records[0];
        let thread = u32::from_le_bytes(r[0..4].try_into().unwrap());
        let seq = u32::from_le_bytes(r[4..8].try_into().unwrap());
        assert_eq!(*r, record(thread, seq), "record damaged");
        let want = next_seq.entry(thread).or_insert(0);
        assert_eq!(seq, *want, "thread {thread}: out of order or a gap");
        *want += 1;
        seen.insert((thread, seq));
    }
    assert_eq!(next, log.end_lsn);
    seen
}

/// Every commit acknowledged Ok in `acks` of `thread` is in `seen`, and
/// callbacks ran in sequence order.
pub fn check_acked_present(thread: u32, acks: &Acks, seen: &BTreeSet<(u32, u32)>) -> usize {
    let acks = acks.lock().unwrap();
    let mut ok = 0;
    let mut last = None;
    for (seq, r) in acks.iter() {
        assert!(last < Some(*seq), "thread {thread}: callbacks out of order");
        last = Some(*seq);
        if r.is_ok() {
            ok += 1;
            assert!(
                seen.contains(&(thread, *seq)),
                "acknowledged ({thread}, {seq}) lost"
            );
        }
    }
    ok
}
