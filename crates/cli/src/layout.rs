//! What a directory holds, judged by its files: which engine database
//! (and so which mode opens it), a HybridLog store, the FC checkpoint
//! library's files, or nothing; and, for
//! a folder holding neither, the databases one level down (as `epochdb
//! bench --dir` and `crashtest` lay them out). `recover` and `inspect`
//! share it.

use std::path::Path;

use epochdb_engine::DurabilityKind;

/// The file every `log`/`silor`/`cpr` database has in its first directory
/// from its first open on (the table catalog).
const CATALOG: &str = "catalog";
/// The subdirectory that holds a `wal` database's central log.
const WAL_SUBDIR: &str = "wal";
/// The marker file of a `cpr` database.
const CPR_MARKER: &str = "cpr";
/// The installed checkpoint's metadata (`silor`; `log` never has one).
const CHECKPOINT_META: &str = "checkpoint";

/// What a directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holds {
    /// A `wal` database (its central log in `wal/`).
    Wal,
    /// A `cpr` database (its marker file).
    Cpr,
    /// A `log` or `silor` database: one format, and `silor` once a
    /// checkpoint was installed.
    LogOrSilor { checkpointed: bool },
    /// A HybridLog store's files.
    HybridLog,
    /// The FC checkpoint library's files (checkpoint slots, log segments).
    Fcc,
    /// Nothing of epochdb's.
    Nothing,
}

impl Holds {
    pub(crate) fn of(dir: &Path) -> Holds {
        if dir.join(WAL_SUBDIR).is_dir() {
            Holds::Wal
        } else if dir.join(CPR_MARKER).is_file() {
            Holds::Cpr
        } else if dir.join(CATALOG).is_file() {
            Holds::LogOrSilor {
                checkpointed: dir.join(CHECKPOINT_META).is_file(),
            }
        } else if epochdb_hybridlog::inspect::is_store_dir(&names(dir)) {
            Holds::HybridLog
        } else if epochdb_fcc::inspect::is_fcc_dir(&names(dir)) {
            Holds::Fcc
        } else {
            Holds::Nothing
        }
    }

    /// The engine mode that opens it as it was written (`None`: no engine
    /// database).
    pub(crate) fn mode(self) -> Option<DurabilityKind> {
        match self {
            Holds::Wal => Some(DurabilityKind::Wal),
            Holds::Cpr => Some(DurabilityKind::Cpr),
            Holds::LogOrSilor { checkpointed: true } => Some(DurabilityKind::Silor),
            Holds::LogOrSilor {
                checkpointed: false,
            } => Some(DurabilityKind::Log),
            Holds::HybridLog | Holds::Fcc | Holds::Nothing => None,
        }
    }
}

/// The names in `dir` (none if it cannot be listed).
pub(crate) fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect()
}

/// The subdirectories of `dir` that hold something of epochdb's, sorted:
/// only engine databases when `engine_only`.
pub(crate) fn holders_inside(dir: &Path, engine_only: bool) -> Vec<String> {
    let mut inside: Vec<String> = names(dir)
        .into_iter()
        .map(|name| dir.join(name))
        .filter(|path| {
            let holds = Holds::of(path);
            path.is_dir() && holds != Holds::Nothing && (!engine_only || holds.mode().is_some())
        })
        .map(|path| path.display().to_string())
        .collect();
    inside.sort();
    inside
}

/// Why `dir` holds no database to open, with a hint where it holds some
/// one level down.
pub(crate) fn no_database(dir: &Path) -> String {
    if !dir.exists() {
        return format!(
            "no epochdb database at {} (it does not exist)",
            dir.display()
        );
    }
    if !dir.is_dir() {
        return format!("no epochdb database at {} (not a directory)", dir.display());
    }
    let inside = holders_inside(dir, true);
    if inside.is_empty() {
        format!(
            "no epochdb database at {} (no {CATALOG} file and no {WAL_SUBDIR} directory)",
            dir.display()
        )
    } else {
        format!(
            "no epochdb database at {}, but it holds {}: pass that to --dir",
            dir.display(),
            inside.join(", ")
        )
    }
}
