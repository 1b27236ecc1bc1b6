//! Why this exists: the fuzzers (`fuzz/`, cargo-fuzz, run outside CI)
//! keep the inputs that reached new code in their corpora; this test
//! replays every one of them on each `cargo test`, so a regression on any
//! damaged image they found fails CI.

use std::path::Path;

fn replay(target: &str, harness: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(
        inputs.len() >= 4,
        "only {} corpus inputs in {}",
        inputs.len(),
        dir.display()
    );
    for path in &inputs {
        harness(&std::fs::read(path).unwrap());
    }
    println!("{target}: replayed {} corpus inputs", inputs.len());
}

#[test]
fn every_hybridlog_corpus_input_recovers_or_is_refused_without_a_panic() {
    replay(
        "hybridlog_recover",
        epochdb_fuzz::hybridlog::recover_damaged,
    );
}

#[test]
fn every_engine_corpus_input_recovers_or_is_refused_without_a_panic() {
    replay("engine_recover", epochdb_fuzz::engine::recover_damaged);
}

#[test]
fn every_fcc_corpus_input_recovers_or_is_refused_without_a_panic() {
    replay("fcc_recover", epochdb_fuzz::fcc::recover_damaged);
}
