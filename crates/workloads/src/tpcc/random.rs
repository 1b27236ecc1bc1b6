//! TPC-C's random generators (spec §2.1.5, §2.1.6, §4.3.2): uniform
//! integers, NURand with its run-time constants, last names from syllables,
//! and random a-/n-strings.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};

/// NURand's `A` for customer last names (spec §2.1.6).
pub(crate) const A_C_LAST: u32 = 255;
/// NURand's `A` for customer ids (spec §2.1.6).
pub(crate) const A_C_ID: u32 = 1023;
/// NURand's `A` for item ids (spec §2.1.6).
pub(crate) const A_OL_I_ID: u32 = 8191;

/// The constants `C` of NURand, chosen once per run (spec §2.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NuRandC {
    /// `C` for C_LAST while loading.
    pub(crate) c_last_load: u32,
    /// `C` for C_LAST while running; differs from the load's by a delta in
    /// 65..=119 other than 96 and 112 (spec §2.1.6.1).
    pub(crate) c_last_run: u32,
    /// `C` for C_ID.
    pub(crate) c_id: u32,
    /// `C` for OL_I_ID.
    pub(crate) ol_i_id: u32,
}

impl NuRandC {
    /// Draws the constants from `rng`.
    pub(crate) fn new(rng: &mut SmallRng) -> Self {
        let c_last_load = rng.gen_range(0..=A_C_LAST);
        let c_last_run = loop {
            let candidate = rng.gen_range(0..=A_C_LAST);
            let delta = candidate.abs_diff(c_last_load);
            if (65..=119).contains(&delta) && delta != 96 && delta != 112 {
                break candidate;
            }
        };
        Self {
            c_last_load,
            c_last_run,
            c_id: rng.gen_range(0..=A_C_ID),
            ol_i_id: rng.gen_range(0..=A_OL_I_ID),
        }
    }
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y − x + 1)) + x
/// (spec §2.1.6).
#[inline]
pub(crate) fn nurand(rng: &mut SmallRng, a: u32, c: u32, x: u32, y: u32) -> u32 {
    let r = rng.gen_range(0..=a) | rng.gen_range(x..=y);
    (r + c) % (y - x + 1) + x
}

const SYLLABLES: [&[u8]; 10] = [
    b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
];

/// Longest C_LAST: three five-letter syllables (within the spec's 16).
pub(crate) const LAST_NAME_MAX: usize = 16;

/// Writes the last name for `number` (0..=999) into `out`, zero-padded;
/// returns its length (spec §4.3.2.3).
pub(crate) fn last_name(number: u32, out: &mut [u8; LAST_NAME_MAX]) -> usize {
    *out = [0; LAST_NAME_MAX];
    let mut len = 0;
    for digit in [number / 100 % 10, number / 10 % 10, number % 10] {
        let syllable = SYLLABLES[digit as usize];
        out[len..len + syllable.len()].copy_from_slice(syllable);
        len += syllable.len();
    }
    len
}

const ALPHANUMERIC: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Replaces `out` with a random a-string of length `lo..=hi` (spec §4.3.2.2).
pub(crate) fn a_string(rng: &mut SmallRng, out: &mut Vec<u8>, lo: usize, hi: usize) {
    let len = rng.gen_range(lo..=hi);
    out.clear();
    out.resize(len, 0);
    fill_alphanumeric(rng, out);
}

/// Fills `out` with random alphanumeric characters.
pub(crate) fn fill_alphanumeric(rng: &mut SmallRng, out: &mut [u8]) {
    for chunk in out.chunks_mut(8) {
        let bits = rng.next_u64().to_le_bytes();
        for (byte, random) in chunk.iter_mut().zip(bits) {
            // Multiply-shift maps a byte onto 0..62 (a slight bias is fine).
            *byte = ALPHANUMERIC[(usize::from(random) * ALPHANUMERIC.len()) >> 8];
        }
    }
}

/// Replaces `out` with a random n-string (digits) of length `lo..=hi`.
pub(crate) fn n_string(rng: &mut SmallRng, out: &mut Vec<u8>, lo: usize, hi: usize) {
    let len = rng.gen_range(lo..=hi);
    out.clear();
    out.extend((0..len).map(|_| b'0' + rng.gen_range(0..10u8)));
}

/// Replaces `out` with I_DATA or S_DATA: an a-string of 26..=50 characters,
/// 10% of them holding "ORIGINAL" at a random position (spec §4.3.3.1).
pub(crate) fn data_string(rng: &mut SmallRng, out: &mut Vec<u8>) {
    a_string(rng, out, 26, 50);
    if rng.gen_range(0..10) == 0 {
        let at = rng.gen_range(0..=out.len() - ORIGINAL.len());
        out[at..at + ORIGINAL.len()].copy_from_slice(ORIGINAL);
    }
}

/// The marker of "original" items and stock (spec §2.4.2.2).
pub(crate) const ORIGINAL: &[u8] = b"ORIGINAL";

/// Whether `data` contains "ORIGINAL".
#[inline]
pub(crate) fn is_original(data: &[u8]) -> bool {
    data.windows(ORIGINAL.len()).any(|w| w == ORIGINAL)
}

/// A zip code: four random digits and "11111" (spec §4.3.2.7).
pub(crate) fn zip(rng: &mut SmallRng, out: &mut Vec<u8>) {
    n_string(rng, out, 4, 4);
    out.extend_from_slice(b"11111");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn last_names_follow_the_syllable_table() {
        let mut out = [0; LAST_NAME_MAX];
        let len = last_name(371, &mut out);
        assert_eq!(&out[..len], b"PRICALLYOUGHT");
        let len = last_name(0, &mut out);
        assert_eq!(&out[..len], b"BARBARBAR");
        assert!(out[len..].iter().all(|&b| b == 0));
    }

    #[test]
    fn nurand_stays_in_range_and_constants_are_valid() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..100 {
            let c = NuRandC::new(&mut rng);
            let delta = c.c_last_run.abs_diff(c.c_last_load);
            assert!((65..=119).contains(&delta) && delta != 96 && delta != 112);
        }
        for _ in 0..10_000 {
            let v = nurand(&mut rng, A_C_ID, 100, 1, 3000);
            assert!((1..=3000).contains(&v));
        }
    }

    #[test]
    fn data_strings_are_sometimes_original() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut out = Vec::new();
        let originals = (0..1000)
            .filter(|_| {
                data_string(&mut rng, &mut out);
                assert!((26..=50).contains(&out.len()));
                is_original(&out)
            })
            .count();
        assert!((50..200).contains(&originals), "{originals}");
    }
}
