//! The file seam: every byte this crate makes durable goes through
//! [`Storage`]. Two real implementations — [`FsStorage`] (a directory of
//! ordinary files) and [`SimStorage`] (memory, keeping what was synced apart
//! from what was only written, and able to crash) — plus [`NullStorage`],
//! which discards everything and is only for overhead benchmarks.
//!
//! This is a stand-in for the project's shared storage crate (DESIGN.md,
//! "storage — the file seam"); the interface is kept deliberately small so
//! that moving onto it is mechanical.
//!
//! Only the asynchronous writer and the logical logger call into storage;
//! the mutator never does I/O.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// A flat namespace of files (one directory).
pub trait Storage: Send + Sync + 'static {
    /// Creates `name`, truncating it if it exists, and opens it for appending.
    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Reads the whole of `name`.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Reads up to `buf.len()` bytes of `name` starting at `offset`;
    /// returns how many were read (fewer only at the end of the file).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Removes `name`; removing a missing file is not an error.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Lists the names of all files.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Makes creations and removals in the directory durable.
    fn sync_dir(&self) -> io::Result<()>;
}

/// An open, append-only file.
pub trait StorageFile: Send {
    /// Appends `data` at the end of the file (not yet durable).
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> io::Result<()>;
}

// ---------------------------------------------------------------- real files

/// [`Storage`] over a directory of ordinary files.
#[derive(Debug, Clone)]
pub struct FsStorage {
    dir: PathBuf,
}

impl FsStorage {
    /// Uses `dir`, creating it if needed.
    pub fn new(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }
}

struct FsFile(File);

impl StorageFile for FsFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.write_all(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl Storage for FsStorage {
    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.dir.join(name))?;
        Ok(Box::new(FsFile(file)))
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        fs::read(self.dir.join(name))
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut file = File::open(self.dir.join(name))?;
        file.seek(SeekFrom::Start(offset))?;
        let mut done = 0;
        while done < buf.len() {
            match file.read(&mut buf[done..])? {
                0 => break,
                n => done += n,
            }
        }
        Ok(done)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        match fs::remove_file(self.dir.join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

// ---------------------------------------------------------- simulated disk

/// One simulated file: what a reader sees now (`live`) and what survives a
/// crash (`durable`).
#[derive(Debug, Clone, Default)]
struct SimFile {
    live: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Default)]
struct SimState {
    files: HashMap<String, SimFile>,
    crashed: bool,
    /// Crash inside the n-th next append to a file whose name starts with
    /// the prefix (the append is torn in half).
    crash_on_append: Option<(String, u64)>,
}

/// An in-memory disk that keeps synced bytes apart from unsynced ones.
///
/// [`SimStorage::crash`] freezes the disk: every later call fails with
/// "simulated crash", and [`SimStorage::after_crash`] gives the disk a
/// restarted machine would see — each file's synced bytes plus a seeded,
/// random prefix of its unsynced tail (a torn write).
///
/// Creating a file truncates its durable image at once: the harshest
/// ordering, in which the truncation reached the disk and the new contents
/// did not. That is what the double-backup checkpoint files must survive.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated crash")
}

impl SimStorage {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding this lock can only come from a bug in this
        // module; the data is still usable for a post-mortem.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Crashes now: every later call fails.
    pub fn crash(&self) {
        self.lock().crashed = true;
    }

    /// Whether the disk has crashed.
    pub fn has_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Arranges a crash inside the `n`-th (1-based) next append to a file
    /// whose name starts with `prefix`: half of that append is written, then
    /// the disk crashes.
    pub fn crash_on_append(&self, prefix: &str, n: u64) {
        assert!(n >= 1, "appends are counted from 1");
        self.lock().crash_on_append = Some((prefix.to_owned(), n));
    }

    /// The disk a restarted machine sees: synced bytes, plus for each file a
    /// prefix (chosen from `seed`) of the bytes written but not synced.
    pub fn after_crash(&self, seed: u64) -> SimStorage {
        let state = self.lock();
        let mut rng = seed | 1;
        let mut files = HashMap::new();
        let mut names: Vec<&String> = state.files.keys().collect();
        names.sort(); // deterministic regardless of hash order
        for name in names {
            let file = &state.files[name];
            let mut durable = file.durable.clone();
            // The unsynced tail is kept only where it extends the durable
            // image (appends after the last sync).
            if file.live.len() > durable.len() && file.live.starts_with(&durable) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let extra = file.live.len() - durable.len();
                let keep = (rng % (extra as u64 + 1)) as usize;
                durable.extend_from_slice(&file.live[file.durable.len()..][..keep]);
            }
            files.insert(
                name.clone(),
                SimFile {
                    live: durable.clone(),
                    durable,
                },
            );
        }
        SimStorage {
            state: Arc::new(Mutex::new(SimState {
                files,
                crashed: false,
                crash_on_append: None,
            })),
        }
    }

    /// Flips one bit of a file's durable and live image (corruption tests).
    pub fn flip_bit(&self, name: &str, byte: usize, bit: u8) {
        let mut state = self.lock();
        let file = state.files.get_mut(name).expect("no such file");
        file.live[byte] ^= 1 << bit;
        file.durable[byte] ^= 1 << bit;
    }
}

struct SimHandle {
    disk: SimStorage,
    name: String,
}

impl StorageFile for SimHandle {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut state = self.disk.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        let mut tear = false;
        if let Some((prefix, n)) = &mut state.crash_on_append {
            if self.name.starts_with(prefix.as_str()) {
                *n -= 1;
                tear = *n == 0;
            }
        }
        let file = state.files.get_mut(&self.name).ok_or_else(crashed_error)?;
        if tear {
            file.live.extend_from_slice(&data[..data.len() / 2]);
            state.crashed = true;
            state.crash_on_append = None;
            return Err(crashed_error());
        }
        file.live.extend_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut state = self.disk.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        let file = state.files.get_mut(&self.name).ok_or_else(crashed_error)?;
        file.durable = file.live.clone();
        Ok(())
    }
}

impl Storage for SimStorage {
    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        state.files.insert(name.to_owned(), SimFile::default());
        Ok(Box::new(SimHandle {
            disk: self.clone(),
            name: name.to_owned(),
        }))
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let state = self.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        state
            .files
            .get(name)
            .map(|f| f.live.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let state = self.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        let file = state
            .files
            .get(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))?;
        let start = (offset as usize).min(file.live.len());
        let n = buf.len().min(file.live.len() - start);
        buf[..n].copy_from_slice(&file.live[start..start + n]);
        Ok(n)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        state.files.remove(name);
        Ok(())
    }
    fn list(&self) -> io::Result<Vec<String>> {
        let state = self.lock();
        if state.crashed {
            return Err(crashed_error());
        }
        Ok(state.files.keys().cloned().collect())
    }
    fn sync_dir(&self) -> io::Result<()> {
        if self.lock().crashed {
            return Err(crashed_error());
        }
        Ok(())
    }
}

// ------------------------------------------------------------ null storage

/// Discards every write; reads find nothing. For overhead benchmarks only
/// (the paper's §5.1 measures the mutator with the disk out of the way).
#[derive(Debug, Clone, Copy, Default)]
pub struct NullStorage;

struct NullFile;

impl StorageFile for NullFile {
    fn append(&mut self, _data: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Storage for NullStorage {
    fn create(&self, _name: &str) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(NullFile))
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        Err(io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }
    fn read_at(&self, name: &str, _offset: u64, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }
    fn remove(&self, _name: &str) -> io::Result<()> {
        Ok(())
    }
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(Vec::new())
    }
    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_crash_keeps_synced_and_a_prefix_of_unsynced() {
        let disk = SimStorage::new();
        let mut f = disk.create("a").unwrap();
        f.append(b"hello").unwrap();
        f.sync().unwrap();
        f.append(b" world").unwrap();
        disk.crash();
        assert!(f.append(b"!").is_err());
        for seed in 0..20 {
            let after = disk.after_crash(seed);
            let bytes = after.read("a").unwrap();
            assert!(bytes.starts_with(b"hello"));
            assert!(b"hello world".starts_with(&bytes));
        }
    }

    #[test]
    fn sim_create_truncates_durably() {
        let disk = SimStorage::new();
        let mut f = disk.create("a").unwrap();
        f.append(b"old").unwrap();
        f.sync().unwrap();
        let mut g = disk.create("a").unwrap();
        g.append(b"new").unwrap();
        disk.crash();
        let after = disk.after_crash(0);
        let bytes = after.read("a").unwrap();
        assert!(b"new".starts_with(&bytes));
    }

    #[test]
    fn sim_crash_on_append_tears() {
        let disk = SimStorage::new();
        disk.crash_on_append("ck", 2);
        let mut f = disk.create("ckpt").unwrap();
        f.append(b"1234").unwrap();
        assert!(f.append(b"5678").is_err());
        assert!(disk.has_crashed());
    }
}
