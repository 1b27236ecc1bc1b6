//! Why: `epochdb inspect` and recovery's scans read files they never write
//! through `Storage::open_read`. It must read a file the process may not
//! write (a copy kept read-only), buffered and past the page cache, and its
//! handle must refuse writes.

use std::os::unix::fs::PermissionsExt;

use epochdb_storage::{
    scan_blocks, DirectBuffer, RealStorage, ScanBuffers, ScanEnd, Storage, DIRECT_ALIGN,
};

#[test]
fn a_read_only_file_is_read_and_never_written() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("kept.dat");
    let mut data = Vec::new();
    for i in 0..100u32 {
        epochdb_storage::encode_block(&mut data, 0x5445_5354, 1, 1, &i.to_le_bytes().repeat(30));
    }
    std::fs::write(&path, &data).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();

    let storage = RealStorage::new();
    let file = storage.open_read(&path).unwrap();
    assert_eq!(file.size().unwrap(), data.len() as u64);
    let mut head = vec![0u8; 64];
    assert_eq!(file.read_at(0, &mut head).unwrap(), 64);
    assert_eq!(head, data[..64]);
    let mut block = DirectBuffer::zeroed(DIRECT_ALIGN);
    let got = file.read_direct_at(0, block.as_mut_slice()).unwrap();
    assert_eq!(&block.as_slice()[..got], &data[..got]);

    // The handle was opened for reading only: even root cannot write
    // through it.
    assert!(file.write_at(0, b"x").is_err());
    drop(file);
    assert_eq!(std::fs::read(&path).unwrap(), data);

    // A scan reads through it: every block, on a fresh storage (the failed
    // write above latched the first one).
    let storage = RealStorage::new();
    let mut seen = 0;
    for direct in [false, true] {
        let (end, len) = scan_blocks::<epochdb_storage::StorageError>(
            &storage,
            &path,
            0x5445_5354,
            &mut ScanBuffers::default(),
            direct,
            |_, _| {
                seen += 1;
                Ok(std::ops::ControlFlow::Continue(()))
            },
        )
        .unwrap();
        assert!(matches!(end, ScanEnd::Clean), "{end:?}");
        assert_eq!(len, data.len() as u64);
    }
    assert_eq!(seen, 200);

    // Without root, `open` (read and write) is refused where `open_read`
    // is not.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(storage.open(&path).is_err());
    }
}
