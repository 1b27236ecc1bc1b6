//! `epochdb`: benchmarks that reproduce the papers' experiments, crash
//! tests, recovery and file inspection, and the Redis-protocol server. See
//! `epochdb --help`.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod crashtest;
mod inspect;
mod layout;
mod prefault;
mod recover;
mod serve;

use clap::{Parser, Subcommand};

/// epochdb: a multicore in-memory transactional key-value database with
/// selectable durability.
#[derive(Debug, Parser)]
#[command(name = "epochdb", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark that reproduces a paper's experiment.
    #[command(subcommand)]
    Bench(Box<bench::BenchCommand>),
    /// Kill a child running a write-heavy workload at random moments,
    /// recover, and check that nothing acknowledged was lost.
    Crashtest(crashtest::CrashtestArgs),
    /// The child process of `crashtest` (internal).
    #[command(hide = true)]
    CrashtestChild(crashtest::ChildArgs),
    /// The child process of `crashtest --store hybridlog` (internal).
    #[command(hide = true)]
    CrashtestHybridlogChild(crashtest::HybridlogChildArgs),
    /// Recover a log, silor, wal or cpr database, or a hybridlog store, with
    /// every core and report the time, the bytes read and the throughput.
    Recover(recover::RecoverArgs),
    /// Print any epochdb file in human-readable form, or summarize every
    /// file of a directory; exits non-zero if one is corrupt.
    Inspect(inspect::InspectArgs),
    /// Serve the database over the Redis protocol (RESP2): redis-cli,
    /// redis-benchmark and Redis client libraries work unchanged.
    Serve(Box<serve::ServeArgs>),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(command) => bench::run(*command),
        Command::Crashtest(args) => crashtest::run(args),
        Command::CrashtestChild(args) => crashtest::child(args),
        Command::CrashtestHybridlogChild(args) => crashtest::hybridlog_child(args),
        Command::Recover(args) => recover::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Serve(args) => serve::run(*args),
    };
    if let Err(error) = result {
        eprintln!("epochdb: error: {error}");
        std::process::exit(1);
    }
}
