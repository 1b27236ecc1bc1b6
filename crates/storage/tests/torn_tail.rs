//! Why: after a crash the last write of a log may be cut anywhere. Recovery
//! must see every synced block intact and the cut as a torn tail to discard,
//! never as corruption to refuse, on the simulated disk and on real files.

use std::path::{Path, PathBuf};

use epochdb_storage::{
    blocks, encode_block, CrashMode, FrameError, RealStorage, SimStorage, Storage,
};

const MAGIC: u32 = 0x5445_5354;

fn payload(i: usize) -> Vec<u8> {
    (0..(i * 7) % 50 + 1).map(|b| (b + i) as u8).collect()
}

/// Decodes `data`: the payloads of the leading valid blocks, and how the
/// data ended (`None`: cleanly).
fn decode(data: &[u8]) -> (Vec<Vec<u8>>, Option<FrameError>) {
    let mut payloads = Vec::new();
    for item in blocks(data, MAGIC) {
        match item {
            Ok((_, block)) => payloads.push(block.payload.to_vec()),
            Err(e) => return (payloads, Some(e)),
        }
    }
    (payloads, None)
}

/// Writes `count` framed blocks, syncing after the first `synced`, one
/// append per block; crashes with tearing; returns the log after restart.
fn crashed_log(seed: u64, synced: usize, count: usize) -> Vec<u8> {
    let disk = SimStorage::new(seed);
    let dir = PathBuf::from("/db");
    disk.create_dir_all(&dir).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let path = dir.join("data.log");
    let mut file = disk.create(&path).unwrap();
    disk.sync_dir(&dir).unwrap();
    for i in 0..count {
        let mut block = Vec::new();
        encode_block(&mut block, MAGIC, 1, 0, &payload(i));
        file.append(&block).unwrap();
        if i + 1 == synced {
            file.sync().unwrap();
        }
    }
    disk.crash(CrashMode::TearUnsynced).read(&path).unwrap()
}

#[test]
fn sim_torn_tail_is_torn_never_corrupt() {
    let (synced, count) = (4, 12);
    let mut torn_seen = false;
    for seed in 0..500 {
        let data = crashed_log(seed, synced, count);
        let (payloads, end) = decode(&data);
        assert!(payloads.len() >= synced, "seed {seed}: synced block lost");
        for (i, p) in payloads.iter().enumerate() {
            assert_eq!(*p, payload(i), "seed {seed}: block {i} changed");
        }
        match end {
            None => {}
            Some(FrameError::TornTail { .. }) => torn_seen = true,
            Some(e) => panic!("seed {seed}: torn tail reported as {e}"),
        }
    }
    assert!(torn_seen, "no seed tore a block");
}

/// Every cut of a framed file: the blocks wholly before the cut, then a
/// torn tail (or a clean end at a block boundary). Same body on both disks.
fn every_cut(storage: &dyn Storage, dir: &Path) {
    let mut framed = Vec::new();
    let mut boundaries = vec![0];
    for i in 0..5 {
        encode_block(&mut framed, MAGIC, 1, i as u16, &payload(i));
        boundaries.push(framed.len());
    }
    let path = dir.join("cut.log");
    let mut file = storage.create(&path).unwrap();
    for cut in (0..=framed.len()).rev() {
        file.truncate(0).unwrap();
        file.append(&framed[..cut]).unwrap();
        let data = storage.read(&path).unwrap();
        let (payloads, end) = decode(&data);
        let whole = boundaries.iter().filter(|&&b| b <= cut).count() - 1;
        assert_eq!(payloads.len(), whole, "cut {cut}");
        if boundaries.contains(&cut) {
            assert_eq!(end, None, "cut {cut}");
        } else {
            assert_eq!(
                end,
                Some(FrameError::TornTail {
                    offset: boundaries[whole]
                }),
                "cut {cut}"
            );
        }
    }
    // A zero-filled tail (allocated but never written) is torn too.
    file.truncate(0).unwrap();
    file.append(&framed).unwrap();
    file.append(&[0; 100]).unwrap();
    let (payloads, end) = decode(&storage.read(&path).unwrap());
    assert_eq!(payloads.len(), 5);
    assert_eq!(
        end,
        Some(FrameError::TornTail {
            offset: framed.len()
        })
    );
}

#[test]
fn real_every_cut_is_torn() {
    let tmp = tempfile::tempdir().unwrap();
    every_cut(&RealStorage::new(), tmp.path());
}

#[test]
fn sim_every_cut_is_torn() {
    let disk = SimStorage::new(9);
    disk.create_dir_all(Path::new("/db")).unwrap();
    every_cut(&disk, Path::new("/db"));
}
