//! Replacing a small file atomically: the one way metadata files are
//! installed (a checkpoint's metadata is written last, so the checkpoint
//! is whole or ignored).

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::seam::Storage;

/// What a temporary file being replaced carries after its final name;
/// recovery removes files that end with it (a crash left them behind).
pub const TMP_SUFFIX: &str = ".tmp";

/// Writes `bytes` to `path` so that, across any crash, `path` holds either
/// its old contents or all of `bytes`: write `path` + [`TMP_SUFFIX`]
/// (replacing a leftover), sync it, rename it over `path`, sync the
/// directory. Every error is returned; a failed sync latches the storage
/// and is never retried.
pub fn replace_atomically(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp_name);
    if storage.exists(&tmp)? {
        storage.remove(&tmp)?;
    }
    let mut file = storage.create(&tmp)?;
    file.append(bytes)?;
    file.sync()?;
    drop(file);
    storage.rename(&tmp, path)?;
    storage.sync_dir(dir)
}
