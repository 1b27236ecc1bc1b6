//! A logging microbenchmark (eleda §6's "logging microbenchmark"), for a
//! later `epochdb bench wal`: `threads` database threads commit one record
//! of `record_bytes` per entry, each with a callback, for `duration`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use epochdb_storage::Storage;

use crate::error::WalError;
use crate::options::{LogKind, WalOptions};
use crate::wal::Wal;

/// What to run.
#[derive(Debug, Clone)]
pub struct MicrobenchConfig {
    /// The log's options (kind, I/O unit, buffer, hop distance).
    pub options: WalOptions,
    /// Database threads.
    pub threads: usize,
    /// Bytes of the one record in each entry.
    pub record_bytes: usize,
    /// How long the threads append.
    pub duration: Duration,
}

/// What came out.
#[derive(Debug, Clone, PartialEq)]
pub struct MicrobenchStats {
    /// The hole tracker measured.
    pub kind: LogKind,
    /// Database threads.
    pub threads: usize,
    /// Entries appended.
    pub entries: u64,
    /// Log bytes made durable (headers included).
    pub bytes: u64,
    /// Callbacks that reported durability.
    pub acked: u64,
    /// Wall time from the first append until everything was durable.
    pub seconds: f64,
    /// Durable entries per second.
    pub entries_per_s: f64,
    /// Durable log MiB per second.
    pub mib_per_s: f64,
    /// Flushes (each two syncs).
    pub flushes: u64,
    /// Share of SBL advanced by crawling (Figure 20), GRASSHOPPER only.
    pub crawl_ratio: Option<f64>,
}

/// Runs the microbenchmark on a fresh log in `dir`.
pub fn run_microbench(
    storage: Arc<dyn Storage>,
    dir: &Path,
    config: &MicrobenchConfig,
) -> Result<MicrobenchStats, WalError> {
    let (wal, recovered) = Wal::open(storage, dir, config.options.clone())?;
    let first = recovered.end_lsn;
    let acked = Arc::new(AtomicU64::new(0));
    let entries = Arc::new(AtomicU64::new(0));
    let record = vec![0x5au8; config.record_bytes];
    let start = Instant::now();
    let deadline = start + config.duration;
    std::thread::scope(|s| -> Result<(), WalError> {
        let mut joins = Vec::new();
        for _ in 0..config.threads {
            let mut handle = wal.thread_handle();
            let (acked, entries, record) = (acked.clone(), entries.clone(), &record);
            joins.push(s.spawn(move || -> Result<(), WalError> {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let acked = acked.clone();
                    handle.commit(&[record], move |r| {
                        if r.is_ok() {
                            acked.fetch_add(1, Relaxed);
                        }
                    })?;
                    n += 1;
                }
                entries.fetch_add(n, Relaxed);
                drop(handle); // waits until durable
                Ok(())
            }));
        }
        for j in joins {
            j.join().expect("bench thread panicked")?;
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let stats = wal.stats();
    wal.shutdown()?;
    let entries = entries.load(Relaxed);
    let bytes = stats.durable_lsn - first;
    let moved = stats.hop_bytes + stats.crawl_bytes + stats.catch_up_bytes;
    Ok(MicrobenchStats {
        kind: config.options.kind,
        threads: config.threads,
        entries,
        bytes,
        acked: acked.load(Relaxed),
        seconds,
        entries_per_s: entries as f64 / seconds,
        mib_per_s: bytes as f64 / seconds / (1 << 20) as f64,
        flushes: stats.flushes,
        crawl_ratio: (config.options.kind == LogKind::Grasshopper && moved > 0)
            .then(|| stats.crawl_bytes as f64 / moved as f64),
    })
}
