//! A short `epochdb crashtest` per durable mode: real SIGKILLs, real files.
//! The long run (200 iterations per mode) is in BENCHMARKS.md.

use std::process::Command;

fn crashtest(mode: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_epochdb"))
        .args(["crashtest", "--durability", mode, "--iterations", "3"])
        .args([
            "--max-run-ms",
            "400",
            "--checkpoint-ms",
            "100",
            "--seed",
            "7",
        ])
        .output()
        .expect("run epochdb");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("crashtest: 3 iterations, 0 violations"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("iteration 3/3"), "{stderr}");
}

#[test]
fn crashtest_log_mode() {
    crashtest("log");
}

#[test]
fn crashtest_silor_mode() {
    crashtest("silor");
}

#[test]
fn crashtest_wal_mode() {
    crashtest("wal");
}

#[test]
fn crashtest_refuses_the_none_mode() {
    let output = Command::new(env!("CARGO_BIN_EXE_epochdb"))
        .args(["crashtest", "--durability", "none", "--iterations", "1"])
        .output()
        .expect("run epochdb");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("durable mode"));
}

/// FASTER's sum-store on the hybridlog store with real SIGKILLs: a few
/// iterations (half of them aimed at a CPR phase); the 200-iteration run is
/// in BENCHMARKS.md.
#[test]
fn crashtest_hybridlog_sum_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_epochdb"))
        .args(["crashtest", "--store", "hybridlog", "--iterations", "4"])
        .args(["--max-run-ms", "400", "--seed", "7"])
        .output()
        .expect("run epochdb");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("crashtest: 4 iterations, 0 violations"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("iteration 4/4"), "{stderr}");
    assert!(
        stderr.contains("kills by the phase last reported"),
        "{stderr}"
    );
}

#[test]
fn crashtest_hybridlog_refuses_a_durability_mode() {
    let output = Command::new(env!("CARGO_BIN_EXE_epochdb"))
        .args(["crashtest", "--store", "hybridlog", "--durability", "log"])
        .output()
        .expect("run epochdb");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--durability"));
}
