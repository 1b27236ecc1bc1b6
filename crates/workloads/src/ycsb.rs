//! YCSB in the variants the papers use: SiloR's (70% get / 30% put,
//! 100-byte values, uniform, one key per transaction; silor-osdi14 §6.2),
//! CPR's (8-byte keys and values, 1- or 10-key transactions, Zipf θ = 0.1,
//! 100:0 or 50:50; cpr-sigmod19 §7) and the standard core workloads A–F.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use epochdb_engine::{Database, TableId, TxError, Worker};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::workload::{share, Client, Outcome, Workload};
use crate::zipf::{KeyChooser, Zipf};

/// Keys inserted per loading transaction.
const LOAD_BATCH: u64 = 256;

/// Which YCSB to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// SiloR's: 70/30 get/put, uniform.
    Silor,
    /// CPR's: Zipf θ = 0.1, `ops_per_txn` keys, `read_percent` reads.
    Cpr,
    /// Core A: 50 read / 50 update, Zipf 0.99.
    A,
    /// Core B: 95 read / 5 update, Zipf 0.99.
    B,
    /// Core C: 100 read, Zipf 0.99.
    C,
    /// Core D: 95 read / 5 insert, latest.
    D,
    /// Core E: 95 short scans / 5 insert, Zipf 0.99.
    E,
    /// Core F: 50 read / 50 read-modify-write, Zipf 0.99.
    F,
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Ok(match text.to_ascii_lowercase().as_str() {
            "silor" => Variant::Silor,
            "cpr" => Variant::Cpr,
            "a" => Variant::A,
            "b" => Variant::B,
            "c" => Variant::C,
            "d" => Variant::D,
            "e" => Variant::E,
            "f" => Variant::F,
            _ => {
                return Err(format!(
                    "unknown YCSB variant '{text}' (expected silor, cpr, a, b, c, d, e or f)"
                ))
            }
        })
    }
}

/// Operation mix in percent; sums to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// Point reads.
    pub read: u8,
    /// Blind updates (puts).
    pub update: u8,
    /// Inserts of new keys.
    pub insert: u8,
    /// Short forward scans.
    pub scan: u8,
    /// Read-modify-writes.
    pub rmw: u8,
}

/// A YCSB configuration.
#[derive(Clone, Debug)]
pub struct YcsbConfig {
    /// The variant (sets the defaults below).
    pub variant: Variant,
    /// Keys loaded.
    pub keys: u64,
    /// Value size in bytes.
    pub value_size: usize,
    /// Operations per transaction.
    pub ops_per_txn: usize,
    /// The mix.
    pub mix: Mix,
    /// Zipf skew, or `None` for uniform.
    pub theta: Option<f64>,
    /// Longest scan (E), scans are uniform in `1..=max_scan`.
    pub max_scan: usize,
}

impl YcsbConfig {
    /// The variant's standard settings for `keys` keys.
    pub fn new(variant: Variant, keys: u64) -> Self {
        let mix = |read, update, insert, scan, rmw| Mix {
            read,
            update,
            insert,
            scan,
            rmw,
        };
        let (mix, theta, value_size) = match variant {
            Variant::Silor => (mix(70, 30, 0, 0, 0), None, 100),
            Variant::Cpr => (mix(50, 50, 0, 0, 0), Some(0.1), 8),
            Variant::A => (mix(50, 50, 0, 0, 0), Some(0.99), 100),
            Variant::B => (mix(95, 5, 0, 0, 0), Some(0.99), 100),
            Variant::C => (mix(100, 0, 0, 0, 0), Some(0.99), 100),
            Variant::D => (mix(95, 0, 5, 0, 0), Some(0.99), 100),
            Variant::E => (mix(0, 0, 5, 95, 0), Some(0.99), 100),
            Variant::F => (mix(50, 0, 0, 0, 50), Some(0.99), 100),
        };
        Self {
            variant,
            keys,
            value_size,
            ops_per_txn: 1,
            mix,
            theta,
            max_scan: 100,
        }
    }

    /// Sets the read percentage of a read/update mix (CPR's 100:0, 50:50).
    pub fn with_read_percent(mut self, read: u8) -> Self {
        assert!(read <= 100);
        self.mix = Mix {
            read,
            update: 100 - read,
            insert: 0,
            scan: 0,
            rmw: 0,
        };
        self
    }
}

/// The YCSB workload.
pub struct Ycsb {
    config: YcsbConfig,
    table: Option<TableId>,
    chooser: Arc<KeyChooser>,
    /// Keys inserted so far (D and E insert beyond the loaded range).
    inserted: Arc<AtomicU64>,
}

/// The key for key number `n`: 8 bytes, big-endian, so key order is number
/// order (as Silo's YCSB).
#[inline]
pub fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

impl Ycsb {
    /// A workload with `config`.
    pub fn new(config: YcsbConfig) -> Self {
        assert!(config.keys > 0, "YCSB needs at least one key");
        let chooser = match (config.variant, config.theta) {
            (_, None) => KeyChooser::Uniform { n: config.keys },
            (Variant::D, Some(theta)) => KeyChooser::Latest(Zipf::new(config.keys, theta)),
            (_, Some(theta)) => KeyChooser::ScrambledZipf(Zipf::new(config.keys, theta)),
        };
        let inserted = Arc::new(AtomicU64::new(config.keys));
        Self {
            config,
            table: None,
            chooser: Arc::new(chooser),
            inserted,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &YcsbConfig {
        &self.config
    }
}

impl Workload for Ycsb {
    fn name(&self) -> String {
        format!("ycsb-{:?}", self.config.variant).to_lowercase()
    }

    fn settings(&self) -> Vec<(String, String)> {
        let c = &self.config;
        vec![
            ("variant".into(), format!("{:?}", c.variant).to_lowercase()),
            ("keys".into(), c.keys.to_string()),
            ("value_size".into(), c.value_size.to_string()),
            ("ops_per_txn".into(), c.ops_per_txn.to_string()),
            ("mix".into(), format!("{:?}", c.mix)),
            (
                "distribution".into(),
                c.theta
                    .map_or("uniform".into(), |t| format!("zipf theta={t}")),
            ),
        ]
    }

    fn load(
        &mut self,
        db: &Database,
        threads: usize,
        progress: &(dyn Fn(f64) + Sync),
    ) -> Result<(), TxError> {
        let table = db.create_table("usertable")?;
        self.table = Some(table);
        let keys = self.config.keys;
        let value_size = self.config.value_size;
        let done = AtomicU64::new(0);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let done = &done;
                    scope.spawn(move || -> Result<(), TxError> {
                        let mut worker = db.worker().expect("register loader");
                        let mut rng = SmallRng::seed_from_u64(thread as u64);
                        let mut value = vec![0u8; value_size];
                        let range = share(keys, threads, thread);
                        let mut next = range.start;
                        while next < range.end {
                            let end = (next + LOAD_BATCH).min(range.end);
                            let result = worker.run(|tx| {
                                for n in next..end {
                                    rng.fill_bytes(&mut value);
                                    tx.put(table, &key(n), &value)?;
                                }
                                Ok(())
                            })?;
                            drop(result);
                            let total = done.fetch_add(end - next, Ordering::Relaxed) + end - next;
                            if thread == 0 {
                                progress(total as f64 / keys as f64);
                            }
                            next = end;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("loader panicked"))
        })?;
        progress(1.0);
        Ok(())
    }

    fn client(&self, thread: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        let table = self.table.expect("YCSB client before load");
        let mut rng = SmallRng::seed_from_u64(seed ^ (thread as u64).wrapping_mul(0x9e37_79b9));
        let mut value = vec![0u8; self.config.value_size];
        rng.fill_bytes(&mut value);
        Box::new(YcsbClient {
            config: self.config.clone(),
            table,
            chooser: self.chooser.clone(),
            inserted: self.inserted.clone(),
            rng,
            value,
            ops: Vec::with_capacity(self.config.ops_per_txn),
        })
    }
}

#[derive(Clone, Copy)]
enum Op {
    Read(u64),
    Update(u64),
    Insert(u64),
    Scan(u64, usize),
    Rmw(u64),
}

struct YcsbClient {
    config: YcsbConfig,
    table: TableId,
    chooser: Arc<KeyChooser>,
    inserted: Arc<AtomicU64>,
    rng: SmallRng,
    value: Vec<u8>,
    ops: Vec<Op>,
}

impl YcsbClient {
    fn next_op(&mut self) -> Op {
        let roll = self.rng.gen_range(0..100u8);
        let mix = self.config.mix;
        let newest = self.inserted.load(Ordering::Relaxed).saturating_sub(1);
        let pick = |rng: &mut SmallRng| self.chooser.next(rng, newest);
        if roll < mix.read {
            Op::Read(pick(&mut self.rng))
        } else if roll < mix.read + mix.update {
            Op::Update(pick(&mut self.rng))
        } else if roll < mix.read + mix.update + mix.insert {
            Op::Insert(self.inserted.fetch_add(1, Ordering::Relaxed))
        } else if roll < mix.read + mix.update + mix.insert + mix.scan {
            let len = self.rng.gen_range(1..=self.config.max_scan);
            Op::Scan(pick(&mut self.rng), len)
        } else {
            Op::Rmw(pick(&mut self.rng))
        }
    }
}

impl Client for YcsbClient {
    fn step(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        self.ops.clear();
        for _ in 0..self.config.ops_per_txn {
            let op = self.next_op();
            self.ops.push(op);
        }
        // Vary the value so every put really writes something new.
        let stamp = self.rng.next_u64().to_le_bytes();
        let len = stamp.len().min(self.value.len());
        self.value[..len].copy_from_slice(&stamp[..len]);
        let (table, ops, value) = (self.table, &self.ops, &self.value);
        let (_, ticket) = worker.run(|tx| {
            let mut checksum = 0u64;
            for &op in ops {
                match op {
                    Op::Read(n) => {
                        if let Some(v) = tx.get(table, &key(n))? {
                            checksum = checksum.wrapping_add(u64::from(v[0]));
                        }
                    }
                    Op::Update(n) => tx.put(table, &key(n), value)?,
                    Op::Insert(n) => {
                        tx.insert(table, &key(n), value)?;
                    }
                    Op::Scan(n, len) => {
                        tx.scan(
                            table,
                            Bound::Included(&key(n)),
                            Bound::Unbounded,
                            len,
                            |_, v| {
                                checksum = checksum.wrapping_add(u64::from(v[0]));
                                true
                            },
                        )?;
                    }
                    Op::Rmw(n) => {
                        let mut new = tx
                            .get(table, &key(n))?
                            .map_or_else(|| value.clone(), <[u8]>::to_vec);
                        if let Some(byte) = new.first_mut() {
                            *byte = byte.wrapping_add(1);
                        }
                        tx.put(table, &key(n), &new)?;
                    }
                }
            }
            Ok(checksum)
        })?;
        Ok(Outcome::Committed(ticket))
    }
}
