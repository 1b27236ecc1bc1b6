//! The initial population (spec §4.3.3.1), loaded by several threads that
//! take jobs of a few hundred rows each, one transaction per job.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use epochdb_engine::{Abort, Database, Transaction, TxError};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::random::{
    a_string, data_string, fill_alphanumeric, last_name, n_string, nurand, zip, A_C_LAST,
    LAST_NAME_MAX,
};
use super::rows::{
    Address, Customer, District, History, Item, Order, OrderLine, Stock, Warehouse, DIST_INFO_LEN,
    STOCK_DISTS_LEN,
};
use super::schema::{
    customer_key, customer_name_key, district_key, history_key, item_key, order_customer_key,
    order_key, order_line_key, stock_key, warehouse_key, DISTRICTS,
};
use super::Shared;

/// Rows of ITEM or STOCK per loading transaction.
const ITEMS_PER_JOB: u32 = 500;
/// Customers (each with its index entry and history row) per transaction.
const CUSTOMERS_PER_JOB: u32 = 100;
/// Orders (each with ~10 lines) per transaction.
const ORDERS_PER_JOB: u32 = 25;

/// W_YTD at load: 300,000.00 (spec §4.3.3.1).
pub(crate) const W_YTD_INITIAL: i64 = 30_000_000;
/// D_YTD at load: 30,000.00.
pub(crate) const D_YTD_INITIAL: i64 = 3_000_000;

/// One loading transaction's worth of rows.
#[derive(Clone, Copy, Debug)]
enum Job {
    /// ITEM rows `lo..hi`.
    Items { lo: u32, hi: u32 },
    /// The WAREHOUSE row and its ten DISTRICT rows.
    Warehouse { w: u16 },
    /// STOCK rows `lo..hi` of warehouse `w`.
    Stock { w: u16, lo: u32, hi: u32 },
    /// CUSTOMER rows `lo..hi` of a district, their customer-by-name entries
    /// and one HISTORY row each.
    Customers { w: u16, d: u8, lo: u32, hi: u32 },
    /// ORDER rows `lo..hi` of a district, their order-by-customer entries,
    /// ORDER-LINE rows and, for undelivered ones, NEW-ORDER rows.
    Orders { w: u16, d: u8, lo: u32, hi: u32 },
}

impl Job {
    /// Rough rows written, for progress.
    fn weight(self) -> u64 {
        match self {
            Job::Items { lo, hi } | Job::Stock { lo, hi, .. } => u64::from(hi - lo),
            Job::Warehouse { .. } => 1 + u64::from(DISTRICTS),
            Job::Customers { lo, hi, .. } => 3 * u64::from(hi - lo),
            Job::Orders { lo, hi, .. } => 12 * u64::from(hi - lo),
        }
    }
}

fn chunks(lo: u32, hi: u32, size: u32) -> impl Iterator<Item = (u32, u32)> {
    (lo..hi)
        .step_by(size as usize)
        .map(move |start| (start, (start + size).min(hi)))
}

fn jobs(shared: &Shared) -> Vec<Job> {
    let config = &shared.config;
    let items = config.items;
    let customers = config.customers_per_district;
    let mut jobs: Vec<Job> = chunks(1, items + 1, ITEMS_PER_JOB)
        .map(|(lo, hi)| Job::Items { lo, hi })
        .collect();
    for w in 1..=config.warehouses as u16 {
        jobs.push(Job::Warehouse { w });
        jobs.extend(chunks(1, items + 1, ITEMS_PER_JOB).map(|(lo, hi)| Job::Stock { w, lo, hi }));
        for d in 1..=DISTRICTS {
            jobs.extend(
                chunks(1, customers + 1, CUSTOMERS_PER_JOB).map(|(lo, hi)| Job::Customers {
                    w,
                    d,
                    lo,
                    hi,
                }),
            );
            jobs.extend(
                chunks(1, customers + 1, ORDERS_PER_JOB).map(|(lo, hi)| Job::Orders {
                    w,
                    d,
                    lo,
                    hi,
                }),
            );
        }
    }
    jobs
}

/// Loads every table with `threads` threads.
pub(crate) fn load(
    db: &Database,
    shared: &Shared,
    threads: usize,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<(), TxError> {
    let jobs = jobs(shared);
    let total: u64 = jobs.iter().map(|job| job.weight()).sum();
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let now = super::txns::now_ms();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (jobs, next, done) = (&jobs, &next, &done);
                scope.spawn(move || -> Result<(), TxError> {
                    let mut worker = db.worker().expect("register loader");
                    let mut scratch = Scratch::default();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&job) = jobs.get(index) else {
                            return Ok(());
                        };
                        let seed = shared.config.seed
                            ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                        let mut rng = SmallRng::seed_from_u64(seed);
                        let result = worker
                            .run(|tx| load_job(tx, shared, job, now, &mut rng, &mut scratch))?;
                        // Loading does not wait for durability (as YCSB's).
                        drop(result);
                        let finished =
                            done.fetch_add(job.weight(), Ordering::Relaxed) + job.weight();
                        progress(finished as f64 / total as f64);
                    }
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

/// Reusable buffers for the strings of one row.
#[derive(Default)]
struct Scratch {
    row: Vec<u8>,
    name: Vec<u8>,
    address: AddressStrings,
    first: Vec<u8>,
    phone: Vec<u8>,
    data: Vec<u8>,
    dists: Vec<u8>,
    permutation: Vec<u32>,
}

/// Reusable buffers for an address.
#[derive(Default)]
struct AddressStrings {
    street_1: Vec<u8>,
    street_2: Vec<u8>,
    city: Vec<u8>,
    state: Vec<u8>,
    zip: Vec<u8>,
}

impl AddressStrings {
    /// Fills the address strings (spec §4.3.2: street and city 10..20,
    /// state 2 letters, zip).
    fn fill(&mut self, rng: &mut SmallRng) {
        a_string(rng, &mut self.street_1, 10, 20);
        a_string(rng, &mut self.street_2, 10, 20);
        a_string(rng, &mut self.city, 10, 20);
        a_string(rng, &mut self.state, 2, 2);
        zip(rng, &mut self.zip);
    }

    fn view(&self) -> Address<'_> {
        Address {
            street_1: &self.street_1,
            street_2: &self.street_2,
            city: &self.city,
            state: &self.state,
            zip: &self.zip,
        }
    }
}

fn load_job(
    tx: &mut Transaction<'_>,
    shared: &Shared,
    job: Job,
    now: u64,
    rng: &mut SmallRng,
    s: &mut Scratch,
) -> Result<(), Abort> {
    let t = shared.tables;
    let config = &shared.config;
    match job {
        Job::Items { lo, hi } => {
            for i in lo..hi {
                a_string(rng, &mut s.name, 14, 24);
                data_string(rng, &mut s.data);
                s.row.clear();
                Item {
                    im_id: rng.gen_range(1..=10_000),
                    price: rng.gen_range(100..=10_000),
                    name: &s.name,
                    data: &s.data,
                }
                .encode(&mut s.row);
                tx.put(t.item, &item_key(i), &s.row)?;
            }
        }
        Job::Warehouse { w } => {
            a_string(rng, &mut s.name, 6, 10);
            s.address.fill(rng);
            s.row.clear();
            Warehouse {
                ytd: W_YTD_INITIAL,
                tax: rng.gen_range(0..=2_000),
                name: &s.name,
                address: s.address.view(),
            }
            .encode(&mut s.row);
            tx.put(t.warehouse, &warehouse_key(w), &s.row)?;
            for d in 1..=DISTRICTS {
                a_string(rng, &mut s.name, 6, 10);
                s.address.fill(rng);
                s.row.clear();
                District {
                    ytd: D_YTD_INITIAL,
                    tax: rng.gen_range(0..=2_000),
                    next_o_id: config.customers_per_district + 1,
                    name: &s.name,
                    address: s.address.view(),
                }
                .encode(&mut s.row);
                tx.put(t.district, &district_key(w, d), &s.row)?;
            }
        }
        Job::Stock { w, lo, hi } => {
            for i in lo..hi {
                s.dists.resize(STOCK_DISTS_LEN, 0);
                fill_alphanumeric(rng, &mut s.dists);
                data_string(rng, &mut s.data);
                s.row.clear();
                Stock {
                    quantity: rng.gen_range(10..=100),
                    ytd: 0,
                    order_cnt: 0,
                    remote_cnt: 0,
                    dists: &s.dists,
                    data: &s.data,
                }
                .encode(&mut s.row);
                tx.put(t.stock, &stock_key(w, i), &s.row)?;
            }
        }
        Job::Customers { w, d, lo, hi } => {
            for c in lo..hi {
                // C_LAST: the first 1,000 customers take each name once,
                // the rest NURand(255, 0, 999) (spec §4.3.3.1).
                let number = if c <= 1_000 {
                    c - 1
                } else {
                    nurand(rng, A_C_LAST, shared.c.c_last_load, 0, 999)
                };
                let mut last = [0; LAST_NAME_MAX];
                let last_len = last_name(number, &mut last);
                a_string(rng, &mut s.first, 8, 16);
                s.address.fill(rng);
                n_string(rng, &mut s.phone, 16, 16);
                a_string(rng, &mut s.data, 300, 500);
                let credit = if rng.gen_range(0..10) == 0 {
                    *b"BC"
                } else {
                    *b"GC"
                };
                s.row.clear();
                Customer {
                    balance: -1_000,
                    ytd_payment: 1_000,
                    payment_cnt: 1,
                    delivery_cnt: 0,
                    credit_lim: 5_000_000,
                    discount: rng.gen_range(0..=5_000),
                    credit,
                    since: now,
                    first: &s.first,
                    middle: *b"OE",
                    last: &last[..last_len],
                    address: s.address.view(),
                    phone: &s.phone,
                    data: &s.data,
                }
                .encode(&mut s.row);
                tx.put(t.customer, &customer_key(w, d, c), &s.row)?;
                let index_key = customer_name_key(w, d, &last[..last_len], &s.first, c);
                tx.put(t.customer_name, &index_key, &[])?;

                a_string(rng, &mut s.data, 12, 24);
                s.row.clear();
                History {
                    c_id: c,
                    c_d_id: d,
                    c_w_id: w,
                    d_id: d,
                    w_id: w,
                    date: now,
                    amount: 1_000,
                    data: &s.data,
                }
                .encode(&mut s.row);
                let sequence = (u64::from(w) << 40) | (u64::from(d) << 32) | u64::from(c);
                tx.put(t.history, &history_key(0, sequence), &s.row)?;
            }
        }
        Job::Orders { w, d, lo, hi } => {
            // O_C_ID is a random permutation of the customers, the same for
            // every job of the district (spec §4.3.3.1).
            let customers = config.customers_per_district;
            s.permutation.clear();
            s.permutation.extend(1..=customers);
            let seed = config.seed
                ^ (u64::from(w) << 8 | u64::from(d)).wrapping_mul(0xff51_afd7_ed55_8ccd);
            s.permutation.shuffle(&mut SmallRng::seed_from_u64(seed));
            let delivered_below = customers - config.new_orders_per_district() + 1;
            let mut dist_info = [0u8; DIST_INFO_LEN];
            for o in lo..hi {
                let delivered = o < delivered_below;
                let c = s.permutation[(o - 1) as usize];
                let ol_cnt: u8 = rng.gen_range(5..=15);
                s.row.clear();
                Order {
                    c_id: c,
                    entry_d: now,
                    carrier_id: if delivered { rng.gen_range(1..=10) } else { 0 },
                    ol_cnt,
                    all_local: true,
                }
                .encode(&mut s.row);
                tx.put(t.oorder, &order_key(w, d, o), &s.row)?;
                tx.put(t.order_customer, &order_customer_key(w, d, c, o), &[])?;
                if !delivered {
                    tx.put(t.new_order, &order_key(w, d, o), &[])?;
                }
                for number in 1..=ol_cnt {
                    fill_alphanumeric(rng, &mut dist_info);
                    s.row.clear();
                    OrderLine {
                        i_id: rng.gen_range(1..=config.items),
                        supply_w_id: w,
                        delivery_d: if delivered { now } else { 0 },
                        quantity: 5,
                        amount: if delivered {
                            0
                        } else {
                            rng.gen_range(1..=999_999)
                        },
                        dist_info: &dist_info,
                    }
                    .encode(&mut s.row);
                    tx.put(t.order_line, &order_line_key(w, d, o, number), &s.row)?;
                }
            }
        }
    }
    Ok(())
}
