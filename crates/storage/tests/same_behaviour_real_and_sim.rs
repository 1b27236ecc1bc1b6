//! Why: SimStorage is only worth its crash tests if it behaves like the real
//! file system while the power stays on. One body, run against both.

use std::path::Path;

use epochdb_storage::{RealStorage, SimStorage, Storage, StorageError};

fn exercise(storage: &dyn Storage, root: &Path) {
    let dir = root.join("db");
    storage.create_dir_all(&dir.join("sub")).unwrap();
    storage.sync_dir(root).unwrap();
    storage.sync_dir(&dir).unwrap();
    let a = dir.join("a");

    // Exclusive create, append cursor, gaps read as zeros.
    let mut file = storage.create(&a).unwrap();
    assert!(matches!(
        storage.create(&a),
        Err(StorageError::AlreadyExists { .. })
    ));
    assert_eq!(file.append(b"hello").unwrap(), 0);
    assert_eq!(file.append(b" world").unwrap(), 5);
    assert_eq!(file.size().unwrap(), 11);
    assert_eq!(storage.read(&a).unwrap(), b"hello world");
    file.write_at(20, b"x").unwrap();
    assert_eq!(storage.len(&a).unwrap(), 21);
    let mut buf = [0xffu8; 10];
    assert_eq!(file.read_at(6, &mut buf).unwrap(), 10);
    assert_eq!(&buf, b"world\0\0\0\0\0");
    assert_eq!(file.read_at(21, &mut buf).unwrap(), 0);
    assert_eq!(file.read_at(1 << 40, &mut buf).unwrap(), 0);
    assert_eq!(file.read_at(19, &mut buf).unwrap(), 2);

    // Truncate moves the cursor; sync succeeds.
    file.truncate(5).unwrap();
    assert_eq!(file.append(b"!").unwrap(), 5);
    file.sync().unwrap();
    assert_eq!(file.path(), a.as_path());
    drop(file);

    // Reopen appends at the end.
    let mut file = storage.open(&a).unwrap();
    assert_eq!(file.append(b"?").unwrap(), 6);
    drop(file);
    assert_eq!(storage.read(&a).unwrap(), b"hello!?");

    // Rename, replacing an existing target.
    let b = dir.join("b");
    let mut other = storage.create(&b).unwrap();
    other.append(b"old").unwrap();
    storage.rename(&a, &b).unwrap();
    storage.sync_dir(&dir).unwrap();
    assert!(!storage.exists(&a).unwrap());
    assert!(storage.exists(&b).unwrap());
    assert_eq!(storage.read(&b).unwrap(), b"hello!?");
    assert_eq!(
        storage.list(&dir).unwrap(),
        vec!["b".to_string(), "sub".to_string()]
    );

    // Remove, and the namespace's answers for missing names.
    storage.remove(&b).unwrap();
    storage.sync_dir(&dir).unwrap();
    assert_eq!(storage.list(&dir).unwrap(), vec!["sub".to_string()]);
    assert!(matches!(
        storage.read(&b),
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        storage.remove(&b),
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        storage.open(&b),
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        storage.len(&b),
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        storage.rename(&b, &a),
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        storage.list(&dir.join("nope")),
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        storage.create(&dir.join("nope").join("c")),
        Err(StorageError::NotFound { .. })
    ));
    // NotFound is an answer, not a failure: the storage still works.
    storage.create(&dir.join("c")).unwrap().sync().unwrap();
    assert!(storage.exists(&dir.join("sub")).unwrap());
    assert!(storage.list(&dir.join("sub")).unwrap().is_empty());
}

#[test]
fn real_storage() {
    let tmp = tempfile::tempdir().unwrap();
    exercise(&RealStorage::new(), tmp.path());
}

#[test]
fn sim_storage() {
    exercise(&SimStorage::new(1), Path::new("/"));
}

#[test]
fn sim_storage_relative_root() {
    exercise(&SimStorage::new(2), Path::new("tmp"));
}

#[test]
fn storages_are_object_safe_and_shareable() {
    let tmp = tempfile::tempdir().unwrap();
    let storages: Vec<(std::sync::Arc<dyn Storage>, &Path)> = vec![
        (std::sync::Arc::new(RealStorage::new()), tmp.path()),
        (std::sync::Arc::new(SimStorage::new(3)), Path::new("/")),
    ];
    for (storage, root) in storages {
        let s = std::sync::Arc::clone(&storage);
        let root = root.to_path_buf();
        std::thread::spawn(move || exercise(s.as_ref(), &root))
            .join()
            .unwrap();
    }
}
