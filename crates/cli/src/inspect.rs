//! `epochdb inspect PATH`: any file of the `log`, `silor`, `cpr` and `wal`
//! modes, of a HybridLog store or of the FC checkpoint library in
//! human-readable form, or a one-line summary of each file in a directory,
//! a `wal` database's log subdirectory included (DESIGN.md, "The `epochdb`
//! command"). The decoding lives in the engine
//! (`epochdb_engine::durability::inspect_file`), beside the parsers
//! recovery uses; this module picks the file or directory form and turns
//! damage into the exit status.

use std::fmt::{self, Write as _};
use std::io::{self, BufWriter, Write as IoWrite};
use std::path::{Path, PathBuf};

use clap::Args;
use epochdb_engine::durability::{inspect_database, inspect_dir, inspect_file};
use epochdb_engine::DurabilityError;
use epochdb_fcc::inspect::{self as fcc, FccFile};
use epochdb_hybridlog::inspect::{self as store, StoreFile};
use epochdb_storage::RealStorage;

use crate::layout::{holders_inside, Holds};

/// `inspect` flags.
// The field docs are `--help` text, where `<e>` is a placeholder, not HTML.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// A file of an epochdb directory (data.log, old_data.<e>, pepoch,
    /// catalog, checkpoint, ckpt.<id>.t<table>.<j>, wal/wal-<lsn>.log,
    /// wal/wal.sdl), or the directory. Several directories: the
    /// directories of one database, in the order it was opened with, each
    /// file judged with directory 0's installed checkpoint and checked
    /// across them as recovery checks them.
    #[arg(required = true, num_args = 1..)]
    paths: Vec<PathBuf>,
    /// Also list every log entry with its writes and every checkpoint
    /// record; with a directory, print each file's listing too.
    #[arg(long, short)]
    verbose: bool,
}

/// Prints the listing; an error if a file is corrupt (exit status 1).
pub(crate) fn run(args: InspectArgs) -> Result<(), String> {
    if args.paths.len() > 1 {
        return run_database(&args.paths, args.verbose);
    }
    let path = &args.paths[0];
    let metadata = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let storage = RealStorage::new();
    let mut out = Stdout::new();
    let store_file = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(StoreFile::of_name);
    let fcc_file = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(FccFile::of_name);
    let corrupt = if metadata.is_dir() && Holds::of(path) == Holds::HybridLog {
        inspect_store_dir(&storage, path, args.verbose, &mut out)?
    } else if metadata.is_dir() && Holds::of(path) == Holds::Fcc {
        inspect_fcc_dir(path, args.verbose, &mut out)?
    } else if metadata.is_dir() {
        let summary = inspect_dir(&storage, path, &mut out).map_err(|e| out.error(e))?;
        if args.verbose {
            for (name, _) in &summary.files {
                out.write_str("\n")
                    .map_err(|_| out.error(listing_error()))?;
                inspect_file(&storage, &path.join(name), true, &mut out)
                    .map_err(|e| out.error(e))?;
            }
        }
        if summary.files.is_empty() {
            let inside = holders_inside(path, false);
            if !inside.is_empty() {
                writeln!(out, "it holds {}: inspect that", inside.join(", "))
                    .map_err(|_| out.error(listing_error()))?;
            }
        }
        match summary.corrupt() {
            0 => None,
            n => Some(format!("{n} corrupt (see the listing above)")),
        }
    } else if fcc_file.is_some() {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.display().to_string();
        let summary = fcc::inspect_bytes(&name, &bytes, args.verbose, &mut out)
            .map_err(|_| out.error(listing_error()))?
            .expect("named as an fcc file");
        // A checkpoint slot that does not verify is damage (recovery
        // falls back to the other slot); a log segment's early end is
        // what a crash leaves.
        (summary.kind == FccFile::Checkpoint)
            .then_some(summary.unused)
            .flatten()
    } else if store_file.is_some() {
        let summary = store::inspect_file(&storage, path, args.verbose, &mut out)
            .map_err(|e| out.error_text(e.to_string()))?;
        summary.damage.filter(|d| d.refused).map(|d| d.to_string())
    } else {
        let summary =
            inspect_file(&storage, path, args.verbose, &mut out).map_err(|e| out.error(e))?;
        summary
            .is_corrupt()
            .then(|| summary.damage.map(|d| d.to_string()).unwrap_or_default())
    };
    out.flush()
        .map_err(|e| format!("writing the listing: {e}"))?;
    match corrupt {
        Some(what) => Err(format!("{}: {what}", path.display())),
        None => Ok(()),
    }
}

/// Lists the directories of one database (`epochdb inspect D0 D1 …`);
/// with `verbose` each file's listing too.
fn run_database(dirs: &[PathBuf], verbose: bool) -> Result<(), String> {
    for dir in dirs {
        if !dir.is_dir() {
            return Err(format!(
                "{}: not a directory (several paths are the directories of one database)",
                dir.display()
            ));
        }
    }
    let storage = RealStorage::new();
    let mut out = Stdout::new();
    let summary = inspect_database(&storage, dirs, &mut out).map_err(|e| out.error(e))?;
    if verbose {
        for (name, _) in &summary.files {
            out.write_str("\n")
                .map_err(|_| out.error(listing_error()))?;
            let path = Path::new(name);
            let path = if path.is_absolute() || name.contains('/') && !name.starts_with("wal/") {
                path.to_path_buf()
            } else {
                dirs[0].join(name)
            };
            inspect_file(&storage, &path, true, &mut out).map_err(|e| out.error(e))?;
        }
    }
    out.flush()
        .map_err(|e| format!("writing the listing: {e}"))?;
    match summary.corrupt() {
        0 => Ok(()),
        n => Err(format!(
            "{}: {n} corrupt (see the listing above)",
            dirs[0].display()
        )),
    }
}

/// Lists the FC checkpoint library's files in `path` (and with `verbose`
/// each file), then what recovery would do with them; an error when no
/// checkpoint slot verifies (recovery then fails).
fn inspect_fcc_dir(path: &Path, verbose: bool, out: &mut Stdout) -> Result<Option<String>, String> {
    let mut names = crate::layout::names(path);
    names.sort();
    writeln!(out, "{}: fcc files", path.display()).map_err(|_| out.error(listing_error()))?;
    let mut files = Vec::new();
    for name in names {
        let file = path.join(&name);
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let mut listing = String::new();
        let Ok(Some(summary)) = fcc::inspect_bytes(&name, &bytes, verbose, &mut listing) else {
            continue;
        };
        let verdict = summary.unused.clone().unwrap_or_else(|| "intact".into());
        let text = if verbose {
            format!("\n{listing}")
        } else {
            format!(
                "{name:<24}  {:<16} {:>12} bytes  {}  {verdict}\n",
                summary.kind.name(),
                summary.bytes,
                summary.detail
            )
        };
        out.write_str(&text)
            .map_err(|_| out.error(listing_error()))?;
        // One file in memory at a time: the plan reads the segments again.
        files.push((name, summary));
    }
    let read = |name: &str| {
        let file = path.join(name);
        std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))
    };
    let Some(plan) = fcc::recovery_plan(&files, read)? else {
        return Ok(Some(
            "no checkpoint slot verifies: recovery fails".to_string(),
        ));
    };
    writeln!(
        out,
        "recovery: checkpoint {} (tick {}), then the log to tick {} ({} ticks replayed)",
        plan.checkpoint_id,
        plan.checkpoint_tick,
        plan.last_tick,
        plan.last_tick - plan.checkpoint_tick
    )
    .map_err(|_| out.error(listing_error()))?;
    Ok(None)
}

/// Lists a HybridLog store's directory (and with `verbose` each file);
/// the damage recovery refuses, if any.
fn inspect_store_dir(
    storage: &RealStorage,
    path: &Path,
    verbose: bool,
    out: &mut Stdout,
) -> Result<Option<String>, String> {
    let listing =
        store::inspect_dir(storage, path, out).map_err(|e| out.error_text(e.to_string()))?;
    if verbose {
        for (name, _) in &listing.files {
            out.write_str("\n")
                .map_err(|_| out.error(listing_error()))?;
            store::inspect_file(storage, &path.join(name), true, out)
                .map_err(|e| out.error_text(e.to_string()))?;
        }
    }
    let corrupt = listing.corrupt();
    Ok((corrupt > 0).then(|| format!("{corrupt} corrupt (see the listing above)")))
}

fn listing_error() -> DurabilityError {
    DurabilityError::Io("writing the inspect listing failed".into())
}

/// Standard output as a `fmt::Write`, keeping the I/O error a failed write
/// had (a closed pipe, a full disk) for the message.
struct Stdout {
    inner: BufWriter<io::StdoutLock<'static>>,
    failure: Option<io::Error>,
}

impl Stdout {
    fn new() -> Self {
        Self {
            inner: BufWriter::new(io::stdout().lock()),
            failure: None,
        }
    }

    /// The message for `error`: the I/O error behind it if writing failed.
    fn error(&mut self, error: DurabilityError) -> String {
        self.error_text(error.to_string())
    }

    /// The message for an error given as text: as [`Stdout::error`].
    fn error_text(&mut self, error: String) -> String {
        match self.failure.take() {
            Some(io) => format!("writing the listing: {io}"),
            None => error,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        IoWrite::flush(&mut self.inner)
    }
}

impl fmt::Write for Stdout {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        IoWrite::write_all(&mut self.inner, text.as_bytes()).map_err(|error| {
            self.failure.get_or_insert(error);
            fmt::Error
        })
    }
}
