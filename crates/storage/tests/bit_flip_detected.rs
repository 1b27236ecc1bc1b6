//! Why: media rot inside synced data must be reported, with its offset, not
//! silently decoded or mistaken for a torn tail and thrown away — except
//! where the two cannot be told apart (a flipped length in the last block
//! pointing past the end), which must still never decode as valid data.

use std::path::{Path, PathBuf};

use epochdb_storage::{
    blocks, encode_block, CorruptReason, CrashMode, FrameError, SimStorage, Storage,
};

const MAGIC: u32 = 0xB17F_11B5;

/// A disk holding a synced, dir-synced file of five framed blocks; returns
/// the disk, the path, the bytes and the offset of each block.
fn framed_file(seed: u64) -> (SimStorage, PathBuf, Vec<u8>, Vec<usize>) {
    let disk = SimStorage::new(seed);
    let dir = Path::new("/db");
    disk.create_dir_all(dir).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let path = dir.join("ckpt");
    let mut bytes = Vec::new();
    let mut starts = Vec::new();
    for i in 0..5u8 {
        starts.push(bytes.len());
        let payload: Vec<u8> = (0..i * 5).map(|b| b ^ i).collect();
        encode_block(&mut bytes, MAGIC, 2, u16::from(i), &payload);
    }
    let mut file = disk.create(&path).unwrap();
    file.append(&bytes).unwrap();
    file.sync().unwrap();
    disk.sync_dir(dir).unwrap();
    (disk, path, bytes, starts)
}

/// The first error decoding `data`, or `None` if every block decodes.
fn first_error(data: &[u8]) -> Option<FrameError> {
    blocks(data, MAGIC).find_map(Result::err)
}

#[test]
fn every_single_bit_flip_is_caught() {
    let (disk, path, bytes, starts) = framed_file(1);
    let last = *starts.last().unwrap();
    assert_eq!(first_error(&disk.read(&path).unwrap()), None);
    for bit in 0..bytes.len() as u64 * 8 {
        disk.flip_bit(&path, bit).unwrap();
        let data = disk.read(&path).unwrap();
        assert_ne!(data, bytes, "bit {bit} not flipped");
        let byte = (bit / 8) as usize;
        let block_start = *starts.iter().rev().find(|&&s| s <= byte).unwrap();
        match first_error(&data) {
            Some(FrameError::Corrupt { offset, .. }) => {
                assert_eq!(offset, block_start, "bit {bit}")
            }
            Some(FrameError::TornTail { offset }) => {
                // Only the last block's length field may pass for a tear.
                assert_eq!(offset, last, "bit {bit} read as a torn tail");
                assert!((last + 8..last + 12).contains(&byte), "bit {bit}");
            }
            Some(other) => panic!("bit {bit}: unexpected {other:?}"),
            None => panic!("bit {bit} flipped undetected"),
        }
        disk.flip_bit(&path, bit).unwrap();
    }
    assert_eq!(disk.read(&path).unwrap(), bytes);
}

#[test]
fn flipped_length_before_valid_blocks_is_corrupt_not_torn() {
    let (disk, path, _, starts) = framed_file(2);
    // Bit 15 of the first block's length: it now runs past the end.
    disk.flip_bit(&path, 9 * 8 + 7).unwrap();
    let err = first_error(&disk.read(&path).unwrap()).unwrap();
    assert!(
        matches!(
            err,
            FrameError::Corrupt { offset: 0, reason: CorruptReason::LengthPastEnd { next_valid, .. } }
                if next_valid == starts[1]
        ),
        "{err:?}"
    );
}

#[test]
fn random_flips_survive_a_crash_and_are_caught() {
    for seed in 0..200 {
        let (disk, path, bytes, _) = framed_file(seed);
        let bit = disk.flip_random_bit(&path).unwrap();
        assert!(bit < bytes.len() as u64 * 8);
        let after = disk.crash(CrashMode::TearUnsynced);
        let data = after.read(&path).unwrap();
        assert_ne!(data, bytes, "seed {seed}");
        assert!(
            first_error(&data).is_some(),
            "seed {seed}: bit {bit} undetected"
        );
    }
}
