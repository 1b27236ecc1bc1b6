//! Key choosers: uniform, Zipfian (Gray et al., as YCSB's
//! `ZipfianGenerator`), scrambled Zipfian and "latest".

use rand::Rng;

/// A Zipfian distribution over `[0, n)` with skew `theta` (0 < θ, θ ≠ 1);
/// item 0 is the most popular. Setup is O(n) (the zeta constant).
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
    half_pow_theta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipf {
    /// A Zipfian over `[0, n)`.
    pub fn new(n: u64, theta: f64) -> Self {
        assert!(n >= 1, "Zipf needs at least one item");
        assert!(
            theta > 0.0 && (theta - 1.0).abs() > 1e-9,
            "theta must be positive and not 1"
        );
        let zeta_n = zeta(n, theta);
        let zeta_2 = zeta(2.min(n), theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Self {
            n,
            theta,
            alpha,
            zeta_n,
            eta,
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// Number of items.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Draws a rank in `[0, n)`.
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.n - 1);
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }

    /// The skew parameter.
    pub fn theta(&self) -> f64 {
        self.theta
    }
}

/// FNV-1a of a 64-bit value, YCSB's scrambler for hot keys.
#[inline]
pub fn fnv64(value: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in value.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// How a workload picks keys.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Every key equally likely.
    Uniform {
        /// Number of keys.
        n: u64,
    },
    /// Zipfian ranks scattered over the key space (YCSB's default).
    ScrambledZipf(Zipf),
    /// Zipfian over recency: the newest keys are the most popular (YCSB D).
    Latest(Zipf),
}

impl KeyChooser {
    /// Picks a key in `[0, n)`; `newest` is the highest key inserted so far
    /// (used by `Latest`).
    #[inline]
    pub fn next(&self, rng: &mut impl Rng, newest: u64) -> u64 {
        match self {
            KeyChooser::Uniform { n } => rng.gen_range(0..*n),
            KeyChooser::ScrambledZipf(z) => fnv64(z.sample(rng)) % z.n(),
            KeyChooser::Latest(z) => newest.saturating_sub(z.sample(rng) % (newest + 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > counts[10] && counts[10] > counts[500]);
        assert!(counts[0] > 10_000, "rank 0 should get >10%: {}", counts[0]);
    }

    #[test]
    fn low_theta_is_nearly_uniform() {
        let z = Zipf::new(100, 0.1);
        let mut rng = SmallRng::seed_from_u64(2);
        let mut counts = vec![0u32; 100];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*max < 4 * *min, "θ=0.1 should be mild: {min}..{max}");
    }
}
