//! Why this file exists: the log's central promise — under many concurrent
//! appenders the flushed log is a hole-free prefix of the LSN space in LSN
//! order, each thread's entries in its own order, every callback runs once,
//! in order, after its entry is durable — checked for GRASSHOPPER and both
//! baselines, with a ring small enough to wrap many times (backpressure),
//! hops of 1 KiB with entries up to 2.3 KiB (straddling), and rotation;
//! also with most entries staged (`ThreadHandle::stage`), whose nodes
//! GRASSHOPPER enqueues in runs.
#![cfg(not(loom))]

mod common;

use std::sync::Arc;

use common::*;
use epochdb_storage::SimStorage;
use epochdb_wal::{LogKind, Wal, WalOptions};

const THREADS: u32 = 4;
const PER_THREAD: u32 = 1500;

/// Odd seeds run the worker paced (`worker_pace_us`: it naps between
/// passes that moved little), even seeds polling continuously.
fn run(kind: LogKind, seed: u64) {
    run_with(kind, seed, false);
}

/// `staged`: two of every three entries are staged, the third commits.
fn run_with(kind: LogKind, seed: u64, staged: bool) {
    run_opts(
        kind,
        seed,
        staged,
        true,
        small_options(kind).hop_shift,
        &|_| {},
    );
}

/// `catch_up`: `WalOptions::sbl_catch_up` (GRASSHOPPER's worker may hop to
/// the sequencer inside a range; `false`: Algorithm 1 alone); hops of
/// `2^hop_shift` bytes; `tweak` changes any other option.
fn run_opts(
    kind: LogKind,
    seed: u64,
    staged: bool,
    catch_up: bool,
    hop_shift: u32,
    tweak: &dyn Fn(&mut WalOptions),
) -> epochdb_wal::WalStats {
    let disk = Arc::new(SimStorage::new(seed));
    let mut options = WalOptions {
        worker_pace_us: seed % 2 * 20,
        sbl_catch_up: catch_up,
        hop_shift,
        ..small_options(kind)
    };
    tweak(&mut options);
    let (wal, rec) = Wal::open(disk.clone(), "/db/wal", options.clone()).unwrap();
    assert!(rec.entries.is_empty());
    let acks: Vec<Acks> = (0..THREADS).map(|_| Acks::default()).collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let mut h = wal.thread_handle();
            let acks = acks[t as usize].clone();
            s.spawn(move || {
                let logged = if staged {
                    stage_and_commit_all(&mut h, t, PER_THREAD, &acks)
                } else {
                    commit_all(&mut h, t, PER_THREAD, &acks)
                };
                assert_eq!(logged, PER_THREAD);
                // Dropping the handle waits until durable, runs callbacks.
            });
        }
    });
    let stats = wal.stats();
    let end = wal.shutdown().unwrap();
    assert_eq!(end, stats.allocated_lsn);
    for (t, a) in acks.iter().enumerate() {
        let a = a.lock().unwrap();
        let commits = if staged {
            PER_THREAD / 3 + u32::from(!PER_THREAD.is_multiple_of(3))
        } else {
            PER_THREAD
        };
        assert_eq!(a.len(), commits as usize, "every callback ran once");
        for (seq, r) in a.iter() {
            let r = r.as_ref().expect("no failure injected");
            assert!(
                r.end <= end,
                "thread {t} seq {seq} acknowledged past the end"
            );
        }
    }
    let (_wal, rec) = Wal::open(disk, "/db/wal", options).unwrap();
    assert_eq!(rec.end_lsn, end);
    assert!(rec.discarded.is_none());
    let seen = check_prefix(&rec);
    assert_eq!(seen.len(), (THREADS * PER_THREAD) as usize);
    for (t, a) in acks.iter().enumerate() {
        check_acked_present(t as u32, a, &seen);
    }
    if kind == LogKind::Grasshopper {
        eprintln!(
            "grasshopper: hop {} crawl {} catch-up {} bytes, {} flushes",
            stats.hop_bytes, stats.crawl_bytes, stats.catch_up_bytes, stats.flushes
        );
        if !catch_up {
            assert_eq!(stats.catch_up_bytes, 0, "caught up though told not to");
        }
    }
    stats
}

/// [`run_opts`] of GRASSHOPPER (catch-up on, the small options' hops) with
/// `tweak`, for each of `seeds` with appended and with staged entries: the
/// stats of the four runs.
fn grasshopper_runs(
    seeds: [u64; 2],
    tweak: &dyn Fn(&mut WalOptions),
) -> Vec<epochdb_wal::WalStats> {
    let hop = small_options(LogKind::Grasshopper).hop_shift;
    seeds
        .into_iter()
        .flat_map(|seed| [false, true].map(|staged| (seed, staged)))
        .map(|(seed, staged)| run_opts(LogKind::Grasshopper, seed, staged, true, hop, tweak))
        .collect()
}

#[test]
fn grasshopper_flushes_a_hole_free_prefix() {
    run(LogKind::Grasshopper, 1);
}

#[test]
fn grasshopper_polling_flushes_a_hole_free_prefix() {
    run(LogKind::Grasshopper, 4);
}

#[test]
fn grasshopper_staged_runs_flush_a_hole_free_prefix() {
    run_with(LogKind::Grasshopper, 5, true);
}

#[test]
fn grasshopper_staged_runs_polling_flush_a_hole_free_prefix() {
    run_with(LogKind::Grasshopper, 6, true);
}

#[test]
fn grasshopper_without_catch_up_flushes_a_hole_free_prefix() {
    run_opts(LogKind::Grasshopper, 9, false, false, 10, &|_| {});
    run_opts(LogKind::Grasshopper, 10, true, false, 10, &|_| {});
}

/// Hops as long as the ring (64 KiB): the worker mostly crawls or catches
/// up with the sequencer, whose heads it moves without crawling.
#[test]
fn grasshopper_catching_up_flushes_a_hole_free_prefix() {
    let mut caught_up = 0;
    for seed in [11, 12] {
        caught_up += run_opts(LogKind::Grasshopper, seed, false, true, 16, &|_| {}).catch_up_bytes;
        caught_up += run_opts(LogKind::Grasshopper, seed, true, true, 16, &|_| {}).catch_up_bytes;
    }
    // Timing-dependent, but 3–4 MB per run here: the path was exercised.
    assert!(caught_up > 0, "the worker never caught up");
}

/// Database threads that step in for the worker at nearly every look
/// (`worker_help_after_us` 1 µs), beside a paced worker and a polling one:
/// the worker's state changes hands under its lock thousands of times
/// while four producers append, with appended and with staged entries.
#[test]
fn grasshopper_with_threads_helping_the_worker_flushes_a_hole_free_prefix() {
    let help_at_once = |o: &mut WalOptions| o.worker_help_after_us = 1;
    let helped: u64 = grasshopper_runs([13, 14], &help_at_once)
        .iter()
        .map(|stats| stats.help_passes)
        .sum();
    // Timing-dependent, but the paced worker's naps leave SBL still for
    // far longer than a microsecond: the path was exercised.
    assert!(helped > 0, "no database thread ever ran a pass");
}

/// Database threads that yield their core at nearly every look
/// (`yield_backlog_bytes` 1: any unflushed byte is a backlog), with
/// appended and with staged entries, and none that yield with the option
/// off or under a baseline: the log is still a hole-free prefix.
#[test]
fn grasshopper_with_threads_yielding_to_the_backlog_flushes_a_hole_free_prefix() {
    let always = |o: &mut WalOptions| o.yield_backlog_bytes = 1;
    let never = |o: &mut WalOptions| o.yield_backlog_bytes = 0;
    let yields: u64 = grasshopper_runs([18, 19], &always)
        .iter()
        .map(|stats| stats.backlog_yields)
        .sum();
    for stats in grasshopper_runs([18, 19], &never) {
        assert_eq!(stats.backlog_yields, 0, "{stats:?}");
    }
    // Four threads append ~5 MB per run through a 64 KiB ring: there is a
    // backlog at nearly every look, so the path was exercised.
    assert!(yields > 0, "no database thread ever yielded");
    let hop = small_options(LogKind::Grasshopper).hop_shift;
    for kind in [LogKind::Vanilla, LogKind::BitmapScan] {
        let stats = run_opts(kind, 20, false, true, hop, &always);
        assert_eq!(stats.backlog_yields, 0, "{kind:?}: {stats:?}");
    }
}

/// The flusher's pass after each flush, with the worker resting while it
/// flushes (`WalOptions::flusher_passes`, the default), and the paper's
/// pipeline without it: both flush a hole-free prefix.
#[test]
fn grasshopper_with_and_without_flusher_passes_flushes_a_hole_free_prefix() {
    let flusher_passes: u64 = grasshopper_runs([16, 17], &|_| {})
        .iter()
        .map(|stats| stats.flusher_passes)
        .sum();
    let off = |o: &mut WalOptions| o.flusher_passes = false;
    for stats in grasshopper_runs([16, 17], &off) {
        assert_eq!(stats.flusher_passes, 0, "{stats:?}");
    }
    // One after every flush: the path was exercised.
    assert!(flusher_passes > 0, "the flusher never passed");
}

/// A worker asleep for far longer than the test's waits (a 3 s pace: it
/// naps that long after any pass that moved SBL less than an I/O unit)
/// holds back no commit: a thread waiting for durability runs the pass
/// itself. With `worker_help_after_us` 0 each wait below would take up to
/// the worker's 3 s, and no pass would be a helper's.
#[test]
fn a_thread_waiting_for_durability_runs_a_late_workers_pass() {
    let disk = Arc::new(SimStorage::new(15));
    let options = WalOptions {
        worker_pace_us: 3_000_000,
        ..small_options(LogKind::Grasshopper)
    };
    let (wal, _) = Wal::open(disk, "/db/wal", options).unwrap();
    let mut h = wal.thread_handle();
    let started = std::time::Instant::now();
    for seq in 0..20 {
        let range = h.append(&[&record(0, seq)]).unwrap();
        h.wait_durable(range.end).unwrap();
    }
    let stats = wal.stats();
    assert!(
        started.elapsed() < std::time::Duration::from_millis(2500),
        "waits took {:?}: the worker's naps",
        started.elapsed()
    );
    // At most the first entry or two can have been the worker's before it
    // began its first long nap.
    assert!(stats.help_passes >= 18, "{stats:?}");
    drop(h);
    wal.shutdown().unwrap(); // waits for the worker's nap to end
}

#[test]
fn baselines_take_staged_entries_as_appends() {
    run_with(LogKind::Vanilla, 7, true);
    run_with(LogKind::BitmapScan, 8, true);
}

#[test]
fn vanilla_flushes_a_hole_free_prefix() {
    run(LogKind::Vanilla, 2);
}

#[test]
fn bitmap_scan_flushes_a_hole_free_prefix() {
    run(LogKind::BitmapScan, 3);
}

/// Threads that come and go while two others append throughout: each
/// departing thread's hopping-index counts are folded into the worker's
/// (grasshopper/hindex.rs), over a ring that wraps many times, so later
/// laps of the same slots must still be counted exactly once (a count
/// summed twice would let the worker hop a hole; one lost would leave it
/// only crawling). Both worker pacings.
#[test]
fn grasshopper_with_threads_that_come_and_go_flushes_a_hole_free_prefix() {
    const VISITORS: u32 = 40;
    const PER_VISITOR: u32 = 25;
    for seed in [3, 4] {
        let disk = Arc::new(SimStorage::new(seed));
        let options = WalOptions {
            worker_pace_us: seed % 2 * 20,
            ..small_options(LogKind::Grasshopper)
        };
        let (wal, _) = Wal::open(disk.clone(), "/db/wal", options.clone()).unwrap();
        let acks: Vec<Acks> = (0..2 + VISITORS).map(|_| Acks::default()).collect();
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let mut h = wal.thread_handle();
                let acks = acks[t as usize].clone();
                s.spawn(move || assert_eq!(commit_all(&mut h, t, PER_THREAD, &acks), PER_THREAD));
            }
            let (wal, acks) = (&wal, &acks);
            s.spawn(move || {
                for v in 2..2 + VISITORS {
                    let mut h = wal.thread_handle();
                    assert_eq!(
                        commit_all(&mut h, v, PER_VISITOR, &acks[v as usize]),
                        PER_VISITOR
                    );
                    // Dropped: waits until durable, then retires its list.
                }
            });
        });
        let stats = wal.stats();
        let end = wal.shutdown().unwrap();
        let (_wal, rec) = Wal::open(disk, "/db/wal", options).unwrap();
        assert_eq!(rec.end_lsn, end);
        let seen = check_prefix(&rec);
        assert_eq!(
            seen.len(),
            (2 * PER_THREAD + VISITORS * PER_VISITOR) as usize
        );
        for (t, a) in acks.iter().enumerate() {
            check_acked_present(t as u32, a, &seen);
        }
        eprintln!(
            "seed {seed}: hop {} crawl {} catch-up {} bytes",
            stats.hop_bytes, stats.crawl_bytes, stats.catch_up_bytes
        );
        // With 1 KiB ranges filling faster than the worker passes, hopping
        // carries nearly every byte (over 99% in session 59's runs); a
        // count lost or summed twice leaves ranges never exactly full, and
        // then crawling carried 70–90% (checked by mutating the fold).
        assert!(
            stats.crawl_bytes + stats.catch_up_bytes < stats.hop_bytes,
            "ranges not seen full: a departed thread's counts lost or doubled"
        );
    }
}

/// Long stress: more threads and entries over several seeds.
#[test]
#[ignore = "long stress; run with --ignored"]
fn stress_many_seeds() {
    for seed in 0..20 {
        for kind in KINDS {
            run(kind, seed);
            run_with(kind, seed, true);
        }
        run_opts(LogKind::Grasshopper, seed, false, false, 10, &|_| {});
        run_opts(LogKind::Grasshopper, seed, false, true, 16, &|_| {});
    }
}

/// The same promise on real files (the seam's other implementation).
#[test]
fn grasshopper_on_real_files() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = Arc::new(epochdb_storage::RealStorage::new());
    let dir = tmp.path().join("wal");
    let (wal, _) = Wal::open(disk.clone(), &dir, small_options(LogKind::Grasshopper)).unwrap();
    let acks: Vec<Acks> = (0..2).map(|_| Acks::default()).collect();
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let mut h = wal.thread_handle();
            let acks = acks[t as usize].clone();
            s.spawn(move || assert_eq!(commit_all(&mut h, t, 300, &acks), 300));
        }
    });
    let end = wal.shutdown().unwrap();
    let (_wal, rec) = Wal::open(disk, &dir, small_options(LogKind::Grasshopper)).unwrap();
    assert_eq!(rec.end_lsn, end);
    let seen = check_prefix(&rec);
    assert_eq!(seen.len(), 600);
    for (t, a) in acks.iter().enumerate() {
        assert_eq!(check_acked_present(t as u32, a, &seen), 300);
    }
}
