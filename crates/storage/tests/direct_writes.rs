//! Why: `write_direct_at` (the page-cache bypass the HybridLog's flush
//! uses) must write exactly what a buffered write would — readable at once
//! through the ordinary handle, durable only after `sync` — and must refuse
//! a misaligned call the same way on the real and the simulated disk, so a
//! caller that passes the simulated crash tests cannot fail on a real one.

use std::path::Path;

use epochdb_storage::{
    CrashMode, DirectBuffer, RealStorage, SimStorage, Storage, StorageError, DIRECT_ALIGN,
};

fn pattern(len: usize, seed: u8) -> DirectBuffer {
    let mut buffer = DirectBuffer::zeroed(len);
    for (i, byte) in buffer.as_mut_slice().iter_mut().enumerate() {
        *byte = (i as u8).wrapping_mul(31) ^ seed;
    }
    buffer
}

fn is_invalid_input(result: Result<(), StorageError>) -> bool {
    match result {
        Err(StorageError::Io { source, .. }) => source.kind() == std::io::ErrorKind::InvalidInput,
        _ => false,
    }
}

/// Writes two aligned blocks, overwrites the first, and checks the bytes
/// and the refusals; returns nothing, panics on a difference.
fn exercise(storage: &dyn Storage, dir: &Path) {
    storage.create_dir_all(dir).unwrap();
    let path = dir.join("direct.dat");
    let file = storage.create(&path).unwrap();
    let two = pattern(2 * DIRECT_ALIGN, 1);
    file.write_direct_at(DIRECT_ALIGN as u64, two.as_slice())
        .unwrap();
    let one = pattern(DIRECT_ALIGN, 2);
    file.write_direct_at(DIRECT_ALIGN as u64, one.as_slice())
        .unwrap();
    file.sync().unwrap();
    let mut read = vec![0u8; 3 * DIRECT_ALIGN];
    assert_eq!(file.read_at(0, &mut read).unwrap(), 3 * DIRECT_ALIGN);
    assert!(
        read[..DIRECT_ALIGN].iter().all(|&b| b == 0),
        "the gap is zeros"
    );
    assert_eq!(&read[DIRECT_ALIGN..2 * DIRECT_ALIGN], one.as_slice());
    assert_eq!(&read[2 * DIRECT_ALIGN..], &two.as_slice()[DIRECT_ALIGN..]);
    // Misaligned offset, length, address: refused, nothing written, and the
    // storage is not latched (a caller's mistake is not a disk failure).
    assert!(is_invalid_input(file.write_direct_at(512, one.as_slice())));
    assert!(is_invalid_input(
        file.write_direct_at(0, &one.as_slice()[..100])
    ));
    let unaligned = pattern(DIRECT_ALIGN + 1, 3);
    assert!(is_invalid_input(
        file.write_direct_at(0, &unaligned.as_slice()[1..])
    ));
    assert_eq!(file.size().unwrap(), 3 * DIRECT_ALIGN as u64);
    file.write_at(0, b"still works").unwrap();
}

#[test]
fn real_files_take_aligned_direct_writes_and_refuse_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    exercise(&RealStorage::new(), dir.path());
}

#[test]
fn the_simulated_disk_takes_them_alike() {
    let disk = SimStorage::new(9);
    exercise(&disk, Path::new("/d"));
}

#[test]
fn a_direct_write_is_not_durable_before_sync() {
    let disk = SimStorage::new(4);
    let dir = Path::new("/d");
    disk.create_dir_all(dir).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let path = dir.join("f");
    let file = disk.create(&path).unwrap();
    disk.sync_dir(dir).unwrap();
    let block = pattern(DIRECT_ALIGN, 5);
    file.write_direct_at(0, block.as_slice()).unwrap();
    file.sync().unwrap();
    file.write_direct_at(DIRECT_ALIGN as u64, block.as_slice())
        .unwrap();
    let after = disk.crash(CrashMode::DropUnsynced);
    assert_eq!(after.read(&path).unwrap(), block.as_slice());
}

#[test]
fn direct_buffers_are_aligned() {
    for len in [0, 1, 4096, 100_000] {
        let buffer = DirectBuffer::zeroed(len);
        assert_eq!(buffer.as_slice().as_ptr() as usize % DIRECT_ALIGN, 0);
        assert_eq!(buffer.len(), len);
    }
}

/// The appender: whatever the lengths appended, the file is the data and
/// then zeros up to a block boundary; `trim` leaves exactly the data; a
/// new appender over an existing file (its partial last block read back)
/// goes on where the data ends.
#[test]
fn the_appender_writes_the_data_then_padding_and_trims_it() {
    let disk = SimStorage::new(6);
    let path = Path::new("/log");
    let mut file = disk.create(path).unwrap();
    file.append(b"header").unwrap();
    let mut appender = epochdb_storage::DirectAppender::new(file.as_ref(), 6, 3 * 4096).unwrap();
    let mut expected = b"header".to_vec();
    for (i, len) in [1usize, 4089, 4096, 5000, 3 * 4096 + 17, 0, 12_000]
        .into_iter()
        .enumerate()
    {
        let data: Vec<u8> = (0..len).map(|b| (b * 13 + i) as u8).collect();
        let at = appender.append(file.as_ref(), &data).unwrap();
        assert_eq!(at, expected.len() as u64);
        expected.extend_from_slice(&data);
        assert_eq!(appender.len(), expected.len() as u64);
        let on_disk = disk.read(path).unwrap();
        assert_eq!(on_disk.len() % DIRECT_ALIGN, 0, "padded to a block");
        assert_eq!(&on_disk[..expected.len()], &expected[..]);
        assert!(on_disk[expected.len()..].iter().all(|&b| b == 0));
    }
    drop(appender);
    let mut appender =
        epochdb_storage::DirectAppender::new(file.as_ref(), expected.len() as u64, 4096).unwrap();
    appender.append(file.as_ref(), b"more").unwrap();
    expected.extend_from_slice(b"more");
    appender.trim(file.as_mut()).unwrap();
    assert_eq!(disk.read(path).unwrap(), expected);
}

/// Overlapped appends (each write on a thread of its own while the next
/// one's bytes are filled in) leave the file exactly as plain appends do,
/// mixed with them in any order; and a failed write is reported.
#[test]
fn overlapped_appends_write_what_plain_appends_write() {
    use epochdb_storage::{DirectAppender, FaultKind, FaultOp};
    let disk = SimStorage::new(7);
    let path = Path::new("/log");
    let mut file = disk.create(path).unwrap();
    file.append(b"header").unwrap();
    let mut appender = DirectAppender::new(file.as_ref(), 6, 2 * 4096).unwrap();
    let mut expected = b"header".to_vec();
    let lengths = [
        1usize,
        3 * 4096 + 5,
        8192,
        8191,
        5 * 8192 + 4093,
        17,
        20_000,
        0,
    ];
    for (i, &len) in lengths.iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
        let at = if i % 3 == 1 {
            appender.append(file.as_ref(), &data).unwrap()
        } else {
            let mut asked = 0;
            let at = appender
                .append_overlapped(file.as_ref(), len, |offset, out| {
                    assert_eq!(offset, asked, "pieces asked for in order");
                    out.copy_from_slice(&data[offset..offset + out.len()]);
                    asked += out.len();
                })
                .unwrap();
            assert_eq!(asked, len);
            at
        };
        assert_eq!(at, expected.len() as u64);
        expected.extend_from_slice(&data);
        assert_eq!(appender.len(), expected.len() as u64);
        let on_disk = disk.read(path).unwrap();
        assert_eq!(on_disk.len() % DIRECT_ALIGN, 0, "padded to a block");
        assert_eq!(&on_disk[..expected.len()], &expected[..], "append {i}");
        assert!(on_disk[expected.len()..].iter().all(|&b| b == 0));
    }
    disk.fail_nth(FaultOp::Write, 2, FaultKind::Eio);
    let failed = appender.append_overlapped(file.as_ref(), 40_000, |_, out| out.fill(1));
    assert!(failed.is_err(), "the second write's error is reported");
}

/// `write_words_direct_at` (the HybridLog's flush straight from its frames)
/// writes each word's bytes in order, like `write_direct_at` of a copy, and
/// refuses the same misalignments, on the real and the simulated disk.
#[test]
fn words_are_written_as_their_bytes_and_misalignment_refused() {
    use epochdb_memory::{HugePages, Region};
    use std::sync::atomic::AtomicU64;
    let words = Region::new(2 * DIRECT_ALIGN / 8 + 1, HugePages::Off, |i| {
        AtomicU64::new((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    });
    let blocks = &words[..2 * DIRECT_ALIGN / 8];
    let expected: Vec<u8> = blocks
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    let real = RealStorage::new();
    let dir = tempfile::tempdir().unwrap();
    let disk = SimStorage::new(11);
    disk.create_dir_all(Path::new("/d")).unwrap();
    for (storage, path) in [
        (&real as &dyn Storage, dir.path().join("words")),
        (&disk, Path::new("/d/words").to_path_buf()),
    ] {
        let file = storage.create(&path).unwrap();
        file.write_words_direct_at(DIRECT_ALIGN as u64, blocks)
            .unwrap();
        let mut read = vec![0u8; 3 * DIRECT_ALIGN];
        assert_eq!(file.read_at(0, &mut read).unwrap(), 3 * DIRECT_ALIGN);
        assert!(read[..DIRECT_ALIGN].iter().all(|&b| b == 0));
        assert_eq!(&read[DIRECT_ALIGN..], &expected[..]);
        assert!(is_invalid_input(file.write_words_direct_at(8, blocks)));
        assert!(is_invalid_input(
            file.write_words_direct_at(0, &words[1..DIRECT_ALIGN / 8 + 1])
        ));
        assert!(is_invalid_input(
            file.write_words_direct_at(0, &words[..100])
        ));
    }
}
