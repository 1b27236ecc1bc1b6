//! Why this file exists: `ThreadHandle::stage` lets GRASSHOPPER hold an
//! entry's node back and enqueue a thread's contiguous entries as one run.
//! A held entry stops SBL for every thread, so each way a handle can stop
//! appending (waiting for durability, polling, dropping, running out of
//! ring space) must enqueue what it holds — otherwise the log deadlocks.
//! These tests fail by timing out where it would.
#![cfg(not(loom))]

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use epochdb_storage::SimStorage;
use epochdb_wal::{LogKind, Wal};

/// Runs `f` on its own thread and fails if it has not returned within a
/// generous deadline (a held entry nobody enqueues hangs forever).
fn within_deadline(what: &str, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The closure panicked: report its panic.
            worker.join().unwrap();
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: still waiting after 30 s"),
    }
}

/// A GRASSHOPPER log with the tests' small options on a fresh simulated
/// disk.
fn fresh_log(seed: u64) -> (Arc<SimStorage>, Wal) {
    let disk = Arc::new(SimStorage::new(seed));
    let (wal, _) = Wal::open(disk.clone(), "/db/wal", small_options(LogKind::Grasshopper)).unwrap();
    (disk, wal)
}

/// Recovers `disk`'s log and returns `(thread, seq)` of its entries in order.
fn recovered(disk: Arc<SimStorage>) -> Vec<(u32, u32)> {
    let (_wal, rec) = Wal::open(disk, "/db/wal", small_options(LogKind::Grasshopper)).unwrap();
    check_prefix(&rec).into_iter().collect()
}

#[test]
fn staged_entries_are_durable_with_the_commit_after_them() {
    within_deadline("commit after staged entries", || {
        let (disk, wal) = fresh_log(11);
        let mut h = wal.thread_handle();
        let a = h.stage(&[&record(0, 0)]).unwrap();
        let b = h.stage(&[&record(0, 1)]).unwrap();
        assert_eq!(a.end, b.start, "one thread alone: contiguous");
        let acked = Acks::default();
        let acks = acked.clone();
        let c = h
            .commit(&[&record(0, 2)], move |r| acks.lock().unwrap().push((2, r)))
            .unwrap();
        h.wait_durable(c.end).unwrap();
        assert!(wal.durable_lsn() >= c.end);
        assert_eq!(acked.lock().unwrap().len(), 1);
        drop(h);
        wal.shutdown().unwrap();
        assert_eq!(recovered(disk), vec![(0, 0), (0, 1), (0, 2)]);
    });
}

#[test]
fn waiting_for_a_staged_entry_enqueues_it() {
    within_deadline("wait_durable on a staged entry", || {
        let (disk, wal) = fresh_log(12);
        let mut h = wal.thread_handle();
        let a = h.stage(&[&record(0, 0)]).unwrap();
        h.wait_durable(a.end).unwrap();
        assert!(wal.durable_lsn() >= a.end);
        // And polling enqueues too: another thread sees it become durable.
        let b = h.stage(&[&record(0, 1)]).unwrap();
        h.poll_callbacks();
        let watch = wal.durable_watch();
        assert!(
            std::thread::spawn(move || watch.wait_past(b.end - 1))
                .join()
                .unwrap()
                >= b.end
        );
        drop(h);
        wal.shutdown().unwrap();
        assert_eq!(recovered(disk), vec![(0, 0), (0, 1)]);
    });
}

#[test]
fn dropping_a_handle_enqueues_what_it_held() {
    within_deadline("drop with a staged entry", || {
        let (disk, wal) = fresh_log(13);
        let mut h = wal.thread_handle();
        h.stage(&[&record(0, 0)]).unwrap();
        drop(h);
        let end = wal.shutdown().unwrap();
        assert!(end > 0);
        assert_eq!(recovered(disk), vec![(0, 0)]);
    });
}

/// More staged bytes than the ring holds, never committed: each entry that
/// finds its ring space still unflushed must enqueue the held run first,
/// since SDL cannot pass it otherwise.
#[test]
fn staging_more_than_the_ring_holds_does_not_deadlock() {
    within_deadline("staging past the ring", || {
        let ring = small_options(LogKind::Grasshopper).buffer_bytes;
        let (disk, wal) = fresh_log(14);
        let mut h = wal.thread_handle();
        let mut staged = 0usize;
        let mut seq = 0;
        while staged < 4 * ring {
            let r = record(0, seq);
            staged += r.len();
            h.stage(&[&r]).unwrap();
            seq += 1;
        }
        drop(h);
        wal.shutdown().unwrap();
        assert_eq!(recovered(disk).len(), seq as usize);
    });
}

/// Two threads staging and committing: a held run ends where the other
/// thread's entry begins, so runs break and are enqueued piecewise.
#[test]
fn interleaved_threads_break_runs_without_losing_entries() {
    within_deadline("two staging threads", || {
        let (disk, wal) = fresh_log(15);
        let acks: Vec<Acks> = (0..2).map(|_| Acks::default()).collect();
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let mut h = wal.thread_handle();
                let acks = acks[t as usize].clone();
                s.spawn(move || assert_eq!(stage_and_commit_all(&mut h, t, 900, &acks), 900));
            }
        });
        wal.shutdown().unwrap();
        let seen: std::collections::BTreeSet<_> = recovered(disk).into_iter().collect();
        assert_eq!(seen.len(), 1800);
        for (t, a) in acks.iter().enumerate() {
            assert_eq!(check_acked_present(t as u32, a, &seen), 300);
        }
    });
}
