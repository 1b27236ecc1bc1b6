//! Recovers and resumes a damaged FC checkpoint image (see
//! `epochdb_fuzz::fcc`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| epochdb_fuzz::fcc::recover_damaged(data));
