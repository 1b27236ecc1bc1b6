//! Opens the engine over a damaged `silor`, `log` or `wal` image (see
//! `epochdb_fuzz::engine`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| epochdb_fuzz::engine::recover_damaged(data));
