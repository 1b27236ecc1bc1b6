//! `epochdb recover --dir PATH` for a HybridLog store (cpr-sigmod19 §6.4):
//! opens the store, which recovers its newest whole checkpoint (index load
//! and log replay on every core), reports what it read and how fast, and
//! closes it again. Any `Functions` opens a store for this: recovery never
//! calls them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::inspect::StoreFile;
use epochdb_hybridlog::{AddU64, Config, RealStorage, RecoveredInfo, Store};
use serde::Serialize;

use super::RecoverArgs;
use crate::layout::names;

/// Memory for the log's page frames while the store is open: recovery
/// reads the log's last page into them and nothing else.
const FRAME_MEMORY_BYTES: u64 = 64 << 20;

/// The JSON report: DESIGN.md's fields first, then the store's details.
#[derive(Debug, Serialize)]
struct StoreRecoverJson {
    seconds: f64,
    /// Index checkpoint and snapshot bytes read.
    checkpoint_bytes: u64,
    log_bytes: u64,
    mb_s: f64,
    threads: usize,
    store: &'static str,
    version: u32,
    checkpoint_kind: String,
    index_bytes: u64,
    snapshot_bytes: u64,
    index_seconds: f64,
    replay_seconds: f64,
    /// Wall time without allocating the log's page frames.
    read_seconds: f64,
    sessions: usize,
    invalidated_records: usize,
    l_e: u64,
}

/// Recovers the store in `dir` with `threads` threads and reports it.
pub(super) fn run(args: &RecoverArgs, threads: usize) -> Result<(), String> {
    let dir = &args.dir[0];
    if args.dir.len() > 1 {
        return Err(format!(
            "{} holds a hybridlog store, which lives in one directory: give one --dir",
            dir.display()
        ));
    }
    if args.durability.is_some() || args.no_point_index {
        return Err(format!(
            "{} holds a hybridlog store: --durability and --no-point-index are for engine \
             databases",
            dir.display()
        ));
    }
    // Opening a store without a checkpoint starts it empty and removes
    // the log files it cannot reach: not what a recovery should do.
    let checkpointed = names(dir)
        .iter()
        .any(|name| StoreFile::of_name(name) == Some(StoreFile::Metadata));
    if !checkpointed {
        return Err(format!(
            "{} holds a hybridlog store without a checkpoint: nothing to recover \
             (a store is durable only up to its last checkpoint)",
            dir.display()
        ));
    }
    let config = Config {
        recovery_threads: threads,
        direct_io: !args.buffered_io,
        memory_bytes: FRAME_MEMORY_BYTES,
        prefault_frames: false,
        ..Config::default()
    };
    eprintln!(
        "[recover] hybridlog store {}: loading the index checkpoint and replaying the log \
         on {threads} threads",
        dir.display()
    );
    let store = Store::open(Arc::new(RealStorage::new()), dir, config, AddU64)
        .map_err(|e| format!("recovering {}: {e}", dir.display()))?;
    let info = store
        .recovered()
        .cloned()
        .ok_or("the store opened without recovering a checkpoint")?;
    drop(store);
    if let Some(path) = &args.json {
        let text =
            serde_json::to_string_pretty(&json(&info, threads)).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("--json: writing {}: {e}", path.display()))?;
    }
    let text = report_text(dir, threads, &info).map_err(|e| e.to_string())?;
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| format!("writing the report: {e}"))
}

fn json(info: &RecoveredInfo, threads: usize) -> StoreRecoverJson {
    StoreRecoverJson {
        seconds: info.elapsed.as_secs_f64(),
        checkpoint_bytes: info.index_bytes + info.snapshot_bytes,
        log_bytes: info.log_bytes,
        mb_s: info.mb_per_second(),
        threads,
        store: "hybridlog",
        version: info.version,
        checkpoint_kind: format!("{:?}", info.kind),
        index_bytes: info.index_bytes,
        snapshot_bytes: info.snapshot_bytes,
        index_seconds: info.index_time.as_secs_f64(),
        replay_seconds: info.replay_time.as_secs_f64(),
        read_seconds: info.read_time.as_secs_f64(),
        sessions: info.sessions.len(),
        invalidated_records: info.invalidated,
        l_e: info.l_e,
    }
}

fn report_text(
    dir: &Path,
    threads: usize,
    info: &RecoveredInfo,
) -> Result<String, std::fmt::Error> {
    let mb = |bytes: u64| bytes as f64 / 1e6;
    let mut text = String::new();
    writeln!(text, "recovered {} (hybridlog store)", dir.display())?;
    writeln!(
        text,
        "time:              {:.3} s (index {:.3} s, log replay {:.3} s)",
        info.elapsed.as_secs_f64(),
        info.index_time.as_secs_f64(),
        info.replay_time.as_secs_f64()
    )?;
    writeln!(
        text,
        "checkpoint:        version {} ({:?}), log end {}",
        info.version, info.kind, info.l_e
    )?;
    writeln!(
        text,
        "checkpoint bytes:  {} ({:.2} MB: index {:.2} MB, snapshot {:.2} MB)",
        info.index_bytes + info.snapshot_bytes,
        mb(info.index_bytes + info.snapshot_bytes),
        mb(info.index_bytes),
        mb(info.snapshot_bytes)
    )?;
    writeln!(
        text,
        "log bytes:         {} ({:.2} MB replayed; {} version-(v+1) records invalidated)",
        info.log_bytes,
        mb(info.log_bytes),
        info.invalidated
    )?;
    writeln!(text, "throughput:        {:.1} MB/s", info.mb_per_second())?;
    writeln!(text, "threads:           {threads}")?;
    writeln!(text, "sessions:          {}", info.sessions.len())?;
    Ok(text)
}
