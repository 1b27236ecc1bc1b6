//! Why this file exists: recovery replays the log on several threads
//! (`Config::recovery_threads`), each raising index entries only to higher
//! addresses, so that the order in which threads finish their chunks of
//! pages does not matter (cpr-sigmod19 §6.4: a key's entry must end at its
//! newest record in the checkpoint). These tests would fail if a thread
//! could leave an older record in an entry, if thread counts gave
//! different stores, or if a damaged log were reported differently.
//!
//! The workload: a few hot keys updated over and over between many cold
//! keys, so every hot key has records on nearly every page of a log of
//! hundreds of small pages, all in the range recovery replays (the index
//! checkpoint is taken first, when the log is nearly empty, and the last
//! checkpoint is log-only).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, Error, RealStorage, SimStorage, Status, Storage,
    Store,
};

const HOT: u64 = 8;
const ROUNDS: u64 = 400;
const COLD_PER_ROUND: u64 = 60;
const DIR: &str = "/parallel";

fn config(recovery_threads: usize) -> Config {
    Config {
        index_buckets: 1024,
        // 4 KiB pages: the log is hundreds of pages, so dozens of chunks.
        page_bits: 12,
        memory_bytes: 16 << 12,
        // One mutable page: a hot key's next update copies it to the tail.
        mutable_fraction: 0.0,
        max_sessions: 2,
        // The log is one file, `log.dat`, at file offset = address.
        log_segment_bits: 0,
        recovery_threads,
        ..Config::default()
    }
}

fn hot_key(k: u64) -> Vec<u8> {
    format!("hot-{k}").into_bytes()
}

fn cold_key(i: u64) -> Vec<u8> {
    format!("cold-{i}").into_bytes()
}

/// Checkpoints from another thread while the session refreshes.
fn checkpoint(
    store: &Store<AddU64>,
    session: &mut epochdb_hybridlog::Session<AddU64>,
    with_index: bool,
) {
    while session.pending() > 0 {
        session.complete_pending(false).unwrap();
    }
    std::thread::scope(|scope| {
        let job = scope.spawn(|| store.checkpoint_with(with_index, CheckpointKind::FoldOver));
        while !job.is_finished() {
            session.refresh();
            std::thread::yield_now();
        }
        job.join().unwrap().unwrap();
    });
}

/// Runs the workload on a fresh simulated disk; returns the disk after a
/// power cut and the model: every key's value.
fn build() -> (SimStorage, HashMap<Vec<u8>, u64>) {
    let disk = SimStorage::new(5);
    let store = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(1), AddU64).unwrap();
    let mut session = store.start_session().unwrap();
    let mut model = HashMap::new();
    session.upsert(b"first", &1u64.to_le_bytes()).unwrap();
    model.insert(b"first".to_vec(), 1);
    // The index checkpoint: l_h is near the start of the log.
    checkpoint(&store, &mut session, true);
    for round in 0..ROUNDS {
        for i in 0..COLD_PER_ROUND {
            let key = cold_key(round * COLD_PER_ROUND + i);
            session.upsert(&key, &round.to_le_bytes()).unwrap();
            model.insert(key, round);
        }
        for k in 0..HOT {
            // Upserts and RMWs, so both write paths leave copies.
            let key = hot_key(k);
            let value = round * 1000 + k;
            if round % 2 == 0 {
                session.upsert(&key, &value.to_le_bytes()).unwrap();
                model.insert(key, value);
            } else {
                session.rmw(&key, 1).unwrap();
                *model.get_mut(&key).unwrap() += 1;
            }
        }
        while session.pending() > 0 {
            session.complete_pending(true).unwrap();
        }
    }
    // Log-only: recovery replays everything from the first index
    // checkpoint's l_h.
    checkpoint(&store, &mut session, false);
    drop(session);
    drop(store);
    (disk.crash(CrashMode::DropUnsynced), model)
}

fn read_all(store: &Store<AddU64>, keys: &[Vec<u8>]) -> Vec<Option<u64>> {
    let mut session = store.start_session().unwrap();
    let mut out = vec![None; keys.len()];
    let mut waiting = HashMap::new();
    let mut value = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match session.read(key, &mut value).unwrap() {
            Status::Ok => out[i] = Some(u64::from_le_bytes(value[..8].try_into().unwrap())),
            Status::NotFound => {}
            Status::Pending => {
                waiting.insert(session.serial(), i);
            }
        }
    }
    for done in session.complete_pending(true).unwrap() {
        out[waiting[&done.serial]] = done
            .value
            .map(|v| u64::from_le_bytes(v[..8].try_into().unwrap()));
    }
    out
}

/// Recovers a copy of `disk` with `threads` replay threads; returns every
/// key's value and what recovery reported.
fn recover(disk: &SimStorage, threads: usize, keys: &[Vec<u8>]) -> (Vec<Option<u64>>, String) {
    let copy = disk.crash(CrashMode::DropUnsynced);
    let store = Store::open(Arc::new(copy), Path::new(DIR), config(threads), AddU64).unwrap();
    let info = store.recovered().expect("a checkpoint").clone();
    let values = read_all(&store, keys);
    let summary = format!(
        "version {} l_e {} log {} index {} invalidated {} addresses {:?}",
        info.version,
        info.l_e,
        info.log_bytes,
        info.index_bytes,
        info.invalidated,
        store.addresses()
    );
    (values, summary)
}

fn sorted_keys(model: &HashMap<Vec<u8>, u64>) -> Vec<Vec<u8>> {
    let mut keys: Vec<_> = model.keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn parallel_replay_keeps_each_keys_newest_record() {
    let (disk, model) = build();
    let keys = sorted_keys(&model);
    let want: Vec<_> = keys.iter().map(|k| Some(model[k])).collect();
    let log_bytes = disk.len(&Path::new(DIR).join("log.dat")).unwrap();
    assert!(
        log_bytes > 200 << 12,
        "the log must span hundreds of pages: {log_bytes} bytes"
    );
    // Thread finishing order varies from run to run: try several.
    for attempt in 0..6 {
        for threads in [2, 4, 7] {
            let (got, _) = recover(&disk, threads, &keys);
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(
                    got[i],
                    want[i],
                    "attempt {attempt}, {threads} threads: key {}",
                    String::from_utf8_lossy(key)
                );
            }
        }
    }
}

#[test]
fn one_thread_and_many_threads_recover_the_same_store() {
    let (disk, model) = build();
    let keys = sorted_keys(&model);
    let (one, one_info) = recover(&disk, 1, &keys);
    for threads in [0, 3, 16] {
        let (many, many_info) = recover(&disk, threads, &keys);
        assert_eq!(one_info, many_info, "{threads} threads");
        assert!(one == many, "{threads} threads: the values differ");
    }
}

/// Recovery reads the index and the log past the page cache when the
/// store writes past it (`Config::direct_io`), through it otherwise: on a
/// real disk, both must give the model's store (log pages of 4 KiB, the
/// last cut short at the checkpoint's end; index files of whole blocks of
/// any length).
#[test]
fn a_real_disk_read_past_the_page_cache_or_through_it_recovers_the_model() {
    let (disk, model) = build();
    let keys = sorted_keys(&model);
    let want: Vec<_> = keys.iter().map(|k| Some(model[k])).collect();
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for name in disk.list(Path::new(DIR)).unwrap() {
        let bytes = disk.read(&Path::new(DIR).join(&name)).unwrap();
        std::fs::write(scratch.path().join(&name), bytes).unwrap();
    }
    let mut summaries = Vec::new();
    for direct_io in [true, false, true] {
        let dir = scratch.path().join(format!("copy-{}", summaries.len()));
        std::fs::create_dir(&dir).unwrap();
        for entry in std::fs::read_dir(scratch.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
            }
        }
        let config = Config {
            direct_io,
            ..config(2)
        };
        let store = Store::open(Arc::new(RealStorage::new()), &dir, config, AddU64).unwrap();
        let info = store.recovered().expect("a checkpoint").clone();
        assert!(info.log_bytes > 200 << 12, "{info:?}");
        assert_eq!(read_all(&store, &keys), want, "direct_io {direct_io}");
        summaries.push((info.version, info.l_e, info.log_bytes, info.index_bytes));
    }
    assert!(summaries.windows(2).all(|w| w[0] == w[1]), "{summaries:?}");
}

/// Overwrites the key length of the first record of `page` (4 KiB pages,
/// `log.dat` at file offset = address) with a length no page can hold.
fn break_first_record(disk: &SimStorage, page: u64) {
    let path = Path::new(DIR).join("log.dat");
    let file = disk.open(&path).unwrap();
    let at = page << 12;
    let mut lengths = [0u8; 8];
    file.read_at(at + 8, &mut lengths).unwrap();
    assert_ne!(lengths, [0; 8], "page {page} starts with a record");
    lengths[..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
    file.write_at(at + 8, &lengths).unwrap();
    file.sync().unwrap();
}

fn open_error(disk: &SimStorage, threads: usize) -> Error {
    let copy = disk.crash(CrashMode::DropUnsynced);
    match Store::open(Arc::new(copy), Path::new(DIR), config(threads), AddU64) {
        Err(e) => e,
        Ok(_) => panic!("{threads} threads: a damaged log recovered"),
    }
}

/// Recovery with each of `threads` reports exactly `want`.
fn assert_same_error(disk: &SimStorage, want: &Error, threads: &[usize]) {
    for &threads in threads {
        assert_eq!(
            format!("{:?}", open_error(disk, threads)),
            format!("{want:?}"),
            "{threads} threads"
        );
    }
}

#[test]
fn a_damaged_log_is_reported_at_the_same_place_with_any_thread_count() {
    let (disk, _) = build();
    // Two damaged pages far apart (in different chunks): the lower one is
    // reported, whichever thread finds its damage first.
    break_first_record(&disk, 150);
    break_first_record(&disk, 40);
    let want = open_error(&disk, 1);
    match &want {
        Error::Corrupted { file, offset, .. } => {
            assert_eq!(file, &Path::new(DIR).join("log.dat"));
            assert_eq!(*offset, 40 << 12);
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    for _ in 0..3 {
        assert_same_error(&disk, &want, &[2, 5, 16]);
    }
}

#[test]
fn a_short_log_is_reported_at_its_end_with_any_thread_count() {
    let (disk, _) = build();
    let path = Path::new(DIR).join("log.dat");
    // Cut the log in the middle of a page: the whole pages before it are
    // replayed, the cut is reported.
    let mut file = disk.open(&path).unwrap();
    file.truncate((100 << 12) + 1000).unwrap();
    file.sync().unwrap();
    drop(file);
    let want = open_error(&disk, 1);
    match &want {
        Error::Corrupted { offset, reason, .. } => {
            assert_eq!(*offset, (100 << 12) + 1000);
            assert!(reason.contains("log ends"), "{reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    assert_same_error(&disk, &want, &[3, 8]);
    // With damage below the cut, the damage is reported (it is lower).
    // (Every recovery above crashed `disk`'s process: write to a new one.)
    let disk = disk.crash(CrashMode::DropUnsynced);
    break_first_record(&disk, 60);
    let want = open_error(&disk, 1);
    assert!(
        matches!(want, Error::Corrupted { offset, .. } if offset == 60 << 12),
        "{want:?}"
    );
    assert_same_error(&disk, &want, &[3, 8]);
}

/// Flips the lowest bit of the first value byte of the first record of
/// `page`: the record still decodes, only its checksum can tell. Returns
/// the byte's address.
fn flip_first_value_bit(disk: &SimStorage, page: u64) -> u64 {
    let path = Path::new(DIR).join("log.dat");
    let file = disk.open(&path).unwrap();
    let at = page << 12;
    let mut lengths = [0u8; 8];
    file.read_at(at + 8, &mut lengths).unwrap();
    let key_len = u32::from_le_bytes(lengths[..4].try_into().unwrap()) as u64;
    assert_ne!(key_len, 0, "page {page} starts with a record");
    let value_at = at + 16 + key_len.next_multiple_of(8);
    let mut byte = [0u8; 1];
    file.read_at(value_at, &mut byte).unwrap();
    byte[0] ^= 1;
    file.write_at(value_at, &byte).unwrap();
    file.sync().unwrap();
    value_at
}

#[test]
fn a_flipped_value_bit_is_caught_by_the_log_checksums() {
    let (disk, _) = build();
    let flipped = flip_first_value_bit(&disk, 90);
    let want = open_error(&disk, 1);
    match &want {
        Error::Corrupted {
            file,
            offset,
            reason,
        } => {
            assert_eq!(file, &Path::new(DIR).join("log.dat"));
            // The piece that holds the byte: it starts on the page.
            assert!(
                (90 << 12..=flipped).contains(offset),
                "{offset} for a flip at {flipped}"
            );
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    assert_same_error(&disk, &want, &[2, 6]);
}

#[test]
fn a_lost_or_damaged_checksum_file_is_reported() {
    let (disk, _) = build();
    let sums = Path::new(DIR).join("log.sums");
    let len = disk.len(&sums).unwrap();
    assert!(len > 0);
    // A bit in the middle of the claims: everything from its block on is
    // unreadable, so most of the replayed range has no checksum.
    let damaged = disk.crash(CrashMode::DropUnsynced);
    damaged.flip_bit(&sums, len * 8 / 2 + 3).unwrap();
    match open_error(&damaged, 2) {
        Error::Corrupted { file, .. } => assert_eq!(file, sums),
        other => panic!("expected Corrupted, got {other:?}"),
    }
    // (Every view of the simulated disk shares one disk: flip it back.)
    let lost = disk.crash(CrashMode::DropUnsynced);
    lost.flip_bit(&sums, len * 8 / 2 + 3).unwrap();
    let (_, summary) = recover(&lost, 2, &[]);
    assert!(summary.starts_with("version"));
    let lost = lost.crash(CrashMode::DropUnsynced);
    lost.remove(&sums).unwrap();
    lost.sync_dir(Path::new(DIR)).unwrap();
    match open_error(&lost, 2) {
        Error::Corrupted { file, reason, .. } => {
            assert_eq!(file, Path::new(DIR).join("log.dat"));
            assert!(reason.contains("no checksum"), "{reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

#[test]
fn a_recovered_store_checks_its_log_again_after_more_work() {
    // Recover, write more, checkpoint, recover again: the second recovery
    // checks pieces written before and after the first.
    let (disk, mut model) = build();
    let store = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(2), AddU64).unwrap();
    let first_l_e = store.recovered().expect("a checkpoint").l_e;
    let mut session = store.start_session().unwrap();
    for i in 0..2000u64 {
        let key = cold_key(i);
        session.upsert(&key, &(i + 7).to_le_bytes()).unwrap();
        model.insert(key, i + 7);
    }
    checkpoint(&store, &mut session, false);
    drop(session);
    drop(store);
    let disk = disk.crash(CrashMode::DropUnsynced);
    let keys = sorted_keys(&model);
    let (got, _) = recover(&disk, 3, &keys);
    let want: Vec<_> = keys.iter().map(|k| Some(model[k])).collect();
    assert!(got == want, "the values differ");
    // A page written before the first recovery, then one written after.
    for page in [30, (first_l_e >> 12) + 2] {
        let disk = disk.crash(CrashMode::DropUnsynced);
        let flipped = flip_first_value_bit(&disk, page);
        match open_error(&disk, 2) {
            Error::Corrupted { offset, .. } => {
                assert!((page << 12..=flipped).contains(&offset), "page {page}")
            }
            other => panic!("page {page}: expected Corrupted, got {other:?}"),
        }
        let disk = disk.crash(CrashMode::DropUnsynced);
        flip_first_value_bit(&disk, page);
    }
}

/// The key of the first record on `page` of the log file.
fn first_key_on(disk: &SimStorage, page: u64) -> Vec<u8> {
    let file = disk.open(&Path::new(DIR).join("log.dat")).unwrap();
    let at = page << 12;
    let mut lengths = [0u8; 8];
    file.read_at(at + 8, &mut lengths).unwrap();
    let mut key = vec![0u8; u32::from_le_bytes(lengths[..4].try_into().unwrap()) as usize];
    file.read_at(at + 16, &mut key).unwrap();
    key
}

/// Reads `key` through a pending request: the record lies below head.
fn read_from_disk(
    session: &mut epochdb_hybridlog::Session<AddU64>,
    key: &[u8],
) -> epochdb_hybridlog::Result<Option<u64>> {
    let mut value = Vec::new();
    assert_eq!(
        session.read(key, &mut value)?,
        Status::Pending,
        "below head"
    );
    let done = session.complete_pending(true)?;
    assert_eq!(done.len(), 1);
    Ok(done[0]
        .value
        .as_ref()
        .map(|v| u64::from_le_bytes(v[..8].try_into().unwrap())))
}

#[test]
fn a_record_read_from_disk_is_checked_against_the_log_checksums() {
    // As the scrub's test: an index checkpoint at the end, so recovery
    // replays nothing and the damage below is met only by a read.
    let (disk, model) = build();
    let store = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(2), AddU64).unwrap();
    let mut session = store.start_session().unwrap();
    checkpoint(&store, &mut session, true);
    drop(session);
    drop(store);
    let disk = disk.crash(CrashMode::DropUnsynced);
    // A page whose first record is a cold key's only one: the read of that
    // key goes to exactly this record.
    let page = (30..)
        .find(|&page| first_key_on(&disk, page).starts_with(b"cold-"))
        .unwrap();
    let key = first_key_on(&disk, page);
    let open = |disk: &SimStorage| {
        Store::open(
            Arc::new(disk.crash(CrashMode::DropUnsynced)),
            Path::new(DIR),
            config(2),
            AddU64,
        )
        .unwrap()
    };
    // Whole, the record reads back checked.
    let store = open(&disk);
    let mut session = store.start_session().unwrap();
    assert_eq!(
        read_from_disk(&mut session, &key).unwrap(),
        Some(model[&key])
    );
    let reads = store.disk_reads();
    assert!(
        reads.records >= 1 && reads.checked == reads.records,
        "{reads:?}"
    );
    drop(session);
    drop(store);
    // One bit flipped in its value: the read fails and says where, instead
    // of returning the wrong value. (Each `open` cut power on a copy of
    // `disk`, which leaves `disk`'s own handles stale: a fresh one here.)
    let disk = disk.crash(CrashMode::DropUnsynced);
    let flipped = flip_first_value_bit(&disk, page);
    let store = open(&disk);
    let mut session = store.start_session().unwrap();
    match read_from_disk(&mut session, &key) {
        Err(Error::Failed(reason)) => {
            assert!(
                reason.contains("log.dat") && reason.contains("log.sums"),
                "{reason}"
            );
            let piece_start = format!("[{}, ", (flipped >> 12) << 12);
            assert!(reason.contains(&piece_start), "{reason}");
        }
        other => panic!("expected the read to fail, got {other:?}"),
    }
}

#[test]
fn a_scrub_finds_damage_that_recovery_does_not_read() {
    // An index checkpoint at the end: recovery replays nothing below it.
    let (disk, _) = build();
    let store = Store::open(Arc::new(disk.clone()), Path::new(DIR), config(2), AddU64).unwrap();
    let mut session = store.start_session().unwrap();
    checkpoint(&store, &mut session, true);
    let clean = store.verify_log().unwrap();
    assert!(
        clean.pieces > 100 && clean.unchecked_bytes == 0,
        "{clean:?}"
    );
    drop(session);
    drop(store);
    let disk = disk.crash(CrashMode::DropUnsynced);
    let flipped = flip_first_value_bit(&disk, 30);
    let store = Store::open(
        Arc::new(disk.crash(CrashMode::DropUnsynced)),
        Path::new(DIR),
        config(2),
        AddU64,
    )
    .expect("the damage lies below the replayed range");
    match store.verify_log() {
        Err(Error::Corrupted { file, offset, .. }) => {
            assert_eq!(file, Path::new(DIR).join("log.dat"));
            assert!((30 << 12..=flipped).contains(&offset), "{offset}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
}
