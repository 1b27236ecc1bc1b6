//! Log-buffer backpressure (silor §3.4): a logger's pool holds at most
//! `buffers_per_worker` buffers per worker, so a worker whose logger
//! cannot write blocks when it needs a new buffer, and goes on once the
//! logger has written one and recirculated it.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::{Config, Database, DurabilityKind, SilorOptions};
use epochdb_storage::{Result, SimStorage, Storage, StorageFile};
use parking_lot::{Condvar, Mutex};

/// A gate appends to `data.log` wait at while it is closed.
#[derive(Debug, Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock() = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock();
        while *closed {
            self.opened.wait(&mut closed);
        }
    }
}

/// The simulated disk, with every append to a `data.log` held at the gate.
#[derive(Debug)]
struct GatedStorage {
    disk: SimStorage,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct GatedFile {
    file: Box<dyn StorageFile>,
    gate: Option<Arc<Gate>>,
}

impl GatedStorage {
    fn wrap(&self, file: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        let is_log = file.path().file_name().is_some_and(|n| n == "data.log");
        Box::new(GatedFile {
            file,
            gate: is_log.then(|| self.gate.clone()),
        })
    }
}

impl Storage for GatedStorage {
    fn create(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        Ok(self.wrap(self.disk.create(path)?))
    }
    fn open(&self, path: &Path) -> Result<Box<dyn StorageFile>> {
        Ok(self.wrap(self.disk.open(path)?))
    }
    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        self.disk.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.disk.rename(from, to)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.disk.remove(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.disk.list(dir)
    }
    fn len(&self, path: &Path) -> Result<u64> {
        self.disk.len(path)
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.disk.exists(path)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.disk.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.disk.sync_dir(dir)
    }
}

impl StorageFile for GatedFile {
    fn path(&self) -> &Path {
        self.file.path()
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.file.write_at(offset, data)
    }
    fn append(&mut self, data: &[u8]) -> Result<u64> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        self.file.append(data)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.file.read_at(offset, buf)
    }
    fn size(&self) -> Result<u64> {
        self.file.size()
    }
    fn truncate(&mut self, len: u64) -> Result<()> {
        self.file.truncate(len)
    }
    fn sync(&self) -> Result<()> {
        self.file.sync()
    }
}

/// A `log`-mode database of one worker on the gated simulated disk, with
/// `BUFFER_BYTES` log buffers and `buffers_per_worker` of them at most,
/// and its table; the gate starts open.
fn open_gated(
    seed: u64,
    buffers_per_worker: usize,
) -> (Database, epochdb_engine::TableId, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let storage = GatedStorage {
        disk: SimStorage::new(seed),
        gate: gate.clone(),
    };
    let db = Database::open(Config {
        durability: DurabilityKind::Log,
        dirs: vec!["/db".into()],
        storage: Some(Arc::new(storage) as Arc<dyn Storage>),
        epoch_interval: Duration::from_millis(5),
        workers: 1,
        silor: SilorOptions {
            log_buffer_bytes: BUFFER_BYTES,
            buffers_per_worker,
            direct_io: false,
            ..SilorOptions::default()
        },
        ..Config::default()
    })
    .unwrap();
    let table = db.create_table("t").unwrap();
    (db, table, gate)
}

/// Commits `commits` transactions on a new worker, each putting one
/// `VALUE_BYTES` value under a new key, calling `committed` after each;
/// returns the last one's ticket.
fn commit_values(
    db: &Database,
    table: epochdb_engine::TableId,
    commits: usize,
    committed: impl Fn(),
) -> epochdb_engine::Ticket {
    let mut worker = db.worker().unwrap();
    let mut last = None;
    for n in 0..commits as u64 {
        let ((), ticket) = worker
            .run(|tx| {
                tx.put(table, &n.to_be_bytes(), &[7; VALUE_BYTES])?;
                Ok(())
            })
            .unwrap();
        last = Some(ticket);
        committed();
    }
    last.expect("at least one commit")
}

/// Bytes of a log buffer in these tests.
const BUFFER_BYTES: usize = 4096;
/// Bytes of each committed value.
const VALUE_BYTES: usize = 200;

#[test]
fn a_worker_whose_logger_cannot_write_waits_for_a_buffer_at_the_pools_bound() {
    const COMMITS: usize = 2_000;
    let (db, table, gate) = open_gated(51, 2);
    // The log file exists (its header written at open); from now on the
    // logger's first write of a buffer blocks.
    gate.set_closed(true);
    let committed = Arc::new(AtomicUsize::new(0));
    let last_ticket = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            commit_values(&db, table, COMMITS, || {
                committed.fetch_add(1, Ordering::Relaxed);
            })
        });
        // Unbounded, the worker would be done in a few milliseconds; with
        // two buffers of 4 KiB it holds at most two buffers of entries.
        std::thread::sleep(Duration::from_millis(300));
        let (held, finished) = (committed.load(Ordering::Relaxed), worker.is_finished());
        // Open before judging: a failed assertion must not leave the
        // logger blocked, or the database's close would wait for it.
        gate.set_closed(false);
        let last = worker.join().unwrap();
        let per_buffer = BUFFER_BYTES / VALUE_BYTES;
        assert!(
            held <= 2 * per_buffer,
            "{held} commits buffered with the logger stalled, beyond two buffers of {per_buffer}"
        );
        assert!(!finished, "the worker never waited");
        last
    });
    assert_eq!(committed.load(Ordering::Relaxed), COMMITS);
    last_ticket.wait().unwrap();
    let stats = db.durability_stats();
    assert!(stats.buffer_waits >= 1, "{stats:?}");
    assert_eq!(stats.log_buffers_allocated, 2, "{stats:?}");
}

/// A backlog's buffers go back to the system once the logger writes them:
/// the pool keeps 16 free buffers per worker (`LoggerShared::recycle`),
/// not every buffer a stall made it allocate.
#[test]
fn buffers_allocated_for_a_backlog_are_freed_once_it_is_written() {
    const COMMITS: usize = 2_000; // about 100 buffers of entries
    let (db, table, gate) = open_gated(52, 1_000);
    gate.set_closed(true);
    let last = commit_values(&db, table, COMMITS, || {});
    let backlog = db.durability_stats();
    gate.set_closed(false);
    last.wait().unwrap();
    let after = db.durability_stats();
    assert!(
        backlog.log_buffers_allocated >= 60 && backlog.buffer_waits == 0,
        "the stall did not build a backlog: {backlog:?}"
    );
    assert_eq!(after.log_buffers_peak, backlog.log_buffers_allocated);
    // 16 free, the worker's own, and perhaps one still being written.
    assert!(
        after.log_buffers_allocated <= 18,
        "the backlog's buffers stayed allocated: {after:?}"
    );
}
