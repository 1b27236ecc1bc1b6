//! Fuzz harnesses for epochdb's on-disk formats.
//!
//! Each durable store (the HybridLog, the engine's `silor`, `log` and
//! `wal` modes, the FC checkpoint library) has a few small *disk images*, committed under `images/`: the synced
//! files a deterministic workload left on the simulated disk, checkpoints
//! included. A harness takes fuzzer bytes as a [`Damage`] — byte flips,
//! overwritten or nudged words, truncated or removed files, and optionally
//! fresh checksums over every framed block so that the damage gets past
//! CRC32C into the decoders behind it — applies it to one image, opens the
//! store over it and, if recovery succeeds, reads every key the workload
//! wrote and writes a few more.
//!
//! What a harness asserts: recovery of any damaged image returns `Ok` or
//! an error, never panics, hangs or allocates without bound; an undamaged
//! image recovers exactly the workload's acknowledged state.
//!
//! The coverage-guided fuzzers live in `fuzz/` (cargo-fuzz, nightly, run
//! outside CI; see its README); `tests/corpus.rs` replays their corpora on
//! every `cargo test`. `cargo run -p epochdb-fuzz --bin make-images`
//! rebuilds the images after a format change (`tests/images.rs` fails
//! until then).

pub mod damage;
pub mod engine;
pub mod fcc;
pub mod hybridlog;
pub mod image;

pub use damage::{Damage, Edit};
pub use image::Image;
