//! Why this exists: the simulated-disk tests crash the I/O seam, not the
//! process. Here a real child process (this test binary, re-run as
//! `child_process`) runs an application on real files and is killed with
//! SIGKILL at random moments — some during its start-up, about half right
//! after it reports that a checkpoint started, so they land while the
//! writer is writing it.
//! The parent recovers the directory and checks that the state equals the
//! model's state at the recovered tick, and that no tick the child reported
//! released was lost. Each iteration resumes from the previous one's files
//! (`recover` then `Fcc::resume`), so recovery after a crash during a
//! resume's first checkpoint is covered too.
//!
//! Half the child lives run with `Config::overlap_log_sync`.
//!
//! The actions of tick `t` depend only on the seed and `t`, so the model is
//! the initial state with ticks `1..=t` applied, whatever was killed when.
//! `kill_during_checkpoints` is short (CI); the `#[ignore]`d
//! `kill_during_checkpoints_long` runs `FCC_KILL_ITERATIONS` (default 25)
//! kills per algorithm.

mod common;

use common::*;
use epochdb_fcc::{recover, Algorithm, Config, Error, Fcc, FsStorage, Storage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 2 MiB of state: a checkpoint write (and its fsync) takes milliseconds,
/// a window the kills can land in.
const WORDS: usize = 1 << 18;
const CHILD_DIR: &str = "FCC_KILL_CHILD_DIR";
const CHILD_ALGO: &str = "FCC_KILL_CHILD_ALGO";
const CHILD_SEED: &str = "FCC_KILL_CHILD_SEED";
const CHILD_OVERLAP: &str = "FCC_KILL_CHILD_OVERLAP";

/// The actions of tick `t`.
fn tick_actions(seed: u64, t: u64) -> Vec<[u8; ACTION_BYTES]> {
    let mut rng = SmallRng::seed_from_u64(seed ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let n = rng.gen_range(0..20);
    (0..n).map(|_| random_action(&mut rng, WORDS)).collect()
}

/// The child: recover (or create) and run ticks until killed, reporting
/// `ready`, `released <tick>` and `ckpt <id>` on stdout.
#[test]
fn child_process() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return; // only meaningful when spawned by the parent below
    };
    let algorithm: Algorithm = std::env::var(CHILD_ALGO).unwrap().parse().unwrap();
    let seed: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    let storage = FsStorage::new(&dir).unwrap();
    let shared: Arc<dyn Storage> = Arc::new(storage.clone());
    let mut config = Config::new(algorithm);
    config.checkpoint_period_ticks = 3;
    config.overlap_log_sync = std::env::var(CHILD_OVERLAP).is_ok_and(|v| v == "1");
    let mut app = match recover(&storage, replay) {
        Ok(recovered) => Fcc::resume(shared, recovered, config).unwrap(),
        Err(Error::NoCheckpoint) => {
            Fcc::create(shared, initial_state(WORDS, seed), config).unwrap()
        }
        Err(e) => panic!("child recovery: {e}"),
    };
    let mut out = std::io::stdout();
    writeln!(out, "ready {}", app.tick()).unwrap();
    loop {
        let t = app.tick() + 1;
        for rec in tick_actions(seed, t) {
            app.log_action(&rec);
            apply(&mut app, &rec);
        }
        let released = app.point_of_consistency().unwrap();
        writeln!(out, "released {}", released.tick).unwrap();
        if let Some(id) = released.checkpoint_started {
            writeln!(out, "ckpt {id}").unwrap();
        }
        out.flush().unwrap();
    }
}

/// The parent's model: the state at `tick`, advanced incrementally.
struct Model {
    seed: u64,
    tick: u64,
    state: Vec<u64>,
}

impl Model {
    fn at(&mut self, tick: u64) -> &[u64] {
        assert!(tick >= self.tick, "recovered ticks never go backwards");
        while self.tick < tick {
            self.tick += 1;
            for rec in tick_actions(self.seed, self.tick) {
                apply(self.state.as_mut_slice(), &rec);
            }
        }
        &self.state
    }
}

/// What the parent saw of one child before the kill.
struct Seen {
    /// The highest tick it reported released.
    released: u64,
    /// Whether it had finished starting up.
    ready: bool,
    /// The newest checkpoint it reported started.
    ckpt: u64,
}

/// Spawns the child on `dir` and kills it.
fn run_and_kill(dir: &Path, algorithm: Algorithm, seed: u64, rng: &mut SmallRng) -> Seen {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_ALGO, algorithm.name())
        .env(CHILD_SEED, seed.to_string())
        // Half the lives overlap each tick's log sync with the next tick.
        .env(CHILD_OVERLAP, if rng.gen_bool(0.5) { "1" } else { "0" })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Seen {
        released: 0,
        ready: false,
        ckpt: 0,
    };
    let note = |line: &str, seen: &mut Seen| {
        if let Some(t) = line.strip_prefix("released ") {
            seen.released = seen.released.max(t.parse().unwrap());
        } else if let Some(id) = line.strip_prefix("ckpt ") {
            seen.ckpt = seen.ckpt.max(id.parse().unwrap());
        } else if line.contains("ready ") {
            // libtest may print "test child_process ... " on the same line.
            seen.ready = true;
        }
    };
    // Kill moments: a few during start-up (recovery and the resumed
    // checkpoint), the rest a random time after `ready` or a random 0–3 ms
    // after the second checkpoint start seen, while the writer writes it.
    let early = rng.gen_bool(0.15);
    let after_ckpt = !early && rng.gen_bool(0.5);
    let delay = Duration::from_millis(if early {
        rng.gen_range(0..60)
    } else {
        rng.gen_range(10..200)
    });
    let mut deadline = early.then(|| Instant::now() + delay);
    let mut ckpts = 0;
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        if Instant::now() >= give_up {
            child.kill().unwrap();
            panic!("{algorithm}: the child never reached its kill point");
        }
        let wait = deadline
            .unwrap_or(give_up)
            .saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(line) => {
                note(&line, &mut seen);
                if line.contains("ready ") && !after_ckpt && deadline.is_none() {
                    deadline = Some(Instant::now() + delay);
                }
                // Lines may arrive faster than the timeout would fire.
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if after_ckpt && line.starts_with("ckpt ") {
                    ckpts += 1;
                    if ckpts == 2 {
                        std::thread::sleep(Duration::from_micros(rng.gen_range(0..3000)));
                        break;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{algorithm}: the child exited before the kill")
            }
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for line in rx.iter() {
        note(&line, &mut seen);
    }
    reader.join().unwrap();
    seen
}

fn kill_and_recover(iterations: u32) {
    let seed = seed("process_kill", 20110613);
    let mut rng = SmallRng::seed_from_u64(seed);
    for algorithm in Algorithm::ALL {
        let algo_seed = algo_seed(seed, algorithm);
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::new(dir.path()).unwrap();
        let mut model = Model {
            seed: algo_seed,
            tick: 0,
            state: initial_state(WORDS, algo_seed),
        };
        let mut ever_ready = false;
        let mut mid_checkpoint = 0;
        for i in 0..iterations {
            let seen = run_and_kill(dir.path(), algorithm, algo_seed, &mut rng);
            let released = seen.released;
            ever_ready |= seen.ready;
            let recovered = match recover(&storage, replay) {
                Ok(r) => r,
                // Killed inside the very first `Fcc::create`.
                Err(Error::NoCheckpoint) if !ever_ready => continue,
                Err(e) => panic!("{algorithm} kill {i} (seed {seed}): recovery failed: {e}"),
            };
            assert!(
                recovered.tick >= released,
                "{algorithm} kill {i} (seed {seed}): released tick {released} lost, recovered {}",
                recovered.tick
            );
            assert!(
                recovered.words == model.at(recovered.tick),
                "{algorithm} kill {i} (seed {seed}): state at tick {} differs from the model",
                recovered.tick
            );
            // A checkpoint reported started but not the one recovered: the
            // kill landed while the writer was writing it.
            mid_checkpoint += u32::from(seen.ckpt > recovered.checkpoint_id);
        }
        assert!(ever_ready, "{algorithm}: the child never became ready");
        eprintln!("{algorithm}: {iterations} kills, {mid_checkpoint} while a checkpoint was being written, 0 mismatches");
    }
}

#[test]
fn kill_during_checkpoints() {
    kill_and_recover(2);
}

#[test]
#[ignore = "long: FCC_KILL_ITERATIONS kills per algorithm (default 25)"]
fn kill_during_checkpoints_long() {
    let n = std::env::var("FCC_KILL_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    kill_and_recover(n);
}
