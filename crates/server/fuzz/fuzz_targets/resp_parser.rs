//! Fuzzes the RESP request parser: any bytes, split into any reads, under
//! both the unauthenticated and the authenticated limits, must parse or be
//! refused without a panic, and never allocate for what has not arrived.
//!
//!     cd crates/server/fuzz && cargo +nightly fuzz run resp_parser
//!
//! New findings go into corpus/resp_parser/; the server's test
//! `fuzz_corpus` replays that corpus on every `cargo test`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    epochdb_server::resp::exercise_parser(data);
});
