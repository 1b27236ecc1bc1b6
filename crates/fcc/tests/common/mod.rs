//! Shared by the integration tests: a deterministic application whose
//! actions read and write the state through the mutator interface, a model
//! of it on a plain vector, and the seed plumbing.

#![allow(dead_code, unreachable_pub)]

use epochdb_fcc::{Algorithm, Fcc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Bytes in one encoded action.
pub const ACTION_BYTES: usize = 13;

/// The test seed: `FCC_SEED` if set, else `default`. Printed so that a
/// failure replays.
pub fn seed(test: &str, default: u64) -> u64 {
    let seed = std::env::var("FCC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("{test}: seed {seed} (rerun with FCC_SEED={seed})");
    seed
}

/// Words read and written by actions.
pub trait Words {
    fn get(&self, i: usize) -> u64;
    fn set(&mut self, i: usize, v: u64);
    fn len(&self) -> usize;
}

impl Words for [u64] {
    fn get(&self, i: usize) -> u64 {
        self[i]
    }
    fn set(&mut self, i: usize, v: u64) {
        self[i] = v;
    }
    fn len(&self) -> usize {
        <[u64]>::len(self)
    }
}

impl Words for Fcc {
    fn get(&self, i: usize) -> u64 {
        self.handle_read(i)
    }
    fn set(&mut self, i: usize, v: u64) {
        self.handle_write(i, v);
    }
    fn len(&self) -> usize {
        self.words()
    }
}

/// A random action: `count` words from `index` on (stride 97), each
/// rewritten from its old value — one logical record, many physical
/// updates, reads included.
pub fn random_action(rng: &mut SmallRng, words: usize) -> [u8; ACTION_BYTES] {
    let mut rec = [0u8; ACTION_BYTES];
    // Skewed: half the actions hit the first 64 words.
    let index = if rng.gen_bool(0.5) {
        rng.gen_range(0..64.min(words))
    } else {
        rng.gen_range(0..words)
    } as u32;
    rec[0..4].copy_from_slice(&index.to_le_bytes());
    rec[4] = rng.gen_range(1..=16);
    rec[5..13].copy_from_slice(&rng.gen::<u64>().to_le_bytes());
    rec
}

/// Applies an action (the application's logic and its replay function).
pub fn apply<W: Words + ?Sized>(state: &mut W, rec: &[u8]) {
    assert_eq!(rec.len(), ACTION_BYTES, "action record size");
    let index = u32::from_le_bytes(rec[0..4].try_into().unwrap()) as usize;
    let count = rec[4] as usize;
    let operand = u64::from_le_bytes(rec[5..13].try_into().unwrap());
    let n = state.len();
    for j in 0..count {
        let i = (index + j * 97) % n;
        let old = state.get(i);
        state.set(i, old.rotate_left(7) ^ operand.wrapping_add(j as u64));
    }
}

/// The replay function handed to `recover`.
pub fn replay(state: &mut [u64], rec: &[u8]) {
    apply(state, rec);
}

/// A deterministic initial state.
pub fn initial_state(words: usize, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    (0..words).map(|_| rng.gen()).collect()
}

/// A seed per algorithm, so each gets its own stream.
pub fn algo_seed(seed: u64, algorithm: Algorithm) -> u64 {
    let pos = Algorithm::ALL.iter().position(|a| *a == algorithm).unwrap() as u64;
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(pos)
}
