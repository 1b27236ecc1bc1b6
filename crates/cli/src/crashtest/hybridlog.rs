//! `epochdb crashtest --store hybridlog`: FASTER's sum-store with real
//! process kills (issue 7 item 6; cpr-sigmod19 §6–7).
//!
//! The child opens (recovers) the store, continues its sessions from their
//! recovered serial numbers, and has each session RMW-increment counters
//! while a thread takes CPR checkpoints every `--checkpoint-ms`, alternating
//! checkpoints with a fuzzy index checkpoint and log-only ones, and taking
//! the kinds in turn (fold-over, snapshot, incremental snapshot; each pair
//! of checkpoints one kind). Every other iteration's child uses the
//! coarse-grained shift (Appendix B) instead of the fine one. An odd
//! `--seed` creates the store with the fixed record layout (8-byte keys and
//! values, 24-byte records), an even one with the variable layout.
//! The increment a session issues as its operation `serial` is a pure
//! function of `(seed, session, serial)`, so the parent recomputes every
//! session's history from its recovered serial number alone: after each
//! kill it recovers the directory in process, calls `continue_session` for
//! each session, and checks that every counter equals exactly the sum of
//! the increments at or below those serial numbers, that no serial number
//! went backwards, and that no commit the child's commit callback reported
//! was lost.
//!
//! The counters' in-place updater declines when a counter is a multiple
//! of 16 (`AddU64Declining`), so the store also seals and copies mutable
//! records (`hybridlog/src/windows.rs`) while the kills land.
//!
//! Sessions pace themselves (`--rate`), sleeping between batches while
//! epoch-protected, as a client thread that does other work would: each
//! phase transition waits for every session to refresh, so PREPARE,
//! IN_PROGRESS and WAIT_PENDING last long enough for kills to land in them.
//! Half of the iterations aim the kill at a phase (the parent kills on the
//! child's report that the phase began); the other half kill at a uniform
//! random time. The child reports each phase as it begins, and the parent
//! counts kills by the last phase reported before the kill.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use clap::Args;
use epochdb_hybridlog::{
    AddU64Declining, CheckpointKind, Config, Error, Phase, RealStorage, RecordLayout, ShiftMode,
    Status, Store,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{finish, run_and_kill, scratch_dir, CrashtestArgs};

/// Flags of the hidden child command.
#[derive(Debug, Args)]
pub(crate) struct ChildArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    sessions: u32,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    counters: u64,
    #[arg(long)]
    checkpoint_ms: u64,
    #[arg(long)]
    rate: u64,
    /// Use the coarse-grained shift (Appendix B) instead of the fine one.
    #[arg(long)]
    coarse: bool,
    /// Create the store with fixed 8-byte keys and values
    /// (`RecordLayout::Fixed`); a recovered store keeps its own layout.
    #[arg(long)]
    fixed_layout: bool,
}

/// The checkpoint kinds the child takes in turn, so kills land in every
/// kind's phases (and an incremental snapshot follows a full one).
const KINDS: [CheckpointKind; 3] = [
    CheckpointKind::FoldOver,
    CheckpointKind::Snapshot,
    CheckpointKind::IncrementalSnapshot,
];

/// Operations a session issues between two pacing sleeps.
const BATCH: u64 = 64;

/// Phase names as the child reports them: `index` is REST while the driver
/// writes a fuzzy index checkpoint (before PREPARE).
const PHASES: [&str; 6] = [
    "rest",
    "index",
    "prepare",
    "in-progress",
    "wait-pending",
    "wait-flush",
];

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Rest => "rest",
        Phase::Prepare => "prepare",
        Phase::InProgress => "in-progress",
        Phase::WaitPending => "wait-pending",
        Phase::WaitFlush => "wait-flush",
    }
}

/// Small pages and a small memory budget, so records are evicted and read
/// back from disk as the log grows with each fold-over.
fn config() -> Config {
    Config {
        index_buckets: 256,
        page_bits: 14,
        memory_bytes: 16 << 14,
        mutable_fraction: 0.5,
        max_sessions: 64,
        ..Config::default()
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The increment session `session` issues as its operation `serial`
/// (serials start at 1): `(counter, amount)`, amount in 1..=9.
fn increment(seed: u64, session: u64, serial: u64, counters: u64) -> (u64, u64) {
    let h = splitmix(seed ^ splitmix(session.wrapping_mul(0x1_0000_0001) ^ splitmix(serial)));
    (h % counters, 1 + (h >> 40) % 9)
}

/// The parent.
pub(crate) fn run(args: &CrashtestArgs) -> Result<(), String> {
    let sessions = u64::from(args.threads());
    if sessions == 0 || args.counters == 0 {
        return Err("--threads and --counters must be at least 1".into());
    }
    let scratch;
    let dir = match args.dir.as_slice() {
        [] => {
            scratch = scratch_dir()?;
            scratch.path().join("hybridlog")
        }
        [dir] => {
            if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
                return Err(format!(
                    "--dir {}: not empty; the sum-store check needs a fresh store",
                    dir.display()
                ));
            }
            dir.clone()
        }
        _ => return Err("--dir: --store hybridlog uses one directory".into()),
    };
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let checkpoint_ms = args.checkpoint_ms();
    let fixed_layout = args.seed % 2 == 1;
    eprintln!(
        "crashtest: hybridlog sum-store in {}, {} record layout (odd seeds: fixed)",
        dir.display(),
        if fixed_layout { "fixed" } else { "variable" }
    );
    // What the recovered serial numbers committed, counter by counter.
    let mut expected = vec![0u64; args.counters as usize];
    let mut recovered = vec![0u64; sessions as usize];
    let mut acked = vec![0u64; sessions as usize];
    let mut kills: BTreeMap<&'static str, u64> = PHASES.iter().map(|p| (*p, 0)).collect();
    let mut aimed: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let mut violations = 0u64;
    let mut checkpoints_total = 0u64;
    let started = Instant::now();
    for iteration in 1..=args.iterations {
        let run_ms = rng.gen_range(50..=args.max_run_ms.max(50));
        // Half the kills aim at a phase: the k-th time it begins.
        let aim = rng.gen_bool(0.5).then(|| {
            (
                PHASES[rng.gen_range(1..PHASES.len())],
                rng.gen_range(1..=3u32),
            )
        });
        let mut command = Command::new(&exe);
        command
            .arg("crashtest-hybridlog-child")
            .arg("--dir")
            .arg(&dir)
            .args(["--sessions", &sessions.to_string()])
            .args(["--seed", &args.seed.to_string()])
            .args(["--counters", &args.counters.to_string()])
            .args(["--checkpoint-ms", &checkpoint_ms.to_string()])
            .args(["--rate", &args.rate.to_string()]);
        // Every other iteration runs the coarse-grained shift.
        if iteration % 2 == 0 {
            command.arg("--coarse");
        }
        if fixed_layout {
            command.arg("--fixed-layout");
        }
        let mut seen = 0u32;
        let kill_now = move |line: &str| -> bool {
            let Some((phase, k)) = aim else { return false };
            if line.split_whitespace().nth(1) == Some(phase) && line.starts_with("phase ") {
                seen += 1;
            }
            seen == k
        };
        // An aimed kill waits longer for its phase, then falls back to
        // a timed kill.
        let limit = if aim.is_some() {
            Duration::from_millis(args.max_run_ms.max(50) + 4 * checkpoint_ms)
        } else {
            Duration::from_millis(run_ms)
        };
        let child = run_and_kill(command, limit, kill_now)?;
        if let Some(code) = child.status.code() {
            return Err(format!(
                "iteration {iteration}: the child exited by itself (status {code}); see its error above"
            ));
        }
        let lines = child.lines;
        let mut last_phase = "rest";
        let mut checkpoints = 0u64;
        for line in &lines {
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some("phase") => {
                    let name = parts.next().unwrap_or("");
                    if let Some(p) = PHASES.iter().find(|p| **p == name) {
                        last_phase = p;
                    }
                }
                Some("commit") => {
                    let j: Option<usize> = parts.next().and_then(|x| x.parse().ok());
                    let s: Option<u64> = parts.next().and_then(|x| x.parse().ok());
                    if let (Some(j), Some(s)) = (j, s) {
                        if let Some(a) = acked.get_mut(j) {
                            *a = (*a).max(s);
                        }
                    }
                }
                Some("checkpoint") => checkpoints += 1,
                _ => {}
            }
        }
        checkpoints_total += checkpoints;
        *kills.entry(last_phase).or_insert(0) += 1;
        if let Some((phase, _)) = aim {
            let entry = aimed.entry(phase).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += u64::from(last_phase == phase);
        }

        let recovering = Instant::now();
        let store = Store::open(
            Arc::new(RealStorage::new()),
            &dir,
            config(),
            AddU64Declining,
        )
        .map_err(|e| format!("iteration {iteration}: recovery failed: {e}"))?;
        let recover_s = recovering.elapsed().as_secs_f64();
        let version = store.recovered().map_or(0, |r| r.version);
        let mut found = Vec::new();
        let mut serials = Vec::with_capacity(sessions as usize);
        for j in 0..sessions {
            let serial = match store.continue_session(j + 1) {
                Ok((session, serial)) => {
                    drop(session);
                    serial
                }
                Err(Error::UnknownSession(_)) if store.recovered().is_none() => 0,
                Err(e) => {
                    return Err(format!(
                        "iteration {iteration}: continue_session({}): {e}",
                        j + 1
                    ))
                }
            };
            serials.push(serial);
        }
        let mut backwards = false;
        for (j, &serial) in serials.iter().enumerate() {
            if serial < recovered[j] {
                found.push(format!(
                    "session {} recovered serial {serial}, below the {} recovered before",
                    j + 1,
                    recovered[j]
                ));
                backwards = true;
            }
            if serial < acked[j] {
                found.push(format!(
                    "session {} recovered serial {serial}, but a commit up to {} was reported",
                    j + 1,
                    acked[j]
                ));
            }
        }
        if backwards {
            expected.iter_mut().for_each(|e| *e = 0);
            recovered.iter_mut().for_each(|r| *r = 0);
        }
        for (j, &serial) in serials.iter().enumerate() {
            for s in recovered[j] + 1..=serial {
                let (counter, amount) = increment(args.seed, j as u64 + 1, s, args.counters);
                expected[counter as usize] += amount;
            }
            recovered[j] = serial;
        }
        let actual = read_counters(&store, args.counters)
            .map_err(|e| format!("iteration {iteration}: reading the counters: {e}"))?;
        drop(store);
        for (counter, (&want, &got)) in expected.iter().zip(&actual).enumerate() {
            if want != got {
                found.push(format!(
                    "counter {counter} is {got}, the committed increments sum to {want}"
                ));
            }
        }
        violations += found.len() as u64;
        eprintln!(
            "[{:>6.1} s] iteration {iteration}/{}: killed {} in {last_phase} after {checkpoints} checkpoints; recovered version {version} in {recover_s:.3} s, serials {serials:?}; {} violations",
            started.elapsed().as_secs_f64(),
            args.iterations,
            match aim {
                Some((phase, k)) => format!("aiming at {phase} #{k}"),
                None => format!("after {run_ms} ms"),
            },
            found.len()
        );
        for violation in found.iter().take(10) {
            eprintln!("  violation: {violation}");
        }
    }
    let total: u64 = recovered.iter().sum();
    eprintln!(
        "kills by the phase last reported: {}",
        PHASES
            .iter()
            .map(|p| format!("{p} {}", kills[p]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!(
        "aimed kills that landed in their phase: {}",
        aimed
            .iter()
            .map(|(p, (n, hit))| format!("{p} {hit}/{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!(
        "{checkpoints_total} checkpoints committed; {total} increments recovered and checked at the end"
    );
    finish(args.iterations, violations)
}

/// Every counter's value (0 when absent), reading through a new session.
fn read_counters(store: &Store<AddU64Declining>, counters: u64) -> Result<Vec<u64>, Error> {
    let decode = |v: &[u8]| {
        v.get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let mut session = store.start_session()?;
    let mut values = vec![0u64; counters as usize];
    let mut value = Vec::new();
    let mut waiting = BTreeMap::new();
    for counter in 0..counters {
        match session.read(&counter.to_le_bytes(), &mut value)? {
            Status::Ok => values[counter as usize] = decode(&value),
            Status::NotFound => {}
            Status::Pending => {
                waiting.insert(session.serial(), counter);
            }
        }
    }
    for done in session.complete_pending(true)? {
        if let (Some(counter), Some(v)) = (waiting.get(&done.serial), done.value) {
            values[*counter as usize] = decode(&v);
        }
    }
    drop(session);
    Ok(values)
}

/// The child: recover, continue (or start) the sessions, increment and
/// checkpoint until killed; prints `ready`, `phase <name> <version>`,
/// `checkpoint <version>` and `commit <session index> <serial>` lines.
pub(crate) fn child(args: ChildArgs) -> Result<(), String> {
    let config = Config {
        record_layout: if args.fixed_layout {
            RecordLayout::Fixed {
                key_bytes: 8,
                value_bytes: 8,
            }
        } else {
            RecordLayout::Variable
        },
        shift_mode: if args.coarse {
            ShiftMode::Coarse
        } else {
            ShiftMode::Fine
        },
        ..config()
    };
    let store = Arc::new(
        Store::open(
            Arc::new(RealStorage::new()),
            &args.dir,
            config,
            AddU64Declining,
        )
        .map_err(|e| format!("child: opening {}: {e}", args.dir.display()))?,
    );
    let known = store.recovered().is_some();
    let (tx, rx) = mpsc::channel::<String>();
    let stop = Arc::new(AtomicBool::new(false));
    let mut sessions = Vec::new();
    for j in 0..u64::from(args.sessions) {
        let (session, serial) = if known {
            store
                .continue_session(j + 1)
                .map_err(|e| format!("child: continue_session({}): {e}", j + 1))?
        } else {
            let session = store.start_session().map_err(|e| e.to_string())?;
            if session.id() != j + 1 {
                return Err(format!(
                    "child: a fresh store gave session id {}, not {}",
                    session.id(),
                    j + 1
                ));
            }
            (session, 0)
        };
        sessions.push((j, session, serial));
    }
    let mut threads = Vec::new();
    for (j, mut session, mut serial) in sessions {
        let (tx, stop, seed, counters, rate) = (
            tx.clone(),
            stop.clone(),
            args.seed,
            args.counters,
            args.rate,
        );
        let commits = tx.clone();
        session.on_commit(move |serial| {
            let _ = commits.send(format!("commit {j} {serial}"));
        });
        threads.push(std::thread::spawn(move || {
            let began = Instant::now();
            let mut done = 0u64;
            let result = (|| -> Result<(), String> {
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..BATCH {
                        serial += 1;
                        let (counter, amount) = increment(seed, j + 1, serial, counters);
                        session
                            .rmw(&counter.to_le_bytes(), amount)
                            .map_err(|e| e.to_string())?;
                        if session.serial() != serial {
                            return Err(format!(
                                "session {} is at serial {}, expected {serial}",
                                j + 1,
                                session.serial()
                            ));
                        }
                    }
                    session.complete_pending(false).map_err(|e| e.to_string())?;
                    done += BATCH;
                    if rate > 0 {
                        // Pace to `rate` per second; the session stays
                        // protected while it sleeps.
                        let due = Duration::from_secs_f64(done as f64 / rate as f64);
                        if let Some(ahead) = due.checked_sub(began.elapsed()) {
                            std::thread::sleep(ahead);
                        }
                    }
                }
                Ok(())
            })();
            if let Err(e) = result {
                let _ = tx.send(format!("error session {}: {e}", j + 1));
                stop.store(true, Ordering::Relaxed);
            }
        }));
    }
    {
        let (store, tx, stop) = (store.clone(), tx.clone(), stop.clone());
        let interval = Duration::from_millis(args.checkpoint_ms);
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(interval);
                let with_index = n.is_multiple_of(2);
                if with_index {
                    let _ = tx.send(format!("phase index {}", store.system_state().version));
                }
                let kind = KINDS[(n / 2 % KINDS.len() as u64) as usize];
                match store.checkpoint_with(with_index, kind) {
                    Ok(info) => {
                        let _ = tx.send(format!("checkpoint {}", info.version));
                    }
                    Err(e) => {
                        let _ = tx.send(format!("error checkpoint: {e}"));
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                n += 1;
            }
        }));
    }
    {
        // Reports each phase as it begins.
        let (store, tx, stop) = (store.clone(), tx.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut seen = store.system_state();
            while !stop.load(Ordering::Relaxed) {
                let now = store.wait_state_change(seen, Duration::from_millis(100));
                if now != seen {
                    seen = now;
                    let _ = tx.send(format!("phase {} {}", phase_name(now.phase), now.version));
                }
            }
        }));
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")
        .and_then(|_| out.flush())
        .map_err(|e| e.to_string())?;
    let mut failure = None;
    for line in rx {
        if let Some(error) = line.strip_prefix("error ") {
            failure = Some(error.to_string());
            break;
        }
        if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    match failure {
        Some(error) => Err(format!("child: {error}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increments_are_a_pure_function_of_session_and_serial() {
        assert_eq!(increment(7, 1, 5, 256), increment(7, 1, 5, 256));
        let distinct: std::collections::HashSet<_> =
            (1..100).map(|s| increment(7, 1, s, 256)).collect();
        assert!(distinct.len() > 50);
        assert!((1..1000).all(|s| (1..=9).contains(&increment(3, 2, s, 16).1)));
    }
}
