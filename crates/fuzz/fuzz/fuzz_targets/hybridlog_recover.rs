//! Recovers a damaged HybridLog image (see `epochdb_fuzz::hybridlog`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| epochdb_fuzz::hybridlog::recover_damaged(data));
