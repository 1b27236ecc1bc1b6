//! Why this file exists: `run_microbench` is the entry point `epochdb bench
//! wal` will call; it must run every kind and account for every entry.
#![cfg(not(loom))]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use epochdb_storage::SimStorage;
use epochdb_wal::{run_microbench, LogKind, MicrobenchConfig};

#[test]
fn microbench_acknowledges_every_entry_for_every_kind() {
    for (i, kind) in KINDS.into_iter().enumerate() {
        let disk = Arc::new(SimStorage::new(i as u64));
        let cfg = MicrobenchConfig {
            options: small_options(kind),
            threads: 2,
            record_bytes: 100,
            duration: Duration::from_millis(50),
        };
        let stats = run_microbench(disk, Path::new("/bench"), &cfg).unwrap();
        assert!(stats.entries > 0, "{kind:?}: nothing appended");
        assert_eq!(
            stats.acked, stats.entries,
            "{kind:?}: unacknowledged entries"
        );
        let entry =
            (epochdb_wal::ENTRY_OVERHEAD_BYTES + epochdb_wal::RECORD_OVERHEAD_BYTES + 100) as u64;
        assert_eq!(stats.bytes, stats.entries * entry);
        assert_eq!(stats.crawl_ratio.is_some(), kind == LogKind::Grasshopper);
        eprintln!("{stats:?}");
    }
}
