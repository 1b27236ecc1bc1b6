//! Why this exists: recovery fills tables before it knows whether the
//! whole checkpoint is sound; when a later file turns out damaged, the open
//! fails and those records must be freed, not leaked (found by the
//! recovery fuzzer, `crates/fuzz`). A counting allocator measures the
//! bytes still allocated across repeated failed opens.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::{Config, Database, DurabilityKind, SilorOptions};
use epochdb_storage::{CrashMode, SimStorage, Storage};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn config(storage: &SimStorage) -> Config {
    Config {
        durability: DurabilityKind::Silor,
        dirs: vec!["/db/a".into()],
        storage: Some(Arc::new(storage.clone()) as Arc<dyn Storage>),
        epoch_interval: Duration::from_millis(1),
        workers: 1,
        silor: SilorOptions {
            checkpoint_interval: Duration::from_secs(3600),
            checkpoint_files_per_table: 2,
            checkpoint_block_bytes: 4096,
            ..SilorOptions::default()
        },
        ..Config::default()
    }
}

#[test]
fn a_recovery_that_fails_after_loading_records_frees_them() {
    let disk = SimStorage::new(3);
    {
        let db = Database::open(config(&disk)).unwrap();
        let table = db.create_table("t").unwrap();
        let mut worker = db.worker().unwrap();
        let mut last = None;
        for k in 0..2000u64 {
            let ((), ticket) = worker
                .run(|tx| tx.put(table, &k.to_be_bytes(), &[7; 100]))
                .unwrap();
            last = Some(ticket);
        }
        last.unwrap().wait().unwrap();
        worker.quiesce();
        db.checkpoint().unwrap();
    }
    let disk = disk.crash(CrashMode::DropUnsynced);
    // Damage the end of the largest checkpoint file: the others load first.
    let dir = Path::new("/db/a");
    let mut files: Vec<(u64, String)> = disk
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|name| name.starts_with("ckpt."))
        .map(|name| (disk.len(&dir.join(&name)).unwrap(), name))
        .collect();
    files.sort();
    let (len, name) = files.pop().expect("a checkpoint file");
    assert!(!files.is_empty(), "several checkpoint files");
    disk.flip_bit(&dir.join(&name), (len - 20) * 8).unwrap();

    let attempt = || {
        let error = Database::open(config(&disk)).expect_err("damaged checkpoint");
        assert!(error.to_string().contains("corrupt"), "{error}");
    };
    attempt();
    let before = LIVE.load(Relaxed);
    for _ in 0..10 {
        attempt();
    }
    let grew = LIVE.load(Relaxed) - before;
    // 2,000 records of 100 bytes leaked per attempt would be > 2 MB.
    assert!(
        grew < 256 << 10,
        "{grew} bytes still allocated after 10 failed opens"
    );
}
