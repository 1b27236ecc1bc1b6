//! `epochdb crashtest`: real process kills (DESIGN.md contract). A child
//! process runs the crash workload (`epochdb_workloads::crash`) under the
//! chosen mode and prints every acknowledged-durable commit; the parent
//! kills it with SIGKILL at a random moment, recovers the directory in
//! process, and checks that (a) every acknowledged commit is present and
//! (b) the state is a durable prefix. Ends with
//! `crashtest: N iterations, V violations` and fails if V > 0.

mod hybridlog;

pub(crate) use hybridlog::{child as hybridlog_child, ChildArgs as HybridlogChildArgs};

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use epochdb_engine::{Config, Database, DurabilityKind, SilorOptions, Ticket};
use epochdb_workloads::crash::{check, CrashClient, CrashTables};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Flags of `epochdb crashtest`.
#[derive(Debug, Args)]
pub(crate) struct CrashtestArgs {
    /// What to crash: `engine` (the transactional engine under
    /// `--durability`) or `hybridlog` (FASTER's sum-store on the hybridlog
    /// store with CPR checkpoints).
    #[arg(long, default_value = "engine", value_parser = ["engine", "hybridlog"])]
    pub(crate) store: String,
    /// Durability mode under test (log, silor, wal or cpr; engine only;
    /// default silor).
    #[arg(long)]
    durability: Option<DurabilityKind>,
    /// Kill-and-recover iterations.
    #[arg(long, default_value_t = 20)]
    pub(crate) iterations: u32,
    /// Seed of the kill times and the workload.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Database directory (repeat for several; hybridlog: one, empty or
    /// absent); default: a fresh temporary directory.
    #[arg(long)]
    pub(crate) dir: Vec<PathBuf>,
    /// Worker threads in the child (hybridlog: sessions; default 2 for the
    /// engine, 3 for hybridlog).
    #[arg(long)]
    threads: Option<u32>,
    /// Longest a child runs before the kill, in milliseconds (the kill
    /// time is uniform in [50, this]).
    #[arg(long, default_value_t = 1500)]
    pub(crate) max_run_ms: u64,
    /// Epoch length in milliseconds (short epochs rotate logs often).
    #[arg(long, default_value_t = 10)]
    epoch_ms: u64,
    /// Checkpoint interval in milliseconds (silor, wal, hybridlog): short,
    /// so kills land during checkpoints (default 300 for the engine, 50 for
    /// hybridlog).
    #[arg(long)]
    checkpoint_ms: Option<u64>,
    /// Transactions (hybridlog: increments) per second per child thread
    /// (0: as fast as possible). Each adds a history record (hybridlog: to
    /// the parent's check), so this bounds the growth over hundreds of
    /// iterations.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) rate: u64,
    /// Counters the sessions increment (hybridlog only).
    #[arg(long, default_value_t = 256)]
    pub(crate) counters: u64,
}

impl CrashtestArgs {
    /// Child threads (sessions), with the store's default.
    pub(crate) fn threads(&self) -> u32 {
        self.threads
            .unwrap_or(if self.store == "hybridlog" { 3 } else { 2 })
    }

    /// The checkpoint interval in milliseconds, with the store's default.
    pub(crate) fn checkpoint_ms(&self) -> u64 {
        self.checkpoint_ms
            .unwrap_or(if self.store == "hybridlog" { 50 } else { 300 })
    }
}

/// Flags of the hidden child command.
#[derive(Debug, Args)]
pub(crate) struct ChildArgs {
    #[arg(long)]
    durability: DurabilityKind,
    #[arg(long)]
    dir: Vec<PathBuf>,
    #[arg(long)]
    threads: u32,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    epoch_ms: u64,
    #[arg(long)]
    checkpoint_ms: u64,
    #[arg(long)]
    rate: u64,
}

const GROUPS: u32 = 64;

fn config(mode: DurabilityKind, dirs: &[PathBuf], epoch_ms: u64, checkpoint_ms: u64) -> Config {
    Config {
        durability: mode,
        dirs: dirs.to_vec(),
        epoch_interval: Duration::from_millis(epoch_ms.max(1)),
        silor: SilorOptions {
            checkpoint_interval: Duration::from_millis(checkpoint_ms),
            ..SilorOptions::default()
        },
        ..Config::default()
    }
}

/// The parent.
pub(crate) fn run(args: CrashtestArgs) -> Result<(), String> {
    if args.store == "hybridlog" {
        if args.durability.is_some() {
            return Err(
                "--durability: not used with --store hybridlog (its durability is CPR checkpoints)"
                    .into(),
            );
        }
        return hybridlog::run(&args);
    }
    let durability = args.durability.unwrap_or(DurabilityKind::Silor);
    if !durability.is_durable() {
        return Err(format!(
            "--durability {durability}: crash tests need a durable mode (log, silor, wal or cpr)"
        ));
    }
    let scratch;
    let dirs = if args.dir.is_empty() {
        scratch = scratch_dir()?;
        vec![scratch.path().to_path_buf()]
    } else {
        args.dir.clone()
    };
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut acked: HashMap<u32, u64> = HashMap::new();
    let mut violations = 0u64;
    let mut killed_mid_checkpoint = 0u64;
    let started = Instant::now();
    for iteration in 1..=args.iterations {
        let run_ms = rng.gen_range(50..=args.max_run_ms.max(50));
        let child_seed = args
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(u64::from(iteration));
        let acks = run_child(
            &exe,
            &args,
            durability,
            &dirs,
            child_seed,
            Duration::from_millis(run_ms),
        )?;
        for (w, s) in acks {
            let entry = acked.entry(w).or_insert(0);
            *entry = (*entry).max(s);
        }
        let mid_checkpoint = checkpoint_in_flight(&dirs);
        killed_mid_checkpoint += u64::from(mid_checkpoint);
        let recovering = Instant::now();
        let db = Database::open(config(
            durability,
            &dirs,
            args.epoch_ms,
            args.checkpoint_ms(),
        ))
        .map_err(|e| format!("iteration {iteration}: recovery failed: {e}"))?;
        let recover_s = recovering.elapsed().as_secs_f64();
        let report = check(&db, &acked)?;
        drop(db);
        violations += report.violations.len() as u64;
        let acked_total: u64 = acked.values().sum();
        eprintln!(
            "[{:>6.1} s] iteration {iteration}/{}: killed after {run_ms} ms{}; recovered {} transactions in {:.3} s; acknowledged {}; {} violations",
            started.elapsed().as_secs_f64(),
            args.iterations,
            if mid_checkpoint { " during a checkpoint" } else { "" },
            report.transactions,
            recover_s,
            acked_total,
            report.violations.len()
        );
        for violation in &report.violations {
            eprintln!("  violation: {violation}");
        }
    }
    if matches!(durability, DurabilityKind::Silor | DurabilityKind::Cpr) {
        eprintln!(
            "{killed_mid_checkpoint} of {} kills landed while a checkpoint was being written or cleaned up",
            args.iterations
        );
    }
    finish(args.iterations, violations)
}

/// Prints the contract's last line, `crashtest: N iterations, V
/// violations`, and fails if V > 0.
pub(crate) fn finish(iterations: u32, violations: u64) -> Result<(), String> {
    println!("crashtest: {iterations} iterations, {violations} violations");
    if violations > 0 {
        return Err(format!("{violations} violations"));
    }
    Ok(())
}

/// Whether the files say a checkpoint was in flight at the kill: files of
/// two checkpoints side by side, or checkpoint files with no installed
/// metadata (`ckpt.<id>.t<table>.<j>`, `checkpoint`; see the engine's
/// `files.rs`).
fn checkpoint_in_flight(dirs: &[PathBuf]) -> bool {
    let mut ids = std::collections::BTreeSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(id) = name
                .strip_prefix("ckpt.")
                .and_then(|rest| rest.split('.').next())
                .and_then(|id| id.parse::<u64>().ok())
            {
                ids.insert(id);
            }
        }
    }
    let installed = dirs
        .first()
        .is_some_and(|dir| dir.join("checkpoint").exists());
    ids.len() >= 2 || (!ids.is_empty() && !installed)
}

/// Runs one child until `kill_after` past its "ready" line, kills it, and
/// returns the acknowledgements it printed.
fn run_child(
    exe: &Path,
    args: &CrashtestArgs,
    durability: DurabilityKind,
    dirs: &[PathBuf],
    seed: u64,
    kill_after: Duration,
) -> Result<Vec<(u32, u64)>, String> {
    let mut command = Command::new(exe);
    command
        .arg("crashtest-child")
        .args(["--durability", durability.name()])
        .args(["--threads", &args.threads().to_string()])
        .args(["--seed", &seed.to_string()])
        .args(["--epoch-ms", &args.epoch_ms.to_string()])
        .args(["--checkpoint-ms", &args.checkpoint_ms().to_string()])
        .args(["--rate", &args.rate.to_string()]);
    for dir in dirs {
        command.arg("--dir").arg(dir);
    }
    let child = run_and_kill(command, kill_after, |_| false)?;
    let mut acks = Vec::new();
    for line in child.lines {
        let mut parts = line.split_whitespace();
        if parts.next() == Some("ack") {
            let w = parts.next().and_then(|x| x.parse().ok());
            let s = parts.next().and_then(|x| x.parse().ok());
            if let (Some(w), Some(s)) = (w, s) {
                acks.push((w, s));
            }
        }
    }
    Ok(acks)
}

/// A child that [`run_and_kill`] ran.
pub(crate) struct KilledChild {
    /// Every line it printed, `ready` excluded.
    pub(crate) lines: Vec<String>,
    /// How it ended: killed by the signal, or (`code()` is `Some`) it had
    /// exited by itself before the kill.
    pub(crate) status: std::process::ExitStatus,
}

/// Starts `command` with its stdout piped, waits for its `ready` line,
/// then kills it with SIGKILL once `kill_after` has passed, or as soon as
/// `kill_now` returns true for a line it printed, whichever comes first.
/// Returns every line it printed before it died and its exit status.
pub(crate) fn run_and_kill(
    mut command: Command,
    kill_after: Duration,
    mut kill_now: impl FnMut(&str) -> bool + Send + 'static,
) -> Result<KilledChild, String> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the child: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let (ready_tx, ready_rx) = mpsc::channel();
    let (kill_tx, kill_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "ready" {
                let _ = ready_tx.send(());
                continue;
            }
            if kill_now(&line) {
                let _ = kill_tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    let ready = ready_rx.recv_timeout(Duration::from_secs(300)).is_ok();
    if ready {
        // Sleeps `kill_after` unless `kill_now` fires first.
        let _ = kill_rx.recv_timeout(kill_after);
    }
    // SIGKILL: no destructor, no flush, no goodbye.
    let _ = child.kill();
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the child: {e}"))?;
    let lines = reader.join().map_err(|_| "the reader thread panicked")?;
    if !ready {
        return Err(format!(
            "the child exited before it was ready ({status}); see its error above"
        ));
    }
    Ok(KilledChild { lines, status })
}

/// A fresh temporary directory for a run without `--dir`.
pub(crate) fn scratch_dir() -> Result<tempfile::TempDir, String> {
    tempfile::tempdir().map_err(|e| format!("creating a temporary directory: {e}"))
}

/// The child: recover, run the workload, print acknowledgements.
pub(crate) fn child(args: ChildArgs) -> Result<(), String> {
    let db = Database::open(config(
        args.durability,
        &args.dir,
        args.epoch_ms,
        args.checkpoint_ms,
    ))
    .map_err(|e| format!("child: opening: {e}"))?;
    let tables = CrashTables::create(&db).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel::<(u32, u64)>();
    let stop = Arc::new(AtomicBool::new(false));
    let failure = Arc::new(Mutex::new(None::<String>));
    let mut threads = Vec::new();
    for w in 0..args.threads {
        let (db, tx, stop, failure) = (db.clone(), tx.clone(), stop.clone(), failure.clone());
        threads.push(std::thread::spawn(move || {
            let result = (|| -> Result<(), String> {
                let mut worker = db.worker().map_err(|e| e.to_string())?;
                let mut client = CrashClient::new(&mut worker, tables, w, GROUPS, args.seed)?;
                let mut pending: VecDeque<(u64, Ticket)> = VecDeque::new();
                let began = Instant::now();
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    pending.push_back(client.step(&mut worker)?);
                    done += 1;
                    if args.rate > 0 {
                        // Pace to `rate` per second.
                        let due = Duration::from_secs_f64(done as f64 / args.rate as f64);
                        if let Some(ahead) = due.checked_sub(began.elapsed()) {
                            std::thread::sleep(ahead);
                        }
                    }
                    let mut newest = None;
                    while let Some((seq, ticket)) = pending.front() {
                        match ticket.is_durable() {
                            Ok(true) => {
                                newest = Some(*seq);
                                pending.pop_front();
                            }
                            Ok(false) => break,
                            Err(e) => return Err(format!("durability failed: {e}")),
                        }
                    }
                    if let Some(seq) = newest {
                        let _ = tx.send((w, seq));
                    }
                }
                Ok(())
            })();
            if let Err(error) = result {
                failure.lock().expect("not poisoned").get_or_insert(error);
                stop.store(true, Ordering::Relaxed);
            }
        }));
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    // Print acknowledgements as they come; the parent kills us eventually.
    for (w, seq) in rx {
        if writeln!(out, "ack {w} {seq}")
            .and_then(|_| out.flush())
            .is_err()
        {
            break;
        }
    }
    for thread in threads {
        let _ = thread.join();
    }
    let failure = failure.lock().expect("not poisoned").take();
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
