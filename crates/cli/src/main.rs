//! `epochdb`: benchmarks that reproduce the papers' experiments (and, as
//! the durability modes land, crash tests, recovery, inspection and the
//! server). See `epochdb --help`.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod crashtest;

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
    Bench(bench::BenchCommand),
    /// Kill a child running a write-heavy workload at random moments,
    /// recover, and check that nothing acknowledged was lost.
    Crashtest(crashtest::CrashtestArgs),
    /// The child process of `crashtest` (internal).
    #[command(hide = true)]
    CrashtestChild(crashtest::ChildArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(command) => bench::run(command),
        Command::Crashtest(args) => crashtest::run(args),
        Command::CrashtestChild(args) => crashtest::child(args),
    };
    if let Err(error) = result {
        eprintln!("epochdb: error: {error}");
        std::process::exit(1);
    }
}
