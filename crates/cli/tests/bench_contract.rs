//! Why this exists: scripts and documents rely on `epochdb bench`'s flags
//! and JSON fields (DESIGN.md, "The `epochdb` command"). These runs are
//! tiny; they check the contract, not the speed.

use std::process::Command;

fn epochdb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_epochdb"))
        .args(args)
        .output()
        .expect("run epochdb")
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json written")).expect("valid json")
}

#[test]
fn ycsb_json_has_the_contract_fields() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    let plot = dir.path().join("run.svg");
    let result = epochdb(&[
        "bench",
        "ycsb",
        "--keys",
        "2000",
        "--duration",
        "1.1",
        "--threads",
        "2",
        "--json",
        out.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let run = json(&out);
    assert!(run["throughput_txn_s"].as_f64().unwrap() > 0.0);
    assert!(run["abort_rate"].as_f64().is_some());
    for p in ["p50", "p99", "p999"] {
        assert!(run["latency_us"][p].as_u64().is_some(), "latency_us.{p}");
    }
    let series = run["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "one entry per full 0.5 s window");
    for field in ["t_s", "txn_s", "p50_us", "checkpointing"] {
        assert!(!series[0][field].is_null(), "series.{field}");
    }
    assert_eq!(run["config"]["threads"], 2);
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
}

#[test]
fn compare_writes_runs_and_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cmp.json");
    let result = epochdb(&[
        "bench",
        "tpcc",
        "--small",
        "--duration",
        "0.6",
        "--compare",
        "none,none",
        "--check",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report = json(&out);
    assert_eq!(report["runs"].as_array().unwrap().len(), 2);
    assert_eq!(report["ratios"]["none"], 1.0);
    assert!(report["ratios"]["none#2"].as_f64().unwrap() > 0.0);
    assert!(String::from_utf8_lossy(&result.stderr).contains("consistency check passed"));
}

#[test]
fn durable_modes_compare_and_report_their_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("silor.json");
    let result = epochdb(&[
        "bench",
        "ycsb",
        "--keys",
        "20000",
        "--duration",
        "2",
        "--compare",
        "none,log,silor",
        "--checkpoint-interval",
        "0.2",
        "--json",
        out.to_str().unwrap(),
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report = json(&out);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs[1]["durability"]["log_bytes"].as_u64().unwrap() > 0);
    assert_eq!(runs[1]["durability"]["checkpoints"], 0);
    assert!(runs[2]["durability"]["checkpoints"].as_u64().unwrap() >= 1);
    let shaded = runs[2]["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["checkpointing"] == true)
        .count();
    assert!(shaded >= 1, "a checkpoint period shows in the series");
    assert!(runs[1]["latency_us"]["p50"].as_u64().unwrap() > 0);
    // Each run had its own subdirectory, and a rerun refuses to reuse them.
    assert!(dir.path().join("log-2").join("pepoch").exists());
    let again = epochdb(&[
        "bench",
        "ycsb",
        "--keys",
        "1000",
        "--duration",
        "1",
        "--compare",
        "none,log",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists from an earlier run"));
}

#[test]
fn bad_flags_are_named() {
    let result = epochdb(&["bench", "ycsb", "--durability", "cprx"]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("--durability")
            && stderr.contains("unknown durability mode")
            && stderr.contains("cpr"),
        "{stderr}"
    );

    let result = epochdb(&["bench", "ycsb", "--variant", "z"]);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("unknown YCSB variant"));

    let result = epochdb(&["bench", "ycsb", "--threads", "0"]);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("--threads"));
}

#[test]
fn fcc_json_has_one_run_per_algorithm_and_rate() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fcc.json");
    let result = epochdb(&[
        "bench",
        "fcc",
        "--algo",
        "ns,zigzag",
        "--updates-per-sec",
        "10000,40000",
        "--state-mb",
        "2",
        "--duration",
        "1",
        "--checkpoint-period",
        "0.5",
        "--json",
        out.to_str().unwrap(),
        "--plot",
        dir.path().join("fcc.svg").to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(dir.path().join("fcc.svg").exists());
    let report = json(&out);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for run in runs {
        assert!(run["algo"].is_string());
        assert!(run["updates_per_sec"].as_u64().is_some());
        assert!(run["overhead_ms_per_period"].as_f64().is_some());
        assert!(run["interval_added_ms"]["p50"].as_f64().is_some());
        assert!(run["interval_added_ms"]["max"].as_f64().is_some());
    }
    // The MMO workload (its rate is the model's), and its recovery time.
    let result = epochdb(&[
        "bench",
        "fcc",
        "--workload",
        "mmo",
        "--players",
        "10",
        "--algo",
        "ns,ipp",
        "--duration",
        "1",
        "--checkpoint-period",
        "0.5",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report = json(&out);
    assert_eq!(report["runs"].as_array().unwrap().len(), 2);
    let result = epochdb(&[
        "bench",
        "fcc",
        "--workload",
        "mmo",
        "--recovery",
        "--players",
        "10",
        "--algo",
        "ipp",
        "--duration",
        "1",
        "--checkpoint-period",
        "0.5",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report = json(&out);
    assert_eq!(report["runs"][0]["state_matches"], true);
    let result = epochdb(&["bench", "fcc", "--workload", "tpcc"]);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("--workload"));
}

#[test]
fn wal_json_has_one_run_per_implementation_threads_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wal.json");
    let figure = dir.path().join("wal.svg");
    let result = epochdb(&[
        "bench",
        "wal",
        "--threads",
        "1,2",
        "--log-size",
        "128,4096",
        "--io-unit",
        "65536",
        "--buffer-bytes",
        "4194304",
        "--duration",
        "0.3",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        out.to_str().unwrap(),
        "--plot",
        figure.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let svg = std::fs::read_to_string(&figure).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("grasshopper 2t 4096B"),
        "figure lacks its curves"
    );
    let report = json(&out);
    assert!(report["disk_write_mb_s"].as_f64().unwrap() > 0.0);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3 * 2 * 2);
    let mut impls: Vec<&str> = runs.iter().map(|r| r["impl"].as_str().unwrap()).collect();
    impls.sort_unstable();
    impls.dedup();
    assert_eq!(impls, ["grasshopper", "mutex", "scan"]);
    for run in runs {
        assert!(run["threads"].as_u64().is_some());
        assert!(run["log_size"].as_u64().is_some());
        assert!(run["throughput_txn_s"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["write_mb_s"].as_f64().unwrap() > 0.0, "{run}");
        // Judged against the probes written around it.
        let disk = run["disk_write_mb_s"].as_f64().unwrap();
        let fraction = run["write_fraction_of_disk"].as_f64().unwrap();
        assert!(disk > 0.0, "{run}");
        let expected = run["write_mb_s"].as_f64().unwrap() / disk;
        assert!((fraction - expected).abs() < 1e-9, "{run}");
        // The database threads' CPU time: positive, and no more than
        // their wall time (threads × seconds) in all.
        let cpu_ns = run["db_cpu_ns_per_txn"].as_f64().unwrap();
        let txns = run["transactions"].as_f64().unwrap();
        let wall_ns = run["threads"].as_f64().unwrap() * run["seconds"].as_f64().unwrap() * 1e9;
        assert!(cpu_ns > 0.0 && cpu_ns * txns <= wall_ns, "{run}");
        let latency = &run["commit_latency_us"];
        let (p50, p999) = (
            latency["p50"].as_f64().unwrap(),
            latency["p999"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p999, "{run}");
        // The CDF rises from 0 to 1 with latencies that never decrease.
        let cdf: Vec<(f64, f64)> = run["commit_latency_cdf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
            .collect();
        assert!(cdf.len() > 100, "{run}");
        assert_eq!(cdf.first().unwrap().1, 0.0);
        assert_eq!(cdf.last().unwrap().1, 1.0);
        assert!(
            cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
            "{run}"
        );
    }
    // The null device: same runs, no disk.
    let null_out = dir.path().join("wal-null.json");
    let result = epochdb(&[
        "bench",
        "wal",
        "--device",
        "null",
        "--threads",
        "2",
        "--log-size",
        "128",
        "--io-unit",
        "65536",
        "--buffer-bytes",
        "4194304",
        "--duration",
        "0.3",
        "--pin-threads",
        "--json",
        null_out.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report = json(&null_out);
    assert_eq!(report["config"]["device"], "null");
    for run in report["runs"].as_array().unwrap() {
        assert!(run["throughput_txn_s"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["write_fraction_of_disk"].is_null(), "no disk: {run}");
    }
    let result = epochdb(&["bench", "wal", "--impl", "spin"]);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("--impl"));
}

#[test]
fn hybridlog_json_has_phases_checkpoints_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hl.json");
    let plot = dir.path().join("hl.svg");
    let result = epochdb(&[
        "bench",
        "hybridlog",
        "--keys",
        "20000",
        "--duration",
        "1.6",
        "--threads",
        "2",
        "--mix",
        "rmw",
        "--mutable-fraction",
        "0.5",
        "--prefetch",
        "8",
        "--checkpoint-at",
        "0.5",
        "--recover",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        out.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let run = json(&out);
    assert!(run["throughput_txn_s"].as_f64().unwrap() > 0.0);
    for p in ["p50", "p99", "p999"] {
        assert!(run["latency_us"][p].as_u64().is_some(), "latency_us.{p}");
        assert!(run["latency_ns"][p].as_u64().unwrap() > 0, "latency_ns.{p}");
    }
    let series = run["series"].as_array().unwrap();
    assert_eq!(series.len(), 3, "one entry per full 0.5 s window");
    for field in [
        "t_s",
        "txn_s",
        "p50_us",
        "checkpointing",
        "phase",
        "log_bytes",
    ] {
        assert!(!series[0][field].is_null(), "series.{field}");
    }
    assert!(series.iter().any(|w| w["checkpointing"] == true));
    let checkpoints = run["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 1);
    let checkpoint = &checkpoints[0];
    assert!(checkpoint["bytes"].as_u64().unwrap() > 0);
    assert!(checkpoint["index_bytes"].as_u64().unwrap() > 0);
    // A new store's first index checkpoint has no spare file to write over.
    assert_eq!(checkpoint["index_over_spare"], false, "{checkpoint}");
    assert!(checkpoint["write_mb_s"].as_f64().unwrap() > 0.0);
    assert!(checkpoint["ratio"].as_f64().unwrap() > 0.0);
    // The dip against the half second before the checkpoint.
    let before = checkpoint["before_txn_s"].as_f64().unwrap();
    let during = checkpoint["during_txn_s"].as_f64().unwrap();
    assert!(before > 0.0, "{checkpoint}");
    let ratio = checkpoint["ratio_to_before"].as_f64().unwrap();
    assert!((ratio - during / before).abs() < 1e-9, "{checkpoint}");
    let phases: Vec<&str> = checkpoint["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "index",
            "prepare",
            "in_progress",
            "wait_pending",
            "wait_flush"
        ]
    );
    assert!(run["phase_seconds"]["wait_flush"].as_f64().is_some());
    assert!(run["disk_write_mb_s"].as_f64().unwrap() > 0.0);
    // The disk's read speed is the faster of its two read probes.
    let buffered = run["disk_read_buffered_mb_s"].as_f64().unwrap();
    let direct = run["disk_read_direct_mb_s"].as_f64().unwrap();
    assert!(buffered > 0.0 && direct > 0.0, "{buffered} {direct}");
    assert_eq!(run["disk_read_mb_s"].as_f64(), Some(buffered.max(direct)));
    let recovery = &run["recovery"];
    assert!(recovery["seconds"].as_f64().unwrap() > 0.0);
    assert!(recovery["read_mb_s"].as_f64().unwrap() > 0.0);
    assert_eq!(recovery["version"], checkpoint["version"]);
    // The recovered log is scrubbed against its checksums, all of it.
    let scrub = &recovery["scrub"];
    assert!(scrub["pieces"].as_u64().unwrap() > 0, "{scrub}");
    assert!(scrub["bytes"].as_u64().unwrap() > 0, "{scrub}");
    assert_eq!(scrub["unchecked_bytes"].as_u64(), Some(0), "{scrub}");
    assert_eq!(run["config"]["threads"], 2);
    assert_eq!(run["config"]["mutable_fraction"], 0.5);
    assert_eq!(run["config"]["prefetch"], 8);
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
}

#[test]
fn hybridlog_runs_every_checkpoint_kind_and_shift_and_refuses_a_bad_mix() {
    for (kind, shift) in [("snapshot", "coarse"), ("incremental", "fine")] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.json");
        let result = epochdb(&[
            "bench",
            "hybridlog",
            "--keys",
            "20000",
            "--duration",
            "1",
            "--checkpoint",
            kind,
            "--shift",
            shift,
            "--checkpoint-at",
            "0.2,0.6",
            "--json",
            out.to_str().unwrap(),
            "--dir",
            dir.path().to_str().unwrap(),
        ]);
        assert!(
            result.status.success(),
            "{kind}/{shift}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        let run = json(&out);
        assert_eq!(run["config"]["checkpoint"], kind);
        assert_eq!(run["config"]["shift"], shift);
        let checkpoints = run["checkpoints"].as_array().unwrap();
        assert_eq!(checkpoints.len(), 2, "{kind}/{shift}: {checkpoints:?}");
        assert!(checkpoints.iter().all(|c| c["bytes"].as_u64().unwrap() > 0));
    }
    let result = epochdb(&["bench", "hybridlog", "--mix", "60:30"]);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("--mix"));
}
