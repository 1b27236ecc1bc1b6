//! The papers' workloads, written once and shared by benchmarks, tests and
//! crash tests: YCSB (SiloR's variant, CPR's variant, core A–F), TPC-C, and
//! the crash-test workload.

pub mod crash;
pub mod tpcc;
mod workload;
pub mod ycsb;
mod zipf;

pub use tpcc::{check_consistency, Tpcc, TpccConfig};
pub use workload::{share, Client, Outcome, Workload};
pub use ycsb::{Variant, Ycsb, YcsbConfig};
pub use zipf::{fnv64, KeyChooser, Zipf};
