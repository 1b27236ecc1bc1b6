//! The names in a log/checkpoint directory (silor §3.5, §4.2) and the small
//! file operations every writer shares: create-then-sync-the-directory and
//! atomic replacement.

use std::path::{Path, PathBuf};

use epochdb_storage::{Storage, StorageError};

/// The log file being written (silor §3.5).
pub(crate) const DATA_LOG: &str = "data.log";
/// Prefix of rotated log files: `old_data.<e>` (or `old_data.<e>.<k>` when
/// the name is taken), holding no record of an epoch above `e`.
pub(crate) const OLD_DATA_PREFIX: &str = "old_data.";
/// The persistent epoch (directory 0 only).
pub(crate) const PEPOCH: &str = "pepoch";
/// The table catalog (directory 0 only).
pub(crate) const CATALOG: &str = "catalog";
/// Marks a database of the `cpr` mode (directory 0 only).
pub(crate) const CPR_MARKER: &str = "cpr";
/// Held locked (flock) by the process that has the database open.
pub(crate) const LOCK: &str = "LOCK";
/// Each directory's identity: its index among the database's directories.
pub(crate) const DIRECTORY: &str = "directory";
/// The installed checkpoint's metadata (directory 0 only).
pub(crate) const CHECKPOINT_META: &str = "checkpoint";
/// Prefix of checkpoint data files: `ckpt.<id>.t<table>.<j>`.
pub(crate) const CKPT_PREFIX: &str = "ckpt.";
/// Old log and checkpoint files are strays once a newer checkpoint is
/// installed (recovery removes them unread), so they go a piece at a time:
/// a single unlink of a large file stalled the logger's appends.
pub(crate) use epochdb_storage::{remove_in_pieces, REMOVE_PIECE_BYTES};
/// Atomic replacement (temporary file, sync, rename, directory sync)
/// comes from the storage crate, as for every format.
pub(crate) use epochdb_storage::{replace_atomically, TMP_SUFFIX};

/// A log file's identity, parsed from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogName {
    /// `data.log`.
    Current,
    /// `old_data.<epoch>[.<k>]`.
    Old { epoch: u64 },
}

/// Parses a log file name; `None` for anything else.
pub(crate) fn parse_log_name(name: &str) -> Option<LogName> {
    if name == DATA_LOG {
        return Some(LogName::Current);
    }
    let rest = name.strip_prefix(OLD_DATA_PREFIX)?;
    let epoch_text = rest.split('.').next()?;
    let epoch = epoch_text.parse().ok()?;
    let suffix_ok = match rest.split_once('.') {
        None => true,
        Some((_, k)) => k.parse::<u32>().is_ok(),
    };
    suffix_ok.then_some(LogName::Old { epoch })
}

/// The name of checkpoint `id`'s file `j` of `table` (in every directory;
/// flat, so stray checkpoints are removed file by file).
pub(crate) fn ckpt_file_name(id: u64, table: u32, j: usize) -> String {
    format!("{CKPT_PREFIX}{id}.t{table}.{j}")
}

/// Parses a checkpoint file name into `(id, table, j)`.
pub(crate) fn parse_ckpt_file_name(name: &str) -> Option<(u64, u32, usize)> {
    let mut parts = name.strip_prefix(CKPT_PREFIX)?.split('.');
    let id = parts.next()?.parse().ok()?;
    let table = parts.next()?.strip_prefix('t')?.parse().ok()?;
    let j = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((id, table, j))
}

/// A free name `old_data.<epoch>` (or with a `.k` suffix) in `dir`.
pub(crate) fn free_old_data_name(
    storage: &dyn Storage,
    dir: &Path,
    epoch: u64,
) -> Result<PathBuf, StorageError> {
    let plain = dir.join(format!("{OLD_DATA_PREFIX}{epoch}"));
    if !storage.exists(&plain)? {
        return Ok(plain);
    }
    for k in 1u32.. {
        let candidate = dir.join(format!("{OLD_DATA_PREFIX}{epoch}.{k}"));
        if !storage.exists(&candidate)? {
            return Ok(candidate);
        }
    }
    unreachable!("u32 suffixes exhausted")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_names_parse() {
        assert_eq!(parse_log_name("data.log"), Some(LogName::Current));
        assert_eq!(
            parse_log_name("old_data.17"),
            Some(LogName::Old { epoch: 17 })
        );
        assert_eq!(
            parse_log_name("old_data.17.2"),
            Some(LogName::Old { epoch: 17 })
        );
        assert_eq!(parse_log_name("old_data.x"), None);
        assert_eq!(parse_log_name("old_data.17.tmp"), None);
        assert_eq!(parse_log_name("pepoch"), None);
        assert_eq!(parse_ckpt_file_name("ckpt.4.t3.1"), Some((4, 3, 1)));
        assert_eq!(
            parse_ckpt_file_name(&ckpt_file_name(9, 2, 0)),
            Some((9, 2, 0))
        );
        assert_eq!(parse_ckpt_file_name("ckpt.4.t3.1.tmp"), None);
    }
}
