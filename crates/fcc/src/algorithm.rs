//! The algorithm catalogue and the enum dispatch behind [`crate::Fcc`].

use crate::algo::{
    copy_on_update as cou, naive_snapshot as ns, pingpong_interleaved as ipp,
    pingpong_naive as npp, zigzag_naive as nzz, zigzag_packed as bazz,
};
use crate::error::Error;
use crate::memory::HugePages;
use crate::scheme::{ImageWriter, MutatorScheme};
use std::fmt;
use std::str::FromStr;

pub use crate::algo::pingpong::PingPongWriter;

/// A checkpointing algorithm of the paper, in the layouts of its §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Naive-Snapshot (NS, §2.3): bulk copy at each checkpoint start.
    NaiveSnapshot,
    /// Copy-on-Update, bit-array packed (BACOU, §2.3, §4.1): copies a block
    /// on its first update in a period, under a per-block lock.
    CopyOnUpdate,
    /// Wait-Free Zigzag, naive layout (NZZ, §3.2, §4.2).
    ZigzagNaive,
    /// Wait-Free Zigzag, bit-array packed layout (BAZZ, §3.2, §4.2).
    ZigzagPacked,
    /// Wait-Free Ping-Pong, naive layout (NPP, §3.3, §4.3).
    PingPongNaive(PingPongWriter),
    /// Wait-Free Ping-Pong, interleaved layout (IPP, §3.3, §4.3).
    PingPongInterleaved(PingPongWriter),
}

impl Algorithm {
    /// Every algorithm and variant.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::NaiveSnapshot,
        Algorithm::CopyOnUpdate,
        Algorithm::ZigzagNaive,
        Algorithm::ZigzagPacked,
        Algorithm::PingPongNaive(PingPongWriter::Copy),
        Algorithm::PingPongNaive(PingPongWriter::Merge),
        Algorithm::PingPongInterleaved(PingPongWriter::Copy),
        Algorithm::PingPongInterleaved(PingPongWriter::Merge),
    ];

    /// Short name, as in the paper's figures: `ns`, `bacou`, `nzz`, `bazz`,
    /// `npp-copy`, `npp-merge`, `ipp-copy`, `ipp-merge`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::NaiveSnapshot => "ns",
            Algorithm::CopyOnUpdate => "bacou",
            Algorithm::ZigzagNaive => "nzz",
            Algorithm::ZigzagPacked => "bazz",
            Algorithm::PingPongNaive(PingPongWriter::Copy) => "npp-copy",
            Algorithm::PingPongNaive(PingPongWriter::Merge) => "npp-merge",
            Algorithm::PingPongInterleaved(PingPongWriter::Copy) => "ipp-copy",
            Algorithm::PingPongInterleaved(PingPongWriter::Merge) => "ipp-merge",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;

    /// Parses [`Algorithm::name`]; also accepts the family names `cou`,
    /// `zigzag` (BAZZ), `pingpong` and `ipp` (IPP-Copy), and `npp` (NPP-Copy).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let found = match lower.as_str() {
            "cou" => Some(Algorithm::CopyOnUpdate),
            "zigzag" => Some(Algorithm::ZigzagPacked),
            "pingpong" | "ipp" => Some(Algorithm::PingPongInterleaved(PingPongWriter::Copy)),
            "npp" => Some(Algorithm::PingPongNaive(PingPongWriter::Copy)),
            other => Algorithm::ALL.into_iter().find(|a| a.name() == other),
        };
        found.ok_or_else(|| format!("unknown algorithm {s:?}"))
    }
}

/// How checkpointing runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The fewest points of consistency between checkpoint starts. A
    /// checkpoint starts at the first point of consistency at which this
    /// many have passed *and* the writer has finished the previous one
    /// (§2.2); 1 checkpoints as often as the writer allows.
    pub checkpoint_period_ticks: u64,
    /// Copy-on-Update's block size in words (ignored by the others). The
    /// default, 4, puts a block and its shadow in one 64-byte line (§4.1).
    pub cou_block_words: usize,
    /// Whether the algorithm's arrays ask for transparent huge pages (§5.6).
    pub huge_pages: HugePages,
    /// Overlap each tick's log sync with the next tick (§5.5: "when the
    /// Logger is writing the actions of one batch of transactions, the
    /// Mutator is processing the next batch"): `point_of_consistency`
    /// hands its tick to the logger and returns, releasing the previous
    /// tick once that one's sync is done. Off: it waits for its own tick.
    pub overlap_log_sync: bool,
}

impl Config {
    /// `algorithm` with a checkpoint at every point of consistency the
    /// writer allows and default block size.
    pub fn new(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            checkpoint_period_ticks: 1,
            cou_block_words: 4,
            huge_pages: HugePages::Default,
            overlap_log_sync: false,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.checkpoint_period_ticks == 0 {
            return Err(Error::Config("checkpoint_period_ticks must be at least 1"));
        }
        if !(1..=cou::BLOCK_WORDS_MAX).contains(&self.cou_block_words) {
            return Err(Error::Config("cou_block_words must be in 1..=65536"));
        }
        Ok(())
    }
}

/// The mutator half of any algorithm (enum dispatch: one predictable branch
/// per access instead of a virtual call).
pub(crate) enum AnyMutator {
    Ns(ns::NsMutator),
    Cou(cou::CouMutator),
    Nzz(nzz::NzzMutator),
    Bazz(bazz::BazzMutator),
    Npp(npp::NppMutator),
    Ipp(ipp::IppMutator),
}

macro_rules! dispatch {
    ($self:expr, $m:ident => $body:expr) => {
        match $self {
            AnyMutator::Ns($m) => $body,
            AnyMutator::Cou($m) => $body,
            AnyMutator::Nzz($m) => $body,
            AnyMutator::Bazz($m) => $body,
            AnyMutator::Npp($m) => $body,
            AnyMutator::Ipp($m) => $body,
        }
    };
}

impl MutatorScheme for AnyMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        dispatch!(self, m => m.handle_read(index))
    }
    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        dispatch!(self, m => m.handle_write(index, value))
    }
    fn prepare_for_next_checkpoint(&mut self) {
        dispatch!(self, m => m.prepare_for_next_checkpoint())
    }
    fn words(&self) -> usize {
        dispatch!(self, m => m.words())
    }
}

/// Builds the mutator and writer halves of `config.algorithm` over `initial`.
pub(crate) fn build(initial: &[u64], config: &Config) -> (AnyMutator, Box<dyn ImageWriter>) {
    fn boxed<M, W: ImageWriter>(
        wrap: fn(M) -> AnyMutator,
        (m, w): (M, W),
    ) -> (AnyMutator, Box<dyn ImageWriter>) {
        (wrap(m), Box::new(w))
    }
    let huge = config.huge_pages;
    match config.algorithm {
        Algorithm::NaiveSnapshot => boxed(AnyMutator::Ns, ns::new(initial, huge)),
        Algorithm::CopyOnUpdate => boxed(
            AnyMutator::Cou,
            cou::new(initial, config.cou_block_words, huge),
        ),
        Algorithm::ZigzagNaive => boxed(AnyMutator::Nzz, nzz::new(initial, huge)),
        Algorithm::ZigzagPacked => boxed(AnyMutator::Bazz, bazz::new(initial, huge)),
        Algorithm::PingPongNaive(mode) => boxed(AnyMutator::Npp, npp::new(initial, mode, huge)),
        Algorithm::PingPongInterleaved(mode) => {
            boxed(AnyMutator::Ipp, ipp::new(initial, mode, huge))
        }
    }
}
