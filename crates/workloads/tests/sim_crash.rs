//! Crash tests over the simulated disk (DESIGN.md "How we know it works"):
//! for many seeds, run the crash workload under `log`, `silor`, `wal` and `cpr`, cut the
//! power at a random moment (dropping or tearing unsynced data), or fail a
//! write or sync with EIO/ENOSPC first, recover, and check that (a) every
//! acknowledged commit survived and (b) the state is a durable prefix.
//!
//! CI runs `SIM_SEEDS_DEFAULT` seeds per mode; the long run is
//! `EPOCHDB_SIM_SEEDS=10000 cargo test --release -p epochdb-workloads --test sim_crash`.
//! Debug builds check more (`debug_assert`s in the engine); with
//! `SIM_TRACE=1` (and `-- --nocapture`) each seed and round is printed, to
//! find the seed behind a panic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::{Config, Database, DurabilityKind, SilorOptions, Ticket, WalOptions};
use epochdb_storage::{CrashMode, FaultKind, FaultOp, SimStorage, Storage};
use epochdb_workloads::crash::{check, CrashClient, CrashTables};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;

const SIM_SEEDS_DEFAULT: u64 = 60;
const WORKERS: u32 = 2;

fn open(storage: &SimStorage, mode: DurabilityKind) -> Result<Database, String> {
    // The wal mode writes one central log, in one directory.
    let dirs = if mode == DurabilityKind::Wal {
        vec!["/db/a".into()]
    } else {
        vec!["/db/a".into(), "/db/b".into()]
    };
    let config = Config {
        durability: mode,
        dirs,
        wal: WalOptions {
            io_unit_bytes: 4 << 10,
            buffer_bytes: 64 << 10,
            hop_shift: 12,
            file_max_bytes: 32 << 10,
            // Split even these small flushes among threads, so that the
            // crashes find units landing in any order.
            io_depth_min_bytes: 1,
            ..WalOptions::default()
        },
        storage: Some(Arc::new(storage.clone()) as Arc<dyn Storage>),
        epoch_interval: Duration::from_millis(1),
        workers: WORKERS as usize,
        silor: SilorOptions {
            log_buffer_bytes: 8 << 10,
            rotate_epochs: 3,
            checkpoint_interval: Duration::from_millis(3),
            checkpoint_block_bytes: 4096,
            checkpoint_sync_bytes: 16 << 10,
            recovery_threads: 3,
            // The loggers' two write paths: `log` appends through the page
            // cache, `silor` writes direct (padded blocks, trimmed at a
            // rotation); both must survive every crash.
            direct_io: mode != DurabilityKind::Log,
            ..SilorOptions::default()
        },
        ..Config::default()
    };
    Database::open(config).map_err(|e| format!("recovery failed: {e}"))
}

/// Runs the workload until `stop`, recording acknowledged commits.
fn run_workload(db: &Database, acked: &Mutex<HashMap<u32, u64>>, stop: &AtomicBool, seed: u64) {
    let tables = CrashTables::create(db);
    let Ok(tables) = tables else { return };
    std::thread::scope(|scope| {
        for w in 0..WORKERS {
            scope.spawn(move || {
                let Ok(mut worker) = db.worker() else { return };
                let Ok(mut client) = CrashClient::new(&mut worker, tables, w, 8, seed) else {
                    return;
                };
                let mut pending: std::collections::VecDeque<(u64, Ticket)> = Default::default();
                while !stop.load(Ordering::Relaxed) {
                    match client.step(&mut worker) {
                        Ok(done) => pending.push_back(done),
                        Err(_) => break,
                    }
                    while let Some((seq, ticket)) = pending.front() {
                        match ticket.is_durable() {
                            Ok(true) => {
                                let mut acked = acked.lock().unwrap();
                                let entry = acked.entry(w).or_insert(0);
                                *entry = (*entry).max(*seq);
                                pending.pop_front();
                            }
                            _ => break,
                        }
                    }
                }
                // Catch acknowledgements that arrive while we stop.
                for (seq, ticket) in pending {
                    if ticket.wait_timeout(Duration::from_millis(20)) == Ok(true) {
                        let mut acked = acked.lock().unwrap();
                        let entry = acked.entry(w).or_insert(0);
                        *entry = (*entry).max(seq);
                    }
                }
            });
        }
    });
}

fn one_seed(seed: u64, mode: DurabilityKind) -> Result<(), String> {
    let trace = std::env::var_os("SIM_TRACE").is_some();
    if trace {
        eprintln!("seed {seed}");
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut storage = SimStorage::new(seed);
    let acked = Mutex::new(HashMap::new());
    for round in 0..2 {
        let db = open(&storage, mode)?;
        if trace {
            let report = db.recovery_report().cloned().unwrap_or_default();
            eprintln!(
                "round {round}: epoch {} checkpoint {:?} e_p {} sessions {:?}",
                db.current_epoch(),
                report.checkpoint_epochs,
                report.persistent_epoch,
                report.sessions
            );
        }
        let report =
            check(&db, &acked.lock().unwrap()).map_err(|e| format!("round {round}: {e}"))?;
        if !report.violations.is_empty() {
            return Err(format!("round {round}: {:?}", report.violations));
        }
        // Arm a fault for some runs: an I/O error first, power loss later.
        match rng.gen_range(0..4) {
            0 => storage.fail_nth(FaultOp::Sync, rng.gen_range(1..40), FaultKind::Eio),
            1 => storage.fail_nth(FaultOp::Write, rng.gen_range(1..60), FaultKind::NoSpace),
            _ => {}
        }
        let stop = AtomicBool::new(false);
        let run_for = Duration::from_micros(rng.gen_range(500..25_000));
        std::thread::scope(|scope| {
            scope.spawn(|| run_workload(&db, &acked, &stop, seed + round));
            std::thread::sleep(run_for);
            let crash = if rng.gen_bool(0.5) {
                CrashMode::DropUnsynced
            } else {
                CrashMode::TearUnsynced
            };
            storage = storage.crash(crash);
            stop.store(true, Ordering::Relaxed);
        });
        storage.clear_faults();
        drop(db);
    }
    let db = open(&storage, mode)?;
    let report = check(&db, &acked.lock().unwrap())?;
    if report.violations.is_empty() {
        Ok(())
    } else {
        Err(format!("final: {:?}", report.violations))
    }
}

fn seeds() -> u64 {
    std::env::var("EPOCHDB_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SIM_SEEDS_DEFAULT)
}

fn run_mode(mode: DurabilityKind) {
    let mut failures = Vec::new();
    for seed in 0..seeds() {
        if let Err(error) = one_seed(seed, mode) {
            failures.push(format!("{mode} seed {seed}: {error}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} violations:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn log_mode_survives_simulated_crashes() {
    run_mode(DurabilityKind::Log);
}

#[test]
fn silor_mode_survives_simulated_crashes() {
    run_mode(DurabilityKind::Silor);
}

#[test]
fn wal_mode_survives_simulated_crashes() {
    run_mode(DurabilityKind::Wal);
}

#[test]
fn cpr_mode_survives_simulated_crashes() {
    run_mode(DurabilityKind::Cpr);
}
