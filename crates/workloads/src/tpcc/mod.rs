//! TPC-C (standard specification, revision 5.11), as Silo runs it
//! (silo-sosp13 §5) but following the specification where Silo cuts
//! corners: all nine tables plus the customer-by-last-name and
//! order-by-customer indexes kept in the same transactions, the five
//! transactions in the standard mix with remote warehouses, rollbacks and
//! selection by last name, and a checker for the consistency conditions.
//!
//! * `schema`: tables and keys; `rows`: the row codec;
//! * `random`: NURand, last names, random strings (spec §2.1, §4.3.2);
//! * `load`: the initial population (spec §4.3.3);
//! * `txns`: the clients and the five transactions (spec §2.4–§2.8);
//! * `check`: consistency conditions 1–4 (spec §3.3.2).

mod check;
mod load;
mod random;
mod rows;
mod schema;
mod txns;

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use epochdb_engine::{Database, PointIndexes, TxError};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::workload::{Client, Workload};

pub use check::check_consistency;

use random::NuRandC;
use schema::Tables;

/// A TPC-C configuration. [`TpccConfig::new`] gives the specification's
/// cardinalities (spec §1.2, §4.3.3.1); [`TpccConfig::small`] shrinks the
/// per-warehouse tables for fast tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpccConfig {
    /// Number of warehouses W (1..=65535).
    pub warehouses: u32,
    /// Rows of ITEM, and of STOCK per warehouse (spec: 100,000).
    pub items: u32,
    /// Customers per district, which is also the number of orders loaded
    /// per district (spec: 3,000). The newest 30% of those orders (spec:
    /// 900) are undelivered and in NEW-ORDER.
    pub customers_per_district: u32,
    /// Seeds the loader and the NURand constants `C`.
    pub seed: u64,
    /// Percent of New-Order, Payment, Order-Status, Delivery and Stock-Level
    /// transactions, in that order, summing to 100. The specification's
    /// mix (§5.2.3) is [`TpccConfig::STANDARD_MIX`]; another mix (one
    /// transaction type alone, say) is for measuring, as Silo's
    /// `--workload-mix` is.
    pub mix: [u8; 5],
}

impl TpccConfig {
    /// The specification's sizes for `warehouses` warehouses.
    pub fn new(warehouses: u32) -> Self {
        Self {
            warehouses,
            items: 100_000,
            customers_per_district: 3_000,
            seed: 0x7bcc_5eed,
            mix: Self::STANDARD_MIX,
        }
    }

    /// The mix the benchmark runs by default: 45% New-Order, 43% Payment
    /// and 4% each of Order-Status, Delivery and Stock-Level (the minimums
    /// of spec §5.2.3, with New-Order taking the rest).
    pub const STANDARD_MIX: [u8; 5] = [45, 43, 4, 4, 4];

    /// Reduced sizes for tests: 1,000 items and 300 customers (and orders)
    /// per district. Everything else (the mix, the 10 districts, the
    /// percentages) is as specified.
    pub fn small(warehouses: u32) -> Self {
        Self {
            items: 1_000,
            customers_per_district: 300,
            ..Self::new(warehouses)
        }
    }

    /// Orders per district that are loaded undelivered, in NEW-ORDER
    /// (spec: 900 of 3,000).
    pub fn new_orders_per_district(&self) -> u32 {
        self.customers_per_district * 900 / 3_000
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        if self.warehouses == 0 || self.warehouses > u32::from(u16::MAX) {
            return Err(format!(
                "warehouses must be in 1..=65535, not {}",
                self.warehouses
            ));
        }
        if self.items == 0 || self.items == u32::MAX {
            return Err(format!("items must be in 1..u32::MAX, not {}", self.items));
        }
        if self.customers_per_district == 0 || self.customers_per_district > 1_000_000 {
            return Err(format!(
                "customers_per_district must be in 1..=1000000, not {}",
                self.customers_per_district
            ));
        }
        let total: u32 = self.mix.iter().map(|&p| u32::from(p)).sum();
        if total != 100 {
            return Err(format!(
                "the mix must sum to 100 percent, not {total} ({:?})",
                self.mix
            ));
        }
        Ok(())
    }
}

/// What loading and every client share.
#[derive(Debug)]
struct Shared {
    config: TpccConfig,
    tables: Tables,
    c: NuRandC,
    /// Numbers clients' HISTORY keys apart (0 is the loader's).
    next_origin: AtomicU32,
}

/// The TPC-C workload.
#[derive(Debug)]
pub struct Tpcc {
    config: TpccConfig,
    c: NuRandC,
    shared: Option<Arc<Shared>>,
}

impl Tpcc {
    /// A workload with `config`. Panics if the configuration is invalid
    /// (see [`TpccConfig::validate`]).
    pub fn new(config: TpccConfig) -> Self {
        if let Err(why) = config.validate() {
            panic!("invalid TPC-C configuration: {why}");
        }
        let c = NuRandC::new(&mut SmallRng::seed_from_u64(config.seed));
        Self {
            config,
            c,
            shared: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TpccConfig {
        &self.config
    }
}

impl Workload for Tpcc {
    /// The tables read by key and never grown: the rest grow by every
    /// New-Order and Payment, where a hash insert per row costs more than
    /// the hash saves (measured: the standard mix ran about 20% slower with
    /// a point index on every table).
    fn point_indexes(&self) -> PointIndexes {
        PointIndexes::Only(
            ["warehouse", "district", "customer", "item", "stock"]
                .map(String::from)
                .to_vec(),
        )
    }

    fn check(&self, db: &Database) -> Result<(), String> {
        check_consistency(db, self.config.warehouses)
    }

    fn name(&self) -> String {
        "tpcc".into()
    }

    fn settings(&self) -> Vec<(String, String)> {
        let c = &self.config;
        vec![
            ("warehouses".into(), c.warehouses.to_string()),
            ("items".into(), c.items.to_string()),
            (
                "customers_per_district".into(),
                c.customers_per_district.to_string(),
            ),
            ("seed".into(), c.seed.to_string()),
            ("mix".into(), c.mix.map(|p| p.to_string()).join("/")),
        ]
    }

    fn load(
        &mut self,
        db: &Database,
        threads: usize,
        progress: &(dyn Fn(f64) + Sync),
    ) -> Result<(), TxError> {
        let shared = Shared {
            config: self.config.clone(),
            tables: Tables::create(db)?,
            c: self.c,
            next_origin: AtomicU32::new(1),
        };
        load::load(db, &shared, threads.max(1), progress)?;
        self.shared = Some(Arc::new(shared));
        Ok(())
    }

    fn client(&self, thread: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        let shared = self.shared.clone().expect("TPC-C client before load");
        Box::new(txns::TpccClient::new(shared, thread, seed))
    }
}
