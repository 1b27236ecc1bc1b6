//! `epochdb recover --dir PATH`: recovers a `log`, `silor`, `wal` or `cpr`
//! database with every core (silor-osdi14 §5) and reports what it read and
//! how fast (DESIGN.md, "The `epochdb` command"). Without `--durability`
//! the mode is read off the directory's files. Opening recovers and then
//! resumes (stale log files are rewritten, as every open does); the
//! database is then shut down cleanly. A HybridLog store's directory is
//! recovered the same way (`hybridlog.rs`).

mod hybridlog;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;
use epochdb_engine::durability::{RecoveryReport, SilorOptions, WalOptions};
use epochdb_engine::{Config, Database, DurabilityKind, PointIndexes};
use serde::Serialize;

use crate::layout::{no_database, Holds};

/// `recover` flags.
#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// A log/checkpoint directory of the database; repeat for every
    /// directory it was written with, in the same order.
    #[arg(long, required = true)]
    dir: Vec<PathBuf>,
    /// Recovery threads in all (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// The mode to open the database with: log, silor, wal or cpr. By
    /// default, the mode the directory was written with (read off its
    /// files: a `wal` subdirectory, a `cpr` marker, a checkpoint).
    #[arg(long)]
    durability: Option<DurabilityKind>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Recover into tables without the point-read hash index (the engine's
    /// `Config::point_index`; by default every table gets one, and loading
    /// fills it).
    #[arg(long)]
    no_point_index: bool,
    /// Read the files through the page cache (`SilorOptions::direct_io`
    /// and `WalOptions::direct_io` off; by default recovery reads them
    /// past it, where the file system allows).
    #[arg(long)]
    buffered_io: bool,
}

/// The JSON report: DESIGN.md's fields first, then the details.
#[derive(Debug, Serialize)]
struct RecoverJson {
    seconds: f64,
    checkpoint_bytes: u64,
    log_bytes: u64,
    mb_s: f64,
    threads: usize,
    checkpoint_seconds: f64,
    log_seconds: f64,
    persistent_epoch: u64,
    records: u64,
    checkpoint_threads: usize,
    log_threads: usize,
    /// The installed checkpoint's `[e_l, e_h]`, if there was one.
    checkpoint_epochs: Option<[u64; 2]>,
    log_entries: u64,
    /// Log blocks handed from a thread scanning a file to an idle one.
    log_blocks_shared: u64,
    torn_tail_bytes: u64,
    dropped_blocks: u64,
    durability: String,
    dirs: Vec<PathBuf>,
}

/// Recovers, prints the report, writes the JSON, shuts down.
pub(crate) fn run(args: RecoverArgs) -> Result<(), String> {
    if let Some(mode) = args.durability.filter(|mode| !mode.is_durable()) {
        return Err(format!(
            "--durability: {mode} keeps nothing to recover; use log, silor, wal or cpr"
        ));
    }
    let threads = match args.threads {
        Some(0) => return Err("--threads must be at least 1".into()),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if Holds::of(&args.dir[0]) == Holds::HybridLog {
        return hybridlog::run(&args, threads);
    }
    let mode = check_dirs(&args.dir, args.durability)?;
    let config = Config {
        durability: mode,
        dirs: args.dir.clone(),
        silor: SilorOptions {
            recovery_threads: threads,
            direct_io: !args.buffered_io,
            ..SilorOptions::default()
        },
        wal: WalOptions {
            direct_io: !args.buffered_io,
            ..WalOptions::default()
        },
        point_index: if args.no_point_index {
            PointIndexes::None
        } else {
            PointIndexes::All
        },
        ..Config::default()
    };
    let opened = Database::open_reporting(config, |line| eprintln!("[recover] {line}"));
    let db = opened.map_err(|e| format!("recovering {}: {e}", dirs(&args.dir)))?;
    let report = db
        .recovery_report()
        .cloned()
        .ok_or("the database opened without a recovery report")?;
    db.shutdown()
        .map_err(|e| format!("shutting down after recovery: {e}"))?;
    drop(db);
    if let Some(path) = &args.json {
        let json = RecoverJson {
            seconds: report.seconds,
            checkpoint_bytes: report.checkpoint_bytes,
            log_bytes: report.log_bytes,
            mb_s: report.mb_per_second(),
            threads,
            checkpoint_seconds: report.checkpoint_seconds,
            log_seconds: report.log_seconds,
            persistent_epoch: report.persistent_epoch,
            records: report.records,
            checkpoint_threads: report.checkpoint_threads,
            log_threads: report.log_threads,
            checkpoint_epochs: report.checkpoint_epochs.map(|(l, h)| [l, h]),
            log_entries: report.log_entries,
            log_blocks_shared: report.log_blocks_shared,
            torn_tail_bytes: report.torn_tail_bytes,
            dropped_blocks: report.dropped_blocks,
            durability: mode.name().to_string(),
            dirs: args.dir.clone(),
        };
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("--json: writing {}: {e}", path.display()))?;
    }
    let text = report_text(&args, mode, threads, &report).map_err(|e| e.to_string())?;
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| format!("writing the report: {e}"))
}

/// Checks that the first directory holds a database and the others exist,
/// and returns the mode to open it with: `requested`, or the one it was
/// written with. Opening a missing directory would create an empty database
/// and report a successful recovery of nothing: refuse instead. A database
/// of another mode than `requested` is left to the engine, which names the
/// mode to use.
fn check_dirs(
    dirs: &[PathBuf],
    requested: Option<DurabilityKind>,
) -> Result<DurabilityKind, String> {
    let first = &dirs[0];
    let holds = Holds::of(first);
    let Some(written) = holds.mode() else {
        return Err(match holds {
            Holds::HybridLog => format!(
                "{} holds a hybridlog store, not an engine database",
                first.display()
            ),
            Holds::Fcc => format!(
                "{} holds the FC checkpoint library's files, not an engine database: \
                 `epochdb_fcc::recover` reads them (`epochdb inspect` lists them)",
                first.display()
            ),
            _ => no_database(first),
        });
    };
    for dir in &dirs[1..] {
        if !dir.is_dir() {
            return Err(format!(
                "no epochdb database at {} (not a directory)",
                dir.display()
            ));
        }
    }
    Ok(requested.unwrap_or(written))
}

fn dirs(dirs: &[PathBuf]) -> String {
    let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    names.join(", ")
}

fn report_text(
    args: &RecoverArgs,
    mode: DurabilityKind,
    threads: usize,
    report: &RecoveryReport,
) -> Result<String, std::fmt::Error> {
    let mb = |bytes: u64| bytes as f64 / 1e6;
    let mut text = String::new();
    writeln!(text, "recovered {} ({mode} mode)", dirs(&args.dir),)?;
    writeln!(
        text,
        "time:              {:.3} s (checkpoint {:.3} s, log {:.3} s)",
        report.seconds, report.checkpoint_seconds, report.log_seconds
    )?;
    let checkpoint = match report.checkpoint_epochs {
        Some((e_l, e_h)) => format!("checkpoint [e_l {e_l}, e_h {e_h}]"),
        None => "no checkpoint".to_string(),
    };
    writeln!(
        text,
        "checkpoint bytes:  {} ({:.2} MB; {checkpoint})",
        report.checkpoint_bytes,
        mb(report.checkpoint_bytes)
    )?;
    writeln!(
        text,
        "log bytes:         {} ({:.2} MB; {} entries replayed)",
        report.log_bytes,
        mb(report.log_bytes),
        report.log_entries
    )?;
    writeln!(
        text,
        "throughput:        {:.1} MB/s",
        report.mb_per_second()
    )?;
    writeln!(
        text,
        "threads:           {threads} ({} checkpoint loaders, {} log replayers; {} log blocks shared)",
        report.checkpoint_threads, report.log_threads, report.log_blocks_shared
    )?;
    writeln!(text, "persistent epoch:  {}", report.persistent_epoch)?;
    writeln!(text, "records:           {}", report.records)?;
    writeln!(text, "torn tail bytes:   {}", report.torn_tail_bytes)?;
    writeln!(text, "dropped blocks:    {}", report.dropped_blocks)?;
    Ok(text)
}
