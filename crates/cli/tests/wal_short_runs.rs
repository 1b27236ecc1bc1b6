//! Why this exists: session 26's GRASSHOPPER stall showed in exactly this
//! command, run in a loop: short `bench wal` runs on the null device with
//! more database threads than the machine has cores. A thread preempted
//! between the two stores of its push let the worker crawl onto a node
//! that SBL-hopping then stepped back from (`wal/src/grasshopper/list.rs`);
//! at a run's end the log never became durable. The worker now checks the
//! invariant that broke and fails the log when it does, so a run with the
//! bug exits with an error instead of hanging; a hang is caught by the
//! watchdog. Measured on 2 cores with the old store order: 1 of about 80
//! invocations failed (1 of 3 runs of this test at 30 each), so this is a
//! smoke check, not a proof; the deterministic regression tests are
//! `an_owner_preempted_mid_push_does_not_stall_the_worker` (wal unit test)
//! and the loom model `loom_hop_while_an_owner_is_mid_push`. Set
//! `EPOCHDB_WAL_SHORT_RUNS` for more invocations (300: about a 98% catch).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Invocations unless `EPOCHDB_WAL_SHORT_RUNS` says otherwise.
const INVOCATIONS: usize = 30;
const WATCHDOG: Duration = Duration::from_secs(60);

#[test]
fn short_oversubscribed_wal_runs_all_end() {
    let invocations = std::env::var("EPOCHDB_WAL_SHORT_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(INVOCATIONS);
    for i in 0..invocations {
        let mut child = Command::new(env!("CARGO_BIN_EXE_epochdb"))
            .args([
                "bench",
                "wal",
                "--device",
                "null",
                "--threads",
                "2,4",
                "--log-size",
                "128",
                "--io-unit",
                "65536",
                "--impl",
                "grasshopper",
                "--records",
                "appended,staged",
                "--duration",
                "0.1",
                // Every other invocation with the threads yielding at
                // nearly every look (`WalOptions::yield_backlog_bytes`).
                "--yield-backlog",
                if i % 2 == 0 { "0" } else { "1" },
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run epochdb");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for epochdb") {
                break status;
            }
            if started.elapsed() > WATCHDOG {
                let _ = child.kill();
                panic!("invocation {i} did not end in {WATCHDOG:?}: the log stalled");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut stderr);
        }
        assert!(status.success(), "invocation {i} failed: {stderr}");
    }
}
