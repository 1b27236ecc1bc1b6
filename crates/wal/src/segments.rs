//! The files the flusher writes: the active log file, rotation, the list of
//! files for `truncate_before`, and the SDL file.
//!
//! Durability order (DESIGN "storage — the file seam"): a new file gets its
//! header, a sync, and a sync of the directory before any entry goes in;
//! removals are followed by a directory sync.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use epochdb_storage::{
    remove_in_pieces, write_direct_all, DirectAppender, Storage, StorageFile, DIRECT_ALIGN,
    REMOVE_PIECE_BYTES,
};
use parking_lot::Mutex;

use crate::error::WalError;
use crate::format::{
    encode_file_header, encode_sdl_slot, log_file_name, REMOVING_SUFFIX, SDL_FILE_NAME,
    SDL_SLOT_BYTES,
};
use crate::lsn::Lsn;
use crate::recovery::Scan;
use crate::ring::Ring;

/// `(start LSN, path)` of every log file, oldest first; the last is active.
pub(crate) type FileList = Arc<Mutex<Vec<(Lsn, PathBuf)>>>;

/// The file the flusher appends to.
pub(crate) struct ActiveFile {
    pub(crate) file: Box<dyn StorageFile>,
    /// Bytes in the file (header included; without direct writes' padding).
    pub(crate) len: u64,
    /// Set when entries go past the page cache (`WalOptions::direct_io`):
    /// each append is then written in whole 4 KiB blocks, the file's end
    /// zero-padded to a block until [`ActiveFile::seal`].
    direct: Option<DirectAppender>,
    /// The first LSN whose 4 KiB block [`ActiveFile::append_in_place`] may
    /// write from the ring: the file's start (below it the block holds the
    /// header), or, in the file a recovery reopened, the recovered end
    /// (this run's ring holds nothing written before it).
    in_place_from: Lsn,
    /// How many I/O units [`ActiveFile::append_in_place`] writes at once.
    io_depth: usize,
    /// `WriteMode::io_depth_min_bytes`.
    io_depth_min_bytes: usize,
    /// `WriteMode::in_place_write_bytes`.
    in_place_write_bytes: u64,
}

/// How the flusher writes: through the page cache, or past it with each
/// write up to `capacity` bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteMode {
    pub(crate) direct: bool,
    pub(crate) capacity: usize,
    /// `WalOptions::io_depth`.
    pub(crate) io_depth: usize,
    /// `WalOptions::io_depth_min_bytes`.
    pub(crate) io_depth_min_bytes: usize,
    /// `WalOptions::in_place_write_bytes`: the most bytes of adjacent I/O
    /// units one in-place write covers.
    pub(crate) in_place_write_bytes: u64,
    /// With direct writes and an `io_depth` above 1, each active file is
    /// preallocated to this many bytes (`WalOptions::file_max_bytes`) so
    /// that its writes can run side by side; 0: not preallocated.
    pub(crate) preallocate_bytes: u64,
}

impl WriteMode {
    /// The mode `options` ask for.
    pub(crate) fn of(options: &crate::WalOptions) -> Self {
        let parallel = options.direct_io && options.io_depth > 1;
        WriteMode {
            direct: options.direct_io,
            capacity: options.io_unit_bytes,
            io_depth: options.io_depth,
            io_depth_min_bytes: options.io_depth_min_bytes,
            in_place_write_bytes: options.in_place_write_bytes(),
            preallocate_bytes: if parallel { options.file_max_bytes } else { 0 },
        }
    }
}

impl ActiveFile {
    fn new(
        file: Box<dyn StorageFile>,
        len: u64,
        mode: WriteMode,
        in_place_from: Lsn,
    ) -> Result<Self, WalError> {
        let direct = if mode.direct {
            Some(DirectAppender::new(
                file.as_ref(),
                len,
                mode.capacity + DIRECT_ALIGN,
            )?)
        } else {
            None
        };
        if direct.is_some() && mode.preallocate_bytes > len {
            // The zeros beyond `len` are read back as a torn tail after a
            // crash (`recovery.rs`) and cut off by `seal` otherwise.
            file.preallocate(mode.preallocate_bytes)?;
        }
        Ok(ActiveFile {
            file,
            len,
            direct,
            in_place_from,
            io_depth: mode.io_depth,
            io_depth_min_bytes: mode.io_depth_min_bytes,
            in_place_write_bytes: mode.in_place_write_bytes,
        })
    }

    /// Appends `bytes` at the file's end (not durable until a sync).
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Result<(), WalError> {
        match &mut self.direct {
            Some(direct) => direct.append(self.file.as_ref(), bytes)?,
            None => self.file.append(bytes)?,
        };
        Ok(())
    }

    /// Appends the ring's LSNs `[from, to)` without copying them (eleda
    /// §3.1: the flusher writes the log buffer's I/O units): the 4 KiB
    /// blocks holding them go from the ring to the file as they are, one
    /// write per I/O unit of LSN space (or per run of adjacent units,
    /// `WalOptions::write_coalesce_bytes`), since the file's offsets agree
    /// with LSNs modulo 4096 (`format.rs`). The first block is the one the
    /// previous flush ended in, written again whole from the ring; only
    /// the last, partial block is copied, to be zero-padded. `None` where
    /// this cannot be done (no direct writes, a format-1 file, a block
    /// holding the header or bytes from before this run): the caller
    /// copies instead.
    ///
    /// # Safety
    ///
    /// `[from, to)` is below an SBL the caller loaded with Acquire, `from`
    /// is this file's end, and no writer reuses the ring from `from`'s
    /// block on until the caller publishes a later SDL
    /// ([`Core::has_space`](crate::core::Core::has_space) keeps SDL's block).
    pub(crate) unsafe fn append_in_place(
        &mut self,
        ring: &Ring,
        from: Lsn,
        to: Lsn,
    ) -> Option<Result<(), WalError>> {
        const ALIGN: u64 = DIRECT_ALIGN as u64;
        let direct = self.direct.as_mut()?;
        let file_len = direct.len();
        let first_block = from / ALIGN * ALIGN;
        if file_len % ALIGN != from % ALIGN || first_block < self.in_place_from || cfg!(loom) {
            return None;
        }
        // The file offset of `first_block`, and so of every block after it.
        let base = file_len - from % ALIGN;
        let body_end = to / ALIGN * ALIGN;
        // One write per I/O unit, or per run of adjacent units up to
        // `WalOptions::write_coalesce_bytes`; the ring's end is a boundary
        // of either (powers of two no larger than the ring).
        let unit = self.in_place_write_bytes;
        let mut units = Vec::with_capacity(((body_end - first_block) / unit + 2) as usize);
        let mut at = first_block;
        while at < body_end {
            let end = body_end.min((at / unit + 1) * unit);
            // SAFETY: forwarded from the caller: written, published and not
            // reused while the slice lives.
            let blocks = unsafe { ring.in_place(at, (end - at) as usize) }
                .expect("a unit of LSN space never wraps the ring");
            units.push((base + (at - first_block), blocks));
            at = end;
        }
        // Side by side when `io_depth` allows: the caller syncs and moves
        // SDL only after all of them, so their order does not matter.
        if let Err(e) = write_direct_all(
            self.file.as_ref(),
            &units,
            self.io_depth,
            self.io_depth_min_bytes,
        ) {
            return Some(Err(e.into()));
        }
        // SAFETY: as above; under a block from a block boundary, so it does
        // not wrap either.
        let tail = unsafe { ring.in_place(body_end, (to - body_end) as usize) }
            .expect("a block never wraps the ring");
        Some(
            direct
                .advance(self.file.as_ref(), file_len + (to - from), tail)
                .map_err(WalError::from),
        )
    }

    /// Appends `len` bytes that `fill(offset, out)` produces, copying the
    /// next write's bytes while the previous write runs
    /// ([`DirectAppender::append_overlapped`]). `None` without direct
    /// writes: the caller appends through the page cache instead.
    pub(crate) fn append_overlapped(
        &mut self,
        len: usize,
        fill: impl FnMut(usize, &mut [u8]),
    ) -> Option<Result<(), WalError>> {
        let direct = self.direct.as_mut()?;
        Some(
            direct
                .append_overlapped(self.file.as_ref(), len, fill)
                .map(|_| ())
                .map_err(WalError::from),
        )
    }

    /// Cuts direct writes' zero padding off the end and syncs, so a file
    /// closed for good (rotated or at shutdown) holds exactly its entries.
    /// After a crash the padding is instead a torn tail above the
    /// persisted SDL, which recovery cuts off.
    pub(crate) fn seal(&mut self) -> Result<(), WalError> {
        if let Some(direct) = &self.direct {
            direct.trim(self.file.as_mut())?;
        }
        self.file.sync()?;
        Ok(())
    }
}

/// The SDL file (eleda §4.3: "the SDL is stored in stable storage").
pub(crate) struct SdlFile {
    file: Box<dyn StorageFile>,
    seq: u64,
}

impl SdlFile {
    /// Writes `sdl` to the slot not holding the newest value, and syncs.
    pub(crate) fn persist(&mut self, sdl: Lsn) -> Result<(), WalError> {
        self.seq += 1;
        let slot = self.seq % 2;
        self.file
            .write_at(slot * SDL_SLOT_BYTES, &encode_sdl_slot(self.seq, sdl))?;
        self.file.sync()?;
        Ok(())
    }
}

/// Everything `Wal::open` prepares for the flusher.
pub(crate) struct Prepared {
    pub(crate) active: ActiveFile,
    pub(crate) sdl_file: SdlFile,
    pub(crate) files: FileList,
}

/// Makes the scanned log appendable at `scan.log.end_lsn`: cuts a torn
/// tail (or removes a file with a torn header), opens the last file or
/// creates the first, creates the SDL file if missing and persists the
/// recovered end as SDL.
pub(crate) fn prepare(
    storage: &dyn Storage,
    dir: &Path,
    scan: &Scan,
    mode: WriteMode,
) -> Result<Prepared, WalError> {
    if !storage.exists(dir)? {
        // A new directory is durable only once its parent is synced, for
        // every directory created on the way.
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !storage.exists(d).unwrap_or(false))
            .collect();
        storage.create_dir_all(dir)?;
        for created in missing.into_iter().rev() {
            if let Some(parent) = created.parent() {
                storage.sync_dir(parent)?;
            }
        }
    }
    remove_leftovers(storage, dir)?;
    let end = scan.log.end_lsn;
    if let Some(tail) = &scan.log.discarded {
        if tail.whole_file {
            storage.remove(&tail.file)?;
            storage.sync_dir(dir)?;
        } else {
            let mut file = storage.open(&tail.file)?;
            file.truncate(tail.offset)?;
            file.sync()?;
        }
    }
    let active = match scan.files.last() {
        Some((start, path)) => {
            let file = storage.open(path)?;
            let len = file.size()?;
            debug_assert_eq!(len, scan.last_header_bytes + (end - start));
            ActiveFile::new(file, len, mode, end)?
        }
        None => create_log_file(storage, dir, end, mode)?,
    };
    let mut files = scan.files.clone();
    if files.is_empty() {
        files.push((end, dir.join(log_file_name(end))));
    }
    let sdl_path = dir.join(SDL_FILE_NAME);
    let mut sdl_file = if storage.exists(&sdl_path)? {
        let seq = match crate::format::decode_sdl_file(&storage.read(&sdl_path)?) {
            Some((seq, _)) => seq,
            None => 0,
        };
        SdlFile {
            file: storage.open(&sdl_path)?,
            seq,
        }
    } else {
        let file = storage.create(&sdl_path)?;
        let mut sdl_file = SdlFile { file, seq: 0 };
        sdl_file.persist(end)?;
        storage.sync_dir(dir)?;
        sdl_file
    };
    sdl_file.persist(end)?;
    Ok(Prepared {
        active,
        sdl_file,
        files: Arc::new(Mutex::new(files)),
    })
}

/// Creates the log file starting at `start`: header, sync, directory sync.
pub(crate) fn create_log_file(
    storage: &dyn Storage,
    dir: &Path,
    start: Lsn,
    mode: WriteMode,
) -> Result<ActiveFile, WalError> {
    let mut file = storage.create(&dir.join(log_file_name(start)))?;
    let header = encode_file_header(start);
    file.append(&header)?;
    file.sync()?;
    storage.sync_dir(dir)?;
    ActiveFile::new(file, header.len() as u64, mode, start)
}

/// Removes every file whose entries all lie below `lsn` (never the active
/// one); returns how many went.
///
/// The files are taken off the list under its lock, which the flusher
/// needs to rotate, and freed after it is released: freeing a 256 MiB
/// file took 189 ms here (ext4 with online discard). Each is renamed out
/// of the log first (one directory sync for all), then cut down a piece at
/// a time ([`remove_in_pieces`]) so the flusher's appends do not stall
/// behind one long unlink; a crash part-way leaves a file with
/// [`REMOVING_SUFFIX`], which [`prepare`] removes, never a shortened log
/// file. The oldest go first, so a crash leaves a contiguous log.
pub(crate) fn truncate_before(
    storage: &dyn Storage,
    dir: &Path,
    files: &FileList,
    lsn: Lsn,
) -> Result<usize, WalError> {
    let doomed: Vec<PathBuf> = {
        let mut files = files.lock();
        let mut doomed = Vec::new();
        while files.len() >= 2 && files[1].0 <= lsn {
            doomed.push(files.remove(0).1);
        }
        doomed
    };
    if doomed.is_empty() {
        return Ok(0);
    }
    let mut renamed = Vec::with_capacity(doomed.len());
    for path in &doomed {
        let to = removing_path(path);
        storage.rename(path, &to)?;
        renamed.push(to);
    }
    storage.sync_dir(dir)?;
    for path in &renamed {
        remove_in_pieces(storage, path, REMOVE_PIECE_BYTES)?;
    }
    storage.sync_dir(dir)?;
    Ok(doomed.len())
}

/// `path` with [`REMOVING_SUFFIX`] appended.
fn removing_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(REMOVING_SUFFIX);
    PathBuf::from(name)
}

/// Removes the files a crash left half-removed by [`truncate_before`].
fn remove_leftovers(storage: &dyn Storage, dir: &Path) -> Result<(), WalError> {
    let mut removed = false;
    for name in storage.list(dir)? {
        if name.ends_with(REMOVING_SUFFIX) {
            remove_in_pieces(storage, &dir.join(&name), REMOVE_PIECE_BYTES)?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir)?;
    }
    Ok(())
}
