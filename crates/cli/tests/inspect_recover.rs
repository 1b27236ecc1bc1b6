//! Why this exists: `epochdb inspect` and `epochdb recover` are how an
//! operator looks at a `log`/`silor` database on disk (DESIGN.md, "The
//! `epochdb` command"). These tests write a real database with the engine,
//! then run the binary: the listing must show every committed transaction
//! and its damage verdicts must agree with recovery's (a torn tail in
//! `data.log` is fine, a flipped byte in a synced file is corruption and a
//! non-zero exit), and `recover` must report what it read as JSON and
//! refuse a directory that holds no database.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::durability::SilorOptions;
use epochdb_engine::{Config, Database, DurabilityKind};

/// Keys written; `DELETED` of them are deleted afterwards.
const KEYS: u32 = 60;
const DELETED: u32 = 10;

fn epochdb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_epochdb"))
        .args(args)
        .output()
        .expect("run epochdb")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Writes `KEYS` single-put transactions and one that deletes `DELETED`
/// keys, waiting on each ticket, rotating the log every epoch (so synced
/// `old_data` files exist); `silor` mode then takes a checkpoint. Returns
/// the number of committed writing transactions.
fn write_database(mode: DurabilityKind, dir: &Path) -> usize {
    write_database_in(mode, vec![dir.to_path_buf()])
}

/// [`write_database`] over the directories `dirs` of one database.
fn write_database_in(mode: DurabilityKind, dirs: Vec<PathBuf>) -> usize {
    let config = Config {
        durability: mode,
        dirs,
        epoch_interval: Duration::from_millis(2),
        silor: SilorOptions {
            rotate_epochs: 1,
            // A `cpr` commit is durable with the next checkpoint.
            checkpoint_interval: if mode == DurabilityKind::Cpr {
                Duration::from_millis(5)
            } else {
                SilorOptions::default().checkpoint_interval
            },
            ..SilorOptions::default()
        },
        ..Config::default()
    };
    let db = Database::open(config).expect("open");
    let table = db.create_table("accounts").expect("create table");
    let mut worker = db.worker().expect("worker");
    for n in 0..KEYS {
        let ((), ticket) = worker
            .run(|tx| tx.put(table, &n.to_be_bytes(), &[7u8; 24]))
            .expect("put");
        ticket.wait().expect("durable");
    }
    let ((), ticket) = worker
        .run(|tx| {
            for n in 0..DELETED {
                tx.delete(table, &n.to_be_bytes())?;
            }
            Ok(())
        })
        .expect("delete");
    ticket.wait().expect("durable");
    drop(worker);
    if mode == DurabilityKind::Silor {
        db.checkpoint().expect("checkpoint");
    }
    KEYS as usize + 1
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    names(dir)
        .into_iter()
        .filter(|n| n == "data.log" || (n.starts_with("old_data.") && !n.ends_with(".tmp")))
        .map(|n| dir.join(n))
        .collect()
}

/// A synced, rotated log file with at least one block.
fn synced_log(dir: &Path) -> PathBuf {
    log_files(dir)
        .into_iter()
        .find(|p| p.file_name().unwrap() != "data.log" && std::fs::metadata(p).unwrap().len() > 0)
        .expect("a rotated log file")
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json written")).expect("valid json")
}

#[test]
fn inspect_lists_every_committed_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let committed = write_database(DurabilityKind::Log, dir.path());

    let mut entries = 0;
    let mut tombstones = 0;
    for path in log_files(dir.path()) {
        let result = epochdb(&["inspect", "--verbose", arg(&path)]);
        let (out, err) = text(&result);
        assert!(result.status.success(), "{}: {out}{err}", path.display());
        assert!(out.contains(": log file, "), "{out}");
        let summary = out.lines().last().unwrap();
        assert!(summary.starts_with("summary: "), "{out}");
        assert!(summary.ends_with(", intact"), "{out}");
        entries += out
            .lines()
            .filter(|l| l.trim_start().starts_with("tid 0x"))
            .count();
        tombstones += out.lines().filter(|l| l.ends_with(" tombstone")).count();
        if out.contains("log epoch") {
            assert!(out.contains("table 0 key 0000"), "{out}");
            assert!(
                out.contains("value 24 bytes") || out.contains("tombstone"),
                "{out}"
            );
        }
    }
    assert_eq!(entries, committed, "every commit logged once");
    assert_eq!(tombstones, DELETED as usize);

    let result = epochdb(&["inspect", arg(&dir.path().join("catalog"))]);
    let (out, _) = text(&result);
    assert!(result.status.success(), "{out}");
    assert!(out.contains("catalog header: format version 2"), "{out}");
    assert!(out.contains("table 0 \"accounts\""), "{out}");
    assert!(out.contains("summary: 2 blocks, "), "{out}");

    let result = epochdb(&["inspect", arg(&dir.path().join("pepoch"))]);
    let (out, _) = text(&result);
    assert!(result.status.success(), "{out}");
    assert!(out.contains("pepoch e_p "), "{out}");

    let result = epochdb(&["inspect", arg(dir.path())]);
    let (out, err) = text(&result);
    assert!(result.status.success(), "{out}{err}");
    for name in ["catalog", "pepoch", "data.log"] {
        assert!(out.lines().any(|l| l.starts_with(name)), "{name}: {out}");
    }
    assert!(out.lines().any(|l| l.starts_with("old_data.")), "{out}");
    let summary = out.lines().last().unwrap();
    assert!(summary.ends_with(" 0 corrupt"), "{out}");
}

#[test]
fn inspect_reports_corruption_and_exits_non_zero() {
    // A flipped byte in the payload of a synced log file's first block.
    let log_dir = tempfile::tempdir().unwrap();
    write_database(DurabilityKind::Log, log_dir.path());
    let old = synced_log(log_dir.path());
    flip_byte(&old, 20);
    let result = epochdb(&["inspect", arg(&old)]);
    let (out, err) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(out.contains("CORRUPT at offset 0: crc32c"), "{out}");
    assert!(err.contains("CORRUPT at offset 0"), "{err}");
    let result = epochdb(&["inspect", arg(log_dir.path())]);
    let (out, err) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(out.contains(" 1 corrupt"), "{out}");
    assert!(err.contains("1 corrupt"), "{err}");

    // The checkpoint metadata, installed by an atomic rename after a sync.
    let silor_dir = tempfile::tempdir().unwrap();
    write_database(DurabilityKind::Silor, silor_dir.path());
    let meta = silor_dir.path().join("checkpoint");
    let result = epochdb(&["inspect", arg(&meta)]);
    let (out, _) = text(&result);
    assert!(result.status.success(), "{out}");
    assert!(out.contains("checkpoint 1: e_l "), "{out}");
    assert!(out.contains("file dir 0 ckpt.1.t0.0 ("), "{out}");
    let result = epochdb(&["inspect", "--verbose", arg(silor_dir.path())]);
    let (out, _) = text(&result);
    assert!(result.status.success(), "{out}");
    assert!(out.contains("checkpoint table 0: "), "{out}");
    flip_byte(&meta, 30);
    let result = epochdb(&["inspect", arg(&meta)]);
    let (out, _) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(out.contains("CORRUPT at offset 0"), "{out}");

    // Recovery refuses both directories too.
    for dir in [log_dir.path(), silor_dir.path()] {
        let result = epochdb(&["recover", "--dir", arg(dir)]);
        assert!(!result.status.success());
        assert!(text(&result).1.contains("corrupt"), "{}", text(&result).1);
    }
}

#[test]
fn a_torn_tail_in_data_log_is_reported_and_recovered() {
    let dir = tempfile::tempdir().unwrap();
    write_database(DurabilityKind::Log, dir.path());
    // The start of a block a crash interrupted.
    let torn: Vec<u8> = std::fs::read(synced_log(dir.path())).unwrap()[..20].to_vec();
    let data_log = dir.path().join("data.log");
    let before = std::fs::metadata(&data_log).unwrap().len();
    let mut bytes = std::fs::read(&data_log).unwrap();
    bytes.extend(&torn);
    std::fs::write(&data_log, bytes).unwrap();

    let result = epochdb(&["inspect", arg(&data_log)]);
    let (out, _) = text(&result);
    assert!(result.status.success(), "{out}");
    assert!(
        out.contains(&format!("torn tail at offset {before} (20 bytes)")),
        "{out}"
    );
    let json_path = dir.path().join("recover.json");
    let result = epochdb(&[
        "recover",
        "--dir",
        arg(dir.path()),
        "--durability",
        "log",
        "--json",
        arg(&json_path),
    ]);
    assert!(result.status.success(), "{}", text(&result).1);
    assert_eq!(json(&json_path)["torn_tail_bytes"], 20);
    assert_eq!(json(&json_path)["records"], KEYS - DELETED);
    assert!(
        text(&result).0.contains("torn tail bytes:   20"),
        "{}",
        text(&result).0
    );
}

#[test]
fn inspect_and_recovery_agree_on_damage_in_data_log() {
    // After a clean shutdown pepoch records all of data.log as synced (when
    // its last record names this data.log), so a flipped byte in its last
    // block is corruption, not a torn tail. Whichever holds, inspect's
    // verdict must be recovery's.
    let dir = tempfile::tempdir().unwrap();
    write_database(DurabilityKind::Log, dir.path());
    let data_log = dir.path().join("data.log");
    let len = std::fs::metadata(&data_log).unwrap().len() as usize;
    flip_byte(&data_log, len - 2);
    let result = epochdb(&["inspect", arg(&data_log)]);
    let (out, _) = text(&result);
    let summary = out.lines().last().unwrap().to_string();
    let json_path = dir.path().join("recover.json");
    let recovered = epochdb(&[
        "recover",
        "--dir",
        arg(dir.path()),
        "--json",
        arg(&json_path),
    ]);
    if summary.contains("CORRUPT") {
        assert!(!result.status.success(), "{out}");
        assert!(
            !recovered.status.success(),
            "inspect: {summary}; recover: {}",
            text(&recovered).0
        );
        assert!(
            text(&recovered).1.contains("corrupt"),
            "{}",
            text(&recovered).1
        );
    } else {
        assert!(result.status.success(), "{out}");
        assert!(
            recovered.status.success(),
            "inspect: {summary}; recover: {}",
            text(&recovered).1
        );
        let torn: u64 = summary
            .rsplit_once('(')
            .and_then(|(_, rest)| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("torn tail bytes in {summary:?}"));
        assert_eq!(json(&json_path)["torn_tail_bytes"], torn, "{out}");
    }
}

/// Checks `recover`'s report: the lines and JSON fields every store's
/// report has (DESIGN.md), 2 threads, plus `lines` and `fields` of its own.
fn assert_report(
    what: &str,
    out: &str,
    report: &serde_json::Value,
    lines: &[&str],
    fields: &[&str],
) {
    let common_lines = [
        "time:",
        "checkpoint bytes:",
        "log bytes:",
        "throughput:",
        "threads:           2",
    ];
    for line in common_lines.iter().chain(lines) {
        assert!(out.contains(line), "{what}: {line}: {out}");
    }
    let common_fields = [
        "seconds",
        "checkpoint_bytes",
        "log_bytes",
        "mb_s",
        "threads",
    ];
    for field in common_fields.iter().chain(fields) {
        assert!(report[field].is_number(), "{what}: {field}: {report}");
    }
    assert_eq!(report["threads"], 2, "{what}");
}

#[test]
fn recover_reports_what_it_read() {
    for mode in ["log", "silor"] {
        let dir = tempfile::tempdir().unwrap();
        let kind = mode.parse().unwrap();
        write_database(kind, dir.path());
        let json_path = dir.path().join("recover.json");
        let result = epochdb(&[
            "recover",
            "--dir",
            arg(dir.path()),
            "--threads",
            "2",
            "--durability",
            mode,
            "--json",
            arg(&json_path),
        ]);
        let (out, err) = text(&result);
        assert!(result.status.success(), "{mode}: {out}{err}");
        let report = json(&json_path);
        assert_report(
            mode,
            &out,
            &report,
            &[
                "persistent epoch:",
                "records:           50",
                "torn tail bytes:",
                "dropped blocks:",
            ],
            &[
                "checkpoint_seconds",
                "log_seconds",
                "persistent_epoch",
                "records",
            ],
        );
        assert_eq!(report["threads"], 2);
        assert_eq!(report["records"], KEYS - DELETED);
        assert!(report["persistent_epoch"].as_u64().unwrap() > 0);
        if mode == "silor" {
            assert!(report["checkpoint_bytes"].as_u64().unwrap() > 0, "{report}");
        } else {
            assert_eq!(report["checkpoint_bytes"], 0);
            assert!(report["log_bytes"].as_u64().unwrap() > 0, "{report}");
        }
        // Recovery rewrote the logs it resumed from; they still recover
        // to the same database.
        let result = epochdb(&[
            "recover",
            "--dir",
            arg(dir.path()),
            "--json",
            arg(&json_path),
        ]);
        assert!(result.status.success(), "{mode}: {}", text(&result).1);
        assert_eq!(json(&json_path)["records"], KEYS - DELETED);
        let result = epochdb(&["inspect", arg(dir.path())]);
        assert!(result.status.success(), "{mode}: {}", text(&result).0);
    }
}

#[test]
fn recover_refuses_a_directory_without_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let result = epochdb(&["recover", "--dir", arg(&missing)]);
    assert!(!result.status.success());
    let (_, err) = text(&result);
    assert!(
        err.contains(&format!("no epochdb database at {}", missing.display())),
        "{err}"
    );
    assert!(!missing.exists(), "recover must not create a database");

    let result = epochdb(&["recover", "--dir", arg(dir.path())]);
    assert!(!result.status.success());
    assert!(text(&result).1.contains("no epochdb database at"));
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));

    let result = epochdb(&["recover", "--dir", arg(dir.path()), "--durability", "none"]);
    assert!(!result.status.success());
    assert!(
        text(&result).1.contains("--durability"),
        "{}",
        text(&result).1
    );

    let result = epochdb(&["inspect", arg(&missing)]);
    assert!(!result.status.success());
}

#[test]
fn recover_reads_the_mode_off_the_directory() {
    for (mode, expected) in [
        (DurabilityKind::Log, "log"),
        // With its checkpoint installed; before one it recovers as `log`.
        (DurabilityKind::Silor, "silor"),
        (DurabilityKind::Wal, "wal"),
        (DurabilityKind::Cpr, "cpr"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_database(mode, dir.path());
        let result = epochdb(&["recover", "--dir", arg(dir.path()), "--threads", "2"]);
        let (out, err) = text(&result);
        assert!(result.status.success(), "{mode}: {out}{err}");
        assert!(out.contains(&format!("({expected} mode)")), "{mode}: {out}");
        assert!(
            out.contains(&format!("records:           {}", KEYS - DELETED)),
            "{mode}: {out}"
        );
        let result = epochdb(&["inspect", arg(dir.path())]);
        let (out, err) = text(&result);
        assert!(result.status.success(), "{mode}: {out}{err}");
        if mode == DurabilityKind::Wal {
            assert!(out.contains("wal/wal.sdl"), "{out}");
            assert!(out.contains(" commits, "), "{out}");
        }
    }
}

#[test]
fn recover_names_the_databases_one_level_down() {
    let parent = tempfile::tempdir().unwrap();
    let db = parent.path().join("silor-1");
    write_database(DurabilityKind::Silor, &db);
    let result = epochdb(&["recover", "--dir", arg(parent.path())]);
    assert!(!result.status.success());
    let (_, err) = text(&result);
    assert!(
        err.contains(&format!("but it holds {}", db.display())),
        "{err}"
    );
    // A database of another mode is named by the engine's refusal.
    let result = epochdb(&["recover", "--dir", arg(&db), "--durability", "wal"]);
    assert!(!result.status.success());
    let (_, err) = text(&result);
    assert!(err.contains("written by the log or silor mode"), "{err}");
}

/// The small store of these tests, opened (recovering) in `dir`.
fn open_store(dir: &Path) -> epochdb_hybridlog::Store<epochdb_hybridlog::AddU64> {
    use epochdb_hybridlog::{AddU64, Config as StoreConfig, RealStorage, Store};
    let config = StoreConfig {
        index_buckets: 1 << 10,
        page_bits: 12,
        memory_bytes: 16 << 20,
        ..StoreConfig::default()
    };
    Store::open(Arc::new(RealStorage::new()), dir, config, AddU64).unwrap()
}

/// Adds `amount(key)` to counters 0..2000 in one session, then ends it (a
/// session left idle would hold a checkpoint's phases back).
fn add_to_counters(
    store: &epochdb_hybridlog::Store<epochdb_hybridlog::AddU64>,
    amount: impl Fn(u64) -> u64,
) {
    let mut session = store.start_session().unwrap();
    for key in 0..2_000u64 {
        session.rmw(&key.to_le_bytes(), amount(key)).unwrap();
    }
    session.complete_pending(true).unwrap();
}

/// A HybridLog store with a fold-over checkpoint, closed cleanly.
fn write_store(dir: &Path) {
    let store = open_store(dir);
    add_to_counters(&store, |key| key);
    store
        .checkpoint_with(true, epochdb_hybridlog::CheckpointKind::FoldOver)
        .unwrap();
}

#[test]
fn inspect_lists_a_hybridlog_store_and_its_damage() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("hybridlog");
    write_store(&dir);
    let result = epochdb(&["inspect", arg(&dir)]);
    let (out, err) = text(&result);
    assert!(result.status.success(), "{out}{err}");
    assert!(out.contains("hybridlog store"), "{out}");
    assert!(out.contains("hybridlog index checkpoint"), "{out}");
    assert!(out.contains("checksummed pieces verified"), "{out}");

    // Given the folder above it, both commands name the store.
    let result = epochdb(&["inspect", arg(parent.path())]);
    assert!(text(&result)
        .0
        .contains(&format!("it holds {}", dir.display())));

    let index = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("index-")
        })
        .expect("an index checkpoint");
    flip_byte(&index, 5_000);
    let result = epochdb(&["inspect", arg(&dir)]);
    let (out, err) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(out.contains("CORRUPT at offset"), "{out}");
    assert!(err.contains("1 corrupt"), "{err}");
    let result = epochdb(&["inspect", "--verbose", arg(&index)]);
    assert!(!result.status.success());
    assert!(text(&result).0.contains("header: 1024 buckets"));
    // Recovery refuses the damaged index, naming the file.
    let result = epochdb(&["recover", "--dir", arg(&dir)]);
    let (out, err) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(err.contains(&index.display().to_string()), "{err}");
}

#[test]
fn recover_recovers_a_hybridlog_store() {
    use epochdb_hybridlog::CheckpointKind;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("hybridlog");

    // Without a checkpoint there is nothing durable: refused, files kept.
    let store = open_store(&dir);
    add_to_counters(&store, |_| 1);
    let result = epochdb(&["recover", "--dir", arg(&dir)]);
    let (out, err) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(err.contains("without a checkpoint"), "{err}");

    // An index checkpoint, then more increments and a log-only one: the
    // recovery loads the index and replays the log after it.
    store
        .checkpoint_with(true, CheckpointKind::FoldOver)
        .unwrap();
    add_to_counters(&store, |key| key);
    store
        .checkpoint_with(false, CheckpointKind::FoldOver)
        .unwrap();
    drop(store);

    let json_path = parent.path().join("recover.json");
    let result = epochdb(&[
        "recover",
        "--dir",
        arg(&dir),
        "--threads",
        "2",
        "--json",
        arg(&json_path),
    ]);
    let (out, err) = text(&result);
    assert!(result.status.success(), "{out}{err}");
    let report = json(&json_path);
    assert_report(
        "hybridlog",
        &out,
        &report,
        &[
            "(hybridlog store)",
            "checkpoint:        version 2",
            "sessions:",
        ],
        &["index_seconds", "replay_seconds"],
    );
    assert_eq!(report["store"], "hybridlog");
    assert_eq!(report["version"], 2);
    assert_eq!(report["threads"], 2);
    assert!(report["index_bytes"].as_u64().unwrap() > 0, "{report}");
    assert!(report["log_bytes"].as_u64().unwrap() > 0, "{report}");

    // The command left the store as it found it: every counter holds both
    // increments.
    let store = open_store(&dir);
    let mut session = store.start_session().unwrap();
    for key in [0u64, 1, 999, 1_999] {
        let mut value = Vec::new();
        let status = session.read(&key.to_le_bytes(), &mut value).unwrap();
        if status == epochdb_hybridlog::Status::Pending {
            // Below head: read from disk.
            let done = session.complete_pending(true).unwrap();
            assert_eq!(done[0].status, epochdb_hybridlog::Status::Ok, "key {key}");
            value = done[0].value.clone().expect("a read's value");
        } else {
            assert_eq!(status, epochdb_hybridlog::Status::Ok, "key {key}");
        }
        assert_eq!(u64::from_le_bytes(value[..8].try_into().unwrap()), key + 1);
    }
    drop(session);
    drop(store);

    // Flags for engine databases are refused.
    let result = epochdb(&["recover", "--dir", arg(&dir), "--durability", "silor"]);
    assert!(!result.status.success());
    assert!(text(&result).1.contains("are for engine databases"));
}

#[test]
fn inspect_lists_the_fc_checkpoint_files() {
    use epochdb_fcc::{Algorithm, Config as FccConfig, Fcc, FsStorage, Storage as FccStorage};
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn FccStorage> = Arc::new(FsStorage::new(dir.path()).unwrap());
    let mut config = FccConfig::new(Algorithm::ALL[0]);
    config.checkpoint_period_ticks = 3;
    let mut app = Fcc::create(storage, vec![0u64; 512], config).unwrap();
    for tick in 0..20u64 {
        app.log_action(&tick.to_le_bytes());
        app.point_of_consistency().unwrap();
    }
    app.wait_for_checkpoints().unwrap();
    drop(app);
    let result = epochdb(&["inspect", arg(dir.path())]);
    let (out, err) = text(&result);
    assert!(result.status.success(), "{out}{err}");
    assert!(out.contains("fcc checkpoint"), "{out}");
    assert!(out.contains("fcc log segment"), "{out}");
    assert!(
        out.contains("then the log to tick 20 ("),
        "recovery replays every tick: {out}"
    );

    // A damaged slot is reported (recovery falls back to the other).
    let slot = dir.path().join("ckpt.0");
    flip_byte(&slot, 60);
    let result = epochdb(&["inspect", arg(&slot)]);
    let (out, err) = text(&result);
    assert!(!result.status.success(), "{out}");
    assert!(out.contains("other slot"), "{out}{err}");
    let result = epochdb(&["inspect", arg(dir.path())]);
    assert!(result.status.success(), "the other slot still verifies");
    let result = epochdb(&["recover", "--dir", arg(dir.path())]);
    assert!(text(&result).1.contains("FC checkpoint library"));
}

#[test]
fn inspect_of_a_databases_directories_checks_across_them() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    write_database_in(DurabilityKind::Silor, vec![a.clone(), b.clone()]);
    let listed = epochdb(&["inspect", arg(&a), arg(&b)]);
    let (out, err) = text(&listed);
    assert!(listed.status.success(), "{out}{err}");
    assert!(out.contains(&format!("{}/directory", b.display())), "{out}");
    assert!(out.contains(", 0 corrupt"), "{out}");
    // In the wrong order: refused by recovery, and reported by inspect.
    let listed = epochdb(&["inspect", arg(&b), arg(&a)]);
    let (out, _) = text(&listed);
    assert!(!listed.status.success(), "{out}");
    assert!(out.contains("but was given as directory 0 of 2"), "{out}");
    // Several paths must be directories.
    let listed = epochdb(&["inspect", arg(&a.join("catalog")), arg(&b)]);
    assert!(!listed.status.success());
    assert!(
        text(&listed).1.contains("not a directory"),
        "{:?}",
        text(&listed)
    );
}
