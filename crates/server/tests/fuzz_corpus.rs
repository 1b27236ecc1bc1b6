//! Why this exists: the RESP fuzzer (crates/server/fuzz, cargo-fuzz, run
//! outside CI) keeps the inputs that reached new code in its corpus; this
//! test replays every one of them, plus hand-written seeds, on each
//! `cargo test`, so a regression on any of them fails CI.

use std::path::Path;

#[test]
fn every_corpus_input_parses_or_is_refused_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/resp_parser");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("the corpus directory exists") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        epochdb_server::resp::exercise_parser(&data);
        replayed += 1;
    }
    assert!(
        replayed >= 8,
        "only {replayed} corpus inputs in {}",
        dir.display()
    );
    println!("replayed {replayed} corpus inputs");
}
