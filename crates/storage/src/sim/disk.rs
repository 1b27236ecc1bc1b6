//! The simulated disk's state: two namespaces (live and durable) over a table
//! of inodes, each with a live and a durable image.
//!
//! Invariants:
//! * an inode's `live` image is its `durable` image with `pending` applied
//!   in order (a failed write's partial bytes included);
//! * `live` names are `durable` names with `journal` applied in order (but
//!   for a rename across directories made durable by syncing one of them);
//! * `durable` names only change in `sync_dir` and `crash`;
//! * iteration is over ordered maps only, so the random draws of a crash are
//!   a function of the seed and the calls made.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::fault::{FaultKind, FaultOp, FaultPlan};
use super::CrashMode;
use crate::error::{Op, Result, StorageError};

/// Largest file the simulated disk holds; a write beyond it is an I/O error
/// rather than an attempt to allocate the address space.
const SIM_FILE_MAX_BYTES: u64 = 1 << 30;

pub(super) type InodeId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Dir,
    File(InodeId),
}

type Namespace = BTreeMap<PathBuf, Entry>;

/// A directory change not yet made durable. Kept in call order, as a
/// journaling file system does, so that a crash can keep a prefix of them,
/// each whole: a rename is atomic, never half done.
#[derive(Debug, Clone)]
enum NsOp {
    Insert(PathBuf, Entry),
    Remove(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
        id: InodeId,
    },
}

impl NsOp {
    fn apply(&self, ns: &mut Namespace) {
        match self {
            NsOp::Insert(path, entry) => {
                ns.insert(path.clone(), *entry);
            }
            NsOp::Remove(path) => {
                ns.remove(path);
            }
            NsOp::Rename { from, to, id } => {
                ns.remove(from);
                ns.insert(to.clone(), Entry::File(*id));
            }
        }
    }

    /// Whether syncing `dir` makes this change durable.
    fn touches(&self, dir: &Path) -> bool {
        let in_dir = |path: &PathBuf| path.parent() == Some(dir);
        match self {
            NsOp::Insert(path, _) | NsOp::Remove(path) => in_dir(path),
            NsOp::Rename { from, to, .. } => in_dir(from) || in_dir(to),
        }
    }
}

/// A write not yet synced, kept so that a crash can let a prefix of them
/// reach the media.
#[derive(Debug, Clone)]
enum Pending {
    Data { offset: usize, bytes: Vec<u8> },
    SetLen(usize),
}

impl Pending {
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            Pending::Data { offset, bytes } => {
                let end = offset + bytes.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[*offset..end].copy_from_slice(bytes);
            }
            Pending::SetLen(len) => image.resize(*len, 0),
        }
    }

    /// The first `keep` bytes of a data write (a torn write); a length
    /// change is atomic, so it is either whole or absent.
    fn prefix(&self, keep: usize) -> Option<Pending> {
        match self {
            Pending::Data { offset, bytes } => Some(Pending::Data {
                offset: *offset,
                bytes: bytes[..keep.min(bytes.len())].to_vec(),
            }),
            Pending::SetLen(_) => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            Pending::Data { bytes, .. } => bytes.len(),
            Pending::SetLen(_) => 1,
        }
    }
}

#[derive(Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

impl Inode {
    fn write(&mut self, write: Pending) {
        write.apply(&mut self.live);
        self.pending.push(write);
    }
}

fn is_root(path: &Path) -> bool {
    path.parent().is_none()
}

fn sim_error(op: Op, path: &Path, message: &'static str) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        op,
        source: io::Error::other(message),
    }
}

fn not_found(op: Op, path: &Path) -> StorageError {
    StorageError::NotFound {
        path: path.to_path_buf(),
        op,
    }
}

/// Entries of `ns` directly inside `dir`.
fn children<'a>(
    ns: &'a Namespace,
    dir: &'a Path,
) -> impl Iterator<Item = (&'a PathBuf, &'a Entry)> + 'a {
    ns.range(dir.to_path_buf()..)
        .take_while(move |(p, _)| p.starts_with(dir))
        .filter(move |(p, _)| p.parent() == Some(dir))
}

#[derive(Debug)]
pub(super) struct Disk {
    /// Bumped by every crash; handles of an older generation are dead.
    pub(super) generation: u64,
    /// Set by a failed write or sync of the current generation.
    pub(super) latched: bool,
    rng: SmallRng,
    live: Namespace,
    durable: Namespace,
    /// Directory changes since their directory's last sync, in call order.
    journal: Vec<NsOp>,
    inodes: BTreeMap<InodeId, Inode>,
    next_inode: InodeId,
    pub(super) faults: FaultPlan,
}

impl Disk {
    pub(super) fn new(seed: u64) -> Self {
        Disk {
            generation: 0,
            latched: false,
            rng: SmallRng::seed_from_u64(seed),
            live: Namespace::new(),
            durable: Namespace::new(),
            journal: Vec::new(),
            inodes: BTreeMap::new(),
            next_inode: 0,
            faults: FaultPlan::default(),
        }
    }

    fn is_dir(&self, path: &Path) -> bool {
        is_root(path) || self.live.get(path) == Some(&Entry::Dir)
    }

    fn require_parent_dir(&self, op: Op, path: &Path) -> Result<()> {
        match path.parent() {
            Some(parent) if self.is_dir(parent) => Ok(()),
            Some(_) => Err(not_found(op, path)),
            None => Err(sim_error(op, path, "is a directory")),
        }
    }

    pub(super) fn create(&mut self, path: &Path) -> Result<InodeId> {
        self.require_parent_dir(Op::Create, path)?;
        if self.live.contains_key(path) {
            return Err(StorageError::AlreadyExists {
                path: path.to_path_buf(),
                op: Op::Create,
            });
        }
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, Inode::default());
        self.change(NsOp::Insert(path.to_path_buf(), Entry::File(id)));
        Ok(id)
    }

    pub(super) fn lookup(&self, op: Op, path: &Path) -> Result<InodeId> {
        match self.live.get(path) {
            Some(Entry::File(id)) => Ok(*id),
            Some(Entry::Dir) => Err(sim_error(op, path, "is a directory")),
            None if is_root(path) => Err(sim_error(op, path, "is a directory")),
            None => Err(not_found(op, path)),
        }
    }

    fn inode(&self, id: InodeId) -> &Inode {
        &self.inodes[&id]
    }

    fn inode_mut(&mut self, id: InodeId) -> &mut Inode {
        self.inodes
            .get_mut(&id)
            .expect("an open handle keeps its inode until a crash")
    }

    pub(super) fn live_bytes(&self, id: InodeId) -> &[u8] {
        &self.inode(id).live
    }

    pub(super) fn rename(&mut self, from: &Path, to: &Path) -> Result<()> {
        let id = self.lookup(Op::Rename, from)?;
        self.require_parent_dir(Op::Rename, to)?;
        if self.is_dir(to) {
            return Err(sim_error(Op::Rename, to, "is a directory"));
        }
        self.change(NsOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            id,
        });
        Ok(())
    }

    pub(super) fn remove(&mut self, path: &Path) -> Result<()> {
        self.lookup(Op::Remove, path)?;
        self.change(NsOp::Remove(path.to_path_buf()));
        Ok(())
    }

    pub(super) fn list(&self, dir: &Path) -> Result<Vec<String>> {
        if !self.is_dir(dir) {
            return match self.live.get(dir) {
                Some(_) => Err(sim_error(Op::List, dir, "not a directory")),
                None => Err(not_found(Op::List, dir)),
            };
        }
        Ok(children(&self.live, dir)
            .filter_map(|(p, _)| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    pub(super) fn exists(&self, path: &Path) -> bool {
        is_root(path) || self.live.contains_key(path)
    }

    pub(super) fn create_dir_all(&mut self, dir: &Path) -> Result<()> {
        let missing: Vec<&Path> = dir.ancestors().filter(|p| !is_root(p)).collect();
        for path in missing.into_iter().rev() {
            match self.live.get(path) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(sim_error(Op::CreateDir, path, "not a directory"))
                }
                None => self.change(NsOp::Insert(path.to_path_buf(), Entry::Dir)),
            }
        }
        Ok(())
    }

    /// Applies a directory change to the live names and journals it.
    fn change(&mut self, op: NsOp) {
        op.apply(&mut self.live);
        self.journal.push(op);
    }

    /// Counts a call of `op`; if a fault is planned for it, latches and
    /// returns the fault.
    fn fault(&mut self, op: FaultOp) -> Option<FaultKind> {
        let kind = self.faults.fire(op)?;
        self.latched = true;
        Some(kind)
    }

    pub(super) fn sync_dir(&mut self, dir: &Path) -> Result<()> {
        if !self.is_dir(dir) {
            return Err(not_found(Op::SyncDir, dir));
        }
        if let Some(kind) = self.fault(FaultOp::Sync) {
            return Err(kind.error(Op::SyncDir, dir));
        }
        let (now, later) = std::mem::take(&mut self.journal)
            .into_iter()
            .partition::<Vec<NsOp>, _>(|op| op.touches(dir));
        for op in &now {
            op.apply(&mut self.durable);
        }
        self.journal = later;
        Ok(())
    }

    pub(super) fn write(
        &mut self,
        id: InodeId,
        path: &Path,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let end = offset.checked_add(data.len() as u64);
        if end.is_none_or(|end| end > SIM_FILE_MAX_BYTES) {
            return Err(sim_error(
                Op::Write,
                path,
                "file too large for the simulated disk",
            ));
        }
        let write = Pending::Data {
            offset: offset as usize,
            bytes: data.to_vec(),
        };
        if let Some(kind) = self.fault(FaultOp::Write) {
            // A failed write may have reached the page cache in part.
            let keep = self.rng.gen_range(0..=data.len());
            if let Some(partial) = write.prefix(keep) {
                self.inode_mut(id).write(partial);
            }
            return Err(kind.error(Op::Write, path));
        }
        self.inode_mut(id).write(write);
        Ok(())
    }

    pub(super) fn truncate(&mut self, id: InodeId, path: &Path, len: u64) -> Result<()> {
        if len > SIM_FILE_MAX_BYTES {
            return Err(sim_error(
                Op::Truncate,
                path,
                "file too large for the simulated disk",
            ));
        }
        if let Some(kind) = self.fault(FaultOp::Write) {
            return Err(kind.error(Op::Truncate, path));
        }
        self.inode_mut(id).write(Pending::SetLen(len as usize));
        Ok(())
    }

    pub(super) fn sync(&mut self, id: InodeId, path: &Path) -> Result<()> {
        let failed = self.fault(FaultOp::Sync);
        // A failed fsync may still have written some pages (and on Linux
        // marks the rest clean without writing them): some prefix is durable.
        let pending_count = self.inode(id).pending.len();
        let reached = match failed {
            Some(_) => self.rng.gen_range(0..=pending_count),
            None => pending_count,
        };
        let inode = self.inode_mut(id);
        for write in inode.pending.drain(..reached) {
            write.apply(&mut inode.durable);
        }
        match failed {
            Some(kind) => Err(kind.error(Op::Sync, path)),
            None => Ok(()),
        }
    }

    pub(super) fn crash(&mut self, mode: CrashMode) {
        self.generation += 1;
        self.latched = false;
        let journal = std::mem::take(&mut self.journal);
        // A prefix of the unsynced directory changes reached the media.
        let reached = match mode {
            CrashMode::DropUnsynced => 0,
            CrashMode::TearUnsynced => self.rng.gen_range(0..=journal.len()),
        };
        let mut names = std::mem::take(&mut self.durable);
        for op in &journal[..reached] {
            op.apply(&mut names);
        }
        // Parents sort before their children, so one ordered pass drops
        // every entry whose directory did not survive.
        let mut reachable = Namespace::new();
        for (path, entry) in names {
            let parent_ok = path.parent().is_some_and(|parent| {
                is_root(parent) || reachable.get(parent) == Some(&Entry::Dir)
            });
            if parent_ok {
                reachable.insert(path, entry);
            }
        }
        let referenced: BTreeSet<InodeId> = reachable
            .values()
            .filter_map(|e| match e {
                Entry::File(id) => Some(*id),
                Entry::Dir => None,
            })
            .collect();
        self.inodes.retain(|id, _| referenced.contains(id));
        for inode in self.inodes.values_mut() {
            let pending = std::mem::take(&mut inode.pending);
            if mode == CrashMode::TearUnsynced {
                // A prefix of the unsynced writes reached the media, the
                // last of them possibly torn.
                let reached = self.rng.gen_range(0..=pending.len());
                for write in &pending[..reached] {
                    write.apply(&mut inode.durable);
                }
                if let Some(torn) = pending.get(reached) {
                    let keep = self.rng.gen_range(0..torn.len().max(1));
                    if let Some(partial) = torn.prefix(keep) {
                        partial.apply(&mut inode.durable);
                    }
                }
            }
            inode.live = inode.durable.clone();
        }
        self.durable = reachable.clone();
        self.live = reachable;
    }

    pub(super) fn flip_bit(&mut self, path: &Path, bit: Option<u64>) -> Result<u64> {
        let id = match self.durable.get(path) {
            Some(Entry::File(id)) => *id,
            _ => return Err(not_found(Op::Write, path)),
        };
        let bits = self.inode(id).durable.len() as u64 * 8;
        let bit = match bit {
            Some(bit) if bit < bits => bit,
            None if bits > 0 => self.rng.gen_range(0..bits),
            _ => {
                return Err(sim_error(
                    Op::Write,
                    path,
                    "bit past the end of the durable image",
                ))
            }
        };
        let (byte, mask) = ((bit / 8) as usize, 1u8 << (bit % 8));
        let inode = self.inode_mut(id);
        inode.durable[byte] ^= mask;
        if inode.pending.is_empty() {
            inode.live[byte] ^= mask;
        }
        Ok(bit)
    }
}
