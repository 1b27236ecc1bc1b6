//! Why: `read_direct_at` (the page-cache bypass recovery reads a log
//! with) must return exactly what a buffered read would — including bytes
//! written through the cache and not yet synced, and a file end that is not
//! block-aligned — and must refuse a misaligned call the same way on the
//! real and the simulated disk.

use std::path::Path;

use epochdb_storage::{DirectBuffer, RealStorage, SimStorage, Storage, StorageError, DIRECT_ALIGN};

fn is_invalid_input(result: Result<usize, StorageError>) -> bool {
    match result {
        Err(StorageError::Io { source, .. }) => source.kind() == std::io::ErrorKind::InvalidInput,
        _ => false,
    }
}

/// Writes an unaligned length through the cache (unsynced), reads it back
/// directly at several offsets and lengths, and checks the refusals.
fn exercise(storage: &dyn Storage, dir: &Path) {
    storage.create_dir_all(dir).unwrap();
    let path = dir.join("direct-read.dat");
    let file = storage.create(&path).unwrap();
    let len = 3 * DIRECT_ALIGN + 100;
    let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(29) ^ 7).collect();
    file.write_at(0, &bytes).unwrap();

    // Past the end: a short read that ends where the file does.
    let mut whole = DirectBuffer::zeroed(4 * DIRECT_ALIGN);
    assert_eq!(file.read_direct_at(0, whole.as_mut_slice()).unwrap(), len);
    assert_eq!(&whole.as_slice()[..len], &bytes[..]);

    // From a block in the middle.
    let mut middle = DirectBuffer::zeroed(DIRECT_ALIGN);
    let at = DIRECT_ALIGN as u64;
    assert_eq!(
        file.read_direct_at(at, middle.as_mut_slice()).unwrap(),
        DIRECT_ALIGN
    );
    assert_eq!(middle.as_slice(), &bytes[DIRECT_ALIGN..2 * DIRECT_ALIGN]);

    // Beyond the end: nothing.
    let far = 8 * DIRECT_ALIGN as u64;
    assert_eq!(file.read_direct_at(far, middle.as_mut_slice()).unwrap(), 0);

    // An overwrite through the cache is what the next direct read sees.
    file.write_at(at + 10, b"changed").unwrap();
    file.read_direct_at(at, middle.as_mut_slice()).unwrap();
    assert_eq!(&middle.as_slice()[10..17], b"changed");

    // Misaligned offset, length, address: refused, and the storage is
    // not latched (a caller's mistake is not a disk failure).
    assert!(is_invalid_input(
        file.read_direct_at(512, middle.as_mut_slice())
    ));
    assert!(is_invalid_input(
        file.read_direct_at(0, &mut middle.as_mut_slice()[..100])
    ));
    let mut unaligned = DirectBuffer::zeroed(2 * DIRECT_ALIGN);
    assert!(is_invalid_input(file.read_direct_at(
        0,
        &mut unaligned.as_mut_slice()[1..DIRECT_ALIGN + 1]
    )));
    let mut plain = vec![0u8; 16];
    assert_eq!(file.read_at(0, &mut plain).unwrap(), 16);
}

#[test]
fn real_files_read_directly_what_the_cache_holds() {
    // On the disk, not /tmp: tmpfs refuses O_DIRECT (and falls back).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    exercise(&RealStorage::new(), dir.path());
}

#[test]
fn the_simulated_disk_reads_them_alike() {
    let disk = SimStorage::new(11);
    exercise(&disk, Path::new("/d"));
}
